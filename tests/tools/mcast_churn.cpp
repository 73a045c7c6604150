// mcast_churn: multicast attachments churned (issue 52, by reading: each attach and detach
// republished every group, and worker 0's port compared each group with every other). A UD QP
// of ours attaches to GROUPS groups, then detaches and attaches one after another for
// SECONDS; vrnicd must answer others meanwhile (the hostile group probes it). Prints
// attached=N churned=N; exits 0 unless setup failed (2).
//
//   mcast_churn SOCKET SECONDS GROUPS
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "first_device.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: mcast_churn SOCKET SECONDS GROUPS\n");
    return 2;
  }
  ::setenv("VRNIC_SOCKET", argv[1], 1);
  const double seconds = std::atof(argv[2]);
  const int groups = std::atoi(argv[3]);
  const char *why = nullptr;
  ibv_context *ctx = open_first_device(&why);
  ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  ibv_cq *cq = pd ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_UD;
  a.cap = {1, 1, 1, 1, 0};
  ibv_qp *qp = cq ? ibv_create_qp(pd, &a) : nullptr;
  if (!qp) {
    std::printf("setup_error=%s\n", why ? why : "a UD QP");
    return 2;
  }
  auto gid_of = [](int i) {
    ibv_gid g{};
    g.raw[0] = 0xff;  // ff0e::/16, as rdma_cm maps IPv4 groups (::ffff:239.x.y.z)
    g.raw[1] = 0x0e;
    g.raw[10] = g.raw[11] = 0xff;
    g.raw[12] = 239;
    g.raw[13] = 1;
    g.raw[14] = uint8_t(i >> 8);
    g.raw[15] = uint8_t(i);
    return g;
  };
  int attached = 0;
  for (int i = 0; i < groups; i++) {
    ibv_gid g = gid_of(i);
    if (ibv_attach_mcast(qp, &g, 0) == 0) attached++;
  }
  long churned = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0; std::chrono::steady_clock::now() < end; i = (i + 1) % groups, churned++) {
    ibv_gid g = gid_of(i);
    ibv_detach_mcast(qp, &g, 0);
    ibv_attach_mcast(qp, &g, 0);
  }
  std::printf("attached=%d churned=%ld\n", attached, churned);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}
