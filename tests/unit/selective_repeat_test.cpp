// Held packets and selective repeat on the transport harness's virtual clock: what a lost or
// overtaken request costs when the responder keeps what comes after it (held_packets.h) and,
// with --selective-repeat, says so in its NAK (wire::Sack) -- exactly the lost packets again,
// no timeout, the window kept -- and what makes the requester go back N after all.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>

#include "dataplane/peer_window.h"
#include "dataplane/transport.h"
#include "transport_checks.h"
#include "transport_harness.h"

using namespace vrnic;
using namespace vrnic::testing;

namespace {

constexpr uint32_t kLength = 32 * 1024;  // 32 packets at MTU 1024: PSNs 100-131

// How many times A sent a request with this PSN.
size_t copies(const QpPair &p, uint32_t psn) {
  size_t n = 0;
  for (const WireRecord &r : p.log)
    if (r.from == 'A' && r.psn == psn && wire::op_operation(r.opcode) != wire::kAcknowledge) n++;
  return n;
}

size_t requests_sent(const QpPair &p) {
  size_t n = 0;
  for (const WireRecord &r : p.log) n += r.from == 'A';
  return n;
}

// Drops A's packets with these PSNs, `times` times each.
WireScript drop_psns(std::vector<uint32_t> psns, int times = 1) {
  auto left = std::make_shared<std::map<uint32_t, int>>();
  for (uint32_t psn : psns) (*left)[psn] = times;
  return [left](const WireRecord &r, Packet &) {
    if (r.from != 'A') return Fate::kDeliver;
    auto it = left->find(r.psn);
    if (it == left->end() || it->second == 0) return Fate::kDeliver;
    it->second--;
    return Fate::kDrop;
  };
}

// Writes A's first kLength bytes to B's and runs the pair: the bytes arrive, the one
// completion is a success.
void write_and_check(QpPair &p) {
  p.a.post_send(write_wqe(1, p.a, 0, kLength, p.b, 0));
  p.run();
  CHECK(same(p.a, 0, p.b, 0, kLength));
  CHECK(one_send_completion(p.a).status == IBV_WC_SUCCESS);
}

struct SelectivePair {
  explicit SelectivePair(bool selective, PairOptions o = {}) : p(o) {
    p.a.dev.selective_repeat = p.b.dev.selective_repeat = selective;
    fill(p.a, 0, kLength, 3);
  }
  QpPair p;
};

}  // namespace

TEST_CASE("selective repeat: a lost WRITE packet costs that packet and nothing else",
          "[transport][selective]") {
  for (bool wire_peer : {false, true}) {
    PairOptions o;
    o.wire_peer = wire_peer;
    SelectivePair s(true, o);
    QpPair &p = s.p;
    p.script = drop_psns({110});
    write_and_check(p);
    CHECK(copies(p, 110) == 2);
    CHECK(requests_sent(p) == 33);  // 32, and 110 again
    CHECK(p.a.qp->counters[kSelectiveResends] == 1);
    CHECK(p.a.qp->counters[kRetransmits] == 0);  // no go-back-N
    CHECK(p.a.qp->counters[kTimeouts] == 0);
    CHECK(p.b.qp->counters[kPacketsHeld] == 21);  // 111-131
    CHECK(p.b.qp->counters[kNaksSent] == 1);
  }
}

TEST_CASE("selective repeat: a packet overtaken by two others costs nothing",
          "[transport][selective]") {
  SelectivePair s(true);
  QpPair &p = s.p;
  auto held = std::make_shared<int>(0);
  p.script = [held](const WireRecord &r, Packet &) {  // 110 behind 111, then 111 behind 112
    if (r.from == 'A' && (r.psn == 110 || r.psn == 111) && *held < 2) {
      ++*held;
      return Fate::kHold;
    }
    return Fate::kDeliver;
  };
  write_and_check(p);
  CHECK(requests_sent(p) == 32);
  CHECK(p.b.qp->counters[kNaksSent] == 0);
  CHECK(p.b.qp->counters[kPacketsHeld] > 0);
  CHECK(p.a.qp->counters[kSelectiveResends] == 0);
}

