// rsockets for the drop-in librdmacm.so.1: stream sockets (SOCK_STREAM over IPv4 and IPv6) on
// an RC QP each, set up through this library's own rdma_cm calls, so that rstream and the
// system's librspreload.so run on vrnic. Both ends are vrnic's: the protocol is this file's,
// not rdma-core's (which a kernel peer's rsockets would speak; mixing them is not supported).
//
// The stream: each side posts kSlots receive buffers of kSlotBytes; a write is cut into SENDs
// of at most kSlotBytes, copied into registered send buffers; a receive buffer goes back on
// the queue once the application has read all of it. A receiver that does not read answers
// RNR NAKs, which the sender's QP retries for ever (rnr_retry 7): that is the flow control.
// An end of stream (rshutdown SHUT_WR, rclose) is a zero-length SEND with immediate data 1.
//
// riomap registers the caller's buffer for remote writes and tells the peer where it is (a
// SEND with immediate data 2 carrying an IoMapMsg); riowrite copies into a send buffer and
// RDMA WRITEs it into the peer's mapping that covers the offset, so the bytes land in the
// peer's memory with no call of the peer's, in order with the stream (one RC QP).
//
// The descriptor an rsocket gets is its event channel's fd: a real one, so that its number is
// no other descriptor's; rpoll waits on it and on the CQ's completion channel. SOCK_DGRAM
// rsockets are rsocket_dgram.cpp's; each call here hands them over. rpoll and rselect are in
// rsocket_poll.cpp, the names, options and rfcntl in rsocket_options.cpp, riomap and riowrite
// in rsocket_iomap.cpp; what they share of the stream, rsocket_stream.h.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "internal.h"
#include "rsocket_dgram.h"
#include "rsocket_stream.h"

namespace vrnic::rdmacm::stream {
std::mutex g_mu;
std::map<int, Rs *> g_sockets;

Rs *find(int fd) {
  std::lock_guard lock(g_mu);
  auto it = g_sockets.find(fd);
  return it == g_sockets.end() ? nullptr : it->second;
}

using vrnic::rdmacm::fail;
namespace dgram = vrnic::rdmacm::dgram;

bool post_recv(Rs *rs, int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(rs->recv_slot(slot)), kSlotBytes, rs->mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = uint64_t(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(rs->id->qp, &wr, &bad) == 0;
}

// The QP, CQ and buffers of a connection, its receives posted before the REP or RTU can let
// the peer's first SEND come. 0 or an errno.
int make_queues(Rs *rs) {
  ibv_context *verbs = rs->id->verbs;
  rs->cc = ibv_create_comp_channel(verbs);
  if (!rs->cc) return errno;
  fcntl(rs->cc->fd, F_SETFL, fcntl(rs->cc->fd, F_GETFL) | O_NONBLOCK);
  rs->cq = ibv_create_cq(verbs, 4 * kSlots, nullptr, rs->cc, 0);
  if (!rs->cq) return errno;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = rs->cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kSlots + 1;  // and the end of stream
  attr.cap.max_recv_wr = kSlots;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(rs->id, nullptr, &attr) != 0) return errno;
  const size_t bytes = size_t(2 * kSlots) * kSlotBytes;
  rs->buf = static_cast<uint8_t *>(std::aligned_alloc(4096, bytes));
  if (!rs->buf) return ENOMEM;
  rs->mr = ibv_reg_mr(rs->id->qp->pd, rs->buf, bytes, IBV_ACCESS_LOCAL_WRITE);
  if (!rs->mr) return errno;
  for (int i = 0; i < kSlots; i++) {
    if (!post_recv(rs, i)) return EIO;
    rs->free_send.push_back(i);
  }
  return 0;
}

rdma_conn_param conn_param() {
  rdma_conn_param p{};
  p.retry_count = 7;
  p.rnr_retry_count = 7;  // for ever: a receiver that does not read holds the sender back
  return p;
}

Rs *new_socket() {
  auto *rs = new Rs;
  rs->channel = rdma_create_event_channel();
  if (!rs->channel || rdma_create_id(rs->channel, &rs->id, rs, RDMA_PS_TCP) != 0) {
    int err = errno;
    if (rs->channel) rdma_destroy_event_channel(rs->channel);
    delete rs;
    errno = err;
    return nullptr;
  }
  fcntl(rs->fd(), F_SETFL, fcntl(rs->fd(), F_GETFL) | O_NONBLOCK);
  std::lock_guard lock(g_mu);
  g_sockets[rs->fd()] = rs;
  return rs;
}

void free_socket(Rs *rs) {
  {
    std::lock_guard lock(g_mu);
    g_sockets.erase(rs->fd());
  }
  for (rdma_cm_id *req : rs->requests) rdma_reject(req, nullptr, 0), rdma_destroy_id(req);
  for (const Rs::LocalMap &m : rs->local_maps) ibv_dereg_mr(m.mr);
  if (rs->id && rs->id->qp) rdma_destroy_qp(rs->id);
  if (rs->mr) ibv_dereg_mr(rs->mr);
  std::free(rs->buf);
  if (rs->cq) ibv_destroy_cq(rs->cq);
  if (rs->cc) ibv_destroy_comp_channel(rs->cc);
  if (rs->id) rdma_destroy_id(rs->id);
  if (rs->channel) rdma_destroy_event_channel(rs->channel);
  delete rs;
}

int errno_of_event(const rdma_cm_event *e) {
  switch (e->event) {
    case RDMA_CM_EVENT_REJECTED:
      return ECONNREFUSED;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return e->status == -ETIMEDOUT ? ETIMEDOUT : EHOSTUNREACH;
    default:
      return ECONNRESET;
  }
}

// The connect's next step after each event, until ESTABLISHED or a failure.
void connect_step(Rs *rs, const rdma_cm_event *e) {
  int err = 0;
  switch (e->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(rs->id, 2000) != 0) err = errno;
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      err = make_queues(rs);
      rdma_conn_param p = conn_param();
      if (!err && rdma_connect(rs->id, &p) != 0) err = errno;
      break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      rs->state = State::kConnected;
      break;
    default:
      err = errno_of_event(e);
  }
  if (err) {
    rs->error = err;
    rs->state = State::kFailed;
  }
}

