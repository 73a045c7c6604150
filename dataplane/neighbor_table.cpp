// Peers' Ethernet addresses and their states: reachable, stale, resolving, failed
// (neighbor_table.h).
#include "neighbor_table.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace vrnic {

NeighborTable::Entry &NeighborTable::entry(IpKey ip, uint64_t now, bool asked) {
  auto it = entries_.find(ip);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxEntries) make_room();
    it = entries_.try_emplace(ip).first;
    if (!asked) {
      it->second.heard_seq = next_heard_seq_++;
      unasked_.push_back({ip, it->second.heard_seq});
      unasked_count_++;
    }
  }
  Entry &e = it->second;
  if (asked && !e.asked) {
    e.asked = true;
    if (e.heard_seq) unasked_count_--;
    e.heard_seq = 0;
  }
  e.used_ns = now;
  // The oldest peers only heard from go first; entries asked for since are skipped.
  while (unasked_count_ > kMaxUnasked && !unasked_.empty()) {
    auto [old_ip, seq] = unasked_.front();
    unasked_.pop_front();
    auto old = entries_.find(old_ip);
    if (old == entries_.end() || old->second.heard_seq != seq || old_ip == ip) continue;
    entries_.erase(old);
    unasked_count_--;
    version_.fetch_add(1, std::memory_order_release);
  }
  return e;
}

void NeighborTable::make_room() {
  std::vector<uint64_t> used;
  used.reserve(entries_.size());
  for (const auto &[ip, e] : entries_) used.push_back(e.used_ns);
  auto quarter = used.begin() + used.size() / 4;
  std::nth_element(used.begin(), quarter, used.end());
  const uint64_t cutoff = *quarter;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.used_ns <= cutoff) {
      if (it->second.heard_seq) unasked_count_--;
      entries_.erase(it);
    }
    it = next;
  }
  version_.fetch_add(1, std::memory_order_release);
}

NeighborTable::Answer NeighborTable::lookup(IpKey ip, uint64_t now) {
  Entry &e = entry(ip, now, true);
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
  Entry &e = entry(ip, now, true);
  if (e.known && now - e.confirmed_ns < timing_.reachable_ns) return false;
  if (e.requested && now - e.requested_ns < timing_.retry_ns) return false;
  e.requested = true;
  e.requested_ns = now;
  return true;
}

void NeighborTable::learn(IpKey ip, const MacAddress &mac, uint64_t now) {
  Entry &e = entry(ip, now, false);
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
