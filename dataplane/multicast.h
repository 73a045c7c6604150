// Multicast groups as the data path sees them: which UD QPs are attached to each multicast
// GID (ibv_attach_mcast). An immutable snapshot the control side replaces whole on every
// attach and detach (control/multicast.cpp) and frees after a grace period, so a worker reads
// it with one load and no lock. A UD datagram to a multicast GID and QPN 0xFFFFFF is delivered
// to every member on this vrnicd (Worker::receive), each with its own Q_Key check.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace vrnic {

// IBA 9.6.1.1: the destination QPN of every multicast datagram.
inline constexpr uint32_t kMulticastQpn = 0xffffff;

// An IPv6 multicast address (ff00::/8), or an IPv4-mapped one of 224.0.0.0/4, as RoCEv2 GIDs
// carry IPv4 groups (the kernel's rdma_is_multicast_addr).
inline bool is_multicast_gid(const uint8_t gid[16]) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (gid[0] == 0xff) return true;
  return std::memcmp(gid, kMapped, 12) == 0 && (gid[12] & 0xf0) == 0xe0;
}

struct MulticastGroups {
  struct Group {
    std::array<uint8_t, 16> gid;
    std::vector<uint32_t> qpns;  // the attached QPs
  };
  std::vector<Group> groups;

  const Group *find(const uint8_t gid[16]) const {
    for (const Group &g : groups)
      if (std::memcmp(g.gid.data(), gid, 16) == 0) return &g;
    return nullptr;
  }
};

}  // namespace vrnic
