#include "server.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"
#include "dataplane/clock.h"
#include "dataplane/events.h"
#include "load_balance.h"
#include "dataplane/transport.h"
#include "qp_state_machine.h"
#include "vrnic/socket_path.h"

namespace vrnic {
namespace {

// Whether the clients a region is shared with may write it (rings, CQs) or only read it (the
// daemon region, every client's).
enum class ClientAccess { kReadWrite, kReadOnly };

// A memfd of `bytes` that vrnicd maps read-write at *map and shares with clients, sealed so
// that no client can change its size (a shrink would have vrnicd's next access die of
// SIGBUS: issue 17, row 4) nor, read-only, map it writable or write() it (row 12); the seals
// themselves are sealed. Returns the fd, or -errno.
int make_region(const char *name, size_t bytes, void **map,
                ClientAccess clients = ClientAccess::kReadWrite) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (clients == ClientAccess::kReadOnly) seals |= F_SEAL_FUTURE_WRITE;  // vrnicd's map stays
  void *p = MAP_FAILED;
  if (::ftruncate(fd, off_t(bytes)) < 0 ||
      (p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
      ::fcntl(fd, F_ADD_SEALS, seals) < 0) {
    int err = errno;
    if (p != MAP_FAILED) ::munmap(p, bytes);
    ::close(fd);
    return -err;
  }
  *map = p;
  return fd;
}

// A client's /proc/<pid>/mem, and nothing else: vrnicd's workers read and write it in place
// of process_vm_readv/writev, so it must be a file that answers at once (not a pipe, a
// socket or a FUSE file the client serves). Whose memory it is does not matter: the client
// opened it with its own rights.
bool is_proc_mem(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) < 0 || fs.f_type != PROC_SUPER_MAGIC) return false;
  char link[64], target[256];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = 0;
  const size_t len = size_t(n);
  return len > 4 && std::strcmp(target + len - 4, "/mem") == 0 &&
         std::strncmp(target, "/proc/", 6) == 0;
}

bool owns(const absl::flat_hash_set<uint32_t> &handles, uint32_t h) {
  return handles.contains(h);
}

constexpr uint32_t kValidAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                  IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                  IBV_ACCESS_RELAXED_ORDERING;

// How far a reused slot's key byte moves: 1 to 255 at random, so that the key of a new MR or
// window cannot be told from the keys seen before it (issue 17, row 2) and never equals the
// slot's previous key.
uint8_t random_key_step() {
  return uint8_t(1 + ::arc4random_uniform(255));
}

}  // namespace

CompletionChannel::~CompletionChannel() {
  if (fd >= 0) ::close(fd);
}

Session::~Session() {
  if (shm) ::munmap(shm, sizeof(shm::SessionShared));
  if (shm_fd >= 0) ::close(shm_fd);
  if (async_fd >= 0) ::close(async_fd);
  if (mem_fd >= 0) ::close(mem_fd);
  if (sock >= 0) ::close(sock);
}

Server::Server(ServerConfig cfg)
    : cfg_(std::move(cfg)), path_(cfg_.socket_path), dev_(cfg_.device_index), quotas_(cfg_.limits) {
  // What one user may register and create, as ibv_query_device tells it; the device's own
  // capacity stays the bound on everyone's objects together.
  device_max_mr_ = dev_.info.max_mr;
  device_max_qp_ = dev_.info.max_qp;
  dev_.info.max_mr_size = std::min<uint64_t>(dev_.info.max_mr_size, quotas_.limits().mr_bytes);
  dev_.info.max_mr = std::min(dev_.info.max_mr, quotas_.limits().mrs);
  dev_.info.max_qp = std::min(dev_.info.max_qp, quotas_.limits().qps);
}

Server::~Server() {
  while (!sessions_.empty()) close_session(sessions_.begin()->first);
  workers_.stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (bound_) ::unlink(path_.c_str());  // never another vrnicd's socket
  if (!node_path_.empty()) ::unlink(node_path_.c_str());
  if (daemon_shm_) ::munmap(daemon_shm_, sizeof(shm::DaemonShared));
  if (daemon_shm_fd_ >= 0) ::close(daemon_shm_fd_);
}

absl::Status Server::start() {
  if (cfg_.workers < 1 || cfg_.workers > shm::kMaxWorkers)
    return absl::InvalidArgumentError("--workers must be between 1 and 8");
  sockaddr_un addr{};
  if (path_.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError("socket path too long: " + path_);
  void *map;
  daemon_shm_fd_ =
      make_region("vrnic-daemon", sizeof(shm::DaemonShared), &map, ClientAccess::kReadOnly);
  if (daemon_shm_fd_ < 0) return absl::ErrnoToStatus(-daemon_shm_fd_, "memfd");
  daemon_shm_ = static_cast<shm::DaemonShared *>(map);

  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return absl::ErrnoToStatus(errno, "socket");
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path_.c_str());
  if (absl::Status st = prepare_socket_dir(); !st.ok()) return st;
  // A socket file nobody listens on is a leftover from a crashed vrnicd: replace it.
  int probe = ctl::connect_daemon(path_.c_str());
  if (probe >= 0 || probe == -EACCES) {
    if (probe >= 0) ::close(probe);
    return absl::AlreadyExistsError("another vrnicd is listening on " + path_);
  }
  ::unlink(path_.c_str());
  if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0)
    return absl::ErrnoToStatus(errno, "bind " + path_);
  bound_ = true;
  // Who may connect is the file's mode: the owner alone, or a group an admin names.
  const bool group = cfg_.socket_group != gid_t(-1);
  if ((group && ::chown(path_.c_str(), uid_t(-1), cfg_.socket_group) < 0) ||
      ::chmod(path_.c_str(), group ? 0660 : 0600) < 0)
    return absl::ErrnoToStatus(errno, "setting the mode of " + path_);
  make_device_node();
  if (::listen(listen_fd_, 64) < 0) return absl::ErrnoToStatus(errno, "listen");

  if (absl::Status st = workers_.start(daemon_shm_); !st.ok()) return st;
  watch_link();
  return absl::OkStatus();
}

