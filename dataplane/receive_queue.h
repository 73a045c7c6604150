// A receive queue as the responder consumes it: a QP's own, or a shared receive queue (SRQ)
// that several QPs draw from. The provider produces receive WQEs into the shared ring.
#pragma once

#include <atomic>
#include <cstdint>

#include "spin_lock.h"
#include "vrnic/shm_layout.h"

namespace vrnic {

class CompletionQueue;

class ReceiveQueue {
 public:
  shm::RingIndices *indices = nullptr;
  shm::RecvWqe *ring = nullptr;
  uint32_t mask = 0;
  uint32_t consumer = 0;

  // SRQ only.
  std::atomic<uint32_t> *limit = nullptr;  // armed low-water mark, 0 when disarmed
  uint32_t handle = 0;
  uint32_t session = 0;
  uint32_t payer = 0;  // the uid charged for it (control/session.h: Session::pay)
  uint32_t pd = 0;
  // XRC SRQ: its XRC domain (vrnicd's number for it, never 0) and its own completion queue;
  // the target QPs of the domain deliver to it by its number (the XRCETH's).
  uint32_t xrcd = 0;
  CompletionQueue *cq = nullptr;
  uint64_t cookie = 0;
  int async_fd = -1;
  uint32_t refs = 0;
  bool multi_worker = false;  // an SRQ drawn from by several workers: consumers take the lock
  SpinLock lock;

  bool empty() const { return consumer == indices->producer.load(std::memory_order_acquire); }
  const shm::RecvWqe &head() const { return ring[consumer & mask]; }
  // Consumes the head WQE; an SRQ raises its limit event when it runs low.
  void pop();
  // Discards everything posted so far (a QP's own queue on reset).
  void discard() {
    consumer = indices->producer.load(std::memory_order_acquire);
    indices->consumer.store(consumer, std::memory_order_release);
  }
};

}  // namespace vrnic
