// The ethdevs of vrnicd's dpdk devices (shared_device.h).
#include "shared_device.h"

#include <rte_ethdev.h>

#include "eal.h"

namespace vrnic::dpdk {

std::array<SharedDevice, kMaxDevices> g_devices;

bool find_ethdev(const std::vector<std::string> &eal_args, uint32_t device, uint16_t *port_id,
                 std::string *error) {
  auto taken_by = [&](uint16_t pid) {
    for (uint32_t d = 0; d < kMaxDevices; d++)
      if (d != device && g_devices[d].configured && g_devices[d].port_id == pid) return int(d);
    return -1;
  };
  const std::vector<std::string> named = split_eal_args(eal_args).devices;
  if (named.empty()) {
    uint16_t pid;
    RTE_ETH_FOREACH_DEV(pid) {
      if (taken_by(pid) >= 0) continue;
      *port_id = pid;
      return true;
    }
    *error = "no Ethernet device (give one with --vdev or a PCI address in the EAL arguments)";
    return false;
  }
  const std::string name = named.front().substr(0, named.front().find(','));
  bool found = rte_eth_dev_get_port_by_name(name.c_str(), port_id) == 0;
  if (!found) {  // a PCI address as the user wrote it ("03:00.0"), matched by its bus
    rte_dev_iterator it;
    uint16_t pid;
    RTE_ETH_FOREACH_MATCHING_DEV(pid, name.c_str(), &it) {
      *port_id = pid;
      found = true;
      rte_eth_iterator_cleanup(&it);
      break;
    }
  }
  if (!found) {
    *error = "no Ethernet device " + name;
    return false;
  }
  if (int other = taken_by(*port_id); other >= 0) {
    *error = name + " is vrnic" + std::to_string(other) + "'s device";
    return false;
  }
  return true;
}

}  // namespace vrnic::dpdk
