// cm_ece PORT: ECE through rdma_cm, as rdma-core's librdmacm and the kernel's ib_cm carry it
// (the REQ's vendor ID and options, the REP's answer): two vrnic QPs agree on selective repeat;
// a QP whose peer offered no ECE (rxe, hardware, an application's own QP) runs without it; the
// calls' errors (rdma_set_local_ece, rdma_get_remote_ece); rdma_reject_ece reaches the client
// as REJECTED with reason 35; a client that refuses the REP (rdma_reject after
// CONNECT_RESPONSE) is seen by the server as REJECTED. One process, a listener on 127.0.0.1:PORT and its clients; PASS
// or FAIL lines, exit 0 when all pass. A plain rdma_cm program (links the system's librdmacm).
#include <cerrno>

#include "cm_tool.h"
#include "vrnic/ece.h"

using namespace cm_tool;

namespace {

ibv_ece query(ibv_qp *qp) {
  ibv_ece e{};
  if (ibv_query_ece(qp, &e) != 0) e.vendor_id = 0xdead;
  return e;
}

bool is_vrnic(const ibv_ece &e, uint32_t options) {
  return e.vendor_id == vrnic::kVrnicVendorId && e.options == options && e.comp_mask == 0;
}

void print(const char *who, const ibv_ece &e) {
  std::printf("%s: vendor_id 0x%x options 0x%x\n", who, e.vendor_id, e.options);
}

// The application's own QP to `state`, as rdma_init_qp_attr has it (rping -q).
int move_own_qp(rdma_cm_id *id, ibv_qp *qp, ibv_qp_state state) {
  ibv_qp_attr qa{};
  qa.qp_state = state;
  int mask = 0;
  if (rdma_init_qp_attr(id, &qa, &mask)) return -1;
  return ibv_modify_qp(qp, &qa, mask);
}

// The client side of one connection attempt, up to the server's CONNECT_REQUEST (its id
// returned, the event acknowledged; its ECE in *remote, read before the id has a QP).
rdma_cm_id *request(Pair &p, ibv_pd *client_pd, ibv_qp **own_qp, ibv_ece *remote) {
  ibv_qp_init_attr a = rc_qp_attr();
  rdma_conn_param cp{};
  cp.retry_count = 7;
  if (own_qp) {  // the application's own QP (as rping -q): rdma_cm offers no ECE for it
    a.send_cq = a.recv_cq = ibv_create_cq(p.client->verbs, 8, nullptr, nullptr, 0);
    *own_qp = a.send_cq ? ibv_create_qp(client_pd, &a) : nullptr;
    if (!*own_qp) std::perror("ibv_create_qp"), std::exit(2);
    if (move_own_qp(p.client, *own_qp, IBV_QPS_INIT)) std::perror("INIT"), std::exit(2);
    cp.qp_num = (*own_qp)->qp_num;
  } else if (rdma_create_qp(p.client, nullptr, &a)) {
    std::perror("rdma_create_qp (client)"), std::exit(2);
  }
  if (rdma_connect(p.client, &cp)) std::perror("rdma_connect"), std::exit(2);
  rdma_cm_event *req = next_event(p.lch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id *server = req->id;
  rdma_ack_cm_event(req);
  if (rdma_get_remote_ece(server, remote)) std::perror("rdma_get_remote_ece"), std::exit(2);
  return server;
}

void tear_down(Pair &p, rdma_cm_id *server) {
  rdma_disconnect(p.client);
  rdma_ack_cm_event(next_event(p.lch, RDMA_CM_EVENT_DISCONNECTED));
  rdma_disconnect(server);
  rdma_ack_cm_event(next_event(p.cch, RDMA_CM_EVENT_DISCONNECTED));
  rdma_destroy_qp(server);
  rdma_destroy_id(server);
}

}  // namespace

int main(int argc, char **argv) {
  sockaddr_in addr = loopback_port(argc, argv, "cm_ece");
  Pair p = listen_and_resolve(addr);

  // 1. Both QPs made by rdma_cm: the REQ offers selective repeat, the REP takes it.
  ibv_ece remote{};
  rdma_cm_id *server = request(p, nullptr, nullptr, &remote);
  print("REQ", remote);
  expect(is_vrnic(remote, vrnic::kEceSelectiveRepeat),
         "CONNECT_REQUEST: the REQ offers vrnic's ECE, selective repeat (rdma_get_remote_ece)");
  ibv_qp_init_attr a = rc_qp_attr();
  if (rdma_create_qp(server, nullptr, &a)) return std::perror("rdma_create_qp (server)"), 2;
  ibv_ece e{};
  errno = 0;
  expect(rdma_get_remote_ece(server, &e) == -1 && errno == EINVAL,
         "rdma_get_remote_ece on an id with a QP: EINVAL (rdma-core's contract)");
  if (rdma_accept(server, nullptr)) return std::perror("rdma_accept"), 2;
  rdma_ack_cm_event(next_event(p.cch, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(next_event(p.lch, RDMA_CM_EVENT_ESTABLISHED));
  print("server QP", query(server->qp));
  print("client QP", query(p.client->qp));
  expect(is_vrnic(query(server->qp), vrnic::kEceSelectiveRepeat) &&
             is_vrnic(query(p.client->qp), vrnic::kEceSelectiveRepeat),
         "both QPs run with selective repeat (ibv_query_ece)");
  tear_down(p, server);
  rdma_destroy_qp(p.client);
  rdma_destroy_id(p.client);

  // 2. The client's own QP: its REQ has no ECE, as rxe's and a hardware NIC's: the server's
  // QP runs without selective repeat, whatever vrnicd's default.
  p.client = resolved_client(p.cch, addr);
  errno = 0;
  ibv_ece bad{0, 1, 0};
  expect(rdma_set_local_ece(p.client, &bad) == -1 && errno == EINVAL,
         "rdma_set_local_ece with vendor 0: EINVAL");
  bad = {vrnic::kVrnicVendorId, 1, 1};
  errno = 0;
  expect(rdma_set_local_ece(p.client, &bad) == -1 && errno == EINVAL,
         "rdma_set_local_ece with a comp_mask: EINVAL");
  ibv_pd *pd = ibv_alloc_pd(p.client->verbs);
  ibv_qp *own = nullptr;
  server = request(p, pd, &own, &remote);
  print("REQ", remote);
  expect(remote.vendor_id == 0 && remote.options == 0, "a REQ for the application's QP: no ECE");
  a = rc_qp_attr();
  if (rdma_create_qp(server, nullptr, &a)) return std::perror("rdma_create_qp (server)"), 2;
  print("server QP", query(server->qp));
  expect(is_vrnic(query(server->qp), 0), "the server's QP runs without selective repeat");
  if (rdma_accept(server, nullptr)) return std::perror("rdma_accept"), 2;
  rdma_cm_event *rep = next_event(p.cch, RDMA_CM_EVENT_CONNECT_RESPONSE);
  rdma_ack_cm_event(rep);
  // The REP echoes the REQ's vendor (none) with our options (none).
  expect(rdma_get_remote_ece(p.client, &e) == 0 && e.vendor_id == 0 && e.options == 0,
         "CONNECT_RESPONSE: the REP names no vendor and no option");
  if (move_own_qp(p.client, own, IBV_QPS_RTR) || move_own_qp(p.client, own, IBV_QPS_RTS) ||
      rdma_establish(p.client))
    return std::perror("the client's own QP to RTS, rdma_establish"), 2;
  rdma_ack_cm_event(next_event(p.lch, RDMA_CM_EVENT_ESTABLISHED));
  tear_down(p, server);
  ibv_cq *own_cq = own->send_cq;
  ibv_destroy_qp(own);
  ibv_destroy_cq(own_cq);
  rdma_destroy_id(p.client);

  // 3. rdma_reject_ece: the client sees REJECTED, status 35 (vendor option not supported).
  p.client = resolved_client(p.cch, addr);
  server = request(p, nullptr, nullptr, &remote);
  expect(rdma_reject_ece(server, nullptr, 0) == 0, "rdma_reject_ece");
  rdma_cm_event *rej = next_event(p.cch, RDMA_CM_EVENT_REJECTED);
  std::printf("REJECTED status %d\n", rej->status);
  expect(rej->status == 35, "the client: REJECTED with reason 35");
  rdma_ack_cm_event(rej);
  rdma_destroy_id(server);
  rdma_destroy_qp(p.client);
  rdma_destroy_id(p.client);

  // 4. The active side refuses the REP (what librdmacm does itself when the REP's ECE names
  // another vendor): rdma_reject after CONNECT_RESPONSE, and the server sees REJECTED.
  p.client = resolved_client(p.cch, addr);
  server = request(p, pd, &own, &remote);
  a = rc_qp_attr();
  if (rdma_create_qp(server, nullptr, &a)) return std::perror("rdma_create_qp (server)"), 2;
  if (rdma_accept(server, nullptr)) return std::perror("rdma_accept"), 2;
  rdma_ack_cm_event(next_event(p.cch, RDMA_CM_EVENT_CONNECT_RESPONSE));
  expect(rdma_reject(p.client, nullptr, 0) == 0, "rdma_reject after CONNECT_RESPONSE");
  rej = next_event(p.lch, RDMA_CM_EVENT_REJECTED);
  std::printf("server: REJECTED status %d\n", rej->status);
  expect(rej->status == 28, "the server: REJECTED with reason 28 (consumer defined)");
  rdma_ack_cm_event(rej);
  rdma_destroy_qp(server);
  rdma_destroy_id(server);
  own_cq = own->send_cq;
  ibv_destroy_qp(own);
  ibv_destroy_cq(own_cq);
  rdma_destroy_id(p.client);

  ibv_dealloc_pd(pd);
  rdma_destroy_id(p.listener);
  rdma_destroy_event_channel(p.cch);
  rdma_destroy_event_channel(p.lch);
  return failures ? 1 : 0;
}
