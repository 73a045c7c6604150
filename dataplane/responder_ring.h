// The responder's memory of reads and atomics (its "responder resources"), one ring per QP
// sized to the QP's max_dest_rd_atomic: up to kMaxRdAtomic (128, as rxe offers), so a QP that
// takes few reads costs few entries and 65,536 QPs do not each carry 128. Indexed by
// free-running counters; sized on the control path (INIT to RTR, SQD to SQD), never while
// packets are handled.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace vrnic {

inline constexpr uint32_t kMaxRdAtomic = 128;

template <class T>
class ResponderRing {
 public:
  ResponderRing() : slots_(1) {}
  T &operator[](uint32_t i) { return slots_[i & mask_]; }
  const T &operator[](uint32_t i) const { return slots_[i & mask_]; }
  uint32_t capacity() const { return mask_ + 1; }
  auto begin() const { return slots_.begin(); }
  auto end() const { return slots_.end(); }

  // Room for n entries (a power of two at least n); the live ones, [from, to) of the
  // free-running indices, stay where operator[] finds them (the newest, when fewer fit).
  void resize(uint32_t n, uint32_t from, uint32_t to) {
    const uint32_t cap = std::bit_ceil(std::clamp<uint32_t>(n, 1, kMaxRdAtomic));
    if (cap == capacity()) return;
    std::vector<T> next(cap);
    if (to - from > cap) from = to - cap;
    for (uint32_t i = from; i != to; i++) next[i & (cap - 1)] = (*this)[i];
    slots_ = std::move(next);
    mask_ = cap - 1;
  }

 private:
  std::vector<T> slots_;
  uint32_t mask_ = 0;
};

}  // namespace vrnic
