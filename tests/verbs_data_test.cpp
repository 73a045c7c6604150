// Data-path tests for vrnic through the plain verbs API (libibverbs.so.1 from build/provider):
// every byte of every transfer is checked, including guard bytes around the targets, and so
// is every field of every completion. Failure cases check the exact completion status on both
// sides, the QP states afterwards and the flushing of later work requests.
//
// Groups (Catch2 tags): [write] [read] [send] [atomic] [sge] [memory] [error] [rnr] [kill].
// Needs a running vrnicd ($VRNIC_SOCKET); daemon-side checks (object counts, RNR/NAK counters)
// use `$VRNICCTL stats` and are skipped with a warning when VRNICCTL is not set.
//
// Every wait is bounded; no test can hang (the fixture's watchdog aborts a stuck test).
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "verbs_fixture.h"

using namespace vt;

extern char **environ;

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;
const std::vector<size_t> kSizes = {0, 1, 63, 4096, 4097, 1 * MiB, 8 * MiB};

// ---------------------------------------------------------------------------------------------
// Operations
enum class Op { Write, WriteImm, Read, Send, SendImm, CmpSwap, FetchAdd };

const char *op_name(Op op) {
  switch (op) {
    case Op::Write:
      return "RDMA_WRITE";
    case Op::WriteImm:
      return "RDMA_WRITE_WITH_IMM";
    case Op::Read:
      return "RDMA_READ";
    case Op::Send:
      return "SEND";
    case Op::SendImm:
      return "SEND_WITH_IMM";
    case Op::CmpSwap:
      return "ATOMIC_CMP_AND_SWP";
    case Op::FetchAdd:
      return "ATOMIC_FETCH_AND_ADD";
  }
  return "?";
}

ibv_wr_opcode wr_opcode(Op op) {
  switch (op) {
    case Op::Write:
      return IBV_WR_RDMA_WRITE;
    case Op::WriteImm:
      return IBV_WR_RDMA_WRITE_WITH_IMM;
    case Op::Read:
      return IBV_WR_RDMA_READ;
    case Op::Send:
      return IBV_WR_SEND;
    case Op::SendImm:
      return IBV_WR_SEND_WITH_IMM;
    case Op::CmpSwap:
      return IBV_WR_ATOMIC_CMP_AND_SWP;
    case Op::FetchAdd:
      return IBV_WR_ATOMIC_FETCH_AND_ADD;
  }
  return IBV_WR_SEND;
}

// Opcode of the requester's successful completion.
int requester_wc_opcode(Op op) {
  switch (op) {
    case Op::Write:
    case Op::WriteImm:
      return IBV_WC_RDMA_WRITE;
    case Op::Read:
      return IBV_WC_RDMA_READ;
    case Op::Send:
    case Op::SendImm:
      return IBV_WC_SEND;
    case Op::CmpSwap:
      return IBV_WC_COMP_SWAP;
    case Op::FetchAdd:
      return IBV_WC_FETCH_ADD;
  }
  return -1;
}

bool is_send(Op op) {
  return op == Op::Send || op == Op::SendImm;
}
bool is_write(Op op) {
  return op == Op::Write || op == Op::WriteImm;
}
bool is_atomic(Op op) {
  return op == Op::CmpSwap || op == Op::FetchAdd;
}
bool has_imm(Op op) {
  return op == Op::WriteImm || op == Op::SendImm;
}
bool consumes_recv(Op op) {
  return is_send(op) || op == Op::WriteImm;
}

uint32_t imm_for(uint64_t wr_id) {
  return htonl(static_cast<uint32_t>(0xC0DE0000u ^ (wr_id * 2654435761u)));
}

// ---------------------------------------------------------------------------------------------
// Memory under test. [base, base+size) is compared byte for byte before and after each
// operation: only the bytes the operation may write (the pieces, in order) may change.
struct Area {
  uint8_t *base = nullptr;
  size_t size = 0;
  std::vector<std::pair<size_t, size_t>> pieces;  // (offset from base, length)
  uint32_t lkey = 0;
  uint32_t rkey = 0;

  size_t total() const {
    size_t t = 0;
    for (const auto &pc : pieces) t += pc.second;
    return t;
  }
  uint64_t addr(size_t piece = 0) const {
    return reinterpret_cast<uintptr_t>(base + pieces.at(piece).first);
  }
  std::vector<ibv_sge> sges() const {
    std::vector<ibv_sge> v;
    for (const auto &pc : pieces)
      if (pc.second != 0) v.push_back(make_sge(base + pc.first, pc.second, lkey));
    return v;
  }
  std::vector<uint8_t> snapshot() const { return {base, base + size}; }
  std::vector<uint8_t> gather() const {
    std::vector<uint8_t> out;
    for (const auto &pc : pieces)
      out.insert(out.end(), base + pc.first, base + pc.first + pc.second);
    return out;
  }
  // `image` (a snapshot) with the first n bytes of data scattered over the pieces in order.
  void scatter_into(std::vector<uint8_t> &image, const uint8_t *data, size_t n) const {
    for (const auto &pc : pieces) {
      const size_t k = std::min(n, pc.second);
      std::memcpy(image.data() + pc.first, data, k);
      data += k;
      n -= k;
      if (n == 0) break;
    }
  }
};

// The whole Region (guards included) with its payload as one piece.
Area area_of(const Region &r) {
  Area a;
  a.base = r.buf.data();
  a.size = r.buf.size();
  a.pieces = {{r.off, r.len}};
  a.lkey = r.lkey();
  a.rkey = r.rkey();
  return a;
}

// Bytes a Region needs to hold `lens` pieces with the given gaps between them.
size_t span_for(const std::vector<size_t> &lens, const std::vector<size_t> &gaps) {
  size_t t = 0;
  for (size_t i = 0; i < lens.size(); ++i) t += lens[i] + (i + 1 < lens.size() ? gaps.at(i) : 0);
  return t;
}

// The pieces laid out inside r's payload, separated by gaps (whose bytes must stay untouched).
Area pieces_in(const Region &r, const std::vector<size_t> &lens, const std::vector<size_t> &gaps) {
  REQUIRE(span_for(lens, gaps) <= r.len);
  Area a = area_of(r);
  a.pieces.clear();
  size_t at = r.off;
  for (size_t i = 0; i < lens.size(); ++i) {
    a.pieces.push_back({at, lens[i]});
    at += lens[i] + (i + 1 < lens.size() ? gaps[i] : 0);
  }
  return a;
}

// A registered area over caller-owned memory: [base, base+size) compared, one piece.
Area area_over(uint8_t *base, size_t size, size_t off, size_t n, const ibv_mr *mr) {
  Area a;
  a.base = base;
  a.size = size;
  a.pieces = {{off, n}};
  a.lkey = mr ? mr->lkey : 0;
  a.rkey = mr ? mr->rkey : 0;
  return a;
}

// ---------------------------------------------------------------------------------------------
// Completions

// Polls each CQ once: nothing may be left there.
void require_cqs_empty(Pair &p) {
  require_no_completion(p.a.scq(), Ms{0}, "requester send CQ");
  require_no_completion(p.a.rcq(), Ms{0}, "requester receive CQ");
  require_no_completion(p.b.scq(), Ms{0}, "responder send CQ");
  require_no_completion(p.b.rcq(), Ms{0}, "responder receive CQ");
}

void expect_wc(ibv_cq *cq, const char *what, uint64_t wr_id, uint32_t qpn, ibv_wc_status st,
               int opcode = -1, int64_t byte_len = -1, bool recv = false,
               std::optional<uint32_t> imm = std::nullopt, Ms timeout = kCompletionTimeout) {
  const ibv_wc wc = poll_one(cq, what, timeout);
  WcExpect e = want(what, wr_id, qpn, st, opcode, byte_len, recv);
  e.imm_be = imm;
  check_wc(wc, e);
}

// ---------------------------------------------------------------------------------------------
// One data transfer from QP a (requester) to QP b (responder), fully checked.
//   WRITE/WRITE_WITH_IMM: local pieces gathered into remote piece 0.
//   READ:                 remote piece 0 scattered over the local pieces.
//   SEND/SEND_WITH_IMM:   local pieces gathered, scattered over the remote (receive) pieces.
// The message length is local.total(); the remote side may be larger.
struct XferOpts {
  uint64_t wr_id = 0x1000;
  unsigned send_flags = IBV_SEND_SIGNALED;
  // Inline: the source is overwritten right after ibv_post_send returns (the data must have
  // been taken at post time) and is not compared afterwards.
  bool scribble_source = false;
  // >0: post the send first, check that nothing completes during this time (RNR retries),
  // then post the receive.
  Ms recv_delay{0};
};

void transfer(Pair &p, Op op, const Area &local, const Area &remote, const XferOpts &o = {}) {
  REQUIRE(!is_atomic(op));
  const size_t n = local.total();
  INFO(op_name(op) << " of " << n << " bytes, wr_id 0x" << std::hex << o.wr_id << std::dec);
  if (!is_send(op)) REQUIRE(remote.pieces.at(0).second >= n);
  if (is_send(op)) REQUIRE(remote.total() >= n);

  const std::vector<uint8_t> local_before = local.snapshot();
  const std::vector<uint8_t> remote_before = remote.snapshot();
  std::vector<uint8_t> data;
  if (op == Op::Read) {
    const size_t at = remote.pieces[0].first;
    data.assign(remote_before.begin() + static_cast<ptrdiff_t>(at),
                remote_before.begin() + static_cast<ptrdiff_t>(at + n));
  } else {
    data = local.gather();
  }
  std::vector<uint8_t> local_want = local_before;
  std::vector<uint8_t> remote_want = remote_before;
  if (op == Op::Read) local.scatter_into(local_want, data.data(), n);
  if (is_write(op)) std::memcpy(remote_want.data() + remote.pieces[0].first, data.data(), n);
  if (is_send(op)) remote.scatter_into(remote_want, data.data(), n);

  std::vector<ibv_sge> rsg;
  if (is_send(op)) rsg = remote.sges();
  ibv_recv_wr rwr = make_recv_wr(o.wr_id + 1, rsg.data(), static_cast<int>(rsg.size()));
  if (consumes_recv(op) && o.recv_delay.count() == 0) post_recv(p.b.qp(), &rwr);

  std::vector<ibv_sge> lsg = local.sges();
  ibv_send_wr wr =
      make_send_wr(o.wr_id, wr_opcode(op), lsg.data(), static_cast<int>(lsg.size()), o.send_flags);
  if (!is_send(op)) {
    wr.wr.rdma.remote_addr = remote.addr(0);
    wr.wr.rdma.rkey = remote.rkey;
  }
  if (has_imm(op)) wr.imm_data = imm_for(o.wr_id);
  post_send(p.a.qp(), &wr);
  if (o.scribble_source) {
    for (const auto &pc : local.pieces) std::memset(local.base + pc.first, 0xEE, pc.second);
  }
  if (consumes_recv(op) && o.recv_delay.count() > 0) {
    require_no_completion(p.a.scq(), o.recv_delay, "requester send CQ while no receive is posted");
    require_no_completion(p.b.rcq(), Ms{0}, "responder receive CQ before the receive is posted");
    post_recv(p.b.qp(), &rwr);
  }

  REQUIRE(((o.send_flags & IBV_SEND_SIGNALED) || p.cfg.sq_sig_all));  // the data check needs it
  {
    expect_wc(p.a.scq(), "requester completion", o.wr_id, p.a.qpn(), IBV_WC_SUCCESS,
              requester_wc_opcode(op), op == Op::Read ? static_cast<int64_t>(n) : -1);
  }
  if (consumes_recv(op)) {
    std::optional<uint32_t> imm;
    if (has_imm(op)) imm = imm_for(o.wr_id);
    expect_wc(p.b.rcq(), "responder receive completion", o.wr_id + 1, p.b.qpn(), IBV_WC_SUCCESS,
              op == Op::WriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, static_cast<int64_t>(n),
              true, imm);
  }
  VT_REQUIRE_BYTES("responder memory", remote.base, remote_want.data(), remote.size);
  if (!o.scribble_source)
    VT_REQUIRE_BYTES("requester memory", local.base, local_want.data(), local.size);
  require_cqs_empty(p);
}

// ---------------------------------------------------------------------------------------------
// vrnicd statistics (skipped when VRNICCTL is not set, e.g. on real hardware)
using Stats = std::map<std::string, long long>;
const std::vector<std::string> kObjectKeys = {"sessions", "pds", "mrs",     "cqs",
                                              "qps",      "ahs", "channels"};

bool stats_available() {
  return std::getenv("VRNICCTL") != nullptr && *std::getenv("VRNICCTL") != '\0';
}

Stats stats() {
  std::string err;
  auto s = read_vrnic_stats(&err);
  if (!s) FAIL("reading vrnicd statistics: " << err);
  return *s;
}

long long stat(const Stats &s, const std::string &key) {
  auto it = s.find(key);
  if (it == s.end()) FAIL("vrnicctl stats has no '" << key << "'");
  return it->second;
}

std::string show_objects(const Stats &s) {
  std::string out;
  for (const auto &k : kObjectKeys) {
    auto it = s.find(k);
    out += k + "=" + (it == s.end() ? std::string("?") : std::to_string(it->second)) + " ";
  }
  return out;
}

bool same_objects(const Stats &a, const Stats &b) {
  for (const auto &k : kObjectKeys) {
    auto ia = a.find(k), ib = b.find(k);
    if (ia == a.end() || ib == b.end() || ia->second != ib->second) return false;
  }
  return true;
}

