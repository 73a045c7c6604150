// Producing completions into a CQ ring shared with the provider, and its events
// (completion_queue.h).
#include "completion_queue.h"

#include <infiniband/verbs.h>

#include "events.h"
#include "vrnic/clock.h"
#include "vrnic/ctl_protocol.h"

namespace vrnic {

void CompletionQueue::lay_out(void *region, uint32_t slots, bool stamped) {
  shared = static_cast<shm::CqShared *>(region);
  ring = shm::cq_ring(region);
  stamps = stamped ? shm::cq_stamps(region, slots) : nullptr;
  mask = slots - 1;
}

bool CompletionQueue::push(const shm::Cqe &cqe, bool solicited) {
  SharedGuard guard(lock, multi_worker);
  uint32_t consumer = shared->ring.consumer.load(std::memory_order_acquire);
  if (producer - consumer > mask) {
    if (!overrun_reported) {
      overrun_reported = true;
      shared->overrun.store(1, std::memory_order_relaxed);
      raise_event(async_fd, IBV_EVENT_CQ_ERR, cookie);
    }
    return false;
  }
  ring[producer & mask] = cqe;
  if (stamps) stamps[producer & mask] = monotonic_ns();
  producer++;
  // seq_cst pairs with the provider's arm-then-poll: either it sees this CQE or we see the arm.
  shared->ring.producer.store(producer, std::memory_order_seq_cst);
  uint32_t notify = shared->notify.load(std::memory_order_seq_cst);
  if (notify == shm::kNotifyNext || (notify == shm::kNotifySolicited && solicited)) {
    if (shared->notify.exchange(shm::kNotifyNone) != shm::kNotifyNone)
      raise_event(channel_fd, ctl::kEventCompletion, cookie);
  }
  return true;
}

}  // namespace vrnic
