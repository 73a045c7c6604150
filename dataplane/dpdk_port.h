// The dpdk port: RoCEv2 on a real Ethernet device (or any Linux interface through AF_XDP or
// AF_PACKET, or another process through memif) driven by DPDK, bypassing the kernel. vrnicd
// builds its own Ethernet, IPv4 and UDP headers, answers and asks ARP, and sends payloads
// straight from registered memory (mbufs with external buffers) where the device takes
// chained mbufs.
//
// DPDK lives in a module (vrnic_port_dpdk.so) that vrnicd loads only when a device uses this
// port, so vrnicd runs its other ports on machines without DPDK's libraries. This header is
// the boundary: no DPDK type crosses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "packet.h"
#include "port.h"

namespace vrnic {

struct DpdkPortConfig {
  std::string address;                // IPv4 literal: the port's address, GID 0
  std::vector<std::string> eal_args;  // for rte_eal_init (--vdev, -a PCI, --no-huge, ...)
  uint16_t udp_port = 4791;
  // Several workers: one port each on the same device. Worker 0's (queue 0) sets the device
  // up with `queues` RX and TX queue pairs; each port receives and sends on its own.
  uint16_t queue = 0;
  uint16_t queues = 1;
  // The vrnicd device (vrnic0, vrnic1, ...) the port belongs to: each has an ethdev of its own,
  // the one its eal_args name (--vdev NAME,..., -a PCI) or else the first no other device has.
  // The EAL is set up once per process, by the first device's arguments; a later device's
  // arguments add its own device (hot-plugged) and otherwise are the same or none.
  uint32_t device = 0;
};

// Loads the module ($VRNIC_DPDK_MODULE, else vrnic_port_dpdk.so next to the running vrnicd)
// and opens the port: EAL set up once per process, the device's ethdev, one RX and one TX
// queue.
absl::StatusOr<std::unique_ptr<Port>> open_dpdk_port(const DpdkPortConfig &cfg, PacketPool &pool);

// The module's entry point (dlsym name kDpdkPortOpenSymbol): a new port, or nullptr and *error.
using DpdkPortOpenFn = Port *(*)(const DpdkPortConfig *cfg, PacketPool *pool, std::string *error);
inline constexpr const char *kDpdkPortOpenSymbol = "vrnic_dpdk_port_open";

}  // namespace vrnic
