// A child of fork() using its parent's context, as programs may with the kernel's command fd
// (rdma-core's suite forks five children that allocate device memory on one context at once):
// each call is answered to the process that made it, and what a child registers is its own
// memory, not the parent's at the same address.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "verbs_fixture.h"

using namespace vt;

namespace {

void require_child_ok(pid_t pid) {
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  INFO("child exit status " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1)
                            << " (10 + errno: a failed call)");
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
}

}  // namespace

// A child of fork() may use its parent's context, as with the kernel's command fd: five
// children allocating and freeing at once, each call answered to the one that asked.
TEST_CASE("forked children allocate device memory on their parent's context at once",
          "[dm][fork]") {
  auto dev = open_device();
  ibv_context *ctx = dev->ctx.get();
  constexpr int kChildren = 5, kRounds = 40;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; c++) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      child_prepare(60);
      for (int r = 0; r < kRounds; r++) {
        ibv_alloc_dm_attr attr{size_t(4096 * (1 + c)), 0, 0};
        ibv_dm *dm = ibv_alloc_dm(ctx, &attr);
        if (!dm) _exit(10 + (errno & 0x7f) % 100);
        uint32_t word = uint32_t(c << 16 | r), back = 0;
        if (ibv_memcpy_to_dm(dm, 4 * c, &word, 4) || ibv_memcpy_from_dm(&back, dm, 4 * c, 4) ||
            back != word)
          _exit(2);
        if (ibv_free_dm(dm)) _exit(3);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) require_child_ok(pid);
  // The parent's context still answers.
  ibv_alloc_dm_attr attr{4096, 0, 0};
  ibv_dm *dm = ibv_alloc_dm(ctx, &attr);
  REQUIRE(dm);
  CHECK(ibv_free_dm(dm) == 0);
}

TEST_CASE("a forked child registers its own memory on its parent's context, not the parent's",
          "[fork]") {
  Pair p;
  Region dst(p.b.pd(), 256, seed_for("fork dst"));
  std::vector<uint8_t> before = dst.snapshot();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    child_prepare(60);
    // The stack: reached by vrnicd through /proc/<pid>/mem -- the child's, which holds
    // other bytes at this address than the parent's does.
    uint8_t buf[256];
    fill_pattern(buf, sizeof buf, seed_for("fork child bytes"));
    ibv_mr *mr = ibv_reg_mr(p.a.pd(), buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) _exit(10 + errno % 100);
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), sizeof buf, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = 0xF0;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = dst.addr();
    wr.wr.rdma.rkey = dst.rkey();
    if (int err = ibv_post_send(p.a.qp(), &wr, &bad)) _exit(10 + err % 100);
    ibv_wc wc{};
    const auto deadline = Clock::now() + kCompletionTimeout;
    while (ibv_poll_cq(p.a.scq(), 1, &wc) == 0)
      if (Clock::now() > deadline) _exit(4);
    if (wc.status != IBV_WC_SUCCESS) _exit(5);
    _exit(ibv_dereg_mr(mr) ? 6 : 0);
  }
  require_child_ok(pid);
  std::vector<uint8_t> want = make_pattern(256, seed_for("fork child bytes"));
  VT_REQUIRE_BYTES("the child's bytes at the parent's region", dst.payload(), want.data(), 256);
  // The guards around it untouched.
  VT_REQUIRE_BYTES("guard before", dst.buf.data(), before.data(), dst.off);
}
