// The same-host direct path (provider/direct_path.h): WRs between two QPs of one process that
// the posting thread runs itself. What it must keep of the worker path: the data, byte for
// byte; the completions, in the order of the WRs whichever path each took; no access after
// ibv_dereg_mr returns. Run with VRNIC_DIRECT_PATH=0 too: every check holds on the worker path
// alone, and the direct-path counter stays still.
#include <catch2/catch.hpp>

#include <poll.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "verbs_fixture.h"

using namespace vt;

namespace {

long long stat(const char *name) {
  std::string err;
  auto stats = read_vrnic_stats(&err);
  INFO(err);
  REQUIRE(stats.has_value());
  REQUIRE(stats->count(name) == 1);
  return stats->at(name);
}

long long direct_ops() { return stat("direct_ops"); }

// On unless this process turned it off or vrnicd runs with --no-direct-path.
bool direct_path_on() {
  const char *env = std::getenv("VRNIC_DIRECT_PATH");
  return !(env && std::strcmp(env, "0") == 0) && stat("direct_path") == 1;
}

ibv_send_wr rdma_wr(uint64_t id, ibv_wr_opcode op, ibv_sge *sg, const Region &remote, size_t off) {
  ibv_send_wr wr = make_send_wr(id, op, sg, 1);
  wr.wr.rdma.remote_addr = remote.addr() + off;
  wr.wr.rdma.rkey = remote.rkey();
  return wr;
}

WcExpect success(const char *what, uint64_t wr_id, uint32_t qpn, int opcode, int64_t len = -1) {
  return want(what, wr_id, qpn, IBV_WC_SUCCESS, opcode, len);
}

}  // namespace

TEST_CASE("direct path: WRITE, READ and atomics between two QPs of one process, every byte",
          "[direct]") {
  Pair p;
  constexpr size_t kLen = 256 * 1024;
  Region src(p.a.pd(), kLen, seed_for("direct src"));
  Region dst(p.b.pd(), kLen, seed_for("direct dst"));
  Region back(p.a.pd(), kLen, seed_for("direct back"));
  const long long before = direct_ops();
  // Sizes across any threshold: 1 byte to 256 KiB, each written then read back.
  const size_t sizes[] = {1, 63, 4096, 65536, kLen};
  uint64_t id = 1;
  for (size_t n : sizes) {
    INFO(n << " bytes");
    fill_pattern(src.payload(), n, seed_for("direct size", n));
    ibv_sge sg = make_sge(src.payload(), n, src.lkey());
    ibv_send_wr w = rdma_wr(id, IBV_WR_RDMA_WRITE, &sg, dst, 0);
    post_send(p.a.qp(), &w);
    check_wc(poll_one(p.a.scq(), "write"), success("write", id++, p.a.qpn(), IBV_WC_RDMA_WRITE));
    REQUIRE(std::memcmp(dst.payload(), src.payload(), n) == 0);
    ibv_sge rs = make_sge(back.payload(), n, back.lkey());
    ibv_send_wr r = rdma_wr(id, IBV_WR_RDMA_READ, &rs, dst, 0);
    post_send(p.a.qp(), &r);
    check_wc(poll_one(p.a.scq(), "read"),
             success("read", id++, p.a.qpn(), IBV_WC_RDMA_READ, int64_t(n)));
    REQUIRE(std::memcmp(back.payload(), src.payload(), n) == 0);
  }
  // Fetch-and-add then compare-and-swap on one word, the originals coming back.
  uint64_t word = 41;
  std::memcpy(dst.payload() + 64, &word, 8);
  ibv_sge as = make_sge(back.payload(), 8, back.lkey());
  // One atomic on the word, its original value into `back`.
  auto atomic = [&](ibv_wr_opcode op, uint64_t compare_add, uint64_t swap, int wc_opcode) {
    ibv_send_wr w = make_send_wr(id, op, &as, 1);
    w.wr.atomic.remote_addr = dst.addr() + 64;
    w.wr.atomic.rkey = dst.rkey();
    w.wr.atomic.compare_add = compare_add;
    w.wr.atomic.swap = swap;
    post_send(p.a.qp(), &w);
    check_wc(poll_one(p.a.scq(), "atomic"), success("atomic", id++, p.a.qpn(), wc_opcode));
    uint64_t orig;
    std::memcpy(&orig, back.payload(), 8);
    return orig;
  };
  CHECK(atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, IBV_WC_FETCH_ADD) == 41);
  CHECK(atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 42, 7, IBV_WC_COMP_SWAP) == 42);
  std::memcpy(&word, dst.payload() + 64, 8);
  CHECK(word == 7);
  // Each of these WRs found the queue empty: all took the direct path, or none did.
  const long long ran = direct_ops() - before;
  CHECK(ran == (direct_path_on() ? static_cast<long long>(2 * std::size(sizes) + 2) : 0));
}

