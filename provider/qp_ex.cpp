// The ibv_wr_* interface of extended QPs (QPs created with send_ops_flags). ibv_wr_start takes
// the send queue lock; each WR builder starts a WQE in the next free slot beyond the producer
// index vrnicd sees, the setters fill that WQE in, and ibv_wr_complete publishes the whole
// batch with one release store -- or, if any call of the batch failed, none of it. The WQEs
// are encoded exactly as ibv_post_send encodes them (see write_send_wqe in qp.cpp).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "internal.h"
#include "send_wqe.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace {

constexpr uint64_t kWriteOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
constexpr uint64_t kReadAtomicOps = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
constexpr uint64_t kWindowOps = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;

// Records the batch's first error; ibv_wr_complete reports it and posts nothing.
void fail(Qp *qp, int err) {
  if (!qp->wr_error) qp->wr_error = err;
}

uint32_t batch_start(const Qp *qp) {
  // Only this thread (holding sq_lock) stores the producer: a relaxed load suffices.
  return qp->shared->sq.producer.load(std::memory_order_relaxed);
}

// WR builders: start a WQE in the next slot from ibv_qp_ex's wr_id and wr_flags. Returns
// null (the error recorded) when the batch has already failed or the send queue is full.
shm::SendWqe *begin_wqe(Qp *qp, ibv_wr_opcode opcode) {
  if (qp->wr_error) return nullptr;
  uint32_t consumer = qp->shared->sq.consumer.load(std::memory_order_acquire);
  if (qp->wr_producer - consumer >= qp->caps.max_send_wr) {
    fail(qp, ENOMEM);
    return nullptr;
  }
  shm::SendWqe &w = qp->sq[qp->wr_producer++ & (qp->sq_slots - 1)];
  // IBV_SEND_INLINE with ibv_wr_set_sge*: the data is copied at once, as ibv_post_send does.
  encode_header(w, qp->ex.wr_id, opcode, qp->ex.wr_flags);
  return &w;
}

shm::SendWqe *begin_remote_wqe(Qp *qp, ibv_wr_opcode opcode, uint32_t rkey, uint64_t addr) {
  shm::SendWqe *w = begin_wqe(qp, opcode);
  if (w) {
    w->remote_addr = addr;
    w->rkey = rkey;
  }
  return w;
}

// Setters: the WQE the last builder started, or null (the error recorded) if there is none.
shm::SendWqe *current_wqe(Qp *qp) {
  if (qp->wr_error) return nullptr;
  if (qp->wr_producer == batch_start(qp)) {
    fail(qp, EINVAL);  // a setter before any builder
    return nullptr;
  }
  return &qp->sq[(qp->wr_producer - 1) & (qp->sq_slots - 1)];
}

// ---- ibv_wr_start / ibv_wr_complete / ibv_wr_abort ----

void wr_start(ibv_qp_ex *ex) {
  Qp *qp = Qp::of(ex);
  pthread_spin_lock(&qp->sq_lock);
  qp->wr_producer = batch_start(qp);
  qp->wr_error = 0;
}

int wr_complete(ibv_qp_ex *ex) {
  Qp *qp = Qp::of(ex);
  int err = qp->wr_error;
  bool any = qp->wr_producer != batch_start(qp);
  if (!err && any) {
    // As ibv_post_send: a send queue accepts work from RTS on (in ERR it is flushed).
    uint32_t state = qp->shared->state.load(std::memory_order_acquire);
    if (state < IBV_QPS_RTS && state != IBV_QPS_ERR) err = EINVAL;
  }
  bool post = !err && any;
  if (post) qp->shared->sq.producer.store(qp->wr_producer, std::memory_order_release);
  qp->wr_error = 0;
  pthread_spin_unlock(&qp->sq_lock);
  if (post) ring_sq_doorbell(qp);
  return err;
}

void wr_abort(ibv_qp_ex *ex) {
  Qp *qp = Qp::of(ex);
  qp->wr_error = 0;  // the WQEs beyond the published producer are simply reused later
  pthread_spin_unlock(&qp->sq_lock);
}

// ---- WR builders ----

void wr_send(ibv_qp_ex *ex) {
  begin_wqe(Qp::of(ex), IBV_WR_SEND);
}

