// XRC on the transport (issue 32 item 3): an initiator's requests carry the XRC opcodes and
// the XRCETH with the SRQ they are for; the target executes each for that SRQ of its domain
// (its receive queue, its CQ), and NAKs, as an invalid request, a number that is no SRQ of its
// domain and a message whose later packets name another SRQ than its first did.
#include <catch2/catch.hpp>

#include "dataplane/transport.h"
#include "transport_checks.h"
#include "transport_harness.h"

using namespace vrnic;
using namespace vrnic::testing;
using Lines = std::vector<std::string>;

namespace {

PairOptions xrc_pair() {
  PairOptions o;
  o.type = IBV_QPT_XRC_SEND;
  return o;
}

}  // namespace

TEST_CASE("transport: an XRC SEND reaches the SRQ its XRCETH names, in XRC opcodes",
          "[transport][xrc]") {
  QpPair p(xrc_pair());
  std::vector<std::pair<uint8_t, uint32_t>> seen;  // (opcode, XRCETH or 0) of each packet
  p.script = [&](const WireRecord &r, Packet &pkt) {
    const OpcodeInfo &info = pkt.info();
    const bool xrceth = info.flags & kOpXrceth;
    seen.emplace_back(r.opcode, xrceth ? pkt.ext<wire::Xrceth>(info.xrceth_off).srqn() : 0);
    return Fate::kDeliver;
  };
  fill(p.a, 0, 3000, 5);
  p.b.post_recv(11, 8192, 4096);
  p.a.post_send(send_wqe(1, p.a, 0, 3000));
  p.run();
  CHECK(p.trace() == Lines{"A SEND_FIRST 100", "A SEND_MIDDLE 101", "A SEND_LAST 102 ack_req",
                           "B ACK 102"});
  REQUIRE(seen.size() == 4);
  for (size_t i = 0; i < 3; i++) {
    CHECK(wire::op_transport(seen[i].first) == wire::kXrc);
    CHECK(seen[i].second == p.b.srq_number());  // every request packet names the SRQ
  }
  CHECK(seen[3].first == wire::make_opcode(wire::kXrc, wire::kAcknowledge));  // no XRCETH
  CHECK(one_send_completion(p.a).status == IBV_WC_SUCCESS);
  std::vector<shm::Cqe> recvs = p.b.poll_recv_cq();
  REQUIRE(recvs.size() == 1);
  CHECK(recvs[0].wr_id == 11);
  CHECK(recvs[0].status == IBV_WC_SUCCESS);
  CHECK(recvs[0].byte_len == 3000);
  CHECK(recvs[0].qp_num == p.b.qp->qpn);  // the target QP's
  CHECK(same(p.a, 0, p.b, 8192, 3000));
}

TEST_CASE("transport: XRC WRITE, READ and atomics are checked against the SRQ's PD",
          "[transport][xrc]") {
  QpPair p(xrc_pair());
  fill(p.a, 0, 2048, 6);
  fill(p.b, 4096, 2048, 7);
  p.a.post_send(write_wqe(1, p.a, 0, 2048, p.b, 16384));
  p.a.post_send(read_wqe(2, p.a, 20480, 2048, p.b, 4096));
  p.a.post_send(fetch_add_wqe(3, p.a, 30000, p.b, 40000, 5));
  p.run();
  std::vector<shm::Cqe> done = p.a.poll_send_cq();
  REQUIRE(done.size() == 3);
  for (const shm::Cqe &c : done) CHECK(c.status == IBV_WC_SUCCESS);
  CHECK(same(p.a, 0, p.b, 16384, 2048));
  CHECK(same(p.a, 20480, p.b, 4096, 2048));
  // The target's SRQ is in another PD than the region: every access is refused.
  QpPair q(xrc_pair());
  q.b.dev.srqs.get(q.b.srq_number())->pd = 99;
  q.a.post_send(write_wqe(4, q.a, 0, 64, q.b, 0));
  q.run();
  CHECK(one_send_completion(q.a).status == IBV_WC_REM_ACCESS_ERR);
}

TEST_CASE("transport: an XRC request for no SRQ of the target's domain is an invalid request",
          "[transport][xrc]") {
  QpPair p(xrc_pair());
  p.a.xrc_srqn = p.b.srq_number() + 1;  // no SRQ there
  p.a.post_send(send_wqe(1, p.a, 0, 100));
  p.run();
  CHECK(p.trace() == Lines{"A SEND_ONLY 100 ack_req", "B ACK 100 NAK_1"});
  CHECK(one_send_completion(p.a).status == IBV_WC_REM_INV_REQ_ERR);
  CHECK(p.b.qp->state() == IBV_QPS_ERR);
  // An SRQ of another domain is no better.
  QpPair q(xrc_pair());
  q.b.dev.srqs.get(q.b.srq_number())->xrcd = 2;
  q.a.post_send(send_wqe(1, q.a, 0, 100));
  q.run();
  CHECK(one_send_completion(q.a).status == IBV_WC_REM_INV_REQ_ERR);
}

TEST_CASE("transport: an XRC message's later packet naming another SRQ is an invalid request",
          "[transport][xrc]") {
  QpPair p(xrc_pair());
  p.script = [](const WireRecord &r, Packet &pkt) {
    if (is(r, 'A', wire::kSendMiddle, 101))
      pkt.ext<wire::Xrceth>(pkt.info().xrceth_off).set(12345);
    return Fate::kDeliver;
  };
  p.b.post_recv(21, 8192, 4096);
  p.a.post_send(send_wqe(1, p.a, 0, 3000));
  p.run();
  CHECK(p.trace() == Lines{"A SEND_FIRST 100", "A SEND_MIDDLE 101", "A SEND_LAST 102 ack_req",
                           "B ACK 101 NAK_1"});
  CHECK(one_send_completion(p.a).status == IBV_WC_REM_INV_REQ_ERR);
  // The receive the message had taken is given back flushed, on its SRQ's CQ.
  std::vector<shm::Cqe> recvs = p.b.poll_recv_cq();
  REQUIRE(recvs.size() == 1);
  CHECK(recvs[0].wr_id == 21);
  CHECK(recvs[0].status == IBV_WC_WR_FLUSH_ERR);
}
