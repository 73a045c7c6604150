// Queue pairs: creation maps the QP's rings shared with vrnicd; posting writes WQEs into them
// and rings the owning worker's doorbell -- no system call unless the worker sleeps.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "internal.h"
#include "send_wqe.h"
#include "vrnic/verbs_wire.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace {

// Validates one send WR and writes it into its slot; returns 0 or the errno for post_send.
int write_send_wqe(Qp *qp, const ibv_send_wr *wr, shm::SendWqe &w, bool allow_type1) {
  if (!wr::fits_qp(qp->ibv.qp_type, wr->opcode) || wr->num_sge < 0) return EINVAL;
  encode_header(w, wr->wr_id, wr->opcode, wr->send_flags);
  if (qp->ibv.qp_type == IBV_QPT_XRC_SEND) w.remote_srqn = wr->qp_type.xrc.remote_srqn;
  switch (wr->opcode) {
    case IBV_WR_BIND_MW: {
      // Type 1 windows are bound with ibv_bind_mw, type 2 through the send queue.
      ibv_mw *mw = wr->bind_mw.mw;
      if (!mw || mw->type != (allow_type1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2)) return EINVAL;
      return encode_bind(qp, w, mw, wr->bind_mw.rkey, wr->bind_mw.bind_info);
    }
    case IBV_WR_LOCAL_INV:
      w.imm_or_rkey = wr->invalidate_rkey;
      return 0;
    case IBV_WR_SEND_WITH_INV:
      w.imm_or_rkey = wr->invalidate_rkey;
      break;
    case IBV_WR_ATOMIC_WRITE:
      // As rxe takes it from ibv_post_send: the 8 bytes at the one SGE's address, read now.
      if (wr->num_sge != 1 || wr->sg_list[0].length != 8) return EINVAL;
      w.remote_addr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
      std::memcpy(&w.compare_add, reinterpret_cast<const void *>(wr->sg_list[0].addr), 8);
      return 0;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      w.remote_addr = wr->wr.atomic.remote_addr;
      w.rkey = wr->wr.atomic.rkey;
      w.compare_add = wr->wr.atomic.compare_add;
      w.swap = wr->wr.atomic.swap;
      break;
    default:
      w.imm_or_rkey = wr->imm_data;
      if (qp->ibv.qp_type == IBV_QPT_UD) {
        if (int err =
                encode_ud_address(qp, w, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey))
          return err;
      } else {
        w.remote_addr = wr->wr.rdma.remote_addr;
        w.rkey = wr->wr.rdma.rkey;
      }
  }
  return encode_sges(qp, w, wr->sg_list, size_t(wr->num_sge));
}

}  // namespace

