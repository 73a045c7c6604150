// The loop port: packets sent are received by the same device, in order, with no wire. The
// payload stays where it was referenced until the receiver copies it to its destination: one
// copy from source memory to destination memory.
#pragma once

#include <vector>

#include "port.h"

namespace vrnic {

class LoopPort final : public Port {
 public:
  explicit LoopPort(uint32_t capacity);
  uint16_t tx_burst(Packet **pkts, uint16_t n) override;
  uint16_t rx_burst(Packet **pkts, uint16_t n) override;
  uint32_t in_flight() const override { return tail_ - head_; }
  uint32_t mtu_bytes() const override { return 4096; }
  const PortCounters &counters() const override { return counters_; }

 private:
  std::vector<Packet *> ring_;
  uint32_t mask_;
  uint32_t head_ = 0, tail_ = 0;
  PortCounters counters_;  // nothing crosses a wire: the device counters tell the story
};

}  // namespace vrnic
