// A stream rsocket's names, options and file flags (rgetpeername, rgetsockname, rsetsockopt,
// rgetsockopt, rfcntl); a datagram one's are rsocket_dgram.cpp's.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>

#include <cstdarg>
#include <cstring>

#include "internal.h"
#include "rsocket_dgram.h"
#include "rsocket_stream.h"

using vrnic::rdmacm::fail;
using namespace vrnic::rdmacm::stream;
namespace dgram = vrnic::rdmacm::dgram;

extern "C" {

RDMACM_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::getpeername(ds, addr, addrlen);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (rs->state != State::kConnected) return fail(ENOTCONN);
  return copy_address(rdma_get_peer_addr(rs->id), addr, addrlen);
}

RDMACM_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen) {
  if (dgram::Ds *ds = dgram::find(socket)) return dgram::getsockname(ds, addr, addrlen);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  return copy_address(local_of(rs), addr, addrlen);
}

// The options a stream socket's users set: kept or taken as hints (the transport is the
// RC QP's); anything else ENOPROTOOPT.
RDMACM_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval,
                              socklen_t optlen) {
  if (dgram::Ds *ds = dgram::find(socket))
    return dgram::setsockopt(ds, level, optname, optval, optlen);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (!optval || optlen < sizeof(int)) return fail(EINVAL);
  const int v = *static_cast<const int *>(optval);
  if (level == SOL_SOCKET) {
    switch (optname) {
      case SO_REUSEADDR:
        return rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
                               const_cast<int *>(&v), sizeof(v));
      case SO_SNDBUF:
        rs->sndbuf = v;
        return 0;
      case SO_RCVBUF:
        rs->rcvbuf = v;
        return 0;
      case SO_KEEPALIVE:
      case SO_LINGER:
      case SO_OOBINLINE:
        return 0;  // the CM's and the QP's timers stand for them
    }
  } else if (level == IPPROTO_TCP && (optname == TCP_NODELAY || optname == TCP_MAXSEG)) {
    return 0;  // every write leaves at once, in SENDs of at most 64 KiB
  } else if (level == IPPROTO_IPV6 && optname == IPV6_V6ONLY) {
    return rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, const_cast<int *>(&v),
                           sizeof(v));
  } else if (level == SOL_RDMA) {
    return 0;  // queue sizes, inline size, iomap size: this implementation's own
  }
  return fail(ENOPROTOOPT);
}

RDMACM_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen) {
  if (dgram::Ds *ds = dgram::find(socket))
    return dgram::getsockopt(ds, level, optname, optval, optlen);
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (!optval || !optlen || *optlen < sizeof(int)) return fail(EINVAL);
  int v = 0;
  if (level == SOL_SOCKET) {
    switch (optname) {
      case SO_ERROR:
        v = rs->state == State::kFailed ? rs->error : 0;
        if (rs->state == State::kFailed) rs->error = 0;
        break;
      case SO_SNDBUF:
        v = rs->sndbuf;
        break;
      case SO_RCVBUF:
        v = rs->rcvbuf;
        break;
      case SO_TYPE:
        v = SOCK_STREAM;
        break;
      case SO_REUSEADDR:
      case SO_KEEPALIVE:
      case SO_OOBINLINE:
        break;
      default:
        return fail(ENOPROTOOPT);
    }
  } else if (level == IPPROTO_TCP && (optname == TCP_NODELAY || optname == TCP_MAXSEG)) {
    v = optname == TCP_NODELAY ? 1 : int(kSlotBytes);
  } else {
    return fail(ENOPROTOOPT);
  }
  std::memcpy(optval, &v, sizeof(v));
  *optlen = sizeof(v);
  return 0;
}

RDMACM_EXPORT int rfcntl(int socket, int cmd, ...) {
  Rs *rs = find(socket);
  dgram::Ds *ds = rs ? nullptr : dgram::find(socket);
  if (!rs && !ds) return fail(ENOTSOCK);
  va_list ap;
  va_start(ap, cmd);
  const long arg = cmd == F_SETFL ? va_arg(ap, long) : 0;
  va_end(ap);
  switch (cmd) {
    case F_GETFL:
      return O_RDWR | ((rs ? rs->nonblocking : dgram::nonblocking(ds)) ? O_NONBLOCK : 0);
    case F_SETFL:
      if (rs)
        rs->nonblocking = arg & O_NONBLOCK;
      else
        dgram::set_nonblocking(ds, arg & O_NONBLOCK);
      return 0;
  }
  return fail(EINVAL);
}

}  // extern "C"
