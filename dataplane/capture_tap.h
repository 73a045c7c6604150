// A packet capture's tap in the dataplane (vrnicctl capture): while one runs, each worker
// writes the packets it hands its ports and those it takes from the wire into its ring
// (vrnic/capture_ring.h) as the Ethernet frames they are or would be on a wire. When none runs
// the workers pay one load of Device::capture per burst.
#pragma once

#include <cstdint>
#include <memory>

#include "packet.h"

namespace vrnic {

class CaptureTap {
 public:
  static constexpr uint32_t kAnyQp = ~0u;
  // region: capture::region_bytes(workers) of shared memory, zeroed. qpn: only the packets
  // this QP sends or is sent (kAnyQp: all).
  CaptureTap(void *region, uint32_t workers, uint32_t qpn)
      : region_(region), workers_(workers), qpn_(qpn), heads_(new Head[workers]()) {}

  // On worker `worker`: its packets of one burst, sent (to any port) or received (from the
  // wire: those of the loop port were recorded when sent).
  void record(uint32_t worker, Packet *const *pkts, uint16_t n, bool received) const;

 private:
  bool wanted(const Packet &p) const {
    return qpn_ == kAnyQp || p.src_qpn == qpn_ || p.bth().dest_qp() == qpn_;
  }
  void write(uint32_t worker, const Packet &p, bool received, uint64_t time_ns) const;

  void *region_;
  uint32_t workers_;
  uint32_t qpn_;
  // Each worker's head, its own: the ring's copy is only published for the reader, which
  // could write it (issue 52: nothing the reader writes decides where a worker writes).
  struct alignas(64) Head {
    uint64_t bytes;
  };
  std::unique_ptr<Head[]> heads_;
};

}  // namespace vrnic