namespace vrnic::provider {

int post_send(ibv_qp *ibqp, ibv_send_wr *wr, ibv_send_wr **bad_wr) {
  return post_send_wrs(Qp::of(ibqp), wr, bad_wr, false);
}

int post_send_wrs(Qp *qp, ibv_send_wr *wr, ibv_send_wr **bad_wr, bool allow_type1) {
  uint32_t state = qp->shared->state.load(std::memory_order_acquire);
  if (state < IBV_QPS_RTS && state != IBV_QPS_ERR) {
    *bad_wr = wr;
    return EINVAL;
  }
  DirectPath *direct = Context::of(qp->ibv.context)->direct.get();
  pthread_spin_lock(&qp->sq_lock);
  const uint32_t first = qp->shared->sq.producer.load(std::memory_order_relaxed);
  uint32_t producer = first;
  uint32_t consumer = qp->shared->sq.consumer.load(std::memory_order_acquire);
  int err = 0;
  // A list is posted whole before any of it completes: one longer than the queue does not
  // fit, whichever path its WRs take.
  uint32_t direct_ran = 0;
  for (; wr; wr = wr->next) {
    if (producer - consumer + direct_ran >= qp->caps.max_send_wr) {
      err = ENOMEM;
      break;
    }
    // On the direct path only while nothing earlier of this send queue is with vrnicd (or
    // written into the ring by this call): a WR never overtakes an earlier one.
    if (direct && !allow_type1 &&
        producer == qp->shared->sq_retired.load(std::memory_order_acquire) &&
        direct_post_send(direct, qp, wr)) {
      direct_ran++;
      continue;
    }
    if ((err = write_send_wqe(qp, wr, qp->sq[producer & (qp->sq_slots - 1)], allow_type1))) break;
    producer++;
  }
  qp->shared->sq.producer.store(producer, std::memory_order_release);
  pthread_spin_unlock(&qp->sq_lock);
  if (err) *bad_wr = wr;
  if (producer != first) ring_sq_doorbell(qp);  // not for WRs the direct path ran
  return err;
}

void ring_sq_doorbell(Qp *qp) {
  if (qp->shared->doorbell_pending.exchange(1, std::memory_order_seq_cst) == 0)
    Context::of(qp->ibv.context)
        ->ring_doorbell(qp->shared->worker.load(std::memory_order_relaxed), qp->handle);
}

int post_recv_wrs(shm::RingIndices &ring, shm::RecvWqe *slots, uint32_t nslots, uint32_t max_wr,
                  uint32_t max_sge, ibv_recv_wr *wr, ibv_recv_wr **bad_wr) {
  uint32_t producer = ring.producer.load(std::memory_order_relaxed);
  uint32_t consumer = ring.consumer.load(std::memory_order_acquire);
  int err = 0;
  for (; wr; wr = wr->next) {
    if (producer - consumer >= max_wr) {
      err = ENOMEM;
      break;
    }
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > max_sge) {
      err = EINVAL;
      break;
    }
    shm::RecvWqe &w = slots[producer & (nslots - 1)];
    w.wr_id = wr->wr_id;
    w.num_sge = uint32_t(wr->num_sge);
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      w.sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
      total += wr->sg_list[i].length;
    }
    w.length = uint32_t(std::min<uint64_t>(total, UINT32_MAX));
    producer++;
  }
  ring.producer.store(producer, std::memory_order_release);
  if (err) *bad_wr = wr;
  return err;
}

int post_recv(ibv_qp *ibqp, ibv_recv_wr *wr, ibv_recv_wr **bad_wr) {
  Qp *qp = Qp::of(ibqp);
  uint32_t state = qp->shared->state.load(std::memory_order_acquire);
  // A QP on an SRQ has no receive queue, nor has either half of XRC.
  if (state == IBV_QPS_RESET || ibqp->srq || ibqp->qp_type == IBV_QPT_XRC_SEND ||
      ibqp->qp_type == IBV_QPT_XRC_RECV) {
    *bad_wr = wr;
    return EINVAL;
  }
  pthread_spin_lock(&qp->rq_lock);
  int err = post_recv_wrs(qp->shared->rq, qp->rq, qp->rq_slots, qp->caps.max_recv_wr,
                          qp->caps.max_recv_sge, wr, bad_wr);
  pthread_spin_unlock(&qp->rq_lock);
  // Receives need no doorbell (the responder looks when a message arrives), except in the
  // error state, where the worker must flush them.
  if (state == IBV_QPS_ERR) ring_sq_doorbell(qp);
  return err;
}

shm::QpShared *own_state_mirror(Qp *qp) {
  qp->own_shared.reset(new (std::nothrow) shm::QpShared{});
  return qp->own_shared.get();
}

void init_ibv_qp(Qp *qp, ibv_context *context, void *qp_context, ibv_qp_type type, uint32_t qpn) {
  pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
  pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
  ibv_qp &ib = qp->ibv;
  ib.context = context;
  ib.qp_context = qp_context;
  ib.handle = qp->handle;
  ib.qp_num = qpn;
  ib.state = IBV_QPS_RESET;
  ib.qp_type = type;
  pthread_mutex_init(&ib.mutex, nullptr);
  pthread_cond_init(&ib.cond, nullptr);
}

