// direct_peers: the same-host direct path between two processes (issue 30), under the cases
// that must not go wrong. Two processes, this program run twice (the second exec'd, so that
// it is a process of its own and not a forked child, which keeps to the worker path): a
// target with a region of two slots and an RC QP, and a poster that streams signaled RDMA
// WRITEs (4 KiB) into them in turn, each of its own pattern, checking every completion.
//
//   --case dereg        the target deregisters the region in the middle of a stream of 1 MiB
//                       WRITEs: no
//                       byte may change in it after ibv_dereg_mr returned, and the poster's
//                       next WRITE completes with IBV_WC_REM_ACCESS_ERR.
//   --case kill-poster  the target SIGKILLs the poster in the middle of the stream, then
//                       deregisters and destroys everything: nothing hangs (a watchdog
//                       fails it after 20 s), and the region holds whole writes only up to
//                       the last (a write may be cut only where the poster died).
//   --case kill-target  the poster SIGKILLs the target in the middle of the stream and goes
//                       on: each WRITE completes, successfully or with an error, and one
//                       comes with an error within 30 s (the peer is gone); no hang.
//   --case other-user   the target runs as --uid/--gid (the poster as root): every WRITE lands
//                       (the target checks the last one byte for byte) through the worker
//                       path; the caller checks vrnicd's direct_ops did not move.
// Prints "PASS: ..." and exits 0, or "FAIL: ..." and exits 1.
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "first_device.h"

namespace {

// WRITEs of kWrite bytes into a region of two; for the dereg case 1 MiB each, so that a copy
// in flight lasts longer than ibv_dereg_mr's round trip to vrnicd: one that went on past the
// return would be caught changing bytes.
uint32_t kWrite = 4096;
size_t kRegion = 2 * 4096;
int kWritesBeforeEvent = 2000;  // the stream is well under way (direct, if it can)

std::string g_role = "?";

void vsay(const char *tag, const char *fmt, va_list ap) {
  std::printf("%s%s: ", tag, g_role.c_str());
  std::vprintf(fmt, ap);
  std::printf("\n");
  std::fflush(stdout);
}

[[noreturn]] void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay("FAIL: ", fmt, ap);
  va_end(ap);
  std::_Exit(1);
}

void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsay("", fmt, ap);
  va_end(ap);
}

// WRITE number `seq` carries its number, then one byte of it repeated (cheap to make at
// 1 MiB, so that the poster spends its time in the copy).
void fill(uint8_t *p, uint64_t seq) {
  std::memset(p, uint8_t(seq * 131 + 7), kWrite);
  std::memcpy(p, &seq, sizeof(seq));
}

// What the two ends tell each other over their socketpair.
struct Hello {
  uint32_t qpn;
  uint32_t rkey;
  uint64_t addr;
  uint8_t gid[16];
};
enum Note : uint8_t { kGo = 1, kDone = 2 };

void send_all(int fd, const void *p, size_t n) {
  if (::send(fd, p, n, MSG_NOSIGNAL) != ssize_t(n)) fail("send: %s", std::strerror(errno));
}
bool recv_all(int fd, void *p, size_t n) {
  return ::recv(fd, p, n, MSG_WAITALL) == ssize_t(n);
}

// One end: device, PD, CQ, RC QP and a page-aligned buffer, connected to the other's QP.
struct End {
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  ibv_mr *mr = nullptr;
  uint8_t *buf = nullptr;
  Hello self{};

  void open(size_t bytes, int access) {
    const char *why = "";
    if (!(ctx = open_first_device(&why))) fail("%s: %s", why, std::strerror(errno));
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    void *m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!pd || !cq || m == MAP_FAILED) fail("PD, CQ or buffer");
    buf = static_cast<uint8_t *>(m);
    if (!(mr = ibv_reg_mr(pd, buf, bytes, access))) fail("ibv_reg_mr: %s", std::strerror(errno));
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {32, 1, 1, 1, 0};
    if (!(qp = ibv_create_qp(pd, &ia))) fail("ibv_create_qp: %s", std::strerror(errno));
    ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 0, &gid)) fail("ibv_query_gid");
    self = {qp->qp_num, mr->rkey, reinterpret_cast<uint64_t>(buf), {}};
    std::memcpy(self.gid, gid.raw, 16);
  }

  void connect(const Hello &peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      fail("INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      fail("RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 10;  // 4 ms: a dead peer is an error in well under a second (retry_cnt 3)
    a.retry_cnt = 3;
    a.rnr_retry = 3;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      fail("RTS");
  }
};

