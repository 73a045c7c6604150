// IPv6 neighbour discovery messages (solicitations and advertisements) for the dpdk port
// (neighbor_discovery.h).
#include "neighbor_discovery.h"

#include <cstring>

#include "ip_header.h"
#include "vrnic/wire.h"

namespace vrnic {
namespace {

constexpr uint8_t kOptionSourceLinkAddress = 1;
constexpr uint8_t kOptionTargetLinkAddress = 2;
constexpr uint8_t kNdHopLimit = 255;  // proves the sender is on the link (RFC 4861 7.1)
constexpr size_t kIcmpBytes = 24;     // type, code, checksum, flags/reserved, target

}  // namespace

const uint8_t kAllNodes[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

void solicited_node(const uint8_t ip[16], uint8_t out_ip[16]) {
  static const uint8_t kPrefix[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff};
  std::memcpy(out_ip, kPrefix, sizeof(kPrefix));
  std::memcpy(out_ip + 13, ip + 13, 3);
}

MacAddress ipv6_multicast_mac(const uint8_t group[16]) {
  MacAddress mac{{0x33, 0x33}};
  std::memcpy(mac.bytes + 2, group + 12, 4);
  return mac;
}

size_t build_nd_frame(uint8_t *out, const NdMessage &m, const MacAddress &dst_mac) {
  std::memset(out, 0, kNdFrameBytes);
  uint8_t *ip = out + build_eth(out, dst_mac, m.src_mac, kEtherTypeIpv6);
  uint8_t *icmp = ip + build_ipv6(ip, m.src_ip, m.dst_ip, uint16_t(kIcmpBytes + 8), 0, 0,
                                  kNdHopLimit, kIpProtocolIcmpv6);
  icmp[0] = m.type;
  if (m.type == NdMessage::kAdvertisement)
    icmp[4] = uint8_t((m.solicited ? 0x40 : 0) | (m.override_ ? 0x20 : 0));
  std::memcpy(icmp + 8, m.target, 16);
  uint8_t *option = icmp + kIcmpBytes;
  option[0] =
      m.type == NdMessage::kSolicitation ? kOptionSourceLinkAddress : kOptionTargetLinkAddress;
  option[1] = 1;  // in units of 8 bytes
  std::memcpy(option + 2, m.link_address.bytes, 6);
  iovec whole{icmp, kIcmpBytes + 8};
  wire::store_be16(icmp + 2, ipv6_upper_checksum(m.src_ip, m.dst_ip, kIpProtocolIcmpv6, &whole, 1));
  return kNdFrameBytes;
}

bool parse_nd_frame(const uint8_t *frame, size_t len, NdMessage *out) {
  if (len < kEthHeaderBytes + kIpv6HeaderBytes + kIcmpBytes ||
      wire::load_be16(frame + 12) != kEtherTypeIpv6)
    return false;
  const uint8_t *ip = frame + kEthHeaderBytes;
  const size_t icmp_len = wire::load_be16(ip + 4);
  if ((ip[0] >> 4) != 6 || ip[6] != kIpProtocolIcmpv6 || ip[7] != kNdHopLimit ||
      icmp_len < kIcmpBytes || kEthHeaderBytes + kIpv6HeaderBytes + icmp_len > len)
    return false;
  const uint8_t *icmp = ip + kIpv6HeaderBytes;
  if ((icmp[0] != NdMessage::kSolicitation && icmp[0] != NdMessage::kAdvertisement) || icmp[1] != 0)
    return false;
  iovec whole{const_cast<uint8_t *>(icmp), icmp_len};
  if (ipv6_upper_checksum(ip + 8, ip + 24, kIpProtocolIcmpv6, &whole, 1) != 0) return false;
  out->type = NdMessage::Type(icmp[0]);
  std::memcpy(out->src_mac.bytes, frame + 6, 6);
  std::memcpy(out->src_ip, ip + 8, 16);
  std::memcpy(out->dst_ip, ip + 24, 16);
  std::memcpy(out->target, icmp + 8, 16);
  if (out->target[0] == 0xff) return false;  // a multicast target
  out->solicited = out->type == NdMessage::kAdvertisement && (icmp[4] & 0x40);
  out->override_ = out->type == NdMessage::kAdvertisement && (icmp[4] & 0x20);
  out->has_link_address = false;
  const uint8_t want =
      out->type == NdMessage::kSolicitation ? kOptionSourceLinkAddress : kOptionTargetLinkAddress;
  for (size_t at = kIcmpBytes; at < icmp_len;) {
    if (at + 2 > icmp_len || icmp[at + 1] == 0) return false;  // a zero length: malformed
    const size_t option_len = size_t(icmp[at + 1]) * 8;
    if (at + option_len > icmp_len) return false;
    if (icmp[at] == want && option_len >= 8) {
      out->has_link_address = true;
      std::memcpy(out->link_address.bytes, icmp + at + 2, 6);
    }
    at += option_len;
  }
  return true;
}

}  // namespace vrnic