ibv_qp *create_qp_ex(ibv_context *context, ibv_qp_init_attr_ex *attr) {
  constexpr uint32_t kKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                  IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (attr->comp_mask & ~kKnownMask) return fail_null<ibv_qp>(EOPNOTSUPP);
  // The mask may name create_flags without asking for any (pyverbs does); a flag itself
  // (scatter-FCS, source QPN, ...) is a capability vrnic does not report.
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
    return fail_null<ibv_qp>(EOPNOTSUPP);
  // An XRC target QP is in an XRC domain and has no PD, CQ or queue of its own; an initiator
  // has a PD and a send CQ only (as the kernel's create_qp takes them).
  const bool xrc_target = attr->qp_type == IBV_QPT_XRC_RECV;
  const bool xrc_initiator = attr->qp_type == IBV_QPT_XRC_SEND;
  if (xrc_target) {
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd ||
        attr->xrcd->context != context)
      return fail_null<ibv_qp>(EINVAL);
  } else {
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) return fail_null<ibv_qp>(EINVAL);
    if (!attr->send_cq || (!attr->recv_cq && !xrc_initiator)) return fail_null<ibv_qp>(EINVAL);
  }

  Context *c = Context::of(context);
  auto *qp = new (std::nothrow) Qp{};
  if (!qp) return fail_null<ibv_qp>(ENOMEM);
  std::memset(&qp->ex, 0, sizeof(qp->ex));
  ctl::CreateQpReq req{};
  if (xrc_target) {
    req.xrcd = Xrcd::of(attr->xrcd)->handle;
  } else {
    req.pd = attr->pd->handle;
    req.send_cq = Cq::of(attr->send_cq)->handle;
    req.recv_cq = xrc_initiator ? 0 : Cq::of(attr->recv_cq)->handle;
  }
  req.qp_type = attr->qp_type;
  req.sq_sig_all = attr->sq_sig_all;
  req.srq = attr->srq ? Srq::of(attr->srq)->handle : 0;
  req.cookie = qp->event_cookie = c->async_objects.add(&qp->ibv);
  req.caps = {attr->cap.max_send_wr,  attr->cap.max_recv_wr,     attr->cap.max_send_sge,
              attr->cap.max_recv_sge, attr->cap.max_inline_data, 0};
  ctl::CreateQpResp resp{};
  std::vector<int> fds;
  int err = c->conn.call(ctl::Op::kCreateQp, &req, sizeof(req), &resp, sizeof(resp), nullptr, 0, &fds);
  if (!err && fds.size() != (xrc_target ? 0u : 1u)) err = EPROTO;
  // The QP's memory: a block of the session's ring arena, in a chunk this process maps once.
  // An XRC target has no queue: vrnicd shares nothing, its state mirror is its own.
  uint8_t *map = nullptr;
  const size_t len = shm::qp_region_bytes(resp.sq_slots, resp.rq_slots);
  if (!err && xrc_target) {
    map = reinterpret_cast<uint8_t *>(own_state_mirror(qp));
    if (!map) err = ENOMEM;
  } else if (!err) {
    uint8_t *chunk = c->ring_chunk(resp.ring_chunk, resp.ring_chunk_bytes, fds[0]);
    if (!chunk || resp.ring_offset > resp.ring_chunk_bytes ||
        len > resp.ring_chunk_bytes - resp.ring_offset)
      err = chunk ? EPROTO : ENOMEM;
    else
      map = chunk + resp.ring_offset;
  }
  for (int fd : fds) Context::close_fd(fd);
  if (err) {
    if (resp.handle) c->call_on(ctl::Op::kDestroyQp, resp.handle);
    c->async_objects.remove(qp->event_cookie);
    delete qp;
    return fail_null<ibv_qp>(err);
  }
  qp->handle = resp.handle;
  qp->worker = resp.worker;
  qp->shared = reinterpret_cast<shm::QpShared *>(map);
  auto *base = static_cast<uint8_t *>(map);
  qp->sq = reinterpret_cast<shm::SendWqe *>(base + shm::kQpHeaderBytes);
  qp->rq = reinterpret_cast<shm::RecvWqe *>(base + shm::kQpHeaderBytes +
                                            resp.sq_slots * sizeof(shm::SendWqe));
  qp->sq_slots = resp.sq_slots;
  qp->rq_slots = resp.rq_slots;
  qp->caps = resp.caps;
  qp->sq_sig_all = attr->sq_sig_all;
  init_ibv_qp(qp, context, attr->qp_context, attr->qp_type, resp.qpn);
  ibv_qp &ib = qp->ibv;
  ib.pd = xrc_target ? nullptr : attr->pd;
  ib.send_cq = xrc_target ? nullptr : attr->send_cq;
  ib.recv_cq = xrc_target || xrc_initiator ? nullptr : attr->recv_cq;
  ib.srq = attr->srq;
  attr->cap.max_send_wr = resp.caps.max_send_wr;
  attr->cap.max_recv_wr = resp.caps.max_recv_wr;
  attr->cap.max_send_sge = resp.caps.max_send_sge;
  attr->cap.max_recv_sge = resp.caps.max_recv_sge;
  attr->cap.max_inline_data = resp.caps.max_inline_data;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    if (int e = setup_qp_ex(qp, attr->send_ops_flags)) {
      ibv_destroy_qp(&ib);
      return fail_null<ibv_qp>(e);
    }
  }
  direct_publish_qp(c->direct.get(), qp);
  return &ib;
}

}  // namespace vrnic::provider