// The poster: WRITE number `seq` puts pattern(seq) at slot seq % slots of the target.
// Returns the completion's status; waits at most `timeout_s` for it.
ibv_wc_status write_one(End &e, const Hello &target, uint64_t seq, int timeout_s) {
  const size_t slots = kRegion / kWrite;
  uint8_t *src = e.buf + (seq % 2) * kWrite;
  fill(src, seq);
  ibv_sge sge{reinterpret_cast<uint64_t>(src), kWrite, e.mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = seq;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = target.addr + (seq % slots) * kWrite;
  wr.wr.rdma.rkey = target.rkey;
  if (int rc = ibv_post_send(e.qp, &wr, &bad)) fail("ibv_post_send: %s", std::strerror(rc));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(e.cq, 1, &wc);
    if (n < 0) fail("ibv_poll_cq");
    if (n == 1) break;
    if (std::chrono::steady_clock::now() > deadline)
      fail("WRITE %llu: no completion within %d s", (unsigned long long)seq, timeout_s);
  }
  if (wc.wr_id != seq) fail("completion of wr_id %llu, expected %llu", (unsigned long long)wc.wr_id,
                            (unsigned long long)seq);
  return wc.status;
}

// The slot a WRITE of `seq` went to holds its whole pattern.
bool holds(const uint8_t *slot, uint64_t seq) {
  std::vector<uint8_t> want(kWrite);
  fill(want.data(), seq);
  return std::memcmp(slot, want.data(), kWrite) == 0;
}

int run_poster(int sock, const std::string &c) {
  End e;
  e.open(kRegion, IBV_ACCESS_LOCAL_WRITE);
  Hello target;
  send_all(sock, &e.self, sizeof(e.self));
  if (!recv_all(sock, &target, sizeof(target))) fail("no hello from the target");
  e.connect(target);
  pid_t child_target = 0;
  if (c == "kill-target" && !recv_all(sock, &child_target, sizeof(child_target)))
    fail("no pid from the target");
  const int total = c == "other-user" ? kWritesBeforeEvent : 1 << 30;
  for (uint64_t seq = 0; seq < uint64_t(total); seq++) {
    const ibv_wc_status st = write_one(e, target, seq, 30);
    if (seq == uint64_t(kWritesBeforeEvent)) {
      const uint8_t go = kGo;
      if (c == "kill-target") {
        ::kill(child_target, SIGKILL);
        say("killed the target after %d WRITEs", kWritesBeforeEvent);
      } else {
        send_all(sock, &go, 1);
      }
    }
    if (st == IBV_WC_SUCCESS) continue;
    if (seq < uint64_t(kWritesBeforeEvent))
      fail("WRITE %llu: %s before anything happened", (unsigned long long)seq, ibv_wc_status_str(st));
    if (c == "dereg" && st != IBV_WC_REM_ACCESS_ERR)
      fail("after ibv_dereg_mr: %s, expected IBV_WC_REM_ACCESS_ERR", ibv_wc_status_str(st));
    say("WRITE %llu after the event: %s", (unsigned long long)seq, ibv_wc_status_str(st));
    return 0;
  }
  if (c != "other-user") fail("no error after the event");
  const Note done = kDone;
  uint64_t last = total - 1;
  send_all(sock, &done, 1);
  send_all(sock, &last, sizeof(last));
  uint8_t verdict = 0;
  if (!recv_all(sock, &verdict, 1) || verdict != 1) fail("the target did not find the WRITEs");
  say("%d WRITEs landed in another user's region", total);
  return 0;
}

