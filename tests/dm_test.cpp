// Device memory (issue 32 item 2): ibv_alloc_dm and its limits, ibv_memcpy_to_dm/from_dm and
// their errors, ibv_reg_dm_mr (zero based) and its errors, and device memory as the source
// and target of WRITE, READ, SEND, receives and atomics. Two QPs of one process: the direct
// path takes WRITE, READ and atomics (the catch2 group runs it again with VRNIC_DIRECT_PATH=0).
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs_fixture.h"

using namespace vt;

namespace {

constexpr unsigned kDmAccess = kAllAccess | IBV_ACCESS_ZERO_BASED;

struct DmDeleter {
  void operator()(ibv_dm *dm) const {
    if (dm) CHECK(ibv_free_dm(dm) == 0);
  }
};
using DmPtr = std::unique_ptr<ibv_dm, DmDeleter>;

DmPtr alloc_dm(ibv_context *ctx, size_t len) {
  ibv_alloc_dm_attr attr{len, 0, 0};
  errno = 0;
  DmPtr dm(ibv_alloc_dm(ctx, &attr));
  INFO("ibv_alloc_dm(" << len << "): errno " << errno);
  REQUIRE(dm);
  return dm;
}

MrPtr reg_dm(ibv_pd *pd, ibv_dm *dm, uint64_t offset, size_t len, unsigned access = kDmAccess) {
  errno = 0;
  MrPtr mr(ibv_reg_dm_mr(pd, dm, offset, len, access));
  INFO("ibv_reg_dm_mr: errno " << errno);
  REQUIRE(mr);
  return mr;
}

ibv_wc post_one(Pair &p, ibv_wr_opcode op, ibv_sge sge, uint64_t remote, uint32_t rkey,
                const char *what) {
  ibv_send_wr wr = make_send_wr(0xD3, op, &sge, 1);
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 5;
  } else {
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
  }
  post_send(p.a.qp(), &wr);
  return poll_one(p.a.scq(), what);
}

std::vector<uint8_t> dm_bytes(ibv_dm *dm, uint64_t offset, size_t len) {
  std::vector<uint8_t> out(len);
  REQUIRE(ibv_memcpy_from_dm(out.data(), dm, offset, len) == 0);
  return out;
}

}  // namespace

TEST_CASE("ibv_alloc_dm: max_dm_size, and each error", "[dm]") {
  auto dev = open_device();
  ibv_device_attr_ex attr{};
  REQUIRE(ibv_query_device_ex(dev->ctx.get(), nullptr, &attr) == 0);
  REQUIRE(attr.max_dm_size >= 4096);
  { DmPtr whole = alloc_dm(dev->ctx.get(), attr.max_dm_size); }
  ibv_alloc_dm_attr too_big{attr.max_dm_size + 1, 0, 0};
  errno = 0;
  CHECK(ibv_alloc_dm(dev->ctx.get(), &too_big) == nullptr);
  CHECK(errno == ENOMEM);
  ibv_alloc_dm_attr mask{4096, 0, 1};
  errno = 0;
  CHECK(ibv_alloc_dm(dev->ctx.get(), &mask) == nullptr);
  CHECK(errno == EINVAL);
  ibv_alloc_dm_attr empty{0, 0, 0};
  errno = 0;
  CHECK(ibv_alloc_dm(dev->ctx.get(), &empty) == nullptr);
  CHECK(errno == EINVAL);
  ibv_alloc_dm_attr aligned{4096, 12, 0};  // a page's alignment is what it has
  DmPtr ok(ibv_alloc_dm(dev->ctx.get(), &aligned));
  CHECK(ok);
}

TEST_CASE("ibv_memcpy_to_dm/from_dm: bytes round trip; unaligned EINVAL, outside EFAULT",
          "[dm]") {
  auto dev = open_device();
  DmPtr dm = alloc_dm(dev->ctx.get(), 100);
  std::vector<uint8_t> data = make_pattern(100, seed_for("dm copy"));
  REQUIRE(ibv_memcpy_to_dm(dm.get(), 0, data.data(), 100) == 0);
  VT_REQUIRE_BYTES("DM read back", dm_bytes(dm.get(), 0, 100).data(), data.data(), 100);
  std::vector<uint8_t> part = dm_bytes(dm.get(), 40, 20);
  VT_REQUIRE_BYTES("DM part read back", part.data(), data.data() + 40, 20);
  uint8_t buf[128] = {};
  CHECK(ibv_memcpy_to_dm(dm.get(), 2, buf, 4) == EINVAL);
  CHECK(ibv_memcpy_to_dm(dm.get(), 4, buf, 6) == EINVAL);
  CHECK(ibv_memcpy_from_dm(buf, dm.get(), 1, 4) == EINVAL);
  CHECK(ibv_memcpy_to_dm(dm.get(), 104, buf, 4) == EFAULT);
  CHECK(ibv_memcpy_to_dm(dm.get(), 0, buf, 104) == EFAULT);
  CHECK(ibv_memcpy_from_dm(buf, dm.get(), 96, 8) == EFAULT);
  // Nothing of the failed copies landed.
  VT_REQUIRE_BYTES("DM after failed copies", dm_bytes(dm.get(), 0, 100).data(), data.data(), 100);
}

