// XRC (issue 32 item 3): XRC domains shared through a file between processes, XRC SRQs, an
// initiator QP whose messages one target QP delivers to whichever SRQ of its domain each names
// (the SRQ of another process too), ibv_open_qp (a target QP that lasts while any process
// holds it), and the errors: ibv_open_xrcd's EAGAIN and EINVAL, ibv_close_xrcd's EBUSY, an
// XRC SRQ on an RC QP, receives posted to an XRC QP, ibv_open_qp of what is no target QP of
// the domain, and a message for an SRQ number that is no SRQ of the target's domain
// (IBV_WC_REM_INV_REQ_ERR).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs_fixture.h"

using namespace vt;

namespace {

constexpr size_t kMsg = 3000;  // three packets at the 1024-byte MTU
constexpr uint32_t kPsn = 0x1234;

// A file whose inode names an XRC domain, removed at the end.
struct DomainFile {
  std::string path;
  int fd = -1;
  DomainFile() {
    char name[] = "/tmp/vrnic-xrcd-XXXXXX";
    fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    path = name;
  }
  ~DomainFile() {
    ::close(fd);
    ::unlink(path.c_str());
  }
};

ibv_xrcd *open_xrcd(ibv_context *ctx, int fd, int oflags) {
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  return ibv_open_xrcd(ctx, &a);
}

ibv_srq *create_xrc_srq(ibv_context *ctx, ibv_pd *pd, ibv_xrcd *xrcd, ibv_cq *cq) {
  ibv_srq_init_attr_ex a{};
  a.attr.max_wr = 16;
  a.attr.max_sge = 1;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                IBV_SRQ_INIT_ATTR_CQ;
  a.srq_type = IBV_SRQT_XRC;
  a.pd = pd;
  a.xrcd = xrcd;
  a.cq = cq;
  return ibv_create_srq_ex(ctx, &a);
}

uint32_t srq_num(ibv_srq *srq) {
  uint32_t n = 0;
  REQUIRE(ibv_get_srq_num(srq, &n) == 0);
  return n;
}

// RESET -> RTS for either half of XRC, connected to `dest` on this device, with the masks the
// kernel requires of each (qp_state_table's XRC_INI and XRC_TGT rows).
int connect_xrc(const Device &d, ibv_qp *qp, uint32_t dest) {
  const bool target = qp->qp_type == IBV_QPT_XRC_RECV;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = d.port_num;
  a.qp_access_flags = target ? kAllAccess : 0;
  if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_ACCESS_FLAGS))
    return e;
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.rq_psn = kPsn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = d.gid;
  a.ah_attr.grh.sgid_index = uint8_t(d.gid_index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = d.port_num;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (target) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (int e = ibv_modify_qp(qp, &a, mask)) return e;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = kPsn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
  if (!target) mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  return ibv_modify_qp(qp, &a, mask);
}

// One side of XRC in one process: a PD and a CQ, a domain, an initiator QP and a target QP
// in the domain, connected to each other on this device.
struct XrcSide {
  std::unique_ptr<Device> d = open_device();
  PdPtr pd{ibv_alloc_pd(d->ctx.get())};
  CqPtr cq{ibv_create_cq(d->ctx.get(), 64, nullptr, nullptr, 0)};
  ibv_xrcd *xrcd = nullptr;
  QpPtr initiator, target;