void wr_send_imm(ibv_qp_ex *ex, __be32 imm_data) {
  if (shm::SendWqe *w = begin_wqe(Qp::of(ex), IBV_WR_SEND_WITH_IMM)) w->imm_or_rkey = imm_data;
}

void wr_rdma_write(ibv_qp_ex *ex, uint32_t rkey, uint64_t remote_addr) {
  begin_remote_wqe(Qp::of(ex), IBV_WR_RDMA_WRITE, rkey, remote_addr);
}

void wr_rdma_write_imm(ibv_qp_ex *ex, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
  if (shm::SendWqe *w = begin_remote_wqe(Qp::of(ex), IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr))
    w->imm_or_rkey = imm_data;
}

void wr_rdma_read(ibv_qp_ex *ex, uint32_t rkey, uint64_t remote_addr) {
  begin_remote_wqe(Qp::of(ex), IBV_WR_RDMA_READ, rkey, remote_addr);
}

void wr_atomic_cmp_swp(ibv_qp_ex *ex, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  shm::SendWqe *w = begin_remote_wqe(Qp::of(ex), IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr);
  if (w) {
    w->compare_add = compare;
    w->swap = swap;
  }
}

void wr_atomic_fetch_add(ibv_qp_ex *ex, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  shm::SendWqe *w = begin_remote_wqe(Qp::of(ex), IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr);
  if (w) w->compare_add = add;
}

// The 8 bytes at atomic_wr, as they are, into the WQE: they are written at the remote address
// as one store.
void wr_atomic_write(ibv_qp_ex *ex, uint32_t rkey, uint64_t remote_addr, const void *atomic_wr) {
  Qp *qp = Qp::of(ex);
  shm::SendWqe *w = begin_remote_wqe(qp, IBV_WR_ATOMIC_WRITE, rkey, remote_addr);
  if (!w) return;
  if (!atomic_wr) return fail(qp, EINVAL);
  std::memcpy(&w->compare_add, atomic_wr, 8);
}

void wr_send_inv(ibv_qp_ex *ex, uint32_t invalidate_rkey) {
  if (shm::SendWqe *w = begin_wqe(Qp::of(ex), IBV_WR_SEND_WITH_INV))
    w->imm_or_rkey = invalidate_rkey;
}

void wr_local_inv(ibv_qp_ex *ex, uint32_t invalidate_rkey) {
  if (shm::SendWqe *w = begin_wqe(Qp::of(ex), IBV_WR_LOCAL_INV)) w->imm_or_rkey = invalidate_rkey;
}

// Type 2 windows only: type 1 windows are bound with ibv_bind_mw.
void wr_bind_mw(ibv_qp_ex *ex, ibv_mw *mw, uint32_t rkey, const ibv_mw_bind_info *info) {
  Qp *qp = Qp::of(ex);
  shm::SendWqe *w = begin_wqe(qp, IBV_WR_BIND_MW);
  if (!w) return;
  if (!mw || !info || mw->type != IBV_MW_TYPE_2) return fail(qp, EINVAL);
  if (int err = encode_bind(qp, *w, mw, rkey, *info)) fail(qp, err);
}

// Any entry point vrnic cannot honour on this QP: the batch fails with Err.
template <int Err, typename... Args>
void reject(ibv_qp_ex *ex, Args...) {
  fail(Qp::of(ex), Err);
}

// ---- setters ----

void wr_set_sge_list(ibv_qp_ex *ex, size_t num_sge, const ibv_sge *sg_list) {
  Qp *qp = Qp::of(ex);
  shm::SendWqe *w = current_wqe(qp);
  if (!w) return;
  if (w->opcode == IBV_WR_BIND_MW || w->opcode == IBV_WR_LOCAL_INV ||
      w->opcode == IBV_WR_ATOMIC_WRITE)
    return fail(qp, EINVAL);  // they carry no data list
  if (int err = encode_sges(qp, *w, sg_list, num_sge)) fail(qp, err);
}

void wr_set_sge(ibv_qp_ex *ex, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  wr_set_sge_list(ex, 1, &sge);
}

