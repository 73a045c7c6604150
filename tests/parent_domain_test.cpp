// Thread domains and parent domains (issue 32 item 4): ibv_alloc_td and ibv_dealloc_td,
// ibv_alloc_parent_domain with a thread domain and a pd_context and its errors (custom
// allocators EOPNOTSUPP, as EFA answers), what each holds busy, and QPs, CQs and MRs made in a
// parent domain carrying data with those of its protection domain.
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>

#include "verbs_fixture.h"

using namespace vt;

namespace {

void *never_alloc(ibv_pd *, void *, size_t, size_t, uint64_t) {
  return IBV_ALLOCATOR_USE_DEFAULT;
}
void never_free(ibv_pd *, void *, void *, uint64_t) {}

}  // namespace

TEST_CASE("ibv_alloc_td and ibv_alloc_parent_domain: arguments, and what each holds busy",
          "[parent-domain]") {
  auto dev = open_device();
  ibv_context *ctx = dev->ctx.get();
  ibv_td_init_attr td_attr{1};
  errno = 0;
  CHECK(ibv_alloc_td(ctx, &td_attr) == nullptr);
  CHECK(errno == EINVAL);
  td_attr.comp_mask = 0;
  ibv_td *td = ibv_alloc_td(ctx, &td_attr);
  REQUIRE(td);
  CHECK(td->context == ctx);
  ibv_pd *pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);

  ibv_parent_domain_init_attr a{};
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &a) == nullptr);  // no PD
  CHECK(errno == EINVAL);
  a.pd = pd;
  a.td = td;
  a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  a.alloc = never_alloc;
  a.free = never_free;
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &a) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  int context_word = 7;
  a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  a.pd_context = &context_word;
  ibv_pd *parent = ibv_alloc_parent_domain(ctx, &a);
  REQUIRE(parent);
  CHECK(parent->context == ctx);
  CHECK(parent->handle == pd->handle);  // vrnicd's PD is its protection domain's
  ibv_parent_domain_init_attr nested{};
  nested.pd = parent;
  errno = 0;
  CHECK(ibv_alloc_parent_domain(ctx, &nested) == nullptr);
  CHECK(errno == EINVAL);

  CHECK(ibv_dealloc_td(td) == EBUSY);  // the parent domain holds it
  CHECK(ibv_dealloc_pd(pd) == EBUSY);  // and its protection domain
  CHECK(ibv_dealloc_pd(parent) == 0);
  CHECK(ibv_dealloc_td(td) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
}

TEST_CASE("a QP, a CQ and MRs made in a parent domain carry data with its protection domain's",
          "[parent-domain]") {
  Pair p;
  ibv_context *ctx = p.dev->ctx.get();
  ibv_td_init_attr td_attr{};
  ibv_td *td = ibv_alloc_td(ctx, &td_attr);
  REQUIRE(td);
  ibv_parent_domain_init_attr a{};
  a.pd = p.a.pd();
  a.td = td;
  ibv_pd *parent = ibv_alloc_parent_domain(ctx, &a);
  REQUIRE(parent);
  {
    // An extended CQ in the parent domain; a protection domain there is EINVAL.
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 64;
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    ca.parent_domain = parent;
    ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
    REQUIRE(cq);
    // A QP of the parent domain in place of p.a's, connected to p.b.
    Endpoint e;
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cq);
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {16, 16, 1, 1, 0};
    e.qp_.reset(ibv_create_qp(parent, &qa));
    REQUIRE(e.qp_);
    CHECK(e.qp_->pd == parent);
    e.psn = 0x2222;
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    REQUIRE(ibv_modify_qp(p.b.qp(), &reset, IBV_QP_STATE) == 0);
    REQUIRE(try_connect(*p.dev, e, p.cfg, local_info(*p.dev, p.b)).empty());
    REQUIRE(try_connect(*p.dev, p.b, p.cfg, local_info(*p.dev, e)).empty());
    // Its source registered in the parent domain, the target in p.b's PD.
    Region src(parent, 5000, seed_for("parent src"));
    Region dst(p.b.pd(), 5000, seed_for("parent dst"));
    CHECK(src.mr->pd == parent);
    ibv_sge sge = make_sge(src.payload(), 5000, src.lkey());
    ibv_send_wr wr = make_send_wr(0x77, IBV_WR_RDMA_WRITE, &sge, 1);
    wr.wr.rdma.remote_addr = dst.addr();
    wr.wr.rdma.rkey = dst.rkey();
    post_send(e.qp(), &wr);
    check_wc(poll_one(ibv_cq_ex_to_cq(cq), "WRITE from the parent domain"),
             want("WRITE from the parent domain", 0x77, e.qpn()));
    VT_REQUIRE_BYTES("WRITE from the parent domain", dst.payload(), src.payload(), 5000);
    // A SEND into a receive of p.b.
    Region rbuf(p.b.pd(), 600, seed_for("parent rbuf"));
    ibv_sge rsge = make_sge(rbuf.payload(), 600, rbuf.lkey());
    ibv_recv_wr rwr = make_recv_wr(0x88, &rsge, 1);
    post_recv(p.b.qp(), &rwr);
    ibv_sge ssge = make_sge(src.payload(), 600, src.lkey());
    ibv_send_wr swr = make_send_wr(0x78, IBV_WR_SEND, &ssge, 1);
    post_send(e.qp(), &swr);
    check_wc(poll_one(ibv_cq_ex_to_cq(cq), "SEND from the parent domain"),
             want("SEND from the parent domain", 0x78, e.qpn()));
    check_wc(poll_one(p.b.rcq(), "receive"),
             want("receive", 0x88, p.b.qpn(), IBV_WC_SUCCESS, IBV_WC_RECV, 600, true));
    VT_REQUIRE_BYTES("SEND from the parent domain", rbuf.payload(), src.payload(), 600);
    e.qp_.reset();
    CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
  }
  CHECK(ibv_dealloc_pd(parent) == 0);
  CHECK(ibv_dealloc_td(td) == 0);
}