TEST_CASE("direct path: direct and worker WRs interleaved on one QP keep their order",
          "[direct]") {
  Pair p;
  constexpr int kRounds = 192;  // batches of 16
  Region src(p.a.pd(), 8 * kRounds, seed_for("order src"));
  Region dst(p.b.pd(), 64, seed_for("order dst"));
  Region back(p.a.pd(), 8 * kRounds, seed_for("order back"));
  Region rbuf(p.b.pd(), 8 * kRounds, seed_for("order recv"));
  for (int i = 0; i < kRounds; i++) {
    ibv_sge rs = make_sge(rbuf.payload() + 8 * i, 8, rbuf.lkey());
    ibv_recv_wr rw = make_recv_wr(i, &rs, 1);
    post_recv(p.b.qp(), &rw);
  }
  const long long before = direct_ops();
  // Round i: WRITE value i to one word (direct when the queue is empty), SEND i (always the
  // worker path), READ the word back (direct only once the SEND has retired). Posted one by
  // one, so that each may take either path: the READ must see round i's WRITE, never an
  // earlier or a later one, and the completions must come in posting order.
  for (int i = 0; i < kRounds; i++) {
    uint64_t v = 0x1000 + i;
    std::memcpy(src.payload() + 8 * i, &v, 8);
    ibv_sge ws = make_sge(src.payload() + 8 * i, 8, src.lkey());
    ibv_send_wr w = rdma_wr(3 * i, IBV_WR_RDMA_WRITE, &ws, dst, 0);
    // Fenced: without it a WRITE may pass the READ before it (the worker path sends it while
    // the READ's response, read from memory as it leaves, is still to come).
    w.send_flags |= IBV_SEND_FENCE;
    post_send(p.a.qp(), &w);
    ibv_sge ss = make_sge(src.payload() + 8 * i, 8, src.lkey());
    ibv_send_wr s = make_send_wr(3 * i + 1, IBV_WR_SEND, &ss, 1);
    post_send(p.a.qp(), &s);
    ibv_sge rs = make_sge(back.payload() + 8 * i, 8, back.lkey());
    ibv_send_wr r = rdma_wr(3 * i + 2, IBV_WR_RDMA_READ, &rs, dst, 0);
    post_send(p.a.qp(), &r);
    if (i % 16 == 15) {  // let some rounds find the queue idle again
      auto wcs = poll_n(p.a.scq(), 48, "a batch of rounds");
      for (size_t k = 0; k < wcs.size(); k++) {
        INFO("completion " << k << " of rounds " << i - 15 << ".." << i << ": "
                           << describe(wcs[k]));
        REQUIRE(wcs[k].status == IBV_WC_SUCCESS);
        REQUIRE(wcs[k].wr_id == uint64_t(3 * (i - 15)) + k);
      }
    }
  }
  auto rwcs = poll_n(p.b.rcq(), kRounds, "receives");
  for (int i = 0; i < kRounds; i++) {
    INFO("round " << i);
    REQUIRE(rwcs[i].status == IBV_WC_SUCCESS);
    REQUIRE(rwcs[i].wr_id == uint64_t(i));
    uint64_t got, read;
    std::memcpy(&got, rbuf.payload() + 8 * i, 8);
    std::memcpy(&read, back.payload() + 8 * i, 8);
    CHECK(got == uint64_t(0x1000 + i));
    CHECK(read == uint64_t(0x1000 + i));  // the READ came after its round's WRITE
  }
  const long long ran = direct_ops() - before;
  INFO(ran << " of " << 2 * kRounds << " WRITEs and READs ran on the direct path");
  if (direct_path_on())
    CHECK(ran > 0);
  else
    CHECK(ran == 0);
}

