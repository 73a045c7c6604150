// The dpdk port (see ../dpdk_port.h) of one worker: its RX and TX queue pair on the device
// it shares with the other workers' ports (shared_device.h). Everything here runs on the
// worker thread except open() (the control thread, before the worker starts), resolve() and
// link_up() (any thread). By idea: dpdk_port.cpp sets the queue up and runs its bursts, link
// and interrupts; frames.cpp builds and checks frames; tx_backlog.cpp holds what the TX
// queue cannot take yet; neighbors.cpp speaks ARP and neighbour discovery.
#pragma once

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <array>
#include <atomic>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "dataplane/dpdk_port.h"
#include "dataplane/ethernet.h"
#include "dataplane/ip_header.h"
#include "dataplane/neighbor_table.h"
#include "dataplane/rx_fault_stage.h"
#include "internal.h"
#include "shared_device.h"

namespace vrnic::dpdk {

class DpdkPort final : public Port {
 public:
  DpdkPort(PacketPool &pool, SharedDevice &dev) : pool_(pool), dev_(dev) {}
  ~DpdkPort() override;
  bool open(const DpdkPortConfig &cfg, std::string *error);

  uint16_t tx_burst(Packet **pkts, uint16_t n) override;
  uint16_t rx_burst(Packet **pkts, uint16_t n) override;
  // Packets waiting for a peer's address are not counted: they hold their payloads themselves
  // (bounced), and a peer that never answers would hold every control operation of the
  // device for its whole fail time.
  uint32_t in_flight() const override { return tx_in_flight_ + backlog_count_; }
  bool tx_full() const override { return backlog_count_ >= kTxBacklogFull; }
  uint32_t mtu_bytes() const override { return mtu_; }
  const PortCounters &counters() const override { return counters_; }
  const uint8_t *gid() const override { return gid_; }
  bool link_up() const override { return link_up_.load(std::memory_order_relaxed); }
  uint64_t max_sleep_ns() const override { return rx_armed_ ? kHousekeepingNs : kPollNs; }
  int arm_rx_interrupt() override;
  void rx_interrupt_done() override;
  void resolve(const uint8_t *peer_gid) override;
  void set_faults(const FaultConfig &cfg) override { faults_.configure(cfg); }
  const FaultCounters *fault_counters() const override { return faults_.counters(); }

 private:
  void on_thread();
  rte_mbuf *build_frame(Packet *pkt, const MacAddress &dst);
  void send_frames(rte_mbuf **frames, uint16_t n);
  uint16_t send_now(rte_mbuf **frames, uint16_t n);
  bool drain_backlog();
  void drop_backlog();
  void transmit_resolved(Packet **pkts, uint16_t n, uint64_t now);
  // Neighbour resolution, ARP or IPv6 neighbour discovery by the port's address family.
  enum class Neighbor { kAsk, kAnswer, kAnnounce };
  void send_neighbor(Neighbor what, const uint8_t *peer_gid, const MacAddress &peer_mac);
  void send_control_frame(const uint8_t *frame, size_t len);
  void on_arp(const uint8_t *frame, uint32_t len, uint64_t now);
  void on_nd(const uint8_t *frame, uint32_t len, uint64_t now);
  void heard_from(const uint8_t *peer_gid, const MacAddress &mac, bool for_us, uint64_t now);
  enum class Check { kOk, kIgnore, kMalformed, kNeighborDiscovery };
  Check check_ipv4(const uint8_t *ip, uint32_t room, uint32_t *ip_len);
  Check check_ipv6(const uint8_t *ip, uint32_t room);
  void receive_frame(rte_mbuf *m, uint64_t now);
  void on_received(RxFrame f);
  static void deliver(void *port, RxFrame f) { static_cast<DpdkPort *>(port)->on_received(f); }
  static void release_mbuf(Packet *pkt) {
    rte_pktmbuf_free(static_cast<rte_mbuf *>(pkt->release_arg));
  }
  static void payload_done(void *, void *opaque);
  void housekeeping(uint64_t now);
  void watch_device(uint64_t now);
  // The worker's use of the device, bracketed (see SharedDevice::pausing): false while the
  // device is being restarted, not to be touched then.
  bool enter_device() {
    dev_.in_device[queue_].store(true, std::memory_order_seq_cst);
    if (!dev_.pausing.load(std::memory_order_seq_cst)) return true;
    leave_device();
    return false;
  }
  void leave_device() { dev_.in_device[queue_].store(false, std::memory_order_release); }
  void restart_device();
  void drop_pending(IpKey ip);