// The default socket's directory (socket_path.h) is made private to us, and one that is not
// (another user's, a symlink, open to others) is refused rather than used.
absl::Status Server::prepare_socket_dir() {
  const std::string dir = private_socket_dir();
  if (path_.rfind(dir + "/", 0) != 0) return absl::OkStatus();  // the user chose the place
  if (::mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST)
    return absl::ErrnoToStatus(errno, "mkdir " + dir);
  struct stat st;
  if (::lstat(dir.c_str(), &st) < 0) return absl::ErrnoToStatus(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077))
    return absl::PermissionDeniedError(
        absl::StrFormat("%s is not a directory of this user's own with mode 0700 (uid %u, "
                        "mode %o): someone may be waiting there for our clients; remove it or "
                        "use --socket",
                        dir, unsigned(st.st_uid), unsigned(st.st_mode & 07777)));
  return absl::OkStatus();
}

namespace {

// The device vrnicd's nodes alias: /dev/null's numbers. Opening one gives what /dev/null
// gives; nobody reads or writes it (the library talks to vrnicd over the socket), it is there
// because UCX keeps a verbs device only if /dev/infiniband/<dev_name> opens.
constexpr unsigned kNodeMajor = 1, kNodeMinor = 3;

bool is_our_node(const struct stat &st) {
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == kNodeMajor && minor(st.st_rdev) == kNodeMinor;
}

}  // namespace

// /dev/infiniband/<device_node_name(socket)>, as the socket's owner and mode have it. One
// left by a vrnicd that was killed (same socket, so same name) is replaced. Without root,
// one line says that UCX will not see the device and what root command makes the node.
void Server::make_device_node() {
  const std::string name = device_node_name(path_);
  const std::string path = "/dev/infiniband/" + name;
  const bool group = cfg_.socket_group != gid_t(-1);
  if (::geteuid() != 0) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && is_our_node(st)) return;  // an admin made it
    std::fprintf(stderr,
                 "vrnicd: vrnic%u: not root, so no /dev/infiniband/%s: UCX will not list the "
                 "device. To make it: sudo sh -c 'mkdir -p /dev/infiniband && mknod -m 0600 "
                 "%s c %u %u && chown %u %s'\n",
                 cfg_.device_index, name.c_str(), path.c_str(), kNodeMajor, kNodeMinor,
                 unsigned(::geteuid()), path.c_str());
    return;
  }
  ::mkdir("/dev/infiniband", 0755);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!is_our_node(st)) {
      std::fprintf(stderr, "vrnicd: %s exists and is not a vrnic node: left alone\n", path.c_str());
      return;
    }
    ::unlink(path.c_str());  // a killed vrnicd's
  }
  if (::mknod(path.c_str(), S_IFCHR | 0600, makedev(kNodeMajor, kNodeMinor)) < 0 ||
      (group && ::chown(path.c_str(), uid_t(-1), cfg_.socket_group) < 0) ||
      ::chmod(path.c_str(), group ? 0660 : 0600) < 0) {
    std::fprintf(stderr, "vrnicd: making %s: %s\n", path.c_str(), std::strerror(errno));
    ::unlink(path.c_str());
    return;
  }
  node_path_ = path;
}

void Server::watch_link() {
  uint32_t state = workers_.link_up() ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  daemon_shm_->port_state.store(state, std::memory_order_relaxed);
  if (state == dev_.info.port_state) return;
  dev_.info.port_state = state;
  uint32_t event = state == IBV_PORT_ACTIVE ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
  std::fprintf(stderr, "vrnicd: vrnic%u: link %s\n", cfg_.device_index,
               state == IBV_PORT_ACTIVE ? "up" : "down");
  for (auto &[id, s] : sessions_)
    if (s->async_fd >= 0) raise_event(s->async_fd, event, 0);
}

void Server::serve(const std::atomic<bool> &stop) {
  std::vector<pollfd> pfds;
  std::vector<uint32_t> ids;
  while (!stop.load()) {
    pfds.assign(1, {listen_fd_, POLLIN, 0});
    ids.assign(1, 0);
    for (auto &[id, s] : sessions_) {
      pfds.push_back({s->sock, POLLIN, 0});
      ids.push_back(id);
    }
    int n = ::poll(pfds.data(), pfds.size(), 100);
    watch_link();
    workers_.rebalance();
    if (n <= 0) continue;
    if (pfds[0].revents & POLLIN) accept_client();
    for (size_t i = 1; i < pfds.size(); i++) {
      if (!pfds[i].revents) continue;
      auto it = sessions_.find(ids[i]);
      if (it == sessions_.end()) continue;
      if (!handle(*it->second)) close_session(ids[i]);
    }
  }
}

void Server::accept_client() {
  // Non-blocking: a client that sends requests and never reads the replies fills its
  // socket's buffer, the bounded queue it has, and is dropped, rather than blocking vrnicd
  // in sendmsg for everyone else (issue 17, row 6).
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
      (cred.uid != ::geteuid() && cred.uid != 0 && ::geteuid() != 0)) {
    ::close(fd);  // another user's process: the NIC is not theirs
    return;
  }
  auto s = std::make_unique<Session>();
  s->id = next_session_++;
  s->sock = fd;
  s->pid = cred.pid;
  s->uid = cred.uid;
  s->admin = cred.uid == 0 || cred.uid == ::geteuid();
  s->refused = quotas_.charge(cred.uid, Quota::kSessions) != 0;
  sessions_[s->id] = std::move(s);
}

