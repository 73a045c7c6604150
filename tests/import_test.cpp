// Imported objects (issue 32 item 7): a process hands its context's cmd_fd to another over a
// Unix socket (SCM_RIGHTS); the other imports the device, the PD, an MR and device memory,
// and works on them as the exporter's own: a QP it creates in the imported PD writes into and
// reads from the exporter's MR, and uses the imported MR's lkey as a local key (the bytes are
// the exporter's memory). The session lasts while either holds the fd, as the kernel's uverbs
// file does. Errors: a descriptor that is no vrnic cmd_fd, or a connection to vrnicd that is
// no session (EINVAL); handles that are no object of the session (ENOENT).
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "verbs_fixture.h"

using namespace vt;

namespace {

constexpr size_t kHalf = 5000;  // five packets at the 1024-byte MTU
constexpr size_t kDmBytes = 4096;
constexpr size_t kDmChildOffset = 256;  // where the child writes into the device memory
const uint64_t kParentSeed = seed_for("import: the exporter's MR");
const uint64_t kChildSeed = seed_for("import: the importer's writes");
const uint64_t kDmSeed = seed_for("import: device memory");

// What the exporter tells the importer besides the fd.
struct Exported {
  uint32_t pd, mr, dm;
  uint32_t lkey, rkey;
  uint64_t length;
  uint64_t addr;  // of the MR's first byte in the exporter
  PeerInfo qp;
};

// A message of `len` bytes at `data` with room for one descriptor (SCM_RIGHTS).
struct FdMessage {
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage(void *data, size_t len) : iov{data, len} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
};

bool send_fd(int sock, int fd, const void *data, size_t len) {
  FdMessage m(const_cast<void *>(data), len);
  cmsghdr *c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return ::sendmsg(sock, &m.msg, 0) == ssize_t(len);
}

int recv_fd(int sock, void *data, size_t len) {
  FdMessage m(data, len);
  if (::recvmsg(sock, &m.msg, MSG_WAITALL) != ssize_t(len)) return -1;
  cmsghdr *c = CMSG_FIRSTHDR(&m.msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

// One RC work request of the importer's, signaled and polled; "" or what went wrong.
std::string run_wr(Endpoint &e, ibv_wr_opcode op, ibv_sge sge, uint64_t raddr, uint32_t rkey,
                   const char *what) {
  ibv_send_wr wr = make_send_wr(1, op, &sge, 1);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr *bad = nullptr;
  if (int err = ibv_post_send(e.qp(), &wr, &bad)) return std::string(what) + ": post " + std::strerror(err);
  ibv_wc wc{};
  if (poll_until(e.scq(), &wc, Clock::now() + kCompletionTimeout) != 1)
    return std::string(what) + ": no completion";
  if (wc.status != IBV_WC_SUCCESS) return std::string(what) + ": " + describe(wc);
  return {};
}

// The importing process (forked; no Catch2): everything it checks, "" when all held.
std::string importer(int sock) {
  Exported ex{};
  const int fd = recv_fd(sock, &ex, sizeof(ex));
  if (fd < 0) return "no cmd_fd received";
  Device d;
  d.ctx.reset(ibv_import_device(fd));
  if (!d.ctx) return std::string("ibv_import_device: ") + std::strerror(errno);
  if (std::string err = try_describe_device(d); !err.empty()) return err;
  ibv_pd *pd = ibv_import_pd(d.ctx.get(), ex.pd);
  if (!pd) return std::string("ibv_import_pd: ") + std::strerror(errno);
  ibv_mr *mr = ibv_import_mr(pd, ex.mr);
  if (!mr) return std::string("ibv_import_mr: ") + std::strerror(errno);
  // As the kernel's query gives it: the keys and the length, no address.
  if (mr->lkey != ex.lkey || mr->rkey != ex.rkey || mr->length != ex.length || mr->addr ||
      mr->handle != ex.mr || mr->pd != pd)
    return "the imported MR differs from the exporter's";
  ibv_dm *dm = ibv_import_dm(d.ctx.get(), ex.dm);
  if (!dm) return std::string("ibv_import_dm: ") + std::strerror(errno);
  std::vector<uint8_t> dm_bytes(kDmChildOffset);
  if (ibv_memcpy_from_dm(dm_bytes.data(), dm, 0, kDmChildOffset) ||
      dm_bytes != make_pattern(kDmChildOffset, kDmSeed))
    return "the imported device memory does not hold the exporter's bytes";
  const std::vector<uint8_t> child_bytes = make_pattern(kDmChildOffset, kChildSeed);
  if (ibv_memcpy_to_dm(dm, kDmChildOffset, child_bytes.data(), kDmChildOffset))
    return "ibv_memcpy_to_dm on the imported device memory";

  // A QP of ours in the imported PD, connected to the exporter's (in that PD too); our own
  // buffer, registered in it at an odd offset (its partial pages reached through our own
  // /proc/self/mem, not the exporter's).
  QpConfig cfg;
  Endpoint e;
  if (std::string err = try_create_endpoint(d, cfg, e, pd); !err.empty()) return err;
  AlignedBuf buf(3 * kHalf + 2 * kPage);
  uint8_t *mine = buf.data() + 1;
  MrPtr own(ibv_reg_mr(pd, mine, 3 * kHalf, kAllAccess));
  if (!own) return std::string("ibv_reg_mr in the imported PD: ") + std::strerror(errno);
  const PeerInfo me = local_info(d, e);
  if (!write_full(sock, &me, sizeof(me))) return "cannot send our QP";
  if (std::string err = try_connect(d, e, cfg, ex.qp); !err.empty()) return err;
  char go = 0;
  if (!read_full(sock, &go, 1, Ms{10000})) return "the exporter did not connect";

  const std::vector<uint8_t> parent = make_pattern(2 * kHalf, kParentSeed);
  fill_pattern(mine, kHalf, kChildSeed);
  // Our bytes into the first half of the exporter's MR; its second half read back into ours.
  if (std::string err = run_wr(e, IBV_WR_RDMA_WRITE, make_sge(mine, kHalf, own->lkey), ex.addr,
                               ex.rkey, "WRITE to the exporter's MR");
      !err.empty())
    return err;
  if (std::string err = run_wr(e, IBV_WR_RDMA_READ, make_sge(mine + kHalf, kHalf, own->lkey),
                               ex.addr + kHalf, ex.rkey, "READ of the exporter's MR");
      !err.empty())
    return err;
  if (std::string diff = diff_bytes(mine + kHalf, parent.data() + kHalf, kHalf); !diff.empty())
    return "READ: " + diff;
  // The imported lkey as a local key: the source is the exporter's memory, at its addresses.
  const auto exporter_second_half = reinterpret_cast<void *>(uintptr_t(ex.addr + kHalf));
  if (std::string err = run_wr(e, IBV_WR_RDMA_WRITE, make_sge(exporter_second_half, kHalf, mr->lkey),
                               reinterpret_cast<uintptr_t>(mine + 2 * kHalf), own->rkey,
                               "WRITE from the imported MR");
      !err.empty())
    return err;
  if (std::string diff = diff_bytes(mine + 2 * kHalf, parent.data() + kHalf, kHalf); !diff.empty())
    return "WRITE from the imported MR: " + diff;

  // Unimported, the objects stay the exporter's (it deregisters and frees them).
  ibv_unimport_mr(mr);
  ibv_unimport_dm(dm);
  own.reset();
  e.qp_.reset();
  ibv_unimport_pd(pd);
  return {};
}

std::string socket_path_of(ibv_context *ctx) {
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  REQUIRE(::getpeername(ctx->cmd_fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0);
  return addr.sun_path;
}

long long stat_of(const char *key) {
  std::string err;
  auto stats = read_vrnic_stats(&err);
  INFO(err);
  REQUIRE(stats.has_value());
  REQUIRE(stats->count(key) == 1);
  return stats->at(key);
}

}  // namespace

TEST_CASE("another process imports the device, PD, MR and device memory, and uses them",
          "[import]") {
  auto dev = open_device();
  ibv_context *ctx = dev->ctx.get();
  PdPtr pd(ibv_alloc_pd(ctx));
  REQUIRE(pd);
  Region region(pd.get(), 2 * kHalf, kParentSeed);
  fill_pattern(region.payload(), 2 * kHalf, kParentSeed);
  ibv_alloc_dm_attr dm_attr{kDmBytes, 0, 0};
  ibv_dm *dm = ibv_alloc_dm(ctx, &dm_attr);
  REQUIRE(dm);
  const std::vector<uint8_t> dm_bytes = make_pattern(kDmChildOffset, kDmSeed);
  REQUIRE(ibv_memcpy_to_dm(dm, 0, dm_bytes.data(), kDmChildOffset) == 0);
  QpConfig cfg;
  Endpoint e;
  {
    const std::string err = try_create_endpoint(*dev, cfg, e, pd.get());
    INFO(err);
    REQUIRE(err.empty());
  }

  int socks[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, socks) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    child_prepare(60);
    ::close(socks[0]);
    const std::string err = importer(socks[1]);
    const uint32_t n = uint32_t(err.size());
    write_full(socks[1], &n, sizeof(n));
    write_full(socks[1], err.data(), n);
    _exit(err.empty() ? 0 : 1);
  }
  ::close(socks[1]);
  Exported ex{pd->handle, region.mr->handle, dm->handle, region.lkey(), region.rkey(),
              region.mr->length, region.addr(), local_info(*dev, e)};
  const int cmd_fd = ::dup(ctx->cmd_fd);
  REQUIRE(cmd_fd >= 0);
  REQUIRE(send_fd(socks[0], cmd_fd, &ex, sizeof(ex)));
  ::close(cmd_fd);  // the child has its own copy now
  PeerInfo child{};
  const bool got_qp = read_full(socks[0], &child, sizeof(child), Ms{10000});
  if (got_qp) {
    const std::string err = try_connect(*dev, e, cfg, child);
    INFO(err);
    CHECK(err.empty());
    REQUIRE(write_full(socks[0], "g", 1));
  }
  uint32_t n = 0;
  std::string child_error = "no report from the importer";
  if (read_full(socks[0], &n, sizeof(n), Ms{30000}) && n < 4096) {
    child_error.assign(n, 0);
    if (n && !read_full(socks[0], child_error.data(), n, Ms{1000})) child_error = "short report";
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  ::close(socks[0]);
  INFO("the importer: " << child_error);
  CHECK(child_error.empty());
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  // The importer's WRITE landed in our MR, its device memory write in our DM.
  const std::vector<uint8_t> child_bytes = make_pattern(kHalf, kChildSeed);
  VT_REQUIRE_BYTES("the importer's WRITE", region.payload(), child_bytes.data(), kHalf);
  std::vector<uint8_t> dm_back(kDmChildOffset);
  REQUIRE(ibv_memcpy_from_dm(dm_back.data(), dm, kDmChildOffset, kDmChildOffset) == 0);
  VT_REQUIRE_BYTES("the importer's device memory write", dm_back.data(),
                   make_pattern(kDmChildOffset, kChildSeed).data(), kDmChildOffset);
  e.qp_.reset();
  CHECK(ibv_free_dm(dm) == 0);
}

TEST_CASE("an imported context keeps the session after its exporter closes", "[import]") {
  const bool have_ctl = std::getenv("VRNICCTL") != nullptr;
  const long long pds_before = have_ctl ? stat_of("pds") : 0;
  auto dev = open_device();
  ibv_pd *pd = ibv_alloc_pd(dev->ctx.get());  // never freed: it goes with the session
  REQUIRE(pd);
  const uint32_t pd_handle = pd->handle;
  ibv_context *imported = ibv_import_device(::dup(dev->ctx->cmd_fd));
  REQUIRE(imported);
  CHECK(imported->device == dev->ctx->device);
  dev->ctx.reset();  // the exporter's ibv_close_device
  // The importer's copy of the fd holds the session: its PD is there, new objects are made.
  ibv_pd *again = ibv_import_pd(imported, pd_handle);
  REQUIRE(again);
  PdPtr own(ibv_alloc_pd(imported));
  CHECK(own);
  CqPtr cq(ibv_create_cq(imported, 16, nullptr, nullptr, 0));
  CHECK(cq);
  if (have_ctl) CHECK(stat_of("pds") == pds_before + 2);
  cq.reset();
  own.reset();
  ibv_unimport_pd(again);
  CHECK(ibv_close_device(imported) == 0);
  // Then the session ends, with the PD nobody freed.
  if (have_ctl) {
    const auto deadline = Clock::now() + Ms{5000};
    while (stat_of("pds") != pds_before && Clock::now() < deadline)
      std::this_thread::sleep_for(Ms{10});
    CHECK(stat_of("pds") == pds_before);
  }
}

TEST_CASE("an importer that closes first leaves its exporter working", "[import]") {
  auto dev = open_device();
  ibv_context *imported = ibv_import_device(::dup(dev->ctx->cmd_fd));
  REQUIRE(imported);
  PdPtr pd(ibv_alloc_pd(imported));
  REQUIRE(pd);
  const uint32_t handle = pd->handle;
  pd.reset();
  CHECK(ibv_close_device(imported) == 0);
  PdPtr mine(ibv_alloc_pd(dev->ctx.get()));
  CHECK(mine);
  // What the importer freed is gone for the exporter too.
  errno = 0;
  CHECK(ibv_import_pd(dev->ctx.get(), handle) == nullptr);
  CHECK(errno == ENOENT);
}

TEST_CASE("import errors: no cmd_fd, no session, no such object", "[import]") {
  auto dev = open_device();
  errno = 0;
  CHECK(ibv_import_device(-1) == nullptr);
  CHECK(errno == EINVAL);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  errno = 0;
  CHECK(ibv_import_device(p[0]) == nullptr);
  CHECK(errno == EINVAL);
  ::close(p[0]);
  ::close(p[1]);
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  errno = 0;
  CHECK(ibv_import_device(pair[0]) == nullptr);  // a socket, but not to vrnicd
  CHECK(errno == EINVAL);
  ::close(pair[0]);
  ::close(pair[1]);
  // A connection to vrnicd that never opened the device: no session to speak for.
  const std::string path = socket_path_of(dev->ctx.get());
  const int raw = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  REQUIRE(::connect(raw, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0);
  errno = 0;
  CHECK(ibv_import_device(raw) == nullptr);
  CHECK(errno == EINVAL);
  ::close(raw);  // on failure the fd stays the caller's

  // Handles that are no object of this session: unknown ones, and another session's.
  ibv_context *imported = ibv_import_device(::dup(dev->ctx->cmd_fd));
  REQUIRE(imported);
  Device other;
  {
    const std::string err = try_open_device(other);
    INFO(err);
    REQUIRE(err.empty());
  }
  PdPtr foreign(ibv_alloc_pd(other.ctx.get()));
  REQUIRE(foreign);
  Region foreign_mr(foreign.get(), 64, seed_for("import: another session's MR"));
  for (uint32_t handle : {0u, 0x7fffffu, foreign->handle}) {
    errno = 0;
    CHECK(ibv_import_pd(imported, handle) == nullptr);
    CHECK(errno == ENOENT);
  }
  PdPtr pd(ibv_alloc_pd(dev->ctx.get()));
  REQUIRE(pd);
  ibv_pd *imported_pd = ibv_import_pd(imported, pd->handle);
  REQUIRE(imported_pd);
  for (uint32_t handle : {0u, 0x7fffffu, foreign_mr.mr->handle}) {
    errno = 0;
    CHECK(ibv_import_mr(imported_pd, handle) == nullptr);
    CHECK(errno == ENOENT);
    errno = 0;
    CHECK(ibv_import_dm(imported, handle) == nullptr);
    CHECK(errno == ENOENT);
  }
  ibv_unimport_pd(imported_pd);
  CHECK(ibv_close_device(imported) == 0);
}
