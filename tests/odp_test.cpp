// On-demand paging (IBV_ACCESS_ON_DEMAND, issue 32 item 1): what the device reports, ODP
// regions that follow the application's mappings (unmapped: an access error and vrnicd alive;
// mapped again: the new pages), implicit ODP over the whole address space, and
// ibv_advise_mr's answers. Plain verbs: on an ODP-capable NIC these pass as they do on vrnic.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs_fixture.h"

using namespace vt;

namespace {

constexpr unsigned kOdpAccess = kAllAccess | IBV_ACCESS_ON_DEMAND;

ibv_wc rdma(Pair &p, ibv_wr_opcode op, void *local, size_t len, uint32_t lkey, uint64_t remote,
            uint32_t rkey, const char *what) {
  ibv_sge sge = make_sge(local, len, lkey);
  ibv_send_wr wr = make_send_wr(0x0D, op, &sge, 1);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  post_send(p.a.qp(), &wr);
  return poll_one(p.a.scq(), what);
}

// Both QPs through RESET and connected again, after an error took them to ERR.
void reconnect(Pair &p) {
  for (Endpoint *e : {&p.a, &p.b}) {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RESET;
    REQUIRE(ibv_modify_qp(e->qp(), &at, IBV_QP_STATE) == 0);
  }
  ibv_wc wc;
  while (ibv_poll_cq(p.a.scq(), 1, &wc) > 0 || ibv_poll_cq(p.b.rcq(), 1, &wc) > 0) {
  }
  REQUIRE(try_connect(*p.dev, p.a, p.cfg, local_info(*p.dev, p.b)).empty());
  REQUIRE(try_connect(*p.dev, p.b, p.cfg, local_info(*p.dev, p.a)).empty());
}

uint8_t *map_pages(size_t len, void *at = nullptr) {
  void *m = ::mmap(at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
  REQUIRE(m != MAP_FAILED);
  return static_cast<uint8_t *>(m);
}

}  // namespace

TEST_CASE("ibv_query_device_ex reports explicit and implicit ODP for RC, UC, UD and SRQs",
          "[odp]") {
  auto dev = open_device();
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(dev->ctx.get(), nullptr, &attr) == 0);
  const ibv_odp_caps &odp = attr.odp_caps;
  CHECK(odp.general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  const uint32_t recvs = IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  CHECK(odp.per_transport_caps.rc_odp_caps ==
        (IBV_ODP_SUPPORT_SEND | recvs | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
         IBV_ODP_SUPPORT_ATOMIC | (1 << 7) /* IBV_ODP_SUPPORT_ATOMIC_WRITE, rdma-core 45 */));
  CHECK(odp.per_transport_caps.uc_odp_caps == (IBV_ODP_SUPPORT_SEND | recvs | IBV_ODP_SUPPORT_WRITE));
  CHECK(odp.per_transport_caps.ud_odp_caps == (IBV_ODP_SUPPORT_SEND | recvs));
}

TEST_CASE("an ODP region follows the mappings: unmapped, REM_ACCESS_ERR; mapped again, the new "
          "pages",
          "[odp]") {
  Pair p;
  constexpr size_t kLen = 4 * kPage;
  // Registered before its pages are touched: nothing is faulted in or pinned at registration.
  uint8_t *target = map_pages(kLen);
  MrPtr odp = reg_mr(p.b.pd(), target, kLen, kOdpAccess);
  const uint64_t at = reinterpret_cast<uint64_t>(target);
  Region src(p.a.pd(), kLen, seed_for("odp src"));

  ibv_wc wc = rdma(p, IBV_WR_RDMA_WRITE, src.payload(), kLen, src.lkey(), at, odp->rkey,
                   "WRITE into untouched ODP pages");
  check_wc(wc, want("WRITE into ODP", 0x0D, p.a.qpn()));
  VT_REQUIRE_BYTES("ODP pages after the WRITE", target, src.payload(), kLen);

  // The application unmaps one page of it: the NIC's access there is an access error, and
  // the daemon lives on.
  REQUIRE(::munmap(target + kPage, kPage) == 0);
  wc = rdma(p, IBV_WR_RDMA_WRITE, src.payload(), kLen, src.lkey(), at, odp->rkey,
            "WRITE over an unmapped ODP page");
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  reconnect(p);
  Region small(p.a.pd(), 64, seed_for("odp small"));
  wc = rdma(p, IBV_WR_RDMA_READ, small.payload(), 64, small.lkey(), at + kPage + 8, odp->rkey,
            "READ of an unmapped ODP page");
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  reconnect(p);

  // Mapped again at the same address with other bytes: the same region reads those.
  uint8_t *again = map_pages(kPage, target + kPage);
  fill_pattern(again, kPage, seed_for("odp remapped"));
  Region back(p.a.pd(), kPage, seed_for("odp back"));
  wc = rdma(p, IBV_WR_RDMA_READ, back.payload(), kPage, back.lkey(), at + kPage, odp->rkey,
            "READ of the page mapped again");
  check_wc(wc, want("READ of the remapped page", 0x0D, p.a.qpn()));
  VT_REQUIRE_BYTES("READ of the remapped page", back.payload(), again, kPage);
  odp.reset();
  REQUIRE(::munmap(target, kLen) == 0);
}

TEST_CASE("a local ODP buffer unmapped after registration: LOC_PROT_ERR", "[odp]") {
  Pair p;
  uint8_t *buf = map_pages(2 * kPage);
  fill_pattern(buf, 2 * kPage, seed_for("odp local"));
  MrPtr odp = reg_mr(p.a.pd(), buf, 2 * kPage, kOdpAccess);
  Region dst(p.b.pd(), kPage, seed_for("odp local dst"));
  ibv_wc wc = rdma(p, IBV_WR_RDMA_WRITE, buf + kPage, kPage, odp->lkey, dst.addr(), dst.rkey(),
                   "WRITE from an ODP page");
  check_wc(wc, want("WRITE from ODP", 0x0D, p.a.qpn()));
  VT_REQUIRE_BYTES("WRITE from an ODP page", dst.payload(), buf + kPage, kPage);
  REQUIRE(::munmap(buf + kPage, kPage) == 0);
  wc = rdma(p, IBV_WR_RDMA_WRITE, buf + kPage, kPage, odp->lkey, dst.addr(), dst.rkey(),
            "WRITE from an unmapped ODP page");
  CHECK(wc.status == IBV_WC_LOC_PROT_ERR);
  odp.reset();
  ::munmap(buf, kPage);
}

TEST_CASE("implicit ODP: one region over the address space reaches heap, stack and mmap",
          "[odp]") {
  Pair p;
  errno = 0;
  MrPtr all(ibv_reg_mr(p.b.pd(), nullptr, SIZE_MAX, kOdpAccess));
  INFO("errno " << errno);
  REQUIRE(all);
  CHECK(all->addr == nullptr);
  CHECK(all->length == SIZE_MAX);
  MrPtr mine(ibv_reg_mr(p.a.pd(), nullptr, SIZE_MAX, kOdpAccess));
  REQUIRE(mine);
  std::vector<uint8_t> heap(3000);
  uint8_t stack[512];
  uint8_t *mapped = map_pages(kPage);
  for (auto [dst, len] : {std::pair{heap.data(), heap.size()}, std::pair{stack, sizeof stack},
                          std::pair{mapped, size_t(kPage)}}) {
    std::vector<uint8_t> from = make_pattern(len, seed_for("implicit", len));
    std::memset(dst, 0, len);
    ibv_wc wc = rdma(p, IBV_WR_RDMA_WRITE, from.data(), len, mine->lkey,
                     reinterpret_cast<uint64_t>(dst), all->rkey, "WRITE through implicit ODP");
    check_wc(wc, want("implicit WRITE", 0x0D, p.a.qpn()));
    VT_REQUIRE_BYTES("WRITE through implicit ODP", dst, from.data(), len);
  }
  // An address nothing is mapped at: an access error.
  REQUIRE(::munmap(mapped, kPage) == 0);
  uint8_t one[8] = {};
  ibv_wc wc = rdma(p, IBV_WR_RDMA_READ, one, 8, mine->lkey, reinterpret_cast<uint64_t>(mapped),
                   all->rkey, "READ of an unmapped address");
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  // Implicit means NULL and SIZE_MAX with IOVA 0.
  errno = 0;
  CHECK(ibv_reg_mr_iova(p.b.pd(), nullptr, SIZE_MAX, 4096, kOdpAccess) == nullptr);
  CHECK(errno == EINVAL);
}

TEST_CASE("ibv_advise_mr: prefetch of ODP ranges and each error as mlx5 gives it", "[odp]") {
  auto dev = open_device();
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  PdPtr other(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE((pd && other));
  uint8_t *buf = map_pages(4 * kPage);
  MrPtr odp = reg_mr(pd.get(), buf, 4 * kPage, kOdpAccess);
  MrPtr ro = reg_mr(pd.get(), buf, 4 * kPage, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_READ);
  AlignedBuf plain_buf(kPage);
  MrPtr plain = reg_mr(pd.get(), plain_buf.data(), kPage, IBV_ACCESS_LOCAL_WRITE);
  const uint64_t at = reinterpret_cast<uint64_t>(buf);
  ibv_sge sge{at + 100, uint32_t(3 * kPage), odp->lkey};
  constexpr auto kFlush = IBV_ADVISE_MR_FLAG_FLUSH;

  for (auto advice : {IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                      IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT})
    for (uint32_t flags : {0u, uint32_t(kFlush)}) CHECK(ibv_advise_mr(pd.get(), advice, flags, &sge, 1) == 0);
  // Prefetched for writing: the pages are there (mincore says so).
  unsigned char resident[4] = {};
  REQUIRE(::mincore(buf, 4 * kPage, resident) == 0);
  CHECK((resident[0] & resident[1] & resident[2] & resident[3] & 1) == 1);

  CHECK(ibv_advise_mr(pd.get(), ibv_advise_mr_advice(7), 0, &sge, 1) == EOPNOTSUPP);
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sge, 1) == EINVAL);
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0) == EINVAL);
  ibv_sge past{at + 4 * kPage - 8, 16, odp->lkey};
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, &past, 1) == EFAULT);
  ibv_sge not_odp{reinterpret_cast<uint64_t>(plain_buf.data()), 64, plain->lkey};
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, &not_odp, 1) == ENOENT);
  CHECK(ibv_advise_mr(other.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, &sge, 1) == ENOENT);
  ibv_sge read_only{at, 64, ro->lkey};
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, &read_only, 1) == 0);
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, kFlush, &read_only, 1) ==
        ENOENT);
  // Memory unmapped under the region: a synchronous prefetch says EFAULT, the best-effort
  // one nothing.
  REQUIRE(::munmap(buf + kPage, kPage) == 0);
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, &sge, 1) == EFAULT);
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == 0);
  // A deregistered region's lkey names nothing.
  const uint32_t gone = odp->lkey;
  odp.reset();
  sge.lkey = gone;
  CHECK(ibv_advise_mr(pd.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, &sge, 1) == ENOENT);
  ro.reset();
  ::munmap(buf, 4 * kPage);
}

TEST_CASE("ODP regions are not pinned: they do not count as mr_bytes", "[odp]") {
  auto dev = open_device();
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  std::string err;
  auto before = read_vrnic_stats(&err);
  INFO(err);
  REQUIRE(before);
  // Far more than this machine could pin, and than the user's mr_bytes limit.
  constexpr size_t kBig = size_t(64) << 30;
  void *reserved = ::mmap(nullptr, kBig, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(reserved != MAP_FAILED);
  MrPtr odp = reg_mr(pd.get(), reserved, kBig, kOdpAccess);
  auto after = read_vrnic_stats(&err);
  REQUIRE(after);
  CHECK((*after)["user_mr_bytes"] == (*before)["user_mr_bytes"]);
  CHECK((*after)["mrs"] == (*before)["mrs"] + 1);
  odp.reset();
  ::munmap(reserved, kBig);
}
