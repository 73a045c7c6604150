// Which ibv_modify_qp transitions are legal and which attribute-mask bits each requires and
// allows, per QP type (IB spec 11.2.5 / the kernel's transition table).
#pragma once

#include <cstdint>

namespace vrnic {

// Returns 0, or EINVAL for an illegal transition or mask.
int check_qp_transition(uint32_t qp_type, uint32_t cur_state, uint32_t next_state,
                        uint32_t attr_mask);

}  // namespace vrnic