TEST_CASE("ibv_reg_dm_mr: zero based, inside the DM; ibv_free_dm EBUSY while an MR is on it",
          "[dm]") {
  auto dev = open_device();
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  DmPtr dm = alloc_dm(dev->ctx.get(), 100);
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd.get(), dm.get(), 0, 100, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EINVAL);  // not zero based
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd.get(), dm.get(), 0, 104, kDmAccess) == nullptr);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd.get(), dm.get(), 96, 8, kDmAccess) == nullptr);
  CHECK(errno == EINVAL);
  errno = 0;
  CHECK(ibv_reg_dm_mr(pd.get(), dm.get(), 0, 64, kDmAccess | IBV_ACCESS_MW_BIND) == nullptr);
  CHECK(errno == EINVAL);
  // Length 0 is an MR, as the kernel registers one (rdma-core's suite does).
  MrPtr none = reg_dm(pd.get(), dm.get(), 100, 0);
  none.reset();
  MrPtr mr = reg_dm(pd.get(), dm.get(), 8, 64);
  CHECK(mr->addr == nullptr);
  CHECK(mr->length == 64);
  CHECK(ibv_free_dm(dm.get()) == EBUSY);
  mr.reset();
  CHECK(ibv_free_dm(dm.release()) == 0);
}

TEST_CASE("device memory as the source and target of WRITE, READ, SEND, receives and atomics",
          "[dm]") {
  Pair p;
  constexpr size_t kLen = 8192, kOff = 256;
  // Each side a DM with an MR over part of it, zero based at kOff.
  DmPtr dm_a = alloc_dm(p.dev->ctx.get(), kLen + kOff);
  DmPtr dm_b = alloc_dm(p.dev->ctx.get(), kLen + kOff);
  MrPtr mr_a = reg_dm(p.a.pd(), dm_a.get(), kOff, kLen);
  MrPtr mr_b = reg_dm(p.b.pd(), dm_b.get(), kOff, kLen);
  std::vector<uint8_t> data = make_pattern(kLen, seed_for("dm data"));
  REQUIRE(ibv_memcpy_to_dm(dm_a.get(), kOff, data.data(), kLen) == 0);

  // WRITE from device memory into device memory, by IOVA 0 on both sides.
  ibv_wc wc = post_one(p, IBV_WR_RDMA_WRITE, ibv_sge{0, uint32_t(kLen), mr_a->lkey}, 0,
                       mr_b->rkey, "WRITE DM to DM");
  check_wc(wc, want("WRITE DM to DM", 0xD3, p.a.qpn()));
  VT_REQUIRE_BYTES("WRITE DM to DM", dm_bytes(dm_b.get(), kOff, kLen).data(), data.data(), kLen);
  // READ from device memory into host memory.
  Region host(p.a.pd(), kLen, seed_for("dm host"));
  wc = post_one(p, IBV_WR_RDMA_READ, make_sge(host.payload(), kLen - 100, host.lkey()), 100,
                mr_b->rkey, "READ DM to host");
  check_wc(wc, want("READ DM to host", 0xD3, p.a.qpn()));
  VT_REQUIRE_BYTES("READ DM to host", host.payload(), data.data() + 100, kLen - 100);
  // A fetch-and-add on device memory.
  uint64_t before;
  std::memcpy(&before, data.data() + 64, 8);
  wc = post_one(p, IBV_WR_ATOMIC_FETCH_AND_ADD, make_sge(host.payload(), 8, host.lkey()), 64,
                mr_b->rkey, "FETCH_AND_ADD on DM");
  check_wc(wc, want("FETCH_AND_ADD on DM", 0xD3, p.a.qpn()));
  uint64_t got, now;
  std::memcpy(&got, host.payload(), 8);
  CHECK(got == before);
  std::vector<uint8_t> word = dm_bytes(dm_b.get(), kOff + 64, 8);
  std::memcpy(&now, word.data(), 8);
  CHECK(now == before + 5);
  // SEND from device memory into a receive in device memory.
  ibv_sge rsge{0, 1000, mr_b->lkey};
  ibv_recv_wr rwr = make_recv_wr(0xB3, &rsge, 1);
  post_recv(p.b.qp(), &rwr);
  wc = post_one(p, IBV_WR_SEND, ibv_sge{2000, 1000, mr_a->lkey}, 0, 0, "SEND from DM");
  check_wc(wc, want("SEND from DM", 0xD3, p.a.qpn()));
  check_wc(poll_one(p.b.rcq(), "receive into DM"),
           want("receive into DM", 0xB3, p.b.qpn(), IBV_WC_SUCCESS, IBV_WC_RECV, 1000, true));
  VT_REQUIRE_BYTES("SEND DM to DM", dm_bytes(dm_b.get(), kOff, 1000).data(), data.data() + 2000,
                   1000);
  // Past the MR's end (inside the DM): an access error, as for any MR.
  wc = post_one(p, IBV_WR_RDMA_WRITE, make_sge(host.payload(), 64, host.lkey()), kLen - 32,
                mr_b->rkey, "WRITE past the DM MR");
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
}
