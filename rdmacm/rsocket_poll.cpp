// rpoll and rselect over rsockets (stream and datagram) and ordinary descriptors together.
#include <poll.h>
#include <sched.h>
#include <sys/select.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "internal.h"
#include "rsocket_dgram.h"
#include "rsocket_stream.h"

using vrnic::rdmacm::fail;
using namespace vrnic::rdmacm::stream;
namespace dgram = vrnic::rdmacm::dgram;

extern "C" {

// Ordinary descriptors as poll() has them, rsockets by their state; waits on all at once (a
// stream rsocket through its event channel and its CQ's completion channel, a datagram one
// through what rsocket_dgram.cpp names).
RDMACM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) {
  std::vector<Rs *> socks(nfds);
  std::vector<dgram::Ds *> dgrams(nfds);
  bool any = false;
  for (nfds_t i = 0; i < nfds; i++) {
    any |= (socks[i] = find(fds[i].fd)) != nullptr;
    if (!socks[i]) any |= (dgrams[i] = dgram::find(fds[i].fd)) != nullptr;
  }
  if (!any) return poll(fds, nfds, timeout);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(std::max(timeout, 0));
  std::vector<pollfd> wait;
  std::vector<size_t> first(nfds);  // where each one's descriptors start in `wait`
  for (;;) {
    wait.clear();
    for (nfds_t i = 0; i < nfds; i++) {
      first[i] = wait.size();
      if (Rs *rs = socks[i]) {
        if (rs->cq) ibv_req_notify_cq(rs->cq, 0);  // armed before the look: nothing is missed
        wait.push_back({rs->fd(), POLLIN, 0});
        wait.push_back({rs->cc ? rs->cc->fd : -1, POLLIN, 0});
      } else if (dgrams[i]) {
        dgram::wait_fds(dgrams[i], wait);
      } else {
        wait.push_back({fds[i].fd, fds[i].events, 0});
      }
    }
    if (poll(wait.data(), wait.size(), 0) < 0) return -1;
    int ready = 0;
    for (size_t i = 0; i < nfds; i++) {
      if (socks[i])
        fds[i].revents = readiness(socks[i], fds[i].events);
      else if (dgrams[i])
        fds[i].revents = dgram::readiness(dgrams[i], fds[i].events);
      else
        fds[i].revents = wait[first[i]].revents;
      ready += fds[i].revents != 0;
    }
    if (ready || timeout == 0 || (timeout > 0 && Clock::now() >= deadline)) return ready;
    // Looked at again for a while before sleeping: an answer mostly comes within tens of
    // microseconds, and a thread asleep takes about as long again to wake (udpong's 1 ms
    // echo timeout was missed often enough that its resent messages multiplied).
    if (Clock::now() - start < kSpinBeforeSleep) {
      sched_yield();
      continue;
    }
    int slice = 100;
    if (timeout > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      slice = int(std::clamp<long long>(left.count(), 0, 100));
    }
    if (poll(wait.data(), wait.size(), slice) < 0) return -1;
    for (size_t i = 0; i < nfds; i++) {  // take the CQ events that woke us
      if (Rs *rs = socks[i]; rs && rs->cc && (wait[first[i] + 1].revents & POLLIN)) {
        ibv_cq *cq;
        void *ctx;
        if (ibv_get_cq_event(rs->cc, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
      } else if (dgrams[i]) {
        dgram::take_wakeups(dgrams[i], &wait[first[i]]);
      }
    }
  }
}

RDMACM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
                          struct timeval *timeout) {
  std::vector<pollfd> p;
  for (int fd = 0; fd < nfds; fd++) {
    short ev = 0;
    if (readfds && FD_ISSET(fd, readfds)) ev |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) ev |= POLLOUT;
    if (exceptfds && FD_ISSET(fd, exceptfds)) ev |= POLLPRI;
    if (ev) p.push_back({fd, ev, 0});
  }
  const int ms = timeout ? int(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
  int n = rpoll(p.data(), p.size(), ms);
  if (n < 0) return -1;
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  int count = 0;
  for (const pollfd &q : p) {
    if (readfds && (q.revents & (POLLIN | POLLHUP | POLLERR)) && (q.events & POLLIN))
      FD_SET(q.fd, readfds), count++;
    if (writefds && (q.revents & (POLLOUT | POLLERR)) && (q.events & POLLOUT))
      FD_SET(q.fd, writefds), count++;
    if (exceptfds && (q.revents & POLLPRI)) FD_SET(q.fd, exceptfds), count++;
  }
  return count;
}

}  // extern "C"
