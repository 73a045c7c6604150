// The udp port: RoCEv2 in the kernel's UDP sockets through io_uring, the ICRC computed and
// checked here over IP header fields the kernel builds (udp_port.h).
#include "udp_port.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "device.h"
#include "icrc.h"
#include "ip_header.h"

namespace vrnic {
namespace {

constexpr unsigned kRingEntries = 1024;
constexpr uint32_t kRxPosted = 128;  // receives kept posted
constexpr uint32_t kTxChainSends = 256;  // sends in one chain: with the receives, the ring's room
constexpr size_t kTxBacklog = 4096;      // packets waiting for the chain in flight
// user_data: a Packet (one datagram sent), a TxBatch (tag 2) or an RxBuffer (tag 1); all
// are at least 8-aligned. Tag 3: a multicast socket's poll, its fd above the tag.
constexpr uint64_t kRxTag = 1;
constexpr uint64_t kBatchTag = 2;
constexpr uint64_t kTagMask = 3;
// The most UDP payload one datagram (a GSO send) carries: the IPv4 total length, or the
// IPv6 payload length, counts the headers after it too.
constexpr uint32_t kMaxUdpPayloadV4 = 65535 - 20 - 8;
constexpr uint32_t kMaxUdpPayloadV6 = 65535 - 8;
constexpr uint8_t kTtl = 64;

// Per-packet state while the kernel owns the packet, kept in Packet::wire.
struct TxScratch {
  msghdr msg;
  iovec iov[3];
  sockaddr_in6 peer;
  uint8_t tail[8];  // pad and ICRC
};
struct RxScratch {
  sockaddr_in6 peer;
  uint8_t dst_gid[16];  // where it was sent: our address, or a multicast group's
  uint16_t ip_id;       // the IPv4 ID the sender's kernel gave it (see on_received)
};
static_assert(sizeof(TxScratch) <= sizeof(WireScratch::storage));
static_assert(sizeof(RxScratch) <= sizeof(WireScratch::storage));

template <typename T>
T &scratch(Packet *pkt) {
  return *reinterpret_cast<T *>(pkt->wire.storage);
}

void set_buffers(int fd, uint32_t bytes) {
  // As root the limits can be exceeded; otherwise the kernel caps them at rmem/wmem_max.
  int n = int(std::min<uint32_t>(bytes, INT32_MAX / 2));
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &n, sizeof(n)) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &n, sizeof(n));
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &n, sizeof(n)) < 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &n, sizeof(n));
}

// The IP and UDP headers the ICRC covers. The kernel builds the real ones; the fields it
// may choose differently (TTL, TOS, checksums) are masked by the ICRC rules, and IPv4
// datagrams with DF set leave an unconnected socket with ID 0.
size_t pseudo_headers(bool ipv4, const uint8_t src[16], const uint8_t dst[16], uint16_t sport,
                      uint16_t dport, uint16_t udp_len, uint16_t ip_id, uint8_t *ip, uint8_t *udp) {
  size_t ip_len = ipv4 ? build_ipv4(ip, src, dst, udp_len, 0, kTtl, ip_id, true)
                       : build_ipv6(ip, src, dst, udp_len, 0, 0, kTtl);
  build_udp(udp, sport, dport, udp_len, 0);
  return ip_len;
}

void gid_from_sockaddr(const sockaddr_in6 &sa, uint8_t gid[16]) {
  if (sa.sin6_family == AF_INET) {
    const auto &v4 = reinterpret_cast<const sockaddr_in &>(sa);
    std::memset(gid, 0, 10);
    gid[10] = gid[11] = 0xff;
    std::memcpy(gid + 12, &v4.sin_addr, 4);
  } else {
    std::memcpy(gid, &sa.sin6_addr, 16);
  }
}

// Whether `addr` (len bytes) lies in the subnet of an interface address with that netmask.
bool in_subnet(const uint8_t *addr, const uint8_t *ifaddr, const uint8_t *mask, size_t len) {
  for (size_t i = 0; i < len; i++)
    if ((addr[i] & mask[i]) != (ifaddr[i] & mask[i])) return false;
  return true;
}

