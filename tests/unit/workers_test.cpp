// What several workers rely on: the SPSC ring packets and doorbells cross on, and the choice
// of which QP to move when their loads are uneven.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "control/load_balance.h"
#include "dataplane/spsc_ring.h"

using vrnic::choose_move;
using vrnic::QpLoad;
using vrnic::SpscRing;

TEST_CASE("SpscRing: FIFO, refuses when full, empty after draining", "[workers]") {
  SpscRing<int> ring(4);
  int v[5] = {0, 1, 2, 3, 4};
  CHECK(ring.empty());
  CHECK(ring.pop() == nullptr);
  for (int i = 0; i < 4; i++) CHECK(ring.push(&v[i]));
  CHECK_FALSE(ring.push(&v[4]));  // full: nothing lost, the caller decides
  for (int i = 0; i < 4; i++) CHECK(ring.pop() == &v[i]);
  CHECK(ring.pop() == nullptr);
  CHECK(ring.empty());
  CHECK(ring.push(&v[4]));  // wraps around
  CHECK(ring.pop() == &v[4]);
}

TEST_CASE("SpscRing: a million items across two threads arrive once each, in order", "[workers]") {
  constexpr uintptr_t kItems = 1'000'000;
  SpscRing<void> ring(1024);
  std::thread producer([&] {
    for (uintptr_t i = 1; i <= kItems; i++)
      while (!ring.push(reinterpret_cast<void *>(i))) std::this_thread::yield();
  });
  uintptr_t expect = 1;
  bool in_order = true;
  while (expect <= kItems) {
    void *p = ring.pop();
    if (!p) continue;
    in_order = in_order && reinterpret_cast<uintptr_t>(p) == expect;
    expect++;
  }
  producer.join();
  CHECK(in_order);
  CHECK(ring.empty());
}

TEST_CASE("choose_move: balanced or idle workers stay as they are", "[workers]") {
  CHECK_FALSE(choose_move({}, 2));
  CHECK_FALSE(choose_move({{0x10, 0, 5000}, {0x11, 1, 4000}}, 2));  // within 2x
  CHECK_FALSE(choose_move({{0x10, 0, 900}}, 2));                    // too little to matter
  CHECK_FALSE(choose_move({{0x10, 0, 90000}}, 1));                  // one worker
  CHECK_FALSE(choose_move({{0x10, 0, 90000}}, 2));  // one busy QP: moving it only swaps roles
}

TEST_CASE("choose_move: the QP nearest half the gap goes from the busiest to the idlest",
          "[workers]") {
  std::vector<QpLoad> qps = {{0x10, 0, 40000}, {0x11, 0, 25000}, {0x12, 0, 5000},
                             {0x13, 1, 2000},  {0x14, 2, 30000}, {0x15, 0, 0}};
  auto m = choose_move(qps, 3);
  REQUIRE(m);
  CHECK(m->from == 0);    // 70000 packets
  CHECK(m->to == 1);      // 2000
  CHECK(m->qpn == 0x10);  // 40000 is nearest half the gap (68000 / 2) among those below it
  CHECK(m->from_load == 70000);
  CHECK(m->to_load == 2000);
}

TEST_CASE("choose_move: never a QP as busy as the gap (the workers would swap roles)",
          "[workers]") {
  CHECK_FALSE(choose_move({{0x10, 0, 50000}, {0x11, 1, 10000}}, 2));  // gap 40000
  auto m = choose_move({{0x10, 0, 70000}, {0x11, 0, 8000}, {0x12, 1, 2000}}, 2);
  REQUIRE(m);
  CHECK(m->qpn == 0x11);  // 70000 misses half the gap (38000) by more than 8000 does
}
