// Shared receive queues: a receive ring several QPs draw from, with a low-water-mark event.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "internal.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace vrnic::provider {

ibv_srq *create_srq_ex(ibv_context *context, ibv_srq_init_attr_ex *attr) {
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                              IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  if (attr->comp_mask & ~kKnown) return fail_null<ibv_srq>(EINVAL);
  const uint32_t type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_TM) return fail_null<ibv_srq>(EOPNOTSUPP);  // no hardware tag matching
  if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) return fail_null<ibv_srq>(EINVAL);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context)
    return fail_null<ibv_srq>(EINVAL);
  // An XRC SRQ: in an XRC domain, with a CQ of its own (as ibv_cmd_create_srq_ex requires).
  const bool xrc = type == IBV_SRQT_XRC;
  if (xrc && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
              !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq ||
              attr->xrcd->context != context || attr->cq->context != context))
    return fail_null<ibv_srq>(EINVAL);
  Context *c = Context::of(context);
  auto *srq = new (std::nothrow) Srq{};
  if (!srq) return fail_null<ibv_srq>(ENOMEM);
  ctl::CreateSrqReq req{};
  req.pd = attr->pd->handle;
  req.srq_type = type;
  if (xrc) {
    req.xrcd = Xrcd::of(attr->xrcd)->handle;
    req.cq = Cq::of(attr->cq)->handle;
  }
  req.cookie = srq->event_cookie = c->async_objects.add(&srq->ibv);
  req.attr = {attr->attr.max_wr, attr->attr.max_sge, attr->attr.srq_limit, 0};
  ctl::CreateSrqResp resp{};
  void *map = nullptr;
  size_t len = 0;
  int err = c->create_mapped(
      ctl::Op::kCreateSrq, &req, sizeof(req), resp, ctl::Op::kDestroySrq,
      [](const ctl::CreateSrqResp &r) { return shm::srq_region_bytes(r.slots); }, &map, &len);
  if (err) {
    c->async_objects.remove(srq->event_cookie);
    delete srq;
    return fail_null<ibv_srq>(err);
  }
  srq->handle = resp.handle;
  srq->shared = static_cast<shm::SrqShared *>(map);
  srq->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<uint8_t *>(map) + shm::kSrqHeaderBytes);
  srq->slots = resp.slots;
  srq->max_wr = resp.attr.max_wr;
  srq->max_sge = resp.attr.max_sge;
  srq->map_len = len;
  pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);
  ibv_srq &ib = srq->ibv;
  ib.context = context;
  ib.srq_context = attr->srq_context;
  ib.pd = attr->pd;
  ib.handle = resp.handle;
  pthread_mutex_init(&ib.mutex, nullptr);
  pthread_cond_init(&ib.cond, nullptr);
  attr->attr.max_wr = resp.attr.max_wr;
  attr->attr.max_sge = resp.attr.max_sge;
  return &ib;
}

int post_srq_recv(ibv_srq *ibsrq, ibv_recv_wr *wr, ibv_recv_wr **bad_wr) {
  Srq *srq = Srq::of(ibsrq);
  pthread_spin_lock(&srq->lock);
  int err = post_recv_wrs(srq->shared->ring, srq->ring, srq->slots, srq->max_wr, srq->max_sge, wr,
                          bad_wr);
  pthread_spin_unlock(&srq->lock);
  return err;
}

}  // namespace vrnic::provider

extern "C" {

VRNIC_EXPORT ibv_srq *ibv_create_srq(ibv_pd *pd, ibv_srq_init_attr *attr) {
  if (!pd || !attr) return fail_null<ibv_srq>(EINVAL);
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_srq *srq = create_srq_ex(pd->context, &ex);
  if (srq) attr->attr = ex.attr;
  return srq;
}

VRNIC_EXPORT int ibv_modify_srq(ibv_srq *ibsrq, ibv_srq_attr *attr, int attr_mask) {
  Srq *srq = Srq::of(ibsrq);
  ctl::ModifySrqReq req{
      srq->handle, uint32_t(attr_mask), {attr->max_wr, attr->max_sge, attr->srq_limit, 0}};
  int err =
      Context::of(ibsrq->context)->conn.call(ctl::Op::kModifySrq, &req, sizeof(req), nullptr, 0);
  if (!err && (attr_mask & IBV_SRQ_MAX_WR)) srq->max_wr = attr->max_wr;
  return err;
}

VRNIC_EXPORT int ibv_query_srq(ibv_srq *ibsrq, ibv_srq_attr *attr) {
  Srq *srq = Srq::of(ibsrq);
  ctl::QuerySrqResp resp{};
  int err =
      Context::of(ibsrq->context)->call_on(ctl::Op::kQuerySrq, srq->handle, &resp, sizeof(resp));
  if (err) return err;
  attr->max_wr = srq->max_wr;
  attr->max_sge = resp.attr.max_sge;
  attr->srq_limit = resp.attr.srq_limit;
  return 0;
}

VRNIC_EXPORT int ibv_destroy_srq(ibv_srq *ibsrq) {
  Srq *srq = Srq::of(ibsrq);
  Context *c = Context::of(ibsrq->context);
  int err = c->call_on(ctl::Op::kDestroySrq, srq->handle);
  if (err) return err;
  c->async_objects.remove(srq->event_cookie);
  ::munmap(srq->shared, srq->map_len);
  pthread_spin_destroy(&srq->lock);
  delete srq;
  return 0;
}

}  // extern "C"