extern "C" {

VRNIC_EXPORT ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *attr) {
  if (!pd || !attr) return fail_null<ibv_qp>(EINVAL);
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp *qp = create_qp_ex(pd->context, &ex);
  if (qp) attr->cap = ex.cap;
  return qp;
}

namespace {

void clean_cqs(ibv_qp *ibqp) {
  clean_cq(ibqp->send_cq, ibqp->qp_num);
  if (ibqp->recv_cq != ibqp->send_cq) clean_cq(ibqp->recv_cq, ibqp->qp_num);
}

}  // namespace

VRNIC_EXPORT int ibv_modify_qp(ibv_qp *ibqp, ibv_qp_attr *attr, int attr_mask) {
  Qp *qp = Qp::of(ibqp);
  ctl::ModifyQpReq req{};
  req.handle = qp->handle;
  req.attr_mask = uint32_t(attr_mask);
  ctl::to_wire(*attr, req.attr);
  int err =
      Context::of(ibqp->context)->conn.call(ctl::Op::kModifyQp, &req, sizeof(req), nullptr, 0);
  if (!err) direct_note_modify(qp, *attr, attr_mask);
  if (err || !(attr_mask & IBV_QP_STATE)) return err;
  ibqp->state = attr->qp_state;
  if (attr->qp_state == IBV_QPS_RESET) clean_cqs(ibqp);
  return 0;
}

