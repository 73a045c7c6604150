// XRC (eXtended Reliable Connected) verbs: XRC domains (ibv_open_xrcd, ibv_close_xrcd, a
// domain shared through a file's inode as the kernel shares it), the SRQ number an initiator
// names (ibv_get_srq_num). XRC SRQs are made in srq.cpp and XRC QPs in qp.cpp; vrnicd keeps
// the domains (control/xrc_domains.cpp), the transport carries the XRCETH (dataplane/).
#include <cstring>
#include <new>

#include "internal.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace vrnic::provider {

ibv_xrcd *open_xrcd(ibv_context *context, ibv_xrcd_init_attr *attr) {
  if (!attr) return fail_null<ibv_xrcd>(EINVAL);
  // As rdma-core's ibv_cmd_open_xrcd: both the fd and the flags must be given (fd -1 for a
  // domain of this open alone).
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) return fail_null<ibv_xrcd>(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail_null<ibv_xrcd>(EINVAL);
  if (attr->fd < -1) return fail_null<ibv_xrcd>(EBADF);
  auto *x = new (std::nothrow) Xrcd{};
  if (!x) return fail_null<ibv_xrcd>(ENOMEM);
  ctl::OpenXrcdReq req{uint32_t(attr->oflags), 0};
  ctl::HandleResp resp{};
  const int fd = attr->fd;
  int err = Context::of(context)->conn.call(ctl::Op::kOpenXrcd, &req, sizeof(req), &resp,
                                            sizeof(resp), fd >= 0 ? &fd : nullptr, fd >= 0);
  if (err) {
    delete x;
    return fail_null<ibv_xrcd>(err);
  }
  x->handle = resp.handle;
  x->ibv.context = context;
  return &x->ibv;
}

int close_xrcd(ibv_xrcd *ibxrcd) {
  Xrcd *x = Xrcd::of(ibxrcd);
  if (int err = Context::of(ibxrcd->context)->call_on(ctl::Op::kCloseXrcd, x->handle)) return err;
  delete x;
  return 0;
}

// An SRQ's number is vrnicd's handle of it: what an initiator's XRCETH names. (Any SRQ has
// one, as on mlx5; only an XRC SRQ is reached by it.)
int get_srq_num(ibv_srq *ibsrq, uint32_t *srq_num) {
  *srq_num = Srq::of(ibsrq)->handle;
  return 0;
}

// Another handle of an XRC target QP of a domain this context has open (another process's, as
// a rule): modify, query and destroy it as one's own; the QP lasts while any handle does.
ibv_qp *open_qp(ibv_context *context, ibv_qp_open_attr *attr) {
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (!attr || (attr->comp_mask & kNeeded) != kNeeded ||
      attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED)
    return fail_null<ibv_qp>(EINVAL);
  if (attr->qp_type != IBV_QPT_XRC_RECV || !attr->xrcd || attr->xrcd->context != context)
    return fail_null<ibv_qp>(EINVAL);
  auto *qp = new (std::nothrow) Qp{};
  if (!qp || !own_state_mirror(qp)) {
    delete qp;
    return fail_null<ibv_qp>(ENOMEM);
  }
  std::memset(&qp->ex, 0, sizeof(qp->ex));
  Context *c = Context::of(context);
  qp->event_cookie = c->async_objects.add(&qp->ibv);
  ctl::OpenQpReq req{Xrcd::of(attr->xrcd)->handle, attr->qp_num, qp->event_cookie};
  ctl::HandleResp resp{};
  if (int err = c->conn.call(ctl::Op::kOpenQp, &req, sizeof(req), &resp, sizeof(resp))) {
    c->async_objects.remove(qp->event_cookie);
    delete qp;
    return fail_null<ibv_qp>(err);
  }
  qp->handle = resp.handle;
  qp->shared = qp->own_shared.get();
  init_ibv_qp(qp, context, (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr,
              IBV_QPT_XRC_RECV, attr->qp_num);
  // Its state now, as its other holders have made it.
  ctl::QueryQpResp state{};
  if (c->call_on(ctl::Op::kQueryQp, qp->handle, &state, sizeof(state)) == 0)
    qp->ibv.state = ibv_qp_state(state.attr.qp_state);
  return &qp->ibv;
}

}  // namespace vrnic::provider
