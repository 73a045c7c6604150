// Datagram rsockets (SOCK_DGRAM): what rsocket.cpp's public calls do for one
// (rsocket_dgram.cpp says how they work).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <vector>

namespace vrnic::rdmacm::dgram {

struct Ds;

// The datagram rsocket behind descriptor fd, or nullptr.
Ds *find(int fd);
// A new one of `domain` (AF_INET, AF_INET6): its descriptor, or -1 and errno.
int create(int domain, bool nonblocking);
int close(Ds *ds);

int bind(Ds *ds, const sockaddr *addr);
int connect(Ds *ds, const sockaddr *addr);  // AF_UNSPEC: no peer any more
int shutdown(Ds *ds);
// One datagram to `to` (nullptr: the connected peer); its length or -1 and errno.
ssize_t send(Ds *ds, const iovec *iov, int iovcnt, int flags, const sockaddr *to);
// One datagram, truncated to the buffers (MSG_TRUNC in *msg_flags when it was); its length
// (its whole length with MSG_TRUNC in flags) or -1 and errno. `from` may be nullptr.
ssize_t recv(Ds *ds, const iovec *iov, int iovcnt, int flags, sockaddr *from, socklen_t *fromlen,
             int *msg_flags);

int getsockname(Ds *ds, sockaddr *addr, socklen_t *len);
int getpeername(Ds *ds, sockaddr *addr, socklen_t *len);
int setsockopt(Ds *ds, int level, int optname, const void *optval, socklen_t optlen);
int getsockopt(Ds *ds, int level, int optname, void *optval, socklen_t *optlen);
bool nonblocking(const Ds *ds);
void set_nonblocking(Ds *ds, bool on);

// rpoll's view: the events of `want` that hold now; the descriptors to wait on for a change
// (appended to `wait`, how many); after the wait, those descriptors' wake-ups taken.
short readiness(Ds *ds, short want);
int wait_fds(Ds *ds, std::vector<pollfd> &wait);
void take_wakeups(Ds *ds, const pollfd *fds);

}  // namespace vrnic::rdmacm::dgram
