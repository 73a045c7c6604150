// Consuming receive WQEs from a QP's ring or an SRQ, and the SRQ limit event
// (receive_queue.h).
#include "receive_queue.h"

#include <infiniband/verbs.h>

#include "events.h"

namespace vrnic {

void ReceiveQueue::pop() {
  consumer++;
  indices->consumer.store(consumer, std::memory_order_release);
  if (!limit) return;
  uint32_t mark = limit->load(std::memory_order_relaxed);
  uint32_t left = indices->producer.load(std::memory_order_acquire) - consumer;
  if (mark && left < mark && limit->exchange(0) != 0)
    raise_event(async_fd, IBV_EVENT_SRQ_LIMIT_REACHED, cookie);
}

}  // namespace vrnic