TEST_CASE("direct path: completions left unpolled go with their QP's reset", "[direct]") {
  Pair p;
  Region src(p.a.pd(), 64, seed_for("reset src"));
  Region dst(p.b.pd(), 64, seed_for("reset dst"));
  ibv_sge sg = make_sge(src.payload(), 64, src.lkey());
  for (int i = 0; i < 3; i++) {
    ibv_send_wr w = rdma_wr(i, IBV_WR_RDMA_WRITE, &sg, dst, 0);
    post_send(p.a.qp(), &w);
  }
  // Written before the reset (the direct path ran them, or the worker acknowledged them).
  for (int i = 0; i < 200 && std::memcmp(dst.payload(), src.payload(), 64); i++)
    std::this_thread::sleep_for(Ms{10});
  REQUIRE(std::memcmp(dst.payload(), src.payload(), 64) == 0);
  std::this_thread::sleep_for(Ms{50});  // the worker path's completions are written by now
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RESET;
  REQUIRE(ibv_modify_qp(p.a.qp(), &attr, IBV_QP_STATE) == 0);
  require_no_completion(p.a.scq(), Ms{50}, "a reset QP's send CQ");
}

TEST_CASE("direct path: unpolled completions keep their order across ibv_resize_cq",
          "[direct]") {
  Pair p;
  Region src(p.a.pd(), 64, seed_for("resize src"));
  Region dst(p.b.pd(), 64, seed_for("resize dst"));
  Region rbuf(p.b.pd(), 64, seed_for("resize recv"));
  ibv_sge rs = make_sge(rbuf.payload(), 8, rbuf.lkey());
  ibv_recv_wr rw = make_recv_wr(100, &rs, 1);
  post_recv(p.b.qp(), &rw);
  ibv_sge sg = make_sge(src.payload(), 8, src.lkey());
  // WRITE (direct), SEND (worker), WRITE (after it: worker or direct), all left unpolled.
  ibv_send_wr w1 = rdma_wr(1, IBV_WR_RDMA_WRITE, &sg, dst, 0);
  post_send(p.a.qp(), &w1);
  ibv_send_wr s2 = make_send_wr(2, IBV_WR_SEND, &sg, 1);
  post_send(p.a.qp(), &s2);
  check_wc(poll_one(p.b.rcq(), "receive"), want("receive", 100, p.b.qpn()));
  ibv_send_wr w3 = rdma_wr(3, IBV_WR_RDMA_WRITE, &sg, dst, 8);
  post_send(p.a.qp(), &w3);
  for (int i = 0; i < 200 && std::memcmp(dst.payload() + 8, src.payload(), 8); i++)
    std::this_thread::sleep_for(Ms{10});
  REQUIRE(ibv_resize_cq(p.a.scq(), 4 * p.cfg.cq_depth) == 0);
  const auto wcs = poll_n(p.a.scq(), 3, "after the resize");
  CHECK(wcs[0].wr_id == 1);
  CHECK(wcs[1].wr_id == 2);
  CHECK(wcs[2].wr_id == 3);
  for (const ibv_wc &wc : wcs) CHECK(wc.status == IBV_WC_SUCCESS);
}