// The IP MTU of the interface whose subnet holds `gid` (an address of this host: 127.0.0.2
// is one through lo's 127.0.0.0/8), or 0 if none does.
uint32_t interface_mtu(const uint8_t gid[16], bool ipv4) {
  ifaddrs *list;
  if (getifaddrs(&list) < 0) return 0;
  uint32_t mtu = 0;
  for (ifaddrs *ifa = list; ifa && !mtu; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || !ifa->ifa_netmask) continue;
    bool match = false;
    if (ipv4 && ifa->ifa_addr->sa_family == AF_INET) {
      auto *a = reinterpret_cast<const uint8_t *>(
          &reinterpret_cast<sockaddr_in *>(ifa->ifa_addr)->sin_addr);
      auto *m = reinterpret_cast<const uint8_t *>(
          &reinterpret_cast<sockaddr_in *>(ifa->ifa_netmask)->sin_addr);
      match = in_subnet(gid + 12, a, m, 4);
    } else if (!ipv4 && ifa->ifa_addr->sa_family == AF_INET6) {
      auto *a = reinterpret_cast<const uint8_t *>(
          &reinterpret_cast<sockaddr_in6 *>(ifa->ifa_addr)->sin6_addr);
      auto *m = reinterpret_cast<const uint8_t *>(
          &reinterpret_cast<sockaddr_in6 *>(ifa->ifa_netmask)->sin6_addr);
      match = in_subnet(gid, a, m, 16);
    }
    if (!match) continue;
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq req{};
    std::strncpy(req.ifr_name, ifa->ifa_name, IFNAMSIZ - 1);
    if (fd >= 0 && ioctl(fd, SIOCGIFMTU, &req) == 0) mtu = uint32_t(req.ifr_mtu);
    if (fd >= 0) ::close(fd);
  }
  freeifaddrs(list);
  return mtu;
}

}  // namespace

// A GSO send in flight: its packets, and the message the kernel reads them through.
struct UdpPort::TxBatch {
  static constexpr uint16_t kMaxSegments = 64;
  msghdr msg;
  sockaddr_in6 peer;
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(uint16_t))];
  iovec iov[3 * kMaxSegments];
  Packet *pkts[kMaxSegments];
  uint16_t count;
};

UdpPort::UdpPort(PacketPool &pool) : pool_(pool) {}

absl::StatusOr<std::unique_ptr<UdpPort>> UdpPort::open(const UdpPortConfig &cfg, PacketPool &pool,
                                                       int wake_fd) {
  std::unique_ptr<UdpPort> port(new UdpPort(pool));
  if (absl::Status st = port->setup(cfg, wake_fd); !st.ok()) return st;
  return port;
}

void UdpPort::to_sockaddr(const uint8_t gid[16], uint16_t port, sockaddr_in6 *out,
                          socklen_t *len) const {
  std::memset(out, 0, sizeof(*out));
  if (ipv4_) {
    auto *v4 = reinterpret_cast<sockaddr_in *>(out);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    std::memcpy(&v4->sin_addr, gid + 12, 4);
    *len = sizeof(sockaddr_in);
  } else {
    out->sin6_family = AF_INET6;
    out->sin6_port = htons(port);
    std::memcpy(&out->sin6_addr, gid, 16);
    *len = sizeof(sockaddr_in6);
  }
}

