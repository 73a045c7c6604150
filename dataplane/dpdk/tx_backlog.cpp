// The dpdk port's transmit side: packets to frames for peers whose address is known (the
// others wait for it), and the backlog of frames the TX queue had no room for (queue_port.h).
#include "queue_port.h"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace vrnic::dpdk {

// In order: nothing new goes out while older frames wait in the backlog.
void DpdkPort::send_frames(rte_mbuf **frames, uint16_t n) {
  const uint16_t sent = drain_backlog() ? send_now(frames, n) : 0;
  for (uint16_t i = sent; i < n; i++) {
    if (backlog_count_ == kTxBacklog) {  // a backlog this long: lost, as on a full NIC
      rte_pktmbuf_free(frames[i]);
      counters_[kPortTxErrors]++;
      continue;
    }
    backlog_[(backlog_head_ + backlog_count_++) % kTxBacklog] = frames[i];
  }
}

uint16_t DpdkPort::send_now(rte_mbuf **frames, uint16_t n) {
  const uint16_t sent = rte_eth_tx_burst(port_id_, queue_, frames, n);
  for (uint16_t i = 0; i < sent; i++) counters_[kPortTxBytes] += frames[i]->pkt_len;
  counters_[kPortTxPackets] += sent;
  if (sent) stalled_since_ns_ = 0;
  if (sent < n && !stalled_since_ns_) stalled_since_ns_ = now_ns();
  return sent;
}

// True when the backlog is empty (sent, or dropped with the link down).
bool DpdkPort::drain_backlog() {
  if (!backlog_count_) return true;
  if (!running_ || !link_up()) {
    drop_backlog();
    return true;
  }
  while (backlog_count_) {
    const auto run = uint16_t(std::min<uint32_t>(backlog_count_, kTxBacklog - backlog_head_));
    const uint16_t sent = send_now(&backlog_[backlog_head_], run);
    backlog_head_ = (backlog_head_ + sent) % kTxBacklog;
    backlog_count_ -= sent;
    if (sent < run) {
      if (now_ns() - stalled_since_ns_ < kTxStallNs) return false;
      drop_backlog();
    }
  }
  return true;
}

void DpdkPort::drop_backlog() {
  counters_[kPortTxErrors] += backlog_count_;
  for (; backlog_count_; backlog_count_--, backlog_head_ = (backlog_head_ + 1) % kTxBacklog)
    rte_pktmbuf_free(backlog_[backlog_head_]);
}

void DpdkPort::transmit_resolved(Packet **pkts, uint16_t n, uint64_t now) {
  rte_mbuf *frames[kBurst];
  uint16_t nframes = 0;
  IpKey cached_ip = 0;
  bool cached = false;
  MacAddress cached_mac;
  for (uint16_t i = 0; i < n; i++) {
    Packet *pkt = pkts[i];
    const IpKey ip = ip_key(pkt->dst_gid);
    if (!running_ || !link_up() || gid_is_ipv4(pkt->dst_gid) == ipv6_) {  // not our family
      counters_[kPortTxErrors]++;
      pool_.free(pkt);
      continue;
    }
    if (!cached || ip != cached_ip) {
      // The port's own copy first: no lock on the way out while the peer's answer holds.
      if (const MacAddress *mac = peer_cache_.find(ip, now, dev_.neighbors.version())) {
        cached_mac = *mac;
      } else {
        NeighborTable::Answer a;
        {
          std::lock_guard lock(dev_.neighbors_mu);
          a = dev_.neighbors.lookup(ip, now);
          if (a.mac) cached_mac = *a.mac;  // the entry may move once the lock is gone
          peer_cache_.keep(ip, a, dev_.neighbors.version());
        }
        if (a.send_request) send_neighbor(Neighbor::kAsk, pkt->dst_gid, MacAddress{});
        if (!a.mac) {
          std::vector<Packet *> &waiting = pending_[ip];
          if (a.state == NeighborTable::State::kFailed || waiting.size() >= kMaxPendingPerPeer) {
            counters_[kPortTxNoRoute]++;
            pool_.free(pkt);
          } else {
            if (pkt->payload_len && !bounced(pkt)) {
              std::memcpy(pkt->bounce, pkt->payload, pkt->payload_len);
              pkt->payload = pkt->bounce;
            }
            pool_.settled(pkt);  // a peer that never answers must not hold grace periods
            waiting.push_back(pkt);
            pending_packets_++;
          }
          cached = false;
          continue;
        }
      }
      cached_ip = ip;
      cached = true;
    }
    rte_mbuf *m = build_frame(pkt, cached_mac);
    if (!m) {
      counters_[kPortTxErrors]++;  // no mbuf: the frame is lost, as on a full NIC
      continue;
    }
    frames[nframes++] = m;
    if (nframes == kBurst) {
      send_frames(frames, nframes);
      nframes = 0;
    }
  }
  if (nframes) send_frames(frames, nframes);
}

uint16_t DpdkPort::tx_burst(Packet **pkts, uint16_t n) {
  on_thread();
  if (!enter_device()) {  // restarting, its link down: lost, as on a NIC without a link
    counters_[kPortTxErrors] += n;
    for (uint16_t i = 0; i < n; i++) pool_.free(pkts[i]);
    return n;
  }
  for (uint16_t i = 0; i < n; i += kBurst)
    transmit_resolved(pkts + i, uint16_t(std::min<int>(kBurst, n - i)), now_ns());
  leave_device();
  return n;
}

}  // namespace vrnic::dpdk
