// Extended CQs: ibv_create_cq_ex and the ibv_start_poll/next_poll/end_poll iterator. The
// iterator reads CQEs in place, in the order ibv_poll_cq gives them (cq.cpp: cq_next and
// cq_consume, over the ring vrnicd fills and the direct path's completions), so an
// ibv_cq_ex is also an ordinary ibv_cq for ibv_poll_cq, ibv_req_notify_cq and ibv_destroy_cq.
#include <sched.h>

#include <climits>
#include <cstring>

#include "internal.h"
#include "vrnic/clock.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace {

// The wc_flags whose read functions vrnic provides: every field a CQE carries, and its time
// (a CQ asked for one keeps each completion's, shm::cq_stamps).
constexpr uint64_t kTimestampFlags =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS | kTimestampFlags;

// As in poll_cq: after this many empty polls in a row a poller gives its CPU away once, so a
// busy ibv_start_poll loop cannot starve the worker that would produce its completion.
constexpr int kEmptyPollsBeforeYield = 64;
thread_local int t_empty_polls = 0;

void note_poll(bool found) {
  if (found) {
    t_empty_polls = 0;
  } else if (++t_empty_polls >= kEmptyPollsBeforeYield) {
    t_empty_polls = 0;
    sched_yield();
  }
}

// The CQE the iterator points at.
const shm::Cqe &current(ibv_cq_ex *ex) { return *Cq::of(ex)->poll.cqe; }

// Steps the iterator to the next completion (cq.cpp's order of vrnicd's ring and the direct
// path's); false when there is none.
bool step(Cq *cq) {
  if (!cq_next(cq, cq->poll, cq->shared->ring.producer.load(std::memory_order_acquire)))
    return false;
  cq->ex.wr_id = cq->poll.cqe->wr_id;
  cq->ex.status = ibv_wc_status(cq->poll.cqe->status);
  return true;
}

// Locked: the CQ's spinlock is held from a successful start_poll to end_poll. Without it
// (IBV_CREATE_CQ_ATTR_SINGLE_THREADED) the application promises a single poller.
template <bool kLocked>
int start_poll(ibv_cq_ex *ex, ibv_poll_cq_attr *attr) {
  if (attr && attr->comp_mask) return EINVAL;
  Cq *cq = Cq::of(ex);
  if (kLocked) pthread_spin_lock(&cq->lock);
  cq->poll = cq_cursor(cq);
  bool found = step(cq);
  if (!found && kLocked) pthread_spin_unlock(&cq->lock);
  note_poll(found);
  return found ? 0 : ENOENT;
}

int next_poll(ibv_cq_ex *ex) { return step(Cq::of(ex)) ? 0 : ENOENT; }

// Consumes every CQE up to the one the iterator points at.
template <bool kLocked>
void end_poll(ibv_cq_ex *ex) {
  Cq *cq = Cq::of(ex);
  cq_consume(cq, cq->poll);
  if (kLocked) pthread_spin_unlock(&cq->lock);
}

ibv_wc_opcode read_opcode(ibv_cq_ex *ex) {
  return ibv_wc_opcode(current(ex).opcode);
}
uint32_t read_vendor_err(ibv_cq_ex *) {
  return 0;
}
uint32_t read_byte_len(ibv_cq_ex *ex) {
  return current(ex).byte_len;
}
// Also ibv_wc_read_invalidated_rkey.
__be32 read_imm_data(ibv_cq_ex *ex) {
  return current(ex).imm_data;
}
uint32_t read_qp_num(ibv_cq_ex *ex) {
  return current(ex).qp_num;
}
uint32_t read_src_qp(ibv_cq_ex *ex) {
  return current(ex).src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex *ex) {
  return current(ex).wc_flags;
}
uint32_t read_slid(ibv_cq_ex *ex) {
  return current(ex).slid;
}
uint8_t read_sl(ibv_cq_ex *ex) {
  return current(ex).sl;
}
// RoCE: no LID path bits.
uint8_t read_dlid_path_bits(ibv_cq_ex *) {
  return 0;
}
// In the device's free-running clock: nanoseconds of CLOCK_MONOTONIC (hca_core_clock 1 GHz).
uint64_t read_completion_ts(ibv_cq_ex *ex) {
  Cq *cq = Cq::of(ex);
  return cq->stamp_of(cq->poll.cqe);
}
// Wall-clock nanoseconds: the stamp moved by CLOCK_REALTIME's offset from CLOCK_MONOTONIC
// now (a clock step since the completion moves it too, as a NIC's real-time clock would be
// stepped along).
uint64_t read_completion_wallclock_ns(ibv_cq_ex *ex) {
  const uint64_t offset = clock_ns(CLOCK_REALTIME) - monotonic_ns();
  return read_completion_ts(ex) + offset;
}

}  // namespace

