// Datagram rsockets (rsocket(AF_INET or AF_INET6, SOCK_DGRAM, 0)): a UD QP each, reached by
// the address and port the socket is bound to in the rdma_cm UDP port space (RDMA_PS_UDP).
//
// A socket's id is bound there and listens: a sender that does not know it asks rdma_cm to
// resolve the address and connect, which is IB's service ID resolution (a SIDR REQ to that
// port), and the answer (the SIDR REP) carries the socket's QPN and Q_Key. The listening ids
// of all a process's sockets share one event channel, which a thread of the library's serves
// (as rdma-core's rsockets have a thread for datagram sockets' addressing): each request is
// accepted with its socket's QP at once, whatever the program is doing (a sender's datagram
// must not wait for the receiver's next call, nor fail when it is busy). Every datagram starts with a DgramHeader saying
// the sender's port, so that the receiver knows its address (the GRH's source GID, the
// header's port) and, from the completion's source QPN, how to answer without asking: a
// reply needs no resolution. Both ends are vrnic's: rdma-core's datagram rsockets reach a
// peer first through a kernel UDP socket instead (mixing them is not supported).
//
// Datagram semantics as UDP's: at most one path MTU less the header per datagram
// (EMSGSIZE), none past the receiver's SO_RCVBUF of datagrams unread (dropped, as UDP's are:
// rsocket_dgram_socket.h), a receive buffer smaller than the datagram keeps its first bytes
// (MSG_TRUNC). The first datagram to an address this socket has not heard from waits for the
// resolution, even when non-blocking; a port nobody has bound is ECONNREFUSED (rconnect sends
// nothing: the first send to the peer says so).
#include "rsocket_dgram.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <compare>
#include <thread>

#include "rsocket_dgram_socket.h"