// Polls vrnicd until its object counts equal `want`; fails after `timeout`.
void wait_for_objects(const Stats &want, Ms timeout, const char *what) {
  const auto deadline = Clock::now() + timeout;
  Stats now;
  for (;;) {
    now = stats();
    if (same_objects(now, want) || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(Ms(20));
  }
  INFO(what << ": want " << show_objects(want) << "; vrnicd has " << show_objects(now)
            << " (after up to " << timeout.count() << " ms)");
  REQUIRE(same_objects(now, want));
}

// ---------------------------------------------------------------------------------------------
// Failure-case helpers

// A receive into a small Region, expected to be flushed.
struct PostedRecv {
  PostedRecv(Pair &p, uint64_t wr_id, uint64_t seed) : region(p.b.pd(), 64, seed) {
    sge = make_sge(region.payload(), region.len, region.lkey());
    ibv_recv_wr wr = make_recv_wr(wr_id, &sge, 1);
    post_recv(p.b.qp(), &wr);
    before = region.snapshot();
  }
  Region region;
  ibv_sge sge{};
  std::vector<uint8_t> before;
  void require_untouched() const {
    VT_REQUIRE_BYTES("flushed receive buffer", region.buf.data(), before.data(), before.size());
  }
};

// Posts a valid 256-byte RDMA WRITE from `src` into `dst` (used as "the next WR").
void post_valid_write(Pair &p, uint64_t wr_id, const Region &src, const Region &dst) {
  ibv_sge sg = make_sge(src.payload(), 256, src.lkey());
  ibv_send_wr wr = make_send_wr(wr_id, IBV_WR_RDMA_WRITE, &sg, 1);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.rkey();
  post_send(p.a.qp(), &wr);
}

// After a WR failed on `side`'s send queue: the QP is in ERR and a newly posted WR flushes.
void require_requester_flushes(Pair &p, uint64_t wr_id, const Region &src, const Region &dst) {
  require_qp_state(p.a.qp(), IBV_QPS_ERR, "requester QP after the error");
  post_valid_write(p, wr_id, src, dst);
  expect_wc(p.a.scq(), "WR posted to the requester after the error", wr_id, p.a.qpn(),
            IBV_WC_WR_FLUSH_ERR);
}

// The responder is in ERR: receives it held flush, and so does a newly posted one.
void require_responder_flushes(Pair &p, std::vector<const PostedRecv *> held,
                               const std::vector<uint64_t> &held_ids, uint64_t new_id) {
  require_qp_state(p.b.qp(), IBV_QPS_ERR, "responder QP after the error");
  for (size_t i = 0; i < held.size(); ++i) {
    expect_wc(p.b.rcq(), "receive posted before the error", held_ids[i], p.b.qpn(),
              IBV_WC_WR_FLUSH_ERR);
    held[i]->require_untouched();
  }
  PostedRecv late(p, new_id, seed_for("late recv", new_id));
  expect_wc(p.b.rcq(), "receive posted after the error", new_id, p.b.qpn(), IBV_WC_WR_FLUSH_ERR);
  late.require_untouched();
}

long long counter_or_skip(const char *key) {
  if (!stats_available()) return -1;
  return stat(stats(), key);
}

void require_counter_grew(const char *key, long long before, long long at_least,
                          long long exactly = -1) {
  if (before < 0) {
    WARN("VRNICCTL not set: not checking vrnicd's " << key << " counter");
    return;
  }
  const long long now = stat(stats(), key);
  INFO("vrnicd " << key << " went from " << before << " to " << now);
  if (exactly >= 0) {
    CHECK(now - before == exactly);
  } else {
    CHECK(now - before >= at_least);
  }
}

// ---------------------------------------------------------------------------------------------
// Memory helpers

MrPtr reg_unaltered(ibv_pd *pd, uint8_t *base, size_t size, unsigned access = kAllAccess) {
  const std::vector<uint8_t> before(base, base + size);
  MrPtr mr = reg_mr(pd, base, size, access);
  VT_REQUIRE_BYTES("memory after ibv_reg_mr", base, before.data(), size);
  CHECK(mr->addr == base);
  CHECK(mr->length == size);
  return mr;
}

// Runs [base+off, base+off+n) through WRITE, READ and SEND, first as the responder's memory,
// then as the requester's; the whole [base, base+size) is registered and compared each time.
// After each deregistration the memory must hold exactly what was there and stay writable.
void exercise_memory(Pair &p, uint8_t *base, size_t size, size_t off, size_t n, uint64_t seed) {
  REQUIRE(off + n <= size);
  fill_pattern(base, size, seed);
  {
    MrPtr mr = reg_unaltered(p.b.pd(), base, size);
    const Area mem = area_over(base, size, off, n, mr.get());
    Region src(p.a.pd(), n, seed_for("exercise src", seed));
    transfer(p, Op::Write, area_of(src), mem, {.wr_id = 0x100});
    Region dst(p.a.pd(), n, seed_for("exercise dst", seed));
    transfer(p, Op::Read, area_of(dst), mem, {.wr_id = 0x200});
    Region src2(p.a.pd(), n, seed_for("exercise src2", seed));
    transfer(p, Op::Send, area_of(src2), mem, {.wr_id = 0x300});
    const std::vector<uint8_t> kept(base, base + size);
    ibv_mr *raw = mr.release();
    REQUIRE(ibv_dereg_mr(raw) == 0);
    VT_REQUIRE_BYTES("memory after ibv_dereg_mr (responder side)", base, kept.data(), size);
  }
  {
    MrPtr mr = reg_unaltered(p.a.pd(), base, size);
    const Area mem = area_over(base, size, off, n, mr.get());
    Region dst(p.b.pd(), n, seed_for("exercise rdst", seed));
    transfer(p, Op::Write, mem, area_of(dst), {.wr_id = 0x400});
    Region src(p.b.pd(), n, seed_for("exercise rsrc", seed));
    transfer(p, Op::Read, mem, area_of(src), {.wr_id = 0x500});
    Region rcv(p.b.pd(), n, seed_for("exercise rcv", seed));
    transfer(p, Op::Send, mem, area_of(rcv), {.wr_id = 0x600});
    const std::vector<uint8_t> kept(base, base + size);
    ibv_mr *raw = mr.release();
    REQUIRE(ibv_dereg_mr(raw) == 0);
    VT_REQUIRE_BYTES("memory after ibv_dereg_mr (requester side)", base, kept.data(), size);
  }
  const std::vector<uint8_t> fresh = make_pattern(size, seed_for("after dereg", seed));
  std::memcpy(base, fresh.data(), size);
  VT_REQUIRE_BYTES("memory written by the program after deregistration", base, fresh.data(), size);
}

// ---------------------------------------------------------------------------------------------
// Fork helpers
bool wait_child(pid_t pid, int *status, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return false;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Ms(2));
  }
}

struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      int st;
      waitpid(pid, &st, 0);
    }
  }
};

}  // namespace

// =============================================================================================
// [write] [read] [send]: every size, byte for byte
// =============================================================================================

TEST_CASE("RDMA WRITE and WRITE_WITH_IMM of every size land byte for byte", "[write]") {
  const Op op = GENERATE(Op::Write, Op::WriteImm);
  const size_t n = GENERATE(from_range(kSizes));
  INFO(op_name(op) << " size " << n);
  Pair p;
  Region src(p.a.pd(), n, seed_for("write src", n));
  Region dst(p.b.pd(), n, seed_for("write dst", n));
  transfer(p, op, area_of(src), area_of(dst));
}

TEST_CASE("RDMA READ of every size lands byte for byte", "[read]") {
  const size_t n = GENERATE(from_range(kSizes));
  INFO("RDMA_READ size " << n);
  Pair p;
  Region dst(p.a.pd(), n, seed_for("read dst", n));
  Region src(p.b.pd(), n, seed_for("read src", n));
  transfer(p, Op::Read, area_of(dst), area_of(src));
}

TEST_CASE("SEND and SEND_WITH_IMM of every size land byte for byte", "[send]") {
  const Op op = GENERATE(Op::Send, Op::SendImm);
  const size_t n = GENERATE(from_range(kSizes));
  INFO(op_name(op) << " size " << n);
  Pair p;
  Region src(p.a.pd(), n, seed_for("send src", n));
  Region dst(p.b.pd(), n, seed_for("send dst", n));
  transfer(p, op, area_of(src), area_of(dst));
}

TEST_CASE("SEND into a larger receive buffer fills only the message length", "[send]") {
  const size_t n = GENERATE(1, 4097, 70000);
  Pair p;
  Region src(p.a.pd(), n, seed_for("short send src", n));
  Region dst(p.b.pd(), n + 5000, seed_for("short send dst", n));
  transfer(p, Op::SendImm, area_of(src), area_of(dst));
}

TEST_CASE("a chain of 60 mixed WRs completes in order with every byte right",
          "[write][read][send]") {
  QpConfig cfg;
  Pair p(cfg);
  constexpr int kWrs = 60;
  const Op ops[] = {Op::Write, Op::Read, Op::Send, Op::WriteImm, Op::SendImm};
  std::vector<std::unique_ptr<Region>> locals, remotes;
  std::vector<std::vector<uint8_t>> local_want, remote_want;
  std::vector<ibv_sge> lsg(kWrs), rsg(kWrs);
  std::vector<ibv_send_wr> wrs(kWrs);
  std::vector<ibv_recv_wr> rwrs;
  rwrs.reserve(kWrs);
  std::vector<uint64_t> signaled, received;
  std::vector<size_t> recv_len;
  std::vector<Op> recv_op;
  for (int i = 0; i < kWrs; ++i) {
    const Op op = ops[i % 5];
    const size_t n = (static_cast<size_t>(i) * 7919u) % 20000 + 1;
    locals.push_back(std::make_unique<Region>(p.a.pd(), n, seed_for("chain l", i)));
    remotes.push_back(std::make_unique<Region>(p.b.pd(), n, seed_for("chain r", i)));
    const Region &l = *locals.back();
    const Region &r = *remotes.back();
    local_want.push_back(l.snapshot());
    remote_want.push_back(r.snapshot());
    if (op == Op::Read) {
      std::memcpy(local_want.back().data() + l.off, r.payload(), n);
    } else {
      std::memcpy(remote_want.back().data() + r.off, l.payload(), n);
    }
    const uint64_t id = 0x5000 + static_cast<uint64_t>(i);
    const bool sig = (i % 4 != 1) || i == kWrs - 1;
    lsg[i] = make_sge(l.payload(), n, l.lkey());
    wrs[i] = make_send_wr(id, wr_opcode(op), &lsg[i], 1, sig ? IBV_SEND_SIGNALED : 0);
    if (!is_send(op)) {
      wrs[i].wr.rdma.remote_addr = r.addr();
      wrs[i].wr.rdma.rkey = r.rkey();
    }
    if (has_imm(op)) wrs[i].imm_data = imm_for(id);
    if (i > 0) wrs[i - 1].next = &wrs[i];
    if (sig) signaled.push_back(id);
    if (consumes_recv(op)) {
      rsg[i] = make_sge(r.payload(), n, r.lkey());
      rwrs.push_back(make_recv_wr(id | 0x10000, &rsg[i], is_send(op) ? 1 : 0));
      received.push_back(id);
      recv_len.push_back(n);
      recv_op.push_back(op);
    }
  }
  for (size_t i = 1; i < rwrs.size(); ++i) rwrs[i - 1].next = &rwrs[i];
  post_recv(p.b.qp(), rwrs.data());
  post_send(p.a.qp(), wrs.data());

  const auto swc = poll_n(p.a.scq(), signaled.size(), "requester send CQ");
  for (size_t k = 0; k < signaled.size(); ++k) {
    const int i = static_cast<int>(signaled[k] - 0x5000);
    const Op op = ops[i % 5];
    WcExpect e;
    e.what = "chain requester completion (in posting order)";
    e.wr_id = signaled[k];
    e.qp_num = p.a.qpn();
    e.opcode = requester_wc_opcode(op);
    if (op == Op::Read) e.byte_len = static_cast<int64_t>(locals[static_cast<size_t>(i)]->len);
    check_wc(swc[k], e);
  }
  const auto rwc = poll_n(p.b.rcq(), received.size(), "responder receive CQ");
  for (size_t k = 0; k < received.size(); ++k) {
    WcExpect e;
    e.what = "chain receive completion (in order)";
    e.wr_id = received[k] | 0x10000;
    e.qp_num = p.b.qpn();
    e.opcode = recv_op[k] == Op::WriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    e.byte_len = static_cast<int64_t>(recv_len[k]);
    e.recv = true;
    if (has_imm(recv_op[k])) e.imm_be = imm_for(received[k]);
    check_wc(rwc[k], e);
  }
  for (int i = 0; i < kWrs; ++i) {
    INFO("WR " << i << " (" << op_name(ops[i % 5]) << ")");
    VT_REQUIRE_BYTES("requester memory", locals[i]->buf.data(), local_want[i].data(),
                     local_want[i].size());
    VT_REQUIRE_BYTES("responder memory", remotes[i]->buf.data(), remote_want[i].data(),
                     remote_want[i].size());
  }
  require_cqs_empty(p);
}

// =============================================================================================
// [atomic]
// =============================================================================================
namespace {

// target_len 64: a small heap buffer (reached by vrnic through process_vm_*); 3 pages: the
// target lies in whole pages that vrnic shares with the client (in-place CPU atomics).
struct AtomicSetup {
  explicit AtomicSetup(Pair &p, size_t target_len = 64)
      : result(p.a.pd(), 24, seed_for("atomic result")),
        target(p.b.pd(), target_len, seed_for("atomic target")) {}
  Region result;  // the original value lands at payload + 8
  Region target;  // the 64-bit target is at payload + 24 (8-byte aligned)
  uint8_t *res() const { return result.payload() + 8; }
  uint8_t *tgt() const { return target.payload() + 24; }
  uint64_t get_target() const {
    uint64_t v;
    std::memcpy(&v, tgt(), 8);
    return v;
  }
  void set_target(uint64_t v) const { std::memcpy(tgt(), &v, 8); }
  uint64_t get_result() const {
    uint64_t v;
    std::memcpy(&v, res(), 8);
    return v;
  }
};

// Runs one atomic and checks completion, returned value and both memories byte for byte.
void run_atomic(Pair &p, AtomicSetup &s, Op op, uint64_t compare_add, uint64_t swap,
                uint64_t want_remote, uint64_t wr_id) {
  const uint64_t orig = s.get_target();
  std::vector<uint8_t> local_want = s.result.snapshot();
  std::memcpy(local_want.data() + s.result.off + 8, &orig, 8);
  std::vector<uint8_t> remote_want = s.target.snapshot();
  std::memcpy(remote_want.data() + s.target.off + 24, &want_remote, 8);

  ibv_sge sg = make_sge(s.res(), 8, s.result.lkey());
  ibv_send_wr wr = make_send_wr(wr_id, wr_opcode(op), &sg, 1);
  wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(s.tgt());
  wr.wr.atomic.rkey = s.target.rkey();
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  post_send(p.a.qp(), &wr);
  expect_wc(p.a.scq(), op_name(op), wr_id, p.a.qpn(), IBV_WC_SUCCESS, requester_wc_opcode(op), 8);
  INFO(op_name(op) << " orig 0x" << std::hex << orig << " compare_add 0x" << compare_add
                   << " swap 0x" << swap << " -> returned 0x" << s.get_result() << ", remote 0x"
                   << s.get_target());
  VT_REQUIRE_BYTES("requester result buffer", s.result.buf.data(), local_want.data(),
                   local_want.size());
  VT_REQUIRE_BYTES("responder target", s.target.buf.data(), remote_want.data(), remote_want.size());
  require_cqs_empty(p);
}

}  // namespace