TEST_CASE("direct path: ibv_dereg_mr racing a stream of WRITEs: nothing lands after it returns",
          "[direct]") {
  Pair p;
  constexpr size_t kLen = 64 * 1024;
  Region src(p.a.pd(), kLen, seed_for("dereg src"));
  AlignedBuf target(kLen);
  std::memset(target.data(), 0, kLen);
  ibv_mr *mr = ibv_reg_mr(p.b.pd(), target.data(), kLen, int(kAllAccess));
  REQUIRE(mr != nullptr);
  const uint32_t rkey = mr->rkey;
  std::atomic<long> written{0};
  std::atomic<int> last_status{-1};
  std::atomic<bool> done{false};
  // The poster: one signaled WRITE of the whole region at a time, until one fails.
  std::thread poster([&] {
    ibv_sge sg = make_sge(src.payload(), kLen, src.lkey());
    for (;;) {
      ibv_send_wr w = make_send_wr(written.load(), IBV_WR_RDMA_WRITE, &sg, 1);
      w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target.data());
      w.wr.rdma.rkey = rkey;
      ibv_send_wr *bad = nullptr;
      if (ibv_post_send(p.a.qp(), &w, &bad)) break;
      ibv_wc wc{};
      if (poll_until(p.a.scq(), &wc, Clock::now() + kCompletionTimeout) != 1) break;
      last_status = wc.status;
      if (wc.status != IBV_WC_SUCCESS) break;
      written++;
    }
    done = true;
  });
  while (written.load() < 200 && !done.load()) std::this_thread::yield();
  REQUIRE(written.load() >= 200);
  REQUIRE(ibv_dereg_mr(mr) == 0);
  // From here on the memory is the program's alone: mark it and watch it stay so.
  std::memset(target.data(), 0xEE, kLen);
  poster.join();
  INFO(written.load() << " writes completed before the one that failed");
  CHECK(last_status.load() == IBV_WC_REM_ACCESS_ERR);
  std::vector<uint8_t> want(kLen, 0xEE);
  CHECK(std::memcmp(target.data(), want.data(), kLen) == 0);
}

TEST_CASE("direct path: an armed CQ raises one event for a direct completion", "[direct]") {
  QpConfig cfg;
  cfg.cq_channel = true;
  Pair p(cfg);
  Region src(p.a.pd(), 64, seed_for("event src"));
  Region dst(p.b.pd(), 64, seed_for("event dst"));
  ibv_sge sg = make_sge(src.payload(), 64, src.lkey());
  auto readable = [&](int ms) {
    pollfd pfd{p.a.channel()->fd, POLLIN, 0};
    return ::poll(&pfd, 1, ms) == 1;
  };
  const long long before = direct_ops();
  // Armed for the next completion: exactly one event, for this CQ.
  REQUIRE(ibv_req_notify_cq(p.a.scq(), 0) == 0);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &sg, dst, 0);
  post_send(p.a.qp(), &w);
  REQUIRE(readable(int(kCompletionTimeout.count())));
  ibv_cq *ev_cq = nullptr;
  void *ev_ctx = nullptr;
  REQUIRE(ibv_get_cq_event(p.a.channel(), &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == p.a.scq());
  ibv_ack_cq_events(ev_cq, 1);
  check_wc(poll_one(p.a.scq(), "armed write"), success("armed write", 1, p.a.qpn(), IBV_WC_RDMA_WRITE));
  // Not armed again: a second completion raises nothing.
  w.wr_id = 2;
  post_send(p.a.qp(), &w);
  check_wc(poll_one(p.a.scq(), "unarmed write"),
           success("unarmed write", 2, p.a.qpn(), IBV_WC_RDMA_WRITE));
  CHECK_FALSE(readable(50));
  // Armed for solicited completions only: a send-side completion is not one.
  REQUIRE(ibv_req_notify_cq(p.a.scq(), 1) == 0);
  w.wr_id = 3;
  post_send(p.a.qp(), &w);
  check_wc(poll_one(p.a.scq(), "solicited-only"),
           success("solicited-only", 3, p.a.qpn(), IBV_WC_RDMA_WRITE));
  CHECK_FALSE(readable(50));
  CHECK(direct_ops() - before == (direct_path_on() ? 3 : 0));
}
