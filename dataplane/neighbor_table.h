// Peers' Ethernet addresses, learnt by ARP, for ports that build their own frames (dpdk).
// An entry is reachable for a while after an answer; a stale one is still used while a
// fresh request goes out (Linux's neighbour states, simplified: reachable, stale, probing,
// failed). Unanswered requests are repeated every retry interval and the peer is reported
// unreachable after the fail time, until it answers.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "ethernet.h"

namespace vrnic {

class NeighborTable {
 public:
  struct Timing {
    uint64_t reachable_ns = 30'000'000'000;  // an answer is trusted this long
    uint64_t retry_ns = 100'000'000;         // between requests for one peer
    uint64_t fail_ns = 1'000'000'000;        // unanswered this long: unreachable
  };
  enum class State { kReachable, kStale, kResolving, kFailed };
  struct Answer {
    State state;
    const MacAddress *mac;  // set when reachable or stale
    bool send_request;      // a request for this peer should go out now
  };

  NeighborTable() = default;
  explicit NeighborTable(const Timing &t) : timing_(t) {}

  // What is known of ipv4 (network byte order as an integer) at time now (ns).
  Answer lookup(uint32_t ipv4, uint64_t now);
  // An ARP message from ipv4 told us its address (a reply, or a request it sent us).
  void learn(uint32_t ipv4, const MacAddress &mac, uint64_t now);
  // Any other ARP message from ipv4 (a gratuitous one, a request to someone else): the
  // address is taken only if ipv4 is in the table already (RFC 826's merge), so a peer that
  // changed its MAC is reached at the new one. Returns whether it was.
  bool refresh(uint32_t ipv4, const MacAddress &mac, uint64_t now);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    MacAddress mac{};
    bool known = false;
    bool requested = false;         // a request went out ...
    uint64_t requested_ns = 0;      // ... last at this time
    bool waiting = false;           // requests went out unanswered ...
    uint64_t unanswered_since = 0;  // ... since this time
    uint64_t confirmed_ns = 0;      // last answer
  };
  Timing timing_;
  absl::flat_hash_map<uint32_t, Entry> entries_;
};

}  // namespace vrnic
