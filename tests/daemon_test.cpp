// vrnicd's life and the control protocol's failure paths: no daemon, a daemon that dies
// under a client, hostile or broken control messages. Each test starts its own vrnicd
// (path in $VRNICD) on a private socket.
#include <catch2/catch.hpp>
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tools/raw_session.h"
#include "vrnic/ctl_io.h"
#include "vrnic/ctl_protocol.h"

namespace {

using namespace std::chrono_literals;

class Daemon {
 public:
  explicit Daemon(std::vector<std::string> args = {}) {
    const char *bin = std::getenv("VRNICD");
    REQUIRE(bin);
    char tmpl[] = "/tmp/vrnic-daemon-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    dir_ = tmpl;
    path_ = dir_ + "/vrnicd.sock";
    setenv("VRNIC_SOCKET", path_.c_str(), 1);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::vector<const char *> argv{bin, "--socket", path_.c_str()};
      for (const std::string &a : args) argv.push_back(a.c_str());
      argv.push_back(nullptr);
      execv(bin, const_cast<char *const *>(argv.data()));
      _exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      int s = vrnic::ctl::connect_daemon(path_.c_str());
      if (s >= 0) {
        close(s);
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    FAIL("vrnicd did not come up");
  }
  ~Daemon() {
    if (pid_ > 0) stop(SIGTERM);
    rmdir(dir_.c_str());
  }
  // Returns the exit status (or 128 + signal).
  int stop(int sig) {
    kill(pid_, sig);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  const std::string &path() const { return path_; }

 private:
  std::string dir_, path_;
  pid_t pid_ = -1;
};

ibv_context *open_vrnic() {
  int n = -1;
  ibv_device **list = ibv_get_device_list(&n);
  REQUIRE(list);
  REQUIRE(n == 1);
  ibv_context *ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  REQUIRE(ctx);
  return ctx;
}

// A raw control connection, for messages no provider would send.
struct RawClient {
  int sock;
  explicit RawClient(const std::string &path) : sock(vrnic::ctl::connect_daemon(path.c_str())) {
    REQUIRE(sock >= 0);
  }
  ~RawClient() { close(sock); }
  int call(vrnic::ctl::Op op, const void *body, size_t len, vrnic::ctl::Message *out) {
    int err = vrnic::ctl::send_message(sock, op, 0, body, len);
    if (err) return -err;
    err = vrnic::ctl::recv_message(sock, out);
    out->close_fds();
    return err ? -err : out->header.status;
  }
};

}  // namespace

TEST_CASE("with no daemon the device list is empty, not an error", "[daemon]") {
  setenv("VRNIC_SOCKET", "/tmp/vrnic-no-such-daemon.sock", 1);
  int n = -1;
  ibv_device **list = ibv_get_device_list(&n);
  REQUIRE(list);
  CHECK(n == 0);
  CHECK(list[0] == nullptr);
  ibv_free_device_list(list);
}

TEST_CASE("SIGTERM and SIGINT stop vrnicd cleanly and remove its socket", "[daemon]") {
  for (int sig : {SIGTERM, SIGINT}) {
    Daemon d;
    struct stat st;
    REQUIRE(stat(d.path().c_str(), &st) == 0);
    CHECK(d.stop(sig) == 0);
    CHECK(stat(d.path().c_str(), &st) == -1);
  }
}

TEST_CASE("a second vrnicd on the same socket is refused", "[daemon]") {
  Daemon d;
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const char *bin = std::getenv("VRNICD");
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    execl(bin, bin, "--socket", d.path().c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 1);
  int s = vrnic::ctl::connect_daemon(d.path().c_str());  // the first one still serves
  CHECK(s >= 0);
  close(s);
}

TEST_CASE("a dead daemon becomes IBV_EVENT_DEVICE_FATAL and failing calls", "[daemon]") {
  Daemon d;
  ibv_context *ctx = open_vrnic();
  ibv_pd *pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);
  ibv_cq *cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  REQUIRE(cq);
  CHECK(d.stop(SIGKILL) == 128 + SIGKILL);
  ibv_async_event ev;
  REQUIRE(ibv_get_async_event(ctx, &ev) == 0);
  CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL);
  ibv_ack_async_event(&ev);
  errno = 0;
  CHECK(ibv_alloc_pd(ctx) == nullptr);
  CHECK(errno == EIO);
  static char buf[4096];
  CHECK(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EIO);
  ibv_wc wc;
  CHECK(ibv_poll_cq(cq, 1, &wc) == 0);
  CHECK(ibv_close_device(ctx) == 0);
}

