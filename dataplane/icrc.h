// The RoCEv2 invariant CRC (ICRC): CRC-32 over the parts of a packet that no router changes,
// stored little-endian in the last 4 bytes of the UDP payload (IB spec vol. 1 ch. 7.8.1 and
// the RoCEv2 annex; ../shared/ROCE.md has the rules and a test vector).
//
// It covers eight 0xFF bytes (the LRH a RoCEv2 packet does not carry), the IP header, the UDP
// header, the BTH, the extension headers, the payload and the pad, with the fields that may
// change in flight set to all ones: IPv4 TOS, TTL and header checksum, IPv6 traffic class,
// flow label and hop limit, the UDP checksum, and BTH byte 4 (FECN, BECN, reserved).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace vrnic {

// The ICRC of a packet given as its IP header (IPv4, ip_len 20 to 60 bytes, or IPv6, 40; the
// version nibble tells which), its 8-byte UDP header and its transport bytes, BTH through pad
// without the ICRC, in n iovecs split anywhere (the BTH too). Only the headers are copied (and
// the rest of the first iovec when it is at most 64 bytes); larger payloads are read where
// they lie. The result is stored with store_icrc(). Clears the upper halves of the vector
// registers before returning (vzeroupper), which ISA-L leaves dirty.
uint32_t roce_icrc(const uint8_t *ip, size_t ip_len, const uint8_t *udp,
                   const struct iovec *transport, size_t n);

// Receive side: whether a UDP payload (BTH through ICRC, udp_payload_len bytes) carries the
// right ICRC for these IP and UDP headers. False when it is too short to hold a BTH and ICRC.
bool roce_icrc_ok(const uint8_t *ip, size_t ip_len, const uint8_t *udp, const uint8_t *udp_payload,
                  size_t udp_payload_len);

inline void store_icrc(uint8_t *out, uint32_t icrc) {
  for (int i = 0; i < 4; i++) out[i] = uint8_t(icrc >> (8 * i));
}
inline uint32_t load_icrc(const uint8_t *in) {
  return uint32_t(in[0]) | uint32_t(in[1]) << 8 | uint32_t(in[2]) << 16 | uint32_t(in[3]) << 24;
}

}  // namespace vrnic
