// dm_lat: SEND latency from device memory against host memory (issue 32, device memory's
// performance line), on any verbs device with ibv_alloc_dm, as perftest runs (perftest has
// no device-memory mode). Two RC QPs of one process connected to each other on one device
// ping-pong SENDs of SIZE bytes, N times, first with the messages in host memory, then in
// device memory (ibv_alloc_dm + ibv_reg_dm_mr, zero based); half of each round trip is one
// latency sample. Every message is checked byte for byte on arrival.
//
// Usage: dm_lat [-d DEVICE] [-s SIZE] [-n ITERS] [-p]   (-p: host MRs of just the buffer,
// not its whole pages)
// Output: one line per run, "memory=host|host-part-page|dm size=S iters=N median_us=M p99_us=P".
#include <getopt.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char *what, int err = errno) {
  std::fprintf(stderr, "dm_lat: %s: %s\n", what, std::strerror(err));
  std::exit(2);
}

struct End {
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  ibv_mr *mr = nullptr;
  ibv_dm *dm = nullptr;
  uint8_t *host = nullptr;
  uint64_t addr = 0;  // of the message in the MR's address space (0 for device memory)
};

void to_rts(ibv_qp *qp, uint32_t dest, const ibv_gid &gid, uint8_t port) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify INIT");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = port;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV))
    die("modify RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify RTS");
}

void post_recv(End &e, uint32_t size) {
  ibv_sge sge{e.addr + size, size, e.mr->lkey};  // receive into the second half
  ibv_recv_wr wr{}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (int err = ibv_post_recv(e.qp, &wr, &bad)) die("post_recv", err);
}

void post_send(End &e, uint32_t size) {
  ibv_sge sge{e.addr, size, e.mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (int err = ibv_post_send(e.qp, &wr, &bad)) die("post_send", err);
}

// Waits for n completions on the end's CQ (send and receive share it).
void wait(End &e, int n) {
  ibv_wc wc[2];
  while (n > 0) {
    int got = ibv_poll_cq(e.cq, 2, wc);
    if (got < 0) die("poll_cq");
    for (int i = 0; i < got; i++)
      if (wc[i].status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "dm_lat: completion %s\n", ibv_wc_status_str(wc[i].status));
        std::exit(1);
      }
    n -= got;
  }
}

// What arrived in the end's receive half, against what the peer sent.
void check(End &to, const std::vector<uint8_t> &sent, uint32_t size) {
  std::vector<uint8_t> got(size);
  if (to.dm) {
    if (ibv_memcpy_from_dm(got.data(), to.dm, size, size)) die("memcpy_from_dm");
  } else {
    std::memcpy(got.data(), to.host + size, size);
  }
  if (got != sent) {
    std::fprintf(stderr, "dm_lat: data mismatch\n");
    std::exit(1);
  }
}

bool partial_pages = false;  // -p

void run(ibv_context *ctx, ibv_pd *pd, const ibv_gid &gid, bool dm, uint32_t size, int iters) {
  End ends[2];
  const uint32_t bytes = 2 * size;  // message, then receive buffer
  std::vector<uint8_t> msg(size);
  for (uint32_t i = 0; i < size; i++) msg[i] = uint8_t(i * 7 + (dm ? 1 : 2));
  for (End &e : ends) {
    if (!(e.cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0))) die("create_cq");
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = e.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {4, 4, 1, 1, 0};
    if (!(e.qp = ibv_create_qp(pd, &qa))) die("create_qp");
    if (dm) {
      ibv_alloc_dm_attr da{bytes, 0, 0};
      if (!(e.dm = ibv_alloc_dm(ctx, &da))) die("alloc_dm");
      e.mr = ibv_reg_dm_mr(pd, e.dm, 0, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
      if (!e.mr) die("reg_dm_mr");
      if (ibv_memcpy_to_dm(e.dm, 0, msg.data(), size)) die("memcpy_to_dm");
    } else {
      // Whole pages, as perftest registers its buffers: on vrnic an MR's whole pages are
      // shared with vrnicd, and the rest of a page reached through /proc/<pid>/mem, a system
      // call per access (-p registers just the 2 x SIZE bytes, to see that cost).
      const size_t pages = (bytes + 4095) / 4096 * 4096;
      e.host = static_cast<uint8_t *>(std::aligned_alloc(4096, pages));
      std::memcpy(e.host, msg.data(), size);
      if (!(e.mr = ibv_reg_mr(pd, e.host, partial_pages ? bytes : pages, IBV_ACCESS_LOCAL_WRITE)))
        die("reg_mr");
      e.addr = reinterpret_cast<uint64_t>(e.host);
    }
  }
  to_rts(ends[0].qp, ends[1].qp->qp_num, gid, 1);
  to_rts(ends[1].qp, ends[0].qp->qp_num, gid, 1);
  std::vector<double> half_rtt;
  half_rtt.reserve(size_t(iters));
  for (int i = 0; i < iters + 100; i++) {  // the first 100 warm up
    post_recv(ends[1], size);
    post_recv(ends[0], size);
    const auto t0 = Clock::now();
    post_send(ends[0], size);
    wait(ends[1], 1);  // the ping arrived
    post_send(ends[1], size);
    wait(ends[0], 2);  // our send done, the pong arrived
    const auto t1 = Clock::now();
    wait(ends[1], 1);  // its send done
    if (i >= 100) half_rtt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    if (i == 100) {  // once: every byte right, both ways
      check(ends[1], msg, size);
      check(ends[0], msg, size);
    }
  }
  std::sort(half_rtt.begin(), half_rtt.end());
  std::printf("memory=%s size=%u iters=%d median_us=%.2f p99_us=%.2f\n",
              dm ? "dm" : partial_pages ? "host-part-page" : "host", size,
              iters, half_rtt[half_rtt.size() / 2], half_rtt[half_rtt.size() * 99 / 100]);
  for (End &e : ends) {
    ibv_destroy_qp(e.qp);
    ibv_destroy_cq(e.cq);
    ibv_dereg_mr(e.mr);
    if (e.dm) ibv_free_dm(e.dm);
    std::free(e.host);
  }
}

}  // namespace

int main(int argc, char **argv) {
  const char *name = nullptr;
  uint32_t size = 64;
  int iters = 10000;
  for (int c; (c = getopt(argc, argv, "d:s:n:p")) != -1;) {
    if (c == 'p') partial_pages = true;
    else if (c == 'd') name = optarg;
    else if (c == 's') size = uint32_t(std::atoi(optarg));
    else if (c == 'n') iters = std::atoi(optarg);
    else {
      std::fprintf(stderr, "usage: dm_lat [-d DEVICE] [-s SIZE] [-n ITERS] [-p]\n");
      return 2;
    }
  }
  if (size == 0 || size % 4 || iters < 1) {
    std::fprintf(stderr, "dm_lat: SIZE a positive multiple of 4, ITERS positive\n");
    return 2;
  }
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_device *dev = nullptr;
  for (int i = 0; i < n && !dev; i++)
    if (!name || std::strcmp(ibv_get_device_name(list[i]), name) == 0) dev = list[i];
  if (!dev) die("no such device", ENODEV);
  ibv_context *ctx = ibv_open_device(dev);
  if (!ctx) die("open_device");
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_gid gid;
  if (!pd || ibv_query_gid(ctx, 1, 0, &gid)) die("alloc_pd / query_gid");
  // Each twice, alternating, so that neither gains from going second.
  for (int round = 0; round < 2; round++) {
    run(ctx, pd, gid, false, size, iters);
    run(ctx, pd, gid, true, size, iters);
  }
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