absl::Status UdpPort::setup(const UdpPortConfig &cfg, int wake_fd) {
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, cfg.address.c_str(), &v4) == 1) {
    ipv4_ = true;
    gid_[10] = gid_[11] = 0xff;
    std::memcpy(gid_ + 12, &v4, 4);
  } else if (inet_pton(AF_INET6, cfg.address.c_str(), &v6) == 1) {
    ipv4_ = false;
    std::memcpy(gid_, &v6, 16);
  } else {
    return absl::InvalidArgumentError("not an IPv4 or IPv6 address: '" + cfg.address + "'");
  }
  udp_port_ = cfg.udp_port;
  uint32_t ip_mtu = interface_mtu(gid_, ipv4_);
  if (!ip_mtu)
    return absl::InvalidArgumentError(cfg.address + " is on none of this host's interfaces");
  mtu_ = roce_mtu_for(ip_mtu, ipv4_ ? kIpv4HeaderBytes : kIpv6HeaderBytes);
  if (!mtu_)
    return absl::InvalidArgumentError("the interface of " + cfg.address + " has an MTU of " +
                                      std::to_string(ip_mtu) + ", too small for RoCE (256)");
  int family = ipv4_ ? AF_INET : AF_INET6;
  ifindex_ = kernel_interface_of(gid_);
  auto bound_socket = [&](uint16_t port, int *fd) -> absl::Status {
    *fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (*fd < 0) return absl::ErrnoToStatus(errno, "socket");
    int one = 1;
    if (!ipv4_) setsockopt(*fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    // Don't fragment: a RoCE packet is never split (and DF makes IPv4 IDs 0, see above).
    int pmtu = ipv4_ ? IP_PMTUDISC_DO : IPV6_PMTUDISC_DO;
    setsockopt(*fd, ipv4_ ? IPPROTO_IP : IPPROTO_IPV6, ipv4_ ? IP_MTU_DISCOVER : IPV6_MTU_DISCOVER,
               &pmtu, sizeof(pmtu));
    set_buffers(*fd, cfg.socket_buffer);
    // Multicast leaves through the port's own interface (there may be no route for it).
    if (ipv4_) {
      in_addr ours;
      std::memcpy(&ours, gid_ + 12, 4);
      setsockopt(*fd, IPPROTO_IP, IP_MULTICAST_IF, &ours, sizeof(ours));
    } else {
      setsockopt(*fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifindex_, sizeof(ifindex_));
    }
    if (reuse_port_ && port == udp_port_)
      setsockopt(*fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    sockaddr_in6 sa;
    socklen_t len;
    to_sockaddr(gid_, port, &sa, &len);
    if (::bind(*fd, reinterpret_cast<sockaddr *>(&sa), len) < 0)
      return absl::ErrnoToStatus(errno, "bind " + cfg.address + ":" + std::to_string(port));
    return absl::OkStatus();
  };
  reuse_port_ = cfg.reuse_port;
  if (absl::Status st = bound_socket(udp_port_, &rx_fd_); !st.ok()) return st;
  // GRO: runs of equal-size datagrams from one sender arrive as one (split in on_datagram).
  int one = 1;
  if (setsockopt(rx_fd_, SOL_UDP, UDP_GRO, &one, sizeof(one)) < 0)
    return absl::ErrnoToStatus(errno, "setsockopt UDP_GRO");
  // RoCEv2 senders may leave the UDP checksum 0 over IPv6 too, as rdma_rxe does (the ICRC
  // covers what it would: RFC 6935 allows this for tunnels); Linux drops such datagrams
  // unless the socket accepts them.
  if (!ipv4_ && setsockopt(rx_fd_, SOL_UDP, UDP_NO_CHECK6_RX, &one, sizeof(one)) < 0)
    return absl::ErrnoToStatus(errno, "setsockopt UDP_NO_CHECK6_RX");
  // Each datagram then says how many the kernel dropped at this socket so far (rx_dropped).
  if (setsockopt(rx_fd_, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one)) < 0)
    return absl::ErrnoToStatus(errno, "setsockopt SO_RXQ_OVFL");
  gso_ = cfg.gso;
  // Source ports for flow entropy; ports other programs hold are skipped.
  for (uint32_t port = 0xc000; port <= 0xffff && tx_fds_.size() < cfg.tx_sockets; port++) {
    int fd;
    if (bound_socket(uint16_t(port), &fd).ok()) {
      tx_fds_.push_back(fd);
      tx_ports_.push_back(uint16_t(port));
    } else if (fd >= 0) {
      ::close(fd);
    }
  }
  if (tx_fds_.empty())
    return absl::ResourceExhaustedError("no free UDP source port in 0xC000-0xFFFF");
  if (int err = io_uring_queue_init(kRingEntries, &ring_, 0))
    return absl::ErrnoToStatus(-err, "io_uring_queue_init");
  ring_ready_ = true;
  if (int err = io_uring_register_eventfd(&ring_, wake_fd))
    return absl::ErrnoToStatus(-err, "io_uring_register_eventfd");
  ready_.reserve(kRxPosted * 2);
  tx_backlog_.reserve(kTxBacklog);
  for (uint32_t i = 0; i < kRxPosted; i++) {
    rx_buffers_.push_back(std::make_unique<RxBuffer>());
    free_rx_buffers_.push_back(rx_buffers_.back().get());
  }
  for (uint32_t i = 0; i < kRingEntries / 4; i++) {
    batches_.push_back(std::make_unique<TxBatch>());
    free_batches_.push_back(batches_.back().get());
  }
  post_receives();
  return absl::OkStatus();
}

