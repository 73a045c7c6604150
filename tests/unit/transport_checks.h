// What the transport's unit tests check with, besides the harness (transport_harness.h):
// memory filled and compared, a wire that drops one packet, the one completion of an end.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>

#include "transport_harness.h"

namespace vrnic::testing {

inline void fill(QpEnd &end, size_t offset, size_t length, uint8_t seed) {
  for (size_t i = 0; i < length; i++) end.mem[offset + i] = uint8_t(seed + i * 7 + i / 251);
}

inline bool same(const QpEnd &x, size_t x_off, const QpEnd &y, size_t y_off, size_t length) {
  return std::memcmp(x.mem.data() + x_off, y.mem.data() + y_off, length) == 0;
}

// Drops the first packet the predicate matches, once.
inline WireScript drop_once(std::function<bool(const WireRecord &)> match) {
  auto done = std::make_shared<bool>(false);
  return [match, done](const WireRecord &r, Packet &) {
    if (*done || !match(r)) return Fate::kDeliver;
    *done = true;
    return Fate::kDrop;
  };
}

// The one send completion the end has; the test fails unless there is exactly one.
inline shm::Cqe one_send_completion(QpEnd &end) {
  std::vector<shm::Cqe> cqes = end.poll_send_cq();
  REQUIRE(cqes.size() == 1);
  return cqes[0];
}

inline bool is(const WireRecord &r, char from, uint8_t operation, uint32_t psn) {
  return r.from == from && wire::op_operation(r.opcode) == operation && r.psn == psn;
}

}  // namespace vrnic::testing
