// A direct section and the wait for sections in flight: the one epoch mechanism of the
// direct path, over this process's reader cells (direct_path.cpp) and over a user's poster
// cells shared between processes (vrnic/direct_directory.h). A cell is odd while its thread
// is in a section; whoever takes something out of reach waits for every cell that was odd.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vrnic::provider {

// What a section looked up stays valid until it ends. The seq_cst store pairs with the
// waiter's seq_cst loads after it took something out: either the section sees it gone, or
// the waiter sees the section and waits for it.
template <typename Cell>
class Section {
 public:
  explicit Section(Cell *c) : cell_(c) {
    seq_ = cell_->seq.load(std::memory_order_relaxed) + 1;
    cell_->seq.store(seq_, std::memory_order_seq_cst);
  }
  ~Section() { cell_->seq.store(seq_ + 1, std::memory_order_release); }
  Section(const Section &) = delete;
  Section &operator=(const Section &) = delete;

 private:
  Cell *cell_;
  uint64_t seq_;
};

// Waits until every section among `cells` that began before the call has ended. A section
// is a few checks and one copy: wait, giving the CPU away.
template <typename Cell>
void wait_for_sections(Cell *cells, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const uint64_t seq = cells[i].seq.load(std::memory_order_seq_cst);
    if (!(seq & 1)) continue;
    while (cells[i].seq.load(std::memory_order_acquire) == seq) sched_yield();
  }
}

}  // namespace vrnic::provider
