// Transport counters, kept per device and per QP by vrnicd and reported by vrnicctl. One list
// of names for every place that shows them.
#pragma once

#include <cstdint>

namespace vrnic {

enum TransportCounter : uint32_t {
  kPacketsSent,
  kBytesSent,
  kPacketsReceived,
  kBytesReceived,
  kPacketsDropped,  // not for any QP, or refused by one (bad state, address, opcode, ...)
  kRetransmits,     // go-back-N restarts (sequence NAK, timeout) and RNR retries
  kTimeouts,        // local ACK timeouts
  kNaksSent,
  kNaksReceived,
  kRnrNaksSent,
  kRnrNaksReceived,
  kDuplicates,     // requests received again (re-ACKed or replayed)
  kOutOfSequence,  // requests ahead of the expected PSN
  kTransportCounterCount
};

inline constexpr const char *kTransportCounterNames[kTransportCounterCount] = {
    "packets_sent",      "bytes_sent", "packets_received", "bytes_received", "packets_dropped",
    "retransmits",       "timeouts",   "naks_sent",        "naks_received",  "rnr_naks_sent",
    "rnr_naks_received", "duplicates", "out_of_sequence",
};

struct TransportCounters {
  uint64_t value[kTransportCounterCount] = {};
  uint64_t &operator[](TransportCounter c) { return value[c]; }
  uint64_t operator[](TransportCounter c) const { return value[c]; }
};

}  // namespace vrnic