TEST_CASE("ATOMIC_CMP_AND_SWP swaps on a match and only returns the value otherwise", "[atomic]") {
  const size_t target_len = GENERATE(size_t{64}, size_t{3 * kPage});
  INFO("target buffer of " << target_len << " bytes");
  Pair p;
  AtomicSetup s(p, target_len);
  s.set_target(0x0123456789ABCDEFull);
  // Matching compare: swapped, original returned.
  run_atomic(p, s, Op::CmpSwap, 0x0123456789ABCDEFull, 0xFEDCBA9876543210ull, 0xFEDCBA9876543210ull,
             1);
  // Non-matching compare (differs in one bit): unchanged, original returned.
  run_atomic(p, s, Op::CmpSwap, 0xFEDCBA9876543211ull, 0x1111111111111111ull, 0xFEDCBA9876543210ull,
             2);
  // Non-matching in the high half only.
  run_atomic(p, s, Op::CmpSwap, 0x7EDCBA9876543210ull, 0x2222222222222222ull, 0xFEDCBA9876543210ull,
             3);
  // Matching again, swapping to zero and back.
  run_atomic(p, s, Op::CmpSwap, 0xFEDCBA9876543210ull, 0, 0, 4);
  run_atomic(p, s, Op::CmpSwap, 0, ~0ull, ~0ull, 5);
}

TEST_CASE("ATOMIC_FETCH_AND_ADD returns the original value and adds (wrapping at 2^64)",
          "[atomic]") {
  const size_t target_len = GENERATE(size_t{64}, size_t{3 * kPage});
  INFO("target buffer of " << target_len << " bytes");
  Pair p;
  AtomicSetup s(p, target_len);
  s.set_target(1000);
  run_atomic(p, s, Op::FetchAdd, 1, 0, 1001, 1);
  run_atomic(p, s, Op::FetchAdd, 0x100000000ull, 0, 0x100000000ull + 1001, 2);
  run_atomic(p, s, Op::FetchAdd, 0, 0, 0x100000000ull + 1001, 3);
  s.set_target(~0ull - 1);
  run_atomic(p, s, Op::FetchAdd, 5, 0, 3, 4);      // wraps
  run_atomic(p, s, Op::FetchAdd, ~0ull, 0, 2, 5);  // adding -1
}

TEST_CASE("64 pipelined FETCH_AND_ADDs return every intermediate value in order", "[atomic]") {
  Pair p;
  constexpr int kN = 64;
  Region results(p.a.pd(), kN * 8, seed_for("faa results"));
  Region target(p.b.pd(), 8, seed_for("faa target"));
  const uint64_t start = 0xFFFFFFFFFFFFFF00ull;
  std::memcpy(target.payload(), &start, 8);
  const std::vector<uint8_t> res_before = results.snapshot();
  const std::vector<uint8_t> tgt_before = target.snapshot();
  std::vector<ibv_sge> sg(kN);
  std::vector<ibv_send_wr> wr(kN);
  for (int i = 0; i < kN; ++i) {
    sg[i] = make_sge(results.payload() + 8 * i, 8, results.lkey());
    wr[i] = make_send_wr(0x700 + static_cast<uint64_t>(i), IBV_WR_ATOMIC_FETCH_AND_ADD, &sg[i], 1);
    wr[i].wr.atomic.remote_addr = target.addr();
    wr[i].wr.atomic.rkey = target.rkey();
    wr[i].wr.atomic.compare_add = static_cast<uint64_t>(i) + 1;
    if (i > 0) wr[i - 1].next = &wr[i];
  }
  post_send(p.a.qp(), wr.data());
  const auto wcs = poll_n(p.a.scq(), kN, "requester send CQ");
  std::vector<uint8_t> res_want = res_before, tgt_want = tgt_before;
  uint64_t v = start;
  for (int i = 0; i < kN; ++i) {
    WcExpect e;
    e.what = "FETCH_AND_ADD completion (in order)";
    e.wr_id = 0x700 + static_cast<uint64_t>(i);
    e.qp_num = p.a.qpn();
    e.opcode = IBV_WC_FETCH_ADD;
    e.byte_len = 8;
    check_wc(wcs[static_cast<size_t>(i)], e);
    std::memcpy(res_want.data() + results.off + 8 * static_cast<size_t>(i), &v, 8);
    v += static_cast<uint64_t>(i) + 1;
  }
  std::memcpy(tgt_want.data() + target.off, &v, 8);
  VT_REQUIRE_BYTES("returned values", results.buf.data(), res_want.data(), res_want.size());
  VT_REQUIRE_BYTES("final target", target.buf.data(), tgt_want.data(), tgt_want.size());
  require_cqs_empty(p);
}

TEST_CASE("READs and atomics beyond max_rd_atomic wait their turn and complete in order",
          "[read][atomic]") {
  QpConfig cfg;
  cfg.max_rd_atomic = 1;
  Pair p(cfg);
  constexpr int kN = 40;
  std::vector<std::unique_ptr<Region>> locals, remotes;
  std::vector<std::vector<uint8_t>> lwant, rwant;
  std::vector<ibv_sge> sg(kN);
  std::vector<ibv_send_wr> wr(kN);
  for (int i = 0; i < kN; ++i) {
    const bool atomic = i % 3 == 2;
    const size_t n = atomic ? 8 : (static_cast<size_t>(i) * 5003) % 30000 + 1;
    locals.push_back(std::make_unique<Region>(p.a.pd(), n, seed_for("rd l", i)));
    remotes.push_back(std::make_unique<Region>(p.b.pd(), n, seed_for("rd r", i)));
    Region &l = *locals.back();
    Region &r = *remotes.back();
    lwant.push_back(l.snapshot());
    rwant.push_back(r.snapshot());
    std::memcpy(lwant.back().data() + l.off, r.payload(), n);  // READ data or atomic original
    sg[i] = make_sge(l.payload(), n, l.lkey());
    const uint64_t id = 0x800 + static_cast<uint64_t>(i);
    if (atomic) {
      uint64_t orig;
      std::memcpy(&orig, r.payload(), 8);
      const uint64_t sum = orig + 0x10001;
      std::memcpy(rwant.back().data() + r.off, &sum, 8);
      wr[i] = make_send_wr(id, IBV_WR_ATOMIC_FETCH_AND_ADD, &sg[i], 1);
      wr[i].wr.atomic.remote_addr = r.addr();
      wr[i].wr.atomic.rkey = r.rkey();
      wr[i].wr.atomic.compare_add = 0x10001;
    } else {
      wr[i] = make_send_wr(id, IBV_WR_RDMA_READ, &sg[i], 1);
      wr[i].wr.rdma.remote_addr = r.addr();
      wr[i].wr.rdma.rkey = r.rkey();
    }
    if (i > 0) wr[i - 1].next = &wr[i];
  }
  post_send(p.a.qp(), wr.data());
  const auto wcs = poll_n(p.a.scq(), kN, "requester send CQ");
  for (int i = 0; i < kN; ++i) {
    const bool atomic = i % 3 == 2;
    WcExpect e;
    e.what = "READ/FETCH_AND_ADD completion (in order)";
    e.wr_id = 0x800 + static_cast<uint64_t>(i);
    e.qp_num = p.a.qpn();
    e.opcode = atomic ? IBV_WC_FETCH_ADD : IBV_WC_RDMA_READ;
    e.byte_len = static_cast<int64_t>(locals[static_cast<size_t>(i)]->len);
    check_wc(wcs[static_cast<size_t>(i)], e);
  }
  for (size_t i = 0; i < kN; ++i) {
    INFO("WR " << i);
    VT_REQUIRE_BYTES("requester memory", locals[i]->buf.data(), lwant[i].data(), lwant[i].size());
    VT_REQUIRE_BYTES("responder memory", remotes[i]->buf.data(), rwant[i].data(), rwant[i].size());
  }
  require_cqs_empty(p);
}

TEST_CASE("3000 messages through 16-deep queues wrap every ring and arrive in order",
          "[send][write]") {
  QpConfig cfg;
  cfg.max_send_wr = 16;
  cfg.max_recv_wr = 16;
  cfg.cq_depth = 32;
  Pair p(cfg);
  const uint32_t depth = std::min(p.a.cap.max_send_wr, p.b.cap.max_recv_wr);
  constexpr size_t kMsgs = 3000, kLen = 100;
  Region src(p.a.pd(), 16 * kLen, seed_for("wrap src"));
  Region dst(p.b.pd(), 16 * kLen, seed_for("wrap dst"));
  Region wdst(p.b.pd(), kMsgs * 8, seed_for("wrap wdst"));
  size_t posted_recv = 0, posted_send = 0, done_send = 0, done_recv = 0;
  const auto deadline = Clock::now() + Ms{20000};
  std::vector<uint8_t> wwant = wdst.snapshot();
  while (done_recv < kMsgs / 2 || done_send < kMsgs) {
    if (Clock::now() > deadline)
      FAIL("ring test stuck: " << done_send << " sends, " << done_recv << " receives done");
    // Receives: one slot of dst per outstanding receive (slot = index % 16).
    while (posted_recv < kMsgs / 2 && posted_recv - done_recv < std::min<uint32_t>(depth, 16)) {
      ibv_sge rs = make_sge(dst.payload() + (posted_recv % 16) * kLen, kLen, dst.lkey());
      ibv_recv_wr rw = make_recv_wr(posted_recv, &rs, 1);
      post_recv(p.b.qp(), &rw);
      ++posted_recv;
    }
    // Sends alternate: even = SEND (consumes a receive), odd = 8-byte WRITE of the counter.
    while (posted_send < kMsgs && posted_send - done_send < depth &&
           (posted_send % 2 == 1 || posted_send / 2 < posted_recv)) {
      const size_t i = posted_send;
      uint8_t *slot = src.payload() + (i % 16) * kLen;
      ibv_sge ss{};
      ibv_send_wr sw{};
      if (i % 2 == 0) {
        fill_pattern(slot, kLen, seed_for("wrap msg", i));
        ss = make_sge(slot, kLen, src.lkey());
        sw = make_send_wr(i, IBV_WR_SEND, &ss, 1);
      } else {
        const uint64_t v = i;
        std::memcpy(slot, &v, 8);
        std::memcpy(wwant.data() + wdst.off + (i / 2) * 8, &v, 8);
        ss = make_sge(slot, 8, src.lkey());
        sw = make_send_wr(i, IBV_WR_RDMA_WRITE, &ss, 1);
        sw.wr.rdma.remote_addr = wdst.addr() + (i / 2) * 8;
        sw.wr.rdma.rkey = wdst.rkey();
      }
      post_send(p.a.qp(), &sw);
      ++posted_send;
    }
    ibv_wc wc{};
    int r;
    while ((r = ibv_poll_cq(p.a.scq(), 1, &wc)) > 0) {
      if (wc.status != IBV_WC_SUCCESS || wc.wr_id != done_send)
        FAIL("send completion " << done_send << ": " << describe(wc));
      ++done_send;
    }
    REQUIRE(r == 0);
    while ((r = ibv_poll_cq(p.b.rcq(), 1, &wc)) > 0) {
      if (wc.status != IBV_WC_SUCCESS || wc.wr_id != done_recv || wc.byte_len != kLen ||
          wc.opcode != IBV_WC_RECV)
        FAIL("receive completion " << done_recv << ": " << describe(wc));
      const std::vector<uint8_t> want = make_pattern(kLen, seed_for("wrap msg", done_recv * 2));
      const std::string d = diff_bytes(dst.payload() + (done_recv % 16) * kLen, want.data(), kLen);
      if (!d.empty()) FAIL("message " << done_recv << ": " << d);
      ++done_recv;
    }
    REQUIRE(r == 0);
  }
  VT_REQUIRE_BYTES("counters written by the WRITEs", wdst.buf.data(), wwant.data(), wwant.size());
  require_cqs_empty(p);
}

TEST_CASE("sq_sig_all signals WRs posted without IBV_SEND_SIGNALED", "[send][write]") {
  QpConfig cfg;
  cfg.sq_sig_all = true;
  Pair p(cfg);
  Region src(p.a.pd(), 5000, seed_for("sigall src"));
  Region dst(p.b.pd(), 5000, seed_for("sigall dst"));
  XferOpts o;
  o.send_flags = 0;
  transfer(p, Op::Write, area_of(src), area_of(dst), o);
  o.wr_id = 0x2000;
  transfer(p, Op::SendImm, area_of(src), area_of(dst), o);
  o.wr_id = 0x3000;
  transfer(p, Op::Read, area_of(src), area_of(dst), o);
}

// =============================================================================================
// [sge]: alignment, scatter/gather lists, inline
// =============================================================================================

TEST_CASE("unaligned buffers on both sides", "[sge][write][read][send]") {
  const Op op = GENERATE(Op::Write, Op::Read, Op::SendImm);
  const auto mis =
      GENERATE(std::make_pair<size_t, size_t>(1, 7), std::make_pair<size_t, size_t>(4095, 3),
               std::make_pair<size_t, size_t>(13, 0), std::make_pair<size_t, size_t>(0, 2049));
  const size_t n = GENERATE(size_t{5}, size_t{4097}, size_t{100003});
  INFO(op_name(op) << " of " << n << " bytes, requester misaligned by " << mis.first
                   << ", responder by " << mis.second);
  Pair p;
  Region l(p.a.pd(), n, seed_for("unaligned l", n, mis.first), mis.first);
  Region r(p.b.pd(), n, seed_for("unaligned r", n, mis.second), mis.second);
  transfer(p, op, area_of(l), area_of(r));
}

namespace {

// k uneven lengths (none zero) adding up to about `scale` * k.
std::vector<size_t> uneven(size_t k, size_t salt) {
  std::vector<size_t> v;
  for (size_t i = 0; i < k; ++i) v.push_back(1 + ((i + 1) * 2654435761u + salt * 40503u) % 5000);
  return v;
}

// Splits n into m uneven non-zero pieces (n >= m), the last one `extra` bytes larger.
std::vector<size_t> split(size_t n, size_t m, size_t extra) {
  std::vector<size_t> w = uneven(m, n);
  size_t wsum = 0;
  for (size_t x : w) wsum += x;
  std::vector<size_t> out;
  size_t left = n;
  for (size_t i = 0; i < m; ++i) {
    size_t take = (i + 1 == m) ? left : std::max<size_t>(1, n * w[i] / wsum);
    take = std::min(take, left - (m - 1 - i));  // leave at least 1 for each remaining piece
    out.push_back(take);
    left -= take;
  }
  out.back() += extra;
  return out;
}

std::vector<size_t> gaps_for(size_t k, size_t salt) {
  std::vector<size_t> g;
  for (size_t i = 0; i + 1 < k; ++i) g.push_back(1 + (i * 31 + salt) % 97);
  return g;
}

}  // namespace