bool Server::handle(Session &s) {
  auto m = std::make_unique<ctl::Message>();
  int err = ctl::recv_message(s.sock, m.get());
  if (err == EAGAIN) return true;
  if (err) return false;  // closed or malformed: the client is gone or broken
  const auto op = ctl::Op(m->header.op);
  const Command *cmd = command(op);
  Reply r;
  int status;
  bool keep = true;
  if (s.refused) {  // its user holds every connection allowed
    status = ENOMEM;
    keep = false;
  } else if ((!cmd || cmd->who == Who::kClient) && !s.shm) {
    status = EPROTO;  // verbs commands come after Hello
    keep = false;
  } else if (!cmd) {
    status = EOPNOTSUPP;
  } else if (cmd->who == Who::kAdmin && !s.admin) {
    status = EPERM;
  } else {
    status = cmd->serve(*this, s, *m, r);
    keep = status == 0 || cmd->who != Who::kNewClient;
  }
  m->close_fds();  // a method that keeps a received fd keeps a dup of it
  // A reply that does not fit in the socket's buffer: the client is not reading.
  if (ctl::send_message(s.sock, op, status, status ? nullptr : r.body_bytes.get(),
                        status ? 0 : r.body_len, r.fds.data(), status ? 0 : r.fds.size()))
    keep = false;
  if (!(cmd && cmd->lends_fds))
    for (int fd : r.fds) ::close(fd);
  return keep;
}

int Server::hello(Session &s, const ctl::Message &m, ctl::HelloResp &resp, std::vector<int> &fds) {
  auto *req = m.as<ctl::HelloReq>();
  if (!req || m.fds.empty() || m.fds.size() > 2) return EINVAL;
  if (m.fds.size() == 2 && !is_proc_mem(m.fds[1])) return EINVAL;
  if (req->version != ctl::kProtocolVersion) return EPROTONOSUPPORT;
  if (s.shm) return EEXIST;
  void *map;
  int fd = make_region("vrnic-session", sizeof(shm::SessionShared), &map);
  if (fd < 0) return -fd;
  s.shm_fd = fd;
  s.shm = static_cast<shm::SessionShared *>(map);
  for (auto &ring : s.shm->doorbells) ring.init();
  s.async_fd = ::dup(m.fds[0]);
  if (m.fds.size() == 2) s.mem_fd = ::dup(m.fds[1]);
  ::fcntl(s.async_fd, F_SETFL, O_NONBLOCK);
  for (auto &w : workers_.all()) {
    shm::DoorbellRing *ring = &s.shm->doorbells[w->index()];
    w->execute([&] { w->add_session(s.id, ring); });
  }
  resp.version = ctl::kProtocolVersion;
  resp.session_id = s.id;
  resp.device = dev_.info;
  fds.push_back(s.shm_fd);
  fds.push_back(daemon_shm_fd_);
  for (auto &w : workers_.all()) fds.push_back(w->wake_fd());
  return 0;
}

int Server::alloc_pd(Session &s, ctl::HandleResp &resp) {
  if (pds_.size() >= dev_.info.max_pd) return ENOMEM;  // the limits ibv_query_device reports
  uint32_t h = pds_.insert(std::make_unique<ProtectionDomain>(ProtectionDomain{s.id}));
  if (!h) return ENOMEM;
  s.pds.insert(h);
  resp.handle = h;
  return 0;
}

int Server::dealloc_pd(Session &s, uint32_t handle) {
  ProtectionDomain *pd = pds_.get(handle);
  if (!pd || pd->session != s.id) return EINVAL;
  if (pd->refs) return EBUSY;
  pds_.remove(handle);
  s.pds.erase(handle);
  return 0;
}

