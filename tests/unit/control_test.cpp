// The QP state machine table and the data structures shared with the provider.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <thread>

#include "control/cpu_list.h"
#include "control/errno_status.h"
#include "control/qp_state_machine.h"
#include "dataplane/slot_table.h"
#include "vrnic/shm_layout.h"

using namespace vrnic;

TEST_CASE("RC transitions need exactly their required attributes", "[qp-state]") {
  const uint32_t init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, init) == 0);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, init & ~IBV_QP_PORT) ==
        EINVAL);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, init | IBV_QP_SQ_PSN) ==
        EINVAL);
  const uint32_t rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, rtr) == 0);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR, rtr & ~IBV_QP_RQ_PSN) == EINVAL);
  const uint32_t rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, rts) == 0);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS, rts & ~IBV_QP_TIMEOUT) == EINVAL);
}

TEST_CASE("illegal transitions are refused and RESET/ERR are reachable from anywhere",
          "[qp-state]") {
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTS, IBV_QP_STATE) == EINVAL);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTS, IBV_QP_STATE) == EINVAL);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_RTS, IBV_QP_STATE) == EINVAL);
  CHECK(check_qp_transition(IBV_QPT_RC, IBV_QPS_SQE, IBV_QPS_RTS, IBV_QP_STATE) == EINVAL);
  CHECK(check_qp_transition(IBV_QPT_UC, IBV_QPS_SQE, IBV_QPS_RTS, IBV_QP_STATE) == 0);
  for (uint32_t s = IBV_QPS_RESET; s <= IBV_QPS_ERR; s++) {
    CHECK(check_qp_transition(IBV_QPT_RC, s, IBV_QPS_RESET, IBV_QP_STATE) == 0);
    CHECK(check_qp_transition(IBV_QPT_RC, s, IBV_QPS_ERR, IBV_QP_STATE) == 0);
    CHECK(check_qp_transition(IBV_QPT_RC, s, IBV_QPS_ERR, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL);
  }
  CHECK(check_qp_transition(IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
  CHECK(check_qp_transition(IBV_QPT_RAW_PACKET, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_STATE) ==
        EINVAL);
}

TEST_CASE("doorbell ring hands out each handle once, in order, and reports full", "[shm]") {
  auto ring = std::make_unique<shm::DoorbellRing>();
  shm::DoorbellConsumer consumer{ring.get()};
  uint32_t h;
  CHECK_FALSE(consumer.pop(&h));
  for (uint32_t i = 0; i < shm::DoorbellRing::kSlots; i++) REQUIRE(ring->push(i + 1));
  CHECK_FALSE(ring->push(99));
  for (uint32_t i = 0; i < shm::DoorbellRing::kSlots; i++) {
    REQUIRE(consumer.pop(&h));
    REQUIRE(h == i + 1);
  }
  CHECK_FALSE(consumer.pop(&h));
  CHECK(ring->push(7));  // wraps around
  CHECK(consumer.pop(&h));
  CHECK(h == 7);
}

TEST_CASE("a forged doorbell ring yields at most one lap of cells per look (issue 17, row 14)",
          "[shm]") {
  auto ring = std::make_unique<shm::DoorbellRing>();
  shm::DoorbellConsumer consumer{ring.get()};
  // A client that keeps every cell looking full, as fast as the worker empties them.
  uint64_t popped = 0;
  uint32_t h;
  for (int look = 0; look < 3; look++) {
    for (uint32_t i = 0; i < shm::DoorbellRing::kSlots; i++)
      ring->cells[i].seq.store(0x7fffffff, std::memory_order_relaxed);
    uint32_t n = 0;
    while (n < shm::DoorbellRing::kSlots && consumer.pop(&h)) n++;
    popped += n;
  }
  // The consumer's index is vrnicd's: the client could not move it back.
  CHECK(consumer.head == popped);
  CHECK(popped == 3ull * shm::DoorbellRing::kSlots);
}

TEST_CASE("slot table: handles start at 1, freed slots are reused late with a new generation",
          "[shm]") {
  SlotTable<int> t(200);
  uint32_t a = t.insert(std::make_unique<int>(1));
  CHECK(a == 1);
  uint8_t gen = t.generation(a);
  CHECK(t.get(0) == nullptr);
  CHECK(*t.get(a) == 1);
  t.remove(a);
  CHECK(t.get(a) == nullptr);
  CHECK(t.remove(a) == nullptr);
  uint32_t b = t.insert(std::make_unique<int>(2));
  CHECK(b != a);  // not reused at once: packets for the old object may be in flight
  for (int i = 0; i < 100; i++) t.insert(std::make_unique<int>(i));
  CHECK(t.size() == 101);
  SlotTable<int> small(2);
  uint32_t x = small.insert(std::make_unique<int>(1));
  small.insert(std::make_unique<int>(2));
  CHECK(small.insert(std::make_unique<int>(3)) == 0);  // full
  small.remove(x);
  uint32_t y = small.insert(std::make_unique<int>(4));
  CHECK(y == x);
  CHECK(small.generation(y) == 2);
  (void)gen;
}

TEST_CASE("slot table: a reader sees only whole objects while the writer inserts", "[shm]") {
  // What lets the control thread register MRs with no worker stopped (issue 29): a worker
  // looking slots up meanwhile finds nothing, or the object with every field `ready` set.
  struct Obj {
    uint32_t handle = 0;
    uint32_t key = 0;
  };
  constexpr uint32_t kObjects = 200'000;
  SlotTable<Obj> t(kObjects);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> seen{0}, torn{0};
  std::thread reader([&] {
    uint32_t h = 1;
    while (!done.load(std::memory_order_relaxed)) {
      if (const Obj *o = t.get(h)) {
        seen.fetch_add(1, std::memory_order_relaxed);
        if (o->handle != h || o->key != (h << 8 | t.generation(h))) torn++;
      }
      h = h % kObjects + 1;
    }
  });
  for (uint32_t i = 0; i < kObjects; i++)
    REQUIRE(t.insert(std::make_unique<Obj>(), 3, [](Obj &o, uint32_t h, uint8_t g) {
      o.handle = h;
      o.key = h << 8 | g;
    }) == i + 1);
  done = true;
  reader.join();
  CHECK(torn == 0);
  CHECK(t.size() == kObjects);
  CHECK(t.get(kObjects + 1) == nullptr);
  INFO("objects the reader met while they were being inserted: " << seen.load());
}

TEST_CASE("CPU lists: numbers and ranges in the order given, only allowed CPUs, none twice",
          "[cpus]") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  for (int cpu : {0, 1, 2, 3, 8}) CPU_SET(cpu, &allowed);
  CHECK(format_cpu_set(allowed) == "0-3,8");
  auto cpus = [&](const char *text) { return parse_cpu_list(text, allowed); };
  CHECK(*cpus("1") == std::vector<int>{1});
  CHECK(*cpus("3,0-2,8") == std::vector<int>{3, 0, 1, 2, 8});
  CHECK(*cpus("2-2") == std::vector<int>{2});
  for (const char *bad : {"", "x", "1,", ",1", "-1", "1-", "3-1", "1-2-3", "1,1", "0-2,2", "4",
                          "0-8", "5000", "99999999999"}) {
    INFO("'" << bad << "'");
    absl::StatusOr<std::vector<int>> r = cpus(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) CHECK(r.status().message().find(std::string("'") + bad + "'") == 0);
  }
  CHECK(std::string(cpus("4").status().message()) ==
        "'4': CPU 4 is not one vrnicd may run on (0-3,8)");
}

TEST_CASE("errno_of gives back the errno a Status was made from", "[control]") {
  CHECK(vrnic::errno_of(absl::OkStatus()) == 0);
  // Several errnos share a status code; the client is told the very one.
  CHECK(vrnic::errno_of(vrnic::errno_status(EMFILE, "dup")) == EMFILE);
  CHECK(vrnic::errno_of(vrnic::errno_status(ENOMEM, "mmap")) == ENOMEM);
  CHECK(vrnic::errno_of(vrnic::errno_status(EACCES, "open")) == EACCES);
  // A Status from elsewhere: an errno that fits its code.
  CHECK(vrnic::errno_of(absl::InvalidArgumentError("bad")) == EINVAL);
  CHECK(vrnic::errno_of(absl::ResourceExhaustedError("full")) == ENOMEM);
  CHECK(vrnic::errno_of(absl::InternalError("?")) == EIO);
}