TEST_CASE("1 to 16 scatter/gather entries of uneven sizes on both sides",
          "[sge][write][read][send]") {
  const Op op = GENERATE(Op::Write, Op::WriteImm, Op::Read, Op::Send);
  QpConfig cfg;
  cfg.max_send_sge = kAutoSge;
  cfg.max_recv_sge = kAutoSge;
  Pair p(cfg);
  const size_t max_sge = std::min<size_t>(16, std::min(p.a.cap.max_send_sge, p.b.cap.max_recv_sge));
  REQUIRE(max_sge >= 16);
  for (size_t k = 1; k <= max_sge; ++k) {
    const std::vector<size_t> lens = uneven(k, k);
    const std::vector<size_t> gaps = gaps_for(k, k);
    size_t n = 0;
    for (size_t x : lens) n += x;
    INFO(op_name(op) << " with " << k << " local SGEs, " << n << " bytes");
    Region lr(p.a.pd(), span_for(lens, gaps) + 3, seed_for("sge l", k), k % 8);
    const Area local = pieces_in(lr, lens, gaps);
    if (is_send(op)) {
      const size_t m = std::min(max_sge, 17 - k);  // 16 .. 1 receive SGEs
      const std::vector<size_t> rl = split(n, m, k * 3);
      const std::vector<size_t> rg = gaps_for(m, k + 5);
      Region rr(p.b.pd(), span_for(rl, rg), seed_for("sge r", k), (k * 5) % 8);
      INFO("receive with " << m << " SGEs");
      transfer(p, op, local, pieces_in(rr, rl, rg), {.wr_id = 0x100 + k});
    } else {
      Region rr(p.b.pd(), n + 11, seed_for("sge r", k), (k * 3) % 8);
      Area remote = area_of(rr);
      remote.pieces[0].first += 5;  // somewhere inside, guard bytes on both sides
      remote.pieces[0].second = n;
      transfer(p, op, local, remote, {.wr_id = 0x100 + k});
    }
  }
}

TEST_CASE("inline SEND and RDMA WRITE from unregistered memory", "[sge][send][write]") {
  const Op op = GENERATE(Op::Send, Op::SendImm, Op::Write, Op::WriteImm);
  QpConfig cfg;
  cfg.max_inline_data = 256;
  cfg.max_send_sge = kAutoSge;
  Pair p(cfg);
  const size_t max_inline = p.a.cap.max_inline_data;
  INFO("max_inline_data " << max_inline);
  REQUIRE(max_inline >= 256);
  std::vector<size_t> sizes = {0, 1, 17, 63, 64, 255, max_inline};
  for (const size_t n : sizes) {
    for (const size_t nsge : {size_t{1}, size_t{3}}) {
      if (nsge > 1 && n < nsge) continue;
      INFO(op_name(op) << " inline, " << n << " bytes in " << nsge << " SGEs");
      // Heap source (std::vector), and a stack source, neither registered; bogus lkey.
      std::vector<uint8_t> heap(kGuard + n + 16 + kGuard);
      uint8_t stack_src[kGuard + 256 + 64 + 16 + kGuard];
      for (int where = 0; where < 2; ++where) {
        uint8_t *base = where == 0 ? heap.data() : stack_src;
        const size_t size = where == 0 ? heap.size() : sizeof stack_src;
        if (n + 16 + 2 * kGuard > size) continue;
        fill_pattern(base, size, seed_for("inline src", n, nsge * 2 + static_cast<size_t>(where)));
        Area local;
        local.base = base;
        local.size = size;
        local.lkey = 0xBAD0BAD0;  // ignored for inline data
        const std::vector<size_t> lens = nsge == 1 ? std::vector<size_t>{n} : split(n, nsge, 0);
        size_t at = kGuard + 1;
        for (size_t len : lens) {
          local.pieces.push_back({at, len});
          at += len + 5;
        }
        Region dst(p.b.pd(), std::max<size_t>(n, 1), seed_for("inline dst", n, nsge));
        XferOpts o;
        o.wr_id = 0x900 + n * 4 + nsge + static_cast<size_t>(where);
        o.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        o.scribble_source = true;
        Area remote = area_of(dst);
        remote.pieces[0].second = n;
        transfer(p, op, local, remote, o);
      }
    }
  }
}

// =============================================================================================
// [memory]: where buffers live, how they are registered
// =============================================================================================

TEST_CASE("buffers on the heap and on the stack and in mmap'd memory", "[memory]") {
  Pair p;
  SECTION("malloc, small and unaligned") {
    auto *m = static_cast<uint8_t *>(std::malloc(300));
    REQUIRE(m != nullptr);
    exercise_memory(p, m, 300, 37, 200, seed_for("malloc small"));
    std::free(m);
  }
  SECTION("malloc, 1 MiB and unaligned") {
    const size_t size = 1 * MiB + 300;
    auto *m = static_cast<uint8_t *>(std::malloc(size));
    REQUIRE(m != nullptr);
    exercise_memory(p, m, size, 131, 1 * MiB + 3, seed_for("malloc big"));
    std::free(m);
  }
  SECTION("new[] spanning several pages") {
    const size_t size = 5 * kPage + 123;
    std::unique_ptr<uint8_t[]> m(new uint8_t[size]);
    exercise_memory(p, m.get(), size, 100, 4 * kPage + 7, seed_for("new[]"));
  }
  SECTION("heap memory freed after deregistration, reallocated and registered again") {
    const size_t size = 64 * KiB + 40;
    for (int round = 0; round < 3; ++round) {
      INFO("round " << round);
      auto *m = static_cast<uint8_t *>(std::malloc(size));
      REQUIRE(m != nullptr);
      exercise_memory(p, m, size, 20, 64 * KiB, seed_for("realloc", static_cast<uint64_t>(round)));
      std::free(m);
    }
  }
  SECTION("stack, within one page") {
    alignas(64) uint8_t buf[1500];
    exercise_memory(p, buf, sizeof buf, 333, 1000, seed_for("stack small"));
  }
  SECTION("stack, several pages") {
    alignas(64) uint8_t buf[40000];
    exercise_memory(p, buf, sizeof buf, 1, 39000, seed_for("stack big"));
  }
  SECTION("mmap MAP_PRIVATE anonymous") {
    MmapBuf m(4 * MiB, MAP_PRIVATE);
    exercise_memory(p, m.data(), m.size(), kPage - 3, 3 * MiB + 11, seed_for("mmap private"));
  }
  SECTION("mmap MAP_SHARED anonymous") {
    MmapBuf m(2 * MiB, MAP_SHARED);
    exercise_memory(p, m.data(), m.size(), 17, 2 * MiB - 100, seed_for("mmap shared"));
  }
  SECTION("mmap MAP_PRIVATE anonymous, never touched before registration") {
    MmapBuf m(1 * MiB, MAP_PRIVATE);
    const std::vector<uint8_t> zeros(m.size(), 0);
    {
      MrPtr mr = reg_mr(p.b.pd(), m.data(), m.size());
      VT_REQUIRE_BYTES("untouched pages after ibv_reg_mr", m.data(), zeros.data(), m.size());
      Region src(p.a.pd(), 300 * KiB, seed_for("untouched src"));
      transfer(p, Op::Write, area_of(src),
               area_over(m.data(), m.size(), 5 * kPage + 9, 300 * KiB, mr.get()));
    }
    exercise_memory(p, m.data(), m.size(), 0, m.size(), seed_for("untouched"));
  }
  SECTION("mmap MAP_SHARED of a file: RDMA data reaches the file") {
    char path[] = "/tmp/vrnic-verbs-test-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    unlink(path);
    const size_t size = 256 * KiB;
    REQUIRE(ftruncate(fd, static_cast<off_t>(size)) == 0);
    void *v = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(v != MAP_FAILED);
    auto *m = static_cast<uint8_t *>(v);
    fill_pattern(m, size, seed_for("file"));
    {
      MrPtr mr = reg_unaltered(p.b.pd(), m, size);
      Region src(p.a.pd(), 200 * KiB, seed_for("file src"));
      transfer(p, Op::Write, area_of(src), area_over(m, size, 999, 200 * KiB, mr.get()));
    }
    std::vector<uint8_t> file(size);
    REQUIRE(pread(fd, file.data(), size, 0) == static_cast<ssize_t>(size));
    VT_REQUIRE_BYTES("file contents vs mapping", file.data(), m, size);
    exercise_memory(p, m, size, 4096, 100 * KiB, seed_for("file ex"));
    munmap(m, size);
    close(fd);
  }
}