int Server::reg_mr(Session &s, const ctl::Message &m, ctl::RegMrResp &resp) {
  // The request carries only the pieces it uses.
  if (m.header.length < offsetof(ctl::RegMrReq, pieces)) return EINVAL;
  auto *req = reinterpret_cast<const ctl::RegMrReq *>(m.body);
  if (req->npieces == 0 || req->npieces > ctl::kMaxMrPieces ||
      m.header.length < offsetof(ctl::RegMrReq, pieces) + req->npieces * sizeof(ctl::MrPiece))
    return EINVAL;
  ProtectionDomain *pd = pds_.get(req->pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if ((req->access & ~kValidAccess) || req->length == 0) return EINVAL;
  if ((req->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(req->access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  if (req->length > dev_.info.max_mr_size || dev_.mrs.size() >= device_max_mr_) return ENOMEM;
  auto mr = std::make_unique<MemoryRegion>();
  mr->pd = req->pd;
  mr->access = req->access;
  mr->session = s.id;
  mr->mem_fd = s.mem_fd;
  mr->addr = req->addr;
  mr->iova = req->iova;
  mr->length = req->length;
  uint64_t expect = req->addr;
  for (uint32_t i = 0; i < req->npieces; i++) {
    const ctl::MrPiece &p = req->pieces[i];
    if (p.va != expect || p.length == 0) return EINVAL;
    expect += p.length;
    MrPieceMap piece{p.va, p.length, nullptr};
    if (p.kind == uint32_t(ctl::PieceKind::kMemfd)) {
      if (p.fd_index >= m.fds.size()) return EINVAL;
      int fd = m.fds[p.fd_index];
      // Only a memfd sealed against shrinking: vrnicd's access to a page cut off would die
      // of SIGBUS (issue 17, row 4). Other files have no seals at all.
      int seals = ::fcntl(fd, F_GET_SEALS);
      if (seals < 0 || !(seals & F_SEAL_SHRINK)) return EINVAL;
      struct stat st;
      if (::fstat(fd, &st) < 0 || p.fd_offset + p.length > uint64_t(st.st_size)) return EINVAL;
      uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
      uint64_t base = p.fd_offset & ~(page - 1);
      size_t len = size_t(p.fd_offset + p.length - base);
      void *map = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(base));
      if (map == MAP_FAILED) return errno;
      mr->mappings.push_back({map, len});
      piece.local = static_cast<uint8_t *>(map) + (p.fd_offset - base);
    } else if (p.kind == uint32_t(ctl::PieceKind::kProcessVm)) {
      // Through the client's own /proc/self/mem: is the memory there?
      uint8_t probe;
      if (s.mem_fd < 0 || ::pread(s.mem_fd, &probe, 1, off_t(p.va)) != 1) return EFAULT;
    } else {
      return EINVAL;
    }
    mr->pieces.push_back(piece);
  }
  if (expect != req->addr + req->length) return EINVAL;
  // Charged like the kernel's pinned memory (RLIMIT_MEMLOCK): what vrnicd maps or reaches
  // for the user, so that sparse memfds cannot take vrnicd's address space (issue 17, row 8).
  if (int err = quotas_.charge(s.uid, Quota::kMrBytes, req->length)) return err;
  if (int err = req->replaces ? replace_mr(s, req->replaces, std::move(mr), resp)
                              : insert_mr(s, std::move(mr), resp)) {
    quotas_.release(s.uid, Quota::kMrBytes, req->length);
    return err;
  }
  return 0;
}

int Server::insert_mr(Session &s, std::unique_ptr<MemoryRegion> mr, ctl::RegMrResp &resp) {
  if (int err = quotas_.charge(s.uid, Quota::kMrs)) return err;
  uint32_t handle = 0, key = 0, pd = mr->pd;
  MemoryRegion *raw = mr.get();
  workers_.execute_all([&] {
    handle = dev_.mrs.insert(std::move(mr), random_key_step());
    if (!handle) return;
    key = handle << 8 | dev_.mrs.generation(handle);
    raw->handle = handle;
    raw->key = key;
  });
  if (!handle) {
    quotas_.release(s.uid, Quota::kMrs);
    return ENOMEM;
  }
  pds_.get(pd)->refs++;
  s.mrs.insert(handle);
  resp.handle = handle;
  resp.lkey = resp.rkey = key;
  return 0;
}

// ibv_rereg_mr: the new translation, PD and access take the old region's place in one stop
// of the dataplane, under the same handle and keys; a packet sees one region or the other.
int Server::replace_mr(Session &s, uint32_t handle, std::unique_ptr<MemoryRegion> mr,
                       ctl::RegMrResp &resp) {
  if (!owns(s.mrs, handle)) return EINVAL;
  uint32_t new_pd = mr->pd;
  std::unique_ptr<MemoryRegion> old;
  int st = 0;
  workers_.execute_all([&] {
    MemoryRegion *cur = dev_.mrs.get(handle);
    if (cur->null_mr) {
      st = EINVAL;
    } else if (cur->bound_windows) {
      st = EBUSY;  // memory windows still expose the old translation
    } else {
      mr->handle = handle;
      mr->key = cur->key;
      old = dev_.mrs.replace(handle, std::move(mr));
    }
  });
  if (st) return st;
  quotas_.release(s.uid, Quota::kMrBytes, old->length);
  if (ProtectionDomain *p = pds_.get(old->pd)) p->refs--;
  pds_.get(new_pd)->refs++;
  resp.handle = handle;
  resp.lkey = resp.rkey = old->key;
  return 0;
}

int Server::alloc_null_mr(Session &s, uint32_t pd, ctl::RegMrResp &resp) {
  ProtectionDomain *p = pds_.get(pd);
  if (!p || p->session != s.id) return EINVAL;
  auto mr = std::make_unique<MemoryRegion>();
  mr->pd = pd;
  mr->session = s.id;
  mr->null_mr = true;
  mr->access = IBV_ACCESS_LOCAL_WRITE;  // local use only: no rkey works on it
  mr->length = UINT64_MAX;
  return insert_mr(s, std::move(mr), resp);
}

int Server::dereg_mr(Session &s, uint32_t handle) {
  if (!owns(s.mrs, handle)) return EINVAL;
  uint32_t pd = 0;
  int st = 0;
  workers_.execute_all([&] {
    if (dev_.mrs.get(handle)->bound_windows) {
      st = EBUSY;  // memory windows still expose it
      return;
    }
    pd = remove_mr(s, handle);
  });
  if (st) return st;
  if (ProtectionDomain *p = pds_.get(pd)) p->refs--;
  s.mrs.erase(handle);
  return 0;
}

int Server::alloc_mw(Session &s, const ctl::AllocMwReq &req, ctl::AllocMwResp &resp) {
  ProtectionDomain *pd = pds_.get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (req.type != IBV_MW_TYPE_1 && req.type != IBV_MW_TYPE_2) return EINVAL;
  auto mw = std::make_unique<MemoryWindow>();
  mw->pd = req.pd;
  mw->session = s.id;
  mw->type = uint8_t(req.type);
  uint32_t handle = 0;
  workers_.execute_all([&] {
    MemoryWindow *raw = mw.get();
    handle = dev_.mws.insert(std::move(mw), random_key_step());
    if (!handle) return;
    raw->handle = handle;
    raw->key = kMwKeyBit | handle << 8 | dev_.mws.generation(handle);
    resp.rkey = raw->key;
  });
  if (!handle) return ENOMEM;
  pd->refs++;
  s.mws.insert(handle);
  resp.handle = handle;
  return 0;
}

int Server::dealloc_mw(Session &s, uint32_t handle) {
  if (!owns(s.mws, handle)) return EINVAL;
  uint32_t pd = 0;
  workers_.execute_all([&] { pd = remove_mw(handle); });
  if (ProtectionDomain *p = pds_.get(pd)) p->refs--;
  s.mws.erase(handle);
  return 0;
}

int Server::create_channel(Session &s, const ctl::Message &m, ctl::HandleResp &resp) {
  if (m.fds.size() != 1) return EINVAL;
  // Each costs vrnicd an fd (issue 17, row 9).
  if (int err = quotas_.charge(s.uid, Quota::kChannels)) return err;
  int fd = ::dup(m.fds[0]);
  if (fd < 0) {
    quotas_.release(s.uid, Quota::kChannels);
    return errno;
  }
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  uint32_t h =
      channels_.insert(std::unique_ptr<CompletionChannel>(new CompletionChannel{s.id, fd}));
  if (!h) {
    quotas_.release(s.uid, Quota::kChannels);
    return ENOMEM;
  }
  s.channels.insert(h);
  resp.handle = h;
  return 0;
}

int Server::destroy_channel(Session &s, uint32_t handle) {
  CompletionChannel *ch = channels_.get(handle);
  if (!ch || ch->session != s.id) return EINVAL;
  if (ch->refs) return EBUSY;
  channels_.remove(handle);
  s.channels.erase(handle);
  quotas_.release(s.uid, Quota::kChannels);
  return 0;
}

int Server::create_cq(Session &s, const ctl::CreateCqReq &req, ctl::CreateCqResp &resp,
                      std::vector<int> &fds) {
  if (req.cqe < 1 || req.cqe > dev_.info.max_cqe) return EINVAL;
  if (dev_.cqs.size() >= dev_.info.max_cq) return ENOMEM;
  CompletionChannel *ch = nullptr;
  if (req.channel) {
    ch = channels_.get(req.channel);
    if (!ch || ch->session != s.id) return EINVAL;
  }
  uint32_t slots = std::bit_ceil(req.cqe);
  size_t bytes = shm::cq_region_bytes(slots);
  void *map;
  int fd = make_region("vrnic-cq", bytes, &map);
  if (fd < 0) return -fd;
  auto cq = std::make_unique<CompletionQueue>();
  cq->session = s.id;
  cq->cookie = req.cookie;
  cq->channel_fd = ch ? ch->fd : -1;
  cq->channel = req.channel;
  cq->async_fd = s.async_fd;
  cq->shared = static_cast<shm::CqShared *>(map);
  cq->ring = reinterpret_cast<shm::Cqe *>(static_cast<uint8_t *>(map) + shm::kCqHeaderBytes);
  cq->mask = slots - 1;
  uint32_t handle = 0;
  workers_.execute_all([&] {
    handle = dev_.cqs.insert(std::move(cq));
    if (handle) dev_.cqs.get(handle)->handle = handle;
  });
  if (!handle) {
    ::munmap(map, bytes);
    ::close(fd);
    return ENOMEM;
  }
  if (ch) ch->refs++;
  s.cqs.insert(handle);
  resp.handle = handle;
  resp.slots = slots;
  fds.push_back(fd);
  return 0;
}

int Server::destroy_cq(Session &s, uint32_t handle) {
  if (!owns(s.cqs, handle)) return EINVAL;
  int st = 0;
  uint32_t channel = 0;
  workers_.execute_all([&] {
    CompletionQueue *cq = dev_.cqs.get(handle);
    if (cq->refs) {
      st = EBUSY;
      return;
    }
    channel = remove_cq(handle);
  });
  if (st) return st;
  if (CompletionChannel *ch = channels_.get(channel)) ch->refs--;
  s.cqs.erase(handle);
  return 0;
}

// A new ring takes over the CQEs not yet polled; the provider holds its CQ lock meanwhile.
int Server::resize_cq(Session &s, const ctl::ResizeCqReq &req, ctl::CreateCqResp &resp,
                      std::vector<int> &fds) {
  if (!owns(s.cqs, req.handle)) return EINVAL;
  if (req.cqe < 1 || req.cqe > dev_.info.max_cqe) return EINVAL;
  uint32_t slots = std::bit_ceil(req.cqe);
  size_t bytes = shm::cq_region_bytes(slots);
  void *map;
  int fd = make_region("vrnic-cq", bytes, &map);
  if (fd < 0) return -fd;
  auto *fresh = static_cast<shm::CqShared *>(map);
  auto *ring = reinterpret_cast<shm::Cqe *>(static_cast<uint8_t *>(map) + shm::kCqHeaderBytes);
  int st = 0;
  workers_.execute_all([&] {
    CompletionQueue &cq = *dev_.cqs.get(req.handle);
    uint32_t consumer = cq.shared->ring.consumer.load(std::memory_order_acquire);
    uint32_t pending = cq.producer - consumer;
    if (pending > slots) {
      st = EINVAL;  // the completions waiting would not fit
      return;
    }
    for (uint32_t i = 0; i < pending; i++) ring[i] = cq.ring[(consumer + i) & cq.mask];
    fresh->ring.producer.store(pending);
    fresh->ring.consumer.store(0);
    fresh->notify.store(cq.shared->notify.load());
    ::munmap(cq.shared, shm::cq_region_bytes(cq.mask + 1));
    cq.shared = fresh;
    cq.ring = ring;
    cq.mask = slots - 1;
    cq.producer = pending;
    cq.overrun_reported = false;
  });
  if (st) {
    ::munmap(map, bytes);
    ::close(fd);
    return st;
  }
  resp.handle = req.handle;
  resp.slots = slots;
  fds.push_back(fd);
  return 0;
}

int Server::create_qp(Session &s, const ctl::CreateQpReq &req, ctl::CreateQpResp &resp,
                      std::vector<int> &fds) {
  ProtectionDomain *pd = pds_.get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (!owns(s.cqs, req.send_cq) || !owns(s.cqs, req.recv_cq)) return EINVAL;
  if (req.srq && (!owns(s.srqs, req.srq) || req.qp_type == IBV_QPT_UD)) return EINVAL;
  if (req.qp_type == IBV_QPT_XRC_SEND || req.qp_type == IBV_QPT_XRC_RECV ||
      req.qp_type == IBV_QPT_RAW_PACKET || req.qp_type == IBV_QPT_DRIVER)
    return EOPNOTSUPP;
  if (req.qp_type != IBV_QPT_RC && req.qp_type != IBV_QPT_UC && req.qp_type != IBV_QPT_UD)
    return EINVAL;
  const ctl::QpCaps &c = req.caps;
  if (c.max_send_wr > dev_.info.max_qp_wr || c.max_recv_wr > dev_.info.max_qp_wr ||
      c.max_send_sge > shm::kMaxSge || c.max_recv_sge > shm::kMaxSge ||
      c.max_inline_data > shm::kMaxInline)
    return EINVAL;
  if (s.qps.size() >= shm::kMaxQpsPerSession || dev_.qps.size() >= device_max_qp_) return ENOMEM;
  if (int err = quotas_.charge(s.uid, Quota::kQps)) return err;
  uint32_t sq_slots = std::bit_ceil(std::max(c.max_send_wr, 1u));
  uint32_t rq_slots = std::bit_ceil(std::max(c.max_recv_wr, 1u));
  size_t bytes = shm::qp_region_bytes(sq_slots, rq_slots);
  void *map;
  int fd = make_region("vrnic-qp", bytes, &map);
  if (fd < 0) {
    quotas_.release(s.uid, Quota::kQps);
    return -fd;
  }
  auto qp = std::make_unique<QueuePair>();
  qp->session = s.id;
  qp->pd = req.pd;
  qp->sq_sig_all = req.sq_sig_all;
  qp->cookie = req.cookie;
  qp->async_fd = s.async_fd;
  qp_init(*qp, uint8_t(req.qp_type), map, sq_slots, rq_slots, mtu_bytes(dev_.info.port_active_mtu));
  Worker &w = workers_.for_new_qp();
  qp->worker = uint8_t(w.index());
  qp->shared->worker.store(w.index());
  const bool shared = workers_.size() > 1;  // CQs and SRQs may be used by several workers
  uint32_t handle = 0;
  workers_.execute_all([&] {
    QueuePair *raw = qp.get();
    handle = dev_.qps.insert(std::move(qp));
    if (!handle) return;
    raw->handle = handle;
    raw->qpn = Device::qpn_of_handle(handle, ::arc4random());
    qp_attach_queues(*raw, dev_.cqs.get(req.send_cq), dev_.cqs.get(req.recv_cq),
                     req.srq ? dev_.srqs.get(req.srq) : nullptr, shared);
  });
  if (!handle) {
    ::munmap(map, bytes);
    ::close(fd);
    quotas_.release(s.uid, Quota::kQps);
    return ENOMEM;
  }
  pd->refs++;
  s.qps.insert(handle);
  qp_owners_[handle] = {req.pd, req.send_cq, req.recv_cq, req.srq};
  resp.handle = handle;
  resp.qpn = dev_.qps.get(handle)->qpn;
  resp.sq_slots = sq_slots;
  resp.rq_slots = rq_slots;
  resp.worker = w.index();
  workers_.qp_added(w.index());
  resp.caps = {sq_slots, rq_slots, shm::kMaxSge, shm::kMaxSge, shm::kMaxInline, 0};
  fds.push_back(fd);
  return 0;
}

int Server::modify_qp(Session &s, const ctl::ModifyQpReq &req) {
  if (!owns(s.qps, req.handle)) return EINVAL;
  const ctl::QpAttrWire &a = req.attr;
  uint32_t mask = req.attr_mask;
  int st = 0;
  int resolve_on = -1;  // the worker whose port should look up the peer's link address
  uint8_t peer[16];
  workers_.execute_all([&] {
    QueuePair &qp = *dev_.qps.get(req.handle);
    uint32_t cur = qp.attr.qp_state;
    if ((mask & IBV_QP_CUR_STATE) && a.cur_qp_state != cur) {
      st = EINVAL;
      return;
    }
    uint32_t next = (mask & IBV_QP_STATE) ? a.qp_state : cur;
    if ((st = check_qp_transition(qp.type, cur, next, mask))) return;
    // RoCE has no alternate paths (no automatic path migration): refused as Linux does.
    if (mask & IBV_QP_ALT_PATH) {
      st = EINVAL;
      return;
    }
    // Attribute values (EINVAL as the kernel answers them).
    if (((mask & IBV_QP_PORT) && a.port_num != 1) ||
        ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0) ||
        ((mask & IBV_QP_PATH_MTU) &&
         (a.path_mtu < IBV_MTU_256 || a.path_mtu > dev_.info.port_active_mtu)) ||
        ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > kMaxRdAtomic) ||
        ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > kMaxRdAtomic) ||
        ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) ||
        ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) ||
        ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) ||
        ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) ||
        ((mask & IBV_QP_ACCESS_FLAGS) &&
         (a.qp_access_flags & ~uint32_t(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                        IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE))) ||
        ((mask & IBV_QP_AV) &&
         (a.ah.sgid_index >= ctl::kGidTableLen ||
          dev_.info.gids[a.ah.sgid_index].type == ctl::kGidEmpty || !a.ah.is_global))) {
      st = EINVAL;
      return;
    }
    if (qp_modify(workers_[qp.worker], qp, a, mask, next)) {
      resolve_on = qp.worker;
      std::memcpy(peer, qp.attr.ah.dgid, sizeof(peer));
    }
  });
  if (!st && resolve_on >= 0) workers_.resolve_peer(uint32_t(resolve_on), peer);
  return st;
}

