// The one clock of the dataplane and the control thread: CLOCK_MONOTONIC in nanoseconds
// (timer deadlines are compared across workers, so all must read the same clock). It is also
// the device's free-running clock that completion timestamps are read in (hca_core_clock
// 1 GHz), in vrnicd and in the provider alike; a wall-clock timestamp is one of them moved by
// the offset of CLOCK_REALTIME from it.
#pragma once

#include <time.h>

#include <cstdint>

namespace vrnic {

inline uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t monotonic_ns() {
  return clock_ns(CLOCK_MONOTONIC);
}

}  // namespace vrnic
