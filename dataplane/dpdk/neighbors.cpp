// ARP (IPv4) and neighbour discovery (IPv6) on the dpdk port: asking, answering, announcing,
// and learning peers' Ethernet addresses into the device's table (queue_port.h).
#include "queue_port.h"

#include <cstring>
#include <mutex>

#include "dataplane/neighbor_discovery.h"

namespace vrnic::dpdk {

// Any thread may ask (the request goes out on this port's queue while its worker runs the
// command, or is parked): nothing here needs the worker's per-lcore mbuf cache.
void DpdkPort::resolve(const uint8_t *peer_gid) {
  if (gid_is_ipv4(peer_gid) == ipv6_ || !running_ || !link_up() || !enter_device()) return;
  bool ask;
  {
    std::lock_guard lock(dev_.neighbors_mu);
    ask = dev_.neighbors.prime(ip_key(peer_gid), now_ns());
  }
  if (ask) send_neighbor(Neighbor::kAsk, peer_gid, MacAddress{});
  leave_device();
}

void DpdkPort::send_control_frame(const uint8_t *frame, size_t len) {
  rte_mbuf *m = rte_pktmbuf_alloc(mbufs_);
  if (!m) return;
  auto *out = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(m, uint16_t(len)));
  std::memcpy(out, frame, len);
  if (!running_ || rte_eth_tx_burst(port_id_, queue_, &m, 1) != 1) rte_pktmbuf_free(m);
}

// Ask for a peer's Ethernet address, answer a peer that asked for ours, or announce ours
// (after the link comes up): ARP over IPv4, neighbour solicitations and advertisements over
// IPv6 (to the peer's solicited-node group; an answer to the asker; an announcement to all
// nodes, overriding what they knew).
void DpdkPort::send_neighbor(Neighbor what, const uint8_t *peer_gid, const MacAddress &peer_mac) {
  uint8_t frame[std::max(kNdFrameBytes, kEthMinFrame)];
  if (!ipv6_) {
    ArpMessage msg{what == Neighbor::kAnswer ? ArpMessage::kReply : ArpMessage::kRequest,
                   mac_,
                   {},
                   peer_mac,
                   {}};
    std::memcpy(msg.sender_ip, ip_, 4);
    std::memcpy(msg.target_ip, what == Neighbor::kAnnounce ? ip_ : peer_gid + 12, 4);
    return send_control_frame(frame, build_arp_frame(frame, msg));
  }
  NdMessage msg{};
  msg.src_mac = mac_;
  msg.link_address = mac_;
  msg.has_link_address = true;
  std::memcpy(msg.src_ip, gid_, 16);
  MacAddress to = peer_mac;
  if (what == Neighbor::kAsk) {
    msg.type = NdMessage::kSolicitation;
    std::memcpy(msg.target, peer_gid, 16);
    solicited_node(peer_gid, msg.dst_ip);
    to = ipv6_multicast_mac(msg.dst_ip);
  } else {
    msg.type = NdMessage::kAdvertisement;
    std::memcpy(msg.target, gid_, 16);
    msg.solicited = what == Neighbor::kAnswer;
    msg.override_ = true;
    std::memcpy(msg.dst_ip, what == Neighbor::kAnswer ? peer_gid : kAllNodes, 16);
    if (what == Neighbor::kAnnounce) to = ipv6_multicast_mac(kAllNodes);
  }
  send_control_frame(frame, build_nd_frame(frame, msg, to));
}

// A peer told us its Ethernet address. RFC 826 (and RFC 4861 7.2.3-5 in effect): learn it
// when the message was for us or the peer is awaited, else only refresh a known entry; then
// send what waited for the peer.
void DpdkPort::heard_from(const uint8_t *peer_gid, const MacAddress &mac, bool for_us,
                          uint64_t now) {
  // No host has a group or all-zero address: such a claim would only poison the table.
  if ((mac.bytes[0] & 1) || mac == MacAddress{}) return;
  const IpKey peer = ip_key(peer_gid);
  auto waiting = pending_.find(peer);
  {
    std::lock_guard lock(dev_.neighbors_mu);
    if (!for_us && waiting == pending_.end()) {
      dev_.neighbors.refresh(peer, mac, now);
      return;
    }
    dev_.neighbors.learn(peer, mac, now);
  }
  if (waiting == pending_.end()) return;
  std::vector<Packet *> pkts = std::move(waiting->second);
  pending_.erase(waiting);
  pending_packets_ -= uint32_t(pkts.size());
  for (size_t i = 0; i < pkts.size(); i += kBurst)
    transmit_resolved(pkts.data() + i, uint16_t(std::min<size_t>(kBurst, pkts.size() - i)), now);
}

void DpdkPort::on_arp(const uint8_t *frame, uint32_t len, uint64_t now) {
  ArpMessage m;
  if (ipv6_ || !parse_arp_frame(frame, len, &m)) return;
  const bool for_us = std::memcmp(m.target_ip, ip_, 4) == 0;
  uint8_t sender[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::memcpy(sender + 12, m.sender_ip, 4);
  if (for_us && m.op == ArpMessage::kRequest && !(m.sender_mac.bytes[0] & 1))
    send_neighbor(Neighbor::kAnswer, sender, m.sender_mac);
  heard_from(sender, m.sender_mac, for_us, now);
}

// Solicitations for our address are answered (those of a duplicate-address check, from the
// unspecified address, to all nodes); a solicitation tells us its sender's address, an
// advertisement its target's.
void DpdkPort::on_nd(const uint8_t *frame, uint32_t len, uint64_t now) {
  NdMessage m;
  if (!parse_nd_frame(frame, len, &m)) return;
  static const uint8_t kUnspecified[16] = {};
  const bool about_us = std::memcmp(m.target, gid_, 16) == 0;
  if (m.type == NdMessage::kSolicitation) {
    const bool from_nowhere = std::memcmp(m.src_ip, kUnspecified, 16) == 0;
    if (about_us && !(m.src_mac.bytes[0] & 1))
      send_neighbor(from_nowhere ? Neighbor::kAnnounce : Neighbor::kAnswer, m.src_ip,
                    m.has_link_address ? m.link_address : m.src_mac);
    if (!from_nowhere && m.has_link_address) heard_from(m.src_ip, m.link_address, about_us, now);
    return;
  }
  if (about_us) return;  // someone else claims our address: not ours to resolve
  heard_from(m.target, m.has_link_address ? m.link_address : m.src_mac, m.solicited, now);
}

void DpdkPort::drop_pending(IpKey ip) {
  auto it = pending_.find(ip);
  if (it == pending_.end()) return;
  for (Packet *p : it->second) pool_.free(p);
  counters_[kPortTxNoRoute] += it->second.size();
  pending_packets_ -= uint32_t(it->second.size());
  pending_.erase(it);
}

}  // namespace vrnic::dpdk
