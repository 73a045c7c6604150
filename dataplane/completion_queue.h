// vrnicd's side of a completion queue: it produces CQEs into the ring shared with the
// provider and raises completion events when the application armed the CQ.
#pragma once

#include <cstdint>

#include "spin_lock.h"
#include "vrnic/shm_layout.h"

namespace vrnic {

class CompletionQueue {
 public:
  uint32_t handle = 0;
  uint32_t session = 0;
  uint32_t payer = 0;  // the uid charged for it (control/session.h: Session::pay)
  uint64_t cookie = 0;   // the provider's ibv_cq, echoed in events
  uint32_t channel = 0;  // completion channel handle, or 0
  int channel_fd = -1;   // its pipe (not owned), or -1
  int async_fd = -1;     // the session's async-event pipe (not owned)
  shm::CqShared *shared = nullptr;
  shm::Cqe *ring = nullptr;
  uint64_t *stamps = nullptr;  // each slot's time, for a CQ that stamps its completions
  uint32_t mask = 0;  // slots - 1
  uint32_t producer = 0;
  bool overrun_reported = false;
  uint32_t refs = 0;          // QPs using it
  bool multi_worker = false;  // producers on several workers: push() takes the lock
  SpinLock lock;

  // Writes a completion (and its time, if the CQ stamps them); false when the ring is full
  // (the CQ is then in error).
  bool push(const shm::Cqe &cqe, bool solicited);
  // Takes a CQ region (shm::cq_region_bytes(slots, stamped) bytes) as its memory.
  void lay_out(void *region, uint32_t slots, bool stamped);
  size_t region_bytes() const { return shm::cq_region_bytes(mask + 1, stamps != nullptr); }
};

}  // namespace vrnic