void wr_set_inline_data_list(ibv_qp_ex *ex, size_t num_buf, const ibv_data_buf *buf_list) {
  Qp *qp = Qp::of(ex);
  shm::SendWqe *w = current_wqe(qp);
  if (!w) return;
  if (int err = encode_inline(qp, *w, buf_list, num_buf)) fail(qp, err);
}

void wr_set_inline_data(ibv_qp_ex *ex, void *addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(ex, 1, &buf);
}

// UD only. The address vector is copied, so the AH may be destroyed once this returns.
void wr_set_ud_addr(ibv_qp_ex *ex, ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  Qp *qp = Qp::of(ex);
  shm::SendWqe *w = current_wqe(qp);
  if (!w) return;
  if (int err = encode_ud_address(qp, *w, ah, remote_qpn, remote_qkey)) fail(qp, err);
}

// XRC initiator: the SRQ of the target's XRC domain the WR is for.
void wr_set_xrc_srqn(ibv_qp_ex *ex, uint32_t remote_srqn) {
  if (shm::SendWqe *w = current_wqe(Qp::of(ex))) w->remote_srqn = remote_srqn;
}

}  // namespace

namespace vrnic::provider {

int setup_qp_ex(Qp *qp, uint64_t send_ops_flags) {
  const ibv_qp_type type = qp->ibv.qp_type;
  // What vrnic executes on this QP type (TSO is not implemented).
  const uint64_t supported = wr::send_ops_for(type);
  if (!supported || (send_ops_flags & ~supported)) return EOPNOTSUPP;
  ibv_qp_ex &ex = qp->ex;
  ex.comp_mask = 0;
  ex.wr_id = 0;
  ex.wr_flags = 0;
  ex.wr_start = wr_start;
  ex.wr_complete = wr_complete;
  ex.wr_abort = wr_abort;
  // Every operation the QP type allows works, requested in send_ops_flags or not (as in
  // rdma-core's providers); the others fail the batch: EINVAL for operations this QP type
  // cannot carry, EOPNOTSUPP for those vrnic does not implement.
  ex.wr_send = wr_send;
  ex.wr_send_imm = wr_send_imm;
  if (supported & kWriteOps) {
    ex.wr_rdma_write = wr_rdma_write;
    ex.wr_rdma_write_imm = wr_rdma_write_imm;
  } else {
    ex.wr_rdma_write = reject<EINVAL>;
    ex.wr_rdma_write_imm = reject<EINVAL>;
  }
  if (supported & kReadAtomicOps) {
    ex.wr_rdma_read = wr_rdma_read;
    ex.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    ex.wr_atomic_fetch_add = wr_atomic_fetch_add;
  } else {
    ex.wr_rdma_read = reject<EINVAL>;
    ex.wr_atomic_cmp_swp = reject<EINVAL>;
    ex.wr_atomic_fetch_add = reject<EINVAL>;
  }
  if (supported & kWindowOps) {
    ex.wr_bind_mw = wr_bind_mw;
    ex.wr_local_inv = wr_local_inv;
  } else {
    ex.wr_bind_mw = reject<EINVAL>;
    ex.wr_local_inv = reject<EINVAL>;
  }
  if (supported & IBV_QP_EX_WITH_SEND_WITH_INV)
    ex.wr_send_inv = wr_send_inv;
  else
    ex.wr_send_inv = reject<EINVAL>;
  ex.wr_send_tso = reject<EOPNOTSUPP>;
  if (supported & IBV_QP_EX_WITH_ATOMIC_WRITE)
    ex.wr_atomic_write = wr_atomic_write;
  else
    ex.wr_atomic_write = reject<EINVAL>;
  ex.wr_set_sge = wr_set_sge;
  ex.wr_set_sge_list = wr_set_sge_list;
  ex.wr_set_inline_data = wr_set_inline_data;
  ex.wr_set_inline_data_list = wr_set_inline_data_list;
  if (type == IBV_QPT_UD)
    ex.wr_set_ud_addr = wr_set_ud_addr;
  else
    ex.wr_set_ud_addr = reject<EINVAL>;
  if (type == IBV_QPT_XRC_SEND)
    ex.wr_set_xrc_srqn = wr_set_xrc_srqn;
  else
    ex.wr_set_xrc_srqn = reject<EINVAL>;
  qp->extended = true;
  return 0;
}

}  // namespace vrnic::provider
