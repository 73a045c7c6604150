// IPv4 and IPv6 headers as RoCEv2 carries them: built, parsed and checked (ip_header.h).
#include "ip_header.h"

#include <bit>
#include <cstring>

#include "packet.h"
#include "vrnic/wire.h"

namespace vrnic {

using wire::load_be32;
using wire::store_be16;
using wire::store_be32;
using wire::store_be64;

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

namespace {

// Ones'-complement sum of n bytes taken as native-order 64-bit words, folded to 16 bits. On a
// little-endian machine that is the byte-swapped big-endian sum (RFC 1071 2(B)).
uint32_t native_sum16(const uint8_t *p, size_t n) {
  unsigned __int128 acc = 0;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    acc += v;
  }
  uint64_t tail = 0;  // the last bytes, as if zeros followed them
  std::memcpy(&tail, p, n);
  acc += tail;
  uint64_t sum = uint64_t(acc) + uint64_t(acc >> 64);
  sum += sum < uint64_t(acc >> 64);  // end-around carry
  sum = (sum & 0xffffffff) + (sum >> 32);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return uint32_t((sum & 0xffff) + (sum >> 16));
}

uint16_t swap16(uint32_t v) {
  return uint16_t((v & 0xff) << 8 | (v >> 8 & 0xff));
}

}  // namespace

uint16_t ipv6_upper_checksum(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                             const iovec *parts, size_t n) {
  static_assert(std::endian::native == std::endian::little);
  uint32_t length = 0;
  for (size_t i = 0; i < n; i++) length += uint32_t(parts[i].iov_len);
  uint8_t pseudo[40] = {};
  std::memcpy(pseudo, src, 16);
  std::memcpy(pseudo + 16, dst, 16);
  store_be32(pseudo + 32, length);
  pseudo[39] = next_header;
  uint64_t sum = native_sum16(pseudo, sizeof(pseudo));
  size_t offset = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t part = native_sum16(static_cast<const uint8_t *>(parts[i].iov_base), parts[i].iov_len);
    sum +=
        offset & 1 ? swap16(part) : part;  // a part at an odd offset has its bytes' roles swapped
    offset += parts[i].iov_len;
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~swap16(uint32_t(sum)));
}

size_t build_ipv4(uint8_t *out, const uint8_t src_gid[16], const uint8_t dst_gid[16],
                  uint16_t l4_len, uint8_t tos, uint8_t ttl, uint16_t id, bool dont_fragment) {
  const uint16_t version_tos = uint16_t(0x45 << 8 | tos);  // version 4, header length 5 words
  const auto total_len = uint16_t(kIpv4HeaderBytes + l4_len);
  const uint16_t flags = dont_fragment ? kIpv4DontFragment : 0;
  const auto ttl_protocol = uint16_t(ttl << 8 | kIpProtocolUdp);
  const uint32_t src = load_be32(src_gid + 12), dst = load_be32(dst_gid + 12);
  // The checksum from the fields' values, not read back from what was just stored; the header
  // goes out in whole words, which the ICRC's loads of it are then served from.
  uint32_t sum = uint32_t(version_tos) + total_len + id + flags + ttl_protocol + (src >> 16) +
                 (src & 0xffff) + (dst >> 16) + (dst & 0xffff);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const auto checksum = uint16_t(~sum);
  store_be64(out,
             uint64_t(version_tos) << 48 | uint64_t(total_len) << 32 | uint64_t(id) << 16 | flags);
  store_be64(out + 8, uint64_t(ttl_protocol) << 48 | uint64_t(checksum) << 32 | src);
  store_be32(out + 16, dst);
  return kIpv4HeaderBytes;
}

size_t build_ipv6(uint8_t *out, const uint8_t src_gid[16], const uint8_t dst_gid[16],
                  uint16_t payload_len, uint8_t traffic_class, uint32_t flow_label,
                  uint8_t hop_limit, uint8_t next_header) {
  // version 4 bits · traffic class 8 · flow label 20
  store_be32(out, 6u << 28 | uint32_t(traffic_class) << 20 | (flow_label & 0xfffff));
  store_be16(out + 4, payload_len);
  out[6] = next_header;
  out[7] = hop_limit;
  std::memcpy(out + 8, src_gid, 16);
  std::memcpy(out + 24, dst_gid, 16);
  return kIpv6HeaderBytes;
}

void build_udp(uint8_t *out, uint16_t sport, uint16_t dport, uint16_t len, uint16_t checksum) {
  store_be64(out, uint64_t(sport) << 48 | uint64_t(dport) << 32 | uint64_t(len) << 16 | checksum);
}

uint32_t roce_mtu_for(uint32_t ip_mtu, size_t ip_header_bytes) {
  uint32_t overhead =
      uint32_t(ip_header_bytes + kUdpHeaderBytes + kMaxTransportHeader + wire::kIcrcBytes);
  for (uint32_t mtu = 4096; mtu >= 256; mtu /= 2)
    if (mtu + overhead <= ip_mtu) return mtu;
  return 0;
}

}  // namespace vrnic
