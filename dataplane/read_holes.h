// Which answers to outstanding RDMA READs are missing below each read's frontier: the
// requester's record that lets it take read responses out of order and ask again for only
// what was lost (a lost packet costs one re-request of one packet, not the rest of the read
// and every read after it, which is what go-back-N made rxe send: 38 times the data).
//
// A read's answers at or past its frontier (WqeMeta::resp_psn) have not arrived; below it
// they have, except in the holes listed here. A hole is created only at the frontier and only
// ever filled or split, so a read's lowest missing PSN never goes down: each request asked
// again for a read starts at or after the previous one, which rxe needs (its responder moves
// the start of a read it replays to the start of the last request for it and drops any
// request that starts before).
//
// A QP takes a table from its host's pool at its first gap and gives it back once it has no
// hole left (and when it leaves the host): 65,536 QPs do not each carry one. With no table to
// take, or a full one, answers past a new gap are dropped and the read goes back to its first
// missing answer, as it did before the tables existed.
#pragma once

#include <cstdint>

#include "packet.h"
#include "table_pool.h"

namespace vrnic {

class ReadHoles {
 public:
  static constexpr uint32_t kMax = 256;  // 16 reads of 1 MiB in flight at 1% loss: ~160

  struct Hole {
    uint32_t wqe;      // the read's free-running send-queue index
    uint32_t psn;      // the first missing PSN
    uint32_t packets;  // how many from there
    bool asked;        // a request for it has gone out and its answer is awaited
  };

  bool full() const { return count_ == kMax; }
  bool empty() const { return count_ == 0; }
  uint32_t size() const { return count_; }
  const Hole &operator[](uint32_t i) const { return holes_[i]; }
  void clear() { count_ = 0; }

  // Missing [psn, psn + packets) of read `wqe`; false when the table is full.
  bool add(uint32_t wqe, uint32_t psn, uint32_t packets, bool asked) {
    if (full() || !packets) return false;
    holes_[count_++] = {wqe, psn, packets, asked};
    return true;
  }

  // The hole of read `wqe` holding `psn`; nullptr if none does (it arrived already).
  const Hole *find(uint32_t wqe, uint32_t psn) const {
    for (uint32_t i = 0; i < count_; i++)
      if (holes_[i].wqe == wqe && in(holes_[i], psn)) return &holes_[i];
    return nullptr;
  }

  // Whether `psn`, in a hole, can be taken: a packet inside a hole (not at its edge) splits
  // it in two, which takes room.
  bool can_fill(uint32_t wqe, uint32_t psn) const {
    const Hole *h = find(wqe, psn);
    if (!h) return false;
    bool edge = psn == h->psn || psn == wire::psn_add(h->psn, h->packets - 1);
    return edge || !full();
  }

  // `psn` of read `wqe` arrived (can_fill said it may); true if that closed a hole.
  bool fill(uint32_t wqe, uint32_t psn) {
    for (uint32_t i = 0; i < count_; i++) {
      Hole &h = holes_[i];
      if (h.wqe != wqe || !in(h, psn)) continue;
      uint32_t before = uint32_t(wire::psn_diff(psn, h.psn));
      uint32_t after = h.packets - before - 1;
      if (!before && !after) {
        holes_[i] = holes_[--count_];
        return true;
      }
      if (!before) {
        h.psn = wire::psn_add(psn, 1);
        h.packets = after;
      } else {
        h.packets = before;
        if (after) holes_[count_++] = {wqe, wire::psn_add(psn, 1), after, h.asked};
      }
      return false;
    }
    return false;
  }

  bool any(uint32_t wqe) const {
    for (uint32_t i = 0; i < count_; i++)
      if (holes_[i].wqe == wqe) return true;
    return false;
  }

  bool asking(uint32_t wqe) const {
    for (uint32_t i = 0; i < count_; i++)
      if (holes_[i].wqe == wqe && holes_[i].asked) return true;
    return false;
  }

  // Nothing of read `wqe`'s is awaited any more (the requester went back: presumed lost).
  void unask(uint32_t wqe) {
    for (uint32_t i = 0; i < count_; i++)
      if (holes_[i].wqe == wqe) holes_[i].asked = false;
  }

  // A hole of read `wqe` not asked for, nullptr if none.
  Hole *unasked(uint32_t wqe) {
    for (uint32_t i = 0; i < count_; i++)
      if (holes_[i].wqe == wqe && !holes_[i].asked) return &holes_[i];
    return nullptr;
  }

  // The lowest hole of read `wqe`, nullptr if it has none.
  Hole *lowest(uint32_t wqe) {
    Hole *best = nullptr;
    for (uint32_t i = 0; i < count_; i++)
      if (holes_[i].wqe == wqe && (!best || wire::psn_diff(holes_[i].psn, best->psn) < 0))
        best = &holes_[i];
    return best;
  }

  // Forgets read `wqe`'s holes and returns its lowest missing PSN (`frontier` if none).
  uint32_t collapse(uint32_t wqe, uint32_t frontier) {
    uint32_t low = frontier;
    for (uint32_t i = 0; i < count_;) {
      if (holes_[i].wqe != wqe) {
        i++;
        continue;
      }
      if (wire::psn_diff(holes_[i].psn, low) < 0) low = holes_[i].psn;
      holes_[i] = holes_[--count_];
    }
    return low;
  }

 private:
  static bool in(const Hole &h, uint32_t psn) {
    int32_t d = wire::psn_diff(psn, h.psn);
    return d >= 0 && uint32_t(d) < h.packets;
  }

  Hole holes_[kMax];
  uint32_t count_ = 0;
};

using ReadHolesPool = TablePool<ReadHoles>;

}  // namespace vrnic