VRNIC_EXPORT int ibv_query_qp(ibv_qp *ibqp, ibv_qp_attr *attr, int attr_mask,
                              ibv_qp_init_attr *init_attr) {
  (void)attr_mask;  // everything is returned, as rdma-core providers do
  Qp *qp = Qp::of(ibqp);
  ctl::QueryQpResp resp{};
  int err = Context::of(ibqp->context)->call_on(ctl::Op::kQueryQp, qp->handle, &resp, sizeof(resp));
  if (err) return err;
  const ctl::QpAttrWire &w = resp.attr;
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = ibv_qp_state(w.qp_state);
  attr->cur_qp_state = ibv_qp_state(w.cur_qp_state);
  attr->path_mtu = ibv_mtu(w.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = w.qkey;
  attr->rq_psn = w.rq_psn;
  attr->sq_psn = w.sq_psn;
  attr->dest_qp_num = w.dest_qp_num;
  attr->qp_access_flags = int(w.qp_access_flags);
  attr->cap = {qp->caps.max_send_wr, qp->caps.max_recv_wr, qp->caps.max_send_sge,
               qp->caps.max_recv_sge, qp->caps.max_inline_data};
  ctl::from_wire(w.ah, attr->ah_attr);
  attr->pkey_index = w.pkey_index;
  attr->sq_draining = w.sq_draining;
  attr->max_rd_atomic = w.max_rd_atomic;
  attr->max_dest_rd_atomic = w.max_dest_rd_atomic;
  attr->min_rnr_timer = w.min_rnr_timer;
  attr->port_num = w.port_num;
  attr->timeout = w.timeout;
  attr->retry_cnt = w.retry_cnt;
  attr->rnr_retry = w.rnr_retry;
  attr->en_sqd_async_notify = w.en_sqd_async_notify;
  ibqp->state = attr->qp_state;
  if (init_attr) {
    std::memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = ibqp->qp_context;
    init_attr->send_cq = ibqp->send_cq;
    init_attr->recv_cq = ibqp->recv_cq;
    init_attr->srq = ibqp->srq;
    init_attr->cap = attr->cap;
    init_attr->qp_type = ibqp->qp_type;
    init_attr->sq_sig_all = qp->sq_sig_all;
  }
  return 0;
}

// ECE (vrnic/ece.h), as rdma-core's providers answer it: the options a QP offers until
// ibv_set_ece (rdma_cm, from the REQ and the REP) says which it runs with; vrnicd applies them
// at once. Another vendor's ID is EINVAL, as mlx5 answers it; libibverbs answers vendor 0 with
// EOPNOTSUPP before any provider is asked.
VRNIC_EXPORT int ibv_query_ece(ibv_qp *ibqp, ibv_ece *ece) {
  if (!ibqp || !ece) return EINVAL;
  *ece = {kVrnicVendorId, Qp::of(ibqp)->ece_options, 0};
  return 0;
}

VRNIC_EXPORT int ibv_set_ece(ibv_qp *ibqp, ibv_ece *ece) {
  if (!ibqp || !ece) return errno = EINVAL;
  if (!ece->vendor_id) return errno = EOPNOTSUPP;
  if (ece->comp_mask || ece->vendor_id != kVrnicVendorId) return errno = EINVAL;
  Qp *qp = Qp::of(ibqp);
  ctl::SetEceReq req{qp->handle, ece->options};
  ctl::SetEceResp resp{};
  if (int err = Context::of(ibqp->context)
                    ->conn.call(ctl::Op::kSetEce, &req, sizeof(req), &resp, sizeof(resp)))
    return errno = err;
  qp->ece_options = ece->options = resp.options;
  return 0;
}

VRNIC_EXPORT int ibv_destroy_qp(ibv_qp *ibqp) {
  Qp *qp = Qp::of(ibqp);
  Context *c = Context::of(ibqp->context);
  direct_unpublish_qp(c->direct.get(), qp);  // no direct section still sees it as a peer
  int err = c->call_on(ctl::Op::kDestroyQp, qp->handle);
  if (err) {
    direct_publish_qp(c->direct.get(), qp);
    return err;
  }
  clean_cqs(ibqp);  // (its memory stays mapped: its ring arena chunk serves the next QP)
  c->async_objects.remove(qp->event_cookie);  // its unread events go; reported ones acked
  pthread_spin_destroy(&qp->sq_lock);
  pthread_spin_destroy(&qp->rq_lock);
  delete qp;
  return 0;
}

// Only QPs created with send_ops_flags have the ibv_wr_* interface (as in rdma-core).
VRNIC_EXPORT ibv_qp_ex *ibv_qp_to_qp_ex(ibv_qp *ibqp) {
  Qp *qp = Qp::of(ibqp);
  return qp->extended ? &qp->ex : nullptr;
}

VRNIC_EXPORT int ibv_query_qp_data_in_order(ibv_qp *, enum ibv_wr_opcode, uint32_t) {
  return 0;
}

VRNIC_EXPORT ibv_ah *ibv_create_ah(ibv_pd *pd, ibv_ah_attr *attr) {
  if (!pd || !attr) return fail_null<ibv_ah>(EINVAL);
  ctl::CreateAhReq req{};
  req.pd = pd->handle;
  ctl::to_wire(*attr, req.av);
  ctl::HandleResp resp{};
  int err = Context::of(pd->context)
                ->conn.call(ctl::Op::kCreateAh, &req, sizeof(req), &resp, sizeof(resp));
  if (err) return fail_null<ibv_ah>(err);
  auto *ah = new (std::nothrow) Ah{};
  if (!ah) return fail_null<ibv_ah>(ENOMEM);
  ah->ibv = {pd->context, pd, resp.handle};
  ah->av = req.av;
  return &ah->ibv;
}

VRNIC_EXPORT int ibv_destroy_ah(ibv_ah *ah) {
  int err = Context::of(ah->context)->call_on(ctl::Op::kDestroyAh, ah->handle);
  if (!err) delete Ah::of(ah);
  return err;
}

// The address of a UD sender, from its completion and the GRH its datagram arrived with.
VRNIC_EXPORT int ibv_init_ah_from_wc(ibv_context *context, uint8_t port_num, ibv_wc *wc,
                                     ibv_grh *grh, ibv_ah_attr *ah_attr) {
  if (!context || !wc || !ah_attr) return EINVAL;
  std::memset(ah_attr, 0, sizeof(*ah_attr));
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if (!(wc->wc_flags & IBV_WC_GRH)) return 0;
  if (!grh) return EINVAL;
  const auto *raw = reinterpret_cast<const uint8_t *>(grh);
  uint8_t sender[16] = {}, receiver[16] = {};
  static const uint8_t kZero[20] = {};
  if (std::memcmp(raw, kZero, 20) == 0 && (raw[20] >> 4) == 4) {  // IPv4 header at byte 20
    sender[10] = sender[11] = receiver[10] = receiver[11] = 0xff;
    std::memcpy(sender + 12, raw + 20 + 12, 4);
    std::memcpy(receiver + 12, raw + 20 + 16, 4);
    ah_attr->grh.traffic_class = raw[21];
  } else if ((raw[0] >> 4) == 6) {
    std::memcpy(sender, grh->sgid.raw, 16);
    std::memcpy(receiver, grh->dgid.raw, 16);
    uint32_t vtf = be32toh(grh->version_tclass_flow);
    ah_attr->grh.traffic_class = uint8_t(vtf >> 20);
    ah_attr->grh.flow_label = vtf & 0xfffff;
  } else {
    return EINVAL;
  }
  ah_attr->is_global = 1;
  ah_attr->grh.hop_limit = 0xff;
  std::memcpy(ah_attr->grh.dgid.raw, sender, 16);
  const ctl::DeviceInfo &info = Context::of(context)->info;
  for (uint32_t i = 0; i < ctl::kGidTableLen; i++) {
    if (info.gids[i].type != ctl::kGidEmpty && std::memcmp(info.gids[i].gid, receiver, 16) == 0) {
      ah_attr->grh.sgid_index = uint8_t(i);
      return 0;
    }
  }
  return ENOENT;  // it was not sent to one of our GIDs
}

VRNIC_EXPORT ibv_ah *ibv_create_ah_from_wc(ibv_pd *pd, ibv_wc *wc, ibv_grh *grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (int err = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
    return fail_null<ibv_ah>(err);
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"

namespace vrnic::provider {

ibv_mw *alloc_mw(ibv_pd *pd, ibv_mw_type type) {
  ctl::AllocMwReq req{pd->handle, uint32_t(type)};
  ctl::AllocMwResp resp{};
  if (int err = Context::of(pd->context)
                    ->conn.call(ctl::Op::kAllocMw, &req, sizeof(req), &resp, sizeof(resp)))
    return fail_null<ibv_mw>(err);
  auto *mw = new (std::nothrow) ibv_mw{pd->context, pd, resp.rkey, resp.handle, type};
  return mw ? mw : fail_null<ibv_mw>(ENOMEM);
}

int dealloc_mw(ibv_mw *mw) {
  int err = Context::of(mw->context)->call_on(ctl::Op::kDeallocMw, mw->handle);
  if (!err) delete mw;
  return err;
}

// Type 1: a bind WR on the QP's send queue; the window takes its next rkey once posted.
int bind_mw(ibv_qp *qp, ibv_mw *mw, ibv_mw_bind *bind) {
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr *bad;
  int err = post_send_wrs(Qp::of(qp), &wr, &bad, true);
  if (!err) mw->rkey = wr.bind_mw.rkey;
  return err;
}

}  // namespace vrnic::provider

extern "C" {

// A UD QP to or from a multicast group of this vrnicd (control/multicast.cpp); RoCE has no
// LIDs, so `lid` is not looked at.
static int mcast_call(ctl::Op op, ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
  if (!qp || !gid) return EINVAL;
  ctl::McastReq req{Qp::of(qp)->handle, lid, 0, {}};
  std::memcpy(req.gid, gid->raw, 16);
  return Context::of(qp->context)->conn.call(op, &req, sizeof(req), nullptr, 0);
}
VRNIC_EXPORT int ibv_attach_mcast(ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
  return mcast_call(ctl::Op::kAttachMcast, qp, gid, lid);
}
VRNIC_EXPORT int ibv_detach_mcast(ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) {
  return mcast_call(ctl::Op::kDetachMcast, qp, gid, lid);
}

}  // extern "C"
