// A host's fixed set of per-QP tables (missing read answers, held out-of-order packets), made
// when the host is: a QP takes one while it needs it and gives it back after, so that 65,536
// QPs do not each carry one, and nothing is allocated when packets are handled.
#pragma once

#include <cstdint>
#include <vector>

namespace vrnic {

template <typename Table>
class TablePool {
 public:
  explicit TablePool(uint32_t tables) : tables_(tables) {
    for (Table &t : tables_) free_.push_back(&t);
  }
  // A cleared table, or nullptr when every one is taken.
  Table *take() {
    if (free_.empty()) return nullptr;
    Table *t = free_.back();
    free_.pop_back();
    t->clear();
    return t;
  }
  void give(Table *t) { free_.push_back(t); }

 private:
  std::vector<Table> tables_;
  std::vector<Table *> free_;
};

}  // namespace vrnic