TEST_CASE("one MR over adjacent private and shared mappings", "[memory]") {
  Pair p;
  const size_t size = 6 * kPage;
  MmapBuf m(size, MAP_PRIVATE);
  // Pages 2..3 become a shared anonymous mapping, page 4 a file mapping: three kinds in one MR.
  void *mid = mmap(m.data() + 2 * kPage, 2 * kPage, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  REQUIRE(mid == m.data() + 2 * kPage);
  char path[] = "/tmp/vrnic-verbs-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  unlink(path);
  REQUIRE(ftruncate(fd, static_cast<off_t>(kPage)) == 0);
  void *filep =
      mmap(m.data() + 4 * kPage, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  close(fd);
  REQUIRE(filep == m.data() + 4 * kPage);
  exercise_memory(p, m.data(), size, 100, size - 300, seed_for("mixed maps"));
}

TEST_CASE("read-only memory registered for remote read", "[memory]") {
  Pair p;
  const size_t size = 3 * kPage;
  MmapBuf m(size, MAP_PRIVATE);
  fill_pattern(m.data(), size, seed_for("ro"));
  REQUIRE(mprotect(m.data(), size, PROT_READ) == 0);
  MrPtr mr = reg_unaltered(p.b.pd(), m.data(), size, IBV_ACCESS_REMOTE_READ);
  Region dst(p.a.pd(), size - 10, seed_for("ro dst"));
  transfer(p, Op::Read, area_of(dst), area_over(m.data(), size, 5, size - 10, mr.get()));
  // Writing is refused by the MR's access rights (the QP then goes to ERR).
  Region src(p.a.pd(), 64, seed_for("ro src"));
  ibv_sge sg = make_sge(src.payload(), 64, src.lkey());
  ibv_send_wr wr = make_send_wr(0xA1, IBV_WR_RDMA_WRITE, &sg, 1);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(m.data());
  wr.wr.rdma.rkey = mr->rkey;
  post_send(p.a.qp(), &wr);
  expect_wc(p.a.scq(), "WRITE to read-only memory", 0xA1, p.a.qpn(), IBV_WC_REM_ACCESS_ERR);
  mr.reset();
  const std::vector<uint8_t> want = make_pattern(size, seed_for("ro"));
  VT_REQUIRE_BYTES("read-only memory", m.data(), want.data(), size);
  REQUIRE(mprotect(m.data(), size, PROT_READ | PROT_WRITE) == 0);
}

TEST_CASE("an MR registered with ibv_reg_mr_iova2 is addressed by its IOVA", "[memory]") {
  Pair p;
  const size_t size = 5 * kPage + 100;
  AlignedBuf rbuf(size);
  fill_pattern(rbuf.data(), size, seed_for("iova r"));
  const uint64_t riova = 0x7000000000ull + 123;
  MrPtr rmr(ibv_reg_mr_iova2(p.b.pd(), rbuf.data(), size, riova, kAllAccess));
  INFO("ibv_reg_mr_iova2: " << std::strerror(errno));
  REQUIRE(rmr);
  AlignedBuf lbuf(size);
  fill_pattern(lbuf.data(), size, seed_for("iova l"));
  const uint64_t liova = 0x10000;
  MrPtr lmr(ibv_reg_mr_iova2(p.a.pd(), lbuf.data(), size, liova, kAllAccess));
  REQUIRE(lmr);
  const size_t off = 777, n = 4 * kPage + 3;
  // WRITE: local SGE and remote address both in IOVA space.
  {
    std::vector<uint8_t> want(rbuf.data(), rbuf.data() + size);
    std::memcpy(want.data() + off + 10, lbuf.data() + off, n);
    ibv_sge sg{liova + off, static_cast<uint32_t>(n), lmr->lkey};
    ibv_send_wr wr = make_send_wr(1, IBV_WR_RDMA_WRITE, &sg, 1);
    wr.wr.rdma.remote_addr = riova + off + 10;
    wr.wr.rdma.rkey = rmr->rkey;
    post_send(p.a.qp(), &wr);
    expect_wc(p.a.scq(), "WRITE by IOVA", 1, p.a.qpn(), IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    VT_REQUIRE_BYTES("responder memory", rbuf.data(), want.data(), size);
  }
  // READ back into another part of the local MR.
  {
    std::vector<uint8_t> want(lbuf.data(), lbuf.data() + size);
    std::memcpy(want.data() + 50, rbuf.data() + 3000, 2 * kPage);
    ibv_sge sg{liova + 50, static_cast<uint32_t>(2 * kPage), lmr->lkey};
    ibv_send_wr wr = make_send_wr(2, IBV_WR_RDMA_READ, &sg, 1);
    wr.wr.rdma.remote_addr = riova + 3000;
    wr.wr.rdma.rkey = rmr->rkey;
    post_send(p.a.qp(), &wr);
    expect_wc(p.a.scq(), "READ by IOVA", 2, p.a.qpn(), IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 2 * kPage);
    VT_REQUIRE_BYTES("requester memory", lbuf.data(), want.data(), size);
  }
  // An atomic by IOVA in the middle of the region (riova is not 8-aligned: pick an IOVA that is).
  {
    const uint64_t target_iova = (riova + 2 * kPage + 7) & ~uint64_t{7};
    const size_t toff = static_cast<size_t>(target_iova - riova);
    uint64_t orig;
    std::memcpy(&orig, rbuf.data() + toff, 8);
    const uint64_t sum = orig + 5;
    std::vector<uint8_t> lwant(lbuf.data(), lbuf.data() + size),
        rwant(rbuf.data(), rbuf.data() + size);
    std::memcpy(lwant.data() + 16, &orig, 8);
    std::memcpy(rwant.data() + toff, &sum, 8);
    ibv_sge sg{liova + 16, 8, lmr->lkey};
    ibv_send_wr wr = make_send_wr(3, IBV_WR_ATOMIC_FETCH_AND_ADD, &sg, 1);
    wr.wr.atomic.remote_addr = target_iova;
    wr.wr.atomic.rkey = rmr->rkey;
    wr.wr.atomic.compare_add = 5;
    post_send(p.a.qp(), &wr);
    expect_wc(p.a.scq(), "FETCH_AND_ADD by IOVA", 3, p.a.qpn(), IBV_WC_SUCCESS, IBV_WC_FETCH_ADD,
              8);
    VT_REQUIRE_BYTES("requester memory", lbuf.data(), lwant.data(), size);
    VT_REQUIRE_BYTES("responder memory", rbuf.data(), rwant.data(), size);
  }
  // The virtual address is not an IOVA of the region: out of bounds.
  {
    ibv_sge sg{liova, 64, lmr->lkey};
    ibv_send_wr wr = make_send_wr(4, IBV_WR_RDMA_WRITE, &sg, 1);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(rbuf.data());
    wr.wr.rdma.rkey = rmr->rkey;
    const std::vector<uint8_t> before(rbuf.data(), rbuf.data() + size);
    post_send(p.a.qp(), &wr);
    expect_wc(p.a.scq(), "WRITE by virtual address to an IOVA-based MR", 4, p.a.qpn(),
              IBV_WC_REM_ACCESS_ERR);
    VT_REQUIRE_BYTES("responder memory", rbuf.data(), before.data(), size);
  }
  require_cqs_empty(p);
}

TEST_CASE("two MRs over overlapping ranges both work and never alter the data", "[memory]") {
  QpConfig cfg;
  cfg.max_recv_sge = 2;
  Pair p(cfg);
  // [kGuard | 3 pages | kGuard]; mr1 = [0, 2 pages + 100), mr2 = [1 page + 50, 3 pages)
  AlignedBuf buf(kGuard + 3 * kPage + kGuard);
  uint8_t *const b0 = buf.data() + kGuard;
  fill_pattern(buf.data(), buf.size(), seed_for("overlap"));
  MrPtr mr1 = reg_unaltered(p.b.pd(), b0, 2 * kPage + 100);
  MrPtr mr2 = reg_unaltered(p.b.pd(), b0 + kPage + 50, 2 * kPage - 50);
  CHECK(mr1->rkey != mr2->rkey);
  auto over = [&](size_t off, size_t n, const ibv_mr *mr) {
    return area_over(buf.data(), buf.size(), kGuard + off, n, mr);
  };
  Region s1(p.a.pd(), kPage + 50, seed_for("overlap s1"));
  transfer(p, Op::Write, area_of(s1), over(kPage + 50, kPage + 50, mr1.get()), {.wr_id = 1});
  Region d1(p.a.pd(), kPage + 50, seed_for("overlap d1"));
  transfer(p, Op::Read, area_of(d1), over(kPage + 50, kPage + 50, mr2.get()), {.wr_id = 2});
  VT_REQUIRE_BYTES("read through mr2 of what was written through mr1", d1.payload(), s1.payload(),
                   s1.len);
  Region s2(p.a.pd(), kPage, seed_for("overlap s2"));
  transfer(p, Op::Write, area_of(s2), over(2 * kPage, kPage, mr2.get()), {.wr_id = 3});
  Region d2(p.a.pd(), kPage + 100, seed_for("overlap d2"));
  transfer(p, Op::Read, area_of(d2), over(kPage, kPage + 100, mr1.get()), {.wr_id = 4});
  VT_REQUIRE_BYTES("read through mr1 of what was written through mr2", d2.payload() + kPage,
                   s2.payload(), 100);

  // One receive scattering into both MRs (first SGE via mr1, second via mr2).
  {
    Area rcv;
    rcv.base = buf.data();
    rcv.size = buf.size();
    rcv.pieces = {{kGuard + 10, kPage}, {kGuard + kPage + 60, kPage + 500}};
    Region src(p.a.pd(), 2 * kPage + 500, seed_for("overlap send"));
    const std::vector<uint8_t> before = rcv.snapshot();
    std::vector<uint8_t> want = before;
    rcv.scatter_into(want, src.payload(), src.len);
    ibv_sge rs[2] = {make_sge(b0 + 10, kPage, mr1->lkey),
                     make_sge(b0 + kPage + 60, kPage + 500, mr2->lkey)};
    ibv_recv_wr rwr = make_recv_wr(0x51, rs, 2);
    post_recv(p.b.qp(), &rwr);
    ibv_sge ss = make_sge(src.payload(), src.len, src.lkey());
    ibv_send_wr swr = make_send_wr(0x50, IBV_WR_SEND, &ss, 1);
    post_send(p.a.qp(), &swr);
    expect_wc(p.a.scq(), "send", 0x50, p.a.qpn(), IBV_WC_SUCCESS, IBV_WC_SEND);
    expect_wc(p.b.rcq(), "receive over two MRs", 0x51, p.b.qpn(), IBV_WC_SUCCESS, IBV_WC_RECV,
              static_cast<int64_t>(src.len), true);
    VT_REQUIRE_BYTES("receive over two overlapping MRs", buf.data(), want.data(), want.size());
  }

  // Deregistering one leaves the data and the other MR intact.
  const std::vector<uint8_t> kept(buf.data(), buf.data() + buf.size());
  ibv_mr *raw = mr1.release();
  REQUIRE(ibv_dereg_mr(raw) == 0);
  VT_REQUIRE_BYTES("memory after deregistering mr1", buf.data(), kept.data(), kept.size());
  Region s3(p.a.pd(), kPage + 50, seed_for("overlap s3"));
  transfer(p, Op::Write, area_of(s3), over(kPage + 50, kPage + 50, mr2.get()), {.wr_id = 5});
  Region d3(p.a.pd(), 2 * kPage - 50, seed_for("overlap d3"));
  transfer(p, Op::Read, area_of(d3), over(kPage + 50, 2 * kPage - 50, mr2.get()), {.wr_id = 6});
  const std::vector<uint8_t> kept2(buf.data(), buf.data() + buf.size());
  raw = mr2.release();
  REQUIRE(ibv_dereg_mr(raw) == 0);
  VT_REQUIRE_BYTES("memory after deregistering mr2", buf.data(), kept2.data(), kept2.size());
  fill_pattern(buf.data(), buf.size(), seed_for("overlap after"));
  const std::vector<uint8_t> fresh = make_pattern(buf.size(), seed_for("overlap after"));
  VT_REQUIRE_BYTES("memory writable after deregistration", buf.data(), fresh.data(), fresh.size());
}

TEST_CASE("one buffer registered twice in one PD and once more in another", "[memory]") {
  Pair p;
  const size_t size = 3 * kPage + 777;
  AlignedBuf buf(size + 64);
  uint8_t *const base = buf.data() + 32;  // unaligned start and end
  fill_pattern(buf.data(), buf.size(), seed_for("twice"));
  MrPtr mr1 = reg_unaltered(p.b.pd(), base, size);
  MrPtr mr2 = reg_unaltered(p.b.pd(), base, size);
  MrPtr mr3 = reg_unaltered(p.a.pd(), base, size);  // same memory as the requester's
  CHECK(mr1->lkey != mr2->lkey);
  CHECK(mr1->rkey != mr2->rkey);
  auto over = [&](size_t off, size_t n, const ibv_mr *mr) {
    return area_over(buf.data(), buf.size(), 32 + off, n, mr);
  };
  const size_t half = size / 2;
  Region s1(p.a.pd(), half, seed_for("twice s1"));
  transfer(p, Op::Write, area_of(s1), over(0, half, mr1.get()), {.wr_id = 1});
  Region s2(p.a.pd(), size - half, seed_for("twice s2"));
  transfer(p, Op::Write, area_of(s2), over(half, size - half, mr2.get()), {.wr_id = 2});
  Region d(p.a.pd(), size, seed_for("twice d"));
  transfer(p, Op::Read, area_of(d), over(0, size, mr1.get()), {.wr_id = 3});
  VT_REQUIRE_BYTES("first half", d.payload(), s1.payload(), half);
  VT_REQUIRE_BYTES("second half", d.payload() + half, s2.payload(), size - half);
  // The third registration (other PD) as the requester's source: WRITE it into the responder.
  Region out(p.b.pd(), size, seed_for("twice out"));
  transfer(p, Op::Write, over(0, size, mr3.get()), area_of(out), {.wr_id = 4});
  // Receive through mr2.
  Region s3(p.a.pd(), 1000, seed_for("twice s3"));
  transfer(p, Op::Send, area_of(s3), over(500, 1000, mr2.get()), {.wr_id = 5});

  const std::vector<uint8_t> kept(buf.data(), buf.data() + buf.size());
  ibv_mr *raw = mr1.release();
  REQUIRE(ibv_dereg_mr(raw) == 0);
  VT_REQUIRE_BYTES("memory after deregistering the first registration", buf.data(), kept.data(),
                   kept.size());
  Region s4(p.a.pd(), size, seed_for("twice s4"));
  transfer(p, Op::Write, area_of(s4), over(0, size, mr2.get()), {.wr_id = 6});
  Region d4(p.a.pd(), size, seed_for("twice d4"));
  transfer(p, Op::Read, area_of(d4), over(0, size, mr2.get()), {.wr_id = 7});
  mr2.reset();
  mr3.reset();
  VT_REQUIRE_BYTES("memory after deregistering all", base, s4.payload(), size);
  fill_pattern(buf.data(), buf.size(), 99);
  const std::vector<uint8_t> fresh = make_pattern(buf.size(), 99);
  VT_REQUIRE_BYTES("memory writable after deregistration", buf.data(), fresh.data(), fresh.size());
}

TEST_CASE("a forked child's writes never reach the parent's registered or deregistered memory",
          "[memory][fork]") {
  // libibverbs' ibv_is_fork_initialized() == IBV_FORK_UNNEEDED promises that fork() is safe
  // without ibv_fork_init(): the child gets copies, the parent keeps its (registered) pages.
  if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED) {
    WARN("ibv_is_fork_initialized() != IBV_FORK_UNNEEDED: fork semantics not promised, skipped");
    return;
  }
  const bool keep_registered = GENERATE(true, false);
  INFO((keep_registered ? "memory still registered at fork" : "memory deregistered before fork"));
  Pair p;
  const size_t size = 16 * kPage;
  AlignedBuf buf(size);
  fill_pattern(buf.data(), size, seed_for("fork"));
  MrPtr mr = reg_unaltered(p.b.pd(), buf.data(), size);
  Region src(p.a.pd(), size - 200, seed_for("fork src"));
  transfer(p, Op::Write, area_of(src), area_over(buf.data(), size, 100, size - 200, mr.get()));
  if (!keep_registered) mr.reset();
  const std::vector<uint8_t> before(buf.data(), buf.data() + size);

  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::memset(buf.data(), 0x5A, size);  // the child's copy only
    _exit(0);
  }
  int status = 0;
  const bool done = wait_child(pid, &status, Ms{5000});
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  REQUIRE(done);
  REQUIRE(WIFEXITED(status));
  VT_REQUIRE_BYTES("parent's memory after the child wrote its copy", buf.data(), before.data(),
                   size);
  if (keep_registered) {
    // The NIC still writes into the parent's pages.
    Region src2(p.a.pd(), size - 200, seed_for("fork src2"));
    transfer(p, Op::Write, area_of(src2), area_over(buf.data(), size, 100, size - 200, mr.get()));
  }
}

// =============================================================================================
// [error]: remote access errors, local errors, length errors, bad arguments
// =============================================================================================
namespace {

enum class Bad { Rkey, StaleRkey, ForeignPdKey, PastEnd, BeforeStart, NoMrAccess, NoQpAccess };

struct AccessCase {
  const char *name;
  Op op;
  Bad bad;
};

unsigned right_for(Op op) {
  if (is_write(op)) return IBV_ACCESS_REMOTE_WRITE;
  if (op == Op::Read) return IBV_ACCESS_REMOTE_READ;
  return IBV_ACCESS_REMOTE_ATOMIC;
}

}  // namespace

TEST_CASE("remote access violations: REM_ACCESS_ERR and both QPs to ERR and later WRs flush",
          "[error]") {
  const AccessCase c = GENERATE(
      AccessCase{"WRITE with a bad rkey", Op::Write, Bad::Rkey},
      AccessCase{"WRITE_WITH_IMM with a bad rkey", Op::WriteImm, Bad::Rkey},
      AccessCase{"READ with a bad rkey", Op::Read, Bad::Rkey},
      AccessCase{"FETCH_AND_ADD with a bad rkey", Op::FetchAdd, Bad::Rkey},
      AccessCase{"WRITE with the rkey of a deregistered MR", Op::Write, Bad::StaleRkey},
      AccessCase{"READ with the rkey of an MR of another PD", Op::Read, Bad::ForeignPdKey},
      AccessCase{"WRITE one byte past the end of the MR", Op::Write, Bad::PastEnd},
      AccessCase{"WRITE starting one byte before the MR", Op::Write, Bad::BeforeStart},
      AccessCase{"READ one byte past the end of the MR", Op::Read, Bad::PastEnd},
      AccessCase{"READ starting one byte before the MR", Op::Read, Bad::BeforeStart},
      AccessCase{"CMP_AND_SWP just past the end of the MR", Op::CmpSwap, Bad::PastEnd},
      AccessCase{"WRITE to an MR without REMOTE_WRITE", Op::Write, Bad::NoMrAccess},
      AccessCase{"WRITE_WITH_IMM to an MR without REMOTE_WRITE", Op::WriteImm, Bad::NoMrAccess},
      AccessCase{"READ from an MR without REMOTE_READ", Op::Read, Bad::NoMrAccess},
      AccessCase{"CMP_AND_SWP on an MR without REMOTE_ATOMIC", Op::CmpSwap, Bad::NoMrAccess},
      AccessCase{"FETCH_AND_ADD on an MR without REMOTE_ATOMIC", Op::FetchAdd, Bad::NoMrAccess},
      AccessCase{"WRITE to a QP without REMOTE_WRITE access", Op::Write, Bad::NoQpAccess},
      AccessCase{"READ from a QP without REMOTE_READ access", Op::Read, Bad::NoQpAccess},
      AccessCase{"FETCH_AND_ADD on a QP without REMOTE_ATOMIC access", Op::FetchAdd,
                 Bad::NoQpAccess});
  INFO("case: " << c.name);
  QpConfig cfg;
  if (c.bad == Bad::NoQpAccess) cfg.qp_access = kAllAccess & ~right_for(c.op);
  Pair p(cfg);
  const size_t n = 4096;
  const size_t len = is_atomic(c.op) ? 8 : 64;
  // Responder memory: [guard | n bytes | guard]; the MR covers exactly the n bytes.
  AlignedBuf rbuf(kGuard + n + kGuard);
  fill_pattern(rbuf.data(), rbuf.size(), seed_for("access r"));
  uint8_t *const rpay = rbuf.data() + kGuard;
  const unsigned access = c.bad == Bad::NoMrAccess ? (kAllAccess & ~right_for(c.op)) : kAllAccess;
  MrPtr rmr = reg_unaltered(p.b.pd(), rpay, n, access);
  Region ok_src(p.a.pd(), 256, seed_for("access ok src"));
  Region ok_dst(p.b.pd(), 256, seed_for("access ok dst"));
  Region local(p.a.pd(), 256, seed_for("access local"));
  // 0xB0 is consumed by the SEND posted before the violating WR; 0xB1 and 0xB2 must flush.
  Region first_dst(p.b.pd(), 64, seed_for("access first dst"));
  ibv_sge first_rsg = make_sge(first_dst.payload(), 64, first_dst.lkey());
  ibv_recv_wr first_rwr = make_recv_wr(0xB0, &first_rsg, 1);
  post_recv(p.b.qp(), &first_rwr);
  PostedRecv r1(p, 0xB1, 1), r2(p, 0xB2, 2);

  uint64_t raddr = reinterpret_cast<uintptr_t>(rpay) + 512;
  uint32_t rkey = rmr->rkey;
  switch (c.bad) {
    case Bad::Rkey:
      rkey = rmr->rkey ^ 0x5A5A5A00u;
      break;
    case Bad::StaleRkey: {
      MrPtr gone = reg_mr(p.b.pd(), rpay, n);
      rkey = gone->rkey;
      raddr = reinterpret_cast<uintptr_t>(rpay);
      break;  // deregistered here
    }
    case Bad::ForeignPdKey:
      rkey = local.rkey();  // valid, all access, but in the requester's PD
      raddr = local.addr();
      break;
    case Bad::PastEnd:
      raddr = reinterpret_cast<uintptr_t>(rpay) + n - len + (is_atomic(c.op) ? 8 : 1);
      break;
    case Bad::BeforeStart:
      raddr = reinterpret_cast<uintptr_t>(rpay) - 1;
      break;
    case Bad::NoMrAccess:
    case Bad::NoQpAccess:
      break;
  }
  const std::vector<uint8_t> rbefore(rbuf.data(), rbuf.data() + rbuf.size());
  const std::vector<uint8_t> lbefore = local.snapshot(), okbefore = ok_dst.snapshot();
  const long long naks0 = counter_or_skip("naks_sent");

  ibv_sge sg = make_sge(local.payload(), len, local.lkey());
  ibv_send_wr bad = make_send_wr(0xA1, wr_opcode(c.op), &sg, 1);
  if (is_atomic(c.op)) {
    bad.wr.atomic.remote_addr = raddr;
    bad.wr.atomic.rkey = rkey;
    bad.wr.atomic.compare_add = 1;
    bad.wr.atomic.swap = 2;
  } else {
    bad.wr.rdma.remote_addr = raddr;
    bad.wr.rdma.rkey = rkey;
  }
  if (has_imm(c.op)) bad.imm_data = imm_for(0xA1);
  ibv_sge ok_sg = make_sge(ok_src.payload(), 256, ok_src.lkey());
  ibv_send_wr behind = make_send_wr(0xA2, IBV_WR_RDMA_WRITE, &ok_sg, 1);
  behind.wr.rdma.remote_addr = ok_dst.addr();
  behind.wr.rdma.rkey = ok_dst.rkey();
  bad.next = &behind;
  ibv_sge first_sg = make_sge(ok_src.payload(), 32, ok_src.lkey());
  ibv_send_wr first = make_send_wr(0xA0, IBV_WR_SEND, &first_sg, 1);
  first.next = &bad;
  std::vector<uint8_t> first_want = first_dst.snapshot();
  std::memcpy(first_want.data() + first_dst.off, ok_src.payload(), 32);
  post_send(p.a.qp(), &first);

  expect_wc(p.a.scq(), "the valid SEND posted before the violating WR", 0xA0, p.a.qpn(),
            IBV_WC_SUCCESS, IBV_WC_SEND);
  expect_wc(p.b.rcq(), "the receive of the SEND before the violating WR", 0xB0, p.b.qpn(),
            IBV_WC_SUCCESS, IBV_WC_RECV, 32, true);
  VT_REQUIRE_BYTES("data of the SEND before the violating WR", first_dst.buf.data(),
                   first_want.data(), first_want.size());
  expect_wc(p.a.scq(), "the violating WR", 0xA1, p.a.qpn(), IBV_WC_REM_ACCESS_ERR);
  expect_wc(p.a.scq(), "the valid WR queued behind it", 0xA2, p.a.qpn(), IBV_WC_WR_FLUSH_ERR);
  require_requester_flushes(p, 0xA3, ok_src, ok_dst);
  require_responder_flushes(p, {&r1, &r2}, {0xB1, 0xB2}, 0xB3);
  require_cqs_empty(p);

  VT_REQUIRE_BYTES("responder memory (MR and the guards around it)", rbuf.data(), rbefore.data(),
                   rbefore.size());
  VT_REQUIRE_BYTES("target of the flushed WRITEs", ok_dst.buf.data(), okbefore.data(),
                   okbefore.size());
  VT_REQUIRE_BYTES("requester's local buffer", local.buf.data(), lbefore.data(), lbefore.size());
  require_counter_grew("naks_sent", naks0, 1);
}

namespace {
enum class LocalBad { Lkey, StaleLkey, PastEnd, NoLocalWrite };
struct LocalCase {
  const char *name;
  Op op;
  LocalBad bad;
};
}  // namespace

TEST_CASE("bad local key or SGE outside its MR: requester LOC_PROT_ERR and responder unaffected",
          "[error]") {
  const LocalCase c =
      GENERATE(LocalCase{"SEND with a bad lkey", Op::Send, LocalBad::Lkey},
               LocalCase{"WRITE with a bad lkey", Op::Write, LocalBad::Lkey},
               LocalCase{"READ with a bad lkey", Op::Read, LocalBad::Lkey},
               LocalCase{"CMP_AND_SWP with a bad lkey", Op::CmpSwap, LocalBad::Lkey},
               LocalCase{"SEND with the lkey of a deregistered MR", Op::Send, LocalBad::StaleLkey},
               LocalCase{"SEND with an SGE one byte past its MR", Op::Send, LocalBad::PastEnd},
               LocalCase{"WRITE with an SGE one byte past its MR", Op::Write, LocalBad::PastEnd},
               LocalCase{"READ with an SGE one byte past its MR", Op::Read, LocalBad::PastEnd},
               LocalCase{"READ into an MR without LOCAL_WRITE", Op::Read, LocalBad::NoLocalWrite},
               LocalCase{"FETCH_AND_ADD into an MR without LOCAL_WRITE", Op::FetchAdd,
                         LocalBad::NoLocalWrite});
  INFO("case: " << c.name);
  Pair p;
  const size_t n = is_atomic(c.op) ? 8 : 1000;
  Region l(p.a.pd(), n, seed_for("lkey l"), 0,
           c.bad == LocalBad::NoLocalWrite ? unsigned(IBV_ACCESS_REMOTE_READ) : kAllAccess);
  Region r(p.b.pd(), 2000, seed_for("lkey r"));
  Region ok_src(p.a.pd(), 256, seed_for("lkey ok src"));
  Region ok_dst(p.b.pd(), 256, seed_for("lkey ok dst"));
  PostedRecv r1(p, 0xB1, 1);
  const std::vector<uint8_t> lbefore = l.snapshot(), rbefore = r.snapshot(),
                             okbefore = ok_dst.snapshot();
  ibv_sge sg = make_sge(l.payload(), l.len, l.lkey());
  if (c.bad == LocalBad::Lkey) sg.lkey ^= 0x5A5A5A00u;
  if (c.bad == LocalBad::StaleLkey)
    sg.lkey = reg_mr(p.a.pd(), l.buf.data(), l.buf.size())->lkey;  // deregistered
  if (c.bad == LocalBad::PastEnd)
    sg = make_sge(l.buf.data(), l.buf.size() + 1, l.lkey());  // MR = whole buf
  ibv_send_wr wr = make_send_wr(0xA1, wr_opcode(c.op), &sg, 1);
  if (is_atomic(c.op)) {
    wr.wr.atomic.remote_addr = r.addr();
    wr.wr.atomic.rkey = r.rkey();
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = r.addr();
    wr.wr.rdma.rkey = r.rkey();
  }
  ibv_sge ok_sg = make_sge(ok_src.payload(), 256, ok_src.lkey());
  ibv_send_wr behind = make_send_wr(0xA2, IBV_WR_RDMA_WRITE, &ok_sg, 1);
  behind.wr.rdma.remote_addr = ok_dst.addr();
  behind.wr.rdma.rkey = ok_dst.rkey();
  wr.next = &behind;
  post_send(p.a.qp(), &wr);
  expect_wc(p.a.scq(), "WR with the bad local SGE", 0xA1, p.a.qpn(), IBV_WC_LOC_PROT_ERR);
  expect_wc(p.a.scq(), "the valid WR queued behind it", 0xA2, p.a.qpn(), IBV_WC_WR_FLUSH_ERR);
  require_requester_flushes(p, 0xA3, ok_src, ok_dst);
  // The responder saw no request in error: no completion, still RTS, its receive still posted.
  require_no_completion(p.b.rcq(), Ms{100}, "responder receive CQ");
  require_qp_state(p.b.qp(), IBV_QPS_RTS, "responder QP", Ms{0});
  r1.require_untouched();
  if (c.op == Op::Read || is_atomic(c.op)) {
    // The local buffer's payload is undefined after a failed READ/atomic; the guards are not.
    VT_REQUIRE_BYTES("guard before the local buffer", l.buf.data(), lbefore.data(), l.off);
    VT_REQUIRE_BYTES("guard after the local buffer", l.payload() + n, lbefore.data() + l.off + n,
                     kGuard);
  } else {
    VT_REQUIRE_BYTES("requester buffer", l.buf.data(), lbefore.data(), lbefore.size());
  }
  // (A NIC may execute a READ/atomic before it finds the local buffer bad; a WRITE/SEND never.)
  if (!is_atomic(c.op))
    VT_REQUIRE_BYTES("responder buffer", r.buf.data(), rbefore.data(), rbefore.size());
  VT_REQUIRE_BYTES("target of the flushed WRITEs", ok_dst.buf.data(), okbefore.data(),
                   okbefore.size());
  require_cqs_empty(p);
}

TEST_CASE("receive with a bad lkey or without LOCAL_WRITE: REM_OP_ERR and LOC_PROT_ERR",
          "[error][send]") {
  const bool bad_key = GENERATE(true, false);
  INFO((bad_key ? "receive SGE with a bad lkey" : "receive into an MR without LOCAL_WRITE"));
  Pair p;
  Region src(p.a.pd(), 100, seed_for("recv prot src"));
  Region dst(p.b.pd(), 100, seed_for("recv prot dst"), 0,
             bad_key ? kAllAccess : unsigned(IBV_ACCESS_REMOTE_READ));
  Region ok_src(p.a.pd(), 256, seed_for("recv prot ok src"));
  Region ok_dst(p.b.pd(), 256, seed_for("recv prot ok dst"));
  ibv_sge rsg = make_sge(dst.payload(), 100, bad_key ? dst.lkey() ^ 0x5A5A5A00u : dst.lkey());
  ibv_recv_wr rwr = make_recv_wr(0xB1, &rsg, 1);
  post_recv(p.b.qp(), &rwr);
  PostedRecv r2(p, 0xB2, 2);
  const std::vector<uint8_t> dbefore = dst.snapshot();
  ibv_sge ssg = make_sge(src.payload(), 100, src.lkey());
  ibv_send_wr wr = make_send_wr(0xA1, IBV_WR_SEND, &ssg, 1);
  post_send(p.a.qp(), &wr);
  expect_wc(p.a.scq(), "the SEND", 0xA1, p.a.qpn(), IBV_WC_REM_OP_ERR);
  expect_wc(p.b.rcq(), "the bad receive", 0xB1, p.b.qpn(), IBV_WC_LOC_PROT_ERR);
  require_requester_flushes(p, 0xA3, ok_src, ok_dst);
  require_responder_flushes(p, {&r2}, {0xB2}, 0xB3);
  require_cqs_empty(p);
  VT_REQUIRE_BYTES("receive buffer", dst.buf.data(), dbefore.data(), dbefore.size());
}

TEST_CASE("a QP in ERR flushes on modify to ERR and works again after RESET and reconnection",
          "[error]") {
  Pair p;
  // The application moves the responder to ERR: its receives flush.
  PostedRecv r1(p, 0xB1, 1), r2(p, 0xB2, 2);
  {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(p.b.qp(), &at, IBV_QP_STATE) == 0);
  }
  require_responder_flushes(p, {&r1, &r2}, {0xB1, 0xB2}, 0xB3);
  // The requester finds the peer gone (no ACKs come back from a QP in ERR) or is moved there.
  {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(p.a.qp(), &at, IBV_QP_STATE) == 0);
  }
  Region ok_src(p.a.pd(), 256, seed_for("reset ok src"));
  Region ok_dst(p.b.pd(), 256, seed_for("reset ok dst"));
  require_requester_flushes(p, 0xA1, ok_src, ok_dst);
  require_cqs_empty(p);
  // RESET, then connect again with fresh PSNs.
  for (Endpoint *e : {&p.a, &p.b}) {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RESET;
    REQUIRE(ibv_modify_qp(e->qp(), &at, IBV_QP_STATE) == 0);
    CHECK(query_state(e->qp()) == IBV_QPS_RESET);
  }
  p.a.psn = 0x123456;
  p.b.psn = 0xFFFFF0;
  REQUIRE(try_connect(*p.dev, p.a, p.cfg, local_info(*p.dev, p.b)).empty());
  REQUIRE(try_connect(*p.dev, p.b, p.cfg, local_info(*p.dev, p.a)).empty());
  require_cqs_empty(p);
  for (const Op op : {Op::Write, Op::Read, Op::SendImm, Op::WriteImm}) {
    Region l(p.a.pd(), 70000, seed_for("reset l", static_cast<uint64_t>(op)));
    Region r(p.b.pd(), 70000, seed_for("reset r", static_cast<uint64_t>(op)));
    transfer(p, op, area_of(l), area_of(r), {.wr_id = 0x300 + static_cast<uint64_t>(op) * 2});
  }
}

