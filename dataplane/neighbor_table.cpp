// Peers' Ethernet addresses and their states: reachable, stale, resolving, failed
// (neighbor_table.h).
#include "neighbor_table.h"

namespace vrnic {

NeighborTable::Answer NeighborTable::lookup(IpKey ip, uint64_t now) {
  Entry &e = entries_[ip];
  bool fresh = e.known && now - e.confirmed_ns < timing_.reachable_ns;
  if (fresh) return {State::kReachable, &e.mac, false, e.confirmed_ns + timing_.reachable_ns};
  bool send = !e.requested || now - e.requested_ns >= timing_.retry_ns;
  if (send) {
    e.requested = true;
    e.requested_ns = now;
    if (!e.waiting) e.unanswered_since = now;
    e.waiting = true;
  }
  if (e.waiting && now - e.unanswered_since >= timing_.fail_ns) {
    e.known = false;  // a stale address that stopped answering is forgotten
    return {State::kFailed, nullptr, send, 0};
  }
  if (e.known) return {State::kStale, &e.mac, send, 0};
  return {State::kResolving, nullptr, send, 0};
}

bool NeighborTable::prime(IpKey ip, uint64_t now) {
  Entry &e = entries_[ip];
  if (e.known && now - e.confirmed_ns < timing_.reachable_ns) return false;
  if (e.requested && now - e.requested_ns < timing_.retry_ns) return false;
  e.requested = true;
  e.requested_ns = now;
  return true;
}

void NeighborTable::learn(IpKey ip, const MacAddress &mac, uint64_t now) {
  Entry &e = entries_[ip];
  e.mac = mac;
  e.known = true;
  e.confirmed_ns = now;
  e.waiting = false;
  version_.fetch_add(1, std::memory_order_release);
}

bool NeighborTable::refresh(IpKey ip, const MacAddress &mac, uint64_t now) {
  auto it = entries_.find(ip);
  if (it == entries_.end() || !it->second.known) return false;
  learn(ip, mac, now);
  return true;
}

}  // namespace vrnic