TEST_CASE("broken control messages close that connection only", "[daemon]") {
  Daemon d;
  ibv_context *ctx = open_vrnic();  // a well-behaved client alongside
  {
    RawClient raw(d.path());
    const char junk[] = "this is not a vrnic message";
    REQUIRE(::send(raw.sock, junk, sizeof(junk), 0) == ssize_t(sizeof(junk)));
    char b;
    CHECK(::recv(raw.sock, &b, 1, 0) == 0);  // vrnicd hung up on it
  }
  {
    RawClient raw(d.path());
    vrnic::ctl::Message m;
    CHECK(raw.call(vrnic::ctl::Op::kAllocPd, nullptr, 0, &m) == EPROTO);  // before Hello
  }
  {
    RawClient raw(d.path());
    vrnic::ctl::Message m;
    CHECK(raw.call(vrnic::ctl::Op(999), nullptr, 0, &m) == EPROTO);
  }
  ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
}

// What vrnicctl faults sends; vrnicd checks the spec itself (vrnicctl is not the only client).
TEST_CASE("fault specs: a bad one is EINVAL, without a wire port ENODEV, a good one is taken",
          "[daemon]") {
  auto set_faults = [](RawClient &raw, const char *spec) {
    vrnic::ctl::SetFaultsReq req{};
    std::strncpy(req.spec, spec, sizeof(req.spec) - 1);
    vrnic::ctl::Message m;
    return raw.call(vrnic::ctl::Op::kSetFaults, &req, sizeof(req), &m);
  };
  {
    Daemon d;  // loop port only
    RawClient raw(d.path());
    CHECK(set_faults(raw, "hold_op=300") == EINVAL);
    CHECK(set_faults(raw, "bogus=1") == EINVAL);
    CHECK(set_faults(raw, "loss=1") == ENODEV);
  }
  const std::string port = std::to_string(20000 + getpid() % 12000);
  Daemon d({"--udp", "127.0.0.33", "--udp-port", port});
  RawClient raw(d.path());
  CHECK(set_faults(raw, "loss=1,hold_op=16") == 0);
  CHECK(set_faults(raw, "loss=101") == EINVAL);
  CHECK(set_faults(raw, "hold_op=1.5") == EINVAL);
  CHECK(set_faults(raw, "") == 0);
}