int run_target(int sock, const std::string &c, pid_t poster) {
  End e;
  e.open(kRegion, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  std::memset(e.buf, 0, kRegion);
  Hello poster_hello;
  if (!recv_all(sock, &poster_hello, sizeof(poster_hello))) fail("no hello from the poster");
  send_all(sock, &e.self, sizeof(e.self));
  e.connect(poster_hello);
  if (c == "kill-target") {
    const pid_t me = ::getpid();
    send_all(sock, &me, sizeof(me));
    ::pause();  // killed
  }
  uint8_t note = 0;
  if (!recv_all(sock, &note, 1)) fail("the poster went away");
  if (c == "other-user") {
    uint64_t last = 0;
    if (note != kDone || !recv_all(sock, &last, sizeof(last))) fail("no last WRITE");
    const uint8_t ok = holds(e.buf + (last % (kRegion / kWrite)) * kWrite, last) ? 1 : 0;
    send_all(sock, &ok, 1);
    return ok ? 0 : (fail("WRITE %llu is not in the region", (unsigned long long)last), 1);
  }
  if (c == "kill-poster") {
    ::kill(poster, SIGKILL);
    ::waitpid(poster, nullptr, 0);
    say("killed the poster in the middle of its stream");
  }
  // At a random point of the poster's cycle (fill, then copy): it sent kGo between two.
  std::srand(unsigned(::getpid() ^ std::chrono::steady_clock::now().time_since_epoch().count()));
  if (c == "dereg") ::usleep(useconds_t(std::rand() % 4000));
  ::alarm(20);  // a deregistration that waits on a dead poster fails the case
  if (ibv_dereg_mr(e.mr)) fail("ibv_dereg_mr: %s", std::strerror(errno));
  // Paint the region from its end down (a copy still in flight runs up: they meet), then
  // see that no byte of the paint was written over.
  for (size_t off = kRegion; off; off -= 4096) std::memset(e.buf + off - 4096, 0xee, 4096);
  ::usleep(300 * 1000);
  for (size_t i = 0; i < kRegion; i++)
    if (e.buf[i] != 0xee) fail("byte %zu of the region was written after ibv_dereg_mr returned", i);
  if (ibv_destroy_qp(e.qp) || ibv_destroy_cq(e.cq) || ibv_dealloc_pd(e.pd) ||
      ibv_close_device(e.ctx))
    fail("tearing down: %s", std::strerror(errno));
  say("ibv_dereg_mr returned, nothing landed after it");
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  std::string c, role;
  int sock = -1;
  long uid = -1, gid = -1;
  pid_t peer = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--case") c = argv[i + 1];
    else if (k == "--role") role = argv[i + 1];
    else if (k == "--sock") sock = std::atoi(argv[i + 1]);
    else if (k == "--uid") uid = std::atol(argv[i + 1]);
    else if (k == "--gid") gid = std::atol(argv[i + 1]);
    else if (k == "--peer") peer = pid_t(std::atol(argv[i + 1]));
  }
  if (c != "dereg" && c != "kill-poster" && c != "kill-target" && c != "other-user") {
    std::fprintf(stderr, "usage: %s --case dereg|kill-poster|kill-target|other-user [--uid N]\n",
                 argv[0]);
    return 2;
  }
  if (c == "other-user" && (uid < 0 || gid < 0)) fail("other-user needs --uid and --gid");
  if (c == "dereg") {
    kWrite = 8 << 20;
    kRegion = 2 * kWrite;
    kWritesBeforeEvent = 100;
  }
  if (!role.empty()) {  // the exec'd half
    g_role = role;
    if (role == "target" && uid >= 0 &&
        (::setgroups(0, nullptr) || ::setgid(gid_t(gid)) || ::setuid(uid_t(uid))))
      fail("setuid(%ld): %s", uid, std::strerror(errno));
    return role == "poster" ? run_poster(sock, c) : run_target(sock, c, peer);
  }
  // The parent is the end the case does not kill: the target, or the poster for kill-target
  // and other-user (the target drops its rights).
  const bool parent_is_poster = c == "kill-target" || c == "other-user";
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) fail("socketpair");
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    ::close(sv[0]);
    const std::string fd = std::to_string(sv[1]), ppid = std::to_string(parent),
                      uid_s = std::to_string(uid), gid_s = std::to_string(gid);
    const char *child_role = parent_is_poster ? "target" : "poster";
    std::vector<const char *> args = {"/proc/self/exe", "--case", c.c_str(), "--role", child_role,
                                      "--sock", fd.c_str(), "--peer", ppid.c_str()};
    if (uid >= 0) args.insert(args.end(), {"--uid", uid_s.c_str(), "--gid", gid_s.c_str()});
    args.push_back(nullptr);
    ::execv("/proc/self/exe", const_cast<char *const *>(args.data()));
    std::_Exit(127);
  }
  ::close(sv[1]);
  g_role = parent_is_poster ? "poster" : "target";
  const int rc = parent_is_poster ? run_poster(sv[0], c) : run_target(sv[0], c, child);
  int status = 0;
  if (c != "kill-poster") {
    if (c == "kill-target") ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (c == "kill-target" ? !killed : !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      fail("the other process ended with status %#x", status);
  }
  if (rc == 0) std::printf("PASS: %s\n", c.c_str());
  return rc;
}