UdpPort::~UdpPort() {
  if (ring_ready_) {
    // Cancel everything posted and take the packets back (bounded: at shutdown a stuck
    // request must not keep vrnicd from exiting; ring teardown cancels the rest).
    if (io_uring_sqe *sqe = io_uring_get_sqe(&ring_)) {
      io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
      io_uring_sqe_set_data64(sqe, 0);
      io_uring_submit(&ring_);
    }
    __kernel_timespec wait{1, 0};
    while (tx_in_flight_ || rx_posted_) {
      io_uring_cqe *cqe;
      if (io_uring_wait_cqe_timeout(&ring_, &cqe, &wait)) break;
      uint64_t data = io_uring_cqe_get_data64(cqe);
      io_uring_cqe_seen(&ring_, cqe);
      if (!data) continue;  // the cancel request itself
      if (data & kRxTag) {
        rx_posted_--;
      } else {
        complete_tx(data, -ECANCELED);
      }
    }
    io_uring_queue_exit(&ring_);
  }
  for (; ready_head_ < ready_.size(); ready_head_++) pool_.free(ready_[ready_head_]);
  for (; tx_backlog_head_ < tx_backlog_.size(); tx_backlog_head_++)
    pool_.free(tx_backlog_[tx_backlog_head_]);
  for (int fd : tx_fds_) ::close(fd);
  for (const McastSocket &m : mcast_) ::close(m.fd);
  if (rx_fd_ >= 0) ::close(rx_fd_);
}

// Receives are posted as one linked chain, and the next chain only once this one has ended:
// one request reads the socket at a time, so datagrams complete in the order they arrived.
// Posted side by side, each datagram woke them all, and those that lost the race went to
// io-wq threads whose completions could overtake later datagrams (a UD receiver saw its
// datagrams out of order, the wire had them in order).
void UdpPort::post_receives() {
  if (rx_posted_ != 0) return;
  const uint32_t room = std::min<uint32_t>(uint32_t(free_rx_buffers_.size()),
                                           io_uring_sq_space_left(&ring_));
  for (uint32_t k = 0; k < room; k++) {
    io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
    RxBuffer &buf = *free_rx_buffers_.back();
    free_rx_buffers_.pop_back();
    buf.prepare();
    io_uring_prep_recvmsg(sqe, rx_fd_, &buf.msg, 0);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(&buf) | kRxTag);
    if (k + 1 < room) sqe->flags |= IOSQE_IO_LINK;  // a short datagram does not break it
    rx_posted_++;
  }
  if (room) io_uring_submit(&ring_);
}

// IPv4 puts an ID in every datagram and the ICRC covers it. The kernel gives the segments
// of a GSO send IDs 0, 1, 2, ... (DF set, unconnected socket), so segment k's ICRC is
// computed with ID k -- right for any receiver that sees the segments. A vrnic receiving a
// GRO super-datagram cannot see the IDs and assumes the same numbering, which holds when
// the super-datagram is the sender's GSO send arriving whole: on loopback. So IPv4 uses GSO
// only towards loopback peers (vrnicd on 127.0.0.x); IPv6 has no ID and uses it everywhere.
bool UdpPort::gso_to(const uint8_t gid[16]) const {
  return gso_ && (!ipv4_ || gid[12] == 127);
}

// A packet's UDP payload on the wire: headers, payload, pad to 4 bytes, ICRC.
static uint32_t roce_length(const Packet *pkt) {
  return pkt->header_len + pkt->payload_len + (-pkt->payload_len & 3) + wire::kIcrcBytes;
}

// Fills in the packet's ICRC and its iovecs; returns its UDP payload length.
uint32_t UdpPort::prepare_tx(Packet *pkt, uint16_t ip_id) {
  TxScratch &tx = scratch<TxScratch>(pkt);
  uint8_t pad = pkt->set_pad();
  uint32_t roce_len = roce_length(pkt);
  uint8_t ip[40], udp[8];
  size_t ip_len = pseudo_headers(ipv4_, pkt->src_gid, pkt->dst_gid, pkt->udp_sport, udp_port_,
                                 uint16_t(8 + roce_len), ip_id, ip, udp);
  std::memset(tx.tail, 0, sizeof(tx.tail));
  tx.iov[0] = {pkt->header, pkt->header_len};
  tx.iov[1] = {const_cast<uint8_t *>(pkt->payload), pkt->payload_len};
  tx.iov[2] = {tx.tail, pad};
  uint32_t icrc = roce_icrc(ip, ip_len, udp, tx.iov, 3);
  for (int b = 0; b < 4; b++) tx.tail[pad + b] = uint8_t(icrc >> (8 * b));  // little-endian
  tx.iov[2].iov_len = pad + wire::kIcrcBytes;
  counters_[kPortTxBytes] += roce_len;
  return roce_len;
}