TEST_CASE("verbs with bad handles or arguments fail with EINVAL", "[daemon]") {
  Daemon d;
  ibv_context *ctx = open_vrnic();
  ibv_pd *pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);
  CHECK(ibv_create_cq(ctx, 0, nullptr, nullptr, 0) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_create_cq(ctx, 1 << 30, nullptr, nullptr, 0) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_create_cq(ctx, 4, nullptr, nullptr, 1) == nullptr);  // no such vector
  CHECK(errno == EINVAL);
  static char buf[8192];
  CHECK(ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_reg_mr(pd, reinterpret_cast<void *>(0x10), 4096, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(errno == EFAULT);
  ibv_cq *cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  REQUIRE(cq);
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap = {16, 16, 17, 1, 0};  // more SGEs than the device has
  CHECK(ibv_create_qp(pd, &attr) == nullptr);
  CHECK(errno == EINVAL);
  attr.cap = {16, 16, 1, 1, 0};
  attr.send_cq = nullptr;
  CHECK(ibv_create_qp(pd, &attr) == nullptr);
  CHECK(errno == EINVAL);
  attr.send_cq = cq;
  ibv_qp *qp = ibv_create_qp(pd, &attr);
  REQUIRE(qp);
  CHECK(ibv_dealloc_pd(pd) == EBUSY);  // the QP is in it
  CHECK(ibv_destroy_cq(cq) == EBUSY);  // the QP uses it
  ibv_qp_attr qa{};
  qa.qp_state = IBV_QPS_RTS;
  CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL);  // RESET -> RTS
  qa.qp_state = IBV_QPS_INIT;
  qa.port_num = 2;
  CHECK(ibv_modify_qp(qp, &qa,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ==
        EINVAL);  // no port 2
  CHECK(ibv_destroy_qp(qp) == 0);
  CHECK(ibv_destroy_cq(cq) == 0);
  CHECK(ibv_dealloc_pd(pd) == 0);
  CHECK(ibv_close_device(ctx) == 0);
}

TEST_CASE("several devices in one vrnicd: each listed, opened and addressed on its own",
          "[daemon]") {
  const std::string port = std::to_string(20000 + getpid() % 12000);
  Daemon d({"--udp", "127.0.0.31", "--udp-port", port, "--device", "--udp", "127.0.0.32",
            "--udp-port", port});
  int n = -1;
  ibv_device **list = ibv_get_device_list(&n);
  REQUIRE(list);
  REQUIRE(n == 2);
  CHECK(list[2] == nullptr);
  const char *kGids[] = {"::ffff:127.0.0.31", "::ffff:127.0.0.32"};
  std::set<uint64_t> guids;
  for (int i = 0; i < 2; i++) {
    INFO("device " << i);
    CHECK(std::string(ibv_get_device_name(list[i])) == "vrnic" + std::to_string(i));
    CHECK(ibv_get_device_index(list[i]) == i);
    const uint64_t guid = be64toh(ibv_get_device_guid(list[i]));
    CHECK(guid >> 56 == 0x02);  // random, locally administered, one per device
    guids.insert(guid);
    ibv_context *ctx = ibv_open_device(list[i]);
    REQUIRE(ctx);
    ibv_device_attr attr;
    REQUIRE(ibv_query_device(ctx, &attr) == 0);
    CHECK(be64toh(attr.node_guid) == guid);
    ibv_gid gid;
    REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0);
    char text[64];
    REQUIRE(inet_ntop(AF_INET6, gid.raw, text, sizeof text));
    CHECK(std::string(text) == kGids[i]);
    // Objects belong to the device they were made on: the other device counts none.
    ibv_pd *pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
    vrnic::ctl::Message m;
    RawClient other(i == 0 ? d.path() + ".vrnic1" : d.path());
    REQUIRE(other.call(vrnic::ctl::Op::kStats, nullptr, 0, &m) == 0);
    CHECK(m.as<vrnic::ctl::StatsResp>()->pds == 0);
    RawClient same(i == 0 ? d.path() : d.path() + ".vrnic1");
    REQUIRE(same.call(vrnic::ctl::Op::kStats, nullptr, 0, &m) == 0);
    CHECK(m.as<vrnic::ctl::StatsResp>()->pds == 1);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
  }
  CHECK(guids.size() == 2);
  CHECK(ibv_get_device_index(nullptr) == -1);
  // The daemon gone, a listed device fails to open with ENODEV, not a crash or a hang.
  CHECK(d.stop(SIGTERM) == 0);
  struct stat st;
  CHECK(stat((d.path() + ".vrnic1").c_str(), &st) == -1);
  errno = 0;
  CHECK(ibv_open_device(list[1]) == nullptr);
  CHECK(errno == ENODEV);
  ibv_free_device_list(list);
}

