// Ethernet II and ARP as raw-packet ports (dpdk) put them on the wire: the link-layer part of
// RoCEv2 that a kernel socket otherwise hides. IPv6's neighbour discovery is in
// neighbor_discovery.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrnic {

inline constexpr size_t kEthHeaderBytes = 14;
inline constexpr size_t kEthMinFrame = 60;  // without the FCS, which the NIC adds
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr size_t kArpFrameBytes = kEthHeaderBytes + 28;

struct MacAddress {
  uint8_t bytes[6];
  bool operator==(const MacAddress &) const = default;
  bool is_broadcast() const {
    for (uint8_t b : bytes)
      if (b != 0xff) return false;
    return true;
  }
};
inline constexpr MacAddress kBroadcastMac{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

// Writes the 14-byte header. Returns 14.
size_t build_eth(uint8_t *out, const MacAddress &dst, const MacAddress &src, uint16_t ether_type);

// An ARP message for IPv4 over Ethernet (RFC 826). Addresses in network order as bytes.
struct ArpMessage {
  enum Op : uint16_t { kRequest = 1, kReply = 2 };
  Op op;
  MacAddress sender_mac;
  uint8_t sender_ip[4];
  MacAddress target_mac;
  uint8_t target_ip[4];
};

// Writes a whole frame (Ethernet header + ARP, padded to the 60-byte minimum): a request is
// broadcast, a reply goes to its target. Returns its length.
size_t build_arp_frame(uint8_t *out, const ArpMessage &m);
// Parses an ARP frame (with its Ethernet header); false unless it is IPv4-over-Ethernet ARP.
bool parse_arp_frame(const uint8_t *frame, size_t len, ArpMessage *out);

}  // namespace vrnic