// How many packets from pkts[0] can leave as one GSO send: same source socket and peer, all
// the size of the first but the last, which may be shorter, 64 KiB at most.
uint16_t UdpPort::gso_run(Packet **pkts, uint16_t n) const {
  const Packet *first = pkts[0];
  if (!gso_to(first->dst_gid)) return 1;
  uint32_t size = roce_length(first), total = size;
  uint16_t k = 1;
  while (k < n && k < TxBatch::kMaxSegments) {
    const Packet *p = pkts[k];
    uint32_t len = roce_length(p);
    if (p->udp_sport != first->udp_sport || std::memcmp(p->dst_gid, first->dst_gid, 16) != 0 ||
        len > size || total + len > (ipv4_ ? kMaxUdpPayloadV4 : kMaxUdpPayloadV6))
      break;
    total += len;
    k++;
    if (len < size) break;  // a shorter one ends the run
  }
  return k;
}

void UdpPort::submit_single(io_uring_sqe *sqe, Packet *pkt) {
  TxScratch &tx = scratch<TxScratch>(pkt);
  uint32_t sock = pkt->udp_sport % tx_fds_.size();  // the QP's entropy picks the socket
  pkt->udp_sport = tx_ports_[sock];
  prepare_tx(pkt, 0);
  std::memset(&tx.msg, 0, sizeof(tx.msg));
  socklen_t namelen;
  to_sockaddr(pkt->dst_gid, udp_port_, &tx.peer, &namelen);
  tx.msg.msg_name = &tx.peer;
  tx.msg.msg_namelen = namelen;
  tx.msg.msg_iov = tx.iov;
  tx.msg.msg_iovlen = 3;
  io_uring_prep_sendmsg(sqe, tx_fds_[sock], &tx.msg, 0);
  io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(pkt));
  tx_in_flight_++;
}

bool UdpPort::submit_batch(io_uring_sqe *sqe, Packet **pkts, uint16_t n) {
  if (free_batches_.empty()) return false;
  TxBatch &b = *free_batches_.back();
  free_batches_.pop_back();
  b.count = n;
  uint32_t segment = 0;
  size_t iovs = 0;
  uint32_t sock = pkts[0]->udp_sport % tx_fds_.size();  // one QP's entropy (gso_run)
  for (uint16_t k = 0; k < n; k++) {
    b.pkts[k] = pkts[k];
    pkts[k]->udp_sport = tx_ports_[sock];
    uint32_t len = prepare_tx(pkts[k], k);
    if (!k) segment = len;
    for (const iovec &v : scratch<TxScratch>(pkts[k]).iov)
      if (v.iov_len) b.iov[iovs++] = v;
  }
  std::memset(&b.msg, 0, sizeof(b.msg));
  socklen_t namelen;
  to_sockaddr(pkts[0]->dst_gid, udp_port_, &b.peer, &namelen);
  b.msg.msg_name = &b.peer;
  b.msg.msg_namelen = namelen;
  b.msg.msg_iov = b.iov;
  b.msg.msg_iovlen = iovs;
  b.msg.msg_control = b.control;
  b.msg.msg_controllen = sizeof(b.control);
  cmsghdr *cm = CMSG_FIRSTHDR(&b.msg);
  cm->cmsg_level = SOL_UDP;
  cm->cmsg_type = UDP_SEGMENT;
  cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  uint16_t gso_size = uint16_t(segment);
  std::memcpy(CMSG_DATA(cm), &gso_size, sizeof(gso_size));
  io_uring_prep_sendmsg(sqe, tx_fds_[sock], &b.msg, 0);
  io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(&b) | kBatchTag);
  tx_in_flight_ += n;
  return true;
}