int Server::query_qp(Session &s, uint32_t handle, ctl::QueryQpResp &resp) {
  if (!owns(s.qps, handle)) return EINVAL;
  workers_.execute_all([&] {
    QueuePair &qp = *dev_.qps.get(handle);
    resp.attr = qp.attr;
    resp.attr.cur_qp_state = qp.attr.qp_state;
    resp.attr.sq_draining = qp.attr.qp_state == IBV_QPS_SQD && qp_sq_busy(qp);
  });
  return 0;
}

int Server::destroy_qp(Session &s, uint32_t handle) {
  if (!owns(s.qps, handle)) return EINVAL;
  workers_.execute_all([&] { remove_qp(s, handle); });
  if (ProtectionDomain *pd = pds_.get(qp_owners_[handle].pd)) pd->refs--;
  qp_owners_.erase(handle);
  s.qps.erase(handle);
  return 0;
}

int Server::create_srq(Session &s, const ctl::CreateSrqReq &req, ctl::CreateSrqResp &resp,
                       std::vector<int> &fds) {
  ProtectionDomain *pd = pds_.get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  const ctl::SrqAttrWire &a = req.attr;
  if (a.max_wr < 1 || a.max_wr > dev_.info.max_srq_wr || a.max_sge > shm::kMaxSge ||
      a.srq_limit > a.max_wr)
    return EINVAL;
  if (dev_.srqs.size() >= dev_.info.max_srq) return ENOMEM;
  uint32_t slots = std::bit_ceil(a.max_wr);
  size_t bytes = shm::srq_region_bytes(slots);
  void *map;
  int fd = make_region("vrnic-srq", bytes, &map);
  if (fd < 0) return -fd;
  auto srq = std::make_unique<ReceiveQueue>();
  auto *shared = static_cast<shm::SrqShared *>(map);
  shared->limit.store(a.srq_limit);
  srq->indices = &shared->ring;
  srq->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<uint8_t *>(map) + shm::kSrqHeaderBytes);
  srq->mask = slots - 1;
  srq->limit = &shared->limit;
  srq->session = s.id;
  srq->pd = req.pd;
  srq->cookie = req.cookie;
  srq->async_fd = s.async_fd;
  uint32_t handle = 0;
  workers_.execute_all([&] {
    ReceiveQueue *raw = srq.get();
    handle = dev_.srqs.insert(std::move(srq));
    if (handle) raw->handle = handle;
  });
  if (!handle) {
    ::munmap(map, bytes);
    ::close(fd);
    return ENOMEM;
  }
  pd->refs++;
  s.srqs.insert(handle);
  resp.handle = handle;
  resp.slots = slots;
  resp.attr = {slots, shm::kMaxSge, a.srq_limit, 0};
  fds.push_back(fd);
  return 0;
}

