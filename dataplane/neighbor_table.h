// Peers' Ethernet addresses, learnt by ARP (IPv4) or neighbour discovery (IPv6), for ports that
// build their own frames (dpdk). An entry is reachable for a while after an answer; a stale one is
// still used while a fresh request goes out (Linux's neighbour states, simplified: reachable,
// stale, probing, failed). Unanswered requests are repeated every retry interval and the peer is
// reported unreachable after the fail time, until it answers.
#pragma once

#include <cstdint>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/numeric/int128.h"
#include "ethernet.h"

namespace vrnic {

// A peer's IP address as a GID (IPv4 mapped into IPv6): one key for both families.
using IpKey = absl::uint128;
inline IpKey ip_key(const uint8_t gid[16]) {
  uint64_t hi, lo;
  std::memcpy(&hi, gid, 8);
  std::memcpy(&lo, gid + 8, 8);
  return absl::MakeUint128(hi, lo);
}

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

  // What is known of ip at time now (ns).
  Answer lookup(IpKey ip, uint64_t now);
  // The device will soon send to ip (a QP going to RTR, an address handle): true when a
  // request should go out now, ahead of the traffic. The peer's fail time starts only when
  // traffic asks (lookup), so a peer that is not up yet when it is primed is not failed by it.
  bool prime(IpKey ip, uint64_t now);
  // A message from ip told us its address (an ARP reply or request to us; a neighbour
  // advertisement, or a solicitation to us).
  void learn(IpKey ip, const MacAddress &mac, uint64_t now);
  // Any other message from ip (a gratuitous one, a question to someone else): the address is
  // taken only if ip is in the table already (RFC 826's merge), so a peer that changed its
  // MAC is reached at the new one. Returns whether it was.
  bool refresh(IpKey ip, const MacAddress &mac, uint64_t now);
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
  absl::flat_hash_map<IpKey, Entry> entries_;
};

}  // namespace vrnic