TEST_CASE("posting more WRs than the queue holds fails at the first one that does not fit",
          "[error]") {
  QpConfig cfg;
  cfg.max_send_wr = 8;
  cfg.max_recv_wr = 8;
  Pair p(cfg);
  const uint32_t sq = p.a.cap.max_send_wr, rq = p.b.cap.max_recv_wr;
  INFO("max_send_wr " << sq << ", max_recv_wr " << rq);
  REQUIRE(sq >= 8);
  REQUIRE(sq <= 4096);
  REQUIRE(rq >= 8);
  REQUIRE(rq <= 4096);
  Region src(p.a.pd(), 64, seed_for("full src"));
  Region dst(p.b.pd(), 64, seed_for("full dst"));
  ibv_sge sg = make_sge(src.payload(), 64, src.lkey());
  std::vector<ibv_send_wr> wrs(sq + 1);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i] = make_send_wr(0x1000 + i, IBV_WR_RDMA_WRITE, &sg, 1);
    wrs[i].wr.rdma.remote_addr = dst.addr();
    wrs[i].wr.rdma.rkey = dst.rkey();
    if (i > 0) wrs[i - 1].next = &wrs[i];
  }
  ibv_send_wr *bad = nullptr;
  const int rc = ibv_post_send(p.a.qp(), wrs.data(), &bad);
  INFO("ibv_post_send of " << wrs.size() << " WRs returned " << rc);
  CHECK(rc == ENOMEM);
  CHECK(bad == &wrs[sq]);
  const auto wcs = poll_n(p.a.scq(), sq, "requester send CQ");
  for (size_t i = 0; i < sq; ++i) {
    WcExpect e;
    e.what = "WRITE that fitted";
    e.wr_id = 0x1000 + i;
    e.qp_num = p.a.qpn();
    e.opcode = IBV_WC_RDMA_WRITE;
    check_wc(wcs[i], e);
  }
  require_no_completion(p.a.scq(), Ms{50}, "requester send CQ (the WR that did not fit)");

  std::vector<ibv_sge> rsg(rq + 1);
  std::vector<ibv_recv_wr> rwrs(rq + 1);
  std::vector<std::unique_ptr<Region>> rbufs;
  for (size_t i = 0; i < rwrs.size(); ++i) {
    rbufs.push_back(std::make_unique<Region>(p.b.pd(), 16, seed_for("full rcv", i)));
    rsg[i] = make_sge(rbufs.back()->payload(), 16, rbufs.back()->lkey());
    rwrs[i] = make_recv_wr(0x2000 + i, &rsg[i], 1);
    if (i > 0) rwrs[i - 1].next = &rwrs[i];
  }
  ibv_recv_wr *rbad = nullptr;
  const int rrc = ibv_post_recv(p.b.qp(), rwrs.data(), &rbad);
  INFO("ibv_post_recv of " << rwrs.size() << " WRs returned " << rrc);
  CHECK(rrc == ENOMEM);
  CHECK(rbad == &rwrs[rq]);
  require_cqs_empty(p);
}

