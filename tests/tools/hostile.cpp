// hostile: the attacker programs of the hostile group (tests/integration/72_hostile.sh), one
// subcommand per thing a client must not be able to do to vrnicd or to other users (issue 17).
// Each prints key=value lines and exits 0 when vrnicd held (the attack was refused, or hurt
// only the attacker), 1 when it got through, 2 on a usage or setup error.
//
//   flood SOCKET N           N requests without reading one reply; vrnicd must drop us and
//                            answer a second client within 1 s meanwhile (row 6)
//   channels                 completion channels until one fails: ENOMEM at the quota (row 9)
//   sessions                 ibv_open_device until one fails: ENOMEM at the quota (row 9)
//   mr-bytes SOCKET BYTES    sparse memfds of BYTES each, registered until ENOMEM (row 8)
//   null-mrs N               N null MRs, then exit without freeing them (row 10)
//   objects                  QPs and MRs until refused: ENOMEM at the quotas, which
//                            ibv_query_device reports (max_qp, max_mr, max_mr_size)
//   sge-rewrite SECONDS      a SEND held back by RNR NAKs while we rewrite its WQE (num_sge
//                            255, SGEs of garbage) before each retransmission (row 5)
//   doorbells SECONDS [N]    forges every cell of our doorbell rings, in N sessions of ours
//                            (default 1), for SECONDS (row 14; N: issue 28, row 12)
//   doorbells-cross SECONDS  (vrnicd with two workers) forges doorbells naming our own QPs,
//                            one on each worker, into the rings of four sessions, registering memory
//                            (every registration parks the workers) for SECONDS: each must
//                            return (issue 28, row 4: a worker waited on a parked one)
//   local-ops SECONDS        a send queue of local operations with its producer index far
//                            ahead, rung for SECONDS (row 11)
//   victim                   an RC pair of our own, waiting on stdin: prints its QPN, PSN,
//                            rkey and address, then on "check" verifies its memory is as it
//                            left it and the connection still carries a WRITE (row 2)
//   inject QPN PSN RKEY ADDR an RC QP of ours aimed at someone else's: its WRITE must fail
//                            and nothing may land (row 2)
//   cm-qp SOCKET QPN         rdma_cm calls whose QP transitions (ctl::CmQpSteps) name QPN,
//                            another process's QP: refused, the QP untouched (the victim's
//                            check shows it); the same on a QP of our own is made (row 2)
//   reuse-attacker ADDR DIR  a child registers shared memory at ADDR and exits; the grandchild
//                            keeps the session and, once DIR/go exists, writes to that MR: the
//                            write must fail, whoever holds the child's PID by then (row 1)
//   rereg-write              a 64 MiB WRITE between our own QPs into an MR whose iova lies
//                            1 TiB above its buffer, and ibv_rereg_mr onto 4 KiB between
//                            guard pages once the first bytes landed: nothing may land in
//                            the new region or its guards; vrnicd serves on (issue 28, row 1)
//   low-port SOCKET          rdma_bind_addr to port 80: EACCES for a user other than root,
//                            as the kernel's rdma_cm; port 40000 is bound (issue 28, row 13)
//   spawn-at-pid PID ADDR DIR  (root) a process with exactly PID holding a pattern at ADDR;
//                            once DIR/check exists, exits 0 if the pattern is intact
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "first_device.h"
#include "raw_session.h"
#include "vrnic/ctl_io.h"
#include "vrnic/shm_layout.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void wait_for_file(const std::string &path, int seconds) {
  for (int i = 0; i < seconds * 100 && !exists(path); i++) ::usleep(10000);
}


// Row 6: a client that never reads. vrnicd must stay responsive for others and drop it.
int flood(const char *path, long n) {
  int s = vrnic::ctl::connect_daemon(path);
  if (s < 0) die("connect");
  long sent = 0;
  for (; sent < n; sent++) {
    vrnic::ctl::ListQpsReq req{};  // the largest reply there is
    int err = vrnic::ctl::send_message(s, vrnic::ctl::Op::kListQps, 0, &req, sizeof(req));
    if (err) break;  // vrnicd closed us (EPIPE) or our own buffer is full
  }
  // Someone else, meanwhile.
  auto t = Clock::now();
  int other = vrnic::ctl::connect_daemon(path);
  int err =
      other < 0 ? -other : vrnic::ctl::send_message(other, vrnic::ctl::Op::kStats, 0, nullptr, 0);
  auto m = std::make_unique<vrnic::ctl::Message>();
  if (!err) {
    pollfd p{other, POLLIN, 0};
    err = ::poll(&p, 1, 5000) == 1 ? vrnic::ctl::recv_message(other, m.get()) : ETIMEDOUT;
  }
  double other_s = seconds_since(t);
  // Were we dropped? Read what is queued; the end must come.
  bool dropped = false;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    pollfd p{s, POLLIN, 200};
    if (::poll(&p, 1, 200) <= 0) continue;
    int e = vrnic::ctl::recv_message(s, m.get());
    m->close_fds();
    if (e == ECONNRESET || e == EPIPE) {
      dropped = true;
      break;
    }
  }
  std::printf("requests_sent=%ld\nother_client_status=%s\nother_client_seconds=%.3f\ndropped=%d\n",
              sent, err ? std::strerror(err) : "ok", other_s, dropped);
  return !err && other_s < 1.0 && dropped ? 0 : 1;
}