// Everything the CM and the CQ have for this socket, without waiting.
void progress(Rs *rs) {
  rdma_cm_event *e;
  while (rdma_get_cm_event(rs->channel, &e) == 0) {
    if (rs->state == State::kListening && e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      rs->requests.push_back(e->id);
    } else if (rs->state == State::kConnecting) {
      connect_step(rs, e);
    } else if (e->event == RDMA_CM_EVENT_DISCONNECTED || e->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
      rs->peer_done = true;
    }
    rdma_ack_cm_event(e);
  }
  if (!rs->cq) return;
  ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (wc[i].status != IBV_WC_WR_FLUSH_ERR && !rs->error) rs->error = ECONNRESET;
        rs->peer_done = true;
      } else if (wc[i].opcode == IBV_WC_RECV) {
        const uint32_t imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
        if (imm == kFin) {
          rs->peer_done = true;
          post_recv(rs, int(wc[i].wr_id));
        } else if (imm == kIoMap) {
          IoMapMsg m;
          if (wc[i].byte_len == sizeof(m)) {
            std::memcpy(&m, rs->recv_slot(int(wc[i].wr_id)), sizeof(m));
            rs->remote_maps.push_back(
                {be64toh(m.offset), be64toh(m.addr), be64toh(m.len), ntohl(m.rkey), 0});
          }
          post_recv(rs, int(wc[i].wr_id));
        } else {
          rs->received.push_back({int(wc[i].wr_id), 0, wc[i].byte_len});
        }
      } else if (wc[i].wr_id != kFinWrId) {
        rs->free_send.push_back(int(wc[i].wr_id));
      }
    }
  }
}

short readiness(Rs *rs, short want) {
  progress(rs);
  short r = 0;
  switch (rs->state) {
    case State::kListening:
      if (!rs->requests.empty()) r |= POLLIN;
      break;
    case State::kConnecting:
      break;
    case State::kFailed:
      r |= POLLOUT | POLLERR | POLLHUP;
      break;
    case State::kConnected:
      // As TCP's: the peer's end of stream is readable (POLLRDHUP); POLLHUP only once both
      // directions are done, or the connection was lost.
      if (!rs->received.empty() || rs->peer_done) r |= POLLIN;
      if (rs->peer_done) r |= POLLRDHUP;
      if (!rs->free_send.empty() || rs->peer_done) r |= POLLOUT;
      if ((rs->peer_done && rs->shut_wr) || rs->error) r |= POLLHUP;
      if (rs->error) r |= POLLERR;
      break;
    case State::kIdle:
      r |= POLLOUT | POLLHUP;  // as a TCP socket never connected
      break;
  }
  return short(r & (want | POLLERR | POLLHUP));
}

