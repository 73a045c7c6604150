// Writing a packet into a capture ring as its Ethernet frame (capture_tap.h): the headers a
// wire port would put around it (IPv4 or IPv6 by its GIDs, UDP to 4791 whatever the port's
// UDP port, so that decoders know it for RoCEv2), its pad and its ICRC, built in the ring.
#include "capture_tap.h"

#include <time.h>

#include <cstring>

#include "ethernet.h"
#include "neighbor_discovery.h"
#include "icrc.h"
#include "ip_header.h"
#include "vrnic/capture_ring.h"
#include "vrnic/wire.h"

namespace vrnic {
namespace {

// A locally administered MAC made of the address's last four bytes: the frame's endpoints
// told apart as its IP addresses are.
MacAddress mac_of(const uint8_t gid[16]) {
  return MacAddress{{0x02, 0x00, gid[12], gid[13], gid[14], gid[15]}};
}

}  // namespace

void CaptureTap::record(uint32_t worker, Packet *const *pkts, uint16_t n, bool received) const {
  if (worker >= workers_) return;
  timespec now;  // one clock read per burst
  ::clock_gettime(CLOCK_REALTIME, &now);
  const uint64_t time_ns = uint64_t(now.tv_sec) * 1'000'000'000 + uint64_t(now.tv_nsec);
  for (uint16_t i = 0; i < n; i++)
    if (wanted(*pkts[i])) write(worker, *pkts[i], received, time_ns);
}

void CaptureTap::write(uint32_t worker, const Packet &p, bool received, uint64_t time_ns) const {
  capture::RingHeader &ring = *capture::ring_header(region_, worker);
  uint8_t *data = capture::ring_data(region_, worker);
  const bool v4 = gid_is_ipv4(p.src_gid) && gid_is_ipv4(p.dst_gid);
  const uint32_t pad = -p.payload_len & 3;
  const uint32_t transport = p.header_len + p.payload_len + pad;
  const uint32_t udp_len = uint32_t(kUdpHeaderBytes) + transport + 4;
  const uint32_t ip_len = v4 ? 20 : 40;
  const uint32_t frame_len = 14 + ip_len + udp_len;
  const uint32_t rec = capture::record_bytes(frame_len);

  // Room: the reader's tail is its own to write, so it is only trusted to bound how much
  // of the ring is free (a bad one makes the ring look full, never overwritten past it).
  uint64_t &head = heads_[worker].bytes;
  const uint64_t used = head - ring.tail.load(std::memory_order_acquire);
  const uint32_t at = uint32_t(head % capture::kRingBytes);
  const uint32_t skip = at + rec > capture::kRingBytes ? capture::kRingBytes - at : 0;
  if (used > capture::kRingBytes || capture::kRingBytes - used < uint64_t(rec) + skip) {
    ring.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (skip) reinterpret_cast<capture::RecordHeader *>(data + at)->frame_len = capture::kWrapMarker;
  uint8_t *out = data + (at + skip) % capture::kRingBytes;

  auto *rh = reinterpret_cast<capture::RecordHeader *>(out);
  rh->frame_len = frame_len;
  rh->received = received ? 1 : 0;
  rh->time_ns = time_ns;

  uint8_t *frame = out + sizeof(capture::RecordHeader);
  uint8_t *ip = frame + build_eth(frame, mac_of(p.dst_gid), mac_of(p.src_gid),
                                  v4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  uint8_t *udp = ip + (v4 ? build_ipv4(ip, p.src_gid, p.dst_gid, uint16_t(udp_len), 0, 64, 0, true)
                          : build_ipv6(ip, p.src_gid, p.dst_gid, uint16_t(udp_len), 0, 0, 64));
  uint8_t *bth = udp + kUdpHeaderBytes;
  std::memcpy(bth, p.header, p.header_len);
  bth[1] = uint8_t((bth[1] & ~0x30) | pad << 4);  // the pad count, the port's to set
  if (p.payload_len) std::memcpy(bth + p.header_len, p.payload, p.payload_len);
  std::memset(bth + p.header_len + p.payload_len, 0, pad);
  const uint16_t sport = p.udp_sport ? p.udp_sport : 0xc000;
  build_udp(udp, sport, wire::kRoceUdpPort, uint16_t(udp_len), 0);
  const iovec body{bth, transport};
  store_icrc(bth + transport, roce_icrc(ip, ip_len, udp, &body, 1));
  if (!v4) {
    // IPv6 wants a UDP checksum (RFC 8200), over the ICRC too.
    const iovec parts[2] = {{udp, kUdpHeaderBytes}, {bth, transport + 4}};
    const uint16_t sum = ipv6_upper_checksum(p.src_gid, p.dst_gid, kIpProtocolUdp, parts, 2);
    build_udp(udp, sport, wire::kRoceUdpPort, uint16_t(udp_len), sum ? sum : 0xffff);
  }
  ring.written.fetch_add(1, std::memory_order_relaxed);
  head += skip + rec;
  ring.head.store(head, std::memory_order_release);
}

}  // namespace vrnic