// Packets leave in the order given: one linked chain of sends is in flight at a time, and
// what comes meanwhile waits in the backlog. A send that finds the socket buffer full waits
// for room (io_uring polls for it) and everything after it waits too; with chains side by
// side a later burst went first, and the peer saw a QP's packets reordered.
uint16_t UdpPort::tx_burst(Packet **pkts, uint16_t n) {
  if (tx_backlog_head_ == tx_backlog_.size()) {
    tx_backlog_.clear();
    tx_backlog_head_ = 0;
  }
  const size_t waiting = tx_backlog_.size() - tx_backlog_head_;
  const auto taken = uint16_t(std::min<size_t>(n, kTxBacklog - waiting));  // the rest: lost
  if (tx_backlog_.size() + taken > tx_backlog_.capacity()) {  // keep to the reserved room
    tx_backlog_.erase(tx_backlog_.begin(), tx_backlog_.begin() + ptrdiff_t(tx_backlog_head_));
    tx_backlog_head_ = 0;
  }
  tx_backlog_.insert(tx_backlog_.end(), pkts, pkts + taken);
  if (tx_chain_ != 0) reap_completions();  // it may have ended since; then it sends the rest
  if (tx_chain_ == 0) submit_backlog();
  return taken;
}

// The backlog (up to a chain's worth) as one chain of linked sends, GSO runs as one send.
void UdpPort::submit_backlog() {
  io_uring_sqe *last = nullptr;
  size_t i = tx_backlog_head_;
  while (i < tx_backlog_.size() && tx_chain_ < kTxChainSends) {
    io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
    if (!sqe) break;  // cannot be while the chain is this short: the next chain takes the rest
    Packet **p = tx_backlog_.data() + i;
    const auto left = uint16_t(std::min<size_t>(tx_backlog_.size() - i, TxBatch::kMaxSegments));
    const uint16_t run = gso_run(p, left);
    if (run > 1 && submit_batch(sqe, p, run)) {
      i += run;
    } else {
      submit_single(sqe, *p);
      i++;
    }
    sqe->flags |= IOSQE_IO_LINK;
    last = sqe;
    tx_chain_++;
  }
  tx_backlog_head_ = i;
  if (last) {
    last->flags &= ~IOSQE_IO_LINK;
    io_uring_submit(&ring_);
  }
}

// A received UDP payload: checked whole (shape, ICRC) before anything reads it.
void UdpPort::on_received(RxFrame f) {
  Packet *pkt = f.pkt;
  RxScratch &rx = scratch<RxScratch>(pkt);
  if (!pkt->parse(f.data, f.len)) {
    counters_[kPortRxMalformed]++;
    pool_.free(pkt);
    return;
  }
  gid_from_sockaddr(rx.peer, pkt->src_gid);
  std::memcpy(pkt->dst_gid, rx.dst_gid, 16);
  pkt->udp_sport = ntohs(rx.peer.sin6_port);  // same offset in sockaddr_in
  // The IPv4 ID is unseen here. The guess is what vrnic peers send: a GSO segment's number
  // (see gso_to), else 0, as Linux UDP sockets send DF datagrams; a right guess keeps the full
  // 32-bit check. Kernel RoCE senders (rdma_rxe) and NICs number their packets: for those the
  // ID is solved for from the ICRC, which leaves a 16-bit check (see solve_ipv4_id). On
  // loopback (127.0.0.0/8) the senders are vrnic and kernel UDP: an ID there is a GSO
  // segment's number that the kernel segmented before it reached us, below kMaxSegments, which
  // keeps 26 bits of the check (the fuzz group's random ICRCs, 100,000 a run, are all caught).
  const uint32_t received = load_icrc(f.data + f.len - wire::kIcrcBytes);
  uint8_t ip[40], udp[8];
  size_t ip_len = pseudo_headers(ipv4_, pkt->src_gid, pkt->dst_gid, pkt->udp_sport, udp_port_,
                                 uint16_t(8 + f.len), rx.ip_id, ip, udp);
  iovec body{f.data, size_t(f.len) - wire::kIcrcBytes};
  const uint32_t with_guess = roce_icrc(ip, ip_len, udp, &body, 1);
  if (with_guess != received) {
    std::optional<uint16_t> id;
    if (ipv4_) id = solve_ipv4_id(with_guess, rx.ip_id, received, ipv4_bytes_after_id(f.len));
    if (!id || (pkt->src_gid[12] == 127 && *id >= TxBatch::kMaxSegments)) {
      counters_[kPortRxIcrcErrors]++;
      pool_.free(pkt);
      return;
    }
    counters_[kPortRxIpIdSolved]++;
  }
  counters_[kPortRxPackets]++;
  counters_[kPortRxBytes] += f.len;
  ready_.push_back(pkt);
}

