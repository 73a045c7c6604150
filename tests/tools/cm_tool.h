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
// A client id on `ch` with its address and route resolved towards addr (exits 2 on failure).
inline rdma_cm_id *resolved_client(rdma_event_channel *ch, sockaddr_in &addr) {
  rdma_cm_id *client = nullptr;
  if (rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP) ||
      rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr *>(&addr), 2000)) {
    std::perror("set-up");
    std::exit(2);
  }
  rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(client, 2000)) {
    std::perror("rdma_resolve_route");
    std::exit(2);
  }
  rdma_ack_cm_event(next_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  return client;
}

inline Pair listen_and_resolve(sockaddr_in &addr) {
  Pair p;
  p.lch = rdma_create_event_channel();
  p.cch = rdma_create_event_channel();
  if (!p.lch || !p.cch || rdma_create_id(p.lch, &p.listener, nullptr, RDMA_PS_TCP) ||
      rdma_bind_addr(p.listener, reinterpret_cast<sockaddr *>(&addr)) ||
      rdma_listen(p.listener, 4)) {
    std::perror("set-up");
    std::exit(2);
  }
  p.client = resolved_client(p.cch, addr);
  return p;
}

// A connection's end as ib_cm has it: the client's DREQ, the server's DISCONNECTED and its
// DREP (its rdma_disconnect), the client's DISCONNECTED; then both QPs, the ids, the channels.
inline void disconnect_and_destroy(rdma_event_channel *lch, rdma_event_channel *cch,
                                   rdma_cm_id *listener, rdma_cm_id *server, rdma_cm_id *client) {
  rdma_disconnect(client);
  rdma_ack_cm_event(next_event(lch, RDMA_CM_EVENT_DISCONNECTED));
  rdma_disconnect(server);
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_DISCONNECTED));
  rdma_destroy_qp(server);
  rdma_destroy_qp(client);
  rdma_destroy_id(server);
  rdma_destroy_id(client);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(cch);
  rdma_destroy_event_channel(lch);
}

// A small RC QP's attributes (rdma_create_qp fills the rest).
inline ibv_qp_init_attr rc_qp_attr() {
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return a;
}

}  // namespace cm_tool
