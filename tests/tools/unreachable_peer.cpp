// unreachable_peer: an RC QP of vrnic0 connected to an address no host answers for (nobody
// resolves it: ARP or neighbour discovery goes unanswered), then one RDMA WRITE. The write
// must complete with IBV_WC_RETRY_EXC_ERR after the retry budget its timeout and retry count
// define, (retry_cnt + 1) x 4.096 us x 2^timeout, within +-50%, and destroying the QP then must
// take less than 250 ms (not wait for the unanswered address to be given up). Prints
// "status=NAME after_ms=N budget_ms=N destroy_ms=N" and exits 0 when all held, 1 otherwise
// (saying why), 2 on bad usage.
//
// usage: unreachable_peer --peer ADDR [--timeout T] [--retry N]   (ADDR: IPv4 or IPv6)
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "first_device.h"

namespace {

using Clock = std::chrono::steady_clock;

int fail(const char *why) {
  std::printf("FAIL: %s\n", why);
  return 1;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ADDR as a RoCEv2 GID: IPv6 as is, IPv4 mapped into IPv6.
bool parse_gid(const char *addr, ibv_gid *gid) {
  std::memset(gid, 0, sizeof(*gid));
  if (inet_pton(AF_INET6, addr, gid->raw) == 1) return true;
  gid->raw[10] = gid->raw[11] = 0xff;
  return inet_pton(AF_INET, addr, gid->raw + 12) == 1;
}

}  // namespace

int main(int argc, char **argv) {
  const char *peer = nullptr;
  int timeout = 14, retry = 7;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--peer" && i + 1 < argc) {
      peer = argv[++i];
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout = std::atoi(argv[++i]);
    } else if (a == "--retry" && i + 1 < argc) {
      retry = std::atoi(argv[++i]);
    } else {
      peer = nullptr;
      break;
    }
  }
  ibv_gid dgid;
  if (!peer || !parse_gid(peer, &dgid) || timeout < 1 || timeout > 20 || retry < 0 || retry > 7) {
    std::fprintf(stderr, "usage: unreachable_peer --peer ADDR [--timeout 1-20] [--retry 0-7]\n");
    return 2;
  }
  const char *why = nullptr;
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) return fail(why);
  static char buf[4096];
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
  ibv_mr *mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (!mr) return fail("ibv_alloc_pd, ibv_create_cq or ibv_reg_mr");
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  ibv_qp *qp = ibv_create_qp(pd, &init);
  if (!qp) return fail("ibv_create_qp");

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return fail("modify to INIT");
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 0x4242;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.grh.dgid = dgid;
  attr.ah_attr.grh.hop_limit = 64;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return fail("modify to RTR");
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = uint8_t(timeout);
  attr.retry_cnt = uint8_t(retry);
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    return fail("modify to RTS");

  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof(buf), mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = 0x10000;
  wr.wr.rdma.rkey = 0x1234;
  const Clock::time_point t0 = Clock::now();
  if (ibv_post_send(qp, &wr, &bad)) return fail("ibv_post_send");
  ibv_wc wc{};
  int got = 0;
  while ((got = ibv_poll_cq(cq, 1, &wc)) == 0 && ms_since(t0) < 20000) {
  }
  const double after = ms_since(t0);
  const double budget = (retry + 1) * 4.096e-3 * double(1u << timeout);
  if (got < 0) return fail("ibv_poll_cq");
  const Clock::time_point t1 = Clock::now();
  const bool destroyed = ibv_destroy_qp(qp) == 0;
  const double destroy_ms = ms_since(t1);
  std::printf("status=%s after_ms=%.0f budget_ms=%.0f destroy_ms=%.0f\n",
              got ? ibv_wc_status_str(wc.status) : "none", after, budget, destroy_ms);
  if (!got) return fail("no completion within 20 s");
  if (wc.status != IBV_WC_RETRY_EXC_ERR) return fail("not IBV_WC_RETRY_EXC_ERR");
  if (after < budget / 2 || after > budget * 3 / 2) return fail("outside the retry budget");
  if (!destroyed) return fail("ibv_destroy_qp");
  // vrnicd must not wait for the address to fail (1 s after the first frame) to destroy it.
  if (destroy_ms > 250) return fail("ibv_destroy_qp took longer than 250 ms");
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}
