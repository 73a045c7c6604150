// Frames of the dpdk port: Ethernet, IP and UDP around a RoCE packet on the way out, and
// the checks a received frame passes before it is one (queue_port.h).
#include "queue_port.h"

#include <algorithm>
#include <cstring>

#include "dataplane/icrc.h"
#include "dataplane/neighbor_discovery.h"

namespace vrnic::dpdk {

// The device is done with a zero-copy payload: the packet that referenced it goes back.
void DpdkPort::payload_done(void *, void *opaque) {
  auto *pkt = static_cast<Packet *>(opaque);
  DpdkPort *port = scratch<TxScratch>(pkt).port;
  port->tx_in_flight_--;
  port->pool_.free(pkt);
}

// Ethernet, IPv4, UDP and the transport header in one mbuf; the payload attached in place
// (zero-copy) or copied after them; pad and ICRC last. The packet is the frame's to free.
rte_mbuf *DpdkPort::build_frame(Packet *pkt, const MacAddress &dst) {
  const uint32_t pad = pkt->set_pad();
  const uint32_t roce_len = pkt->header_len + pkt->payload_len + pad + uint32_t(wire::kIcrcBytes);
  const bool copied = bounced(pkt);
  const uint32_t headers = uint32_t(kEthHeaderBytes + ip_header_len_ + kUdpHeaderBytes);
  // A payload copied once already (bounced) is attached too when the frame would not fit one
  // mbuf (jumbo frames on memif). memif copies every frame into its shared ring itself, so
  // attaching saves no copy there: a frame that fits one mbuf is built whole, and memif's copy
  // of it is one aligned block instead of three segments, the payload's misaligned (+16% for
  // 64 KiB writes, 10 interleaved runs).
  const bool fits = headers + roce_len <= RTE_MBUF_DEFAULT_DATAROOM;
  const bool attach =
      zero_copy_ && (!fits || (!memif_ && !copied && pkt->payload_len >= kZeroCopyMin));
  rte_mbuf *head = rte_pktmbuf_alloc(mbufs_);
  if (!head) return nullptr;
  const uint32_t head_len = headers + pkt->header_len + (attach ? 0 : roce_len - pkt->header_len);
  auto *h = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(head, uint16_t(head_len)));
  if (!h) {
    rte_pktmbuf_free(head);
    return nullptr;
  }
  const uint16_t udp_len = uint16_t(kUdpHeaderBytes + roce_len);
  uint8_t *ip = h + build_eth(h, dst, mac_, ipv6_ ? kEtherTypeIpv6 : kEtherTypeIpv4);
  uint8_t *udp = ip + (ipv6_ ? build_ipv6(ip, gid_, pkt->dst_gid, udp_len, 0, 0, kTtl)
                             : build_ipv4(ip, gid_, pkt->dst_gid, udp_len, 0, kTtl, 0, true));
  build_udp(udp, pkt->udp_sport, udp_port_, udp_len, 0);
  uint8_t *transport = udp + kUdpHeaderBytes;
  // All of the header array (fixed size: vector moves); what lies past header_len is
  // overwritten by the payload or is past the mbuf's data.
  std::memcpy(transport, pkt->header, kMaxTransportHeader);
  static const uint8_t kZeros[4] = {};
  iovec body[3] = {{pkt->header, pkt->header_len},
                   {const_cast<uint8_t *>(pkt->payload), pkt->payload_len},
                   {const_cast<uint8_t *>(kZeros), pad}};
  const uint32_t icrc = roce_icrc(ip, ip_header_len_, udp, body, 3);
  uint8_t icrc_bytes[4];
  store_icrc(icrc_bytes, icrc);
  // Over IPv6 the UDP checksum is not optional (RFC 8200 8.1): a kernel peer drops a datagram
  // without one. It covers the ICRC, so it comes last.
  auto udp_checksum = [&] {
    iovec parts[5] = {{udp, kUdpHeaderBytes},
                      {pkt->header, pkt->header_len},
                      {const_cast<uint8_t *>(pkt->payload), pkt->payload_len},
                      {const_cast<uint8_t *>(kZeros), pad},
                      {icrc_bytes, wire::kIcrcBytes}};
    uint16_t sum = ipv6_upper_checksum(gid_, pkt->dst_gid, kIpProtocolUdp, parts, 5);
    wire::store_be16(udp + 6, sum ? sum : 0xffff);
  };
  if (ipv6_) udp_checksum();
  if (!attach) {
    uint8_t *p = transport + pkt->header_len;
    std::memcpy(p, pkt->payload, pkt->payload_len);
    std::memset(p + pkt->payload_len, 0, pad);
    std::memcpy(p + pkt->payload_len + pad, icrc_bytes, wire::kIcrcBytes);
    counters_[kPortTxPayloadCopied] += pkt->payload_len;
    pool_.free(pkt);
    return head;
  }
  rte_mbuf *payload = rte_pktmbuf_alloc(ext_mbufs_);
  rte_mbuf *tail = rte_pktmbuf_alloc(mbufs_);
  if (!payload || !tail) {
    rte_pktmbuf_free(payload);
    rte_pktmbuf_free(tail);
    rte_pktmbuf_free(head);
    return nullptr;
  }
  TxScratch &tx = scratch<TxScratch>(pkt);
  tx.port = this;
  tx.shinfo.free_cb = &DpdkPort::payload_done;
  tx.shinfo.fcb_opaque = pkt;
  rte_mbuf_ext_refcnt_set(&tx.shinfo, 1);
  void *va = const_cast<uint8_t *>(pkt->payload);
  rte_pktmbuf_attach_extbuf(payload, va, rte_iova_t(uintptr_t(va)), uint16_t(pkt->payload_len),
                            &tx.shinfo);
  rte_pktmbuf_append(payload, uint16_t(pkt->payload_len));
  tx_in_flight_++;  // from here the packet is freed by payload_done
  auto *t = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(tail, uint16_t(pad + wire::kIcrcBytes)));
  std::memset(t, 0, pad);
  std::memcpy(t + pad, icrc_bytes, wire::kIcrcBytes);
  (copied ? counters_[kPortTxPayloadCopied] : counters_[kPortTxPayloadZeroCopy]) +=
      pkt->payload_len;
  if (rte_pktmbuf_chain(head, payload) || rte_pktmbuf_chain(head, tail)) {
    rte_pktmbuf_free(head);  // frees what was chained; payload_done returns the packet
    return nullptr;
  }
  return head;
}

