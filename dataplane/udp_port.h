// The udp port: RoCEv2 over the kernel's UDP sockets, driven through io_uring. Needs no root
// and no hugepages and works on any IP network, loopback included (127.0.0.x as several
// hosts). The kernel builds the IP and UDP headers; vrnic sends everything after them (BTH ...
// payload, pad, ICRC) straight from the packet's header and the registered memory it
// references, and checks the ICRC of everything it receives.
#pragma once

#include <liburing.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fault_injector.h"
#include "rx_fault_stage.h"
#include "port.h"

namespace vrnic {

struct UdpPortConfig {
  std::string address;       // IPv4 or IPv6 literal to bind; it becomes GID 0
  uint16_t udp_port = 4791;  // RoCEv2's; peers are expected on the same port
  uint32_t tx_sockets = 16;  // source ports 0xC000 + i: per-QP flow entropy
  // UDP GSO on transmit: a run of equal-size packets to one peer leaves in one sendmsg,
  // each segment a whole RoCE packet. Where it applies, see UdpPort::gso_to().
  bool gso = true;
  // Several workers, a port each: their receive sockets share the address (SO_REUSEPORT).
  bool reuse_port = false;
  // Each socket's receive and send buffer. The default has room for the bursts 64 QPs both
  // ways put on a receiver sharing its CPU (with 8 MiB the kernel dropped hundreds of
  // datagrams a run, each a go-back-N timeout). As root it is set as asked; otherwise the
  // kernel caps it at net.core.rmem_max/wmem_max (212992 on most hosts).
  uint32_t socket_buffer = 32 << 20;
};

class UdpPort final : public Port {
 public:
  // wake_fd: an eventfd the port signals when packets arrive (the worker sleeps on it).
  static absl::StatusOr<std::unique_ptr<UdpPort>> open(const UdpPortConfig &cfg, PacketPool &pool,
                                                       int wake_fd);
  ~UdpPort() override;

  uint16_t tx_burst(Packet **pkts, uint16_t n) override;
  uint16_t rx_burst(Packet **pkts, uint16_t n) override;
  uint32_t in_flight() const override { return tx_in_flight_; }
  // The largest RoCE path MTU whose packets fit the interface's IP MTU.
  uint32_t mtu_bytes() const override { return mtu_; }

  const uint8_t *gid() const override { return gid_; }
  const PortCounters &counters() const override { return counters_; }
  // Fault injection on the receive path (none when every rate is zero).
  void set_faults(const FaultConfig &cfg) override { faults_.configure(cfg); }
  const FaultCounters *fault_counters() const override { return faults_.counters(); }
  // A socket per group, bound to the group's address and the port's UDP port, a member on
  // the port's interface (udp_multicast.cpp). The worker that owns the port polls them.
  void set_multicast_groups(const std::vector<std::array<uint8_t, 16>> &gids) override;

 private:
  explicit UdpPort(PacketPool &pool);
  absl::Status setup(const UdpPortConfig &cfg, int wake_fd);
  void post_receives();
  void reap_completions();
  void on_received(RxFrame frame);
  static void deliver(void *port, RxFrame frame) {
    static_cast<UdpPort *>(port)->on_received(frame);
  }
  void to_sockaddr(const uint8_t gid[16], uint16_t port, sockaddr_in6 *out, socklen_t *len) const;
  struct TxBatch;
  // A posted receive: big enough for a GRO super-datagram (up to 64 KiB of RoCE packets of
  // one size from one sender), which on_datagram splits into packets.
  static constexpr uint32_t kMaxDatagram = 65535;
  struct RxBuffer {
    msghdr msg;
    iovec iov;
    sockaddr_in6 peer;
    // UDP_GRO's segment size, SO_RXQ_OVFL's count of the socket's drops.
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint32_t))];
    uint8_t data[kMaxDatagram];
    // Ready for the next recvmsg: the whole buffer, room for the peer and the cmsgs.
    void prepare() {
      iov = {data, sizeof(data)};
      std::memset(&msg, 0, sizeof(msg));
      msg.msg_name = &peer;
      msg.msg_namelen = sizeof(peer);
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
    }
  };
  // The ring's user_data of a multicast socket's poll (the fd above these two bits): the
  // other tags are udp_port.cpp's.
  static constexpr uint64_t kMcastTag = 3;
  uint32_t prepare_tx(Packet *pkt, uint16_t ip_id);
  bool gso_to(const uint8_t gid[16]) const;
  uint16_t gso_run(Packet **pkts, uint16_t n) const;
  void submit_single(io_uring_sqe *sqe, Packet *pkt);
  bool submit_batch(io_uring_sqe *sqe, Packet **pkts, uint16_t n);
  void submit_backlog();
  // dst: the address it was sent to (ours, or a multicast group's), which the ICRC covers.
  void on_datagram(RxBuffer &buf, int len, const uint8_t dst[16]);
  struct McastSocket {
    std::array<uint8_t, 16> gid;
    int fd;
  };
  absl::Status join_multicast(const std::array<uint8_t, 16> &gid, int *fd) const;
  void arm_multicast_poll(int fd);
  void drain_multicast();
  void complete_tx(uint64_t data, int res);

  PacketPool &pool_;
  io_uring ring_{};
  bool ring_ready_ = false;
  bool ipv4_ = true;
  uint8_t gid_[16] = {};
  uint16_t udp_port_ = 4791;
  uint32_t mtu_ = 4096;
  int rx_fd_ = -1;
  std::vector<int> tx_fds_;
  std::vector<uint16_t> tx_ports_;
  bool gso_ = true;
  bool reuse_port_ = false;
  uint32_t tx_in_flight_ = 0;  // packets
  uint32_t rx_posted_ = 0;     // receives of the chain in flight (post_receives)
  uint32_t tx_chain_ = 0;      // sends of the chain in flight (tx_burst)
  std::vector<Packet *> tx_backlog_;  // taken, in order, for the next chain
  size_t tx_backlog_head_ = 0;
  std::vector<std::unique_ptr<TxBatch>> batches_;
  std::vector<TxBatch *> free_batches_;
  std::vector<std::unique_ptr<RxBuffer>> rx_buffers_;
  std::vector<RxBuffer *> free_rx_buffers_;
  std::vector<Packet *> ready_;
  size_t ready_head_ = 0;
  std::vector<McastSocket> mcast_;
  std::unique_ptr<RxBuffer> mcast_buf_;  // the one receive buffer of the multicast sockets
  bool mcast_readable_ = false;          // a poll said one of them has datagrams
  uint32_t ifindex_ = 0;                 // the port address's interface
  PortCounters counters_;
  RxFaultStage faults_{pool_, &UdpPort::deliver, this};
};

}  // namespace vrnic
