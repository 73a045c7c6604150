// How a connection becomes a session's: Hello (a new session: its pages, its event channel,
// the client's /proc/self/mem) and ImportDevice (a connection that speaks for the session
// whose socket it hands over, ibv_import_device); what both answer (Server::describe_session).
#include <sys/eventfd.h>

#include <cerrno>

#include "client_fds.h"
#include "errno_status.h"
#include "server.h"
#include "shared_region.h"

namespace vrnic {

int Server::hello(Session &s, const ctl::Message &m, ctl::HelloResp &resp, std::vector<int> &fds) {
  auto *req = m.as<ctl::HelloReq>();
  if (!req || m.fds.empty() || m.fds.size() > 2) return EINVAL;
  if (m.fds.size() == 2 && !is_proc_mem(m.fds[1])) return EINVAL;
  if (req->version != ctl::kProtocolVersion) return EPROTONOSUPPORT;
  if (s.shm || s.speaks_for) return EEXIST;
  QuotaCharge map_charge(quotas_, s.uid, Quota::kMappings);
  // What vrnicd keeps of it: the session memfd, its event channel, its wake eventfd and the
  // client's /proc/self/mem.
  const uint32_t fds_kept = 3 + (m.fds.size() == 2 ? 1 : 0);
  QuotaCharge fd_charge(quotas_, s.uid, Quota::kFds, fds_kept);
  if (map_charge.status() || fd_charge.status()) return ENOMEM;
  absl::StatusOr<SharedRegion> region =
      make_shared_region("vrnic-session", sizeof(shm::SessionShared));
  if (!region.ok()) return errno_of(region.status());
  s.shm_fd = region->fd;
  s.shm = static_cast<shm::SessionShared *>(region->map);
  map_charge.keep();  // the session's close releases the region and its mapping
  fd_charge.keep();
  s.fds += fds_kept;
  // A fresh memfd is zeros: its doorbell rings are ready as they are (DoorbellCell).
  s.async_fd = take_event_channel(m.fds[0], s.uid);
  if (s.async_fd < 0) return -s.async_fd;  // the session's close releases the region
  if (m.fds.size() == 2) s.mem_fd = ::dup(m.fds[1]);
  s.caller = s.own();
  if (int err = make_wake(s)) return err;
  for (auto &w : workers_.all()) {
    shm::DoorbellRing *ring = &s.shm->doorbells[w->index()];
    w->execute([&] { w->add_session(s.id, s.uid, ring); });
  }
  describe_session(s, s, resp, fds);
  return 0;
}

void Server::describe_session(Session &s, Session &holder, ctl::HelloResp &resp,
                              std::vector<int> &fds) {
  // What is the session's: its pages. What is the holder's (an importer's own, issue 52): the
  // eventfd it wakes the workers with, the id its poster cells are claimed with, and its own
  // user's direct-path directory -- never the exporter's user's regions and cells.
  resp.version = ctl::kProtocolVersion;
  // The id the client claims direct-path poster cells with: its connection's, so that they
  // are reset when that connection closes (DirectDirectories::release).
  resp.session_id = holder.id;
  resp.device = dev_.info;
  fds.push_back(s.shm_fd);
  fds.push_back(daemon_shm_fd_);
  fds.push_back(holder.wake_fd);
  if (cfg_.direct_path) {
    DirectDirectories::Shared d = directories_.acquire(holder.uid);
    if (d.entries) {
      holder.directory = d.entries;
      resp.directory = 1;
      fds.push_back(d.entries_fd);
      fds.push_back(d.cells_fd);
    }
  }
}

// A connection's wake eventfd, watched by every worker (Worker::watch_session_wake).
int Server::make_wake(Session &s) {
  s.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s.wake_fd < 0) return errno;
  for (auto &w : workers_.all()) w->watch_session_wake(s.wake_fd);
  return 0;
}

// ibv_import_device: the importer hands over the exported context's cmd_fd, the client end
// of that session's socket; the kernel (sock_diag) says which of our sockets it is connected
// to. Holding that fd is the right to use the session, as holding a uverbs fd is in the
// kernel (whoever has it could speak on it directly), so nothing else is asked. From then on
// this connection speaks for that session: objects made or found through it are the
// session's, and the session lasts until its own socket closes, which the importer's copy
// of the fd keeps open, as an imported ibv_context keeps its uverbs file.
int Server::import_device(Session &s, const ctl::Message &m, ctl::HelloResp &resp,
                          std::vector<int> &fds) {
  auto *req = m.as<ctl::HelloReq>();
  if (!req || m.fds.size() != 2) return EINVAL;
  if (req->version != ctl::kProtocolVersion) return EPROTONOSUPPORT;
  if (s.shm || s.speaks_for) return EEXIST;
  const uint64_t peer = unix_peer_inode(m.fds[1]);
  auto exporter = std::find_if(sessions_.begin(), sessions_.end(), [&](const auto &e) {
    return peer && e.second->sock_inode == peer;
  });
  if (exporter == sessions_.end() || !exporter->second->shm) return EINVAL;
  Session &t = *exporter->second;
  QuotaCharge fd_charge(quotas_, s.uid, Quota::kFds, 2);  // its event channel, its wake
  if (fd_charge.status()) return fd_charge.status();
  s.async_fd = take_event_channel(m.fds[0], s.uid);
  if (s.async_fd < 0) return -s.async_fd;
  fd_charge.keep();
  s.fds += 2;
  // Its own wake eventfd: the exporter's is shared by the exporter's process alone (an
  // importer could clear its O_NONBLOCK and fill its counter: the exporter's doorbells would
  // block in write()).
  if (int err = make_wake(s)) return err;
  s.speaks_for = t.id;
  t.importers.insert(s.id);
  describe_session(t, s, resp, fds);
  return 0;
}

}  // namespace vrnic
