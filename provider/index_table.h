// IndexTable: index -> object, read without locks on the fast path (the direct path's tables
// of this process's QPs and regions, and of the regions of other processes it has mapped).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

namespace vrnic::provider {

// Index -> object, read without locks on the fast path; pages are allocated on the control
// path (publish), never freed before the table.
template <typename T, uint32_t kIndexBits>
class IndexTable {
 public:
  ~IndexTable() {
    for (auto &p : pages_) delete[] p.load(std::memory_order_relaxed);
  }
  // False when the page cannot be allocated: the object then just never takes the direct path.
  bool publish(uint32_t index, T *obj) {
    std::atomic<T *> *slot = slot_for(index);
    if (slot) slot->store(obj, std::memory_order_seq_cst);
    return slot != nullptr;
  }
  void unpublish(uint32_t index) {
    if (index >> kIndexBits) return;
    std::atomic<T *> *page = pages_[index >> kPageBits].load(std::memory_order_acquire);
    if (page) page[index & (kPageSize - 1)].store(nullptr, std::memory_order_seq_cst);
  }
  // Publishes `obj` in place of what was there, which it returns (`obj` itself when the page
  // cannot be allocated).
  T *exchange(uint32_t index, T *obj) {
    std::atomic<T *> *slot = slot_for(index);
    return slot ? slot->exchange(obj, std::memory_order_seq_cst) : obj;
  }
  // Every object in the table (no concurrent publishing).
  template <typename F>
  void for_each(F f) const {
    for (const auto &p : pages_) {
      std::atomic<T *> *page = p.load(std::memory_order_acquire);
      for (uint32_t i = 0; page && i < kPageSize; i++)
        if (T *obj = page[i].load(std::memory_order_relaxed)) f(obj);
    }
  }
  T *get(uint32_t index) const {
    if (index >> kIndexBits) return nullptr;
    std::atomic<T *> *page = pages_[index >> kPageBits].load(std::memory_order_acquire);
    return page ? page[index & (kPageSize - 1)].load(std::memory_order_seq_cst) : nullptr;
  }

 private:
  std::atomic<T *> *slot_for(uint32_t index) {
    if (index >> kIndexBits) return nullptr;
    std::atomic<T *> *page = pages_[index >> kPageBits].load(std::memory_order_acquire);
    if (!page) {
      std::lock_guard lock(mu_);
      page = pages_[index >> kPageBits].load(std::memory_order_relaxed);
      if (!page) {
        page = new (std::nothrow) std::atomic<T *>[kPageSize]();
        if (!page) return nullptr;
        pages_[index >> kPageBits].store(page, std::memory_order_release);
      }
    }
    return &page[index & (kPageSize - 1)];
  }
  static constexpr uint32_t kPageBits = 12;
  static constexpr uint32_t kPageSize = 1u << kPageBits;
  static constexpr uint32_t kPages = (1u << kIndexBits) / kPageSize;
  std::atomic<std::atomic<T *> *> pages_[kPages] = {};
  std::mutex mu_;
};

}  // namespace vrnic::provider
