// The counters vrnicd keeps and vrnicctl reports, each list defined once with its names:
// transport counters (per device and per QP) and port counters (per wire port, udp or dpdk,
// summed over the workers' ports).
#pragma once

#include <cstdint>

namespace vrnic {

enum TransportCounter : uint32_t {
  kPacketsSent,
  kBytesSent,
  kPacketsReceived,
  kBytesReceived,
  kPacketsDropped,  // not for any QP, or refused by one (bad state, address, opcode, ...)
  kRetransmits,     // go-back-N restarts (sequence NAK, timeout), RNR retries, holes asked for
  kTimeouts,        // local ACK timeouts
  kNaksSent,
  kNaksReceived,
  kRnrNaksSent,
  kRnrNaksReceived,
  kDuplicates,     // requests received again (re-ACKed or replayed)
  kOutOfSequence,  // requests ahead of the expected PSN
  // Read responses that arrived past a gap in a read's answers, taken there (read_holes.h):
  // the missing ones are asked for on their own.
  kReadGaps,
  // Requests ahead of the expected PSN that the responder kept (held_packets.h) and executed
  // once the missing ones came, rather than dropped.
  kPacketsHeld,
  // Packets sent again alone because a selective NAK (wire::Sack) named them missing.
  kSelectiveResends,
  // Work requests, and their bytes, that the posting thread ran itself between local QPs
  // (the same-host direct path): counted by the provider in the QP's shared page.
  kDirectOps,
  kDirectBytes,
  kTransportCounterCount
};

inline constexpr const char *kTransportCounterNames[kTransportCounterCount] = {
    "packets_sent",      "bytes_sent", "packets_received", "bytes_received", "packets_dropped",
    "retransmits",       "timeouts",   "naks_sent",        "naks_received",  "rnr_naks_sent",
    "rnr_naks_received", "duplicates", "out_of_sequence",   "read_gaps",      "packets_held",
    "selective_resends", "direct_ops", "direct_bytes",
};

struct TransportCounters {
  uint64_t value[kTransportCounterCount] = {};
  uint64_t &operator[](TransportCounter c) { return value[c]; }
  uint64_t operator[](TransportCounter c) const { return value[c]; }
};

enum PortCounter : uint32_t {
  kPortTxPackets,
  kPortTxBytes,
  kPortTxErrors,           // frames the port could not send (no buffer, a send error): lost
  kPortTxNoRoute,          // dropped: the peer's link-layer address is unknown (no ARP/ND reply)
  kPortTxPayloadCopied,    // payload bytes the port copied into frames
  kPortTxPayloadZeroCopy,  // payload bytes sent from registered memory in place
  kPortRxPackets,
  kPortRxBytes,
  kPortRxIcrcErrors,
  kPortRxMalformed,  // not RoCEv2 for this port, or a bad header
  kPortRxNoBuffer,   // dropped: no free packet buffer to receive into
  // Dropped before the port could read them: the kernel's, at a full socket receive buffer
  // (udp: datagrams, a GRO run counting once), or the device's, with no free RX descriptor
  // (dpdk: frames). The device's own count, not a sum of increments.
  kPortRxDropped,
  // Accepted with an IPv4 ID the port could not see and solved for from the ICRC (udp: a
  // kernel or hardware sender's ID), not the one it guessed.
  kPortRxIpIdSolved,
  kPortRxInterrupts,  // sleeps of the worker that a received frame ended
  kPortLinkChanges,
  kPortCounterCount
};

inline constexpr const char *kPortCounterNames[kPortCounterCount] = {
    "wire_tx_packets",      "wire_tx_bytes",          "wire_tx_errors",
    "wire_tx_no_route",     "wire_tx_payload_copied", "wire_tx_payload_zero_copy",
    "wire_rx_packets",      "wire_rx_bytes",          "wire_rx_icrc_errors",
    "wire_rx_malformed",    "wire_rx_no_buffer",      "wire_rx_dropped",
    "wire_rx_ip_id_solved", "wire_rx_interrupts",     "wire_link_changes",
};

struct PortCounters {
  uint64_t value[kPortCounterCount] = {};
  uint64_t &operator[](PortCounter c) { return value[c]; }
  uint64_t operator[](PortCounter c) const { return value[c]; }
};

}  // namespace vrnic