  PacketPool &pool_;
  SharedDevice &dev_;
  uint16_t queue_ = 0;  // this worker's RX and TX queue (queue 0's port watches the link)
  // The shared device's fields, by their old names.
  uint16_t &port_id_ = dev_.port_id;
  bool &started_ = dev_.started;  // configured and started: stopped and closed at the end
  std::atomic<bool> &running_ = dev_.running;  // started now: its queues may be used
  rte_mempool *&mbufs_ = dev_.mbufs;           // frames built or received here
  rte_mempool *&ext_mbufs_ = dev_.ext_mbufs;   // no data room: payloads from registered memory
  rte_mempool *&rx_mbufs_ = dev_.rx_mbufs;
  bool &zero_copy_ = dev_.zero_copy;  // the device takes chained mbufs
  bool &memif_ = dev_.memif;          // see housekeeping()
  bool &announced_ = dev_.announced;  // gratuitous ARP sent since the link came up
  uint64_t &next_restart_ = dev_.next_restart;
  MacAddress &mac_ = dev_.mac;
  bool &ipv6_ = dev_.ipv6;
  uint32_t ip_header_len_ = kIpv4HeaderBytes;
  uint8_t (&ip_)[4] = dev_.ip;
  uint8_t (&gid_)[16] = dev_.gid;
  uint16_t &udp_port_ = dev_.udp_port;
  uint32_t &mtu_ = dev_.mtu;
  std::string &iface_ = dev_.iface;
  std::atomic<bool> &link_up_ = dev_.link_up;
  bool registered_thread_ = false;
  // This queue's RX interrupt: a descriptor that turns readable when a frame comes (tap: the
  // queue's own file; a NIC under VFIO: an eventfd, read to re-arm), looked up once.
  bool rx_intr_looked_up_ = false;
  int rx_intr_fd_ = -1;
  bool rx_intr_eventfd_ = false;
  bool rx_intr_enabled_ = false;  // rte_eth_dev_rx_intr_enable() took (not every PMD has it)
  bool rx_armed_ = false;         // the worker sleeps on rx_intr_fd_
  uint64_t next_housekeeping_ = 0;
  uint32_t tx_in_flight_ = 0;    // zero-copy payloads the device still holds
  uint64_t imissed_seen_ = 0;    // the device's count of missed frames, last read
  uint64_t imissed_before_ = 0;  // ... and what it had counted before a restart
  // Frames waiting for room in the TX queue, oldest first (a ring): sent before newer ones.
  std::array<rte_mbuf *, kTxBacklog> backlog_{};
  uint32_t backlog_head_ = 0;
  uint32_t backlog_count_ = 0;
  uint64_t stalled_since_ns_ = 0;  // the queue refused a frame then and took none since; 0: not
  // Packets waiting for a peer's ARP (or ND) answer, by peer, each payload in its own bounce
  // buffer: nothing of a client's memory is held while the peer is resolved. (A QP moved to
  // another worker meanwhile may have its packets reordered, at worst: go-back-N recovers.)
  absl::flat_hash_map<IpKey, std::vector<Packet *>> pending_;
  NeighborCache peer_cache_;  // reachable peers, looked up without dev_.neighbors_mu
  uint32_t pending_packets_ = 0;
  RxFaultStage faults_{pool_, &DpdkPort::deliver, this};
  std::vector<Packet *> ready_;
  size_t ready_head_ = 0;
  PortCounters counters_;
};

}  // namespace vrnic::dpdk
