// rsockets for the drop-in librdmacm.so.1: not built yet (issue 20, part 5). Every r* call
// fails with ENOSYS, honestly, except rpoll and rselect: rdma-core's examples (rping, ucmatose,
// udaddy, cmtime) poll ordinary descriptors through them, so they are poll() and select().
#include <errno.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include "internal.h"

namespace {

int not_built() {
  errno = ENOSYS;
  return -1;
}

}  // namespace

extern "C" {

RDMACM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) {
  return poll(fds, nfds, timeout);
}
RDMACM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
                          struct timeval *timeout) {
  return select(nfds, readfds, writefds, exceptfds, timeout);
}

RDMACM_EXPORT int rsocket(int, int, int) {
  return not_built();
}
RDMACM_EXPORT int rbind(int, const struct sockaddr *, socklen_t) {
  return not_built();
}
RDMACM_EXPORT int rlisten(int, int) {
  return not_built();
}
RDMACM_EXPORT int raccept(int, struct sockaddr *, socklen_t *) {
  return not_built();
}
RDMACM_EXPORT int rconnect(int, const struct sockaddr *, socklen_t) {
  return not_built();
}
RDMACM_EXPORT int rshutdown(int, int) {
  return not_built();
}
RDMACM_EXPORT int rclose(int) {
  return not_built();
}
RDMACM_EXPORT ssize_t rrecv(int, void *, size_t, int) {
  return not_built();
}
RDMACM_EXPORT ssize_t rrecvfrom(int, void *, size_t, int, struct sockaddr *, socklen_t *) {
  return not_built();
}
RDMACM_EXPORT ssize_t rrecvmsg(int, struct msghdr *, int) {
  return not_built();
}
RDMACM_EXPORT ssize_t rsend(int, const void *, size_t, int) {
  return not_built();
}
RDMACM_EXPORT ssize_t rsendto(int, const void *, size_t, int, const struct sockaddr *, socklen_t) {
  return not_built();
}
RDMACM_EXPORT ssize_t rsendmsg(int, const struct msghdr *, int) {
  return not_built();
}
RDMACM_EXPORT ssize_t rread(int, void *, size_t) {
  return not_built();
}
RDMACM_EXPORT ssize_t rreadv(int, const struct iovec *, int) {
  return not_built();
}
RDMACM_EXPORT ssize_t rwrite(int, const void *, size_t) {
  return not_built();
}
RDMACM_EXPORT ssize_t rwritev(int, const struct iovec *, int) {
  return not_built();
}
RDMACM_EXPORT int rgetpeername(int, struct sockaddr *, socklen_t *) {
  return not_built();
}
RDMACM_EXPORT int rgetsockname(int, struct sockaddr *, socklen_t *) {
  return not_built();
}
RDMACM_EXPORT int rsetsockopt(int, int, int, const void *, socklen_t) {
  return not_built();
}
RDMACM_EXPORT int rgetsockopt(int, int, int, void *, socklen_t *) {
  return not_built();
}
RDMACM_EXPORT int rfcntl(int, int, ...) {
  return not_built();
}
RDMACM_EXPORT off_t riomap(int, void *, size_t, int, int, off_t) {
  return not_built();
}
RDMACM_EXPORT int riounmap(int, void *, size_t) {
  return not_built();
}
RDMACM_EXPORT size_t riowrite(int, const void *, size_t, off_t, int) {
  errno = ENOSYS;
  return 0;
}

}  // extern "C"
