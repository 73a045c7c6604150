#include "ip_header.h"

#include <cstring>

#include "packet.h"
#include "vrnic/wire.h"

namespace vrnic {

using wire::store_be16;
using wire::store_be32;

namespace {
constexpr uint8_t kIpv4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
constexpr uint16_t kIpv4DontFragment = 0x4000;
}  // namespace

bool gid_is_ipv4(const uint8_t gid[16]) {
  return std::memcmp(gid, kIpv4MappedPrefix, sizeof(kIpv4MappedPrefix)) == 0;
}

uint16_t ipv4_header_checksum(const uint8_t *header, size_t header_len) {
  // Ones'-complement sums may be taken in wider words and folded (RFC 1071): 32 bits at a
  // time here, the header being a whole number of them.
  uint64_t sum = 0;
  for (size_t i = 0; i + 3 < header_len; i += 4) sum += wire::load_be32(header + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

size_t build_ipv4(uint8_t *out, const uint8_t src_gid[16], const uint8_t dst_gid[16],
                  uint16_t l4_len, uint8_t tos, uint8_t ttl, uint16_t id, bool dont_fragment) {
  out[0] = 0x45;  // version 4, header length 5 words
  out[1] = tos;
  store_be16(out + 2, uint16_t(kIpv4HeaderBytes + l4_len));
  store_be16(out + 4, id);
  store_be16(out + 6, dont_fragment ? kIpv4DontFragment : 0);
  out[8] = ttl;
  out[9] = kIpProtocolUdp;
  store_be16(out + 10, 0);
  std::memcpy(out + 12, src_gid + 12, 4);
  std::memcpy(out + 16, dst_gid + 12, 4);
  store_be16(out + 10, ipv4_header_checksum(out, kIpv4HeaderBytes));
  return kIpv4HeaderBytes;
}

size_t build_ipv6(uint8_t *out, const uint8_t src_gid[16], const uint8_t dst_gid[16],
                  uint16_t payload_len, uint8_t traffic_class, uint32_t flow_label,
                  uint8_t hop_limit) {
  // version 4 bits · traffic class 8 · flow label 20
  store_be32(out, 6u << 28 | uint32_t(traffic_class) << 20 | (flow_label & 0xfffff));
  store_be16(out + 4, payload_len);
  out[6] = kIpProtocolUdp;
  out[7] = hop_limit;
  std::memcpy(out + 8, src_gid, 16);
  std::memcpy(out + 24, dst_gid, 16);
  return kIpv6HeaderBytes;
}

void build_udp(uint8_t *out, uint16_t sport, uint16_t dport, uint16_t len, uint16_t checksum) {
  store_be16(out, sport);
  store_be16(out + 2, dport);
  store_be16(out + 4, len);
  store_be16(out + 6, checksum);
}

uint32_t roce_mtu_for(uint32_t ip_mtu, size_t ip_header_bytes) {
  uint32_t overhead =
      uint32_t(ip_header_bytes + kUdpHeaderBytes + kMaxTransportHeader + wire::kIcrcBytes);
  for (uint32_t mtu = 4096; mtu >= 256; mtu /= 2)
    if (mtu + overhead <= ip_mtu) return mtu;
  return 0;
}

}  // namespace vrnic
