// Completion timestamps (issue 32 item 9): extended CQs with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
// and _WALLCLOCK, read in the device's free-running clock (CLOCK_MONOTONIC nanoseconds,
// hca_core_clock 1 GHz) and in wall-clock nanoseconds; ibv_query_rt_values_ex reads the same
// free-running clock. Each stamp must lie between the clock before the work was posted and the
// clock after its completion was polled, on the worker path (SEND) and the direct path (WRITE),
// through a resize of the CQ too.
#include <time.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <thread>
#include <vector>

#include "verbs_fixture.h"

using namespace vt;

namespace {

constexpr uint64_t kStamps =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

uint64_t now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct Stamped {
  uint64_t wr_id;
  int status;
  uint64_t ts, wallclock;
};

// Every completion of an extended CQ, with both stamps, polled until `n` came. (An ibv_cq_ex
// begins with its ibv_cq: ibv_cq_ex_to_cq's cast, back.)
std::vector<Stamped> poll_stamped(ibv_cq *cq, size_t n) {
  auto *ex = reinterpret_cast<ibv_cq_ex *>(cq);
  std::vector<Stamped> out;
  const auto deadline = Clock::now() + kCompletionTimeout;
  while (out.size() < n && Clock::now() < deadline) {
    ibv_poll_cq_attr attr{};
    if (ibv_start_poll(ex, &attr) != 0) continue;
    do {
      out.push_back({ex->wr_id, ex->status, ibv_wc_read_completion_ts(ex),
                     ibv_wc_read_completion_wallclock_ns(ex)});
    } while (out.size() < n && ibv_next_poll(ex) == 0);
    ibv_end_poll(ex);
  }
  REQUIRE(out.size() == n);
  return out;
}

void require_within(const std::vector<Stamped> &got, uint64_t mono_before, uint64_t mono_after,
                    uint64_t wall_before, uint64_t wall_after) {
  for (const Stamped &s : got) {
    INFO("wr_id " << s.wr_id << " ts " << s.ts << " in [" << mono_before << ", " << mono_after
                  << "], wallclock " << s.wallclock << " in [" << wall_before << ", "
                  << wall_after << "]");
    CHECK(s.status == IBV_WC_SUCCESS);
    CHECK(s.ts >= mono_before);
    CHECK(s.ts <= mono_after);
    // The wall clock is the stamp moved by the clocks' offset when read: within a few
    // microseconds of [before, after] unless the clock was stepped meanwhile.
    CHECK(s.wallclock + 1000000 >= wall_before);
    CHECK(s.wallclock <= wall_after + 1000000);
  }
}

}  // namespace

TEST_CASE("completion timestamps: the device's clock and ibv_query_rt_values_ex", "[timestamp]") {
  auto d = open_device();
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(d->ctx.get(), nullptr, &attr) == 0);
  CHECK(attr.hca_core_clock == 1000000);  // kHz: nanoseconds
  CHECK(attr.completion_timestamp_mask == ~0ull);
  const uint64_t before = now_ns(CLOCK_MONOTONIC);
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  REQUIRE(ibv_query_rt_values_ex(d->ctx.get(), &v) == 0);
  const uint64_t after = now_ns(CLOCK_MONOTONIC);
  const uint64_t raw = uint64_t(v.raw_clock.tv_sec) * 1000000000ull + uint64_t(v.raw_clock.tv_nsec);
  CHECK(raw >= before);
  CHECK(raw <= after);
  v.comp_mask = IBV_VALUES_MASK_RESERVED;  // a value it does not know
  CHECK(ibv_query_rt_values_ex(d->ctx.get(), &v) == EINVAL);
}

TEST_CASE("completion timestamps: sends, receives and writes, through a resize", "[timestamp]") {
  QpConfig cfg;
  cfg.cq_wc_flags = IBV_WC_STANDARD_FLAGS | kStamps;
  Pair p(cfg);
  constexpr size_t kLen = 2000;
  Region src(p.a.pd(), kLen, seed_for("ts src")), dst(p.b.pd(), kLen, seed_for("ts dst"));
  const uint64_t mono_before = now_ns(CLOCK_MONOTONIC), wall_before = now_ns(CLOCK_REALTIME);
  // WRITEs (the direct path between QPs of one process: each runs in ibv_post_send while
  // nothing earlier of the send queue is with vrnicd), then SENDs (the worker path).
  for (uint64_t i = 0; i < 4; i++) {
    ibv_sge rs = make_sge(dst.payload(), kLen, dst.lkey());
    ibv_recv_wr rwr = make_recv_wr(100 + i, &rs, 1);
    post_recv(p.b.qp(), &rwr);
  }
  for (uint64_t i = 0; i < 8; i++) {
    ibv_sge sge = make_sge(src.payload(), kLen, src.lkey());
    ibv_send_wr wr = make_send_wr(i, i < 4 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND, &sge, 1);
    wr.wr.rdma.remote_addr = dst.addr();
    wr.wr.rdma.rkey = dst.rkey();
    post_send(p.a.qp(), &wr);
  }
  SECTION("as they come") {
    std::vector<Stamped> sends = poll_stamped(p.a.scq(), 8);
    std::vector<Stamped> recvs = poll_stamped(p.b.rcq(), 4);
    const uint64_t mono_after = now_ns(CLOCK_MONOTONIC), wall_after = now_ns(CLOCK_REALTIME);
    require_within(sends, mono_before, mono_after, wall_before, wall_after);
    require_within(recvs, mono_before, mono_after, wall_before, wall_after);
    for (size_t i = 0; i < sends.size(); i++) CHECK(sends[i].wr_id == i);
  }
  SECTION("after a resize") {
    // The first polled; the others (most, if not all, completed by now) still in the CQs
    // when they are resized.
    std::vector<Stamped> first = poll_stamped(p.a.scq(), 1);
    std::this_thread::sleep_for(Ms(50));
    REQUIRE(ibv_resize_cq(p.a.scq(), 4096) == 0);
    REQUIRE(ibv_resize_cq(p.b.rcq(), 4096) == 0);
    std::vector<Stamped> sends = poll_stamped(p.a.scq(), 7);
    std::vector<Stamped> recvs = poll_stamped(p.b.rcq(), 4);
    const uint64_t mono_after = now_ns(CLOCK_MONOTONIC), wall_after = now_ns(CLOCK_REALTIME);
    sends.insert(sends.begin(), first[0]);
    require_within(sends, mono_before, mono_after, wall_before, wall_after);
    require_within(recvs, mono_before, mono_after, wall_before, wall_after);
    for (size_t i = 1; i < sends.size(); i++) CHECK(sends[i].ts >= sends[i - 1].ts);
  }
}

TEST_CASE("completion timestamps: only a CQ that asked for them has them", "[timestamp]") {
  auto d = open_device();
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ibv_cq_ex *plain = ibv_create_cq_ex(d->ctx.get(), &ca);
  REQUIRE(plain);
  CHECK(plain->read_completion_ts == nullptr);
  CHECK(plain->read_completion_wallclock_ns == nullptr);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(plain)) == 0);
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex *stamped = ibv_create_cq_ex(d->ctx.get(), &ca);
  REQUIRE(stamped);
  CHECK(stamped->read_completion_ts != nullptr);
  CHECK(stamped->read_completion_wallclock_ns == nullptr);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(stamped)) == 0);
}
