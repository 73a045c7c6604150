// cm_af_ib PORT: AF_IB addresses in rdma_cm (the rdmacm group, issue 32 item 8), as rdma-core's
// librdmacm has them: rdma_getaddrinfo with RAI_FAMILY and AF_IB hints and a numeric host (a
// GID written as an IPv6 or IPv4 address) gives a sockaddr_ib whose service ID is the port
// space and the port; an id bound to one listens there, a client resolves an AF_IB
// destination and connects, and every address the ids report (local, peer, the connection
// request's) is AF_IB, with the ports rdma_get_src_port/dst_port give.
#include <arpa/inet.h>
#include <infiniband/ib.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cm_tool.h"

using cm_tool::expect;
using cm_tool::next_event;

namespace {

const sockaddr_ib *ib(const sockaddr *sa) {
  return reinterpret_cast<const sockaddr_ib *>(sa);
}

bool is_gid(const sockaddr *sa, const char *text, uint16_t port, uint16_t ps) {
  in6_addr want{};
  inet_pton(AF_INET6, text, &want);
  return sa->sa_family == AF_IB && std::memcmp(ib(sa)->sib_addr.sib_raw, &want, 16) == 0 &&
         be16toh(ib(sa)->sib_pkey) == 0xffff &&
         (!port || be64toh(ib(sa)->sib_sid) == (uint64_t(ps) << 16 | port));
}

}  // namespace

int main(int argc, char **argv) {
  const uint16_t port = ntohs(cm_tool::loopback_port(argc, argv, "cm_af_ib").sin_port);
  const std::string service = std::to_string(port);
  rdma_addrinfo hints{}, *passive = nullptr, *active = nullptr, *v4 = nullptr;
  hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST | RAI_FAMILY;
  hints.ai_family = AF_IB;
  hints.ai_port_space = RDMA_PS_TCP;
  expect(rdma_getaddrinfo("::ffff:127.0.0.1", service.c_str(), &hints, &passive) == 0 &&
             passive->ai_family == AF_IB && passive->ai_src_len == sizeof(sockaddr_ib) &&
             is_gid(passive->ai_src_addr, "::ffff:127.0.0.1", port, RDMA_PS_TCP),
         "rdma_getaddrinfo(GID, AF_IB, passive): a sockaddr_ib, service ID = PS_TCP and port");
  expect(rdma_getaddrinfo("127.0.0.1", service.c_str(), &hints, &v4) == 0 &&
             is_gid(v4->ai_src_addr, "::ffff:127.0.0.1", port, RDMA_PS_TCP),
         "an IPv4 numeric host: its IPv4-mapped GID");
  hints.ai_flags = RAI_NUMERICHOST | RAI_FAMILY;
  expect(rdma_getaddrinfo("::ffff:127.0.0.1", service.c_str(), &hints, &active) == 0 &&
             active->ai_dst_len == sizeof(sockaddr_ib) &&
             is_gid(active->ai_dst_addr, "::ffff:127.0.0.1", port, RDMA_PS_TCP),
         "rdma_getaddrinfo(GID, AF_IB): the destination as a sockaddr_ib");

  rdma_event_channel *lch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
  rdma_cm_id *listener = nullptr, *client = nullptr;
  if (!lch || !cch || rdma_create_id(lch, &listener, nullptr, RDMA_PS_TCP) ||
      rdma_create_id(cch, &client, nullptr, RDMA_PS_TCP)) {
    std::perror("set-up");
    return 2;
  }
  expect(rdma_bind_addr(listener, passive->ai_src_addr) == 0 && rdma_listen(listener, 4) == 0,
         "an id bound to the AF_IB address listens");
  expect(is_gid(rdma_get_local_addr(listener), "::ffff:127.0.0.1", port, RDMA_PS_TCP) &&
             ntohs(rdma_get_src_port(listener)) == port && listener->verbs != nullptr,
         "its local address: AF_IB, the port; bound to the device");
  expect(rdma_resolve_addr(client, nullptr, active->ai_dst_addr, 2000) == 0,
         "rdma_resolve_addr to an AF_IB destination");
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
  expect(rdma_get_local_addr(client)->sa_family == AF_IB &&
             is_gid(rdma_get_peer_addr(client), "::ffff:127.0.0.1", port, RDMA_PS_TCP),
         "the client's source is AF_IB too, its peer the destination");
  expect(rdma_resolve_route(client, 2000) == 0, "rdma_resolve_route");
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_qp_init_attr qa = cm_tool::rc_qp_attr();
  expect(rdma_create_qp(client, nullptr, &qa) == 0, "the client's QP");
  rdma_conn_param param{};
  param.retry_count = 7;
  expect(rdma_connect(client, &param) == 0, "rdma_connect");
  rdma_cm_event *req = next_event(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id *server = req->id;
  rdma_ack_cm_event(req);
  expect(is_gid(rdma_get_local_addr(server), "::ffff:127.0.0.1", port, RDMA_PS_TCP) &&
             rdma_get_peer_addr(server)->sa_family == AF_IB &&
             rdma_get_dst_port(server) == rdma_get_src_port(client),
         "the connection request: AF_IB addresses, the client's port as its peer's");
  qa = cm_tool::rc_qp_attr();
  expect(rdma_create_qp(server, nullptr, &qa) == 0 && rdma_accept(server, nullptr) == 0,
         "rdma_accept");
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(next_event(lch, RDMA_CM_EVENT_ESTABLISHED));
  expect(true, "ESTABLISHED on both sides");
  cm_tool::disconnect_and_destroy(lch, cch, listener, server, client);
  rdma_freeaddrinfo(passive);
  rdma_freeaddrinfo(active);
  rdma_freeaddrinfo(v4);
  std::printf("%d failed\n", cm_tool::failures);
  return cm_tool::failures ? 1 : 0;
}
