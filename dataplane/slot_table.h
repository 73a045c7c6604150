// Objects indexed by a small integer handle (index + 1; 0 is never valid), with a generation
// byte for keys so that a stale key does not reach a new object in a reused slot. Lookups are
// an array index, never a hash: the fast path resolves QPNs and keys through these.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <type_traits>
#include <vector>

namespace vrnic {

template <typename T>
class SlotTable {
 public:
  explicit SlotTable(uint32_t capacity) : capacity_(capacity) {}

  // Returns the handle (index + 1), or 0 when full. The slot's generation moves on by
  // generation_step (1-255: never back to the value a stale key holds).
  uint32_t insert(std::unique_ptr<T> obj, uint8_t generation_step = 1) {
    uint32_t index;
    if (!free_.empty() && (free_.size() > kReuseDelay || slots_.size() >= capacity_)) {
      index = free_.front();
      free_.pop_front();
    } else if (slots_.size() < capacity_) {
      index = uint32_t(slots_.size());
      slots_.emplace_back();
      generation_.push_back(0);
    } else {
      return 0;
    }
    slots_[index] = std::move(obj);
    generation_[index] = uint8_t(generation_[index] + (generation_step ? generation_step : 1));
    count_++;
    return index + 1;
  }
  T *get(uint32_t handle) const {
    return handle && handle <= slots_.size() ? slots_[handle - 1].get() : nullptr;
  }
  uint8_t generation(uint32_t handle) const { return generation_[handle - 1]; }
  std::unique_ptr<T> remove(uint32_t handle) {
    if (!get(handle)) return nullptr;
    count_--;
    free_.push_back(handle - 1);
    return std::move(slots_[handle - 1]);
  }
  // Puts obj in an occupied slot, handle and generation unchanged; returns what was there.
  std::unique_ptr<T> replace(uint32_t handle, std::unique_ptr<T> obj) {
    if (!get(handle)) return nullptr;
    std::swap(slots_[handle - 1], obj);
    return obj;
  }
  uint32_t size() const { return count_; }
  // Every object from handle `from` on, in handle order; fn returns false to stop there.
  template <typename Fn>
  void for_each(Fn &&fn, uint32_t from = 1) const {
    for (uint32_t i = from ? from - 1 : 0; i < slots_.size(); i++) {
      if (!slots_[i]) continue;
      if constexpr (std::is_same_v<decltype(fn(i + 1, *slots_[i])), bool>) {
        if (!fn(i + 1, *slots_[i])) return;
      } else {
        fn(i + 1, *slots_[i]);
      }
    }
  }

 private:
  // Freed slots wait in FIFO order before reuse, so a just-destroyed QPN or key is not
  // handed out again while packets for it may still be in flight.
  static constexpr size_t kReuseDelay = 64;
  uint32_t capacity_;
  uint32_t count_ = 0;
  std::vector<std::unique_ptr<T>> slots_;
  std::vector<uint8_t> generation_;
  std::deque<uint32_t> free_;
};

}  // namespace vrnic