// A frame off the wire: ARP, or an IPv4 UDP datagram to our RoCE port (anything else on the
// link is not ours and is ignored, as a NIC's filters would).
// An IPv4 datagram to us: its header checked (a damaged one is counted even when it may not be
// ours: it came to our MAC), kOk for UDP to our address.
DpdkPort::Check DpdkPort::check_ipv4(const uint8_t *ip, uint32_t room, uint32_t *ip_len) {
  if (room < kIpv4HeaderBytes || (ip[0] >> 4) != 4) return Check::kMalformed;
  *ip_len = uint32_t(ip[0] & 0xf) * 4;
  if (*ip_len < kIpv4HeaderBytes || *ip_len > room || ipv4_header_checksum(ip, *ip_len))
    return Check::kMalformed;
  if (std::memcmp(ip + 16, ip_, 4) != 0 || ip[9] != kIpProtocolUdp) return Check::kIgnore;
  const uint32_t total = wire::load_be16(ip + 2);
  if (total < *ip_len + kUdpHeaderBytes || total > room ||
      (wire::load_be16(ip + 6) & 0x3fff) /* a fragment: RoCE never sends one */)
    return Check::kMalformed;
  return Check::kOk;
}

// An IPv6 packet to our link address or a group we are in: neighbour discovery (ICMPv6), or
// kOk for UDP to our address. RoCE sends no extension headers: a packet with one is not ours.
DpdkPort::Check DpdkPort::check_ipv6(const uint8_t *ip, uint32_t room) {
  if (room < kIpv6HeaderBytes || (ip[0] >> 4) != 6) return Check::kMalformed;
  const uint32_t payload = wire::load_be16(ip + 4);
  if (payload > room - kIpv6HeaderBytes) return Check::kMalformed;
  if (ip[6] == kIpProtocolIcmpv6) return Check::kNeighborDiscovery;
  if (ip[6] != kIpProtocolUdp || std::memcmp(ip + 24, gid_, 16) != 0) return Check::kIgnore;
  if (payload < kUdpHeaderBytes) return Check::kMalformed;
  return Check::kOk;
}