// A datagram received: one RoCE packet, or a GRO run of them (all the size the kernel
// reports but the last). Each is copied into a packet of its own.
void UdpPort::on_datagram(RxBuffer &buf, int len, const uint8_t dst[16]) {
  if (buf.msg.msg_flags & MSG_TRUNC) {  // cannot happen with 64 KiB buffers; never trusted
    counters_[kPortRxMalformed]++;
    return;
  }
  int segment = len;
  for (cmsghdr *cm = CMSG_FIRSTHDR(&buf.msg); cm; cm = CMSG_NXTHDR(&buf.msg, cm)) {
    if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO && segment == len) {
      int gso_size;
      std::memcpy(&gso_size, CMSG_DATA(cm), sizeof(gso_size));
      if (gso_size > 0) segment = gso_size;
    } else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL) {
      uint32_t drops;
      std::memcpy(&drops, CMSG_DATA(cm), sizeof(drops));
      counters_[kPortRxDropped] = drops;
    }
  }
  uint16_t index = 0;
  for (int off = 0; off < len; off += segment, index++) {
    int n = std::min(segment, len - off);
    if (size_t(n) >= kPacketBufferBytes) {
      // Cut short by the receive buffer: no RoCE packet is that long. Checked before the
      // ICRC, which the remains might match by chance.
      counters_[kPortRxMalformed]++;
      continue;
    }
    Packet *pkt = pool_.alloc();
    if (!pkt) {
      counters_[kPortRxNoBuffer]++;  // a lost packet, as on a full NIC queue
      continue;
    }
    std::memcpy(pkt->bounce, buf.data + off, size_t(n));
    RxScratch &rx = scratch<RxScratch>(pkt);
    rx.peer = buf.peer;
    std::memcpy(rx.dst_gid, dst, 16);
    rx.ip_id = ipv4_ ? index : 0;  // see gso_to()
    RxFrame frame{pkt, pkt->bounce, uint32_t(n)};
    if (faults_.active()) {
      faults_.push(frame);
    } else {
      on_received(frame);
    }
  }
}

void UdpPort::complete_tx(uint64_t data, int res) {
  uint32_t packets = 1;
  if (data & kBatchTag) {
    auto *b = reinterpret_cast<TxBatch *>(data & ~kTagMask);
    packets = b->count;
    for (uint16_t k = 0; k < b->count; k++) pool_.free(b->pkts[k]);
    free_batches_.push_back(b);
  } else {
    pool_.free(reinterpret_cast<Packet *>(data));
  }
  tx_in_flight_ -= packets;
  tx_chain_--;
  if (res < 0) {
    counters_[kPortTxErrors] += packets;  // e.g. no route: lost packets, which RC recovers from
  } else {
    counters_[kPortTxPackets] += packets;
  }
}

void UdpPort::reap_completions() {
  io_uring_cqe *cqe;
  unsigned head, seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    seen++;
    uint64_t data = io_uring_cqe_get_data64(cqe);
    if ((data & kTagMask) == kMcastTag) {
      // A multicast socket is readable; its multishot poll goes on unless it ended. (A
      // socket left meanwhile, or a poll removal's own answer, fd 0 here: nothing.)
      const int fd = int(data >> 2);
      const bool ours = std::any_of(mcast_.begin(), mcast_.end(),
                                    [&](const McastSocket &m) { return m.fd == fd; });
      mcast_readable_ |= ours;
      if (ours && !(cqe->flags & IORING_CQE_F_MORE) && cqe->res >= 0) arm_multicast_poll(fd);
    } else if (data & kRxTag) {
      auto *buf = reinterpret_cast<RxBuffer *>(data & ~kTagMask);
      rx_posted_--;
      if (cqe->res > 0) on_datagram(*buf, cqe->res, gid_);
      free_rx_buffers_.push_back(buf);
    } else {
      complete_tx(data, cqe->res);
    }
  }
  io_uring_cq_advance(&ring_, seen);
  if (tx_chain_ == 0 && tx_backlog_head_ < tx_backlog_.size()) submit_backlog();
}

uint16_t UdpPort::rx_burst(Packet **pkts, uint16_t n) {
  if (ready_head_ == ready_.size()) {
    ready_.clear();
    ready_head_ = 0;
    reap_completions();
    if (mcast_readable_) drain_multicast();
    faults_.release_due();
    post_receives();
  }
  uint16_t i = 0;
  for (; i < n && ready_head_ < ready_.size(); i++) pkts[i] = ready_[ready_head_++];
  return i;
}

}  // namespace vrnic
