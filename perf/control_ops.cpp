// control_ops: what the verbs control path costs, call by call, on any verbs device (issue
// 29): ibv_reg_mr + ibv_dereg_mr of SIZE bytes (the same buffer again, and a fresh one each
// time: a first registration is where vrnic converts the pages, issue 53), ibv_create_cq +
// ibv_destroy_cq, and
// ibv_create_qp + modify to INIT + ibv_destroy_qp, N times each; the median and the 99th
// percentile of each call, in microseconds, one line per call (key=value).
//
// control_ops --hold N: makes N MRs, N CQs, N SRQs and N MWs and keeps them, prints made=N,
// and exits at a line on stdin (what a test compares vrnicd's worker_stops across).
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char *what) {
  std::perror(what);
  std::exit(2);
}

struct Samples {
  const char *name;
  std::vector<double> us;
  void report() {
    std::sort(us.begin(), us.end());
    std::printf("%s median_us=%.1f p99_us=%.1f n=%zu\n", name, us[us.size() / 2],
                us[std::min(us.size() - 1, us.size() * 99 / 100)], us.size());
  }
};

template <typename Fn>
auto timed(Samples &s, Fn &&fn) {
  const auto t = Clock::now();
  auto r = fn();
  s.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  return r;
}

}  // namespace

// Objects made and kept, until a line comes on stdin.
int hold(ibv_context *ctx, ibv_pd *pd, void *buf, size_t size, int n) {
  for (int i = 0; i < n; i++) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 1;
    sa.attr.max_sge = 1;
    if (!ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE) ||
        !ibv_create_cq(ctx, 1, nullptr, nullptr, 0) || !ibv_create_srq(pd, &sa) ||
        !ibv_alloc_mw(pd, IBV_MW_TYPE_2))
      die("making objects to hold");
  }
  std::printf("made=%d\n", n);
  std::fflush(stdout);
  char line[16];
  if (!std::fgets(line, sizeof(line), stdin)) return 0;  // stdin closed: as good as a line
  return 0;
}

int main(int argc, char **argv) {
  const bool holding = argc > 2 && !std::strcmp(argv[1], "--hold");
  if (holding) argv++, argc--;
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  const size_t size = argc > 2 ? std::strtoul(argv[2], nullptr, 0) : 4096;
  if (n < (holding ? 0 : 1) || size < 1) {
    std::fprintf(stderr, "usage: control_ops [N [SIZE]] | --hold N\n");
    return 2;
  }
  int count = 0;
  ibv_device **list = ibv_get_device_list(&count);
  if (!list || !count) die("no verbs device");
  ibv_context *ctx = ibv_open_device(list[0]);
  if (!ctx) die("ibv_open_device");
  ibv_pd *pd = ibv_alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd");
  void *buf = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) die("mmap");
  if (holding) return hold(ctx, pd, buf, size, n);
  Samples reg{"ibv_reg_mr", {}}, dereg{"ibv_dereg_mr", {}}, fresh{"ibv_reg_mr_fresh", {}},
      mkcq{"ibv_create_cq", {}},
      rmcq{"ibv_destroy_cq", {}}, mkqp{"ibv_create_qp+INIT", {}}, rmqp{"ibv_destroy_qp", {}};
  ibv_cq *qp_cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  if (!qp_cq) die("ibv_create_cq");
  for (int i = 0; i < n; i++) {
    ibv_mr *mr = timed(reg, [&] { return ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE); });
    if (!mr) die("ibv_reg_mr");
    if (timed(dereg, [&] { return ibv_dereg_mr(mr); })) die("ibv_dereg_mr");
    void *new_buf =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (new_buf == MAP_FAILED) die("mmap");
    std::memset(new_buf, 1, size);  // its pages exist, as a program's buffer's do
    mr = timed(fresh, [&] { return ibv_reg_mr(pd, new_buf, size, IBV_ACCESS_LOCAL_WRITE); });
    if (!mr || ibv_dereg_mr(mr)) die("ibv_reg_mr of a fresh buffer");
    ::munmap(new_buf, size);
    ibv_cq *cq = timed(mkcq, [&] { return ibv_create_cq(ctx, 16, nullptr, nullptr, 0); });
    if (!cq) die("ibv_create_cq");
    if (timed(rmcq, [&] { return ibv_destroy_cq(cq); })) die("ibv_destroy_cq");
    ibv_qp *qp = timed(mkqp, [&]() -> ibv_qp * {
      ibv_qp_init_attr ia{};
      ia.send_cq = ia.recv_cq = qp_cq;
      ia.qp_type = IBV_QPT_RC;
      ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      ibv_qp *q = ibv_create_qp(pd, &ia);
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      if (q && ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_ACCESS_FLAGS))
        die("ibv_modify_qp");
      return q;
    });
    if (!qp) die("ibv_create_qp");
    if (timed(rmqp, [&] { return ibv_destroy_qp(qp); })) die("ibv_destroy_qp");
  }
  for (Samples *s : {&reg, &dereg, &fresh, &mkcq, &rmcq, &mkqp, &rmqp}) s->report();
  ibv_destroy_cq(qp_cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