namespace vrnic::provider {

int setup_cq_ex(Cq *cq, uint64_t wc_flags) {
  if (wc_flags & ~kSupportedWcFlags) return EOPNOTSUPP;
  ibv_cq_ex &ex = cq->ex;
  cq->wc_flags = wc_flags;
  cq->poll = cq_cursor(cq);
  ex.comp_mask = 0;
  ex.start_poll = start_poll<true>;
  ex.next_poll = next_poll;
  ex.end_poll = end_poll<true>;
  // opcode, vendor_err and wc_flags may always be read; each other field only when it was
  // requested (as in rdma-core's providers, the others stay NULL).
  ex.read_opcode = read_opcode;
  ex.read_vendor_err = read_vendor_err;
  ex.read_wc_flags = read_wc_flags;
  auto want = [&](uint64_t flag) { return (wc_flags & flag) != 0; };
  ex.read_byte_len = want(IBV_WC_EX_WITH_BYTE_LEN) ? read_byte_len : nullptr;
  ex.read_imm_data = want(IBV_WC_EX_WITH_IMM) ? read_imm_data : nullptr;
  ex.read_qp_num = want(IBV_WC_EX_WITH_QP_NUM) ? read_qp_num : nullptr;
  ex.read_src_qp = want(IBV_WC_EX_WITH_SRC_QP) ? read_src_qp : nullptr;
  ex.read_slid = want(IBV_WC_EX_WITH_SLID) ? read_slid : nullptr;
  ex.read_sl = want(IBV_WC_EX_WITH_SL) ? read_sl : nullptr;
  ex.read_dlid_path_bits = want(IBV_WC_EX_WITH_DLID_PATH_BITS) ? read_dlid_path_bits : nullptr;
  ex.read_completion_ts = want(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ? read_completion_ts : nullptr;
  ex.read_cvlan = nullptr;
  ex.read_flow_tag = nullptr;
  ex.read_tm_info = nullptr;
  ex.read_completion_wallclock_ns = want(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
                                        ? read_completion_wallclock_ns
                                        : nullptr;
  return 0;
}

ibv_cq_ex *create_cq_ex(ibv_context *context, ibv_cq_init_attr_ex *attr) {
  if (!attr) return fail_null<ibv_cq_ex>(EINVAL);
  // A CQ in a parent domain: a parent domain of this context, as mlx5 takes it (a protection
  // domain is EINVAL). Its thread domain is a hint vrnic has no use for.
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (!attr->parent_domain || attr->parent_domain->context != context ||
       !Pd::of(attr->parent_domain)->protection_domain))
    return fail_null<ibv_cq_ex>(EINVAL);
  if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
    return fail_null<ibv_cq_ex>(EINVAL);  // bits rdma-core 44 does not define
  uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
  if (flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
    return fail_null<ibv_cq_ex>(EOPNOTSUPP);  // IGNORE_OVERRUN: vrnicd always reports overrun
  if (attr->wc_flags & ~kSupportedWcFlags) return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  if (attr->cqe > uint32_t(INT_MAX) || attr->comp_vector > uint32_t(INT_MAX))
    return fail_null<ibv_cq_ex>(EINVAL);
  Cq *cq = create_cq(context, int(attr->cqe), attr->cq_context, attr->channel,
                     int(attr->comp_vector), (attr->wc_flags & kTimestampFlags) != 0);
  if (!cq) return nullptr;
  if (int err = setup_cq_ex(cq, attr->wc_flags)) {
    ibv_destroy_cq(&cq->ibv);
    return fail_null<ibv_cq_ex>(err);
  }
  if (flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED) {
    cq->ex.start_poll = start_poll<false>;
    cq->ex.end_poll = end_poll<false>;
    // Polled without the lock that posting threads take to add direct completions: its
    // QPs keep to the worker path.
    cq->direct.reset();
  }
  return &cq->ex;
}

}  // namespace vrnic::provider
