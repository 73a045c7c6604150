// The rdma_cm API of the drop-in librdmacm.so.1: event channels, ids, address and route
// resolution, connection set-up and teardown through vrnicd's connection manager, the QP's
// transitions that rdma-core's library makes for its users, and the synchronous forms.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <set>

#include "internal.h"
#include "vrnic/cm_wire.h"
#include "vrnic/ctl_io.h"
#include "vrnic/verbs_wire.h"

namespace vrnic::rdmacm {
namespace {

std::mutex g_ids_mu;
std::set<Id *> g_ids;


Channel *new_channel() {
  auto *c = new (std::nothrow) Channel;
  if (!c) return nullptr;
  int fds[2];
  if (int err = ctl::make_event_channel(fds)) {
    delete c;
    errno = err;
    return nullptr;
  }
  c->ch.fd = fds[0];
  c->write_fd = fds[1];
  return c;
}

void free_channel(Channel *c) {
  for (auto &[d, h] : c->handles) {
    ctl::HandleReq req{h, 0};
    d->call(ctl::Op::kCmDestroyChannel, &req, sizeof(req), nullptr, 0);
  }
  ::close(c->ch.fd);
  // A thread blocked reading the channel stays blocked, as on the kernel's rdma_cm device
  // (whose file outlives a close while a read holds it): our write end is kept open for it,
  // since closing the last one would wake it with an end of file. (rping's CM thread is
  // blocked so while the main thread tears down.)
  if (c->readers.load() == 0) {
    ::close(c->write_fd);
    delete c;
  }
}

bool is_ud(const Id *id) {
  return id->id.qp_type == IBV_QPT_UD;
}

void destroy_on(Device *dev, uint32_t handle) {
  ctl::HandleReq req{handle, 0};
  dev->daemon->call(ctl::Op::kCmDestroyId, &req, sizeof(req), nullptr, 0);
}

// vrnicd's side of the id gone, and its twins': on no device again.
void detach(Id *id) {
  for (auto [d, h] : id->twins) destroy_on(d, h);
  id->twins.clear();
  if (id->handle) destroy_on(id->dev, id->handle);
  id->handle = 0;
  id->dev = nullptr;
  id->id.verbs = nullptr;
  id->id.pd = nullptr;
}

// A wildcard bind: on each other device too, to the port the first one gave.
int bind_twins(Id *id, const ctl::CmAddress &addr) {
  for (Device *d : devices()) {
    if (d == id->dev) continue;
    errno = 0;
    const uint32_t h =
        create_on(d, id->id.channel, id->id.ps, id->id.qp_type, reinterpret_cast<uint64_t>(id));
    if (!h) return errno;
    id->twins.push_back({d, h});
    ctl::CmBindReq req{};
    req.id = h;
    req.flags = id->afonly ? ctl::kCmBindAfOnly : 0;
    req.addr = addr;
    ctl::CmBindResp resp{};
    if (int err = d->daemon->call(ctl::Op::kCmBind, &req, sizeof(req), &resp, sizeof(resp)))
      return err;
  }
  return 0;
}

// A wildcard-bound id resolving an address: the source's device is the id's from now on (its
// twin there takes over), the others are let go.
void settle(Id *id, Device *dev, uint8_t gid_index) {
  for (auto it = id->twins.begin(); it != id->twins.end(); ++it) {
    if (it->first != dev) continue;
    destroy_on(id->dev, id->handle);
    id->dev = dev;
    id->handle = it->second;
    id->twins.erase(it);
    break;
  }
  for (auto [d, h] : id->twins) destroy_on(d, h);
  id->twins.clear();
  id->gid_index = id->dev == dev ? gid_index : 0;
  id->id.verbs = id->dev->verbs;
  id->id.pd = id->dev->pd;
  id->id.port_num = 1;
}

int modify(ibv_qp *qp, ibv_qp_attr &a, int mask) {
  int err = ibv_modify_qp(qp, &a, mask);
  return err ? err : 0;
}

// QP attributes for `state` from what the connection agreed (rdma_init_qp_attr).
int qp_attr(Id *id, ibv_qp_attr *a, int *mask) {
  Device *d = id->dev;
  if (!d) return EINVAL;
  const ibv_qp_state state = a->qp_state;
  std::memset(a, 0, sizeof(*a));
  a->qp_state = state;
  switch (state) {
    case IBV_QPS_INIT:
      a->pkey_index = 0;
      a->port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (is_ud(id)) {
        a->qkey = RDMA_UDP_QKEY;
        *mask |= IBV_QP_QKEY;
      } else {
        a->qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      *mask = IBV_QP_STATE;
      if (is_ud(id)) return 0;
      a->path_mtu = ibv_mtu(std::min<uint8_t>(
          d->active_mtu, id->remote.path_mtu ? id->remote.path_mtu : d->active_mtu));
      a->dest_qp_num = id->remote.qp_num;
      a->rq_psn = id->psn;
      a->max_dest_rd_atomic = std::max<uint8_t>(id->responder_resources, 1);
      a->min_rnr_timer = 12;
      a->ah_attr.is_global = 1;
      a->ah_attr.port_num = 1;
      a->ah_attr.grh.sgid_index = id->gid_index;
      a->ah_attr.grh.hop_limit = 64;
      a->ah_attr.grh.traffic_class = id->tos;
      std::memcpy(a->ah_attr.grh.dgid.raw, id->id.route.addr.addr.ibaddr.dgid.raw, 16);
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      a->sq_psn = is_ud(id) ? 0 : id->remote.starting_psn;
      if (is_ud(id)) return 0;
      a->timeout = id->ack_timeout;
      a->retry_cnt = id->retry_count;
      a->rnr_retry = id->rnr_retry;
      a->max_rd_atomic = std::max<uint8_t>(id->initiator_depth, 1);
      *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

int move_qp(Id *id, ibv_qp_state state) {
  if (!id->id.qp) return 0;
  ibv_qp_attr a{};
  a.qp_state = state;
  int mask = 0;
  if (int err = qp_attr(id, &a, &mask)) return err;
  return modify(id->id.qp, a, mask);
}

// The id's QP to `states` in turn, as vrnicd makes them for us in the same call as a CM
// message (ctl::CmQpSteps); none when the id has no QP.
int qp_steps(Id *id, std::initializer_list<ibv_qp_state> states, ctl::CmQpSteps *out) {
  *out = {};
  if (!id->id.qp) return 0;
  out->qpn = id->id.qp->qp_num;
  for (ibv_qp_state state : states) {
    ibv_qp_attr a{};
    a.qp_state = state;
    int mask = IBV_QP_STATE;
    if (state != IBV_QPS_ERR)
      if (int err = qp_attr(id, &a, &mask)) return err;
    ctl::CmQpSteps::Step &step = out->steps[out->count++];
    step.attr_mask = uint32_t(mask);
    ctl::to_wire(a, step.attr);
  }
  return 0;
}

// vrnicd made them: the QP's state as ibv_modify_qp would have left it.
void stepped(Id *id, const ctl::CmQpSteps &steps) {
  if (steps.count) id->id.qp->state = ibv_qp_state(steps.steps[steps.count - 1].attr.qp_state);
}

// A REJ for the id's request: `reason` 0 is the consumer's own (rdma_reject).
int reject(rdma_cm_id *cmid, const void *private_data, uint8_t len, uint32_t reason) {
  if (!cmid || !of(cmid)->handle) return EINVAL;
  Id *id = of(cmid);
  ctl::CmRejectReq req{};
  req.id = id->handle;
  req.private_data_len = len;
  req.reason = reason;
  if (private_data && len) std::memcpy(req.private_data, private_data, len);
  return id->dev->daemon->call(ctl::Op::kCmReject, &req, sizeof(req), nullptr, 0);
}

// ECE on a QP rdma_cm made (as rdma-core's init_ece): the options it offers become ours; an
// id made for a CONNECT_REQUEST runs with those of the REQ's options it knows, and with none
// when the peer offered none or is of another vendor (rdma-core leaves such a QP as it was;
// here it gets go-back-N even where vrnicd's --selective-repeat is the default: rxe and
// hardware send no vrnic ECE).
int init_ece(Id *id, ibv_qp *qp) {
  ibv_ece ece{};
  if (int err = ibv_query_ece(qp, &ece); err && err != EOPNOTSUPP) return err;
  id->local_ece = {ece.vendor_id, ece.options, 0};
  if (!id->passive || !ece.vendor_id || is_ud(id)) return 0;
  const bool same = id->remote.ece_vendor_id == ece.vendor_id;
  ece.options = same ? id->remote.ece_options : 0;
  if (int err = ibv_set_ece(qp, &ece); err && err != EOPNOTSUPP) return err;
  id->local_ece.options = ece.options;
  return 0;
}

// A CONNECT_RESPONSE's ECE on the id's QP, before it goes to RTR (rdma-core's
// ucma_process_conn_resp_ece): the options the passive side chose, none when its REP named no
// vendor; a REP naming another vendor than ours breaks the handshake (EINVAL).
int take_rep_ece(Id *id) {
  ibv_ece ece{id->remote.ece_vendor_id, id->remote.ece_options, 0};
  if (!ece.vendor_id) {
    ece = {id->local_ece.vendor_id, 0, 0};
  } else if (ece.vendor_id != id->local_ece.vendor_id) {
    return EINVAL;
  }
  if (int err = ibv_set_ece(id->id.qp, &ece); err && err != EOPNOTSUPP) return err;
  id->local_ece.options = ece.vendor_id ? ece.options : 0;
  return 0;
}

// The RTU (ucma_process_conn_resp): with the QP's RTR and RTS when the id has one.
int establish(Id *id) {
  ctl::CmIdStepsReq req{};
  req.id = id->handle;
  if (int err = qp_steps(id, {IBV_QPS_RTR, IBV_QPS_RTS}, &req.qp)) return err;
  if (int err = id->dev->daemon->call(ctl::Op::kCmEstablish, &req, sizeof(req), nullptr, 0))
    return err;
  stepped(id, req.qp);
  return 0;
}

void fill_conn_param(Id *id, const rdma_conn_param *p, ctl::CmConnParams *out) {
  *out = {};
  Device *d = id->dev;
  auto clamp = [&](uint8_t v) { return v == RDMA_MAX_RESP_RES ? d->max_rd_atomic : v; };
  id->responder_resources = p ? clamp(p->responder_resources) : 0;
  id->initiator_depth = p ? clamp(p->initiator_depth) : 0;
  id->retry_count = p ? std::min<uint8_t>(p->retry_count, 7) : 7;
  id->rnr_retry = p ? std::min<uint8_t>(p->rnr_retry_count, 7) : 7;
  out->responder_resources = id->responder_resources;
  out->initiator_depth = id->initiator_depth;
  out->retry_count = id->retry_count;
  out->rnr_retry_count = id->rnr_retry;
  out->flow_control = p ? p->flow_control : 0;
  out->srq = id->id.srq || (p && p->srq);
  out->qp_num = id->id.qp ? id->id.qp->qp_num : (p ? p->qp_num : 0);
  out->starting_psn = id->psn;
  out->path_mtu = d->active_mtu;
  if (p && p->private_data && p->private_data_len) {
    out->private_data_len = p->private_data_len;
    std::memcpy(out->private_data, p->private_data, p->private_data_len);
  }
}

}  // namespace

Id *by_handle(rdma_event_channel *channel, uint32_t handle) {
  std::lock_guard lock(g_ids_mu);
  for (Id *id : g_ids)
    if (id->handle == handle && id->id.channel == channel) return id;
  return nullptr;
}

Id *live_id(uint64_t cookie) {
  std::lock_guard lock(g_ids_mu);
  auto *id = reinterpret_cast<Id *>(cookie);
  return g_ids.contains(id) ? id : nullptr;
}

uint32_t Channel::handle_on(Daemon *d) {
  std::lock_guard lock(mu);
  for (auto &[dd, h] : handles)
    if (dd == d) return h;
  ctl::CreateChannelReq req{};
  ctl::HandleResp resp{};
  if (int err =
          d->call(ctl::Op::kCmCreateChannel, &req, sizeof(req), &resp, sizeof(resp), write_fd)) {
    errno = err;
    return 0;
  }
  handles.push_back({d, resp.handle});
  return resp.handle;
}

uint32_t create_on(Device *dev, rdma_event_channel *channel, int ps, int qp_type, uint64_t cookie) {
  const uint32_t ch = of(channel)->handle_on(dev->daemon);
  if (!ch) {
    if (!errno) errno = ENODEV;
    return 0;
  }
  ctl::CmCreateIdReq req{};
  req.channel = ch;
  req.port_space = uint16_t(ps);
  req.qp_type = uint8_t(qp_type);
  req.cookie = cookie;
  ctl::HandleResp resp{};
  if (int err = dev->daemon->call(ctl::Op::kCmCreateId, &req, sizeof(req), &resp, sizeof(resp))) {
    errno = err;
    return 0;
  }
  return resp.handle;
}

int attach(Id *id, Device *dev, uint8_t gid_index) {
  if (id->dev) return id->dev == dev ? 0 : EINVAL;
  errno = 0;
  const uint32_t h =
      create_on(dev, id->id.channel, id->id.ps, id->id.qp_type, reinterpret_cast<uint64_t>(id));
  if (!h) return errno;
  id->dev = dev;
  id->handle = h;
  id->gid_index = gid_index;
  id->id.verbs = dev->verbs;
  id->id.pd = dev->pd;
  id->id.port_num = 1;
  return 0;
}

void raise(Id *id, uint32_t event, int status, const ctl::CmAddress *peer) {
  ctl::CmEventRecord rec{};
  rec.event = event;
  rec.status = status;
  if (peer) rec.peer = *peer;
  rec.id = id->handle;
  rec.cookie = reinterpret_cast<uint64_t>(id);
  // vrnicd writes to the same end with non-blocking sends; ours is the library's own event:
  // wait for room instead of losing it.
  const int fd = of(id->id.channel)->write_fd;
  while (::write(fd, &rec, sizeof(rec)) < 0) {
    if (errno != EAGAIN && errno != EINTR) return;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, -1);
  }
}

int complete(Id *id, std::initializer_list<uint32_t> want) {
  if (!id->sync) return 0;
  rdma_cm_event *e = nullptr;
  if (rdma_get_cm_event(id->id.channel, &e) != 0) return errno;
  int err = 0;
  const bool wanted = std::find(want.begin(), want.end(), uint32_t(e->event)) != want.end();
  if (!wanted || e->status) {
    err = e->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : e->status < 0 ? -e->status : EINVAL;
  }
  if (!err && e->event == RDMA_CM_EVENT_ESTABLISHED && is_ud(id)) {
    id->id.event = e;  // the UD parameters (rdma_connect on a sync id: the caller reads them)
    return 0;
  }
  rdma_ack_cm_event(e);
  return err;
}

}  // namespace vrnic::rdmacm

using namespace vrnic;
using namespace vrnic::rdmacm;

extern "C" {

RDMACM_EXPORT rdma_event_channel *rdma_create_event_channel(void) {
  Channel *c = new_channel();
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  return &c->ch;
}

RDMACM_EXPORT void rdma_destroy_event_channel(rdma_event_channel *channel) {
  if (channel) free_channel(of(channel));
}

RDMACM_EXPORT int rdma_create_id(rdma_event_channel *channel, rdma_cm_id **out, void *context,
                                 rdma_port_space ps) {
  if (!out) return fail(EINVAL);
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)
    return fail(EPROTONOSUPPORT);
  auto *id = new (std::nothrow) Id;
  if (!id) return fail(ENOMEM);
  id->sync = channel == nullptr;
  if (id->sync) {
    Channel *c = new_channel();
    if (!c) {
      delete id;
      return fail(ENOMEM);
    }
    channel = &c->ch;
  }
  id->id.channel = channel;
  id->id.context = context;
  id->id.ps = ps;
  id->id.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  // Chosen now: rdma_init_qp_attr may be asked for RTR before the REQ or REP carries it.
  id->psn = random_psn();
  {
    std::lock_guard lock(g_ids_mu);
    g_ids.insert(id);
  }
  *out = &id->id;
  return 0;
}

RDMACM_EXPORT int rdma_destroy_id(rdma_cm_id *cmid) {
  if (!cmid) return fail(EINVAL);
  Id *id = of(cmid);
  // As rdma-core's: vrnicd's side first (no event is made for it after), then wait until each
  // event reported for the id has been acknowledged, then free it.
  detach(id);
  if (id->id.event) rdma_ack_cm_event(id->id.event);
  {
    std::unique_lock lock(id->mu);
    id->all_acked.wait(lock, [&] { return id->unacked == 0; });
  }
  {
    std::lock_guard lock(g_ids_mu);
    g_ids.erase(id);
  }
  if (id->sync) free_channel(of(id->id.channel));
  delete[] reinterpret_cast<uint8_t *>(id->id.route.path_rec);
  delete id->ep_qp_attr;
  delete id;
  return 0;
}

RDMACM_EXPORT int rdma_bind_addr(rdma_cm_id *cmid, sockaddr *addr) {
  if (!cmid || !addr) return fail(EINVAL);
  Id *id = of(cmid);
  ctl::CmBindReq req{};
  if (!to_cm_address(addr, &req.addr)) return fail(EAFNOSUPPORT);
  req.flags = id->afonly ? ctl::kCmBindAfOnly : 0;
  uint8_t index = 0;
  bool any = ctl::cm_wildcard(req.addr.gid);
  Device *dev = any ? nullptr : device_of_gid(req.addr.gid, &index);
  if (!dev && ctl::cm_loopback(req.addr.gid)) {
    // The kernel's CM takes a loopback address no device has for the wildcard (cma_any_addr):
    // bound to no device, listening on all. libfabric's verbs provider binds "localhost" so.
    any = true;
    std::memset(req.addr.gid, 0, sizeof(req.addr.gid));
  }
  if (any) dev = devices().empty() ? nullptr : devices()[0];
  if (!dev) return fail(EADDRNOTAVAIL);
  if (any && id->handle) return fail(EINVAL);  // bound already
  ctl::CmBindResp resp{};
  // A wildcard is bound on every device; when vrnicd picks the port, another device may
  // have it taken already: then again, with the next one the first device gives.
  for (int attempt = 0;; attempt++) {
    if (int err = attach(id, dev, index)) return fail(err);
    req.id = id->handle;
    int err = dev->daemon->call(ctl::Op::kCmBind, &req, sizeof(req), &resp, sizeof(resp));
    if (!err && any) err = bind_twins(id, resp.addr);
    if (!err) break;
    if (!any) return fail(err);
    detach(id);
    // (EADDRNOTAVAIL: a wildcard of another device's vrnicd at that port.)
    if ((err != EADDRINUSE && err != EADDRNOTAVAIL) || req.addr.port || attempt == 16)
      return fail(err);
  }
  sockaddr_storage ss;
  to_sockaddr(resp.addr, addr->sa_family, &ss, cmid->ps);
  if (any) {  // the address stays the caller's (0.0.0.0, 127.0.0.1), with the port given
    std::memcpy(&ss, addr, sockaddr_length(addr));
    set_port(&ss, resp.addr.port);
  }
  std::memcpy(&cmid->route.addr.src_storage, &ss, sizeof(ss));
  std::memcpy(cmid->route.addr.addr.ibaddr.sgid.raw, resp.addr.gid, 16);
  cmid->route.addr.addr.ibaddr.pkey = htobe16(0xffff);
  if (any) {  // a wildcard bind names no device (as the kernel's)
    cmid->verbs = nullptr;
    cmid->pd = nullptr;
  }
  return 0;
}

RDMACM_EXPORT int rdma_resolve_addr(rdma_cm_id *cmid, sockaddr *src, sockaddr *dst,
                                    int /*timeout_ms*/) {
  if (!cmid || !dst) return fail(EINVAL);
  Id *id = of(cmid);
  ctl::CmAddress to{};
  if (!to_cm_address(dst, &to)) return fail(EAFNOSUPPORT);
  if (!id->handle || !cmid->verbs) {
    // The source: the caller's, else the one the kernel's routing table picks for dst.
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    if (src) {
      std::memcpy(&from, src, sockaddr_length(src));
    } else {
      // (an AF_IB destination: the IP address its GID is; the source then as AF_IB too)
      sockaddr_storage probe = ip_form(dst);
      const auto *p = reinterpret_cast<sockaddr *>(&probe);
      int s = ::socket(probe.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      set_port(&probe, 9);
      const bool ok = s >= 0 && ::connect(s, p, sockaddr_length(p)) == 0 &&
                      ::getsockname(s, reinterpret_cast<sockaddr *>(&from), &len) == 0;
      if (s >= 0) ::close(s);
      if (!ok) return fail(ENETUNREACH);
      set_port(&from, 0);
      ctl::CmAddress source;
      if (dst->sa_family == AF_IB && to_cm_address(reinterpret_cast<sockaddr *>(&from), &source))
        to_sockaddr(source, AF_IB, &from, cmid->ps);
    }
    if (!id->handle && rdma_bind_addr(cmid, reinterpret_cast<sockaddr *>(&from)) != 0) return -1;
    if (!cmid->verbs) {
      // Bound to a wildcard (or to a loopback source no device holds, which the kernel's CM
      // treats so): the device of the source address is the id's now, at the port bound. With
      // none, the first device and its GID 0, as the kernel binds a loopback source to a
      // device (cma_bind_loopback).
      ctl::CmAddress source{};
      uint8_t index = 0;
      Device *dev = to_cm_address(reinterpret_cast<sockaddr *>(&from), &source)
                        ? device_of_gid(source.gid, &index)
                        : nullptr;
      settle(id, dev ? dev : id->dev, index);
      ibv_gid gid{};
      if (!dev && ibv_query_gid(id->dev->verbs, 1, 0, &gid) == 0) {
        std::memcpy(source.gid, gid.raw, 16);
        to_sockaddr(source, dst->sa_family, &from, cmid->ps);
      }
      const uint16_t port = cmid->route.addr.src_sin.sin_port;
      std::memcpy(&cmid->route.addr.src_storage, &from, sizeof(from));
      cmid->route.addr.src_sin.sin_port = port;  // the same place in sockaddr_in6
      std::memcpy(cmid->route.addr.addr.ibaddr.sgid.raw, source.gid, 16);
    }
  }
  std::memcpy(&cmid->route.addr.dst_storage, dst, sockaddr_length(dst));
  std::memcpy(cmid->route.addr.addr.ibaddr.dgid.raw, to.gid, 16);
  raise(id, ctl::kCmAddrResolved, 0);
  if (int err = complete(id, {ctl::kCmAddrResolved})) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_resolve_route(rdma_cm_id *cmid, int /*timeout_ms*/) {
  if (!cmid || !cmid->verbs) return fail(EINVAL);
  Id *id = of(cmid);
  if (!cmid->route.path_rec) {
    auto *raw = new (std::nothrow) uint8_t[sizeof(ibv_sa_path_rec)]();
    if (!raw) return fail(ENOMEM);
    cmid->route.path_rec = reinterpret_cast<ibv_sa_path_rec *>(raw);
  }
  ibv_sa_path_rec &p = *cmid->route.path_rec;
  std::memcpy(p.sgid.raw, cmid->route.addr.addr.ibaddr.sgid.raw, 16);
  std::memcpy(p.dgid.raw, cmid->route.addr.addr.ibaddr.dgid.raw, 16);
  p.pkey = htobe16(0xffff);
  p.hop_limit = 64;
  p.traffic_class = id->tos;
  p.reversible = 1;
  p.numb_path = 1;
  p.mtu_selector = 2;  // exactly
  p.mtu = id->dev->active_mtu;
  p.rate_selector = 2;
  p.rate = 3;  // 10 Gb/s, a software port's nominal rate
  p.packet_life_time_selector = 2;
  p.packet_life_time = 16;
  cmid->route.num_paths = 1;
  raise(id, ctl::kCmRouteResolved, 0);
  if (int err = complete(id, {ctl::kCmRouteResolved})) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_listen(rdma_cm_id *cmid, int backlog) {
  if (!cmid) return fail(EINVAL);
  Id *id = of(cmid);
  if (!id->handle) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (rdma_bind_addr(cmid, reinterpret_cast<sockaddr *>(&any)) != 0) return -1;
  }
  ctl::CmListenReq req{id->handle, uint32_t(std::max(backlog, 0))};
  if (int err = id->dev->daemon->call(ctl::Op::kCmListen, &req, sizeof(req), nullptr, 0))
    return fail(err);
  for (auto [d, h] : id->twins) {
    req.id = h;
    if (int err = d->daemon->call(ctl::Op::kCmListen, &req, sizeof(req), nullptr, 0))
      return fail(err);
  }
  return 0;
}

RDMACM_EXPORT int rdma_connect(rdma_cm_id *cmid, rdma_conn_param *param) {
  if (!cmid) return fail(EINVAL);
  Id *id = of(cmid);
  if (!id->handle || !id->dev) return fail(EINVAL);
  if (param && param->private_data_len > (is_ud(id) ? 180 : 56)) return fail(EINVAL);
  ctl::CmConnectReq req{};
  req.id = id->handle;
  to_cm_address(&cmid->route.addr.dst_addr, &req.dst);
  to_cm_address(&cmid->route.addr.src_addr, &req.src);
  fill_conn_param(id, param, &req.p);
  req.p.ece_vendor_id = id->local_ece.vendor_id;
  req.p.ece_options = id->local_ece.options;
  if (int err = id->dev->daemon->call(ctl::Op::kCmConnect, &req, sizeof(req), nullptr, 0))
    return fail(err);
  if (int err = complete(id, {ctl::kCmEstablished})) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_accept(rdma_cm_id *cmid, rdma_conn_param *param) {
  if (!cmid) return fail(EINVAL);
  Id *id = of(cmid);
  if (!id->handle) return fail(EINVAL);
  if (param && param->private_data_len > (is_ud(id) ? 136 : 196)) return fail(EINVAL);
  ctl::CmAcceptReq req{};
  req.id = id->handle;
  fill_conn_param(id, param, &req.p);
  // The REQ's vendor ID echoed, with what we take of its options (rdma-core does the same).
  req.p.ece_vendor_id = id->remote.ece_vendor_id;
  req.p.ece_options = id->local_ece.options;
  if (!param) {  // the defaults rdma-core takes: what the peer asked for, within our limits
    id->responder_resources = std::min(id->remote.responder_resources, id->dev->max_rd_atomic);
    id->initiator_depth = std::min(id->remote.initiator_depth, id->dev->max_rd_atomic);
    req.p.responder_resources = id->responder_resources;
    req.p.initiator_depth = id->initiator_depth;
  }
  // Our QP retries as the REQ asked, whatever the accept's parameters say (the kernel's ib_cm
  // takes both counts from the REQ for the passive side; the REP's RNR retry count is for the
  // active side's QP). Many servers accept with retry_count 0, copying only what the
  // CONNECT_REQUEST's parameters hold: taken from them, every sequence NAK would fail the QP.
  id->retry_count = std::min<uint8_t>(id->remote.retry_count, 7);
  id->rnr_retry = std::min<uint8_t>(id->remote.rnr_retry_count, 7);
  if (is_ud(id)) {
    req.p.qkey = RDMA_UDP_QKEY;
  } else if (int err = qp_steps(id, {IBV_QPS_RTR, IBV_QPS_RTS}, &req.qp)) {
    return fail(err);
  }
  if (int err = id->dev->daemon->call(ctl::Op::kCmAccept, &req, sizeof(req), nullptr, 0))
    return fail(err);
  stepped(id, req.qp);
  if (!is_ud(id))
    if (int err = complete(id, {ctl::kCmEstablished})) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_reject(rdma_cm_id *cmid, const void *private_data, uint8_t len) {
  if (int err = reject(cmid, private_data, len, 0)) return fail(err);
  return 0;
}

// For an id without a QP only (the application moves its own); with one, the library did it
// all at CONNECT_RESPONSE. As rdma-core's: EINVAL when the id has a QP.
RDMACM_EXPORT int rdma_establish(rdma_cm_id *cmid) {
  if (!cmid || !of(cmid)->handle || cmid->qp) return fail(EINVAL);
  if (int err = establish(of(cmid))) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_notify(rdma_cm_id *cmid, ibv_event_type) {
  return cmid ? 0 : fail(EINVAL);  // vrnicd sees the QP's first packet itself
}

RDMACM_EXPORT int rdma_disconnect(rdma_cm_id *cmid) {
  if (!cmid || !of(cmid)->handle) return fail(EINVAL);
  Id *id = of(cmid);
  ctl::CmIdStepsReq req{};
  req.id = id->handle;
  qp_steps(id, {IBV_QPS_ERR}, &req.qp);  // the QP to ERR first, then the DREQ (or DREP)
  const int err = id->dev->daemon->call(ctl::Op::kCmDisconnect, &req, sizeof(req), nullptr, 0);
  // Any state may go to ERR, so vrnicd made it even when there was no connection to end.
  stepped(id, req.qp);
  if (err) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_init_qp_attr(rdma_cm_id *cmid, ibv_qp_attr *attr, int *mask) {
  if (!cmid || !attr || !mask) return fail(EINVAL);
  if (int err = qp_attr(of(cmid), attr, mask)) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_create_qp_ex(rdma_cm_id *cmid, ibv_qp_init_attr_ex *attr) {
  if (!cmid || !attr || !cmid->verbs) return fail(EINVAL);
  Id *id = of(cmid);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
    attr->pd = cmid->pd;
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (attr->pd->context != cmid->verbs) return fail(EINVAL);
  // The CQs the caller did not give, each with a completion channel (rdma-core does so).
  auto make_cq = [&](ibv_comp_channel **ch, ibv_cq **cq, uint32_t depth) -> bool {
    *ch = ibv_create_comp_channel(cmid->verbs);
    if (!*ch) return false;
    *cq = ibv_create_cq(cmid->verbs, int(std::max<uint32_t>(depth, 1)), cmid, *ch, 0);
    return *cq != nullptr;
  };
  if (!attr->send_cq && !make_cq(&cmid->send_cq_channel, &cmid->send_cq, attr->cap.max_send_wr))
    return -1;
  if (!attr->recv_cq && !make_cq(&cmid->recv_cq_channel, &cmid->recv_cq, attr->cap.max_recv_wr))
    return -1;
  if (!attr->send_cq) attr->send_cq = cmid->send_cq;
  if (!attr->recv_cq) attr->recv_cq = cmid->recv_cq;
  if (!attr->srq && cmid->srq) attr->srq = cmid->srq;
  ibv_qp *qp = ibv_create_qp_ex(cmid->verbs, attr);
  if (!qp) return -1;
  cmid->qp = qp;
  cmid->qp_type = attr->qp_type;
  int err = init_ece(id, qp);
  if (!err) err = move_qp(id, IBV_QPS_INIT);
  if (!err && is_ud(id)) {
    err = move_qp(id, IBV_QPS_RTR);
    if (!err) err = move_qp(id, IBV_QPS_RTS);
  }
  if (err) {
    ibv_destroy_qp(qp);
    cmid->qp = nullptr;
    return fail(err);
  }
  return 0;
}

RDMACM_EXPORT int rdma_create_qp(rdma_cm_id *cmid, ibv_pd *pd, ibv_qp_init_attr *attr) {
  if (!cmid || !attr) return fail(EINVAL);
  ibv_qp_init_attr_ex ex{};
  std::memcpy(&ex, attr, sizeof(*attr));
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd ? pd : cmid->pd;
  if (rdma_create_qp_ex(cmid, &ex) != 0) return -1;
  std::memcpy(attr, &ex, sizeof(*attr));
  return 0;
}

RDMACM_EXPORT void rdma_destroy_qp(rdma_cm_id *cmid) {
  if (!cmid || !cmid->qp) return;
  ibv_destroy_qp(cmid->qp);
  cmid->qp = nullptr;
  for (auto [cq, ch] : {std::pair{&cmid->send_cq, &cmid->send_cq_channel},
                        std::pair{&cmid->recv_cq, &cmid->recv_cq_channel}}) {
    if (*cq) ibv_destroy_cq(*cq);
    if (*ch) ibv_destroy_comp_channel(*ch);
    *cq = nullptr;
    *ch = nullptr;
  }
}

RDMACM_EXPORT int rdma_migrate_id(rdma_cm_id *cmid, rdma_event_channel *channel) {
  if (!cmid) return fail(EINVAL);
  Id *id = of(cmid);
  const bool sync = channel == nullptr;
  Channel *fresh = sync ? new_channel() : nullptr;
  if (sync && !fresh) return fail(ENOMEM);
  rdma_event_channel *to = sync ? &fresh->ch : channel;
  if (id->handle) {
    std::vector<std::pair<Device *, uint32_t>> all{{id->dev, id->handle}};
    all.insert(all.end(), id->twins.begin(), id->twins.end());
    for (auto [d, handle] : all) {
      const uint32_t h = of(to)->handle_on(d->daemon);
      ctl::CmMigrateReq req{handle, h, reinterpret_cast<uint64_t>(id)};
      if (!h || d->daemon->call(ctl::Op::kCmMigrate, &req, sizeof(req), nullptr, 0)) {
        if (fresh) free_channel(fresh);
        return fail(EINVAL);
      }
    }
  }
  if (id->sync) free_channel(of(cmid->channel));
  cmid->channel = to;
  id->sync = sync;
  return 0;
}

RDMACM_EXPORT int rdma_set_option(rdma_cm_id *cmid, int level, int optname, void *optval,
                                  size_t optlen) {
  if (!cmid || !optval) return fail(EINVAL);
  Id *id = of(cmid);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->tos = *static_cast<uint8_t *>(optval);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return fail(EINVAL);
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        // Its wildcard of its own family only: taken at bind (the kernel's cma_check_port).
        if (optlen != sizeof(int)) return fail(EINVAL);
        id->afonly = *static_cast<int *>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->ack_timeout = std::min<uint8_t>(*static_cast<uint8_t *>(optval), 31);
        id->ack_timeout_set = true;
        return 0;
    }
  }
  return fail(ENOSYS);  // as the kernel answers an option it does not have
}

RDMACM_EXPORT int rdma_get_cm_event(rdma_event_channel *channel, rdma_cm_event **out) {
  if (!channel || !out) return fail(EINVAL);
  for (;;) {
    ctl::CmEventRecord rec;
    Channel *c = of(channel);
    c->readers++;
    ssize_t n = ::read(channel->fd, &rec, sizeof(rec));
    c->readers--;
    if (n < 0) return -1;  // EAGAIN on a non-blocking channel
    if (n != sizeof(rec)) return fail(EIO);
    Id *id = live_id(rec.cookie);
    // An id vrnicd made for a CONNECT_REQUEST has no cookie until the library names it.
    if (!id && rec.cookie == 0) id = by_handle(channel, rec.id);
    if (!id) continue;  // for an id destroyed meanwhile
    auto *e = new (std::nothrow) Event{};
    if (!e) return fail(ENOMEM);
    e->rec = rec;
    e->event.event = rdma_cm_event_type(rec.event);
    e->event.status = rec.status;
    e->event.id = &id->id;
    std::memcpy(e->private_data, rec.p.private_data, sizeof(e->private_data));
    const uint8_t pd_len = uint8_t(std::min<uint32_t>(rec.p.private_data_len, 255));
    if (rec.event == ctl::kCmConnectRequest) {
      // A new id for the request, on the listener's channel and device.
      Id *listener = id;
      rdma_cm_id *fresh = nullptr;
      if (rdma_create_id(listener->sync ? nullptr : listener->id.channel, &fresh,
                         listener->id.context, listener->id.ps) != 0) {
        delete e;
        return -1;
      }
      Id *nid = of(fresh);
      if (listener->sync) {  // rdma_get_request migrates it to a channel of its own
        free_channel(of(fresh->channel));
        fresh->channel = listener->id.channel;
        nid->sync = false;
      }
      // The device whose vrnicd made the request's id: the one holding its local address
      // (a wildcard listener listens on each device).
      uint8_t index = listener->gid_index;
      Device *dev = device_of_gid(rec.local.gid, &index);
      nid->dev = dev ? dev : listener->dev;
      nid->handle = rec.id;
      {
        const uint32_t ch = of(fresh->channel)->handle_on(nid->dev->daemon);
        ctl::CmMigrateReq name{rec.id, ch, reinterpret_cast<uint64_t>(nid)};
        nid->dev->daemon->call(ctl::Op::kCmMigrate, &name, sizeof(name), nullptr, 0);
      }
      nid->gid_index = index;
      fresh->verbs = nid->dev->verbs;
      fresh->pd = nid->dev->pd;
      fresh->port_num = 1;
      fresh->qp_type = listener->id.qp_type;
      nid->remote = rec.p;
      nid->passive = true;
      // In the listener's family when that is AF_IB; else IPv4 or IPv6 as the GIDs are.
      const int family = listener->id.route.addr.src_addr.sa_family == AF_IB ? AF_IB : 0;
      sockaddr_storage ss;
      to_sockaddr(rec.local, family, &ss, listener->id.ps);
      std::memcpy(&fresh->route.addr.src_storage, &ss, sizeof(ss));
      to_sockaddr(rec.peer, family, &ss, listener->id.ps);
      std::memcpy(&fresh->route.addr.dst_storage, &ss, sizeof(ss));
      std::memcpy(fresh->route.addr.addr.ibaddr.sgid.raw, rec.local.gid, 16);
      std::memcpy(fresh->route.addr.addr.ibaddr.dgid.raw, rec.peer.gid, 16);
      e->event.id = fresh;
      e->event.listen_id = &listener->id;
    }
    if (rec.event == ctl::kCmConnectResponse) {
      id->remote = rec.p;
      id->rnr_retry = std::min<uint8_t>(rec.p.rnr_retry_count, 7);  // the REP's, as ib_cm's
      if (id->id.qp) {
        // As rdma-core: ECE, the QP to RTR and RTS, the RTU, then ESTABLISHED for the
        // application.
        int err = take_rep_ece(id);
        if (!err) err = establish(id);
        if (err) {
          rdma_reject(&id->id, nullptr, 0);
          e->event.event = RDMA_CM_EVENT_CONNECT_ERROR;
          e->event.status = -err;
        } else {
          e->event.event = RDMA_CM_EVENT_ESTABLISHED;
        }
      }
    }
    if (rec.event == RDMA_CM_EVENT_MULTICAST_JOIN) {
      fill_multicast_join(id, rec, &e->event);
    } else if (is_ud(id) &&
               (rec.event == ctl::kCmEstablished || rec.event == ctl::kCmConnectRequest)) {
      rdma_ud_param &ud = e->event.param.ud;
      ud.private_data = e->private_data;
      ud.private_data_len = pd_len;
      ud.qp_num = rec.p.qp_num;
      ud.qkey = rec.p.qkey ? rec.p.qkey : RDMA_UDP_QKEY;
      ud.ah_attr.is_global = 1;
      ud.ah_attr.port_num = 1;
      ud.ah_attr.grh.hop_limit = 64;
      ud.ah_attr.grh.sgid_index = id->gid_index;
      std::memcpy(ud.ah_attr.grh.dgid.raw, rec.peer.gid, 16);
    } else {
      rdma_conn_param &c = e->event.param.conn;
      c.private_data = pd_len ? e->private_data : nullptr;
      c.private_data_len = pd_len;
      c.responder_resources = rec.p.responder_resources;
      c.initiator_depth = rec.p.initiator_depth;
      c.flow_control = rec.p.flow_control;
      c.retry_count = rec.p.retry_count;
      c.rnr_retry_count = rec.p.rnr_retry_count;
      c.srq = rec.p.srq;
      c.qp_num = rec.p.qp_num;
    }
    // Counted where rdma-core counts it: a CONNECT_REQUEST on the listener, which reported it.
    Id *counted = rec.event == ctl::kCmConnectRequest ? id : of(e->event.id);
    e->counted_on = reinterpret_cast<uint64_t>(counted);
    {
      std::lock_guard lock(counted->mu);
      counted->unacked++;
    }
    *out = &e->event;
    return 0;
  }
}

RDMACM_EXPORT int rdma_ack_cm_event(rdma_cm_event *event) {
  if (!event) return fail(EINVAL);
  auto *e = reinterpret_cast<Event *>(event);
  if (Id *id = live_id(e->counted_on)) {
    std::lock_guard lock(id->mu);
    if (--id->unacked == 0) id->all_acked.notify_all();
  }
  delete e;
  return 0;
}

RDMACM_EXPORT int rdma_get_request(rdma_cm_id *listen, rdma_cm_id **out) {
  if (!listen || !out) return fail(EINVAL);
  rdma_cm_event *e = nullptr;
  for (;;) {
    if (rdma_get_cm_event(listen->channel, &e) != 0) return -1;
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) break;
    rdma_ack_cm_event(e);
  }
  rdma_cm_id *id = e->id;
  // Its own channel from now on, so that its calls wait for its own events.
  if (rdma_migrate_id(id, nullptr) != 0) {
    rdma_ack_cm_event(e);
    return -1;
  }
  if (Id *l = of(listen); l->ep_qp_attr) {
    ibv_qp_init_attr attr = *l->ep_qp_attr;
    if (rdma_create_qp(id, listen->pd, &attr) != 0) {
      rdma_ack_cm_event(e);
      return -1;
    }
  }
  id->event = e;
  *out = id;
  return 0;
}

RDMACM_EXPORT int rdma_create_ep(rdma_cm_id **out, rdma_addrinfo *res, ibv_pd *pd,
                                 ibv_qp_init_attr *qp_init_attr) {
  if (!out || !res) return fail(EINVAL);
  rdma_cm_id *cmid = nullptr;
  if (rdma_create_id(nullptr, &cmid, nullptr, rdma_port_space(res->ai_port_space)) != 0) return -1;
  cmid->qp_type = ibv_qp_type(res->ai_qp_type);
  int rc = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cmid, res->ai_src_addr);
    if (!rc && qp_init_attr) {
      of(cmid)->ep_qp_attr = new ibv_qp_init_attr(*qp_init_attr);
      of(cmid)->ep_qp_attr->qp_type = ibv_qp_type(res->ai_qp_type);
    }
  } else {
    rc = rdma_resolve_addr(cmid, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (!rc) rc = rdma_resolve_route(cmid, 2000);
    if (!rc && qp_init_attr) {
      qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);  // as rdma-core: the address's type
      rc = rdma_create_qp(cmid, pd, qp_init_attr);
    }
  }
  if (rc) {
    int err = errno;
    rdma_destroy_id(cmid);
    return fail(err);
  }
  *out = cmid;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_ep(rdma_cm_id *cmid) {
  if (!cmid) return;
  rdma_destroy_qp(cmid);
  if (cmid->srq) ibv_destroy_srq(cmid->srq);
  rdma_destroy_id(cmid);
}

RDMACM_EXPORT int rdma_create_srq_ex(rdma_cm_id *cmid, ibv_srq_init_attr_ex *attr) {
  if (!cmid || !attr || !cmid->verbs) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
    attr->pd = cmid->pd;
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  ibv_srq *srq = ibv_create_srq_ex(cmid->verbs, attr);
  if (!srq) return -1;
  cmid->srq = srq;
  return 0;
}

RDMACM_EXPORT int rdma_create_srq(rdma_cm_id *cmid, ibv_pd *pd, ibv_srq_init_attr *attr) {
  if (!cmid || !attr) return fail(EINVAL);
  ibv_srq *srq = ibv_create_srq(pd ? pd : cmid->pd, attr);
  if (!srq) return -1;
  cmid->srq = srq;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_srq(rdma_cm_id *cmid) {
  if (!cmid || !cmid->srq) return;
  ibv_destroy_srq(cmid->srq);
  cmid->srq = nullptr;
}

RDMACM_EXPORT __be16 rdma_get_src_port(rdma_cm_id *cmid) {
  return htons(port_of(&cmid->route.addr.src_addr));
}

RDMACM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id *cmid) {
  return htons(port_of(&cmid->route.addr.dst_addr));
}

RDMACM_EXPORT const char *rdma_event_str(rdma_cm_event_type event) {
  static const char *const kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  return unsigned(event) < std::size(kNames) ? kNames[event] : "UNKNOWN EVENT";
}

// ECE for an application that makes its own QP (rdma-core's contract: only while the id has
// none): what its REQ or REP offers, and what the peer's said.
RDMACM_EXPORT int rdma_set_local_ece(rdma_cm_id *cmid, ibv_ece *ece) {
  if (!cmid || cmid->qp || !ece || !ece->vendor_id || ece->comp_mask) return fail(EINVAL);
  of(cmid)->local_ece = {ece->vendor_id, ece->options, 0};
  return 0;
}
RDMACM_EXPORT int rdma_get_remote_ece(rdma_cm_id *cmid, ibv_ece *ece) {
  if (!cmid || cmid->qp || !ece) return fail(EINVAL);
  *ece = {of(cmid)->remote.ece_vendor_id, of(cmid)->remote.ece_options, 0};
  return 0;
}
// A REJ saying the REQ's ECE options are not supported (IBTA's reason 35).
RDMACM_EXPORT int rdma_reject_ece(rdma_cm_id *cmid, const void *private_data, uint8_t len) {
  if (int err = reject(cmid, private_data, len, cm::kRejVendorOptionNotSupported))
    return fail(err);
  return 0;
}

}  // extern "C"
