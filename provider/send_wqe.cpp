#include "send_wqe.h"

#include <algorithm>

namespace vrnic::provider {

void encode_header(shm::SendWqe &w, uint64_t wr_id, ibv_wr_opcode opcode, unsigned send_flags) {
  std::memset(&w, 0, offsetof(shm::SendWqe, sge));
  w.wr_id = wr_id;
  w.opcode = uint8_t(opcode);
  w.flags = uint8_t(
      ((send_flags & IBV_SEND_SIGNALED) ? shm::kWqeSignaled : 0) |
      ((send_flags & IBV_SEND_SOLICITED) ? shm::kWqeSolicited : 0) |
      ((send_flags & IBV_SEND_FENCE) ? shm::kWqeFence : 0) |
      ((send_flags & IBV_SEND_INLINE) && wr::rule(opcode).may_inline ? shm::kWqeInline : 0));
}

int encode_ud_address(const Qp *qp, shm::SendWqe &w, ibv_ah *ah, uint32_t remote_qpn,
                      uint32_t remote_qkey) {
  if (!ah || ah->pd != qp->ibv.pd) return EINVAL;
  const ctl::AddressVector &av = Ah::of(ah)->av;
  std::memcpy(w.ud.dgid, av.dgid, 16);
  w.ud.remote_qpn = remote_qpn;
  w.ud.remote_qkey = remote_qkey;
  w.ud.flow_label = av.flow_label;
  w.ud.sgid_index = av.sgid_index;
  w.ud.hop_limit = av.hop_limit;
  w.ud.traffic_class = av.traffic_class;
  w.ud.sl = av.sl;
  return 0;
}

int encode_bind(const Qp *qp, shm::SendWqe &w, ibv_mw *mw, uint32_t new_rkey,
                const ibv_mw_bind_info &info) {
  if (!mw || mw->pd != qp->ibv.pd || (info.mr && info.mr->pd != mw->pd)) return EINVAL;
  if ((new_rkey & ~0xffu) != (mw->rkey & ~0xffu)) return EINVAL;  // only the key byte may change
  if (!info.mr && (info.addr || info.length)) return EINVAL;
  w.rkey = new_rkey;
  w.remote_addr = info.addr;
  w.compare_add = info.length;
  w.swap = uint64_t(info.mw_access_flags) << 32 | (info.mr ? info.mr->lkey : 0);
  w.num_sge = 0;
  w.length = 0;
  return 0;
}

int encode_sges(const Qp *qp, shm::SendWqe &w, const ibv_sge *sges, size_t n) {
  if (w.flags & shm::kWqeInline) return encode_inline(qp, w, sges, n);
  if (n > qp->caps.max_send_sge) return EINVAL;
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    w.sge[i] = {sges[i].addr, sges[i].length, sges[i].lkey};
    total += sges[i].length;
  }
  w.num_sge = uint8_t(n);
  w.length = uint32_t(std::min<uint64_t>(total, UINT32_MAX));
  return 0;
}

}  // namespace vrnic::provider
