// What vrnic does not have fails the way rdma-core documents for a device without it:
// NULL with errno EOPNOTSUPP (or that errno returned), never a crash. README lists these.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>

namespace {

struct Device {
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  Device() {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    REQUIRE(list);
    REQUIRE(n == 1);
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    REQUIRE(ctx);
    pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
    cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    REQUIRE(cq);
  }
  ~Device() {
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
};

}  // namespace

TEST_CASE("dma-buf registration is not supported", "[unsupported]") {
  Device d;
  errno = 0;
  CHECK(ibv_reg_dmabuf_mr(d.pd, 0, 4096, 0, 3, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EOPNOTSUPP);
}

TEST_CASE("flow steering, WQs, RSS tables, counters are not supported", "[unsupported]") {
  Device d;
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = d.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {4, 4, 1, 1, 0};
  ibv_qp *qp = ibv_create_qp(d.pd, &qa);
  REQUIRE(qp);
  ibv_flow_attr flow{};
  flow.size = sizeof(flow);
  flow.port = 1;
  errno = 0;
  CHECK(ibv_create_flow(qp, &flow) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  CHECK(ibv_destroy_qp(qp) == 0);

  ibv_wq_init_attr wq{};
  wq.wq_type = IBV_WQT_RQ;
  wq.max_wr = 4;
  wq.max_sge = 1;
  wq.pd = d.pd;
  wq.cq = d.cq;
  errno = 0;
  CHECK(ibv_create_wq(d.ctx, &wq) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ibv_rwq_ind_table_init_attr ind{};
  errno = 0;
  CHECK(ibv_create_rwq_ind_table(d.ctx, &ind) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ibv_counters_init_attr counters{};
  errno = 0;
  CHECK(ibv_create_counters(d.ctx, &counters) == nullptr);
  CHECK(errno == EOPNOTSUPP);
}

TEST_CASE("raw packet QPs are refused", "[unsupported]") {
  Device d;
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = d.cq;
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.cap = {4, 4, 1, 1, 0};
  errno = 0;
  CHECK(ibv_create_qp(d.pd, &qa) == nullptr);
  CHECK(errno == EOPNOTSUPP);
}

TEST_CASE("QP create flags: the mask alone is fine, any flag is EOPNOTSUPP", "[unsupported]") {
  Device d;
  ibv_qp_init_attr_ex qa{};
  qa.send_cq = qa.recv_cq = d.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {4, 4, 1, 1, 0};
  qa.pd = d.pd;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  SECTION("no flags: created (pyverbs names the field with nothing in it)") {
    ibv_qp *qp = ibv_create_qp_ex(d.ctx, &qa);
    REQUIRE(qp != nullptr);
    CHECK(ibv_destroy_qp(qp) == 0);
  }
  SECTION("a flag (scatter FCS, block self-multicast loopback, source QPN): EOPNOTSUPP") {
    for (uint32_t flag :
         {uint32_t(IBV_QP_CREATE_SCATTER_FCS), uint32_t(IBV_QP_CREATE_BLOCK_SELF_MCAST_LB),
          uint32_t(IBV_QP_CREATE_SOURCE_QPN)}) {
      qa.create_flags = flag;
      errno = 0;
      CHECK(ibv_create_qp_ex(d.ctx, &qa) == nullptr);
      CHECK(errno == EOPNOTSUPP);
    }
  }
}
