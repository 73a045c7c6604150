// cm_afonly V4ADDR V6ADDR PORT: rdma_cm ports shared as the kernel's CM shares them (the
// rdmacm group, issue 32 item 8). An IPv4 wildcard id and an IPv6 wildcard id, both with
// RDMA_OPTION_ID_AFONLY, listen at one PORT -- as a server listening on every address
// getaddrinfo(NULL, PORT, AI_PASSIVE) gives does -- and a connection to V4ADDR reaches the
// IPv4 one, a connection to V6ADDR the IPv6 one. Without AFONLY the second wildcard cannot
// bind there (EADDRNOTAVAIL), nor can anything bind on a listening wildcard's port; each
// request is refused after it arrived, and the client sees REJECTED.
#include <arpa/inet.h>
#include <fcntl.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cm_tool.h"

using cm_tool::expect;
using cm_tool::next_event;

namespace {

sockaddr_storage address(const char *text, uint16_t port) {
  sockaddr_storage ss{};
  auto *in4 = reinterpret_cast<sockaddr_in *>(&ss);
  auto *in6 = reinterpret_cast<sockaddr_in6 *>(&ss);
  if (inet_pton(AF_INET, text, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
  } else if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
  } else {
    std::fprintf(stderr, "cm_afonly: not an address: %s\n", text);
    std::exit(2);
  }
  return ss;
}

sockaddr *sa(sockaddr_storage &ss) {
  return reinterpret_cast<sockaddr *>(&ss);
}

// A listening id at the wildcard of `family`, AFONLY as asked; nullptr and errno if the bind
// failed.
rdma_cm_id *wildcard(rdma_event_channel *ch, int family, uint16_t port, bool afonly) {
  rdma_cm_id *id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) return nullptr;
  int on = afonly ? 1 : 0;
  if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof(on))) {
    std::perror("rdma_set_option(AFONLY)");
    std::exit(2);
  }
  sockaddr_storage any = address(family == AF_INET ? "0.0.0.0" : "::", port);
  if (rdma_bind_addr(id, sa(any))) {
    const int err = errno;
    rdma_destroy_id(id);
    errno = err;
    return nullptr;
  }
  if (rdma_listen(id, 4)) {
    std::perror("rdma_listen");
    std::exit(2);
  }
  return id;
}

// A client connecting to `to`: the request must arrive on `want` (for `listener`), and not on
// `other`; it is rejected there.
void connect_to(sockaddr_storage to, rdma_event_channel *want, rdma_cm_id *listener,
                rdma_event_channel *other, const char *what) {
  rdma_event_channel *cch = rdma_create_event_channel();
  rdma_cm_id *client = nullptr;
  if (!cch || rdma_create_id(cch, &client, nullptr, RDMA_PS_TCP) ||
      rdma_resolve_addr(client, nullptr, sa(to), 2000)) {
    std::perror("client set-up");
    std::exit(2);
  }
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(client, 2000)) std::exit(2);
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  rdma_conn_param p{};
  p.qp_num = 0x123;  // no QP: the request is refused anyway
  p.retry_count = 1;
  if (rdma_connect(client, &p)) {
    std::perror("rdma_connect");
    std::exit(2);
  }
  rdma_cm_event *req = next_event(want, RDMA_CM_EVENT_CONNECT_REQUEST);
  expect(req->listen_id == listener, what);
  rdma_cm_id *child = req->id;
  rdma_ack_cm_event(req);
  rdma_reject(child, nullptr, 0);
  rdma_destroy_id(child);
  rdma_cm_event *rej = next_event(cch, RDMA_CM_EVENT_REJECTED);
  rdma_ack_cm_event(rej);
  // Nothing for the other family's listener.
  int flags = fcntl(other->fd, F_GETFL);
  fcntl(other->fd, F_SETFL, flags | O_NONBLOCK);
  rdma_cm_event *stray = nullptr;
  expect(rdma_get_cm_event(other, &stray) != 0 && errno == EAGAIN,
         "  ... and no request on the other family's listener");
  if (stray) rdma_ack_cm_event(stray);
  fcntl(other->fd, F_SETFL, flags);
  rdma_destroy_id(client);
  rdma_destroy_event_channel(cch);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: cm_afonly V4ADDR V6ADDR PORT\n");
    return 2;
  }
  const uint16_t port = uint16_t(std::atoi(argv[3]));
  rdma_event_channel *ch4 = rdma_create_event_channel(), *ch6 = rdma_create_event_channel();
  if (!ch4 || !ch6) return 2;

  rdma_cm_id *v4 = wildcard(ch4, AF_INET, port, true);
  expect(v4 != nullptr, "an IPv4 wildcard id with AFONLY binds and listens at the port");
  errno = 0;
  rdma_cm_id *shared = wildcard(ch6, AF_INET6, port, false);
  expect(!shared && errno == EADDRNOTAVAIL,
         "an IPv6 wildcard without AFONLY cannot bind there: EADDRNOTAVAIL");
  if (shared) rdma_destroy_id(shared);
  rdma_cm_id *v6 = wildcard(ch6, AF_INET6, port, true);
  expect(v6 != nullptr, "an IPv6 wildcard id with AFONLY binds and listens at the same port");
  if (!v4 || !v6) return 1;
  // A third wildcard of either family: the port is taken.
  errno = 0;
  rdma_cm_id *third = wildcard(ch4, AF_INET, port, true);
  expect(!third && errno == EADDRNOTAVAIL, "a second IPv4 wildcard there: EADDRNOTAVAIL");
  if (third) rdma_destroy_id(third);

  connect_to(address(argv[1], port), ch4, v4, ch6,
             "a connection to the IPv4 address reaches the IPv4 listener");
  connect_to(address(argv[2], port), ch6, v6, ch4,
             "a connection to the IPv6 address reaches the IPv6 listener");

  // The IPv4 one gone, IPv4 requests find no listener; the IPv6 one still takes its own.
  rdma_destroy_id(v4);
  connect_to(address(argv[2], port), ch6, v6, ch4,
             "with the IPv4 listener gone, the IPv6 listener still takes its requests");
  rdma_destroy_id(v6);
  rdma_destroy_event_channel(ch4);
  rdma_destroy_event_channel(ch6);
  std::printf("%s\n", cm_tool::failures ? "cm_afonly: FAILED" : "cm_afonly: all passed");
  return cm_tool::failures ? 1 : 0;
}