namespace vrnic::rdmacm::dgram {
namespace {

std::mutex g_mu;
std::map<int, Ds *> g_sockets;  // by descriptor; a socket with a QP answers requests
std::set<Ds *> g_answering;     // (under g_mu) sockets whose QP answers requests

// The thread that answers every socket's SIDR requests: the one channel of their listening
// ids. A request to a socket gone (or on another device than its QP's) is refused.
void serve_requests(rdma_event_channel *channel) {
  for (;;) {
    rdma_cm_event *e;
    if (rdma_get_cm_event(channel, &e) != 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(e);
      continue;
    }
    rdma_cm_id *req = e->id;
    auto *ds = static_cast<Ds *>(e->listen_id->context);
    rdma_ack_cm_event(e);
    {
      std::lock_guard lock(g_mu);
      if (g_answering.count(ds) && req->verbs == ds->dev->verbs) {
        rdma_conn_param p{};
        p.qp_num = ds->qpn;
        rdma_accept(req, &p);
      } else {
        rdma_reject(req, nullptr, 0);
      }
    }
    rdma_destroy_id(req);
  }
}

rdma_event_channel *listen_channel() {
  static rdma_event_channel *channel = [] {
    rdma_event_channel *ch = rdma_create_event_channel();
    if (ch) std::thread(serve_requests, ch).detach();
    return ch;
  }();
  return channel;
}

socklen_t length_of(const sockaddr *sa) {
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}


// The address a datagram came from, in the socket's family: a GID and a port.
sockaddr_storage address_of(int domain, const ibv_gid &gid, uint16_t port_be) {
  sockaddr_storage s{};
  static const uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (domain == AF_INET && std::memcmp(gid.raw, kV4Mapped, 12) == 0) {
    auto *in = reinterpret_cast<sockaddr_in *>(&s);
    in->sin_family = AF_INET;
    in->sin_port = port_be;
    std::memcpy(&in->sin_addr, gid.raw + 12, 4);
  } else {
    auto *in6 = reinterpret_cast<sockaddr_in6 *>(&s);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = port_be;
    std::memcpy(in6->sin6_addr.s6_addr, gid.raw, 16);
  }
  return s;
}

uint16_t port_of(const sockaddr *sa) {
  return sa->sa_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port
                                   : reinterpret_cast<const sockaddr_in *>(sa)->sin_port;
}

bool post_recv(Ds *ds, int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(ds->recv_slot(slot)), kSlotBytes, ds->mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = uint64_t(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(ds->qp, &wr, &bad) == 0;
}

// The UD QP, its CQ and buffers, on the device the socket is bound to (a wildcard: the
// first); its receives posted. 0 or an errno.
int make_queues(Ds *ds) {
  ibv_context *verbs = ds->id->verbs ? ds->id->verbs : devices().empty() ? nullptr
                                                                         : devices()[0]->verbs;
  for (Device *d : devices())
    if (d->verbs == verbs) ds->dev = d;
  if (!ds->dev) return ENODEV;
  ibv_port_attr port{};
  if (ibv_query_port(verbs, 1, &port)) return EIO;
  ds->max_payload = std::min<uint32_t>(128u << port.active_mtu, 4096) - sizeof(DgramHeader);
  ds->cc = ibv_create_comp_channel(verbs);
  if (!ds->cc) return errno;
  fcntl(ds->cc->fd, F_SETFL, fcntl(ds->cc->fd, F_GETFL) | O_NONBLOCK);
  ds->recv_slots = recv_slots_for(ds->rcvbuf);
  ds->cq = ibv_create_cq(verbs, ds->recv_slots + kSendSlots, nullptr, ds->cc, 0);
  if (!ds->cq) return errno;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = ds->cq;
  attr.qp_type = IBV_QPT_UD;
  attr.cap.max_send_wr = kSendSlots;
  attr.cap.max_recv_wr = uint32_t(ds->recv_slots);
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ds->qp = ibv_create_qp(ds->dev->pd, &attr);
  if (!ds->qp) return errno;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = RDMA_UDP_QKEY;
  if (ibv_modify_qp(ds->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return errno;
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(ds->qp, &a, IBV_QP_STATE)) return errno;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(ds->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return errno;
  const size_t bytes = size_t(ds->recv_slots + kSendSlots) * kSlotBytes;
  ds->buf = static_cast<uint8_t *>(std::aligned_alloc(4096, (bytes + 4095) & ~size_t(4095)));
  if (!ds->buf) return ENOMEM;
  ds->mr = ibv_reg_mr(ds->dev->pd, ds->buf, bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!ds->mr) return errno;
  for (int i = 0; i < ds->recv_slots; i++)
    if (!post_recv(ds, i)) return EIO;
  for (int i = 0; i < kSendSlots; i++) ds->free_send.push_back(i);
  std::lock_guard lock(g_mu);
  ds->qpn = ds->qp->qp_num;
  g_answering.insert(ds);
  return 0;
}


void take_receive(Ds *ds, ibv_wc &wc) {
  const int slot = int(wc.wr_id);
  uint8_t *p = ds->recv_slot(slot);
  DgramHeader h;
  ibv_ah_attr attr{};
  if (wc.status != IBV_WC_SUCCESS || wc.byte_len < kGrhBytes + sizeof(h) ||
      ibv_init_ah_from_wc(ds->qp->context, 1, &wc, reinterpret_cast<ibv_grh *>(p), &attr)) {
    post_recv(ds, slot);
    return;
  }
  std::memcpy(&h, p + kGrhBytes, sizeof(h));
  if (h.version != kVersion) {  // not one of ours: dropped
    post_recv(ds, slot);
    return;
  }
  const sockaddr_storage from = address_of(ds->domain, attr.grh.dgid, h.port);
  update_dest(ds, reinterpret_cast<const sockaddr *>(&from), wc, attr);
  // A connected socket takes datagrams from its peer alone, as a connected UDP socket does.
  if (ds->connected &&
      key_of(reinterpret_cast<const sockaddr *>(&from)) !=
          key_of(reinterpret_cast<const sockaddr *>(&ds->peer))) {
    post_recv(ds, slot);
    return;
  }
  // The receive buffer full (past SO_RCVBUF, as the kernel checks it): dropped.
  if (ds->received_charge >= size_t(ds->rcvbuf)) {
    ds->rcvbuf_drops++;
    post_recv(ds, slot);
    return;
  }
  const uint32_t len = uint32_t(wc.byte_len - kGrhBytes - sizeof(h));
  ds->received_charge += charge_of(len);
  ds->received.push_back({slot, len, from});
}

// The completions that came, taken.
void progress(Ds *ds) {
  if (!ds->cq) return;
  ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(ds->cq, 16, wc)) > 0) {
    for (int i = 0; i < n; i++) {
      if (wc[i].opcode & IBV_WC_RECV)
        take_receive(ds, wc[i]);
      else
        ds->free_send.push_back(int(wc[i].wr_id));  // sent, or lost: a datagram either way
    }
  }
}

// Waits (up to ms) on the socket's event channel and completion channel.
void wait_on(Ds *ds, int ms) {
  std::vector<pollfd> p;
  wait_fds(ds, p);
  if (readiness(ds, POLLIN | POLLOUT) == 0) poll(p.data(), p.size(), ms);
  take_wakeups(ds, p.data());
}

int bind_to(Ds *ds, const sockaddr *addr) {
  if (ds->bound) return EINVAL;
  if (addr->sa_family != ds->domain) return EAFNOSUPPORT;
  if (rdma_bind_addr(ds->id, const_cast<sockaddr *>(addr)) != 0) return errno;
  if (rdma_listen(ds->id, 0) != 0) return errno;
  ds->bound = true;
  return make_queues(ds);
}

// Bound, as UDP binds a socket that sends first: the wildcard, a port of the library's choice.
int ensure_bound(Ds *ds) {
  if (ds->bound) return ds->qp ? 0 : EIO;
  sockaddr_storage any{};
  any.ss_family = sa_family_t(ds->domain);
  return bind_to(ds, reinterpret_cast<sockaddr *>(&any));
}


int fail(int err) {
  errno = err;
  return -1;
}

}  // namespace

Ds *find(int fd) {
  std::lock_guard lock(g_mu);
  auto it = g_sockets.find(fd);
  return it == g_sockets.end() ? nullptr : it->second;
}

int create(int domain, bool nonblocking) {
  auto *ds = new Ds;
  ds->domain = domain;
  ds->nonblocking = nonblocking;
  ds->channel = rdma_create_event_channel();
  if (!ds->channel || !listen_channel() ||
      rdma_create_id(listen_channel(), &ds->id, ds, RDMA_PS_UDP) != 0) {
    const int err = errno;
    if (ds->channel) rdma_destroy_event_channel(ds->channel);
    delete ds;
    return fail(err);
  }
  fcntl(ds->fd(), F_SETFL, fcntl(ds->fd(), F_GETFL) | O_NONBLOCK);
  std::lock_guard lock(g_mu);
  g_sockets[ds->fd()] = ds;
  return ds->fd();
}

int close(Ds *ds) {
  {
    std::lock_guard lock(g_mu);
    g_sockets.erase(ds->fd());
    g_answering.erase(ds);
  }
  // What was posted leaves first (its completions), for a second at most.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (ds->qp && ds->free_send.size() < size_t(kSendSlots) &&
         std::chrono::steady_clock::now() < end)
    wait_on(ds, 10), progress(ds);
  for (auto &[key, d] : ds->dests)
    if (d.ah) ibv_destroy_ah(d.ah);
  if (ds->qp) ibv_destroy_qp(ds->qp);
  if (ds->mr) ibv_dereg_mr(ds->mr);
  std::free(ds->buf);
  if (ds->cq) ibv_destroy_cq(ds->cq);
  if (ds->cc) ibv_destroy_comp_channel(ds->cc);
  rdma_destroy_id(ds->id);
  rdma_destroy_event_channel(ds->channel);
  delete ds;
  return 0;
}

int bind(Ds *ds, const sockaddr *addr) {
  if (!addr) return fail(EFAULT);
  if (int err = bind_to(ds, addr)) return fail(err);
  return 0;
}

int connect(Ds *ds, const sockaddr *addr) {
  if (!addr) return fail(EFAULT);
  if (addr->sa_family == AF_UNSPEC) {
    ds->connected = false;
    return 0;
  }
  if (addr->sa_family != ds->domain) return fail(EAFNOSUPPORT);
  // As UDP's: nothing is sent, a port nobody has is found at the first send. (glibc's
  // getaddrinfo connects a datagram socket to each address it sorts, under librspreload too.)
  if (int err = ensure_bound(ds)) return fail(err);
  std::memcpy(&ds->peer, addr, length_of(addr));
  ds->connected = true;
  return 0;
}

int shutdown(Ds *ds) {
  return ds->connected ? 0 : fail(ENOTCONN);
}

ssize_t send(Ds *ds, const iovec *iov, int iovcnt, int flags, const sockaddr *to) {
  if (!to) {
    if (!ds->connected) return fail(EDESTADDRREQ);
    to = reinterpret_cast<const sockaddr *>(&ds->peer);
  } else if (to->sa_family != ds->domain) {
    return fail(EAFNOSUPPORT);
  }
  if (int err = ensure_bound(ds)) return fail(err);
  size_t len = 0;
  for (int i = 0; i < iovcnt; i++) len += iov[i].iov_len;
  if (len > ds->max_payload) return fail(EMSGSIZE);
  const bool nb = ds->nonblocking || (flags & MSG_DONTWAIT);
  for (;;) {
    progress(ds);
    if (!ds->free_send.empty()) break;
    if (nb) return fail(EAGAIN);
    wait_on(ds, 100);
  }
  // Looked up once nothing else runs before the post: taking a datagram (progress) may make
  // the table forget an entry.
  int err = 0;
  Dest *d = dest_for(ds, to, &err);
  if (!d) return fail(err);
  const int slot = ds->free_send.back();
  ds->free_send.pop_back();
  uint8_t *p = ds->send_slot(slot);
  const DgramHeader h{kVersion, 0, port_of(rdma_get_local_addr(ds->id))};
  std::memcpy(p, &h, sizeof(h));
  size_t at = sizeof(h);
  for (int i = 0; i < iovcnt; i++) {
    std::memcpy(p + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), uint32_t(at), ds->mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = uint64_t(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = d->ah;
  wr.wr.ud.remote_qpn = d->qpn;
  wr.wr.ud.remote_qkey = d->qkey;
  if (ibv_post_send(ds->qp, &wr, &bad) != 0) {
    ds->free_send.push_back(slot);
    return fail(EIO);
  }
  return ssize_t(len);
}

ssize_t recv(Ds *ds, const iovec *iov, int iovcnt, int flags, sockaddr *from, socklen_t *fromlen,
             int *msg_flags) {
  if (int err = ensure_bound(ds)) return fail(err);
  const bool nb = ds->nonblocking || (flags & MSG_DONTWAIT);
  for (;;) {
    progress(ds);
    if (!ds->received.empty()) break;
    if (nb) return fail(EAGAIN);
    wait_on(ds, 100);
  }
  const Ds::Received r = ds->received.front();
  const uint8_t *data = ds->recv_slot(r.slot) + kGrhBytes + sizeof(DgramHeader);
  size_t at = 0;
  for (int i = 0; i < iovcnt && at < r.len; i++) {
    const size_t n = std::min(iov[i].iov_len, size_t(r.len) - at);
    std::memcpy(iov[i].iov_base, data + at, n);
    at += n;
  }
  if (msg_flags) *msg_flags = at < r.len ? MSG_TRUNC : 0;
  if (from && fromlen) {
    const auto *sa = reinterpret_cast<const sockaddr *>(&r.from);
    std::memcpy(from, sa, std::min(*fromlen, length_of(sa)));
    *fromlen = length_of(sa);
  }
  if (!(flags & MSG_PEEK)) {
    ds->received_charge -= charge_of(r.len);
    ds->received.pop_front();
    post_recv(ds, r.slot);
  }
  return ssize_t((flags & MSG_TRUNC) ? r.len : at);
}

int getsockname(Ds *ds, sockaddr *addr, socklen_t *len) {
  if (!len || (!addr && *len)) return fail(EFAULT);
  sockaddr_storage any{};
  any.ss_family = sa_family_t(ds->domain);
  const sockaddr *sa =
      ds->bound ? rdma_get_local_addr(ds->id) : reinterpret_cast<const sockaddr *>(&any);
  if (addr) std::memcpy(addr, sa, std::min(*len, length_of(sa)));
  *len = length_of(sa);
  return 0;
}

int getpeername(Ds *ds, sockaddr *addr, socklen_t *len) {
  if (!ds->connected) return fail(ENOTCONN);
  if (!len || (!addr && *len)) return fail(EFAULT);
  const auto *sa = reinterpret_cast<const sockaddr *>(&ds->peer);
  if (addr) std::memcpy(addr, sa, std::min(*len, length_of(sa)));
  *len = length_of(sa);
  return 0;
}

// SO_SNDBUF is kept; SO_RCVBUF bounds what is kept unread (doubled and bounded as the kernel
// does; set before the socket is bound, it also sizes the receives posted); SO_REUSEADDR and
// IPV6_V6ONLY go to the id; anything else ENOPROTOOPT.
int setsockopt(Ds *ds, int level, int optname, const void *optval, socklen_t optlen) {
  if (!optval || optlen < sizeof(int)) return fail(EINVAL);
  int v = *static_cast<const int *>(optval);
  if (level == SOL_SOCKET && optname == SO_SNDBUF) {
    ds->sndbuf = v;
  } else if (level == SOL_SOCKET && optname == SO_RCVBUF) {
    ds->rcvbuf = rcvbuf_for(v);
  } else if (level == SOL_SOCKET && optname == SO_REUSEADDR) {
    return rdma_set_option(ds->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof(v));
  } else if (level == IPPROTO_IPV6 && optname == IPV6_V6ONLY) {
    return rdma_set_option(ds->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof(v));
  } else if (level != SOL_RDMA) {
    return fail(ENOPROTOOPT);
  }
  return 0;
}

int getsockopt(Ds *ds, int level, int optname, void *optval, socklen_t *optlen) {
  if (!optval || !optlen || *optlen < sizeof(int)) return fail(EINVAL);
  if (level != SOL_SOCKET) return fail(ENOPROTOOPT);
  int v = 0;
  switch (optname) {
    case SO_TYPE:
      v = SOCK_DGRAM;
      break;
    case SO_ERROR:
    case SO_REUSEADDR:
      break;
    case SO_SNDBUF:
      v = ds->sndbuf;
      break;
    case SO_RCVBUF:
      v = ds->rcvbuf;
      break;
    default:
      return fail(ENOPROTOOPT);
  }
  std::memcpy(optval, &v, sizeof(v));
  *optlen = sizeof(v);
  return 0;
}

bool nonblocking(const Ds *ds) {
  return ds->nonblocking;
}

void set_nonblocking(Ds *ds, bool on) {
  ds->nonblocking = on;
}

short readiness(Ds *ds, short want) {
  progress(ds);
  short r = 0;
  if (!ds->received.empty()) r |= POLLIN;
  if (!ds->qp || !ds->free_send.empty()) r |= POLLOUT;  // unbound: binds when it sends
  return short(r & want);
}

int wait_fds(Ds *ds, std::vector<pollfd> &wait) {
  if (ds->cq) ibv_req_notify_cq(ds->cq, 0);  // armed before the look: nothing is missed
  wait.push_back({ds->fd(), POLLIN, 0});
  wait.push_back({ds->cc ? ds->cc->fd : -1, POLLIN, 0});
  return 2;
}

void take_wakeups(Ds *ds, const pollfd *fds) {
  if (ds->cc && (fds[1].revents & POLLIN)) {
    ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(ds->cc, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  }
}

}  // namespace vrnic::rdmacm::dgram