int Server::modify_srq(Session &s, const ctl::ModifySrqReq &req) {
  if (!owns(s.srqs, req.handle)) return EINVAL;
  if (req.attr_mask & ~uint32_t(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  int st = 0;
  workers_.execute_all([&] {
    ReceiveQueue &srq = *dev_.srqs.get(req.handle);
    uint32_t slots = srq.mask + 1;
    // The ring is sized at creation; "resizing" within it is all vrnic offers.
    if ((req.attr_mask & IBV_SRQ_MAX_WR) && (req.attr.max_wr < 1 || req.attr.max_wr > slots)) {
      st = EINVAL;
      return;
    }
    if (req.attr_mask & IBV_SRQ_LIMIT) {
      if (req.attr.srq_limit > slots) {
        st = EINVAL;
        return;
      }
      srq.limit->store(req.attr.srq_limit);
    }
  });
  return st;
}

int Server::query_srq(Session &s, uint32_t handle, ctl::QuerySrqResp &resp) {
  if (!owns(s.srqs, handle)) return EINVAL;
  workers_.execute_all([&] {
    ReceiveQueue &srq = *dev_.srqs.get(handle);
    resp.attr = {srq.mask + 1, shm::kMaxSge, srq.limit->load(), 0};
  });
  return 0;
}

int Server::destroy_srq(Session &s, uint32_t handle) {
  if (!owns(s.srqs, handle)) return EINVAL;
  int st = 0;
  uint32_t pd = 0;
  workers_.execute_all([&] {
    ReceiveQueue *srq = dev_.srqs.get(handle);
    if (srq->refs) {
      st = EBUSY;
      return;
    }
    pd = remove_srq(handle);
  });
  if (st) return st;
  if (ProtectionDomain *p = pds_.get(pd)) p->refs--;
  s.srqs.erase(handle);
  return 0;
}

int Server::create_ah(Session &s, const ctl::CreateAhReq &req, ctl::HandleResp &resp) {
  ProtectionDomain *pd = pds_.get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (req.av.port_num != 1) return EINVAL;
  // RoCE addresses by GID: an AH without a GRH names no peer (the kernel's
  // rdma_check_ah_attr refuses it with EINVAL as well).
  if (!req.av.is_global || req.av.sgid_index >= ctl::kGidTableLen ||
      dev_.info.gids[req.av.sgid_index].type == ctl::kGidEmpty)
    return EINVAL;
  if (ahs_.size() >= dev_.info.max_ah) return ENOMEM;
  uint32_t h = ahs_.insert(std::make_unique<AddressHandle>(AddressHandle{s.id, req.pd, req.av}));
  if (!h) return ENOMEM;
  pd->refs++;
  s.ahs.insert(h);
  resp.handle = h;
  workers_.resolve_peer(0, req.av.dgid);
  return 0;
}

int Server::destroy_ah(Session &s, uint32_t handle) {
  AddressHandle *ah = ahs_.get(handle);
  if (!ah || ah->session != s.id) return EINVAL;
  if (ProtectionDomain *pd = pds_.get(ah->pd)) pd->refs--;
  ahs_.remove(handle);
  s.ahs.erase(handle);
  return 0;
}

ctl::DeviceListEntry Server::entry() const {
  ctl::DeviceListEntry e{};
  std::snprintf(e.name, sizeof(e.name), "%s", dev_.info.name);
  std::snprintf(e.socket, sizeof(e.socket), "%s", path_.c_str());
  e.node_guid = dev_.info.node_guid;
  return e;
}

int Server::list_devices(Session &, ctl::DeviceListResp &resp) {
  if (device_list_.empty()) {
    resp.count = 1;
    resp.devices[0] = entry();
    return 0;
  }
  resp.count = uint32_t(std::min<size_t>(device_list_.size(), ctl::kMaxDevices));
  std::copy_n(device_list_.begin(), resp.count, resp.devices);
  return 0;
}

int Server::stats(Session &s, ctl::StatsResp &resp) {
  // The caller's own account.
  const UserUsage u = quotas_.usage(s.uid);
  const UserLimits &l = quotas_.limits();
  resp.user_uid = s.uid;
  resp.user_sessions = u.sessions;
  resp.user_channels = u.channels;
  resp.user_mrs = u.mrs;
  resp.user_qps = u.qps;
  resp.user_mr_bytes = u.mr_bytes;
  resp.user_quota_refusals = u.refusals;
  resp.limit_sessions = l.sessions;
  resp.limit_channels = l.channels;
  resp.limit_mrs = l.mrs;
  resp.limit_qps = l.qps;
  resp.limit_mr_bytes = l.mr_bytes;
  // Sessions are clients that opened the device; vrnicctl's own connection is not one.
  resp.sessions = uint32_t(std::count_if(sessions_.begin(), sessions_.end(),
                                         [](const auto &kv) { return kv.second->shm != nullptr; }));
  resp.pds = pds_.size();
  resp.channels = channels_.size();
  resp.ahs = ahs_.size();
  resp.wire_link_up = 1;
  resp.qp_moves = workers_.moves();
  resp.workers = workers_.size();
  workers_.execute_all([&] {
    resp.mrs = dev_.mrs.size();
    resp.cqs = dev_.cqs.size();
    resp.qps = dev_.qps.size();
    resp.srqs = dev_.srqs.size();
    resp.mws = dev_.mws.size();
    // Every worker's share, summed: its counters and its ports'.
    for (auto &w : workers_.all()) {
      for (size_t i = 0; i < std::size(resp.transport); i++)
        resp.transport[i] += w->counters.value[i];
      Port *wire = w->wire_port();
      if (!wire) continue;
      for (size_t i = 0; i < std::size(resp.port); i++) resp.port[i] += wire->counters().value[i];
      if (!wire->link_up()) resp.wire_link_up = 0;
      if (const FaultCounters *f = wire->fault_counters()) {
        resp.faults_dropped += f->dropped;
        resp.faults_duplicated += f->duplicated;
        resp.faults_reordered += f->reordered;
        resp.faults_corrupted += f->corrupted;
        resp.faults_delayed += f->delayed;
      }
    }
  });
  return 0;
}

int Server::list_qps(Session &s, const ctl::ListQpsReq &req, ctl::ListQpsResp &resp) {
  const uint32_t start = req.start;
  // Another user's QPNs and PSNs are what it would take to inject into its connections.
  auto visible = [&](const QueuePair &qp) {
    if (s.admin) return true;
    auto it = sessions_.find(qp.session);
    return it != sessions_.end() && it->second->uid == s.uid;
  };
  workers_.execute_all([&] {
    dev_.qps.for_each([&](uint32_t handle, QueuePair &qp) {
      if (handle < start || !visible(qp)) return;
      if (resp.count == ctl::ListQpsResp::kMaxEntries) {
        if (!resp.next) resp.next = handle;
        return;
      }
      ctl::QpEntry &e = resp.entries[resp.count++];
      e.qpn = qp.qpn;
      e.type = qp.type;
      e.state = qp.attr.qp_state;
      e.session = qp.session;
      std::copy(std::begin(qp.counters.value), std::end(qp.counters.value), e.counters);
      e.transport = qp_transport_state(qp, workers_[qp.worker].now);
      e.worker = qp.worker;
    });
  });
  return 0;
}

int Server::move_qp(Session &, const ctl::MoveQpReq &req) {
  return workers_.move_qp(req.qpn, req.worker);
}

int Server::set_faults(Session &, const ctl::SetFaultsReq &req) {
  std::string spec(req.spec, strnlen(req.spec, sizeof(req.spec)));
  absl::StatusOr<FaultConfig> cfg = FaultConfig::parse(spec);
  if (!cfg.ok()) return EINVAL;
  if (int err = workers_.set_faults(*cfg)) return err;
  // In the log, so that what a run's packets went through is on record.
  std::fprintf(stderr, "vrnicd: vrnic%u: faults %s\n", cfg_.device_index,
               cfg->any() ? cfg->to_string().c_str() : "off");
  return 0;
}

// The dataplane side of destroying each object: called where every worker is stopped or is
// the caller (inside execute_all). Each returns what the control side must release.
void Server::remove_qp(Session &s, uint32_t handle) {
  quotas_.release(s.uid, Quota::kQps);
  QueuePair *qp = dev_.qps.get(handle);
  qp_release(workers_[qp->worker], *qp);
  workers_.qp_removed(qp->worker);
  ::munmap(qp->shared, shm::qp_region_bytes(qp->sq_mask + 1, qp->own_rq.mask + 1));
  dev_.qps.remove(handle);
}

uint32_t Server::remove_mw(uint32_t handle) {
  MemoryWindow *mw = dev_.mws.get(handle);
  if (mw->bound) {
    if (MemoryRegion *mr = dev_.mr_by_key(mw->mr_key)) mr->bound_windows--;
  }
  uint32_t pd = mw->pd;
  dev_.mws.remove(handle);
  return pd;
}

uint32_t Server::remove_mr(Session &s, uint32_t handle) {
  std::unique_ptr<MemoryRegion> mr = dev_.mrs.remove(handle);
  if (!mr) return 0;
  quotas_.release(s.uid, Quota::kMrs);
  if (!mr->null_mr) quotas_.release(s.uid, Quota::kMrBytes, mr->length);
  return mr->pd;
}

uint32_t Server::remove_srq(uint32_t handle) {
  ReceiveQueue *srq = dev_.srqs.get(handle);
  uint32_t pd = srq->pd;
  ::munmap(reinterpret_cast<uint8_t *>(srq->indices), shm::srq_region_bytes(srq->mask + 1));
  dev_.srqs.remove(handle);
  return pd;
}

uint32_t Server::remove_cq(uint32_t handle) {
  CompletionQueue *cq = dev_.cqs.get(handle);
  uint32_t channel = cq->channel;
  ::munmap(cq->shared, shm::cq_region_bytes(cq->mask + 1));
  dev_.cqs.remove(handle);
  return channel;
}

// Everything a client created goes when its connection does (process exit or SIGKILL), in
// one stop of the dataplane whatever it held: a session's objects refer only to each other,
// so none needs its references counted down on the way. QPs first (they point at CQs and
// SRQs), windows before the regions they expose.
void Server::close_session(uint32_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session &s = *it->second;
  workers_.execute_all([&] {
    for (uint32_t h : s.qps) remove_qp(s, h);
    for (uint32_t h : s.mws) remove_mw(h);
    for (uint32_t h : s.mrs) remove_mr(s, h);
    for (uint32_t h : s.srqs) remove_srq(h);
    for (uint32_t h : s.cqs) remove_cq(h);
  });
  for (uint32_t h : s.qps) qp_owners_.erase(h);
  for (uint32_t h : s.ahs) ahs_.remove(h);
  for (uint32_t h : s.channels) channels_.remove(h);
  for (uint32_t h : s.pds) pds_.remove(h);
  if (s.shm) {
    for (auto &w : workers_.all()) w->execute([&] { w->remove_session(id); });
  }
  quotas_.release(s.uid, Quota::kChannels, s.channels.size());
  if (!s.refused) quotas_.release(s.uid, Quota::kSessions);
  sessions_.erase(it);
}

}  // namespace vrnic
