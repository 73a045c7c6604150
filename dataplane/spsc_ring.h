// A bounded single-producer single-consumer ring of pointers between two worker threads:
// how packets cross from the worker that received them to the worker that owns their QP, and
// back to the pool they came from. Lock-free; producer and consumer indices on their own
// cache lines.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace vrnic {

template <typename T>
class SpscRing {
 public:
  explicit SpscRing(uint32_t slots_pow2) : mask_(slots_pow2 - 1), slots_(new T *[slots_pow2]) {}

  bool push(T *item) {  // producer thread
    uint32_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_cache_ > mask_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head - tail_cache_ > mask_) return false;
    }
    slots_[head & mask_] = item;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }
  T *pop() {  // consumer thread
    uint32_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == head_cache_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail == head_cache_) return nullptr;
    }
    T *item = slots_[tail & mask_];
    tail_.store(tail + 1, std::memory_order_release);
    return item;
  }
  bool empty() const {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

 private:
  const uint32_t mask_;
  std::unique_ptr<T *[]> slots_;
  alignas(64) std::atomic<uint32_t> head_{0};
  uint32_t tail_cache_ = 0;  // producer's view of tail_
  alignas(64) std::atomic<uint32_t> tail_{0};
  uint32_t head_cache_ = 0;  // consumer's view of head_
};

}  // namespace vrnic
