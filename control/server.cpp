// vrnicd's server for one device: start-up (socket, device node, workers), the socket loop,
// sessions from accept to close, the dispatch of each command through the command table,
// and the server's own queries (stats, devices, QP lists, faults, moves). See server.h.
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
#include <climits>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "absl/strings/str_format.h"
#include "vrnic/clock.h"
#include "dataplane/events.h"
#include "client_fds.h"
#include "load_balance.h"
#include "dataplane/transport.h"
#include "qp_state_machine.h"
#include "errno_status.h"
#include "shared_region.h"
#include "vrnic/socket_path.h"

namespace vrnic {
namespace {

// Connections past their user's session quota: how many of a user's wait for their ENOMEM,
// and for how long.
constexpr uint32_t kMaxRefusedWaiting = 8;
constexpr uint64_t kRefusedWaitNs = 1'000'000'000;

// Who may manage the device for everyone (issue 17): vrnicd's own user and root.
bool is_admin(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

// Every message on the sockets accepted from `listen_fd` comes with its sender's credentials
// (SCM_CREDENTIALS): set on the listening socket, so that the accepted ones have it from the
// start (a message sent between accept and a setsockopt on the new socket would come
// without them).
bool pass_credentials(int listen_fd) {
  const int one = 1;
  return ::setsockopt(listen_fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0;
}

}  // namespace

Server::Server(ServerConfig cfg)
    : cfg_(std::move(cfg)), path_(cfg_.socket_path), dev_(cfg_.device_index), quotas_(cfg_.limits) {
  // What one user may register and create, as ibv_query_device tells it; the device's own
  // capacity (memory_ and queues_ took it) stays the bound on everyone's objects together.
  // Each limit is one that can be reached (issue 29): a CQ or SRQ is a mapping of its own in
  // vrnicd (its ring; the session page is one more), QPs share a few (the session's ring
  // arena: one 64 MiB chunk holds thousands), and a context holds so many QPs.
  const auto &q = quotas_.limits();
  auto limit = [&](uint32_t device, Quota kind, uint64_t also = UINT32_MAX) {
    return uint32_t(std::min<uint64_t>({device, q[kind], also}));
  };
  const uint64_t rings = q[Quota::kMappings] ? q[Quota::kMappings] - 1 : 0;
  ctl::DeviceInfo &d = dev_.info;
  d.max_mr_size = std::min<uint64_t>(d.max_mr_size, q[Quota::kMrBytes]);
  d.max_dm_size = std::min<uint64_t>(d.max_dm_size, q[Quota::kMrBytes]);
  d.max_mr = limit(d.max_mr, Quota::kMrs);
  d.max_qp = limit(d.max_qp, Quota::kQps, shm::kMaxQpsPerSession);
  d.max_cq = limit(d.max_cq, Quota::kCqs, rings);
  d.max_srq = limit(d.max_srq, Quota::kSrqs, rings);
  d.max_pd = limit(d.max_pd, Quota::kPds);
  d.max_ah = limit(d.max_ah, Quota::kAhs);
  d.max_mw = limit(d.max_mw, Quota::kMws);
  cm_.set_qp_hooks(
      [this](Session &caller, const ctl::CmQpSteps &steps) { return step_cm_qp(caller, steps); },
      [this](Session &caller, uint32_t qpn) {
        return dev_.qp_by_qpn(qpn) && !process_qp_owner(caller, qpn);
      });
}

// The QP named in a CM call is one the caller's process made through its provider, on another
// session than the library's own: found by QPN, and only in a session of the same process.
Session *Server::process_qp_owner(Session &caller, uint32_t qpn) {
  const QueuePair *qp = dev_.qp_by_qpn(qpn);
  if (!qp || qp == dev_.gsi) return nullptr;
  auto it = sessions_.find(qp->session);
  if (it == sessions_.end()) return nullptr;
  Session &owner = *it->second;
  return owner.pid == caller.caller.pid && owner.uid == caller.caller.uid ? &owner : nullptr;
}

int Server::step_cm_qp(Session &caller, const ctl::CmQpSteps &steps) {
  Session *owner = process_qp_owner(caller, steps.qpn);
  if (!owner) return EINVAL;
  owner->caller = caller.caller;  // (the QP's owner process: its user acts)
  const int err = queues_.modify_qp_steps(*owner, dev_.qp_by_qpn(steps.qpn)->handle,
                                          steps.steps, steps.count);
  owner->caller = owner->own();
  return err;
}

Server::~Server() {
  end_capture();
  while (!sessions_.empty()) close_session(sessions_.begin()->first);
  cm_.stop();  // QP1 leaves the device while the workers still run
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
  absl::StatusOr<SharedRegion> daemon_region =
      make_shared_region("vrnic-daemon", sizeof(shm::DaemonShared), ClientAccess::kReadOnly);
  if (!daemon_region.ok()) return daemon_region.status();
  daemon_shm_fd_ = daemon_region->fd;
  daemon_shm_ = static_cast<shm::DaemonShared *>(daemon_region->map);
  daemon_shm_->direct_path.store(cfg_.direct_path ? 1 : 0, std::memory_order_relaxed);
  dev_.selective_repeat = cfg_.selective_repeat;  // read by the workers, started below

  if (cfg_.inherited_listen_fd >= 0) {
    // Socket activation: systemd made, bound and owns the socket (and its mode and group).
    listen_fd_ = cfg_.inherited_listen_fd;
    int flags = ::fcntl(listen_fd_, F_GETFL);
    if (flags < 0 || ::fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK) < 0 ||
        ::fcntl(listen_fd_, F_SETFD, FD_CLOEXEC) < 0 || !pass_credentials(listen_fd_))
      return absl::ErrnoToStatus(errno, "the socket systemd passed");
    make_device_node();
    return start_engines();
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 || !pass_credentials(listen_fd_)) return absl::ErrnoToStatus(errno, "socket");
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
  return start_engines();
}

absl::Status Server::start_engines() {
  if (absl::Status st = workers_.start(daemon_shm_); !st.ok()) return st;
  if (absl::Status st = cm_.start(); !st.ok()) return st;
  watch_link();
  return absl::OkStatus();
}

// The default socket's directory (socket_path.h) is made private to us, and one that is not
// (another user's, a symlink, open to others) is refused rather than used; when the first
// choice is someone else's, the log says whose and where vrnicd listens instead.
absl::Status Server::prepare_socket_dir() {
  // (The directory path_ was chosen in, not chosen again: the choice may differ by now.)
  const std::string dir = path_.substr(0, path_.rfind('/'));
  if (!is_private_socket_dir_name(dir)) return absl::OkStatus();  // the user chose the place
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
  // The first choice taken by someone else: ours is its private sibling (socket_path.h).
  const std::string first = first_private_socket_dir();
  if (dir != first && ::lstat(first.c_str(), &st) == 0)
    std::fprintf(stderr, "vrnicd: %s is not ours (uid %u, mode %o): listening in %s instead\n",
                 first.c_str(), unsigned(st.st_uid), unsigned(st.st_mode & 07777), dir.c_str());
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
  // After a request, look again at once for a while before sleeping: a client's next call
  // mostly follows within microseconds, and a control thread asleep on an idle core takes
  // 40-70 us to wake for it (issue 29: a million ibv_alloc_null_mr took 54 us each with the
  // other core idle, 12 us with it busy; the worker woken by every call used to keep it so).
  constexpr uint64_t kLookAgainNs = 100'000;
  constexpr size_t kReapPerTurn = 16384;  // a few milliseconds of munmap and free
  uint64_t last_request_ns = 0;
  const uint64_t exit_idle_ns = uint64_t(cfg_.exit_idle_seconds) * 1'000'000'000;
  uint64_t idle_since_ns = monotonic_ns();  // when the last client left (0: one is here)
  while (!stop.load()) {
    if (!sessions_.empty()) {
      idle_since_ns = 0;
    } else if (!idle_since_ns) {
      idle_since_ns = monotonic_ns();
    } else if (exit_idle_ns && monotonic_ns() - idle_since_ns >= exit_idle_ns) {
      std::fprintf(stderr, "vrnicd: no client for %u s (--exit-idle)\n", cfg_.exit_idle_seconds);
      return;
    }
    // The listening socket (not while vrnicd is out of descriptors: it would stay readable
    // and the loop spin), QP1's MADs, then a socket per session.
    const bool accepting = monotonic_ns() >= accept_paused_until_;
    pfds.assign({{accepting ? listen_fd_ : -1, POLLIN, 0}, {cm_.poll_fd(), POLLIN, 0}});
    ids.assign(2, 0);
    for (auto &[id, s] : sessions_) {
      pfds.push_back({s->sock, POLLIN, 0});
      ids.push_back(id);
    }
    // MRs of closed sessions are freed a batch per turn, between requests.
    const bool reaping = memory_.reap(kReapPerTurn);
    const uint64_t before = monotonic_ns();
    int n = ::poll(pfds.data(), pfds.size(),
                   reaping || before - last_request_ns < kLookAgainNs ? 0 : poll_timeout_ms(before));
    watch_link();
    close_refused(monotonic_ns());
    workers_.rebalance();
    cm_.run(monotonic_ns());
    if (n <= 0) continue;
    if (pfds[0].revents & POLLIN) accept_client();
    for (size_t i = 2; i < pfds.size(); i++) {
      if (!pfds[i].revents) continue;
      last_request_ns = monotonic_ns();
      auto it = sessions_.find(ids[i]);
      if (it == sessions_.end()) continue;
      if (!handle(*it->second)) close_session(ids[i]);
    }
    cm_.flush();
  }
}

void Server::accept_client() {
  // Non-blocking: a client that sends requests and never reads the replies fills its
  // socket's buffer, the bounded queue it has, and is dropped, rather than blocking vrnicd
  // in sendmsg for everyone else (issue 17, row 6).
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    // Out of descriptors (the quotas keep them for the users, but not the kernel's limit on
    // the whole system): the connection waits in the backlog, and vrnicd looks again later.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
      accept_paused_until_ = monotonic_ns() + 100'000'000;
    return;
  }
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
  s->sock_inode = socket_inode(fd);
  s->pid = cred.pid;
  s->uid = cred.uid;
  s->admin = is_admin(cred.uid);
  s->caller = s->own();
  // The connection is one of the user's sessions and one of its descriptors in vrnicd.
  bool over = quotas_.charge(cred.uid, Quota::kSessions) != 0;
  if (!over && quotas_.charge(cred.uid, Quota::kFds)) {
    quotas_.release(cred.uid, Quota::kSessions);
    over = true;
  }
  s->fds = over ? 0 : 1;
  if (over) {
    // Over its user's quota: the connection stays only to be answered ENOMEM at its first
    // request, for a second at most and a few of the user's at a time; the rest are closed at
    // once. Held until they spoke, 3,000 idle ones took 3,010 of vrnicd's fds under
    // sessions=16 (issue 28, row 6).
    uint32_t &waiting = refused_per_user_[cred.uid];
    if (waiting >= kMaxRefusedWaiting) {
      ::close(fd);
      return;
    }
    waiting++;
    s->refused = true;
    refused_.emplace_back(monotonic_ns() + kRefusedWaitNs, s->id);
  }
  sessions_[s->id] = std::move(s);
}

void Server::close_refused(uint64_t now) {
  while (!refused_.empty() && refused_.front().first <= now) {
    close_session(refused_.front().second);  // gone already if it spoke: nothing to do
    refused_.pop_front();
  }
}

int Server::poll_timeout_ms(uint64_t now) const {
  int ms = cm_.poll_timeout_ms(now);  // -1: nothing due
  auto until = [&](uint64_t due) {
    const int due_ms = due <= now ? 0 : int((due - now + 999'999) / 1'000'000);
    ms = ms < 0 ? due_ms : std::min(ms, due_ms);
  };
  if (!refused_.empty()) until(refused_.front().first);
  if (accept_paused_until_ > now) until(accept_paused_until_);
  if (cfg_.exit_idle_seconds && sessions_.empty()) until(now + 1'000'000'000);
  return ms;
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
  // An imported context's connection acts on the objects of the session it speaks for
  // (import_device), as its caller: who it is and what it may do stay its own (issue 52).
  // Everything but the verbs commands -- vrnicctl's queries and admin commands, rdma_cm --
  // is the connection's own business.
  Session &acting =
      s.speaks_for && cmd && cmd->who == Who::kClient ? *sessions_.at(s.speaks_for) : s;
  // The caller is whoever sent this message: the connection's own process, or another that
  // holds its socket (an importer handed the exported cmd_fd, which can write on it; a forked
  // child) -- itself then, with its own rights and no memory of the connection's process.
  Caller caller = s.own();
  const bool foreign = m->has_sender && (m->sender.pid != s.pid || m->sender.uid != s.uid);
  if (foreign) caller = {m->sender.pid, m->sender.uid, is_admin(m->sender.uid), -1};
  if (s.refused) {  // its user holds every connection allowed
    status = ENOMEM;
    keep = false;
  } else if ((!cmd || cmd->who == Who::kClient) && !acting.shm) {
    status = EPROTO;  // verbs commands come after Hello
    keep = false;
  } else if (!cmd) {
    status = EOPNOTSUPP;
  } else if ((cmd->who == Who::kAdmin && !caller.admin) ||
             (cmd->who == Who::kNewClient && foreign)) {
    status = EPERM;  // (a session is made by the process that connected)
  } else {
    acting.caller = caller;
    status = cmd->serve(*this, acting, *m, r);
    acting.caller = acting.own();
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

ctl::DeviceListEntry Server::entry() const {
  ctl::DeviceListEntry e{};
  std::snprintf(e.name, sizeof(e.name), "%s", dev_.info.name);
  std::snprintf(e.socket, sizeof(e.socket), "%s", path_.c_str());
  e.node_guid = dev_.info.node_guid;
  e.daemon_pid = uint32_t(::getpid());
  return e;
}

int Server::list_devices(Session &, ctl::DeviceListResp &resp) {
  resp.flags = (cfg_.autostarted ? ctl::kDaemonAutostarted : 0) |
               (cfg_.inherited_listen_fd >= 0 ? ctl::kDaemonSocketActivated : 0);
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
  const UserUsage u = quotas_.usage(s.caller.uid);
  resp.user_uid = s.caller.uid;
  for (uint32_t i = 0; i < kQuotaCount; i++) {
    resp.user_used[i] = u.used[i];
    resp.user_limit[i] = quotas_.limits().max[i];
  }
  resp.user_quota_refusals = u.refusals;
  // Sessions are clients that opened the device; vrnicctl's own connection is not one.
  resp.sessions = uint32_t(std::count_if(sessions_.begin(), sessions_.end(),
                                         [](const auto &kv) { return kv.second->shm != nullptr; }));
  resp.pds = memory_.pds().size();
  resp.channels = queues_.channel_count();
  resp.ahs = queues_.ah_count();
  resp.mcast_groups = queues_.mcast_group_count();
  resp.mcast_attached = queues_.mcast_attached_count();
  resp.wire_link_up = 1;
  resp.qp_moves = workers_.moves();
  resp.worker_stops = workers_.stops();
  resp.grace_periods = workers_.grace_periods();
  cm_.stats(resp);
  resp.workers = workers_.size();
  resp.direct_path = cfg_.direct_path;
  resp.selective_repeat = dev_.selective_repeat;
  resp.mrs = dev_.mrs.size();
  resp.cqs = dev_.cqs.size();
  resp.qps = dev_.qps.size();
  resp.srqs = dev_.srqs.size();
  resp.mws = dev_.mws.size();
  // What the providers ran themselves, counted in each QP's shared page (the workers keep
  // the counts of the QPs gone, below).
  dev_.qps.for_each([&](uint32_t, QueuePair &qp) {
    resp.transport[kDirectOps] += qp.shared->direct_ops.load(std::memory_order_relaxed);
    resp.transport[kDirectBytes] += qp.shared->direct_bytes.load(std::memory_order_relaxed);
    return true;
  });
  // Every worker's share, summed: its counters and its ports', each read on its own thread
  // between its bursts (no worker stops for it).
  for (auto &wp : workers_.all()) {
    Worker *w = wp.get();
    w->run_between_bursts([&] {
      resp.doorbell_user_look_max =
          std::max<uint64_t>(resp.doorbell_user_look_max, w->doorbell_user_look_max());
      for (size_t i = 0; i < std::size(resp.transport); i++)
        resp.transport[i] += w->counters.value[i];
      Port *wire = w->wire_port();
      if (!wire) return;
      for (size_t i = 0; i < std::size(resp.port); i++) resp.port[i] += wire->counters().value[i];
      if (!wire->link_up()) resp.wire_link_up = 0;
      if (const FaultCounters *f = wire->fault_counters()) {
        resp.faults_dropped += f->dropped;
        resp.faults_duplicated += f->duplicated;
        resp.faults_reordered += f->reordered;
        resp.faults_corrupted += f->corrupted;
        resp.faults_delayed += f->delayed;
      }
    });
  }
  return 0;
}

int Server::list_qps(Session &s, const ctl::ListQpsReq &req, ctl::ListQpsResp &resp) {
  const uint32_t start = req.start;
  // Another user's QPNs and PSNs are what it would take to inject into its connections.
  auto visible = [&](const QueuePair &qp) {
    if (s.caller.admin) return true;
    auto it = sessions_.find(qp.session);
    return it != sessions_.end() && it->second->uid == s.caller.uid;
  };
  // From `start` on, and only to the first QP past the page: a page costs what it lists,
  // not a walk over every QP (64 K QPs are 1,821 pages). The QPs are chosen here, by what
  // never changes and the state the workers publish; what their workers change (counters,
  // the transport) is read by each worker between its bursts: no worker stops.
  std::vector<std::vector<std::pair<ctl::QpEntry *, QueuePair *>>> by_worker(workers_.size());
  dev_.qps.for_each([&](uint32_t handle, QueuePair &qp) {
    // As its worker publishes it in the QP's shared page (the entry gets the worker's own).
    const uint32_t state = qp.shared->state.load(std::memory_order_acquire);
    if (!visible(qp) || (req.session && qp.session != req.session) ||
        (req.state && state + 1u != req.state))
      return true;
    if (resp.count == ctl::ListQpsResp::kMaxEntries) {
      resp.next = handle;
      return false;
    }
    ctl::QpEntry &e = resp.entries[resp.count++];
    e.qpn = qp.qpn;
    e.type = qp.type;
    e.state = state;
    e.session = qp.session;
    e.worker = qp.worker;
    by_worker[qp.worker].push_back({&e, &qp});
    return true;
  }, std::max(start, 1u));
  for (size_t i = 0; i < by_worker.size(); i++) {
    if (by_worker[i].empty()) continue;
    Worker &w = workers_[i];
    w.run_between_bursts([&] {
      for (auto [e, qp] : by_worker[i]) {
        std::copy(std::begin(qp->counters.value), std::end(qp->counters.value), e->counters);
        e->counters[kDirectOps] = qp->shared->direct_ops.load(std::memory_order_relaxed);
        e->counters[kDirectBytes] = qp->shared->direct_bytes.load(std::memory_order_relaxed);
        e->state = qp->attr.qp_state;
        e->transport = qp_transport_state(dev_, *qp, w.now);
      }
    });
  }
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
  faults_on_ = cfg->any();
  update_direct_path();
  // In the log, so that what a run's packets went through is on record.
  std::fprintf(stderr, "vrnicd: vrnic%u: faults %s\n", cfg_.device_index,
               cfg->any() ? cfg->to_string().c_str() : "off");
  return 0;
}

// Everything a client created goes when its connection does (process exit or SIGKILL),
// whatever it held, with no worker stopped: a session's objects refer only to each other, so
// none needs its references counted down on the way. Its QPs leave their table; after a grace
// period no worker holds any, and each worker forgets the QPs it ran; then its windows and
// regions leave theirs and each worker forgets the session's doorbell ring; after a second
// grace period the packets they built are back, and all of it is freed.
void Server::close_session(uint32_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session &s = *it->second;
  if (capture_session_ == id) end_capture();
  // The connections that speak for it end with it (their contexts' calls then fail with EIO,
  // as an imported context's would once its uverbs file is gone).
  while (!s.importers.empty()) close_session(*s.importers.begin());
  if (s.speaks_for) {
    // It holds nothing but its connection and its share of the user's directory: the
    // objects it made are the session's, and go with it.
    if (auto t = sessions_.find(s.speaks_for); t != sessions_.end())
      t->second->importers.erase(id);
    cm_.release(s);  // (rdma_cm on it was its own)
    if (s.wake_fd >= 0)
      for (auto &w : workers_.all()) w->unwatch_session_wake(s.wake_fd);
    if (s.directory) directories_.release(s.uid, s.id);
    quotas_.release(s.uid, Quota::kSessions);
    quotas_.release(s.uid, Quota::kFds, s.fds);
    sessions_.erase(it);
    return;
  }
  cm_.release(s);
  // Its QPs first, as the kernel's uverbs tears a dead process down: out of the table, then,
  // once no worker holds one it looked up before, forgotten by their workers; only then its
  // regions. Taken out together, a worker could take a packet for a QP it had just looked up
  // and not find the region: a peer writing to a killed process got REM_ACCESS_ERR instead
  // of RETRY_EXC_ERR (verbs_data_test's SIGKILL case, 1 run in many).
  queues_.take_out(s);
  workers_.synchronize();
  queues_.forget_taken();
  memory_.take_out(s);
  if (s.shm)
    for (auto &w : workers_.all()) w->run_between_bursts([&] { w->remove_session(id); });
  if (s.wake_fd >= 0)
    for (auto &w : workers_.all()) w->unwatch_session_wake(s.wake_fd);
  workers_.synchronize();
  queues_.free_taken(s);
  memory_.free_taken();
  queues_.release(s);
  memory_.release(s);
  quotas_.release_all(s.ledger);  // what its objects held, to whoever paid for each
  if (s.shm) quotas_.release(s.uid, Quota::kMappings);
  if (s.directory) directories_.release(s.uid, s.id);  // its entries are all cleared by now
  if (!s.refused) {
    quotas_.release(s.uid, Quota::kSessions);
    quotas_.release(s.uid, Quota::kFds, s.fds);
  } else if (auto w = refused_per_user_.find(s.uid); w != refused_per_user_.end() && !--w->second) {
    refused_per_user_.erase(w);
  }
  sessions_.erase(it);
}

}  // namespace vrnic
