// Peers' Ethernet addresses, learnt by ARP (IPv4) or neighbour discovery (IPv6), for ports that
// build their own frames (dpdk). An entry is reachable for a while after an answer; a stale one is
// still used while a fresh request goes out (Linux's neighbour states, simplified: reachable,
// stale, probing, failed). Unanswered requests are repeated every retry interval and the peer is
// reported unreachable after the fail time, until it answers.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <utility>

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
  // Bounds: a flood of ARP requests or solicitations to us from made-up addresses must not
  // grow the table without end (issue 28). Peers we never asked about (their message taught
  // us) are kept up to kMaxUnasked, the oldest forgotten first; the whole table up to
  // kMaxEntries, the least recently used quarter forgotten when it is full (a forgotten peer
  // is asked about again when traffic wants it).
  static constexpr size_t kMaxUnasked = 1024;
  static constexpr size_t kMaxEntries = 16384;
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
    uint64_t fresh_until;   // reachable: the answer holds until then, unless the table learns
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
  // Changes with every learn and refresh (made under the owner's lock, read by anyone): what
  // a NeighborCache copied holds while it stays.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  struct Entry {
    MacAddress mac{};
    bool known = false;
    bool requested = false;         // a request went out ...
    uint64_t requested_ns = 0;      // ... last at this time
    bool waiting = false;           // requests went out unanswered ...
    uint64_t unanswered_since = 0;  // ... since this time
    uint64_t confirmed_ns = 0;      // last answer
    bool asked = false;             // the device wants it (lookup, prime), not only heard it
    uint64_t used_ns = 0;           // last looked up, primed or learnt
    uint64_t heard_seq = 0;         // its place in unasked_ while not asked
  };
  // The entry for ip, made if there is none (within the bounds); `asked`: the device wants it.
  Entry &entry(IpKey ip, uint64_t now, bool asked);
  void make_room();
  Timing timing_;
  absl::flat_hash_map<IpKey, Entry> entries_;
  std::deque<std::pair<IpKey, uint64_t>> unasked_;  // (ip, heard_seq), oldest first
  size_t unasked_count_ = 0;  // entries not asked (unasked_ also holds ones asked since)
  uint64_t next_heard_seq_ = 1;
  std::atomic<uint64_t> version_{0};
};

// One sender's copy of the reachable peers it sends to, read without the table's lock (the
// dpdk port looks a peer up for every burst; several workers share the table): an entry is
// what NeighborTable::lookup() would answer -- reachable, at that address, nothing to send --
// for as long as the table's version is the one it was copied at and the answer is fresh.
class NeighborCache {
 public:
  const MacAddress *find(IpKey ip, uint64_t now, uint64_t table_version) {
    auto it = peers_.find(ip);
    if (it == peers_.end()) return nullptr;
    if (it->second.version == table_version && now < it->second.fresh_until) return &it->second.mac;
    peers_.erase(it);
    return nullptr;
  }
  // An answer just looked up, with the table's version at the time (under its lock).
  void keep(IpKey ip, const NeighborTable::Answer &a, uint64_t table_version) {
    if (a.state != NeighborTable::State::kReachable || !a.mac) return;
    if (peers_.size() >= kMaxPeers) peers_.clear();
    peers_[ip] = {*a.mac, a.fresh_until, table_version};
  }
  size_t size() const { return peers_.size(); }

 private:
  static constexpr size_t kMaxPeers = 4096;
  struct Peer {
    MacAddress mac;
    uint64_t fresh_until;
    uint64_t version;
  };
  absl::flat_hash_map<IpKey, Peer> peers_;
};

}  // namespace vrnic
