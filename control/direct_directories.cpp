// The users' directories (direct_directories.h).
#include "direct_directories.h"

namespace vrnic {

DirectDirectories::~DirectDirectories() {
  for (auto &[uid, u] : users_) {
    u.entries.release();
    u.cells.release();
  }
}

DirectDirectories::Shared DirectDirectories::acquire(uid_t uid) {
  auto it = users_.find(uid);
  if (it == users_.end()) {
    // Sparse: a page costs memory only once an entry on it is written.
    absl::StatusOr<SharedRegion> entries = make_shared_region(
        "vrnic-directory", sizeof(shm::Directory), ClientAccess::kReadOnly);
    if (!entries.ok()) return {};
    absl::StatusOr<SharedRegion> cells =
        make_shared_region("vrnic-poster-cells", sizeof(shm::PosterCells));
    if (!cells.ok()) {
      entries->release();
      return {};
    }
    it = users_.emplace(uid, User{*entries, *cells, 0}).first;
  }
  User &u = it->second;
  u.sessions++;
  return {static_cast<shm::Directory *>(u.entries.map), u.entries.fd, u.cells.fd};
}

void DirectDirectories::release(uid_t uid, uint32_t session) {
  auto it = users_.find(uid);
  if (it == users_.end()) return;
  User &u = it->second;
  // Written, never read for a decision: whatever a client put in a cell, this only ends a
  // section that cannot go on (its session is gone).
  auto *cells = static_cast<shm::PosterCells *>(u.cells.map);
  for (shm::PosterCell &c : cells->cells) {
    if (c.owner.load(std::memory_order_acquire) != session) continue;
    const uint64_t seq = c.seq.load(std::memory_order_relaxed);
    c.seq.store((seq | 1) + 1, std::memory_order_release);
    c.owner.store(0, std::memory_order_release);
  }
  if (--u.sessions) return;
  u.entries.release();
  u.cells.release();
  users_.erase(it);
}

}  // namespace vrnic
