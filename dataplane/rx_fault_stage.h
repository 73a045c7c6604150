// A port's receive path under injected faults: frames as they come off the wire, before any
// check, are lost, damaged, duplicated, held back behind their successor or delayed, as a
// faulty network would deliver them. Shared by every wire port; off (and free) when no fault
// is configured.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fault_injector.h"
#include "packet.h"

namespace vrnic {

// A received frame: the packet that carries it and its bytes (the UDP payload, BTH to ICRC),
// which lie in the packet's bounce buffer or in a port's own buffer the packet holds.
struct RxFrame {
  Packet *pkt;
  uint8_t *data;
  uint32_t len;
};

class RxFaultStage {
 public:
  using Deliver = void (*)(void *port, RxFrame frame);
  RxFaultStage(PacketPool &pool, Deliver deliver, void *port)
      : pool_(pool), deliver_(deliver), port_(port) {}
  ~RxFaultStage();

  bool active() const { return faults_ != nullptr; }
  // No fault configured: frames held back are delivered now and the stage turns off.
  void configure(const FaultConfig &cfg);
  const FaultCounters *counters() const { return faults_ ? &faults_->counters() : nullptr; }
  // A frame off the wire, while active(); it reaches deliver() now, later or never.
  void push(RxFrame frame);
  // Delivers the delayed frames whose time has come.
  void release_due();

 private:
  void deliver_or_delay(RxFrame frame);

  PacketPool &pool_;
  Deliver deliver_;
  void *port_;
  std::unique_ptr<FaultInjector> faults_;
  RxFrame held_{};  // reordering: delivered after the next frame
  struct Delayed {
    uint64_t due_ns;
    RxFrame frame;
  };
  std::vector<Delayed> delayed_;  // in arrival order, so in due order too
  size_t delayed_head_ = 0;
};

}  // namespace vrnic
