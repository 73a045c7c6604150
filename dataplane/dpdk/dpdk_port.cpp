// One worker's dpdk port: its queues set up (and the device, by the first), bursts in, the
// device's link and restarts, RX interrupts; and the module's entry point (queue_port.h).
#include "queue_port.h"

#include <poll.h>
#include <rte_bus.h>
#include <rte_lcore.h>
#include <rte_prefetch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "dataplane/neighbor_discovery.h"
#include "eal.h"

namespace vrnic::dpdk {

bool DpdkPort::open(const DpdkPortConfig &cfg, std::string *error) {
  queue_ = cfg.queue;
  ip_header_len_ = ipv6_ ? kIpv6HeaderBytes : kIpv4HeaderBytes;
  if (dev_.configured) {  // another worker's port set the device up
    if (queue_ >= dev_.queues) {
      *error = "the device was set up with " + std::to_string(dev_.queues) + " TX queues";
      return false;
    }
    return true;
  }
  if (queue_ != 0) {
    *error = "the first dpdk port opened must be queue 0";
    return false;
  }
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, cfg.address.c_str(), &v4) == 1) {
    std::memcpy(ip_, &v4, 4);
    gid_[10] = gid_[11] = 0xff;
    std::memcpy(gid_ + 12, ip_, 4);
  } else if (inet_pton(AF_INET6, cfg.address.c_str(), &v6) == 1 && !IN6_IS_ADDR_MULTICAST(&v6) &&
             !IN6_IS_ADDR_UNSPECIFIED(&v6) && !IN6_IS_ADDR_V4MAPPED(&v6)) {
    ipv6_ = true;
    ip_header_len_ = kIpv6HeaderBytes;
    std::memcpy(gid_, &v6, 16);
    uint8_t group[16];
    solicited_node(gid_, group);
    dev_.solicited_mac = ipv6_multicast_mac(group);
  } else {
    *error = "'" + cfg.address + "' is not a unicast IPv4 or IPv6 address";
    return false;
  }
  udp_port_ = cfg.udp_port;
  iface_ = kernel_interface(cfg.eal_args);
  if (!init_eal(cfg.eal_args, error) || !find_ethdev(cfg.eal_args, cfg.device, &port_id_, error))
    return false;
  int socket = rte_eth_dev_socket_id(port_id_);
  if (socket < 0) socket = int(rte_socket_id());
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(port_id_, &info); rc != 0) {
    *error = std::string("rte_eth_dev_info_get: ") + rte_strerror(-rc);
    return false;
  }
  memif_ = info.driver_name && std::strcmp(info.driver_name, "net_memif") == 0;
  // Pool names are per process: each device's carry its number.
  const std::string n = std::to_string(cfg.device);
  mbufs_ = rte_pktmbuf_pool_create(("vrnic_frames" + n).c_str(), kMbufs, kMbufCache, 0,
                                   RTE_MBUF_DEFAULT_BUF_SIZE, socket);
  ext_mbufs_ =
      rte_pktmbuf_pool_create(("vrnic_payloads" + n).c_str(), kMbufs, kMbufCache, 0, 0, socket);
  // memif copies a received frame into as many mbufs as it takes: a jumbo one gets mbufs that
  // hold it whole, read in place like any other rather than gathered into a packet first.
  const uint32_t rx_room = memif_ ? memif_mtu(cfg.eal_args) + kEthHeaderBytes : 0;
  rx_mbufs_ =
      rx_room <= RTE_MBUF_DEFAULT_DATAROOM
          ? mbufs_
          : rte_pktmbuf_pool_create(("vrnic_rx_frames" + n).c_str(), kRxJumboMbufs, kMbufCache, 0,
                                    uint16_t(RTE_PKTMBUF_HEADROOM + rx_room), socket);
  if (!mbufs_ || !ext_mbufs_ || !rx_mbufs_) {
    *error = std::string("rte_pktmbuf_pool_create: ") + rte_strerror(rte_errno);
    return false;
  }
  rte_eth_conf conf{};
  // Zero-copy needs chained mbufs, and a device that reads registered memory with the CPU: a
  // software device (the vdev bus: memif, af_packet, af_xdp, tap) does. A NIC on a bus (PCI)
  // would DMA from it through an IOMMU, or its own memory table (mlx5), that was never told of
  // memory DPDK did not allocate: it copies until registration maps that memory for DMA.
  const rte_bus *bus = info.device ? rte_dev_bus(info.device) : nullptr;
  const bool software = bus && std::strcmp(rte_bus_name(bus), "vdev") == 0;
  zero_copy_ = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) && software;
  if (zero_copy_) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  auto fail = [&](const char *what, int rc) {
    *error = std::string(what) + ": " + rte_strerror(rc < 0 ? -rc : rc);
    return false;
  };
  // An RX and a TX queue per worker. The device spreads received frames over the RX queues
  // (RSS, or af_packet's fanout); a worker hands what is not its QPs' to their workers.
  dev_.queues = std::max<uint16_t>(cfg.queues, 1);
  if (dev_.queues > kMaxQueues || dev_.queues > info.max_tx_queues ||
      dev_.queues > info.max_rx_queues) {
    *error = "the device has " + std::to_string(std::min(info.max_rx_queues, info.max_tx_queues)) +
             " queue pairs for " + std::to_string(dev_.queues) +
             " workers (af_packet: add qpairs=N to the --vdev)";
    return false;
  }
  if (dev_.queues > 1) conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
  int rc_start = 0;
  auto set_up = [&](bool rx_interrupts) {
    conf.intr_conf.rxq = rx_interrupts;
    if (int rc = rte_eth_dev_configure(port_id_, dev_.queues, dev_.queues, &conf); rc != 0)
      return fail("rte_eth_dev_configure", rc);
    uint16_t rxd = kQueueDescriptors, txd = kQueueDescriptors;
    rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rxd, &txd);
    for (uint16_t q = 0; q < dev_.queues; q++) {
      if (int rc = rte_eth_rx_queue_setup(port_id_, q, rxd, unsigned(socket), nullptr, rx_mbufs_);
          rc)
        return fail("rte_eth_rx_queue_setup", rc);
      if (int rc = rte_eth_tx_queue_setup(port_id_, q, txd, unsigned(socket), nullptr); rc)
        return fail("rte_eth_tx_queue_setup", rc);
    }
    on_interrupt_thread([&] { rc_start = rte_eth_dev_start(port_id_); });
    return true;
  };
  // RX interrupts, so that an idle worker sleeps until a frame comes rather than looking
  // every kPollNs; a device that cannot start with them starts without (a PMD without them
  // starts anyway: its queues have no interrupt descriptor, see arm_rx_interrupt()). memif in
  // DPDK 22.11 has none, and its client may fail to start for want of a server: its link then
  // stays down and housekeeping() tries again.
  dev_.rx_interrupts = !memif_ && set_up(true) && rc_start == 0;
  if (!dev_.rx_interrupts) {
    if (!memif_) rte_eth_dev_stop(port_id_);  // (a failed start may have left half of it)
    error->clear();
    if (!set_up(false)) return false;
  }
  if (rc_start != 0 && !memif_) return fail("rte_eth_dev_start", rc_start);
  started_ = true;
  running_ = rc_start == 0;
  rte_eth_promiscuous_enable(port_id_);  // frames are filtered by address here
  rte_ether_addr mac;
  rte_eth_macaddr_get(port_id_, &mac);
  std::memcpy(mac_.bytes, mac.addr_bytes, 6);
  uint16_t ip_mtu = 1500;
  rte_eth_dev_get_mtu(port_id_, &ip_mtu);
  if (memif_) ip_mtu = memif_mtu(cfg.eal_args);
  // A frame must fit one mbuf when the device cannot take chains.
  uint32_t room = RTE_MBUF_DEFAULT_DATAROOM - kEthHeaderBytes;
  if (!zero_copy_ && ip_mtu > room) ip_mtu = uint16_t(room);
  mtu_ = roce_mtu_for(ip_mtu, ip_header_len_);
  if (!mtu_) {
    *error = "the device's MTU (" + std::to_string(ip_mtu) + ") is too small for RoCE";
    return false;
  }
  next_restart_ = now_ns() + kMemifRetryNs;
  dev_.configured = true;
  housekeeping(now_ns());
  return true;
}

