// What the rdma_cm and rsockets test tools share: PASS/FAIL lines counted in `failures`, the
// loopback address of a PORT argument, the next event of a channel (exiting on another), and a
// listener with a client resolved up to its route. Plain rdma_cm: the tools link the system's
// librdmacm and run on vrnic's through LD_LIBRARY_PATH.
#pragma once

#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstdlib>

namespace cm_tool {

inline int failures = 0;

inline void expect(bool ok, const char *what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
  failures += !ok;
}

// 127.0.0.1:PORT from argv (exits 2 with a usage line unless there is exactly one argument).
inline sockaddr_in loopback_port(int argc, char **argv, const char *tool) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", tool);
    std::exit(2);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(std::atoi(argv[1])));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  return addr;
}

inline rdma_cm_event *next_event(rdma_event_channel *ch, rdma_cm_event_type want) {
  rdma_cm_event *e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0 || e->event != want) {
    std::printf("FAIL: event %s, want %s\n", e ? rdma_event_str(e->event) : "none",
                rdma_event_str(want));
    std::exit(1);
  }
  return e;
}

// A listener at addr on its channel, and a client on its own with its address and route
// resolved towards it (exits 2 when the set-up fails).
struct Pair {
  rdma_event_channel *lch = nullptr, *cch = nullptr;
  rdma_cm_id *listener = nullptr, *client = nullptr;
};
inline Pair listen_and_resolve(sockaddr_in &addr) {
  Pair p;
  p.lch = rdma_create_event_channel();
  p.cch = rdma_create_event_channel();
  auto *sa = reinterpret_cast<sockaddr *>(&addr);
  if (!p.lch || !p.cch || rdma_create_id(p.lch, &p.listener, nullptr, RDMA_PS_TCP) ||
      rdma_bind_addr(p.listener, sa) || rdma_listen(p.listener, 4) ||
      rdma_create_id(p.cch, &p.client, nullptr, RDMA_PS_TCP) ||
      rdma_resolve_addr(p.client, nullptr, sa, 2000)) {
    std::perror("set-up");
    std::exit(2);
  }
  rdma_ack_cm_event(next_event(p.cch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(p.client, 2000)) {
    std::perror("rdma_resolve_route");
    std::exit(2);
  }
  rdma_ack_cm_event(next_event(p.cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  return p;
}

}  // namespace cm_tool