TEST_CASE("selective repeat: two gaps, each packet sent again once", "[transport][selective]") {
  SelectivePair s(true);
  QpPair &p = s.p;
  p.script = drop_psns({105, 106, 120});
  write_and_check(p);
  CHECK(requests_sent(p) == 35);
  CHECK(copies(p, 105) == 2);
  CHECK(copies(p, 106) == 2);
  CHECK(copies(p, 120) == 2);
  CHECK(p.a.qp->counters[kSelectiveResends] == 3);
  CHECK(p.a.qp->counters[kTimeouts] == 0);
}

TEST_CASE("selective repeat: without it agreed the responder still holds, the requester goes back N",
          "[transport][selective]") {
  SelectivePair s(false);
  QpPair &p = s.p;
  p.script = drop_psns({110});
  write_and_check(p);
  CHECK(p.a.qp->counters[kSelectiveResends] == 0);
  CHECK(p.a.qp->counters[kRetransmits] == 1);
  CHECK(p.b.qp->counters[kPacketsHeld] == 21);
  // Plain NAKs only: nothing after the AETH.
  for (const WireRecord &r : p.log)
    if (r.from == 'B') CHECK(r.payload_len == 0);
}

TEST_CASE("selective repeat: ECE agreed per QP wins over the device's default, either way",
          "[transport][selective][ece]") {
  for (bool device_default : {false, true}) {
    CAPTURE(device_default);
    SelectivePair s(device_default);
    QpPair &p = s.p;
    for (QueuePair *qp : {p.a.qp, p.b.qp}) {  // as ibv_set_ece leaves them (rdma_cm's REQ/REP)
      qp->ece_set = true;
      qp->ece_options = device_default ? 0 : kEceSelectiveRepeat;
    }
    p.script = drop_psns({110});
    write_and_check(p);
    CHECK(copies(p, 110) == 2);
    CHECK(p.a.qp->counters[kSelectiveResends] == (device_default ? 0u : 1u));
    CHECK(p.a.qp->counters[kRetransmits] == (device_default ? 1u : 0u));
    size_t sacks = 0;  // NAKs with a Sack after the AETH
    for (const WireRecord &r : p.log) sacks += r.from == 'B' && r.payload_len != 0;
    CHECK(sacks == (device_default ? 0u : 1u));
  }
}

TEST_CASE("selective repeat: a resend lost again is sent once more, in time",
          "[transport][selective]") {
  PairOptions o;
  o.wire_peer = true;  // probes: the gap has no later packet to show it a second time
  SelectivePair s(true, o);
  QpPair &p = s.p;
  p.script = drop_psns({110}, 2);
  write_and_check(p);
  CHECK(copies(p, 110) == 3);
  CHECK(p.a.qp->counters[kTimeouts] == 0);
  // Sent a third time by the repair timer, a round after the second (virtual time: the wire
  // takes none), long before a probe would have gone back N.
  uint64_t third_at = 0;
  for (const WireRecord &r : p.log)
    if (r.from == 'A' && r.psn == 110) third_at = r.at_ns;
  CHECK(third_at < PeerWindow::kMinProbeNs);
  CHECK(p.a.qp->counters[kRetransmits] == 0);
  CHECK(p.a.qp->counters[kSelectiveResends] == 2);
}

TEST_CASE("selective repeat: the last packet lost is sent again alone by the repair timer",
          "[transport][selective]") {
  SelectivePair s(true);
  QpPair &p = s.p;
  p.script = drop_psns({110, 131});  // no packet after 131 shows the responder its loss
  write_and_check(p);
  CHECK(copies(p, 110) == 2);
  CHECK(copies(p, 131) == 2);
  CHECK(requests_sent(p) == 34);
  CHECK(p.a.qp->counters[kSelectiveResends] == 2);
  CHECK(p.a.qp->counters[kRetransmits] == 0);
  CHECK(p.a.qp->counters[kTimeouts] == 0);
}