DpdkPort::~DpdkPort() {
  for (; ready_head_ < ready_.size(); ready_head_++) pool_.free(ready_[ready_head_]);
  drop_backlog();
  for (auto &[ip, pkts] : pending_)
    for (Packet *p : pkts) pool_.free(p);
  // Queue 0's port goes first (worker 0's); every worker has stopped by then and the other
  // ports are still there for payload_done.
  if (started_ && queue_ == 0) {
    on_interrupt_thread([this] {
      rte_eth_dev_stop(port_id_);
      rte_eth_dev_close(port_id_);  // frees what the device held, calling payload_done
    });
    started_ = false;
  }
}

// DPDK's per-lcore caches need a thread id: the worker registers itself on first use.
void DpdkPort::on_thread() {
  if (registered_thread_) return;
  registered_thread_ = true;
  if (rte_lcore_id() == LCORE_ID_ANY) rte_thread_register();
}

// Arms this queue's RX interrupt for a sleep of the worker, if the device has one and nothing
// here wants the worker sooner (frames to send or deliver, peers being resolved, faults that
// hold frames back).
int DpdkPort::arm_rx_interrupt() {
  if (!dev_.rx_interrupts || !running_ || backlog_count_ || pending_packets_ ||
      ready_head_ != ready_.size() || faults_.active())
    return -1;
  if (!rx_intr_looked_up_) {
    rx_intr_looked_up_ = true;
    rx_intr_fd_ = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id_, queue_);
    char link[64] = {};
    const std::string path = "/proc/self/fd/" + std::to_string(rx_intr_fd_);
    rx_intr_eventfd_ = rx_intr_fd_ >= 0 && ::readlink(path.c_str(), link, sizeof(link) - 1) > 0 &&
                       std::strstr(link, "eventfd") != nullptr;
  }
  if (rx_intr_fd_ < 0) return -1;
  // -ENOTSUP: nothing to arm, the descriptor is readable whenever frames wait (tap's queue).
  const int rc = rte_eth_dev_rx_intr_enable(port_id_, queue_);
  if (rc != 0 && rc != -ENOTSUP) return -1;
  rx_intr_enabled_ = rc == 0;
  // A frame that came since the last look would raise no (edge-triggered) interrupt.
  if (rte_eth_rx_queue_count(port_id_, queue_) > 0) {
    rx_interrupt_done();
    return -1;
  }
  rx_armed_ = true;
  return rx_intr_fd_;
}

