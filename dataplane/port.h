// A port backend: the MAC/PHY of the NIC. Small on purpose: bursts of packets in and out,
// and what the port is (MTU, addresses). Backends: loop (in-daemon delivery), later udp and
// dpdk. tx_burst takes ownership of the packets it accepts; rx_burst hands packets over.
#pragma once

#include <cstdint>

#include "packet.h"

namespace vrnic {

struct PortCounters {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_errors = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t rx_icrc_errors = 0;
  uint64_t rx_malformed = 0;
  uint64_t rx_no_buffer = 0;  // dropped: no free packet buffer to receive into
};

class Port {
 public:
  virtual ~Port() = default;
  virtual uint16_t tx_burst(Packet **pkts, uint16_t n) = 0;
  virtual uint16_t rx_burst(Packet **pkts, uint16_t n) = 0;
  // Packets accepted but not yet delivered (a port with none in flight is quiescent).
  virtual uint32_t in_flight() const = 0;
  virtual uint32_t mtu_bytes() const = 0;
  virtual const PortCounters &counters() const = 0;
};

}  // namespace vrnic