// Row 9: completion channels (an fd each in vrnicd) and connections, until refused.
int channels() {
  const char *why = "";
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) die(why);
  std::vector<ibv_comp_channel *> v;
  int err = 0;
  for (int i = 0; i < 1000000; i++) {
    ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    if (!ch) {
      err = errno;
      break;
    }
    v.push_back(ch);
  }
  std::printf("channels_created=%zu\nrefused_errno=%s\n", v.size(), strerrorname_np(err));
  for (ibv_comp_channel *ch : v) ibv_destroy_comp_channel(ch);
  // The quota is given back: one more works now.
  ibv_comp_channel *again = ibv_create_comp_channel(ctx);
  std::printf("after_release=%s\n", again ? "ok" : std::strerror(errno));
  if (again) ibv_destroy_comp_channel(again);
  ibv_close_device(ctx);
  return err == ENOMEM && again ? 0 : 1;
}

int sessions() {
  std::vector<ibv_context *> v;
  int err = 0;
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (!list || n < 1) die("no device");
  for (int i = 0; i < 100000; i++) {
    ibv_context *ctx = ibv_open_device(list[0]);
    if (!ctx) {
      err = errno;
      break;
    }
    v.push_back(ctx);
  }
  std::printf("sessions_opened=%zu\nrefused_errno=%s\n", v.size(), strerrorname_np(err));
  for (ibv_context *c : v) ibv_close_device(c);
  ibv_free_device_list(list);
  return err == ENOMEM ? 0 : 1;
}

// Row 8: address space. Sparse memfds cost us nothing and would cost vrnicd a mapping each.
int mr_bytes(const char *path, uint64_t bytes) {
  RawSession rs;
  if (int err = rs.open(path)) {
    errno = err;
    die("hello");
  }
  int registered = 0, err = 0;
  for (int i = 0; i < 4096; i++) {
    int fd = ::memfd_create("sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ::ftruncate(fd, off_t(bytes)) < 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
      die("memfd");
    auto req = std::make_unique<vrnic::ctl::RegMrReq>();
    req->pd = rs.pd;
    req->access = IBV_ACCESS_LOCAL_WRITE;
    req->addr = req->iova = 0x100000000000ull + uint64_t(i) * bytes;
    req->length = bytes;
    req->npieces = 1;
    req->pieces[0] = {req->addr, bytes, 0, uint32_t(vrnic::ctl::PieceKind::kMemfd), 0, -1, 0};
    vrnic::ctl::RegMrResp resp{};
    err = rs.call(vrnic::ctl::Op::kRegMr, req.get(),
                  offsetof(vrnic::ctl::RegMrReq, pieces) + sizeof(vrnic::ctl::MrPiece), &resp,
                  sizeof(resp), &fd, 1);
    ::close(fd);
    if (err) break;
    registered++;
  }
  std::printf("registered=%d\nbytes_each=%" PRIu64 "\nrefused_errno=%s\n", registered, bytes,
              strerrorname_np(err));
  return err == ENOMEM ? 0 : 1;
}

// Row 10: many objects, then gone without a word.
int null_mrs(long n) {
  const char *why = "";
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) die(why);
  ibv_pd *pd = ibv_alloc_pd(ctx);
  if (!pd) die("pd");
  auto t = Clock::now();
  long made = 0;
  for (; made < n; made++) {
    if (!ibv_alloc_null_mr(pd)) break;
    if (made % 100000 == 99999) {
      std::fprintf(stderr, "hostile: %ld null MRs (%.1f s)\n", made + 1, seconds_since(t));
    }
  }
  std::printf("null_mrs=%ld\ncreate_seconds=%.2f\n", made, seconds_since(t));
  std::fflush(stdout);
  ::_exit(made == n ? 0 : 1);  // everything left to vrnicd's teardown
}