void DpdkPort::rx_interrupt_done() {
  pollfd p{rx_intr_fd_, POLLIN, 0};
  if (rx_armed_ && ::poll(&p, 1, 0) == 1) {
    counters_[kPortRxInterrupts]++;
    uint64_t count;
    if (rx_intr_eventfd_ && ::read(rx_intr_fd_, &count, sizeof(count)) < 0) count = 0;
  }
  rx_armed_ = false;
  if (rx_intr_enabled_) rte_eth_dev_rx_intr_disable(port_id_, queue_);
  rx_intr_enabled_ = false;
}

void DpdkPort::housekeeping(uint64_t now) {
  if (now < next_housekeeping_) return;
  next_housekeeping_ = now + kHousekeepingNs;
  if (queue_ == 0) watch_device(now);
  // Peers that never answered: their packets go; those answered (perhaps on another
  // worker's queue) go out; the others are asked again.
  std::vector<IpKey> failed, resolved;
  for (auto &[ip, pkts] : pending_) {
    NeighborTable::Answer a;
    {
      std::lock_guard lock(dev_.neighbors_mu);
      a = dev_.neighbors.lookup(ip, now);
    }
    uint8_t target[16];
    key_to_gid(ip, target);
    if (a.send_request) send_neighbor(Neighbor::kAsk, target, MacAddress{});
    if (a.state == NeighborTable::State::kFailed) failed.push_back(ip);
    if (a.mac) resolved.push_back(ip);
  }
  for (IpKey ip : failed) drop_pending(ip);
  for (IpKey ip : resolved) {
    std::vector<Packet *> pkts = std::move(pending_[ip]);
    pending_.erase(ip);
    pending_packets_ -= uint32_t(pkts.size());
    for (size_t i = 0; i < pkts.size(); i += kBurst)
      transmit_resolved(pkts.data() + i, uint16_t(std::min<size_t>(kBurst, pkts.size() - i)), now);
  }
  if (tx_in_flight_ && running_) rte_eth_tx_done_cleanup(port_id_, queue_, 0);
}

