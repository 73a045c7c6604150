// The loop port: packets between QPs of one vrnicd, through an in-daemon ring (loop_port.h).
#include "loop_port.h"

#include <bit>

namespace vrnic {

LoopPort::LoopPort(uint32_t capacity)
    : ring_(std::bit_ceil(capacity)), mask_(std::bit_ceil(capacity) - 1) {}

uint16_t LoopPort::tx_burst(Packet **pkts, uint16_t n) {
  uint16_t i = 0;
  for (; i < n && tail_ - head_ < ring_.size(); i++) ring_[tail_++ & mask_] = pkts[i];
  return i;
}

uint16_t LoopPort::rx_burst(Packet **pkts, uint16_t n) {
  uint16_t i = 0;
  for (; i < n && head_ != tail_; i++) pkts[i] = ring_[head_++ & mask_];
  return i;
}

}  // namespace vrnic
