// Objects indexed by a small integer handle (index + 1; 0 is never valid), with a generation
// byte for keys so that a stale key does not reach a new object in a reused slot. Lookups are
// an array index, never a hash: the fast path resolves QPNs and keys through these.
//
// One writer (the control thread), any number of readers (the workers) at once for get():
// the slot array never moves (it is reserved whole, for the table's capacity, and the pages
// are touched only as slots are used), and an object is published with a release store only
// once it is complete, so inserting needs no worker stopped (issue 29). Removing and
// replacing do: a reader may still hold what a slot held, and only the caller knows when it
// can no longer (WorkerGroup::execute_all, for now).
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <type_traits>

namespace vrnic {

template <typename T>
class SlotTable {
 public:
  explicit SlotTable(uint32_t capacity) : capacity_(capacity) {
    // Zero pages until used: a table of a million slots costs what its used slots do.
    void *p = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    slots_ = static_cast<T **>(p);
    generation_ = reinterpret_cast<uint8_t *>(slots_ + capacity_);
  }
  ~SlotTable() {
    for (uint32_t i = 0; i < used_; i++) delete slot(i).load(std::memory_order_relaxed);
    ::munmap(slots_, bytes());
  }
  SlotTable(const SlotTable &) = delete;
  SlotTable &operator=(const SlotTable &) = delete;

  // Returns the handle (index + 1), or 0 when full. The slot's generation moves on by
  // generation_step (1-255: never back to the value a stale key holds). `ready(obj, handle,
  // generation)` finishes the object (its handle, its key) before any reader can see it.
  template <typename Ready>
  uint32_t insert(std::unique_ptr<T> obj, uint8_t generation_step, Ready &&ready) {
    uint32_t index;
    if (!free_.empty() && (free_.size() > kReuseDelay || used_ >= capacity_)) {
      index = free_.front();
      free_.pop_front();
    } else if (used_ < capacity_) {
      index = used_++;
    } else {
      return 0;
    }
    generation_[index] = uint8_t(generation_[index] + (generation_step ? generation_step : 1));
    ready(*obj, index + 1, generation_[index]);
    slot(index).store(obj.release(), std::memory_order_release);
    count_++;
    return index + 1;
  }
  uint32_t insert(std::unique_ptr<T> obj, uint8_t generation_step = 1) {
    return insert(std::move(obj), generation_step, [](T &, uint32_t, uint8_t) {});
  }
  T *get(uint32_t handle) const {
    return handle && handle <= capacity_ ? slot(handle - 1).load(std::memory_order_acquire)
                                         : nullptr;
  }
  uint8_t generation(uint32_t handle) const { return generation_[handle - 1]; }
  // The object leaves its slot; the caller makes sure no reader still holds it.
  std::unique_ptr<T> remove(uint32_t handle) {
    T *obj = get(handle);
    if (!obj) return nullptr;
    slot(handle - 1).store(nullptr, std::memory_order_release);
    count_--;
    free_.push_back(handle - 1);
    return std::unique_ptr<T>(obj);
  }
  // Puts obj in an occupied slot, handle and generation unchanged; returns what was there
  // (which, as after remove, a reader may still hold).
  std::unique_ptr<T> replace(uint32_t handle, std::unique_ptr<T> obj) {
    T *old = get(handle);
    if (!old) return nullptr;
    slot(handle - 1).store(obj.release(), std::memory_order_release);
    return std::unique_ptr<T>(old);
  }
  uint32_t size() const { return count_; }
  // Every object from handle `from` on, in handle order; fn returns false to stop there.
  // The writer's thread only.
  template <typename Fn>
  void for_each(Fn &&fn, uint32_t from = 1) const {
    for (uint32_t i = from ? from - 1 : 0; i < used_; i++) {
      T *obj = slot(i).load(std::memory_order_relaxed);
      if (!obj) continue;
      if constexpr (std::is_same_v<decltype(fn(i + 1, *obj)), bool>) {
        if (!fn(i + 1, *obj)) return;
      } else {
        fn(i + 1, *obj);
      }
    }
  }

 private:
  // Freed slots wait in FIFO order before reuse, so a just-destroyed QPN or key is not
  // handed out again while packets for it may still be in flight.
  static constexpr size_t kReuseDelay = 64;
  size_t bytes() const { return size_t(capacity_) * (sizeof(T *) + 1); }
  std::atomic_ref<T *> slot(uint32_t index) const { return std::atomic_ref<T *>(slots_[index]); }

  uint32_t capacity_;
  uint32_t count_ = 0;
  uint32_t used_ = 0;  // slots ever used: the writer's high-water mark
  T **slots_ = nullptr;
  uint8_t *generation_ = nullptr;  // the writer's only
  std::deque<uint32_t> free_;
};

}  // namespace vrnic
