// The direct path to other processes of the same user (direct_peers.h).
#include "direct_peers.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <new>
#include <set>

#include "direct_path.h"
#include "direct_section.h"

namespace vrnic::provider {
namespace {

// A thread's poster cell, in the directory of one DirectPeers (by its id: an address may be
// reused by the next context). Given back when the thread exits, if that context is still
// open and this is the process that claimed it (a forked child's copy is not its own: the
// child takes the worker path only, direct_path.cpp); otherwise vrnicd frees it with the
// session.
std::mutex g_live_mu;
std::set<uint64_t> g_live;  // ids of the DirectPeers that are open
std::atomic<uint64_t> g_next_id{1};
std::atomic<bool> g_in_child{false};  // set in a forked child (no getpid() per operation)

struct PosterClaim {
  uint64_t owner = 0;
  shm::PosterCell *cell = nullptr;
  uint64_t refused = 0;  // a context this thread found no cell in (or holds one elsewhere)
  ~PosterClaim() {
    if (!cell || g_in_child.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(g_live_mu);
    if (g_live.count(owner)) cell->owner.store(0, std::memory_order_release);
  }
};
thread_local PosterClaim t_claim;

size_t page_size() { return size_t(::sysconf(_SC_PAGESIZE)); }

}  // namespace

std::unique_ptr<DirectPeers> DirectPeers::open(int entries_fd, int cells_fd, uint32_t session) {
  void *dir = ::mmap(nullptr, sizeof(shm::Directory), PROT_READ, MAP_SHARED, entries_fd, 0);
  void *cells = ::mmap(nullptr, sizeof(shm::PosterCells), PROT_READ | PROT_WRITE, MAP_SHARED,
                       cells_fd, 0);
  ::close(entries_fd);
  ::close(cells_fd);
  std::unique_ptr<DirectPeers> p(new (std::nothrow) DirectPeers);
  if (!p || dir == MAP_FAILED || cells == MAP_FAILED) {
    if (dir != MAP_FAILED) ::munmap(dir, sizeof(shm::Directory));
    if (cells != MAP_FAILED) ::munmap(cells, sizeof(shm::PosterCells));
    return nullptr;
  }
  p->dir_ = static_cast<const shm::Directory *>(dir);
  p->cells_ = static_cast<shm::PosterCells *>(cells);
  p->session_ = session;
  p->id_ = g_next_id.fetch_add(1);
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    ::pthread_atfork(nullptr, nullptr, [] { g_in_child.store(true, std::memory_order_relaxed); });
  });
  std::lock_guard lock(g_live_mu);
  g_live.insert(p->id_);
  return p;
}

DirectPeers::~DirectPeers() {
  {
    std::lock_guard lock(g_live_mu);
    g_live.erase(id_);
  }
  mrs_.for_each([](PeerMr *m) {
    if (m->map) ::munmap(m->map, m->map_len);
    delete m;
  });
  ::munmap(const_cast<shm::Directory *>(dir_), sizeof(shm::Directory));
  ::munmap(cells_, sizeof(shm::PosterCells));
}

shm::PosterCell *DirectPeers::my_cell() {
  if (t_claim.owner == id_) return t_claim.cell;
  if (t_claim.refused == id_ || g_in_child.load(std::memory_order_relaxed)) return nullptr;
  if (t_claim.cell) {
    // Its cell is another context's: kept while that one is open (the thread takes the
    // worker path here), forgotten once it closed (vrnicd reset it with the session).
    std::lock_guard lock(g_live_mu);
    if (g_live.count(t_claim.owner)) {
      t_claim.refused = id_;
      return nullptr;
    }
    t_claim.cell = nullptr;
  }
  t_claim.owner = id_;
  for (shm::PosterCell &c : cells_->cells) {
    uint32_t expected = 0;
    if (c.owner.compare_exchange_strong(expected, session_)) return t_claim.cell = &c;
  }
  t_claim.refused = id_;
  return nullptr;
}

void DirectPeers::synchronize() { wait_for_sections(cells_->cells, shm::kPosterCells); }

void DirectPeers::map(const PeerMrWanted &want) {
  std::lock_guard lock(map_mu_);
  const shm::DirectoryMr &e = want.entry;
  if (mapped(want.handle, e.key, want.version)) return;  // another thread was first
  auto *m = new (std::nothrow) PeerMr{e.key, want.version};
  if (!m) return;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/fd/%u", e.pid, e.fd);
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  // The file must be the memfd vrnicd was given (the owner could have closed the number
  // and reused it, or died and its PID gone to another process), sealed against shrinking
  // (an access past its end would be SIGBUS here) and long enough.
  if (fd >= 0 && ::fstat(fd, &st) == 0 && uint64_t(st.st_ino) == e.inode &&
      uint64_t(st.st_dev) == e.device &&
      (::fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK) && e.length &&
      e.fd_offset + e.length <= uint64_t(st.st_size)) {
    const uint64_t start = e.fd_offset & ~uint64_t(page_size() - 1);
    const size_t len = size_t(e.fd_offset + e.length - start);
    void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(start));
    if (p != MAP_FAILED) {
      m->map = p;
      m->map_len = len;
      m->base = static_cast<uint8_t *>(p) + (e.fd_offset - start);
    }
  }
  if (fd >= 0) ::close(fd);
  auto unmap = [](PeerMr *x) {
    if (x->map) ::munmap(x->map, x->map_len);
    delete x;
  };
  PeerMr *old = mrs_.exchange(want.handle, m);
  if (old == m) return unmap(m);  // no room in the table: nothing published
  if (old) {
    direct_synchronize();  // no section of this process still copies through it
    unmap(old);
  }
}

}  // namespace vrnic::provider