// Hello's second fd is the client's /proc/<pid>/mem, through which vrnicd reaches memory that
// is not in a memfd: any procfs "mem" file is taken, wherever that procfs is mounted (a client
// in a chroot or mount namespace of its own shows vrnicd another path), nothing else is.
TEST_CASE("Hello takes a procfs mem file and nothing else as the client's memory", "[daemon]") {
  Daemon d;
  auto hello_with = [&](const char *path) {
    RawClient raw(d.path());
    int event_fds[2];
    REQUIRE(vrnic::ctl::make_event_channel(event_fds) == 0);
    const int mem = ::open(path, O_RDONLY | O_CLOEXEC);
    INFO(path);
    REQUIRE(mem >= 0);
    const int fds[2] = {event_fds[1], mem};
    vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
    REQUIRE(vrnic::ctl::send_message(raw.sock, vrnic::ctl::Op::kHello, 0, &hello, sizeof(hello),
                                     fds, 2) == 0);
    vrnic::ctl::Message m;
    REQUIRE(vrnic::ctl::recv_message(raw.sock, &m) == 0);
    m.close_fds();
    for (int fd : {event_fds[0], event_fds[1], mem}) ::close(fd);
    return m.header.status;
  };
  CHECK(hello_with("/proc/self/mem") == 0);
  const std::string task_mem = "/proc/self/task/" + std::to_string(::gettid()) + "/mem";
  CHECK(hello_with(task_mem.c_str()) == 0);
  CHECK(hello_with("/proc/self/environ") == EINVAL);  // procfs, not a mem file
  char dir[] = "/tmp/vrnic-mem.XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string fake = std::string(dir) + "/mem";  // named so, not procfs
  const int f = ::open(fake.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  REQUIRE(f >= 0);
  ::close(f);
  CHECK(hello_with(fake.c_str()) == EINVAL);
  ::unlink(fake.c_str());
  ::rmdir(dir);
}

// Registered memory shared through a memfd must be sealed against shrinking (issue 17, row
// 4): a client that shrank one under vrnicd would have vrnicd die of SIGBUS at its next access
// to the pages cut off. A client speaking the protocol itself, without the provider's seals,
// is refused; so is a file that is not a memfd (no seals at all). Sealed, it is taken.
TEST_CASE("reg_mr takes only memfds sealed against shrinking", "[daemon]") {
  Daemon d;
  RawClient raw(d.path());
  int event_fds[2];
  REQUIRE(vrnic::ctl::make_event_channel(event_fds) == 0);
  vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
  REQUIRE(vrnic::ctl::send_message(raw.sock, vrnic::ctl::Op::kHello, 0, &hello, sizeof(hello),
                                   &event_fds[1], 1) == 0);
  vrnic::ctl::Message m;
  REQUIRE(vrnic::ctl::recv_message(raw.sock, &m) == 0);
  m.close_fds();
  REQUIRE(m.header.status == 0);
  REQUIRE(raw.call(vrnic::ctl::Op::kAllocPd, nullptr, 0, &m) == 0);
  const uint32_t pd = m.as<vrnic::ctl::HandleResp>()->handle;
  constexpr size_t kLen = 4 * 4096;
  auto reg = [&](int fd) {
    void *map = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    vrnic::ctl::RegMrReq req{};
    req.pd = pd;
    req.access = IBV_ACCESS_LOCAL_WRITE;
    req.addr = req.iova = reinterpret_cast<uint64_t>(map);
    req.length = kLen;
    req.npieces = 1;
    req.pieces[0] = {req.addr, kLen, 0, uint32_t(vrnic::ctl::PieceKind::kMemfd), 0, -1, 0};
    size_t len = offsetof(vrnic::ctl::RegMrReq, pieces) + sizeof(vrnic::ctl::MrPiece);
    REQUIRE(vrnic::ctl::send_message(raw.sock, vrnic::ctl::Op::kRegMr, 0, &req, len, &fd, 1) == 0);
    vrnic::ctl::Message resp;
    REQUIRE(vrnic::ctl::recv_message(raw.sock, &resp) == 0);
    resp.close_fds();
    ::munmap(map, kLen);
    return resp.header.status;
  };
  int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC);
  REQUIRE(::ftruncate(unsealed, kLen) == 0);
  CHECK(reg(unsealed) == EINVAL);
  char file_path[] = "/tmp/vrnic-reg-file.XXXXXX";
  int file = ::mkstemp(file_path);
  REQUIRE(file >= 0);
  ::unlink(file_path);
  REQUIRE(::ftruncate(file, kLen) == 0);
  CHECK(reg(file) == EINVAL);
  int sealed = ::memfd_create("sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(::ftruncate(sealed, kLen) == 0);
  REQUIRE(::fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  CHECK(reg(sealed) == 0);
  CHECK(::ftruncate(sealed, 0) < 0);  // and it stays so
  for (int fd : {unsealed, file, sealed, event_fds[0], event_fds[1]}) ::close(fd);
}

// Event channels are socketpairs vrnicd writes without waiting (issue 28, rows 2 and 3): a
// pipe, whose O_NONBLOCK the client shares and may clear, is refused wherever an event
// channel is handed over; a CM channel its client filled and made blocking costs vrnicd
// nothing (others are answered at once), and its event arrives once the client reads.
TEST_CASE("event channels: pipes refused; a full, blocking CM channel never stalls vrnicd",
          "[daemon]") {
  using vrnic::ctl::Op;
  Daemon d;
  auto call = [](int sock, Op op, const void *req, size_t len, int fd, vrnic::ctl::Message *m) {
    REQUIRE(vrnic::ctl::send_message(sock, op, 0, req, len, &fd, fd >= 0 ? 1 : 0) == 0);
    REQUIRE(vrnic::ctl::recv_message(sock, m) == 0);
    m->close_fds();
    return m->header.status;
  };
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  vrnic::ctl::Message m;
  vrnic::ctl::CreateChannelReq chreq{};
  {
    RawClient raw(d.path());
    vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
    CHECK(call(raw.sock, Op::kHello, &hello, sizeof(hello), pipe_fds[1], &m) == EINVAL);
  }
  {
    RawClient raw(d.path());
    int ev[2];
    REQUIRE(vrnic::ctl::make_event_channel(ev) == 0);
    vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
    REQUIRE(call(raw.sock, Op::kHello, &hello, sizeof(hello), ev[1], &m) == 0);
    CHECK(call(raw.sock, Op::kCreateChannel, &chreq, sizeof(chreq), pipe_fds[1], &m) == EINVAL);
    CHECK(call(raw.sock, Op::kCmCreateChannel, &chreq, sizeof(chreq), pipe_fds[1], &m) == EINVAL);
    int unconnected = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(call(raw.sock, Op::kCreateChannel, &chreq, sizeof(chreq), unconnected, &m) == EINVAL);
    ::close(unconnected);
    CHECK(call(raw.sock, Op::kCreateChannel, &chreq, sizeof(chreq), ev[1], &m) == 0);
    ::close(ev[0]);
    ::close(ev[1]);
  }
  // The attack on the CM channel: filled through the end vrnicd writes, left blocking.
  RawClient attacker(d.path());
  int ch_fds[2];
  REQUIRE(vrnic::ctl::make_event_channel(ch_fds) == 0);
  REQUIRE(call(attacker.sock, Op::kCmCreateChannel, &chreq, sizeof(chreq), ch_fds[1], &m) == 0);
  const uint32_t channel = m.as<vrnic::ctl::HandleResp>()->handle;
  vrnic::ctl::CmEventRecord filler{};
  filler.event = 0xffff;
  size_t held = 0;
  while (vrnic::ctl::send_event(ch_fds[1], &filler, sizeof(filler))) held++;
  ::fcntl(ch_fds[1], F_SETFL, ::fcntl(ch_fds[1], F_GETFL) & ~O_NONBLOCK);
  // An event vrnicd must post at once: a connect to a port nobody listens on is rejected.
  vrnic::ctl::CmCreateIdReq idreq{channel, 0x0106 /* RDMA_PS_TCP */, IBV_QPT_RC, 0, 77};
  REQUIRE(call(attacker.sock, Op::kCmCreateId, &idreq, sizeof(idreq), -1, &m) == 0);
  const vrnic::ctl::CmConnectReq conn = connect_to_nobody(m.as<vrnic::ctl::HandleResp>()->handle);
  vrnic::ctl::CmBindReq bind{conn.id, 0, {}};  // the wildcard address, a port vrnicd picks
  REQUIRE(call(attacker.sock, Op::kCmBind, &bind, sizeof(bind), -1, &m) == 0);
  CHECK(call(attacker.sock, Op::kCmConnect, &conn, sizeof(conn), -1, &m) == 0);
  // Meanwhile vrnicd answers everyone.
  RawClient other(d.path());
  for (int i = 0; i < 20; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(other.call(Op::kStats, nullptr, 0, &m) == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    std::this_thread::sleep_for(20ms);
  }
  // The attacker reads its channel: the fillers, then the event vrnicd kept for it.
  vrnic::ctl::CmEventRecord rec{};
  for (size_t i = 0; i < held; i++) REQUIRE(::read(ch_fds[0], &rec, sizeof(rec)) == sizeof(rec));
  pollfd p{ch_fds[0], POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  REQUIRE(::read(ch_fds[0], &rec, sizeof(rec)) == sizeof(rec));
  CHECK(rec.cookie == 77);
  CHECK((rec.event == vrnic::ctl::kCmRejected || rec.event == vrnic::ctl::kCmUnreachable));
  for (int fd : {pipe_fds[0], pipe_fds[1], ch_fds[0], ch_fds[1]}) ::close(fd);
}

// ibv_import_device at the protocol: a connection speaks for a session only with that
// session's socket in hand, once, and never says Hello after (nor before).
TEST_CASE("ImportDevice: only with a session's socket, once, and never with Hello", "[daemon]") {
  using vrnic::ctl::Op;
  Daemon d;
  vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
  auto call = [](int sock, Op op, const void *req, size_t len, std::vector<int> fds) {
    REQUIRE(vrnic::ctl::send_message(sock, op, 0, req, len, fds.data(), fds.size()) == 0);
    vrnic::ctl::Message m;
    REQUIRE(vrnic::ctl::recv_message(sock, &m) == 0);
    m.close_fds();
    return m.header.status;
  };
  int ev[2];
  REQUIRE(vrnic::ctl::make_event_channel(ev) == 0);
  RawClient exporter(d.path());
  REQUIRE(call(exporter.sock, Op::kHello, &hello, sizeof(hello), {ev[1]}) == 0);
  // A failed import closes its connection, as a failed Hello does: a new one for each.
  RawClient other(d.path());  // connected, never said Hello: no session
  auto refused = [&](const vrnic::ctl::HelloReq &req, std::vector<int> fds, int self_at = -1) {
    RawClient importer(d.path());
    if (self_at >= 0) fds[size_t(self_at)] = importer.sock;
    return call(importer.sock, Op::kImportDevice, &req, sizeof(req), fds);
  };
  CHECK(refused(hello, {ev[1]}) == EINVAL);
  CHECK(refused(hello, {ev[1], ev[0]}) == EINVAL);  // a socket, of no session
  CHECK(refused(hello, {ev[1], other.sock}) == EINVAL);
  CHECK(refused(hello, {ev[1], -1}, 1) == EINVAL);  // its own socket
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  CHECK(refused(hello, {pipe_fds[1], exporter.sock}) == EINVAL);  // no event channel
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  vrnic::ctl::HelloReq old{vrnic::ctl::kProtocolVersion - 1, 0};
  CHECK(refused(old, {ev[1], exporter.sock}) == EPROTONOSUPPORT);

  RawClient importer(d.path());
  REQUIRE(call(importer.sock, Op::kImportDevice, &hello, sizeof(hello), {ev[1], exporter.sock}) == 0);
  // The importer's PD is the exporter's to look up, and the other way round.
  vrnic::ctl::Message m;
  REQUIRE(vrnic::ctl::send_message(importer.sock, Op::kAllocPd, 0, nullptr, 0, nullptr, 0) == 0);
  REQUIRE(vrnic::ctl::recv_message(importer.sock, &m) == 0);
  REQUIRE(m.header.status == 0);
  vrnic::ctl::HandleReq pd{m.as<vrnic::ctl::HandleResp>()->handle, 0};
  CHECK(call(exporter.sock, Op::kImportPd, &pd, sizeof(pd), {}) == 0);
  CHECK(call(exporter.sock, Op::kDeallocPd, &pd, sizeof(pd), {}) == 0);
  CHECK(call(importer.sock, Op::kImportPd, &pd, sizeof(pd), {}) == ENOENT);
  // Once only, and no Hello on either side of it (each refusal closes that connection).
  RawClient second(d.path());
  REQUIRE(call(second.sock, Op::kImportDevice, &hello, sizeof(hello), {ev[1], exporter.sock}) == 0);
  CHECK(call(importer.sock, Op::kImportDevice, &hello, sizeof(hello), {ev[1], exporter.sock}) ==
        EEXIST);
  CHECK(call(second.sock, Op::kHello, &hello, sizeof(hello), {ev[1]}) == EEXIST);
  CHECK(call(exporter.sock, Op::kImportDevice, &hello, sizeof(hello), {ev[1], exporter.sock}) ==
        EEXIST);
  ::close(ev[0]);
  ::close(ev[1]);
}

namespace {

// The host's addresses a loop-only vrnicd takes as GIDs, as getifaddrs gives them now:
// (GID, interface index) of every interface that is up and not loopback, IPv6 link-local aside.
std::set<std::pair<std::string, uint32_t>> host_gids() {
  std::set<std::pair<std::string, uint32_t>> out;
  ifaddrs *list = nullptr;
  REQUIRE(getifaddrs(&list) == 0);
  for (ifaddrs *a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    uint8_t gid[16] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      gid[10] = gid[11] = 0xff;
      std::memcpy(gid + 12, &reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr, 4);
    } else if (a->ifa_addr->sa_family == AF_INET6 &&
               !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6 *>(a->ifa_addr)->sin6_addr)) {
      std::memcpy(gid, reinterpret_cast<sockaddr_in6 *>(a->ifa_addr)->sin6_addr.s6_addr, 16);
    } else {
      continue;
    }
    out.emplace(std::string(reinterpret_cast<char *>(gid), 16), if_nametoindex(a->ifa_name));
  }
  freeifaddrs(list);
  return out;
}

// GIDs 1 and on of the one device of the running daemon, with their interfaces.
std::set<std::pair<std::string, uint32_t>> device_gids_after_0() {
  ibv_context *ctx = open_vrnic();
  std::set<std::pair<std::string, uint32_t>> out;
  for (uint32_t i = 1; i < 16; i++) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0) != 0) continue;
    CHECK(e.gid_type == IBV_GID_TYPE_ROCE_V2);
    out.emplace(std::string(reinterpret_cast<char *>(e.gid.raw), 16), e.ndev_ifindex);
  }
  ibv_close_device(ctx);
  return out;
}

}  // namespace

// As rxe on an interface has its addresses: a loop-only device has the host's (libfabric's
// verbs provider finds devices by them), unless --no-host-addresses; GID 0 stays 127.0.0.1.
TEST_CASE("a loop-only device's GIDs: 127.0.0.1, then the host's interface addresses",
          "[daemon]") {
  const auto host = host_gids();
  {
    Daemon d;
    const auto gids = device_gids_after_0();
    if (host.size() <= 15) {
      CHECK(gids == host);
    } else {
      CHECK(gids.size() == 15);  // as many as the table holds, each one of the host's
      for (const auto &g : gids) CHECK(host.count(g) == 1);
    }
  }
  Daemon d({"--no-host-addresses"});
  CHECK(device_gids_after_0().empty());
  ibv_context *ctx = open_vrnic();
  ibv_gid gid{};
  REQUIRE(ibv_query_gid(ctx, 1, 0, &gid) == 0);
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  CHECK(std::memcmp(gid.raw, loopback, 16) == 0);
  ibv_close_device(ctx);
}
