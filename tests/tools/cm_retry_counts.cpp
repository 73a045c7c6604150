// cm_retry_counts PORT: the retry counts each side's QP gets from rdma_cm, as the kernel's
// ib_cm sets them: the active side's QP retries as its rdma_connect asked (retry_count) and
// takes its RNR retry count from the REP (the accept's rnr_retry_count); the passive side's
// takes both from the REQ, whatever its rdma_accept's retry_count says. Many servers accept
// with retry_count 0 (a conn_param zeroed but for what they copy), and their QP must still
// retry. One process, a listener on 127.0.0.1:PORT and a client; prints PASS or FAIL lines,
// exit 0 when all pass. A plain rdma_cm program (links the system's librdmacm).
#include "cm_tool.h"

using namespace cm_tool;

namespace {

void counts(ibv_qp *qp, int *retry, int *rnr) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  *retry = *rnr = -1;
  if (ibv_query_qp(qp, &a, IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY, &ia) == 0) {
    *retry = a.retry_cnt;
    *rnr = a.rnr_retry;
  }
}

}  // namespace

int main(int argc, char **argv) {
  sockaddr_in addr = loopback_port(argc, argv, "cm_retry_counts");
  auto [lch, cch, listener, client] = listen_and_resolve(addr);
  ibv_qp_init_attr a = rc_qp_attr();
  if (rdma_create_qp(client, nullptr, &a)) return std::perror("rdma_create_qp (client)"), 2;
  rdma_conn_param cp{};
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  if (rdma_connect(client, &cp)) return std::perror("rdma_connect"), 2;

  rdma_cm_event *req = next_event(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_cm_id *server = req->id;
  expect(req->param.conn.retry_count == 5 && req->param.conn.rnr_retry_count == 6,
         "CONNECT_REQUEST: the REQ's retry_count 5 and rnr_retry_count 6");
  rdma_ack_cm_event(req);
  a = rc_qp_attr();
  if (rdma_create_qp(server, nullptr, &a)) return std::perror("rdma_create_qp (server)"), 2;
  rdma_conn_param sp{};  // retry_count 0, as a server copying only a few fields leaves it
  sp.rnr_retry_count = 3;
  if (rdma_accept(server, &sp)) return std::perror("rdma_accept"), 2;
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(next_event(lch, RDMA_CM_EVENT_ESTABLISHED));

  int retry, rnr;
  counts(server->qp, &retry, &rnr);
  std::printf("server QP: retry_cnt %d, rnr_retry %d\n", retry, rnr);
  expect(retry == 5 && rnr == 6, "the passive side's QP: both counts from the REQ (5, 6)");
  counts(client->qp, &retry, &rnr);
  std::printf("client QP: retry_cnt %d, rnr_retry %d\n", retry, rnr);
  expect(retry == 5 && rnr == 3, "the active side's QP: its own retry_count, the REP's RNR (5, 3)");

  cm_tool::disconnect_and_destroy(lch, cch, listener, server, client);
  return failures ? 1 : 0;
}