TEST_CASE("selective repeat: a lost READ or atomic request is sent again alone, executed once",
          "[transport][selective]") {
  SelectivePair s(true);
  QpPair &p = s.p;
  fill(p.b, 40 * 1024, 4096, 9);
  uint64_t counter = 1000;
  std::memcpy(p.b.mem.data() + 48 * 1024, &counter, 8);
  p.script = drop_psns({100, 104});  // the READ request (PSNs 100-103) and the FETCH_ADD
  p.a.post_send(read_wqe(1, p.a, 40 * 1024, 4096, p.b, 40 * 1024));
  p.a.post_send(fetch_add_wqe(2, p.a, 56 * 1024, p.b, 48 * 1024, 5));
  p.a.post_send(write_wqe(3, p.a, 0, 4096, p.b, 0));  // 105-108, held by B
  p.run();
  CHECK(same(p.a, 40 * 1024, p.b, 40 * 1024, 4096));
  CHECK(same(p.a, 0, p.b, 0, 4096));
  std::vector<shm::Cqe> cqes = p.a.poll_send_cq();
  REQUIRE(cqes.size() == 3);
  for (const shm::Cqe &c : cqes) CHECK(c.status == IBV_WC_SUCCESS);
  uint64_t fetched = 0, now = 0;
  std::memcpy(&fetched, p.a.mem.data() + 56 * 1024, 8);
  std::memcpy(&now, p.b.mem.data() + 48 * 1024, 8);
  CHECK(fetched == 1000);
  CHECK(now == 1005);  // once
  CHECK(copies(p, 100) == 2);
  CHECK(copies(p, 104) == 2);
  CHECK(p.a.qp->counters[kSelectiveResends] == 2);
  CHECK(p.a.qp->counters[kRetransmits] == 0);  // no go-back-N: the WRITE went once
  CHECK(p.a.qp->counters[kTimeouts] == 0);
  CHECK(copies(p, 105) == 1);
}

TEST_CASE("selective repeat: a read answer lost twice is asked for again by the repair timer",
          "[transport][selective]") {
  SelectivePair s(true);
  QpPair &p = s.p;
  fill(p.b, 40 * 1024, 4096, 9);
  auto left = std::make_shared<int>(2);
  p.script = [left](const WireRecord &r, Packet &) {  // B's answer 101, and its first repeat
    if (r.from != 'B' || r.psn != 101 || *left == 0) return Fate::kDeliver;
    --*left;
    return Fate::kDrop;
  };
  p.a.post_send(read_wqe(1, p.a, 40 * 1024, 4096, p.b, 40 * 1024));  // PSNs 100-103
  p.run();
  CHECK(same(p.a, 40 * 1024, p.b, 40 * 1024, 4096));
  CHECK(one_send_completion(p.a).status == IBV_WC_SUCCESS);
  CHECK(copies(p, 100) == 1);  // the read
  CHECK(copies(p, 101) == 2);  // its hole, asked for twice, alone
  CHECK(requests_sent(p) == 3);
  CHECK(p.a.qp->counters[kTimeouts] == 0);
}

TEST_CASE("selective repeat: a Sack that names PSNs never sent is not believed",
          "[transport][selective]") {
  SelectivePair s(true);
  QpPair &p = s.p;
  auto dropped = std::make_shared<bool>(false);
  p.script = [dropped](const WireRecord &r, Packet &pkt) {
    if (r.from == 'A' && r.psn == 110 && !*dropped) {
      *dropped = true;
      return Fate::kDrop;
    }
    if (r.from == 'B' && pkt.payload_len == wire::Sack::kSize) {
      // The span stretched past everything A sent, every bit clear.
      auto *sack = reinterpret_cast<wire::Sack *>(const_cast<uint8_t *>(pkt.payload));
      sack->start(wire::Sack::kMaxSpan);
    }
    return Fate::kDeliver;
  };
  write_and_check(p);
  CHECK(p.a.qp->counters[kSelectiveResends] == 0);
  CHECK(p.a.qp->counters[kRetransmits] == 1);  // went back N instead
}
