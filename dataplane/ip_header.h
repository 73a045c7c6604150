// IPv4, IPv6 and UDP headers for RoCEv2 packets, written into a caller's buffer. RoCEv2 GIDs
// are IP addresses: an IPv6 address as is, or an IPv4 address mapped into IPv6 (::ffff:a.b.c.d).
// Used wherever vrnic needs the IP and UDP headers as bytes: the ICRC (which covers them),
// the GRH of a UD receive, packet capture and raw-packet ports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/uio.h>

namespace vrnic {

inline constexpr size_t kIpv4HeaderBytes = 20;  // without options; vrnic never sends any
inline constexpr size_t kIpv6HeaderBytes = 40;
inline constexpr size_t kUdpHeaderBytes = 8;
inline constexpr uint8_t kIpProtocolUdp = 17;
inline constexpr uint8_t kIpProtocolIcmpv6 = 58;

// True for an IPv4-mapped GID (::ffff:a.b.c.d), which RoCEv2 sends over IPv4.
bool gid_is_ipv4(const uint8_t gid[16]);

// Writes a 20-byte IPv4 header (no options, protocol UDP, header checksum filled in) for a
// datagram of l4_len bytes (UDP header, payload) between two IPv4-mapped GIDs. Returns 20.
// The caller keeps 20 + l4_len within 65535.
size_t build_ipv4(uint8_t *out, const uint8_t src_gid[16], const uint8_t dst_gid[16],
                  uint16_t l4_len, uint8_t tos, uint8_t ttl, uint16_t id, bool dont_fragment);

// Writes a 40-byte IPv6 header (next header UDP) for payload_len bytes after it (UDP header,
// payload). flow_label keeps its low 20 bits. Returns 40.
size_t build_ipv6(uint8_t *out, const uint8_t src_gid[16], const uint8_t dst_gid[16],
                  uint16_t payload_len, uint8_t traffic_class, uint32_t flow_label,
                  uint8_t hop_limit, uint8_t next_header = kIpProtocolUdp);

// The Internet checksum of an IPv6 upper-layer message (UDP, ICMPv6) given in parts, with its
// pseudo-header (RFC 8200 8.1): over a message whose checksum field is zero, the value to
// store (UDP sends a computed 0 as 0xffff); over one as received, 0 when it is intact.
uint16_t ipv6_upper_checksum(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                             const struct iovec *parts, size_t n);

// Writes an 8-byte UDP header; len counts the header too. RoCEv2 senders may leave checksum 0
// over IPv4 (the ICRC protects the transport); it is passed through as given.
void build_udp(uint8_t *out, uint16_t sport, uint16_t dport, uint16_t len, uint16_t checksum);

// The Internet checksum (RFC 1071) of an IPv4 header of header_len bytes whose checksum
// field holds zero; or, with the field as received, 0 when the header is intact.
uint16_t ipv4_header_checksum(const uint8_t *header, size_t header_len);

// The largest RoCE path MTU (256..4096) whose packets -- IP header of ip_header_bytes, UDP,
// the largest transport header, payload, ICRC -- fit an IP MTU (never fragmented); 0 if none.
uint32_t roce_mtu_for(uint32_t ip_mtu, size_t ip_header_bytes);

}  // namespace vrnic
