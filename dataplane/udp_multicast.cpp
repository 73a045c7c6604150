// The udp port's multicast: IP multicast, as RoCEv2 NICs carry ibv_attach_mcast between hosts
// (UdpPort::set_multicast_groups). A group with members on this vrnicd gets a socket bound to
// the group's address and the port's UDP port, a member of the group on the port's interface
// (the kernel sends the IGMP or MLD reports); its datagrams are read when a multishot poll on
// the ring says so, which also wakes a sleeping worker. Sends to a group leave through the
// port's interface (the tx sockets' IP_MULTICAST_IF, udp_port.cpp).
#include <netinet/udp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "udp_port.h"

namespace vrnic {

absl::Status UdpPort::join_multicast(const std::array<uint8_t, 16> &gid, int *fd) const {
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4_group = std::memcmp(gid.data(), kV4Mapped, 12) == 0;
  if (v4_group != ipv4_) return absl::InvalidArgumentError("the group is not of the port's family");
  *fd = ::socket(ipv4_ ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (*fd < 0) return absl::ErrnoToStatus(errno, "socket");
  int one = 1;
  setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (!ipv4_) {
    setsockopt(*fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    setsockopt(*fd, SOL_UDP, UDP_NO_CHECK6_RX, &one, sizeof(one));
  }
  sockaddr_in6 sa;
  socklen_t len;
  to_sockaddr(gid.data(), udp_port_, &sa, &len);
  int rc;
  if (ipv4_) {
    ip_mreqn m{};
    std::memcpy(&m.imr_multiaddr, gid.data() + 12, 4);
    std::memcpy(&m.imr_address, gid_ + 12, 4);
    m.imr_ifindex = int(ifindex_);
    rc = setsockopt(*fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m));
  } else {
    ipv6_mreq m{};
    std::memcpy(&m.ipv6mr_multiaddr, gid.data(), 16);
    m.ipv6mr_interface = ifindex_;
    rc = setsockopt(*fd, IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof(m));
  }
  if (::bind(*fd, reinterpret_cast<sockaddr *>(&sa), len) < 0 || rc < 0) {
    const int err = errno;
    ::close(*fd);
    return absl::ErrnoToStatus(err, "joining a multicast group");
  }
  return absl::OkStatus();
}

void UdpPort::arm_multicast_poll(int fd) {
  io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
  if (!sqe) return;  // the ring is full: read at the next burst anyway (mcast_readable_)
  io_uring_prep_poll_multishot(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, uint64_t(fd) << 2 | kMcastTag);
  io_uring_submit(&ring_);
}

void UdpPort::set_multicast_groups(const std::vector<std::array<uint8_t, 16>> &gids) {
  // Linear in the groups (8,192 at most): a set of each side's, not a search per group.
  const absl::flat_hash_set<std::array<uint8_t, 16>> wanted(gids.begin(), gids.end());
  absl::flat_hash_set<std::array<uint8_t, 16>> joined;
  for (auto it = mcast_.begin(); it != mcast_.end();) {
    if (wanted.contains(it->gid)) {
      joined.insert(it->gid);
      ++it;
      continue;
    }
    if (io_uring_sqe *sqe = io_uring_get_sqe(&ring_)) {
      io_uring_prep_poll_remove(sqe, uint64_t(it->fd) << 2 | kMcastTag);
      io_uring_sqe_set_data64(sqe, kMcastTag);  // fd 0: no socket's
      io_uring_submit(&ring_);
    }
    ::close(it->fd);
    it = mcast_.erase(it);
  }
  for (const auto &gid : gids) {
    if (joined.contains(gid)) continue;
    int fd;
    if (!join_multicast(gid, &fd).ok()) continue;  // not reachable here: local members only
    if (!mcast_buf_) mcast_buf_ = std::make_unique<RxBuffer>();
    mcast_.push_back({gid, fd});
    arm_multicast_poll(fd);
  }
  mcast_readable_ = !mcast_.empty();  // whatever came before the polls were armed
}

void UdpPort::drain_multicast() {
  mcast_readable_ = false;
  RxBuffer &buf = *mcast_buf_;
  for (const McastSocket &m : mcast_) {
    for (int k = 0; k < 64; k++) {
      buf.prepare();
      const ssize_t n = ::recvmsg(m.fd, &buf.msg, MSG_DONTWAIT);
      if (n <= 0) break;
      on_datagram(buf, int(n), m.gid.data());
      if (k == 63) mcast_readable_ = true;  // more, perhaps: the next burst goes on
    }
  }
}

}  // namespace vrnic
