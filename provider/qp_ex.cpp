// The ibv_wr_* interface of extended QPs (placeholder until it is written).
#include "internal.h"

namespace vrnic::provider {

int setup_qp_ex(Qp *, uint64_t) { return EOPNOTSUPP; }

}  // namespace vrnic::provider