// Quotas on objects, and what the device says of them.
int objects() {
  const char *why = "";
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) die(why);
  ibv_device_attr da{};
  if (ibv_query_device(ctx, &da)) die("query_device");
  std::printf("max_qp=%d\nmax_mr=%d\nmax_mr_size=%" PRIu64 "\n", da.max_qp, da.max_mr,
              uint64_t(da.max_mr_size));
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (!cq) die("pd/cq");
  std::vector<ibv_qp *> qps;
  int qp_err = 0;
  for (int i = 0; i < 100000; i++) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) {
      qp_err = errno;
      break;
    }
    qps.push_back(qp);
  }
  std::vector<ibv_mr *> mrs;
  int mr_err = 0;
  for (int i = 0; i < 10000000; i++) {
    ibv_mr *mr = ibv_alloc_null_mr(pd);
    if (!mr) {
      mr_err = errno;
      break;
    }
    mrs.push_back(mr);
  }
  std::printf("qps_created=%zu\nqp_refused_errno=%s\nmrs_created=%zu\nmr_refused_errno=%s\n",
              qps.size(), strerrorname_np(qp_err), mrs.size(), strerrorname_np(mr_err));
  for (ibv_qp *qp : qps) ibv_destroy_qp(qp);
  for (ibv_mr *mr : mrs) ibv_dereg_mr(mr);
  return qp_err == ENOMEM && mr_err == ENOMEM && size_t(da.max_qp) == qps.size() &&
                 size_t(da.max_mr) == mrs.size()
             ? 0
             : 1;
}

// The regions vrnicd shares with us, from our own mappings: name prefix, address, size.
struct Region {
  uint8_t *addr;
  size_t len;
};
std::vector<Region> our_regions(const char *name) {
  std::vector<Region> out;
  FILE *f = std::fopen("/proc/self/maps", "r");
  char line[512];
  while (f && std::fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && std::strstr(line, name))
      out.push_back({reinterpret_cast<uint8_t *>(lo), size_t(hi - lo)});
  }
  if (f) std::fclose(f);
  return out;
}

uint64_t rng_word() {
  static uint64_t x = 0x9e3779b97f4a7c15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

struct Loopback {  // an RC pair of ours on the loop port
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  ibv_qp *a = nullptr, *b = nullptr;
};

ibv_qp *rc_qp(Loopback &l) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = l.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 64;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ibv_qp *qp = ibv_create_qp(l.pd, &ia);
  if (!qp) die("create_qp");
  return qp;
}

// RESET -> RTS towards (dest_qpn, our own GID 0), with these PSNs and a short timeout.
void connect_qp(ibv_context *ctx, ibv_qp *qp, uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn) {
  ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 0, &gid)) die("query_gid");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("INIT");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 10;  // 4 ms
  a.retry_cnt = 1;
  a.rnr_retry = 1;
  a.sq_psn = sq_psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
}

Loopback open_loopback() {
  Loopback l;
  const char *why = "";
  l.ctx = open_first_device(&why);
  if (!l.ctx) die(why);
  l.pd = ibv_alloc_pd(l.ctx);
  l.cq = l.pd ? ibv_create_cq(l.ctx, 256, nullptr, nullptr, 0) : nullptr;
  if (!l.cq) die("pd/cq");
  l.a = rc_qp(l);
  l.b = rc_qp(l);
  return l;
}

// One completion within `seconds`; its status, or -1 when none came.
int wait_completion(ibv_cq *cq, double seconds) {
  auto t = Clock::now();
  ibv_wc wc;
  while (seconds_since(t) < seconds) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n == 1) return wc.status;
    ::usleep(100);
  }
  return -1;
}

