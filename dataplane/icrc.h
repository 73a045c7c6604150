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
#include <optional>

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

// Receive side when the IPv4 identification is unseen (a kernel UDP socket shows no IP header).
// The ICRC covers the ID, and CRC-32 is linear over GF(2): for packets of one length, the ICRC
// with ID x is the ICRC with ID 0 XOR a linear map of x's 16 bits, and that map is one to one.
// So from the ICRC computed with some guess of the ID (icrc_with_guess) and the one received,
// the one ID that makes them agree is solved for, with no search. 16 of the 32 bits of the
// difference carry the ID; the other 16 must come out zero, which is the check that remains:
// a corrupted packet passes with probability 2^-16 instead of 2^-32 (an ID that matches the
// guess keeps the full 32-bit check). bytes_after_id: what the ICRC covers after the ID field
// (the IPv4 header from its flags on, UDP header, BTH through pad). nullopt when no ID fits.
std::optional<uint16_t> solve_ipv4_id(uint32_t icrc_with_guess, uint16_t guess, uint32_t received,
                                      size_t bytes_after_id);

// The bytes an IPv4 RoCE packet's ICRC covers after the ID field, for a UDP payload (BTH
// through ICRC) of udp_payload_len bytes behind a 20-byte IPv4 header.
inline size_t ipv4_bytes_after_id(size_t udp_payload_len) {
  constexpr size_t kIpv4AfterId = 20 - 6, kUdp = 8, kIcrc = 4;
  return kIpv4AfterId + kUdp + udp_payload_len - kIcrc;
}

inline void store_icrc(uint8_t *out, uint32_t icrc) {
  for (int i = 0; i < 4; i++) out[i] = uint8_t(icrc >> (8 * i));
}
inline uint32_t load_icrc(const uint8_t *in) {
  return uint32_t(in[0]) | uint32_t(in[1]) << 8 | uint32_t(in[2]) << 16 | uint32_t(in[3]) << 24;
}

}  // namespace vrnic