void DpdkPort::receive_frame(rte_mbuf *m, uint64_t now) {
  Packet *pkt = nullptr;
  const uint8_t *frame = rte_pktmbuf_mtod(m, const uint8_t *);
  uint32_t len = m->data_len;
  if (m->nb_segs > 1) {  // chained (a large frame on memif): one copy into a packet
    pkt = pool_.alloc();
    if (!pkt || m->pkt_len > kPacketBufferBytes) {
      counters_[kPortRxNoBuffer] += pkt == nullptr;
      counters_[kPortRxMalformed] += pkt != nullptr;
      if (pkt) pool_.free(pkt);
      rte_pktmbuf_free(m);
      return;
    }
    frame = static_cast<const uint8_t *>(rte_pktmbuf_read(m, 0, m->pkt_len, pkt->bounce));
    len = m->pkt_len;
  }
  auto ignore = [&] {
    if (pkt) pool_.free(pkt);
    rte_pktmbuf_free(m);
  };
  auto malformed = [&] {
    counters_[kPortRxMalformed]++;
    ignore();
  };
  if (len < kEthHeaderBytes) return malformed();
  const uint16_t ether_type = wire::load_be16(frame + 12);
  if (ether_type == kEtherTypeArp) {
    on_arp(frame, len, now);
    return ignore();
  }
  MacAddress dst;
  std::memcpy(dst.bytes, frame, 6);
  const uint8_t *ip = frame + kEthHeaderBytes;
  const uint32_t room = len - uint32_t(kEthHeaderBytes);
  const uint8_t *udp = nullptr;
  uint32_t ip_len = 0, udp_len = 0;
  Check got = Check::kIgnore;
  if (ether_type == kEtherTypeIpv4 && !ipv6_ && dst == mac_) {
    got = check_ipv4(ip, room, &ip_len);
  } else if (ether_type == kEtherTypeIpv6 && ipv6_ &&
             (dst == mac_ || dst == dev_.solicited_mac || dst == ipv6_multicast_mac(kAllNodes))) {
    ip_len = kIpv6HeaderBytes;
    got = check_ipv6(ip, room);
    if (got == Check::kNeighborDiscovery) {
      on_nd(frame, len, now);
      return ignore();
    }
  }
  if (got == Check::kMalformed) return malformed();
  if (got != Check::kOk) return ignore();
  udp = ip + ip_len;
  udp_len = ipv6_ ? wire::load_be16(ip + 4) : wire::load_be16(ip + 2) - ip_len;
  if (wire::load_be16(udp + 2) != udp_port_) return ignore();
  if (wire::load_be16(udp + 4) != udp_len) return malformed();
  if (!pkt && !(pkt = pool_.alloc())) {
    counters_[kPortRxNoBuffer]++;
    return ignore();
  }
  if (m->nb_segs > 1) {
    rte_pktmbuf_free(m);  // its bytes were copied into the packet
  } else {
    pkt->release = &DpdkPort::release_mbuf;  // the payload stays in the mbuf until consumed
    pkt->release_arg = m;
  }
  RxScratch &rx = scratch<RxScratch>(pkt);
  // Fixed parts at fixed sizes (a variable-size memcpy is a slow rep movs), options after.
  if (ipv6_) {
    std::memcpy(rx.ip, ip, kIpv6HeaderBytes);
    std::memcpy(pkt->src_gid, ip + 8, 16);
  } else {
    std::memcpy(rx.ip, ip, kIpv4HeaderBytes);
    if (ip_len > kIpv4HeaderBytes)
      std::memcpy(rx.ip + kIpv4HeaderBytes, ip + kIpv4HeaderBytes, ip_len - kIpv4HeaderBytes);
    std::memset(pkt->src_gid, 0, 10);
    pkt->src_gid[10] = pkt->src_gid[11] = 0xff;
    std::memcpy(pkt->src_gid + 12, ip + 12, 4);
  }
  std::memcpy(rx.udp, udp, kUdpHeaderBytes);
  rx.ip_len = uint8_t(ip_len);
  std::memcpy(pkt->dst_gid, gid_, 16);
  pkt->udp_sport = wire::load_be16(udp);
  RxFrame f{pkt, const_cast<uint8_t *>(udp + kUdpHeaderBytes), udp_len - uint32_t(kUdpHeaderBytes)};
  if (faults_.active()) {
    faults_.push(f);
  } else {
    on_received(f);
  }
}

void DpdkPort::on_received(RxFrame f) {
  Packet *pkt = f.pkt;
  const RxScratch &rx = scratch<RxScratch>(pkt);
  if (!pkt->parse(f.data, f.len)) {
    counters_[kPortRxMalformed]++;
    pool_.free(pkt);
    return;
  }
  if (!roce_icrc_ok(rx.ip, rx.ip_len, rx.udp, f.data, f.len)) {
    counters_[kPortRxIcrcErrors]++;
    pool_.free(pkt);
    return;
  }
  counters_[kPortRxPackets]++;
  counters_[kPortRxBytes] += f.len;
  ready_.push_back(pkt);
}

}  // namespace vrnic::dpdk
