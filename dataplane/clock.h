// The one clock of the dataplane and the control thread: CLOCK_MONOTONIC in nanoseconds
// (timer deadlines are compared across workers, so all must read the same clock).
#pragma once

#include <time.h>

#include <cstdint>

namespace vrnic {

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace vrnic