TEST_CASE("SEND larger than the posted receive: REM_INV_REQ_ERR and LOC_LEN_ERR", "[error][send]") {
  const Op op = GENERATE(Op::Send, Op::SendImm);
  const auto lens =
      GENERATE(std::make_pair<size_t, size_t>(100, 101), std::make_pair<size_t, size_t>(8192, 8193),
               std::make_pair<size_t, size_t>(0, 1));
  const size_t recv_len = lens.first, send_len = lens.second;
  INFO(op_name(op) << " of " << send_len << " bytes into a receive of " << recv_len);
  Pair p;
  Region src(p.a.pd(), send_len, seed_for("len src", send_len));
  Region dst(p.b.pd(), recv_len, seed_for("len dst", recv_len));
  Region ok_src(p.a.pd(), 256, seed_for("len ok src"));
  Region ok_dst(p.b.pd(), 256, seed_for("len ok dst"));
  ibv_sge rsg = make_sge(dst.payload(), recv_len, dst.lkey());
  ibv_recv_wr rwr = make_recv_wr(0xB1, &rsg, recv_len ? 1 : 0);
  post_recv(p.b.qp(), &rwr);
  PostedRecv r2(p, 0xB2, 2);
  const std::vector<uint8_t> dbefore = dst.snapshot(), sbefore = src.snapshot();
  ibv_sge ssg = make_sge(src.payload(), send_len, src.lkey());
  ibv_send_wr wr = make_send_wr(0xA1, wr_opcode(op), &ssg, 1);
  if (has_imm(op)) wr.imm_data = imm_for(0xA1);
  post_send(p.a.qp(), &wr);
  expect_wc(p.a.scq(), "the oversized SEND", 0xA1, p.a.qpn(), IBV_WC_REM_INV_REQ_ERR);
  expect_wc(p.b.rcq(), "the too-small receive", 0xB1, p.b.qpn(), IBV_WC_LOC_LEN_ERR);
  require_requester_flushes(p, 0xA3, ok_src, ok_dst);
  require_responder_flushes(p, {&r2}, {0xB2}, 0xB3);
  require_cqs_empty(p);
  // The receive buffer's contents are undefined after the error; the bytes around it are not.
  VT_REQUIRE_BYTES("guard before the receive buffer", dst.buf.data(), dbefore.data(), dst.off);
  VT_REQUIRE_BYTES("guard after the receive buffer", dst.payload() + recv_len,
                   dbefore.data() + dst.off + recv_len, dst.buf.size() - dst.off - recv_len);
  VT_REQUIRE_BYTES("sender's buffer", src.buf.data(), sbefore.data(), sbefore.size());
}

