// import_attack: a context exported to another user (ibv_import_device), and what that user
// must not get from it (issue 52, rows 1, 2, 3 and 7). An import is a handle on a session's
// objects, not an identity: memory is the importer's own, and so are its rights and its
// direct-path directory. Prints key=value lines; exits 0 when vrnicd held, 1 when an attack
// got through, 2 on a usage or setup error.
//
//   exporter SOCK           (the victim, root) a context with a PD, an RC QP and a secret on
//                           its heap that it never registers; prints pid, pd, qpn and the
//                           secret's address, hands its cmd_fd to whoever connects to SOCK
//                           (a Unix socket it makes), and on "check" from stdin: the secret
//                           intact, and a registration and deregistration of its own done in
//                           bounded time (the attacker set every poster cell it was given odd)
//   importer SOCK DAEMON PID PD ADDR RESTORE  (the attacker) takes the cmd_fd from SOCK
//                           and, on a connection of its own to vrnicd (DAEMON) importing it:
//                           registers the exporter's memory at ADDR in its PD (refused), asks
//                           for a capture and for faults as root (EPERM), lists QPs (none of
//                           root's); imports through libibverbs as a program would and
//                           registers its own memory in the imported PD (allowed); closes that
//                           import and registers memory in a context of its own (row 2: vrnicd
//                           crashed there); last, looks for the exporter's regions in the
//                           directory its first import was given (none) and holds every
//                           poster cell odd until the file RESTORE exists
#include <fcntl.h>
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
#include "raw_session.h"
#include "vrnic/ctl_io.h"
#include "vrnic/direct_directory.h"

namespace {

namespace ctl = vrnic::ctl;
constexpr uint8_t kSecret = 0x5a;
constexpr size_t kSecretBytes = 4096;

sockaddr_un unix_address(const char *path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
  return a;
}

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
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
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
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
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
  if (!qp || !secret) die("exporter's objects");
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
