// import_attack: a context exported to another user (ibv_import_device), and what that user
// must not get from it (issue 52, rows 1, 2, 3 and 7). An import is a handle on a session's
// objects, not an identity: memory is the importer's own, and so are its rights and its
// direct-path directory. Prints key=value lines; exits 0 when vrnicd held, 1 when an attack
// got through, 2 on a usage or setup error.
//
//   exporter SOCK           (the victim, root) a context with a PD, an RC QP connected to
//                           itself and a secret on its heap that it never registers; prints
//                           pid, pd, qpn and the secret's address, hands its cmd_fd to
//                           whoever connects to SOCK (a Unix socket it makes), and on "check"
//                           from stdin: the secret intact, a registration and deregistration
//                           of its own done in bounded time (the attacker set every poster
//                           cell it was given odd), and a WRITE to itself through a sleeping
//                           worker completed (the attacker filled the wake eventfd it got)
//   importer SOCK DAEMON PID PD ADDR RESTORE  (the attacker) takes the cmd_fd from SOCK
//                           and, on a connection of its own to vrnicd (DAEMON) importing it:
//                           registers the exporter's memory at ADDR in its PD (refused; also
//                           written on the exported socket itself, with a capture: EFAULT,
//                           EPERM), fills and blocks its wake eventfd, listens on an rdma_cm
//                           port (free again once the connection goes), asks for a capture
//                           and for faults as root (EPERM), lists QPs (none of root's);
//                           imports through libibverbs as a program would and
//                           registers its own memory in the imported PD (allowed); closes that
//                           import and registers memory in a context of its own (row 2: vrnicd
//                           crashed there); last, looks for the exporter's regions in the
//                           directory its first import was given (none) and holds every
//                           poster cell odd until the file RESTORE exists
#include <fcntl.h>
#include <sys/uio.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "first_device.h"
#include "loopback_qp.h"
#include "raw_session.h"
#include "vrnic/ctl_io.h"
#include "vrnic/direct_directory.h"

namespace {

namespace ctl = vrnic::ctl;
constexpr uint8_t kSecret = 0x5a;
constexpr uint16_t kCmPort = 47111;
constexpr size_t kSecretBytes = 4096;

sockaddr_un unix_address(const char *path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
  return a;
}

// One byte and room for one descriptor (SCM_RIGHTS), as hand_over sends the cmd_fd.
struct OneFdMessage {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{nullptr, 0, &iov, 1, control, sizeof(control), 0};
  OneFdMessage() = default;
  OneFdMessage(const OneFdMessage &) = delete;
};

// The cmd_fd, to the first process that connects to `path`.
bool hand_over(const char *path, int cmd_fd) {
  const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a = unix_address(path);
  ::unlink(path);
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0 ||
      ::chmod(path, 0777) < 0 || ::listen(l, 1) < 0)
    return false;
  std::printf("listening=1\n");
  std::fflush(stdout);
  const int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(l);
  if (c < 0) return false;
  OneFdMessage m;
  msghdr &msg = m.header;
  cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &cmd_fd, sizeof(int));
  const bool sent = ::sendmsg(c, &msg, 0) == 1;
  ::close(c);
  return sent;
}