int post_write(ibv_qp *qp, ibv_mr *src, uint32_t len, uint64_t addr, uint32_t rkey) {
  ibv_sge sge{reinterpret_cast<uint64_t>(src->addr), len, src->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(qp, &wr, &bad);
}

ibv_mr *page_mr(ibv_pd *pd, size_t len, uint8_t fill, int access) {
  void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  std::memset(p, fill, len);
  ibv_mr *mr = ibv_reg_mr(pd, p, len, access);
  if (!mr) die("reg_mr");
  return mr;
}

// Row 14: our own doorbell rings, forged as fast as we can.
int doorbells(double secs, int sessions) {
  Loopback l = open_loopback();
  // More sessions of ours: more rings to forge, but no more of the worker (issue 28, row 12).
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (!list || n < 1) die("no device");
  for (int i = 1; i < sessions; i++)
    if (!ibv_open_device(list[0])) die("ibv_open_device");
  ibv_free_device_list(list);
  std::vector<Region> rings = our_regions("vrnic-session");
  if (rings.empty()) die("no session region among our mappings");
  auto t = Clock::now();
  uint64_t writes = 0;
  while (seconds_since(t) < secs) {
    for (const Region &r : rings) {
      auto *s = reinterpret_cast<vrnic::shm::SessionShared *>(r.addr);
      for (auto &ring : s->doorbells) {
        for (uint32_t i = 0; i < vrnic::shm::DoorbellRing::kSlots; i++) {
          ring.set_seq(i, 0x7fffffffu + i);  // every cell looks full, far ahead
          ring.cells[i].qp_handle = i;  // mostly not ours, some not at all
        }
        writes++;
      }
    }
  }
  std::printf("sessions=%zu\nring_forgeries=%" PRIu64 "\n", rings.size(), writes);
  // Our own QPs still answer to the control plane.
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  int q = ibv_query_qp(l.a, &qa, IBV_QP_STATE, &qi);
  std::printf("query_qp_after=%s\n", q ? std::strerror(q) : "ok");
  return q ? 1 : 0;
}

// Issue 28, row 4: doorbells for our QPs on the other worker, while the workers park.
// Four sessions, each with an RC pair (one QP on each worker); every cell of every ring of a
// session names one of its two QPs, so a worker's look at the rings forwards more doorbells
// to the other than its inbox holds.
int doorbells_cross(double secs) {
  struct Target {
    Region session;
    uint32_t handles[2];
  };
  std::vector<Target> targets;
  std::vector<Loopback> loops;
  auto handle_of = [](const ibv_qp *qp) {  // vrnicd's QPN: tag << 17 | (handle - 1 + 0x10)
    return (qp->qp_num & 0x1ffff) - 0x10 + 1;
  };
  for (int k = 0; k < 4; k++) {
    std::vector<Region> before = our_regions("vrnic-session");
    loops.push_back(open_loopback());
    for (const Region &r : our_regions("vrnic-session")) {
      bool old = false;
      for (const Region &b : before) old |= b.addr == r.addr;
      if (!old) targets.push_back({r, {handle_of(loops.back().a), handle_of(loops.back().b)}});
    }
  }
  if (targets.size() != 4) die("could not tell the sessions' regions apart");
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::thread forger([&] {
    while (!stop.load()) {
      for (const Target &t : targets) {
        auto *s = reinterpret_cast<vrnic::shm::SessionShared *>(t.session.addr);
        for (auto &ring : s->doorbells) {
          for (uint32_t i = 0; i < vrnic::shm::DoorbellRing::kSlots; i++) {
            ring.cells[i].qp_handle = t.handles[i & 1];
            ring.set_seq(i, 0x7fffffffu + i);
          }
          writes++;
        }
      }
    }
  });
  auto t0 = Clock::now();
  uint64_t regs = 0;
  std::vector<uint8_t> buf(4096);
  while (seconds_since(t0) < secs) {
    ibv_mr *mr = ibv_reg_mr(loops[0].pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!mr) break;
    ibv_dereg_mr(mr);
    regs++;
  }
  stop = true;
  forger.join();
  std::printf("ring_forgeries=%" PRIu64 "\nregistrations=%" PRIu64 "\n", writes.load(), regs);
  return regs > 0 ? 0 : 1;
}

// Row 11: a ring of successful local operations, and a producer index 2^31 ahead.
int local_ops(double secs) {
  Loopback l = open_loopback();
  ibv_destroy_qp(l.b);  // one QP, connected to itself: its region is the only one
  connect_qp(l.ctx, l.a, l.a->qp_num, 0, 0);
  ibv_mw *mw = ibv_alloc_mw(l.pd, IBV_MW_TYPE_2);
  if (!mw) die("alloc_mw");
  ibv_send_wr wr{}, *bad;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.invalidate_rkey = mw->rkey;  // unbound: invalidating it succeeds, and costs nothing
  if (ibv_post_send(l.a, &wr, &bad)) die("post LOCAL_INV");
  std::vector<Region> qps = our_regions("vrnic-qp");
  if (qps.empty()) die("no QP region among our mappings");
  // Every send slot of every QP of ours: that same LOCAL_INV, unsignaled.
  auto t = Clock::now();
  uint64_t rings = 0;
  while (seconds_since(t) < secs) {
    for (const Region &r : qps) {
      auto *qs = reinterpret_cast<vrnic::shm::QpShared *>(r.addr);
      auto *sq = reinterpret_cast<vrnic::shm::SendWqe *>(r.addr + vrnic::shm::kQpHeaderBytes);
      uint32_t slots = 64;
      for (uint32_t i = 0; i < slots; i++) {
        sq[i] = {};
        sq[i].opcode = IBV_WR_LOCAL_INV;
        sq[i].imm_or_rkey = mw->rkey;
      }
      uint32_t cons = qs->sq.consumer.load();
      qs->sq.producer.store(cons + 0x80000000u, std::memory_order_release);
    }
    // The provider would refuse to post to a queue it thinks full: ring by hand, for every
    // handle a QP of ours may have (vrnicd ignores the others).
    for (const Region &r : our_regions("vrnic-session")) {
      auto *s = reinterpret_cast<vrnic::shm::SessionShared *>(r.addr);
      for (auto &ring : s->doorbells)
        for (uint32_t h = 1; h <= 64; h++) rings += ring.push(h);
    }
    ::usleep(1000);
  }
  ibv_qp_attr qa;
  ibv_qp_init_attr qi;
  int q = ibv_query_qp(l.a, &qa, IBV_QP_STATE, &qi);
  std::printf("doorbells_rung=%" PRIu64 "\nqp_state_after=%d\n", rings, q ? -q : int(qa.qp_state));
  return q ? 1 : 0;
}

// Row 5: the WQE vrnicd reads again at each retransmission, rewritten in between.
int sge_rewrite(double secs) {
  Loopback l = open_loopback();
  connect_qp(l.ctx, l.a, l.b->qp_num, 0, 0);
  connect_qp(l.ctx, l.b, l.a->qp_num, 0, 0);
  ibv_qp_attr a{};
  a.rnr_retry = 7;  // retry for ever: B has no receive posted yet
  a.min_rnr_timer = 10;
  ibv_modify_qp(l.a, &a, IBV_QP_RNR_RETRY);
  ibv_mr *src = page_mr(l.pd, 65536, 0x11, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{reinterpret_cast<uint64_t>(src->addr), 65536, src->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = 5;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(l.a, &wr, &bad)) die("post");
  std::vector<Region> qps = our_regions("vrnic-qp");
  auto t = Clock::now();
  uint64_t rewrites = 0;
  while (seconds_since(t) < secs) {
    for (const Region &r : qps) {
      auto *w = reinterpret_cast<vrnic::shm::SendWqe *>(r.addr + vrnic::shm::kQpHeaderBytes);
      w->num_sge = 255;
      w->length = 0xffffffffu;
      for (uint32_t i = 0; i < vrnic::shm::kMaxSge; i++)
        w->sge[i] = {0xdead0000ull + i, 0x7fffffffu, uint32_t(rng_word())};
      rewrites++;
    }
  }
  // Let it go through now; whatever status it gets, it must get one.
  ibv_recv_wr rwr{}, *rbad;
  ibv_mr *dst = page_mr(l.pd, 65536, 0, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge rsge{reinterpret_cast<uint64_t>(dst->addr), 65536, dst->lkey};
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_post_recv(l.b, &rwr, &rbad);
  int wc = wait_completion(l.cq, 10);
  std::printf("rewrites=%" PRIu64 "\nsend_status=%s\n", rewrites,
              wc < 0 ? "no completion" : ibv_wc_status_str(ibv_wc_status(wc)));
  return wc < 0 ? 1 : 0;
}

// Row 2, the victim: an RC pair, B's memory open to remote writes from A alone.
int victim() {
  Loopback l = open_loopback();
  const uint32_t psn = 0x123456;
  connect_qp(l.ctx, l.a, l.b->qp_num, psn, psn);
  connect_qp(l.ctx, l.b, l.a->qp_num, psn, psn);
  const size_t len = 4096;
  ibv_mr *mine = page_mr(l.pd, len, 0x5a,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr *src = page_mr(l.pd, len, 0xa5, IBV_ACCESS_LOCAL_WRITE);
  std::printf("qpn=%u\npsn=%u\nrkey=%u\naddr=%" PRIu64 "\n", l.b->qp_num, psn, mine->rkey,
              uint64_t(reinterpret_cast<uintptr_t>(mine->addr)));
  std::fflush(stdout);
  char line[64];
  if (!std::fgets(line, sizeof(line), stdin)) return 2;
  const auto *p = static_cast<const uint8_t *>(mine->addr);
  size_t changed = 0;
  for (size_t i = 0; i < len; i++) changed += p[i] != 0x5a;
  // Our own connection still works, at the PSN we expect.
  int st = post_write(l.a, src, 64, uint64_t(reinterpret_cast<uintptr_t>(mine->addr)), mine->rkey);
  int wc = st ? -1 : wait_completion(l.cq, 5);
  bool landed = wc == IBV_WC_SUCCESS && p[0] == 0xa5 && p[63] == 0xa5 && p[64] == 0x5a;
  std::printf("bytes_changed_by_others=%zu\nown_write=%s\n", changed,
              wc < 0 ? "no completion" : ibv_wc_status_str(ibv_wc_status(wc)));
  return changed == 0 && landed ? 0 : 1;
}

// Row 2, the attacker: a QP of ours aimed at the victim's, its PSN and key known.
int inject(uint32_t qpn, uint32_t psn, uint32_t rkey, uint64_t addr) {
  Loopback l = open_loopback();
  connect_qp(l.ctx, l.a, qpn, psn, psn);
  ibv_mr *src = page_mr(l.pd, 4096, 0xee, IBV_ACCESS_LOCAL_WRITE);
  if (post_write(l.a, src, 4096, addr, rkey)) die("post");
  int wc = wait_completion(l.cq, 10);
  std::printf("write_status=%s\n", wc < 0 ? "no completion" : ibv_wc_status_str(ibv_wc_status(wc)));
  return wc == IBV_WC_SUCCESS ? 1 : 0;
}

// Row 2, through rdma_cm: the QP transitions that come with a CM call name a QP by QPN (it
// belongs to the provider's session, not the library's), so vrnicd must make them only on a
// QP of the caller's own process. ERR steps on the victim's QPN and on one of ours, through a
// CM id of a raw session; then steps beyond the limit.
int cm_qp(const char *path, uint32_t foreign_qpn) {
  Loopback l = open_loopback();  // our QPs, on the provider's session of this process
  RawSession raw;
  const uint32_t channel = raw.open_with_cm_channel(path);
  vrnic::ctl::HandleResp id{};
  vrnic::ctl::CmCreateIdReq idreq{channel, 0x0106 /* RDMA_PS_TCP */, IBV_QPT_RC, 0, 1};
  if (int err = raw.call(vrnic::ctl::Op::kCmCreateId, &idreq, sizeof(idreq), &id, sizeof(id))) {
    errno = err;
    die("CM id");
  }
  auto to_err = [&](uint32_t qpn, uint32_t count) {
    vrnic::ctl::CmIdStepsReq req{};
    req.id = id.handle;
    req.qp.qpn = qpn;
    req.qp.count = count;
    for (auto &step : req.qp.steps) {
      step.attr_mask = IBV_QP_STATE;
      step.attr.qp_state = IBV_QPS_ERR;
    }
    return raw.call(vrnic::ctl::Op::kCmDisconnect, &req, sizeof(req), nullptr, 0);
  };
  auto state = [](ibv_qp *qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    return ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) ? -1 : int(a.qp_state);
  };
  // The id has no connection, so each call ends in EINVAL; what counts is whether the QP moved.
  const int foreign = to_err(foreign_qpn, 1);
  const int too_many = to_err(l.b->qp_num, vrnic::ctl::kMaxCmQpSteps + 1);
  const int b_state = state(l.b);
  const int own = to_err(l.a->qp_num, 1);
  const int a_state = state(l.a);
  // rdma_connect naming the foreign QPN: a peer would take our REQ for that QP's (a second
  // REQ from a connected QP is a stale connection: the peer tears the first down). Refused;
  // the same id then connects naming a QPN of ours, or of no QP, as the kernel's allows.
  vrnic::ctl::CmBindReq bind{id.handle, 0, {}};
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  std::memcpy(bind.addr.gid, loopback, 16);
  vrnic::ctl::CmBindResp bound{};
  if (int err = raw.call(vrnic::ctl::Op::kCmBind, &bind, sizeof(bind), &bound, sizeof(bound))) {
    errno = err;
    die("CM bind");
  }
  auto connect = [&](uint32_t qpn) {
    vrnic::ctl::CmConnectReq req{};
    req.id = id.handle;
    std::memcpy(req.dst.gid, loopback, 16);
    req.dst.port = 9;  // nobody listens: the REQ is rejected, later, on the event channel
    req.p.qp_num = qpn;
    req.p.retry_count = req.p.rnr_retry_count = 7;
    req.p.path_mtu = IBV_MTU_1024;
    return raw.call(vrnic::ctl::Op::kCmConnect, &req, sizeof(req), nullptr, 0);
  };
  const int connect_foreign = connect(foreign_qpn);
  const int connect_gsi = connect(1);
  const int connect_own = connect(l.b->qp_num);
  std::printf(
      "foreign_qpn_status=%s\ntoo_many_steps_status=%s\nown_qp_status=%s\n"
      "own_qp_state=%d\nuntouched_qp_state=%d\nconnect_naming_foreign_qpn=%s\n"
      "connect_naming_qp1=%s\nconnect_naming_own_qpn=%s\n",
      std::strerror(foreign), std::strerror(too_many), std::strerror(own), a_state, b_state,
      std::strerror(connect_foreign), std::strerror(connect_gsi), std::strerror(connect_own));
  return foreign == EINVAL && too_many == EINVAL && a_state == IBV_QPS_ERR &&
                 b_state == IBV_QPS_RESET && connect_foreign == EINVAL && connect_gsi == EINVAL &&
                 connect_own == 0
             ? 0
             : 1;
}

// Row 1, the attacker. The child registers memory vrnicd reaches through the child's
// /proc/self/mem (a shared mapping: never moved into a memfd), hands the session to its own
// child and exits; that grandchild writes into the MR once someone else has the PID.
int reuse_attacker(uint64_t addr, const std::string &dir) {
  pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child > 0) {
    int st;
    ::waitpid(child, &st, 0);  // reaped: its PID is free for someone else
    std::printf("child_pid=%d\n", child);
    std::fflush(stdout);
    wait_for_file(dir + "/done", 60);
    return 0;
  }
  Loopback l = open_loopback();
  connect_qp(l.ctx, l.a, l.b->qp_num, 0, 0);
  connect_qp(l.ctx, l.b, l.a->qp_num, 0, 0);
  void *p = ::mmap(reinterpret_cast<void *>(addr), 4096, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) die("mmap at ADDR");
  ibv_mr *target = ibv_reg_mr(l.pd, p, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!target) die("reg_mr (shared)");
  ibv_mr *src = page_mr(l.pd, 4096, 0xee, IBV_ACCESS_LOCAL_WRITE);
  pid_t grandchild = ::fork();
  if (grandchild < 0) die("fork");
  if (grandchild > 0) ::_exit(0);  // the process that registered the memory is gone
  wait_for_file(dir + "/go", 60);
  if (post_write(l.a, src, 4096, addr, target->rkey)) die("post");
  int wc = wait_completion(l.cq, 10);
  FILE *f = std::fopen((dir + "/write_status").c_str(), "w");
  if (f) {
    std::fprintf(f, "%s\n", wc < 0 ? "no completion" : ibv_wc_status_str(ibv_wc_status(wc)));
    std::fclose(f);
  }
  ::close(::open((dir + "/done").c_str(), O_CREAT | O_WRONLY, 0644));
  ::_exit(0);
}

// Row 1, the process that gets the PID: clone3 with set_tid (root), a pattern at ADDR.
int spawn_at_pid(pid_t pid, uint64_t addr, const std::string &dir) {
  clone_args args{};
  pid_t tid = pid;
  args.set_tid = reinterpret_cast<uint64_t>(&tid);
  args.set_tid_size = 1;
  args.exit_signal = SIGCHLD;
  long r = ::syscall(SYS_clone3, &args, sizeof(args));
  if (r < 0) die("clone3 set_tid");
  if (r > 0) {
    int st;
    ::waitpid(pid_t(r), &st, 0);
    std::printf("pid=%ld\n", r);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  void *p = ::mmap(reinterpret_cast<void *>(addr), 4096, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) ::_exit(2);
  std::memset(p, 0x5a, 4096);
  ::close(::open((dir + "/ready").c_str(), O_CREAT | O_WRONLY, 0644));
  wait_for_file(dir + "/check", 60);
  const auto *b = static_cast<const uint8_t *>(p);
  size_t changed = 0;
  for (size_t i = 0; i < 4096; i++) changed += b[i] != 0x5a;
  FILE *f = std::fopen((dir + "/changed").c_str(), "w");
  if (f) {
    std::fprintf(f, "%zu\n", changed);
    std::fclose(f);
  }
  ::_exit(changed ? 1 : 0);
}

// Issue 28, row 1: a region moved under a WRITE in flight.
int rereg_write() {
  Loopback l = open_loopback();
  const uint32_t psn = 0x4242;
  connect_qp(l.ctx, l.a, l.b->qp_num, psn, psn);
  connect_qp(l.ctx, l.b, l.a->qp_num, psn, psn);
  const size_t len = 64 << 20;
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr *src = page_mr(l.pd, len, 0xa5, IBV_ACCESS_LOCAL_WRITE);
  void *dst = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (dst == MAP_FAILED) die("mmap");
  const uint64_t iova = reinterpret_cast<uint64_t>(dst) + (1ull << 40);
  ibv_mr *mr = ibv_reg_mr_iova(l.pd, dst, len, iova, remote);
  if (!mr) die("reg_mr_iova");
  auto *landing = static_cast<uint8_t *>(
      ::mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (landing == MAP_FAILED) die("mmap");
  std::memset(landing, 0, 3 * 4096);
  if (post_write(l.a, src, uint32_t(len), iova, mr->rkey)) die("post_send");
  auto *first = static_cast<volatile uint8_t *>(dst);
  auto t = Clock::now();
  while (*first != 0xa5 && seconds_since(t) < 10) {
  }
  int rr = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, landing + 4096, 4096, remote);
  int wc = wait_completion(l.cq, 20);
  size_t touched = 0;
  for (size_t i = 0; i < 3 * 4096; i++) touched += landing[i] != 0;
  ibv_device_attr da{};
  int q = ibv_query_device(l.ctx, &da);
  std::printf("rereg=%s\nwrite=%s\nbytes_in_new_region_or_guards=%zu\nquery_device_after=%s\n",
              rr ? std::strerror(rr) : "ok",
              wc < 0 ? "no completion" : ibv_wc_status_str(ibv_wc_status(wc)), touched,
              q ? std::strerror(q) : "ok");
  return rr == 0 && wc >= 0 && touched == 0 && q == 0 ? 0 : 1;
}

// Issue 28, row 13: a privileged rdma_cm port is refused to an unprivileged user.
int low_port(const char *path) {
  RawSession raw;
  const uint32_t channel = raw.open_with_cm_channel(path);
  auto bind = [&](uint16_t port) {
    vrnic::ctl::CmCreateIdReq idreq{channel, 0x0106 /* RDMA_PS_TCP */, IBV_QPT_RC, 0, 1};
    vrnic::ctl::HandleResp id{};
    if (raw.call(vrnic::ctl::Op::kCmCreateId, &idreq, sizeof(idreq), &id, sizeof(id)))
      die("CM id");
    vrnic::ctl::CmBindReq req{id.handle, 0, {}};
    req.addr.port = port;
    vrnic::ctl::CmBindResp resp{};
    return raw.call(vrnic::ctl::Op::kCmBind, &req, sizeof(req), &resp, sizeof(resp));
  };
  const int low = bind(80), high = bind(40000);
  std::printf("bind_port_80=%s\nbind_port_40000=%s\n", low ? strerrorname_np(low) : "ok",
              high ? strerrorname_np(high) : "ok");
  return low == EACCES && high == 0 ? 0 : 1;
}

void usage() {
  std::fprintf(stderr,
               "usage: hostile flood SOCKET N | channels | sessions | mr-bytes SOCKET BYTES |\n"
               "       null-mrs N | objects | sge-rewrite SECONDS | doorbells SECONDS |\n"
               "       doorbells-cross SECONDS | local-ops SECONDS | victim |\n"
               "       inject QPN PSN RKEY ADDR | cm-qp SOCKET QPN | reuse-attacker ADDR DIR |\n"
               "       rereg-write | low-port SOCKET | spawn-at-pid PID ADDR DIR\n");
}

}  // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    usage();
    return 2;
  }
  const std::string cmd = argv[1];
  auto num = [&](int i) { return std::strtoull(argv[i], nullptr, 0); };
  if (cmd == "flood" && argc == 4) return flood(argv[2], long(num(3)));
  if (cmd == "channels" && argc == 2) return channels();
  if (cmd == "sessions" && argc == 2) return sessions();
  if (cmd == "mr-bytes" && argc == 4) return mr_bytes(argv[2], num(3));
  if (cmd == "null-mrs" && argc == 3) return null_mrs(long(num(2)));
  if (cmd == "objects" && argc == 2) return objects();
  if (cmd == "sge-rewrite" && argc == 3) return sge_rewrite(std::atof(argv[2]));
  if (cmd == "doorbells" && (argc == 3 || argc == 4))
    return doorbells(std::atof(argv[2]), argc == 4 ? int(num(3)) : 1);
  if (cmd == "doorbells-cross" && argc == 3) return doorbells_cross(std::atof(argv[2]));
  if (cmd == "local-ops" && argc == 3) return local_ops(std::atof(argv[2]));
  if (cmd == "victim" && argc == 2) return victim();
  if (cmd == "inject" && argc == 6)
    return inject(uint32_t(num(2)), uint32_t(num(3)), uint32_t(num(4)), num(5));
  if (cmd == "cm-qp" && argc == 4) return cm_qp(argv[2], uint32_t(num(3)));
  if (cmd == "reuse-attacker" && argc == 4) return reuse_attacker(num(2), argv[3]);
  if (cmd == "rereg-write" && argc == 2) return rereg_write();
  if (cmd == "low-port" && argc == 3) return low_port(argv[2]);
  if (cmd == "spawn-at-pid" && argc == 5) return spawn_at_pid(pid_t(num(2)), num(3), argv[4]);
  usage();
  return 2;
}
