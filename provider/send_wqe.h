// Encoding send work requests into shm::SendWqe: one definition shared by ibv_post_send
// (qp.cpp) and the ibv_wr_* interface (qp_ex.cpp). Functions returning int give 0 or the
// errno the posting verb reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "internal.h"
#include "vrnic/work_request.h"

namespace vrnic::provider {

// Which opcode a QP type may post, and whether its data may be inline: vrnic/work_request.h.

// The WQE header: wr_id, opcode and the ibv_send_flags that vrnicd looks at.
void encode_header(shm::SendWqe &w, uint64_t wr_id, ibv_wr_opcode opcode, unsigned send_flags);
// A UD destination, copied from the AH (which may be destroyed once the WR is posted).
int encode_ud_address(const Qp *qp, shm::SendWqe &w, ibv_ah *ah, uint32_t remote_qpn,
                      uint32_t remote_qkey);
// A window bind: rkey = the window's new rkey, remote_addr/compare_add = the range,
// swap = rights << 32 | the MR's lkey.
int encode_bind(const Qp *qp, shm::SendWqe &w, ibv_mw *mw, uint32_t new_rkey,
                const ibv_mw_bind_info &info);
int encode_sges(const Qp *qp, shm::SendWqe &w, const ibv_sge *sges, size_t n);

inline const void *buf_addr(const ibv_sge &s) {
  return reinterpret_cast<const void *>(s.addr);
}
inline size_t buf_len(const ibv_sge &s) {
  return s.length;
}
inline const void *buf_addr(const ibv_data_buf &b) {
  return b.addr;
}
inline size_t buf_len(const ibv_data_buf &b) {
  return b.length;
}

// Copies the logically concatenated buffers (ibv_sge or ibv_data_buf) into the WQE.
template <typename Buf>
int encode_inline(const Qp *qp, shm::SendWqe &w, const Buf *bufs, size_t n) {
  if (!wr::rule(w.opcode).may_inline) return EINVAL;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += buf_len(bufs[i]);
    if (total > qp->caps.max_inline_data) return EINVAL;
  }
  uint8_t *out = w.inline_data;
  for (size_t i = 0; i < n; i++) {
    if (buf_len(bufs[i])) std::memcpy(out, buf_addr(bufs[i]), buf_len(bufs[i]));
    out += buf_len(bufs[i]);
  }
  w.flags |= shm::kWqeInline;
  w.num_sge = 0;
  w.length = uint32_t(total);
  return 0;
}

}  // namespace vrnic::provider
