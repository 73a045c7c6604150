// For the few objects several workers may touch: a CQ that QPs on different workers complete
// into, an SRQ they draw from. Held for a handful of stores; taken only when the object is
// shared (with one worker, never).
#pragma once

#include <atomic>

namespace vrnic {

class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Locks `lock` for its scope when `shared`.
class SharedGuard {
 public:
  SharedGuard(SpinLock &lock, bool shared) : lock_(shared ? &lock : nullptr) {
    if (lock_) lock_->lock();
  }
  ~SharedGuard() {
    if (lock_) lock_->unlock();
  }
  SharedGuard(const SharedGuard &) = delete;
  SharedGuard &operator=(const SharedGuard &) = delete;

 private:
  SpinLock *lock_;
};

}  // namespace vrnic
