// The requests a responder received ahead of the PSN it expects, kept until the missing ones
// come (then executed in PSN order, as if they had arrived in order), rather than dropped
// and sent again: with it a lost packet costs one packet, not everything sent after it. A
// copy of each (a packet of the host's pool, its payload in the packet's own buffer): the
// port's buffer goes back when the packet is delivered, and a loop-port packet may point
// into the sender's memory.
//
// Slots by PSN modulo kSlots, over [expected PSN, expected PSN + kSlots): the most a vrnic
// requester has outstanding (SendWindow's ceiling). Tables come from the host's pool
// (table_pool.h) at a QP's first out-of-order packet and go back once it holds none.
#pragma once

#include <cstdint>

#include "packet.h"
#include "table_pool.h"
#include "vrnic/wire.h"

namespace vrnic {

class HeldPackets {
 public:
  static constexpr uint32_t kSlots = 512;

  void clear() {
    for (Packet *&p : slots_) p = nullptr;
    count_ = 0;
  }
  bool empty() const { return count_ == 0; }
  uint32_t size() const { return count_; }
  // The highest PSN held (only when not empty).
  uint32_t high() const { return high_; }

  // The packet held for `psn`, nullptr if none.
  Packet *at(uint32_t psn) const {
    Packet *p = slots_[psn % kSlots];
    return p && p->bth().psn() == psn ? p : nullptr;
  }
  // Keeps `pkt` (its PSN within kSlots of the expected one, not held yet); returns what its
  // slot held before, if anything: a PSN the expected one has passed without taking it (a
  // requester's PSNs that no request of its used), for the caller to free.
  Packet *put(Packet *pkt) {
    uint32_t psn = pkt->bth().psn();
    if (!count_ || wire::psn_diff(psn, high_) > 0) high_ = psn;
    Packet *stale = slots_[psn % kSlots];
    slots_[psn % kSlots] = pkt;
    if (!stale) count_++;
    return stale;
  }
  // Takes the packet held for `psn` out of the table; nullptr if none.
  Packet *take(uint32_t psn) {
    Packet *p = at(psn);
    if (p) {
      slots_[psn % kSlots] = nullptr;
      count_--;
    }
    return p;
  }
  // Hands every held packet to `free` and empties the table.
  template <typename Free>
  void free_all(Free &&free) {
    for (Packet *&p : slots_) {
      if (!p) continue;
      free(p);
      p = nullptr;
    }
    count_ = 0;
  }

 private:
  Packet *slots_[kSlots] = {};
  uint32_t count_ = 0;
  uint32_t high_ = 0;
};

using HeldPacketsPool = TablePool<HeldPackets>;

}  // namespace vrnic
