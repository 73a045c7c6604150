// IPv6 neighbour discovery (RFC 4861) as a raw-packet port (dpdk) puts it on the wire: the
// solicitations and advertisements that resolve a peer's Ethernet address, IPv6's ARP.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ethernet.h"

namespace vrnic {

inline constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
// Ethernet, IPv6, an ICMPv6 solicitation or advertisement (24 bytes) and one link-layer
// address option (8 bytes).
inline constexpr size_t kNdFrameBytes = kEthHeaderBytes + 40 + 24 + 8;

struct NdMessage {
  enum Type : uint8_t { kSolicitation = 135, kAdvertisement = 136 };
  Type type;
  MacAddress src_mac;  // the frame's Ethernet source
  uint8_t src_ip[16];
  uint8_t dst_ip[16];
  uint8_t target[16];       // the address asked about, or advertised
  bool has_link_address;    // source (solicitation) or target (advertisement) option present
  MacAddress link_address;  // ... its value
  bool solicited = false;   // advertisements: an answer to a solicitation (RFC 4861 4.4, S)
  bool override_ = false;   // ... replaces a known address (O)
};

// The solicited-node multicast address of ip (ff02::1:ffXX:XXXX) and its Ethernet group
// address (33:33:ff:XX:XX:XX), where solicitations for ip are sent.
void solicited_node(const uint8_t ip[16], uint8_t out_ip[16]);
MacAddress ipv6_multicast_mac(const uint8_t group[16]);
// All-nodes (ff02::1), where unsolicited advertisements go.
extern const uint8_t kAllNodes[16];

// Writes a solicitation or advertisement frame from `src_mac`: Ethernet and IPv6 headers (hop
// limit 255), ICMPv6 with its checksum and the link-layer address option. Ethernet
// destination: dst_mac. Returns its length (kNdFrameBytes).
size_t build_nd_frame(uint8_t *out, const NdMessage &m, const MacAddress &dst_mac);
// Parses a frame (with its Ethernet header) as a solicitation or advertisement; false unless
// it is one that RFC 4861 7.1 says to accept (hop limit 255, code 0, a good checksum, a
// unicast target, well-formed options).
bool parse_nd_frame(const uint8_t *frame, size_t len, NdMessage *out);

}  // namespace vrnic