TEST_CASE("post_send and post_recv with more SGEs than the QP allows fail at that WR",
          "[error][sge]") {
  Pair p;
  const uint32_t max_send = p.a.cap.max_send_sge, max_recv = p.b.cap.max_recv_sge;
  INFO("max_send_sge " << max_send << ", max_recv_sge " << max_recv);
  REQUIRE(max_send < 64);
  Region src(p.a.pd(), 4096, seed_for("nsge src"));
  Region dst(p.b.pd(), 4096, seed_for("nsge dst"));
  std::vector<ibv_sge> many(65);
  for (size_t i = 0; i < many.size(); ++i) many[i] = make_sge(src.payload() + i * 8, 8, src.lkey());
  ibv_sge one = make_sge(src.payload(), 100, src.lkey());
  ibv_send_wr w1 = make_send_wr(0xA1, IBV_WR_RDMA_WRITE, &one, 1);
  ibv_send_wr w2 =
      make_send_wr(0xA2, IBV_WR_RDMA_WRITE, many.data(), static_cast<int>(max_send + 1));
  ibv_send_wr w3 = make_send_wr(0xA3, IBV_WR_RDMA_WRITE, &one, 1);
  for (ibv_send_wr *w : {&w1, &w2, &w3}) {
    w->wr.rdma.remote_addr = dst.addr();
    w->wr.rdma.rkey = dst.rkey();
  }
  w1.next = &w2;
  w2.next = &w3;
  const std::vector<uint8_t> dbefore = dst.snapshot();
  ibv_send_wr *bad_wr = nullptr;
  const int rc = ibv_post_send(p.a.qp(), &w1, &bad_wr);
  INFO("ibv_post_send returned " << rc);
  CHECK((rc == EINVAL || rc == ENOMEM));
  CHECK(bad_wr == &w2);
  // WRs before the bad one are posted; the bad one and those after it are not.
  expect_wc(p.a.scq(), "WR before the bad one", 0xA1, p.a.qpn(), IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
  require_no_completion(p.a.scq(), Ms{100}, "requester send CQ (nothing after the bad WR)");
  std::vector<uint8_t> want = dbefore;
  std::memcpy(want.data() + dst.off, src.payload(), 100);
  VT_REQUIRE_BYTES("responder memory", dst.buf.data(), want.data(), want.size());
  require_qp_state(p.a.qp(), IBV_QPS_RTS, "requester QP (a rejected post changes nothing)", Ms{0});

  std::vector<ibv_sge> rmany(65);
  for (size_t i = 0; i < rmany.size(); ++i)
    rmany[i] = make_sge(dst.payload() + i * 8, 8, dst.lkey());
  ibv_recv_wr r1 = make_recv_wr(0xB1, rmany.data(), 1);
  ibv_recv_wr r2 = make_recv_wr(0xB2, rmany.data(), static_cast<int>(max_recv + 1));
  r1.next = &r2;
  ibv_recv_wr *bad_rwr = nullptr;
  const int rrc = ibv_post_recv(p.b.qp(), &r1, &bad_rwr);
  INFO("ibv_post_recv returned " << rrc);
  CHECK((rrc == EINVAL || rrc == ENOMEM));
  CHECK(bad_rwr == &r2);
  // The QP still works: one SEND consumes the receive that was posted (0xB1).
  Region s(p.a.pd(), 8, seed_for("nsge send"));
  ibv_sge ss = make_sge(s.payload(), 8, s.lkey());
  ibv_send_wr sw = make_send_wr(0xA4, IBV_WR_SEND, &ss, 1);
  post_send(p.a.qp(), &sw);
  expect_wc(p.a.scq(), "SEND after the rejected posts", 0xA4, p.a.qpn(), IBV_WC_SUCCESS,
            IBV_WC_SEND);
  expect_wc(p.b.rcq(), "the receive posted before the bad one", 0xB1, p.b.qpn(), IBV_WC_SUCCESS,
            IBV_WC_RECV, 8, true);
  require_cqs_empty(p);
}

TEST_CASE("inline data larger than max_inline_data is rejected by post_send", "[error][sge]") {
  QpConfig cfg;
  cfg.max_inline_data = 64;
  Pair p(cfg);
  const size_t max_inline = p.a.cap.max_inline_data;
  INFO("max_inline_data " << max_inline);
  std::vector<uint8_t> data(max_inline + 1, 0x42);
  Region dst(p.b.pd(), data.size(), seed_for("inline too big"));
  ibv_sge sg = make_sge(data.data(), data.size(), 0);
  ibv_send_wr wr =
      make_send_wr(0xA1, IBV_WR_RDMA_WRITE, &sg, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.rkey();
  const std::vector<uint8_t> before = dst.snapshot();
  ibv_send_wr *bad = nullptr;
  const int rc = ibv_post_send(p.a.qp(), &wr, &bad);
  INFO("ibv_post_send returned " << rc);
  CHECK((rc == EINVAL || rc == ENOMEM));
  CHECK(bad == &wr);
  require_no_completion(p.a.scq(), Ms{50}, "requester send CQ");
  VT_REQUIRE_BYTES("responder memory", dst.buf.data(), before.data(), before.size());
}

TEST_CASE("post_send and post_recv on a QP in RESET fail", "[error]") {
  auto dev = open_device();
  Endpoint e;
  QpConfig cfg;
  const std::string err = try_create_endpoint(*dev, cfg, e);
  REQUIRE(err.empty());
  REQUIRE(query_state(e.qp()) == IBV_QPS_RESET);
  Region buf(e.pd(), 64, seed_for("reset"));
  ibv_sge sg = make_sge(buf.payload(), 64, buf.lkey());
  ibv_send_wr wr = make_send_wr(0xA1, IBV_WR_SEND, &sg, 1);
  ibv_send_wr *bad = nullptr;
  const int rc = ibv_post_send(e.qp(), &wr, &bad);
  INFO("ibv_post_send on RESET returned " << rc);
  CHECK(rc != 0);
  CHECK(bad == &wr);
  ibv_recv_wr rwr = make_recv_wr(0xB1, &sg, 1);
  ibv_recv_wr *rbad = nullptr;
  const int rrc = ibv_post_recv(e.qp(), &rwr, &rbad);
  INFO("ibv_post_recv on RESET returned " << rrc);
  CHECK(rrc != 0);
  CHECK(rbad == &rwr);
  require_no_completion(e.scq(), Ms{50}, "send CQ");
  require_no_completion(e.rcq(), Ms{0}, "receive CQ");
  CHECK(query_state(e.qp()) == IBV_QPS_RESET);
}

TEST_CASE("ibv_reg_mr: remote write or atomic access without local write is EINVAL",
          "[error][memory]") {
  auto dev = open_device();
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  AlignedBuf buf(3 * kPage);
  fill_pattern(buf.data(), buf.size(), seed_for("reg einval"));
  const std::vector<uint8_t> before(buf.data(), buf.data() + buf.size());
  for (const unsigned access :
       {unsigned(IBV_ACCESS_REMOTE_WRITE), unsigned(IBV_ACCESS_REMOTE_ATOMIC),
        unsigned(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
        unsigned(IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ),
        unsigned(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ)}) {
    INFO("access 0x" << std::hex << access);
    errno = 0;
    ibv_mr *mr = ibv_reg_mr(pd.get(), buf.data(), buf.size(), static_cast<int>(access));
    const int e = errno;
    if (mr) ibv_dereg_mr(mr);
    CHECK(mr == nullptr);
    CHECK(e == EINVAL);
  }
  // Remote read alone needs no local write.
  MrPtr ok = reg_mr(pd.get(), buf.data(), buf.size(), IBV_ACCESS_REMOTE_READ);
  ok.reset();
  VT_REQUIRE_BYTES("buffer after the failed and successful registrations", buf.data(),
                   before.data(), before.size());
}

// =============================================================================================
// [rnr]
// =============================================================================================

TEST_CASE("no receive posted and rnr_retry exhausted: RNR_RETRY_EXC_ERR", "[rnr]") {
  const Op op = GENERATE(Op::Send, Op::WriteImm);
  const uint8_t retries = GENERATE(uint8_t{0}, uint8_t{3});
  INFO(op_name(op) << " with rnr_retry " << int(retries));
  QpConfig cfg;
  cfg.rnr_retry = retries;
  cfg.min_rnr_timer = 1;  // 0.01 ms
  Pair p(cfg);
  const size_t n = 3 * 4096 + 5;  // several packets
  Region src(p.a.pd(), n, seed_for("rnr src"));
  Region dst(p.b.pd(), n, seed_for("rnr dst"));
  Region ok_src(p.a.pd(), 256, seed_for("rnr ok src"));
  Region ok_dst(p.b.pd(), 256, seed_for("rnr ok dst"));
  const std::vector<uint8_t> dbefore = dst.snapshot(), okbefore = ok_dst.snapshot();
  const long long rnr0 = counter_or_skip("rnr_naks_sent");
  ibv_sge sg = make_sge(src.payload(), n, src.lkey());
  ibv_send_wr wr = make_send_wr(0xA1, wr_opcode(op), &sg, 1);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.rkey();
  wr.imm_data = imm_for(0xA1);
  ibv_sge ok_sg = make_sge(ok_src.payload(), 256, ok_src.lkey());
  ibv_send_wr behind = make_send_wr(0xA2, IBV_WR_RDMA_WRITE, &ok_sg, 1);
  behind.wr.rdma.remote_addr = ok_dst.addr();
  behind.wr.rdma.rkey = ok_dst.rkey();
  wr.next = &behind;
  post_send(p.a.qp(), &wr);
  expect_wc(p.a.scq(), "the WR that found no receive", 0xA1, p.a.qpn(), IBV_WC_RNR_RETRY_EXC_ERR);
  expect_wc(p.a.scq(), "the valid WR queued behind it", 0xA2, p.a.qpn(), IBV_WC_WR_FLUSH_ERR);
  require_requester_flushes(p, 0xA3, ok_src, ok_dst);
  // RNR is not an error at the responder: no completion, QP still RTS.
  require_no_completion(p.b.rcq(), Ms{50}, "responder receive CQ");
  require_qp_state(p.b.qp(), IBV_QPS_RTS, "responder QP after sending RNR NAKs", Ms{0});
  require_cqs_empty(p);
  if (op == Op::Send) {
    VT_REQUIRE_BYTES("responder buffer", dst.buf.data(), dbefore.data(), dbefore.size());
  } else {  // the WRITE's payload is undefined after the error; the guards are not
    VT_REQUIRE_BYTES("guard before", dst.buf.data(), dbefore.data(), dst.off);
    VT_REQUIRE_BYTES("guard after", dst.payload() + n, dbefore.data() + dst.off + n, kGuard);
  }
  VT_REQUIRE_BYTES("target of the flushed WRITEs", ok_dst.buf.data(), okbefore.data(),
                   okbefore.size());
  // One RNR NAK for the first attempt and one per retry.
  require_counter_grew("rnr_naks_sent", rnr0, 1, retries + 1);
}

TEST_CASE("rnr_retry 7: a receive posted 50 ms later completes the message", "[rnr]") {
  const Op op = GENERATE(Op::Send, Op::SendImm, Op::WriteImm);
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{3 * 4096 + 5}, size_t{1 * MiB});
  INFO(op_name(op) << " of " << n << " bytes");
  QpConfig cfg;
  cfg.rnr_retry = 7;       // infinite
  cfg.min_rnr_timer = 12;  // 0.64 ms
  Pair p(cfg);
  Region src(p.a.pd(), n, seed_for("rnr7 src", n));
  Region dst(p.b.pd(), n, seed_for("rnr7 dst", n));
  const long long rnr0 = counter_or_skip("rnr_naks_sent");
  XferOpts o;
  o.recv_delay = Ms{50};
  transfer(p, op, area_of(src), area_of(dst), o);
  require_counter_grew("rnr_naks_sent", rnr0, 1);
  // And the connection keeps working.
  Region src2(p.a.pd(), n, seed_for("rnr7 src2", n));
  Region dst2(p.b.pd(), n, seed_for("rnr7 dst2", n));
  transfer(p, op, area_of(src2), area_of(dst2), {.wr_id = 0x2000});
}

// =============================================================================================
// [kill]: SIGKILL of a peer process in the middle of a transfer
// =============================================================================================
namespace {

constexpr size_t kKillMsg = 8 * MiB;
constexpr int kKillInFlight = 8;
constexpr char kKillChildEnv[] = "VRNIC_TEST_KILL_CHILD";

// Who streams the 8 MiB RDMA WRITEs that the SIGKILL interrupts.
enum class KillRole : uint32_t { ChildIsTarget = 1, ChildIsWriter = 2 };

struct ParentMsg {
  PeerInfo info;
  uint64_t addr;  // the parent's MR (target of the child's WRITEs)
  uint32_t rkey;
  uint32_t role;
};

struct ChildReply {
  char error[512];
  PeerInfo info;
  uint64_t addr;  // the child's MR
  uint32_t rkey;
};

QpConfig kill_config() {
  QpConfig c;
  c.max_send_wr = 64;
  c.timeout = 10;  // 4.1 ms
  c.retry_cnt = 2;
  c.rnr_retry = 0;
  return c;
}

// The child side, in a freshly exec'd copy of this binary (so it shares no memory with the
// parent): sets up its own QP and MR after the parent says go, reports them, then either waits
// (ChildIsTarget) or streams WRITEs into the parent's MR (ChildIsWriter, telling the parent
// once 3 have completed) until SIGKILL, or EOF from the parent.
[[noreturn]] void kill_child_main(int rfd, int wfd) {
  child_prepare(30);
  ChildReply reply{};
  ParentMsg parent{};
  if (!read_full(rfd, &parent, sizeof parent, Ms{20000})) _exit(3);
  Device d;
  Endpoint e;
  const QpConfig cfg = kill_config();
  std::string err = try_open_device(d);
  if (err.empty()) err = try_create_endpoint(d, cfg, e);
  void *mem = MAP_FAILED;
  ibv_mr *mr = nullptr;
  if (err.empty()) {
    mem = mmap(nullptr, kKillMsg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) err = "mmap failed";
  }
  if (err.empty()) {
    mr = ibv_reg_mr(e.pd(), mem, kKillMsg, static_cast<int>(kAllAccess));
    if (!mr) err = std::string("ibv_reg_mr failed: ") + std::strerror(errno);
  }
  if (err.empty()) err = try_connect(d, e, cfg, parent.info);
  if (err.empty()) {
    reply.info = local_info(d, e);
    reply.addr = reinterpret_cast<uintptr_t>(mem);
    reply.rkey = mr->rkey;
  }
  std::snprintf(reply.error, sizeof reply.error, "%s", err.c_str());
  write_full(wfd, &reply, sizeof reply);
  if (!err.empty()) _exit(4);
  if (parent.role == uint32_t(KillRole::ChildIsWriter)) {
    ibv_sge sg = make_sge(mem, kKillMsg, mr->lkey);
    int outstanding = 0, completed = 0;
    uint64_t id = 1;
    const auto deadline = Clock::now() + Ms{20000};
    while (Clock::now() < deadline) {
      while (outstanding < kKillInFlight) {
        ibv_send_wr wr = make_send_wr(id++, IBV_WR_RDMA_WRITE, &sg, 1);
        wr.wr.rdma.remote_addr = parent.addr;
        wr.wr.rdma.rkey = parent.rkey;
        ibv_send_wr *bad = nullptr;
        if (ibv_post_send(e.qp(), &wr, &bad) != 0) _exit(5);
        ++outstanding;
      }
      ibv_wc wc{};
      const int r = poll_until(e.scq(), &wc, Clock::now() + Ms{5000});
      if (r <= 0 || wc.status != IBV_WC_SUCCESS) _exit(6);
      --outstanding;
      if (++completed == 3) {
        const char go = 'W';
        write_full(wfd, &go, 1);
      }
    }
    _exit(7);
  }
  char c;
  while (read(rfd, &c, 1) > 0) {
  }
  _exit(0);  // parent gone: vrnicd cleans up with the session
}

// Runs before main(): the SIGKILL test's child is this binary with kKillChildEnv set.
const bool g_is_kill_child = [] {
  const char *v = std::getenv(kKillChildEnv);
  if (v == nullptr) return false;
  int rfd = -1, wfd = -1;
  if (std::sscanf(v, "%d,%d", &rfd, &wfd) != 2) _exit(2);
  kill_child_main(rfd, wfd);
}();

}  // namespace

TEST_CASE(
    "SIGKILL of a peer mid-transfer: error completion and no hang and vrnicd frees its objects",
    "[kill]") {
  const KillRole role = GENERATE(KillRole::ChildIsTarget, KillRole::ChildIsWriter);
  INFO((role == KillRole::ChildIsTarget ? "the parent streams WRITEs into the child's MR"
                                        : "the child streams WRITEs into the parent's MR"));
  const bool have_stats = stats_available();
  if (!have_stats) WARN("VRNICCTL not set: vrnicd object counts are not checked");
  Stats baseline;
  if (have_stats) baseline = stats();

  int p2c[2], c2p[2];
  REQUIRE(pipe2(p2c, O_CLOEXEC) == 0);
  REQUIRE(pipe2(c2p, O_CLOEXEC) == 0);
  // Everything the child needs is prepared before fork(): after it, the child only calls
  // async-signal-safe functions until execve().
  const std::string env_entry = std::string(kKillChildEnv) + "=" + std::to_string(p2c[0] + 1000) +
                                "," + std::to_string(c2p[1] + 1000);
  std::vector<char *> envp;
  for (char **e = environ; *e; ++e)
    if (std::strncmp(*e, kKillChildEnv, sizeof kKillChildEnv - 1) != 0) envp.push_back(*e);
  envp.push_back(const_cast<char *>(env_entry.c_str()));
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char arg0[] = "verbs_data_test-kill-child";
  char *argv[] = {arg0, nullptr};

  ChildGuard child;
  child.pid = fork();
  REQUIRE(child.pid >= 0);
  if (child.pid == 0) {
    // The child's pipe ends, moved to fixed numbers without O_CLOEXEC.
    if (dup2(p2c[0], p2c[0] + 1000) < 0 || dup2(c2p[1], c2p[1] + 1000) < 0) _exit(126);
    execve(self, argv, envp.data());
    _exit(127);
  }
  close(p2c[0]);
  close(c2p[1]);
  struct Fds {
    int a, b;
    ~Fds() {
      close(a);
      close(b);
    }
  } fds{p2c[1], c2p[0]};

  // The parent's own verbs objects, created after fork.
  auto dev = open_device();
  const QpConfig cfg = kill_config();
  auto ep = std::make_unique<Endpoint>();
  {
    const std::string err = try_create_endpoint(*dev, cfg, *ep);
    REQUIRE(err.empty());
  }
  auto mine = std::make_unique<Region>(ep->pd(), kKillMsg, seed_for("kill parent"));
  Stats parent_only;
  if (have_stats) parent_only = stats();  // the child has not touched verbs yet

  ParentMsg msg{};
  msg.info = local_info(*dev, *ep);
  msg.addr = mine->addr();
  msg.rkey = mine->rkey();
  msg.role = uint32_t(role);
  REQUIRE(write_full(p2c[1], &msg, sizeof msg));
  ChildReply reply{};
  REQUIRE(read_full(c2p[0], &reply, sizeof reply, Ms{15000}));
  reply.error[sizeof reply.error - 1] = '\0';
  INFO("child setup: " << (reply.error[0] ? reply.error : "ok"));
  REQUIRE(reply.error[0] == '\0');
  {
    const std::string err = try_connect(*dev, *ep, cfg, reply.info);
    REQUIRE(err.empty());
  }

  ibv_sge sg = make_sge(mine->payload(), kKillMsg, mine->lkey());
  uint64_t next_id = 1, completed = 0;
  size_t outstanding = 0;
  ibv_sge small_sg = make_sge(mine->payload(), 64, mine->lkey());
  auto post_one = [&](bool small = false) {
    ibv_send_wr wr = make_send_wr(next_id++, IBV_WR_RDMA_WRITE, small ? &small_sg : &sg, 1);
    wr.wr.rdma.remote_addr = reply.addr;
    wr.wr.rdma.rkey = reply.rkey;
    post_send(ep->qp(), &wr);
    ++outstanding;
  };
  if (role == KillRole::ChildIsTarget) {
    // Stream 8 MiB WRITEs, up to 8 in flight; kill the child once 3 have completed.
    const auto stream_deadline = Clock::now() + Ms{20000};
    while (completed < 3) {
      while (outstanding < kKillInFlight) post_one();
      ibv_wc wc{};
      const int r = poll_until(ep->scq(), &wc, stream_deadline);
      REQUIRE(r >= 0);
      if (r == 0)
        FAIL("only " << completed << " of 3 WRITEs completed before the kill, within 20 s");
      INFO(describe(wc));
      REQUIRE(wc.status == IBV_WC_SUCCESS);
      REQUIRE(wc.wr_id == completed + 1);
      --outstanding;
      ++completed;
    }
    while (outstanding < kKillInFlight) post_one();
  } else {
    // The child tells us once 3 of its WRITEs completed; it keeps 8 in flight.
    char go = 0;
    INFO("waiting for the child's WRITE stream");
    REQUIRE(read_full(c2p[0], &go, 1, Ms{20000}));
    REQUIRE(go == 'W');
  }
  REQUIRE(kill(child.pid, SIGKILL) == 0);
  const auto killed_at = Clock::now();
  int status = 0;
  const pid_t pid = child.pid;
  REQUIRE(wait_child(pid, &status, Ms{5000}));
  child.pid = -1;
  const auto reaped_ms = std::chrono::duration_cast<Ms>(Clock::now() - killed_at).count();
  INFO("child reaped " << reaped_ms << " ms after SIGKILL, status 0x" << std::hex << status
                       << std::dec);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGKILL);

  // Completions after the kill: maybe some successes (already delivered, or vrnicd has not yet
  // closed the dead peer's session), then one RETRY_EXC_ERR, then WR_FLUSH_ERR for the rest --
  // in wr_id order, and never a hang. Whenever nothing is outstanding (the parent was not
  // streaming, or every WRITE in flight landed before vrnicd saw the peer's connection
  // close), the parent keeps one small WRITE to the dead peer outstanding.
  ibv_wc first_err{};
  bool got_err = false;
  uint64_t successes_after_kill = 0;
  for (;;) {
    if (outstanding == 0) post_one(true);
    if (outstanding == 0 || got_err) break;
    ibv_wc wc{};
    const int r = poll_until(ep->scq(), &wc, killed_at + Ms{5000});
    REQUIRE(r >= 0);
    if (r == 0)
      FAIL("no error completion within 5 s of killing the peer (" << outstanding
                                                                  << " WRs outstanding)");
    CHECK(wc.wr_id == completed + 1);
    --outstanding;
    ++completed;
    if (wc.status != IBV_WC_SUCCESS) {
      first_err = wc;
      got_err = true;
    } else {
      ++successes_after_kill;
    }
  }
  const auto err_ms = std::chrono::duration_cast<Ms>(Clock::now() - killed_at).count();
  INFO("first error completion " << err_ms << " ms after SIGKILL (" << successes_after_kill
                                 << " WRs succeeded after it): " << describe(first_err));
  REQUIRE(got_err);
  CHECK(std::string(wc_status_name(first_err.status)) == wc_status_name(IBV_WC_RETRY_EXC_ERR));
  CHECK(first_err.qp_num == ep->qpn());
  const auto rest = poll_n(ep->scq(), outstanding, "flushed WRs after the error", Ms{5000});
  for (const ibv_wc &wc : rest) {
    WcExpect e;
    e.what = "WR behind the failed one";
    e.wr_id = ++completed;
    e.qp_num = ep->qpn();
    e.status = IBV_WC_WR_FLUSH_ERR;
    check_wc(wc, e);
  }
  require_qp_state(ep->qp(), IBV_QPS_ERR, "parent QP after the peer died");

  if (have_stats) {
    wait_for_objects(parent_only, Ms{5000}, "after the child's SIGKILL, only the parent's objects");
    mine.reset();
    ep.reset();
    dev.reset();
    wait_for_objects(baseline, Ms{5000}, "after the parent destroyed its objects");
  }
}