  explicit XrcSide(int domain_fd) {
    REQUIRE(pd);
    REQUIRE(cq);
    xrcd = open_xrcd(d->ctx.get(), domain_fd, O_CREAT);
    REQUIRE(xrcd);
    ibv_qp_init_attr_ex t{};
    t.qp_type = IBV_QPT_XRC_RECV;
    t.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    t.xrcd = xrcd;
    target.reset(ibv_create_qp_ex(d->ctx.get(), &t));
    REQUIRE(target);
    ibv_qp_init_attr_ex i{};
    i.qp_type = IBV_QPT_XRC_SEND;
    i.comp_mask = IBV_QP_INIT_ATTR_PD;
    i.pd = pd.get();
    i.send_cq = cq.get();
    i.cap.max_send_wr = 16;
    i.cap.max_send_sge = 1;
    initiator.reset(ibv_create_qp_ex(d->ctx.get(), &i));
    REQUIRE(initiator);
    REQUIRE(connect_xrc(*d, target.get(), initiator->qp_num) == 0);
    REQUIRE(connect_xrc(*d, initiator.get(), target->qp_num) == 0);
  }
  ~XrcSide() {
    initiator.reset();
    target.reset();
    if (xrcd && ibv_close_xrcd(xrcd)) report_destroy_failure("xrcd", errno);
  }
  void send(const Region &src, uint32_t srqn, uint64_t wr_id) {
    ibv_sge sge = make_sge(src.payload(), src.len, src.lkey());
    ibv_send_wr wr = make_send_wr(wr_id, IBV_WR_SEND, &sge, 1);
    wr.qp_type.xrc.remote_srqn = srqn;
    post_send(initiator.get(), &wr);
  }
  // A message of `seed`'s pattern to SRQ `srqn` (a child's, which checks it), sent through the
  // initiator and completed; then the child's exit, which must be 0.
  void send_to_child(uint32_t srqn, uint64_t seed, pid_t child) {
    Region src(pd.get(), kMsg, seed_for("xrc to a child"));
    fill_pattern(src.payload(), kMsg, seed);  // what the child expects
    send(src, srqn, 1);
    ibv_wc wc = poll_one(cq.get(), "the send to the child's SRQ");
    CHECK(wc.status == IBV_WC_SUCCESS);
    int st = 0;
    REQUIRE(::waitpid(child, &st, 0) == child);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
};

// A forked child's side (never Catch2): its own context, PD and CQ, the parent's XRC domain
// (`path`, opened without O_CREAT) and an SRQ of its own there with one receive posted.
// Each step false, with `error` set, when it went wrong.
struct ChildSide {
  Device d;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  ibv_xrcd *xrcd = nullptr;
  ibv_srq *srq = nullptr;
  ibv_mr *mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kMsg);
  std::string error;

  bool fail(const std::string &what) {
    error = what + ": " + std::strerror(errno);
    return false;
  }
  bool open(const char *path) {
    if (std::string e = try_open_device(d); !e.empty()) return fail(e);
    pd = ibv_alloc_pd(d.ctx.get());
    cq = ibv_create_cq(d.ctx.get(), 16, nullptr, nullptr, 0);
    const int fd = ::open(path, O_RDONLY);
    xrcd = fd >= 0 ? open_xrcd(d.ctx.get(), fd, 0) : nullptr;
    return pd && cq && xrcd ? true : fail("pd, cq or the parent's XRC domain");
  }
  // The SRQ and its receive; its number written to `out`.
  bool post(uint64_t wr_id, int out) {
    srq = create_xrc_srq(d.ctx.get(), pd, xrcd, cq);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!srq || !mr) return fail("XRC SRQ or MR");
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), uint32_t(kMsg), mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    uint32_t n = 0;
    if (ibv_post_srq_recv(srq, &wr, &bad) || ibv_get_srq_num(srq, &n)) return fail("post, srq num");
    return ::write(out, &n, sizeof(n)) == sizeof(n) ? true : fail("write");
  }
  // The message `seed`'s pattern, received by `qpn`.
  bool take(uint64_t wr_id, uint32_t qpn, uint64_t seed) {
    ibv_wc wc{};
    if (poll_until(cq, &wc, Clock::now() + kCompletionTimeout) != 1) return fail("no completion");
    if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || wc.byte_len != kMsg ||
        wc.opcode != IBV_WC_RECV || wc.qp_num != qpn) {
      error = describe(wc);
      return false;
    }
    if (!diff_bytes(buf.data(), make_pattern(kMsg, seed).data(), kMsg).empty()) {
      error = "the message's bytes differ";
      return false;
    }
    return true;
  }
  // Its SRQ gone, the domain holds nothing of the child's: closing it is 0.
  bool close() {
    ibv_dereg_mr(mr);
    ibv_destroy_srq(srq);
    if (ibv_close_xrcd(xrcd)) return fail("ibv_close_xrcd");
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    return true;
  }
  int exit_status() const {
    if (error.empty()) return 0;
    std::fprintf(stderr, "xrc child: %s\n", error.c_str());
    return 1;
  }
};

// A child that takes one message through the parent's target QP `qpn`.
int child_receiver(const char *path, uint32_t qpn, int out, uint64_t seed) {
  ChildSide c;
  (void)(c.open(path) && c.post(77, out) && c.take(77, qpn, seed) && c.close());
  return c.exit_status();
}

}  // namespace