// The device's link (worker 0's port looks after it).
void DpdkPort::watch_device(uint64_t now) {
  // Frames the device dropped for want of RX descriptors (af_packet's and af_xdp's kernel
  // rings included). A restarted device counts from 0 again.
  rte_eth_stats st;
  if (rte_eth_stats_get(port_id_, &st) == 0) {
    if (st.imissed < imissed_seen_) imissed_before_ += imissed_seen_;
    imissed_seen_ = st.imissed;
    counters_[kPortRxDropped] = imissed_before_ + imissed_seen_;
  }
  rte_eth_link link{};
  bool up = rte_eth_link_get_nowait(port_id_, &link) != 0 || link.link_status;
  if (!iface_.empty()) up = up && kernel_link_running(iface_);
  const bool was_up = link_up_.load(std::memory_order_relaxed);
  if (up != was_up || !announced_) {
    if (up != was_up) counters_[kPortLinkChanges]++;
    // A memif peer that just went away may be shutting down: reconnecting at once would land
    // between its device's stop and close, which DPDK 22.11's memif server does not survive.
    if (was_up && !up) next_restart_ = now + kMemifRetryNs;
    link_up_.store(up, std::memory_order_relaxed);
    // An announcement (gratuitous ARP, unsolicited advertisement) when the link comes up:
    // peers that knew another MAC for our address (a restarted vrnicd, a new NIC) update it.
    announced_ = up;
    if (up) send_neighbor(Neighbor::kAnnounce, gid_, MacAddress{});
  }
  // A memif client connects when the device starts and, in DPDK 22.11, never again: one that
  // started before its server (or outlived it) is restarted now and then until it connects.
  if (!up && memif_ && now >= next_restart_) {
    next_restart_ = now + kMemifRetryNs;
    restart_device();
  }
}

// With the other workers kept out of their queues. memif holds no transmitted mbuf (it copies
// each frame into its ring at once), so stopping it frees nothing another worker owns.
void DpdkPort::restart_device() {
  dev_.pausing.store(true, std::memory_order_seq_cst);
  for (uint16_t q = 0; q < dev_.queues; q++)
    while (q != queue_ && dev_.in_device[q].load(std::memory_order_seq_cst))
      std::this_thread::yield();
  on_interrupt_thread([this] {
    if (running_) rte_eth_dev_stop(port_id_);
    running_ = rte_eth_dev_start(port_id_) == 0;
  });
  dev_.pausing.store(false, std::memory_order_release);
}

uint16_t DpdkPort::rx_burst(Packet **pkts, uint16_t n) {
  on_thread();
  if (ready_head_ == ready_.size()) {
    ready_.clear();
    ready_head_ = 0;
    const uint64_t now = now_ns();
    if (enter_device()) {
      housekeeping(now);
      drain_backlog();
      rte_mbuf *frames[kBurst];
      uint16_t got = running_ ? rte_eth_rx_burst(port_id_, queue_, frames, kBurst) : 0;
      for (uint16_t i = 0; i < got; i++) rte_prefetch0(rte_pktmbuf_mtod(frames[i], void *));
      for (uint16_t i = 0; i < got; i++) receive_frame(frames[i], now);
      leave_device();
    }
    faults_.release_due();
  }
  uint16_t i = 0;
  for (; i < n && ready_head_ < ready_.size(); i++) pkts[i] = ready_[ready_head_++];
  return i;
}

}  // namespace vrnic::dpdk

extern "C" __attribute__((visibility("default"))) vrnic::Port *vrnic_dpdk_port_open(
    const vrnic::DpdkPortConfig *cfg, vrnic::PacketPool *pool, std::string *error) {
  if (cfg->device >= vrnic::dpdk::kMaxDevices) {
    *error = "device vrnic" + std::to_string(cfg->device) + ": at most " +
             std::to_string(vrnic::dpdk::kMaxDevices) + " devices";
    return nullptr;
  }
  auto port = std::make_unique<vrnic::dpdk::DpdkPort>(*pool, vrnic::dpdk::g_devices[cfg->device]);
  if (!port->open(*cfg, error)) return nullptr;
  return port.release();
}