int take_over(const char *path) {
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a = unix_address(path);
  if (s < 0 || ::connect(s, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0) die("connect");
  OneFdMessage m;
  msghdr &msg = m.header;
  if (::recvmsg(s, &msg, 0) != 1) die("recvmsg");
  cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  if (!cm || cm->cmsg_type != SCM_RIGHTS) die("no cmd_fd came");
  int fd;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  ::close(s);
  return fd;
}

int exporter(const char *path) {
  const char *why = nullptr;
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) die(why);
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.cap = {16, 16, 1, 1, 0};
  qa.qp_type = IBV_QPT_RC;
  ibv_qp *qp = cq ? ibv_create_qp(pd, &qa) : nullptr;
  auto *secret = static_cast<uint8_t *>(std::aligned_alloc(4096, kSecretBytes));
  if (!qp || !secret || !connect_qp_to_itself(ctx, qp, IBV_ACCESS_REMOTE_WRITE))
    die("exporter's objects");
  std::memset(secret, kSecret, kSecretBytes);
  std::printf("pid=%d\npd=%u\nqpn=%u\naddr=0x%" PRIxPTR "\n", int(::getpid()), pd->handle,
              qp->qp_num, reinterpret_cast<uintptr_t>(secret));
  std::fflush(stdout);
  if (!hand_over(path, ctx->cmd_fd)) die("handing the cmd_fd over");
  std::string line;
  std::getline(std::cin, line);  // "check"
  int rc = 0;
  size_t changed = 0;
  for (size_t i = 0; i < kSecretBytes; i++) changed += secret[i] != kSecret;
  std::printf("secret_bytes_changed=%zu\n", changed);
  if (changed) rc = 1;
  // The attacker set every poster cell it was given odd: if they were ours, this waits for
  // good (a deregistration waits for the posters in flight).
  const auto t0 = std::chrono::steady_clock::now();
  void *buf = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ibv_mr *mr = ibv_reg_mr(pd, buf, 1 << 20, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const int dereg = mr ? ibv_dereg_mr(mr) : -1;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("reg_dereg_ms=%.1f dereg=%d\n", ms, dereg);
  if (!mr || dereg || ms > 2000) rc = 1;
  // The importer filled the wake eventfd it was given and made it blocking: if it were ours,
  // our next doorbell to a sleeping worker would block in write() for good. The worker
  // sleeps after 20 ms idle; then a WRITE to ourselves, and its completion within 5 s.
  ::usleep(200000);
  static uint8_t src[64], dst[64];
  ibv_mr *wm = ibv_reg_mr(pd, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr *sm = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
  bool wrote = false;
  if (wm && sm) {
    std::memset(src, 0x77, sizeof(src));
    ibv_sge sge{reinterpret_cast<uintptr_t>(src), sizeof(src), sm->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
    wr.wr.rdma.rkey = wm->rkey;
    const auto t1 = std::chrono::steady_clock::now();
    if (ibv_post_send(qp, &wr, &bad) == 0) {
      ibv_wc wc{};
      while (ibv_poll_cq(cq, 1, &wc) == 0 && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5)) {
      }
      wrote = wc.status == IBV_WC_SUCCESS && dst[0] == 0x77;
    }
  }
  std::printf("write_after_wake_attack=%s\n", wrote ? "ok" : "failed");
  if (!wrote) rc = 1;
  if (sm) ibv_dereg_mr(sm);
  if (wm) ibv_dereg_mr(wm);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return rc;
}

// A request on the raw connection `sock`, its reply's status and body and fds (kept).
int call(int sock, ctl::Op op, const void *req, size_t len, void *resp, size_t resp_len,
         std::vector<int> *fds, const int *send_fds = nullptr, size_t nsend = 0) {
  int err = ctl::send_message(sock, op, 0, req, len, send_fds, nsend);
  auto m = std::make_unique<ctl::Message>();
  if (!err) err = ctl::recv_message(sock, m.get());
  if (!err) err = m->header.status;
  if (!err && resp_len) std::memcpy(resp, m->body, std::min<size_t>(resp_len, m->header.length));
  if (fds) {
    fds->assign(m->fds.begin(), m->fds.end());
    m->fds.clear();
  }
  m->close_fds();
  return err;
}

const char *errname(int err) { return err ? strerrorname_np(err) : "0"; }

int importer(const char *path, const char *daemon, int victim_pid, uint32_t victim_pd,
             uint64_t victim_addr, const char *restore) {
  const int cmd_fd = take_over(path);
  int rc = 0;
  // A connection of our own that speaks for the exporter's session.
  const int sock = ctl::connect_daemon(daemon);
  if (sock < 0) die("connect to vrnicd");
  int event_fds[2];
  if (ctl::make_event_channel(event_fds)) die("event channel");
  ctl::HelloReq hello{ctl::kProtocolVersion, 0};
  auto hr = std::make_unique<ctl::HelloResp>();
  std::vector<int> fds;
  const int send[2] = {event_fds[1], cmd_fd};
  if (int err = call(sock, ctl::Op::kImportDevice, &hello, sizeof(hello), hr.get(), sizeof(*hr),
                     &fds, send, 2)) {
    errno = err;
    die("kImportDevice");
  }
  std::printf("imported=1 fds=%zu directory=%u\n", fds.size(), hr->directory);

  // Row 1: the exporter's memory, which it never registered, as a region of its PD.
  auto reg = std::make_unique<ctl::RegMrReq>();
  reg->pd = victim_pd;
  reg->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  reg->addr = reg->iova = victim_addr;
  reg->length = kSecretBytes;
  reg->npieces = 1;
  reg->own_mem = 0;  // the session's memory: that of whoever made it, said 655aa9b
  reg->pieces[0] = {victim_addr, kSecretBytes, 0, uint32_t(ctl::PieceKind::kProcessVm), 0, -1, 0};
  ctl::RegMrResp mr{};
  const int reg_err = call(sock, ctl::Op::kRegMr, reg.get(),
                           offsetof(ctl::RegMrReq, pieces) + sizeof(ctl::MrPiece), &mr,
                           sizeof(mr), nullptr);
  std::printf("row1_reg_exporter_memory=%s\n", errname(reg_err));
  if (!reg_err) rc = 1;
  // The same, and a capture, written on the exported socket itself (the review of this
  // round: vrnicd took every message there for the exporter's): the sender is still us.
  const int direct_err = call(cmd_fd, ctl::Op::kRegMr, reg.get(),
                              offsetof(ctl::RegMrReq, pieces) + sizeof(ctl::MrPiece), &mr,
                              sizeof(mr), nullptr);
  ctl::CaptureReq cap0{ctl::kCaptureAnyQp, 0};
  ctl::CaptureResp cap0r{};
  std::vector<int> cap0fds;
  const int direct_cap = call(cmd_fd, ctl::Op::kCaptureStart, &cap0, sizeof(cap0), &cap0r,
                              sizeof(cap0r), &cap0fds);
  for (int fd : cap0fds) ::close(fd);
  std::printf("row1_on_exported_socket_reg=%s capture=%s\n", errname(direct_err),
              errname(direct_cap));
  if (!direct_err || direct_cap != EPERM) rc = 1;
  // The wake eventfd we were given, blocking and full: ours alone (the exporter checks).
  if (fds.size() >= 3) {
    ::fcntl(fds[2], F_SETFL, ::fcntl(fds[2], F_GETFL) & ~O_NONBLOCK);
    const uint64_t full = 0xfffffffffffffffeull;
    std::printf("wake_filled=%d\n", int(::write(fds[2], &full, sizeof(full)) == 8));
  }
  // rdma_cm on the import's connection: a listener on a port, gone with the connection.
  int cm_fds[2];
  if (ctl::make_event_channel(cm_fds)) die("CM channel");
  ctl::CreateChannelReq chreq{};
  ctl::HandleResp ch{};
  ctl::HandleResp id{};
  ctl::CmBindResp bound{};
  ctl::CmCreateIdReq idreq{0, 0x0106 /* RDMA_PS_TCP */, IBV_QPT_RC, 0, 1};
  int cm_err = call(sock, ctl::Op::kCmCreateChannel, &chreq, sizeof(chreq), &ch, sizeof(ch),
                    nullptr, &cm_fds[1], 1);
  idreq.channel = ch.handle;
  if (!cm_err)
    cm_err = call(sock, ctl::Op::kCmCreateId, &idreq, sizeof(idreq), &id, sizeof(id), nullptr);
  ctl::CmBindReq bind{id.handle, 0, {}};
  bind.addr.port = kCmPort;
  if (!cm_err)
    cm_err = call(sock, ctl::Op::kCmBind, &bind, sizeof(bind), &bound, sizeof(bound), nullptr);
  ctl::CmListenReq listen{id.handle, 8};
  if (!cm_err) cm_err = call(sock, ctl::Op::kCmListen, &listen, sizeof(listen), nullptr, 0, nullptr);
  std::printf("cm_listen_on_import=%s\n", errname(cm_err));
  ::close(cm_fds[0]);
  ::close(cm_fds[1]);

  // Row 7: management as the exporter (root) would be allowed.
  ctl::CaptureReq cap{ctl::kCaptureAnyQp, 0};
  ctl::CaptureResp capr{};
  std::vector<int> capfds;
  const int cap_err = call(sock, ctl::Op::kCaptureStart, &cap, sizeof(cap), &capr, sizeof(capr),
                           &capfds);
  for (int fd : capfds) ::close(fd);
  ctl::SetFaultsReq faults{};
  std::snprintf(faults.spec, sizeof(faults.spec), "loss=100");
  const int faults_err = call(sock, ctl::Op::kSetFaults, &faults, sizeof(faults), nullptr, 0,
                              nullptr);
  std::printf("row7_capture=%s row7_faults=%s\n", errname(cap_err), errname(faults_err));
  if (cap_err != EPERM || faults_err != EPERM) rc = 1;
  ctl::ListQpsReq lq{};
  auto qps = std::make_unique<ctl::ListQpsResp>();
  const int lq_err = call(sock, ctl::Op::kListQps, &lq, sizeof(lq), qps.get(), sizeof(*qps),
                          nullptr);
  std::printf("row7_list_qps=%s qps_listed=%u\n", errname(lq_err), lq_err ? 0 : qps->count);
  if (lq_err || qps->count) rc = 1;

  // What an import is for: our own memory, registered in the exporter's PD -- with a context
  // of our own open meanwhile, in which we register once the import is closed (row 2: the
  // import's close gave back our user's directory, unmapping it under our own session).
  const char *why = nullptr;
  ibv_context *mine = open_first_device(&why);
  ibv_pd *pd = mine ? ibv_alloc_pd(mine) : nullptr;
  if (!pd) die("a context of our own");
  ibv_context *imported = ibv_import_device(::dup(cmd_fd));
  ibv_pd *ipd = imported ? ibv_import_pd(imported, victim_pd) : nullptr;
  void *own = ::mmap(nullptr, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::memset(own, 0x33, 65536);
  ibv_mr *own_mr = ipd ? ibv_reg_mr(ipd, own, 65536, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  std::printf("import_reg_own_memory=%s\n", own_mr ? "ok" : strerrorname_np(errno));
  if (!own_mr) rc = 1;
  if (own_mr) ibv_dereg_mr(own_mr);
  if (ipd) ibv_unimport_pd(ipd);
  if (imported) ibv_close_device(imported);
  ibv_mr *m = ibv_reg_mr(pd, own, 65536, IBV_ACCESS_LOCAL_WRITE);
  std::printf("row2_own_reg_after_import=%s\n", m ? "ok" : strerrorname_np(errno));
  if (!m) rc = 1;
  if (m) ibv_dereg_mr(m);
  ibv_dealloc_pd(pd);
  ibv_close_device(mine);

  // Row 3: the directory given to us is our own user's: nothing of the exporter's in it.
  if (hr->directory && fds.size() == 5) {
    const auto *dir = static_cast<const vrnic::shm::Directory *>(
        ::mmap(nullptr, sizeof(vrnic::shm::Directory), PROT_READ, MAP_SHARED, fds[3], 0));
    auto *cells = static_cast<vrnic::shm::PosterCells *>(::mmap(
        nullptr, sizeof(vrnic::shm::PosterCells), PROT_READ | PROT_WRITE, MAP_SHARED, fds[4], 0));
    if (dir == MAP_FAILED || cells == MAP_FAILED) die("mapping the directory");
    uint32_t exporters = 0;
    for (uint32_t i = 0; i < vrnic::shm::kDirectoryMrs; i += 1) {
      vrnic::shm::DirectoryMr e;
      uint64_t version;
      if (dir->mrs[i].read(&e, &version) && e.key && int(e.pid) == victim_pid) exporters++;
      if (i == 4096) break;  // the exporter's few regions have the lowest handles
    }
    std::printf("row3_exporter_regions_seen=%u\n", exporters);
    if (exporters) rc = 1;
    // Every cell odd, owned by nobody: a poster of the user "in a section" for good, until
    // `restore` exists (the exporter checks meanwhile; they are our own user's cells now,
    // and would stall our own user's deregistrations).
    for (vrnic::shm::PosterCell &c : cells->cells) c.seq.store(c.seq.load() | 1);
    std::printf("row3_cells_set_odd=%zu\n", std::size(cells->cells));
    std::fflush(stdout);
    for (int i = 0; i < 6000 && ::access(restore, F_OK) != 0; i++) ::usleep(10000);
    for (vrnic::shm::PosterCell &c : cells->cells) c.seq.store(c.seq.load() + 1);
  }

  for (int fd : fds) ::close(fd);
  ::close(sock);
  // The import's connection is gone, and its listener with it: the port is free again.
  int again = EADDRINUSE;
  for (int i = 0; i < 100 && again == EADDRINUSE; i++) {
    ::usleep(10000);
    RawSession raw;
    const uint32_t channel = raw.open_with_cm_channel(daemon);
    ctl::CmCreateIdReq r{channel, 0x0106, IBV_QPT_RC, 0, 1};
    ctl::HandleResp nid{};
    if (raw.call(ctl::Op::kCmCreateId, &r, sizeof(r), &nid, sizeof(nid))) die("CM id");
    ctl::CmBindReq b{nid.handle, 0, {}};
    b.addr.port = kCmPort;
    ctl::CmBindResp br{};
    again = raw.call(ctl::Op::kCmBind, &b, sizeof(b), &br, sizeof(br));
    ::close(raw.sock);
  }
  std::printf("cm_port_after_import_closed=%s\n", errname(again));
  if (again) rc = 1;
  ::close(cmd_fd);
  return rc;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "exporter" && argc == 3) return exporter(argv[2]);
  if (cmd == "importer" && argc == 8)
    return importer(argv[2], argv[3], std::atoi(argv[4]),
                    uint32_t(std::strtoul(argv[5], nullptr, 0)), std::strtoull(argv[6], nullptr, 0),
                    argv[7]);
  std::fprintf(stderr,
               "usage: import_attack exporter SOCK | importer SOCK DAEMON PID PD ADDR RESTORE\n");
  return 2;
}