TEST_CASE("XRC: one target QP delivers to the SRQ each message names, another process's too",
          "[xrc]") {
  DomainFile file;
  XrcSide side(file.fd);
  SrqPtr own(create_xrc_srq(side.d->ctx.get(), side.pd.get(), side.xrcd, side.cq.get()));
  REQUIRE(own);
  Region dst(side.pd.get(), kMsg, seed_for("xrc dst"));
  ibv_sge rs = make_sge(dst.payload(), kMsg, dst.lkey());
  ibv_recv_wr rwr = make_recv_wr(5, &rs, 1), *bad = nullptr;
  REQUIRE(ibv_post_srq_recv(own.get(), &rwr, &bad) == 0);

  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const uint64_t child_seed = seed_for("xrc to the child");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::_exit(child_receiver(file.path.c_str(), side.target->qp_num, pipe_fds[1], child_seed));
  }
  ::close(pipe_fds[1]);
  uint32_t child_srqn = 0;
  const bool got = read_full(pipe_fds[0], &child_srqn, sizeof(child_srqn), kCompletionTimeout);
  ::close(pipe_fds[0]);
  REQUIRE(got);

  // To this process's SRQ: the completion is the target QP's, on the SRQ's CQ.
  Region src(side.pd.get(), kMsg, seed_for("xrc src"));
  side.send(src, srq_num(own.get()), 1);
  std::vector<ibv_wc> wcs = poll_n(side.cq.get(), 2, "the send and its receive");
  const ibv_wc &recv = wcs[0].opcode == IBV_WC_RECV ? wcs[0] : wcs[1];
  const ibv_wc &sent = wcs[0].opcode == IBV_WC_RECV ? wcs[1] : wcs[0];
  CHECK(sent.status == IBV_WC_SUCCESS);
  CHECK(sent.qp_num == side.initiator->qp_num);
  CHECK(recv.status == IBV_WC_SUCCESS);
  CHECK(recv.wr_id == 5);
  CHECK(recv.byte_len == kMsg);
  CHECK(recv.qp_num == side.target->qp_num);
  VT_REQUIRE_BYTES("to this process's SRQ", dst.payload(), src.payload(), kMsg);

  // To the child's SRQ, through the same connection.
  side.send_to_child(child_srqn, child_seed, pid);
  // The domain is still the parent's: its SRQ holds it.
  CHECK(ibv_close_xrcd(side.xrcd) == EBUSY);
}

TEST_CASE("XRC: a message for a number that is no SRQ of the target's domain", "[xrc]") {
  DomainFile file, other_file;
  XrcSide side(file.fd);
  // An SRQ of another domain, and an ordinary SRQ: neither is the target's to fill.
  ibv_xrcd *other = open_xrcd(side.d->ctx.get(), other_file.fd, O_CREAT);
  REQUIRE(other);
  SrqPtr foreign(create_xrc_srq(side.d->ctx.get(), side.pd.get(), other, side.cq.get()));
  REQUIRE(foreign);
  Region src(side.pd.get(), 64, seed_for("xrc bad srqn"));
  side.send(src, srq_num(foreign.get()), 9);
  ibv_wc wc = poll_one(side.cq.get(), "a send to another domain's SRQ");
  CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR);
  CHECK(wc.wr_id == 9);
  foreign.reset();
  CHECK(ibv_close_xrcd(other) == 0);
}

TEST_CASE("XRC: SRQ number 0 names nothing", "[xrc]") {
  DomainFile file;
  XrcSide side(file.fd);
  Region src(side.pd.get(), 64, seed_for("xrc srqn 0"));
  side.send(src, 0, 3);
  ibv_wc wc = poll_one(side.cq.get(), "a send with no SRQ number");
  CHECK(wc.status == IBV_WC_REM_INV_REQ_ERR);
}

