// The device as the data path sees it: its identity and limits, GID table, rkey resolution
// (device.h).
#include "device.h"

#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace vrnic {

uint32_t kernel_interface_of(const uint8_t gid[16]) {
  static const uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4 = std::memcmp(gid, kV4Mapped, 12) == 0;
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t found = 0;
  for (ifaddrs *a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || !a->ifa_netmask) continue;
    const uint8_t *addr, *mask, *want = v4 ? gid + 12 : gid;
    size_t len;
    if (v4 && a->ifa_addr->sa_family == AF_INET) {
      addr = reinterpret_cast<const uint8_t *>(
          &reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr);
      mask = reinterpret_cast<const uint8_t *>(
          &reinterpret_cast<sockaddr_in *>(a->ifa_netmask)->sin_addr);
      len = 4;
    } else if (!v4 && a->ifa_addr->sa_family == AF_INET6) {
      addr = reinterpret_cast<sockaddr_in6 *>(a->ifa_addr)->sin6_addr.s6_addr;
      mask = reinterpret_cast<sockaddr_in6 *>(a->ifa_netmask)->sin6_addr.s6_addr;
      len = 16;
    } else {
      continue;
    }
    bool match = true;
    for (size_t i = 0; i < len && match; i++) match = ((addr[i] ^ want[i]) & mask[i]) == 0;
    if (match) found = if_nametoindex(a->ifa_name);
  }
  freeifaddrs(list);
  return found;
}

uint32_t Device::add_host_addresses() {
  ifaddrs *list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t added = 0, index = 1;
  for (ifaddrs *a = list; a && index < ctl::kGidTableLen; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    uint8_t gid[16] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      gid[10] = gid[11] = 0xff;
      std::memcpy(gid + 12, &reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr, 4);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const in6_addr &v6 = reinterpret_cast<sockaddr_in6 *>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&v6)) continue;  // meaningful only with its interface
      std::memcpy(gid, v6.s6_addr, 16);
    } else {
      continue;
    }
    if (is_local_gid(gid)) continue;  // on two interfaces: one GID
    while (index < ctl::kGidTableLen && info.gids[index].type != ctl::kGidEmpty) index++;
    if (index == ctl::kGidTableLen) break;
    set_gid(index, gid, 1, if_nametoindex(a->ifa_name));  // IBV_GID_TYPE_SYSFS_ROCE_V2
    added++;
  }
  freeifaddrs(list);
  return added;
}

Device::Device(uint32_t index) {
  std::snprintf(info.name, sizeof(info.name), "vrnic%u", index);
  // Random per device and run, in the locally administered EUI-64 space (0x02 in the top
  // octet): the CM's REQs carry it, and a constant one was half of what a forged "stale" REQ
  // needed to tear another user's connection down (issue 28, row 8).
  info.node_guid = 0x0200000000000000ull |
                   ((uint64_t(::arc4random()) << 32 | ::arc4random()) & 0x00ffffffffffffffull);
  info.sys_image_guid = info.node_guid;
  info.vendor_id = kVrnicVendorId;
  info.vendor_part_id = 1;
  info.hw_ver = 1;
  // Every user's together (Device::capacity): four times one user's default quota
  // (vrnic/quotas.h); the server lowers what each context is told to its user's share.
  info.max_qp = (1u << kQpnIndexBits) - kQpnBase;
  info.max_qp_wr = 16384;
  info.max_sge = shm::kMaxSge;
  info.max_cq = 1u << 18;
  info.max_cqe = 1u << 20;
  info.max_mr = 1u << 22;
  info.max_pd = 1u << 18;
  info.max_qp_rd_atom = kMaxRdAtomic;
  info.max_ah = 1u << 18;
  info.max_inline = shm::kMaxInline;
  info.max_srq = 1u << 18;
  info.max_srq_wr = 16384;
  info.max_mr_size = 1ull << 40;
  info.max_dm_size = 1ull << 20;
  // Multicast within this vrnicd, as rxe bounds it.
  info.max_mcast_grp = 8192;
  info.max_mcast_qp_attach = 56;
  info.max_total_mcast_qp_attach = 0x70000;  // one ibv_alloc_dm; each is charged to its user's mr_bytes
  info.max_mw = 1u << 18;  // the MW table's size
  capacity = {info.max_qp, info.max_cq, info.max_mr, info.max_pd,
              info.max_ah, info.max_srq, info.max_mw};
  std::snprintf(info.fw_ver, sizeof(info.fw_ver), "0.1.0");
  info.port_state = IBV_PORT_ACTIVE;
  info.port_max_mtu = IBV_MTU_4096;
  info.port_active_mtu = IBV_MTU_4096;
  info.active_speed = 32;  // EDR (25 Gb/s per lane)
  info.active_width = 2;   // 4x
  info.num_workers = 1;
  for (ctl::GidEntry &e : info.gids) e.type = ctl::kGidEmpty;
  // GID 0: RoCEv2, IPv4-mapped 127.0.0.1 (the loop port's address).
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  set_gid(0, loopback, 1, kernel_interface_of(loopback));  // IBV_GID_TYPE_SYSFS_ROCE_V2
}

void Device::set_gid(uint32_t index, const uint8_t gid[16], uint32_t type, uint32_t ndev_ifindex) {
  ctl::GidEntry &e = info.gids[index % ctl::kGidTableLen];
  std::memcpy(e.gid, gid, 16);
  e.type = type;
  e.ndev_ifindex = ndev_ifindex;
  nlocal_gids_ = 0;
  for (const ctl::GidEntry &g : info.gids)
    if (g.type != ctl::kGidEmpty) std::memcpy(local_gids_[nlocal_gids_++].data(), g.gid, 16);
}

const MemoryRegion *Device::resolve_rkey(const QueuePair &qp, uint32_t rkey, uint64_t va,
                                         uint64_t len, uint32_t right) const {
  if (!(qp.attr.qp_access_flags & right)) return nullptr;
  if (rkey & kMwKeyBit) {
    SharedGuard guard(mw_lock, shared_windows());
    const MemoryWindow *mw = mw_by_key(rkey);
    if (!mw || !mw->bound || mw->pd != qp.pd || !(mw->access & right)) return nullptr;
    if (mw->type == IBV_MW_TYPE_2 && mw->qpn != qp.qpn) return nullptr;
    if (va < mw->va || len > mw->length || va - mw->va > mw->length - len) return nullptr;
    const MemoryRegion *mr = mr_by_key(mw->mr_key);
    return mr && mr->contains(va, len) ? mr : nullptr;
  }
  const MemoryRegion *mr = mr_by_key(rkey);
  if (!mr || mr->pd != qp.pd || !(mr->access & right) || !mr->contains(va, len)) return nullptr;
  return mr;
}

}  // namespace vrnic