// Waits on the socket's event channel and completion channel (ms < 0: for ever).
void wait_on(Rs *rs, int ms) {
  pollfd p[2] = {{rs->fd(), POLLIN, 0}, {rs->cc ? rs->cc->fd : -1, POLLIN, 0}};
  if (rs->cq) ibv_req_notify_cq(rs->cq, 0);
  if (readiness(rs, POLLIN | POLLOUT) == 0 || rs->state == State::kConnecting) poll(p, 2, ms);
  if (rs->cc && (p[1].revents & POLLIN)) {
    ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(rs->cc, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  }
}

// A send buffer's worth: a SEND of the stream (imm 0: without immediate data), or an RDMA
// WRITE into the peer's memory (rkey != 0).
int send_chunk(Rs *rs, const uint8_t *data, uint32_t len, uint32_t imm, uint64_t remote,
               uint32_t rkey) {
  const int slot = rs->free_send.back();
  rs->free_send.pop_back();
  std::memcpy(rs->send_slot(slot), data, len);
  ibv_sge sge{reinterpret_cast<uintptr_t>(rs->send_slot(slot)), len, rs->mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = uint64_t(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = rkey ? IBV_WR_RDMA_WRITE : imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  wr.send_flags = IBV_SEND_SIGNALED;
  return ibv_post_send(rs->id->qp, &wr, &bad);
}

void send_fin(Rs *rs) {
  if (rs->shut_wr || rs->state != State::kConnected || rs->peer_done) return;
  rs->shut_wr = true;
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = kFinWrId;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(kFin);
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_post_send(rs->id->qp, &wr, &bad);
}

ssize_t stream_write(Rs *rs, const iovec *iov, int iovcnt, int flags) {
  if (rs->state != State::kConnected)
    return fail(rs->state == State::kFailed ? rs->error : ENOTCONN);
  if (rs->shut_wr) return fail(EPIPE);
  const bool nb = rs->nonblocking || (flags & MSG_DONTWAIT);
  size_t sent = 0;
  for (int i = 0; i < iovcnt; i++) {
    const auto *p = static_cast<const uint8_t *>(iov[i].iov_base);
    size_t left = iov[i].iov_len;
    while (left) {
      int err = block_until(rs, nb, [&] { return !rs->free_send.empty() || rs->peer_done; });
      if (rs->peer_done) return sent ? ssize_t(sent) : fail(rs->error ? rs->error : EPIPE);
      if (err) return sent ? ssize_t(sent) : fail(err);
      const uint32_t n = uint32_t(std::min<size_t>(left, kSlotBytes));
      if (send_chunk(rs, p, n) != 0) return sent ? ssize_t(sent) : fail(EIO);
      p += n;
      left -= n;
      sent += n;
    }
  }
  return ssize_t(sent);
}

ssize_t stream_read(Rs *rs, const iovec *iov, int iovcnt, int flags) {
  if (rs->state != State::kConnected)
    return fail(rs->state == State::kFailed ? rs->error : ENOTCONN);
  size_t want = 0;
  for (int i = 0; i < iovcnt; i++) want += iov[i].iov_len;
  if (!want) return 0;
  const bool nb = rs->nonblocking || (flags & MSG_DONTWAIT);
  const bool all = flags & MSG_WAITALL;
  size_t got = 0;
  int vi = 0;
  size_t voff = 0;
  while (got < want) {
    // Once some data is in, a read returns it rather than wait (unless MSG_WAITALL).
    int err = block_until(rs, nb || (got && !all),
                          [&] { return !rs->received.empty() || rs->peer_done; });
    if (rs->received.empty()) {
      if (got) return ssize_t(got);
      if (rs->peer_done) return rs->error && rs->error != EPIPE ? fail(rs->error) : 0;
      return fail(err);
    }
    Rs::Received &r = rs->received.front();
    while (r.len && got < want) {
      const size_t n = std::min<size_t>(r.len, iov[vi].iov_len - voff);
      std::memcpy(static_cast<uint8_t *>(iov[vi].iov_base) + voff, rs->recv_slot(r.slot) + r.offset,
                  n);
      r.offset += uint32_t(n);
      r.len -= uint32_t(n);
      got += n;
      voff += n;
      if (voff == iov[vi].iov_len) vi++, voff = 0;
    }
    if (!r.len && !(flags & MSG_PEEK)) {
      post_recv(rs, r.slot);
      rs->received.pop_front();
    }
    if (flags & MSG_PEEK) break;  // (what was copied stays counted as unread)
  }
  return ssize_t(got);
}

sockaddr *local_of(Rs *rs) {
  return rdma_get_local_addr(rs->id);
}

socklen_t length_of(const sockaddr *sa) {
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// As getsockname's: NULL with a length of 0 asks the length alone (librspreload does).
int copy_address(const sockaddr *from, sockaddr *to, socklen_t *len) {
  if (!len || (!to && *len)) return fail(EFAULT);
  const socklen_t n = length_of(from);
  if (to) std::memcpy(to, from, std::min(*len, n));
  *len = n;
  return 0;
}

}  // namespace vrnic::rdmacm::stream

using namespace vrnic::rdmacm::stream;

extern "C" {

RDMACM_EXPORT int rsocket(int domain, int type, int protocol) {
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_DGRAM) {
    if (protocol != 0 && protocol != IPPROTO_UDP) return fail(EPROTONOSUPPORT);
    return dgram::create(domain, type & SOCK_NONBLOCK);
  }
  if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM) return fail(EOPNOTSUPP);
  if (protocol != 0 && protocol != IPPROTO_TCP) return fail(EPROTONOSUPPORT);
  Rs *rs = new_socket();
  if (!rs) return -1;
  rs->nonblocking = type & SOCK_NONBLOCK;
  return rs->fd();
}

RDMACM_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::bind(ds, addr);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return rdma_bind_addr(rs->id, const_cast<sockaddr *>(addr));
}

RDMACM_EXPORT int rlisten(int socket, int backlog) {
  if (dgram::find(socket)) return fail(EOPNOTSUPP);  // as UDP's
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (rdma_listen(rs->id, backlog) != 0) return -1;
  rs->state = State::kListening;
  return 0;
}

RDMACM_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen) {
  if (dgram::find(socket)) return fail(EOPNOTSUPP);
  Rs *ls = find(socket);
  if (!ls) return fail(ENOTSOCK);
  if (ls->state != State::kListening) return fail(EINVAL);
  if (int err = block_until(ls, ls->nonblocking, [&] { return !ls->requests.empty(); }))
    return fail(err);
  rdma_cm_id *req = ls->requests.front();
  ls->requests.pop_front();
  auto *rs = new Rs;
  rs->channel = rdma_create_event_channel();
  if (!rs->channel || rdma_migrate_id(req, rs->channel) != 0) {
    const int err = errno;
    rdma_reject(req, nullptr, 0);
    rdma_destroy_id(req);
    if (rs->channel) rdma_destroy_event_channel(rs->channel);
    delete rs;
    return fail(err);
  }
  rs->id = req;
  req->context = rs;
  fcntl(rs->fd(), F_SETFL, fcntl(rs->fd(), F_GETFL) | O_NONBLOCK);
  {
    std::lock_guard lock(g_mu);
    g_sockets[rs->fd()] = rs;
  }
  int err = make_queues(rs);
  rdma_conn_param p = conn_param();
  if (!err && rdma_accept(req, &p) != 0) err = errno;
  if (!err) {
    rs->state = State::kConnecting;
    // The accept completes at the RTU, at most a CM response timeout away.
    block_until(rs, false, [&] { return rs->state != State::kConnecting; });
    if (rs->state != State::kConnected) err = rs->error ? rs->error : ECONNABORTED;
  }
  if (err) {
    free_socket(rs);
    return fail(err);
  }
  if (addr) copy_address(rdma_get_peer_addr(rs->id), addr, addrlen);
  return rs->fd();
}