TEST_CASE("XRC: the errors of domains, SRQs and QPs", "[xrc]") {
  auto d = open_device();
  ibv_context *ctx = d->ctx.get();
  DomainFile file;
  SECTION("ibv_open_xrcd") {
    // No domain of this file yet, and no O_CREAT: EAGAIN, as the kernel answers.
    errno = 0;
    CHECK(open_xrcd(ctx, file.fd, 0) == nullptr);
    CHECK(errno == EAGAIN);
    ibv_xrcd *x = open_xrcd(ctx, file.fd, O_CREAT);
    REQUIRE(x);
    errno = 0;
    CHECK(open_xrcd(ctx, file.fd, O_CREAT | O_EXCL) == nullptr);
    CHECK(errno == EINVAL);
    ibv_xrcd *again = open_xrcd(ctx, file.fd, 0);  // a second open of the same domain
    REQUIRE(again);
    CHECK(ibv_close_xrcd(again) == 0);
    CHECK(ibv_close_xrcd(x) == 0);
    ibv_xrcd_init_attr no_flags{};
    no_flags.comp_mask = IBV_XRCD_INIT_ATTR_FD;
    no_flags.fd = -1;
    errno = 0;
    CHECK(ibv_open_xrcd(ctx, &no_flags) == nullptr);
    CHECK(errno == EINVAL);
    // fd -1: a domain of its own.
    ibv_xrcd *own = open_xrcd(ctx, -1, 0);
    REQUIRE(own);
    CHECK(ibv_close_xrcd(own) == 0);
  }
  SECTION("XRC SRQs and QPs") {
    PdPtr pd(ibv_alloc_pd(ctx));
    CqPtr cq(ibv_create_cq(ctx, 16, nullptr, nullptr, 0));
    ibv_xrcd *x = open_xrcd(ctx, file.fd, O_CREAT);
    REQUIRE(x);
    SrqPtr srq(create_xrc_srq(ctx, pd.get(), x, cq.get()));
    REQUIRE(srq);
    CHECK(ibv_close_xrcd(x) == EBUSY);  // its SRQ holds it
    // An XRC SRQ without its CQ.
    ibv_srq_init_attr_ex no_cq{};
    no_cq.attr = {16, 1, 0};
    no_cq.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD;
    no_cq.srq_type = IBV_SRQT_XRC;
    no_cq.pd = pd.get();
    no_cq.xrcd = x;
    errno = 0;
    CHECK(ibv_create_srq_ex(ctx, &no_cq) == nullptr);
    CHECK(errno == EINVAL);
    // An RC QP on an XRC SRQ.
    ibv_qp_init_attr rc{};
    rc.send_cq = rc.recv_cq = cq.get();
    rc.srq = srq.get();
    rc.qp_type = IBV_QPT_RC;
    rc.cap = {4, 0, 1, 1, 0};
    errno = 0;
    CHECK(ibv_create_qp(pd.get(), &rc) == nullptr);
    CHECK(errno == EINVAL);
    // A target QP needs its domain.
    ibv_qp_init_attr_ex t{};
    t.qp_type = IBV_QPT_XRC_RECV;
    errno = 0;
    CHECK(ibv_create_qp_ex(ctx, &t) == nullptr);
    CHECK(errno == EINVAL);
    t.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    t.xrcd = x;
    QpPtr target(ibv_create_qp_ex(ctx, &t));
    REQUIRE(target);
    // Neither half of XRC has a receive queue; the target has no send queue either.
    ibv_sge sge{0, 0, 0};
    ibv_recv_wr rwr = make_recv_wr(1, &sge, 0), *bad_r = nullptr;
    CHECK(ibv_post_recv(target.get(), &rwr, &bad_r) == EINVAL);
    ibv_send_wr swr = make_send_wr(1, IBV_WR_SEND, &sge, 0), *bad_s = nullptr;
    CHECK(ibv_post_send(target.get(), &swr, &bad_s) == EINVAL);
    // The initiator has no receive side: its RTR with MIN_RNR_TIMER (which the target's
    // requires) is EINVAL, as the kernel's table has it.
    ibv_qp_init_attr_ex i{};
    i.qp_type = IBV_QPT_XRC_SEND;
    i.comp_mask = IBV_QP_INIT_ATTR_PD;
    i.pd = pd.get();
    i.send_cq = cq.get();
    i.cap = {4, 0, 1, 0, 0};
    QpPtr initiator(ibv_create_qp_ex(ctx, &i));
    REQUIRE(initiator);
    CHECK(ibv_post_recv(initiator.get(), &rwr, &bad_r) == EINVAL);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = d->port_num;
    REQUIRE(ibv_modify_qp(initiator.get(), &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                  IBV_QP_ACCESS_FLAGS) == 0);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = target->qp_num;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = d->gid;
    a.ah_attr.grh.sgid_index = uint8_t(d->gid_index);
    a.ah_attr.port_num = d->port_num;
    const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    CHECK(ibv_modify_qp(initiator.get(), &a, rtr | IBV_QP_MIN_RNR_TIMER) == EINVAL);
    CHECK(ibv_modify_qp(initiator.get(), &a, rtr) == 0);
    target.reset();
    srq.reset();
    CHECK(ibv_close_xrcd(x) == 0);
  }
}

