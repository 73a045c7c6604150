// The device state of the dpdk module, apart from its queues' (queue_port.h): one ethdev per
// vrnicd device, shared by the ports of all its workers (an RX and a TX queue each), with its
// mempools, link, address and the neighbour table every worker looks peers up in.
#pragma once

#include <rte_mempool.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "dataplane/ethernet.h"
#include "dataplane/neighbor_table.h"
#include "internal.h"

namespace vrnic::dpdk {

// What the workers' ports share: one ethdev (an RX and a TX queue per worker), its mempools
// and link, and the neighbour table (an ARP reply arrives on whichever queue the device
// picks; every worker looks addresses up).
struct SharedDevice {
  bool configured = false;
  uint16_t port_id = 0;
  uint16_t queues = 1;  // TX queues, one per worker
  bool started = false;
  std::atomic<bool> running{false};
  rte_mempool *mbufs = nullptr;
  rte_mempool *ext_mbufs = nullptr;
  rte_mempool *rx_mbufs = nullptr;  // received into: mbufs, or larger ones for jumbo memif
  bool zero_copy = false;
  bool memif = false;
  bool announced = false;
  uint64_t next_restart = 0;
  MacAddress mac{};
  bool ipv6 = false;  // the port's one address is IPv6 (neighbour discovery), else IPv4 (ARP)
  uint8_t ip[4] = {};
  uint8_t gid[16] = {};        // the address as a GID (IPv4 mapped)
  MacAddress solicited_mac{};  // IPv6: the group solicitations for our address are sent to
  uint16_t udp_port = 4791;
  uint32_t mtu = 1024;
  std::string iface;
  std::atomic<bool> link_up{true};
  bool rx_interrupts = false;  // started with RX interrupts asked for (intr_conf.rxq)
  // A restart of the device (a memif client reconnecting) while other workers use their
  // queues: the restarter sets `pausing`, then waits until no other worker is inside the
  // device; a worker marks itself inside, then enters only if no restart is pausing it. Both
  // sides store, then load (seq_cst): one of them always sees the other.
  std::atomic<bool> pausing{false};
  std::atomic<bool> in_device[kMaxQueues] = {};
  std::mutex neighbors_mu;
  NeighborTable neighbors;  // under neighbors_mu
};

// One per vrnicd device (vrnicd has at most kMaxDevices).
constexpr uint32_t kMaxDevices = 8;
extern std::array<SharedDevice, kMaxDevices> g_devices;

// The ethdev a device's EAL arguments name (the first of them), else the first one no other
// device has.
bool find_ethdev(const std::vector<std::string> &eal_args, uint32_t device, uint16_t *port_id,
                 std::string *error);

}  // namespace vrnic::dpdk