RDMACM_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::connect(ds, addr);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (rs->state == State::kConnected) return fail(EISCONN);
  if (rs->state == State::kConnecting) return fail(EALREADY);
  if (rs->state != State::kIdle) return fail(EINVAL);
  rs->state = State::kConnecting;
  if (rdma_resolve_addr(rs->id, nullptr, const_cast<sockaddr *>(addr), 2000) != 0) {
    rs->state = State::kFailed;
    return fail(rs->error = errno);
  }
  // Non-blocking: always in progress, as rdma-core's (its address resolution is asynchronous);
  // the outcome comes through rpoll and SO_ERROR, even a refusal that is already back.
  if (rs->nonblocking) return fail(EINPROGRESS);
  block_until(rs, false, [&] { return rs->state != State::kConnecting; });
  return rs->state == State::kConnected ? 0 : fail(rs->error);
}

RDMACM_EXPORT int rshutdown(int socket, int how) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::shutdown(ds);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (rs->state != State::kConnected) return fail(ENOTCONN);
  if (how == SHUT_WR || how == SHUT_RDWR) send_fin(rs);
  return 0;
}

RDMACM_EXPORT int rclose(int socket) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::close(ds);
  Rs *rs = find(socket);
  if (!rs) return fail(EBADF);
  if (rs->state == State::kConnected) {
    send_fin(rs);
    // What was written goes out before the connection does: its sends complete first.
    // (for 2 s at most: a peer that reads nothing would hold them for ever)
    block_until(
        rs, false, [&] { return rs->free_send.size() == kSlots || rs->peer_done; }, 2000);
    rdma_disconnect(rs->id);
  }
  free_socket(rs);
  return 0;
}

