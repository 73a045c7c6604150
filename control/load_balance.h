// Which QP to move between workers, from each QP's packets over the last period: one move at
// a time, from the busiest worker to the idlest, when it is worth it (a real load, the busiest
// at least twice the idlest) and it evens them out best (the QP's load nearest half the gap,
// below the gap so the two do not swap roles).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace vrnic {

struct QpLoad {
  uint32_t qpn;
  uint32_t worker;
  uint64_t packets;  // in and out over the period
};

struct QpMove {
  uint32_t qpn;
  uint32_t from, to;
  uint64_t from_load, to_load;
};

inline constexpr uint64_t kMinGapPackets = 1000;  // per period: below it, nothing is worth moving

std::optional<QpMove> choose_move(const std::vector<QpLoad> &qps, uint32_t workers);

}  // namespace vrnic