namespace {

// The child's side of ibv_open_qp: opens the parent's target QP (number `qpn`) in the
// parent's domain, makes an SRQ there and tells its number, waits until the parent has
// destroyed its own handle of the QP, takes one message through it, and destroys the last
// handle. Exit status 0 when all went right.
int child_opener(const char *path, uint32_t qpn, int out, int in, uint64_t seed) {
  ChildSide c;
  if (!c.open(path)) return c.exit_status();
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = qpn;
  oa.xrcd = c.xrcd;
  oa.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp *target = ibv_open_qp(c.d.ctx.get(), &oa);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  char go = 0;
  if (!target) {
    c.fail("ibv_open_qp");
  } else if (errno = 0; ibv_open_qp(c.d.ctx.get(), &oa) != nullptr || errno != EEXIST) {
    c.fail("a second open of it");
  } else if (ibv_query_qp(target, &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_RTS ||
             target->state != IBV_QPS_RTS || target->qp_num != qpn) {
    c.fail("the opened QP is not the parent's, in RTS");
  } else if (c.post(88, out) && (read_full(in, &go, 1, kCompletionTimeout) || c.fail("pipe")) &&
             c.take(88, qpn, seed)) {
    // The last handle: the QP goes with it.
    if (ibv_destroy_qp(target) == 0 || c.fail("ibv_destroy_qp")) c.close();
  }
  return c.exit_status();
}

}  // namespace

TEST_CASE("XRC: ibv_open_qp, a target QP that lasts while any process holds it", "[xrc]") {
  DomainFile file;
  XrcSide side(file.fd);
  const uint32_t target_qpn = side.target->qp_num;
  int to_parent[2], to_child[2];
  REQUIRE(::pipe(to_parent) == 0);
  REQUIRE(::pipe(to_child) == 0);
  const uint64_t seed = seed_for("xrc through an opened QP");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(to_parent[0]);
    ::close(to_child[1]);
    ::_exit(child_opener(file.path.c_str(), target_qpn, to_parent[1], to_child[0], seed));
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  uint32_t child_srqn = 0;
  const bool got = read_full(to_parent[0], &child_srqn, sizeof(child_srqn), kCompletionTimeout);
  ::close(to_parent[0]);
  REQUIRE(got);
  // This process lets go of the QP: the child's handle keeps it.
  side.target.reset();
  REQUIRE(write_full(to_child[1], "g", 1));
  ::close(to_child[1]);
  side.send_to_child(child_srqn, seed, pid);  // through the QP the child holds
  // Its last handle destroyed, the QP is no more: nothing answers the initiator.
  Region src(side.pd.get(), 64, seed_for("xrc after the last handle"));
  side.send(src, child_srqn, 2);
  ibv_wc wc = poll_one(side.cq.get(), "a send to a QP that is gone");
  CHECK(wc.status == IBV_WC_RETRY_EXC_ERR);
}

TEST_CASE("XRC: ibv_open_qp's errors", "[xrc]") {
  DomainFile file, other_file;
  XrcSide side(file.fd);
  ibv_context *ctx = side.d->ctx.get();
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = side.target->qp_num;
  oa.xrcd = side.xrcd;
  oa.qp_type = IBV_QPT_RC;  // only a target QP is opened
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == nullptr);
  CHECK(errno == EINVAL);
  oa.qp_type = IBV_QPT_XRC_RECV;
  oa.qp_num = side.initiator->qp_num;  // no target QP
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == nullptr);
  CHECK(errno == EINVAL);
  ibv_xrcd *other = open_xrcd(ctx, other_file.fd, O_CREAT);  // not the QP's domain
  REQUIRE(other);
  oa.qp_num = side.target->qp_num;
  oa.xrcd = other;
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_close_xrcd(other) == 0);
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;  // no domain
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == nullptr);
  CHECK(errno == EINVAL);
}