RDMACM_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
                                struct sockaddr *src_addr, socklen_t *addrlen) {
  iovec v{buf, len};
  if (dgram::Ds *ds = dgram::find(socket))
    return dgram::recv(ds, &v, 1, flags, src_addr, addrlen, nullptr);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return stream_read(rs, &v, 1, flags);  // a stream's source is its peer: not reported
}
RDMACM_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags) {
  return rrecvfrom(socket, buf, len, flags, nullptr, nullptr);
}
RDMACM_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags) {
  if (!msg) return fail(EFAULT);
  if (dgram::Ds *ds = dgram::find(socket)) {
    msg->msg_controllen = 0;
    return dgram::recv(ds, msg->msg_iov, int(msg->msg_iovlen), flags,
                       static_cast<sockaddr *>(msg->msg_name), &msg->msg_namelen,
                       &msg->msg_flags);
  }
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  msg->msg_controllen = 0;
  msg->msg_flags = 0;
  return stream_read(rs, msg->msg_iov, int(msg->msg_iovlen), flags);
}
RDMACM_EXPORT ssize_t rread(int socket, void *buf, size_t count) {
  return rrecv(socket, buf, count, 0);
}
RDMACM_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt) {
  if (dgram::Ds *ds = dgram::find(socket))
    return dgram::recv(ds, iov, iovcnt, 0, nullptr, nullptr, nullptr);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return stream_read(rs, iov, iovcnt, 0);
}

RDMACM_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
                              const struct sockaddr *dest_addr, socklen_t) {
  iovec v{const_cast<void *>(buf), len};
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::send(ds, &v, 1, flags, dest_addr);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return stream_write(rs, &v, 1, flags);  // a stream goes to its peer, as TCP's sendto
}
RDMACM_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags) {
  return rsendto(socket, buf, len, flags, nullptr, 0);
}
RDMACM_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags) {
  if (!msg) return fail(EFAULT);
  if (dgram::Ds *ds = dgram::find(socket))
    return dgram::send(ds, msg->msg_iov, int(msg->msg_iovlen), flags,
                       static_cast<const sockaddr *>(msg->msg_name));
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return stream_write(rs, msg->msg_iov, int(msg->msg_iovlen), flags);
}
RDMACM_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count) {
  return rsend(socket, buf, count, 0);
}
RDMACM_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::send(ds, iov, iovcnt, 0, nullptr);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return stream_write(rs, iov, iovcnt, 0);
}

}  // extern "C"
