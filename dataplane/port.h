// A port backend: the MAC/PHY of the NIC. Small on purpose: bursts of packets in and out,
// and what the port is (MTU, link). Backends: loop (in-daemon delivery), udp (kernel
// sockets) and dpdk (a module vrnicd loads when asked for it). tx_burst takes ownership of
// the packets it accepts; rx_burst hands packets over.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "fault_injector.h"
#include "vrnic/counters.h"
#include "packet.h"

namespace vrnic {

class Port {
 public:
  virtual ~Port() = default;
  virtual uint16_t tx_burst(Packet **pkts, uint16_t n) = 0;
  virtual uint16_t rx_burst(Packet **pkts, uint16_t n) = 0;
  // Packets accepted but not yet delivered (a port with none in flight is quiescent).
  virtual uint32_t in_flight() const = 0;
  // The port holds as many frames as its device should have queued (its TX queue full and a
  // backlog behind it): the worker makes no new packets until it drains, as a NIC's send
  // engine stops fetching WQEs, rather than have the port drop what it cannot queue. (A port
  // that holds packets from the worker's pool until they are sent is held back by the pool.)
  virtual bool tx_full() const { return false; }
  virtual uint32_t mtu_bytes() const = 0;
  virtual const PortCounters &counters() const = 0;
  // The port's own address as a RoCEv2 GID (an IPv4-mapped or IPv6 address); nullptr for a
  // port without one (loop).
  virtual const uint8_t *gid() const { return nullptr; }
  // Whether the link is up. Any thread may ask (the control thread watches it).
  virtual bool link_up() const { return true; }
  // The longest the worker may sleep without polling: 0 when the port wakes it itself (an
  // eventfd, an interrupt), else how often it must look for packets.
  virtual uint64_t max_sleep_ns() const { return 0; }
  // A port whose device can raise an RX interrupt arms it before its worker sleeps and returns
  // a descriptor that turns readable when a frame arrives; the worker sleeps on it next to its
  // own wake eventfd (up to max_sleep_ns(), which arming may lengthen) and calls
  // rx_interrupt_done() when it wakes. -1: not now, the worker polls.
  virtual int arm_rx_interrupt() { return -1; }
  virtual void rx_interrupt_done() {}
  // A peer the device will soon send to (a connected QP going to RTR, an address handle):
  // a port that resolves link addresses itself starts now, as a RoCE NIC's driver resolves
  // the destination MAC when the QP is modified, so that the first burst does not find the
  // peer unresolved (and overflow what may wait for it). Called on the port's worker.
  virtual void resolve(const uint8_t * /*peer_gid*/) {}
  // Fault injection on the receive path, for ports on a wire.
  virtual void set_faults(const FaultConfig &) {}
  // The multicast groups whose datagrams this port is to receive from the wire (it joins them
  // and leaves the others); a port without a network that has multicast ignores it.
  virtual void set_multicast_groups(const std::vector<std::array<uint8_t, 16>> & /*gids*/) {}
  virtual const FaultCounters *fault_counters() const { return nullptr; }
};

}  // namespace vrnic
