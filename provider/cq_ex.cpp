// Extended CQs: ibv_create_cq_ex and the ibv_start_poll/next_poll/end_poll interface
// (placeholder until it is written).
#include "internal.h"

namespace vrnic::provider {

int setup_cq_ex(Cq *, uint64_t) { return EOPNOTSUPP; }

ibv_cq_ex *create_cq_ex(ibv_context *, ibv_cq_init_attr_ex *) {
  return fail_null<ibv_cq_ex>(EOPNOTSUPP);
}

}  // namespace vrnic::provider
