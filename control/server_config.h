// What one device (virtual NIC) of vrnicd is started with: its socket, workers, wire port
// and limits, from vrnicd's command line.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dataplane/dpdk_port.h"
#include "dataplane/fault_injector.h"
#include "dataplane/udp_port.h"
#include "quota.h"

namespace vrnic {

struct ServerConfig {
  std::string socket_path;
  uint32_t device_index = 0;
  uint32_t workers = 1;
  std::vector<int> worker_cpus;  // worker i runs on worker_cpus[i % size]; empty: anywhere
  // The wire: none (loop only: every peer is a local process), a udp port or a dpdk port.
  bool udp = false;
  UdpPortConfig udp_port;
  bool dpdk = false;
  DpdkPortConfig dpdk_port;
  FaultConfig faults;  // on the wire port's receive path
  UserLimits limits;   // per user, on this device
  // The socket: owner-only (0600) unless a group is given, then 0660 for that group (a root
  // vrnicd serving several users).
  gid_t socket_group = gid_t(-1);
  // Whether clients may run work requests between this device's QPs themselves (the
  // same-host direct path, provider/direct_path.h); --no-direct-path keeps every one on the
  // workers.
  bool direct_path = true;
  // Selective repeat with every RC peer (Device::selective_repeat): only where all of them
  // are vrnic, since a Sack means nothing to another RoCE NIC.
  bool selective_repeat = false;
  // A loop-only device also takes the host's interface addresses as GIDs
  // (Device::add_host_addresses); --no-host-addresses keeps it at 127.0.0.1.
  bool host_addresses = true;
  // The listening socket systemd passed (socket activation), or -1: vrnicd makes its own.
  int inherited_listen_fd = -1;
  // serve() returns once no client has been connected for this long (0: never).
  unsigned exit_idle_seconds = 0;
  bool autostarted = false;  // reported by kListDevices
};

}  // namespace vrnic
