// XRC domains (ibv_open_xrcd, ibv_close_xrcd), as the kernel's uverbs keeps them: a domain
// opened with a file is that file's (its device and inode), and everyone on this vrnicd who
// opens the same file, in any process, gets the same domain, so that the XRC target QPs of one
// process deliver to the XRC SRQs of another; opened without one, it is that open's alone.
// Each open is a handle of its session's; the SRQs and target QPs made through it hold it
// (ibv_close_xrcd is EBUSY while any is there), and the domain lasts while any open does.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "queue_objects.h"

namespace vrnic {

// A session may hold this many opens (each costs vrnicd a few bytes, never an fd).
constexpr size_t kMaxXrcdOpensPerSession = 4096;

int QueueObjects::open_xrcd(Session &s, const ctl::Message &m, ctl::HandleResp &resp) {
  const auto *req = m.as<ctl::OpenXrcdReq>();
  if (!req || m.fds.size() > 1) return EINVAL;
  if (s.xrcds.size() >= kMaxXrcdOpensPerSession) return ENOMEM;
  uint32_t domain = 0;
  XrcFile file{};
  if (m.fds.size() == 1) {
    // The caller must have opened the file: an O_PATH descriptor names a file it may be
    // unable to open (another user's 0600 one, issue 52 row 6), and the kernel's fdget()
    // refuses it with EBADF as well.
    const int flags = ::fcntl(m.fds[0], F_GETFL);
    struct stat st;
    if (flags < 0 || (flags & O_PATH) || ::fstat(m.fds[0], &st) < 0) return EBADF;
    file = {uint64_t(st.st_dev), uint64_t(st.st_ino)};
    auto known = xrc_domain_by_file_.find(file);
    // As ib_uverbs_open_xrcd answers: EAGAIN when none is open and O_CREAT was not given,
    // EINVAL when one is and O_EXCL was.
    if (known == xrc_domain_by_file_.end() && !(req->oflags & O_CREAT)) return EAGAIN;
    if (known != xrc_domain_by_file_.end() && (req->oflags & O_EXCL)) return EINVAL;
    if (known != xrc_domain_by_file_.end()) domain = known->second;
  }
  if (!domain) {
    do {
      domain = ++next_xrc_domain_;
    } while (!domain || xrc_domains_.contains(domain));  // 0 names none (ReceiveQueue::xrcd)
    xrc_domains_[domain] = {file, m.fds.size() == 1, 0};
    if (m.fds.size() == 1) xrc_domain_by_file_[file] = domain;
  }
  uint32_t handle;
  do {
    handle = ++next_xrcd_open_;
  } while (!handle || xrcd_opens_.contains(handle));
  xrc_domains_[domain].opens++;
  xrcd_opens_[handle] = {s.id, domain, 0};
  s.xrcds.insert(handle);
  resp.handle = handle;
  return 0;
}

int QueueObjects::close_xrcd(Session &s, uint32_t handle) {
  if (!owns(s.xrcds, handle)) return EINVAL;
  if (xrcd_opens_[handle].objects) return EBUSY;
  drop_xrcd_open(handle);
  s.xrcds.erase(handle);
  return 0;
}

void QueueObjects::drop_xrcd_open(uint32_t handle) {
  auto open = xrcd_opens_.find(handle);
  auto domain = xrc_domains_.find(open->second.domain);
  if (--domain->second.opens == 0) {
    if (domain->second.has_file) xrc_domain_by_file_.erase(domain->second.file);
    xrc_domains_.erase(domain);
  }
  xrcd_opens_.erase(open);
}

uint32_t QueueObjects::xrcd_domain(const Session &s, uint32_t handle) const {
  if (!owns(s.xrcds, handle)) return 0;
  return xrcd_opens_.at(handle).domain;
}

void QueueObjects::hold_xrcd(uint32_t handle, int delta) {
  xrcd_opens_.at(handle).objects += uint32_t(delta);
}

// A closing session's objects are all gone by now: its opens go, and a domain no one else
// has open with them.
void QueueObjects::release_xrcds(Session &s) {
  for (uint32_t h : s.xrcds) drop_xrcd_open(h);
  s.xrcds.clear();
}

}  // namespace vrnic
