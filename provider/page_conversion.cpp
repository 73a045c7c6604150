// Converting private pages to memfd pages without losing a write (page_conversion.h).
#include "page_conversion.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace vrnic::provider {
namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

// How much is write-protected at once: a writer to it waits about as long as copying it
// takes (some tens of microseconds), and a system call writing into it in that time is what
// an unprivileged userfaultfd fails.
constexpr uint64_t kChunkBytes = 1u << 20;

// A userfaultfd over one range, in write-protect mode. A thread that writes to a protected
// page waits in the kernel until woken (wake(), or the fd's close), then retries its write on
// whatever maps the page by then. We never read its events: nothing here resolves a fault
// but the conversion going on.
class WriteFence {
 public:
  WriteFence() = default;
  WriteFence(const WriteFence &) = delete;
  WriteFence &operator=(const WriteFence &) = delete;
  ~WriteFence() {
    if (fd_ >= 0) ::close(fd_);  // wakes whoever still waits
  }
  bool open(uint64_t start, uint64_t len) {
    // With privilege (root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1) faults from the
    // kernel wait too; without it, only user-mode ones can be fenced.
    fd_ = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd_ < 0 && errno == EPERM)
      fd_ = int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd_ < 0) return false;
    uffdio_api api{UFFD_API, 0, 0};
    if (::ioctl(fd_, UFFDIO_API, &api) < 0 || !(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
      return false;
    uffdio_register reg{{start, len}, UFFDIO_REGISTER_MODE_WP, 0};
    return ::ioctl(fd_, UFFDIO_REGISTER, &reg) == 0;
  }
  bool protect(uint64_t start, uint64_t len) {
    uffdio_writeprotect wp{{start, len}, UFFDIO_WRITEPROTECT_MODE_WP};
    return ::ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) == 0;
  }
  void wake(uint64_t start, uint64_t len) {
    uffdio_range r{start, len};
    ::ioctl(fd_, UFFDIO_WAKE, &r);
  }

 private:
  int fd_ = -1;
};

// Whether the calling thread is its process's only one: then nobody else can write while it
// converts (and nobody can start a thread that would).
bool sole_thread() {
  DIR *d = ::opendir("/proc/self/task");
  if (!d) return false;
  int tasks = 0;
  while (const dirent *e = ::readdir(d))
    if (e->d_name[0] != '.') tasks++;
  ::closedir(d);
  return tasks == 1;
}

// Signals blocked on this thread while it converts: a handler of ours writing into the range
// would wait for a fence only this thread lifts, or write into a page already copied.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace

// libc's mremap is avoided on purpose: the bytes at `to` stay what they were, so to the
// program nothing changed; but libraries that hook libc's memory calls to track mappings
// (UCX's UCM, for its registration cache) would take it for the program unmapping its own
// buffer and drop their registrations of it while the NIC still uses them (issue 18: every
// UCX transport saw zeros instead of the data).
void *remap_over(void *from, size_t len, void *to) {
  return reinterpret_cast<void *>(
      ::syscall(SYS_mremap, from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to));
}

ConvertedPages convert_pages(uint64_t start, uint64_t len, const char *memfd_name) {
  const int fd = ::memfd_create(memfd_name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return {};
  auto *tmp = static_cast<uint8_t *>(MAP_FAILED);
  struct stat st;
  // Sealed at its size: vrnicd maps these pages, and refuses a memfd that could shrink under
  // it (its next access would die of SIGBUS).
  if (::ftruncate(fd, off_t(len)) == 0 &&
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    tmp = static_cast<uint8_t *>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (tmp == MAP_FAILED || ::fstat(fd, &st) < 0) {
    if (tmp != MAP_FAILED) ::munmap(tmp, len);
    ::close(fd);
    return {};
  }
  auto *at = reinterpret_cast<uint8_t *>(start);
  SignalsBlocked blocked;
  WriteFence fence;
  // The fence whenever there is one: besides our threads, vrnicd may be writing here through
  // /proc/<pid>/mem for an on-demand region over the same pages.
  const bool fenced = fence.open(start, len);
  if (!fenced && !sole_thread()) {
    ::munmap(tmp, len);
    ::close(fd);
    return {};
  }
  // Pages never touched get the zero page, so that the fence covers them too (a page with no
  // entry at all would be allocated by a write fault that no fence sees): in one call, or,
  // before Linux 5.14, by reading a byte of each.
  if (fenced && ::madvise(at, len, kMadvPopulateRead) != 0)
    for (uint64_t off = 0; off < len; off += 4096)
      (void)*reinterpret_cast<volatile const uint8_t *>(at + off);
  uint64_t done = 0;
  for (; done < len; done += kChunkBytes) {
    const uint64_t n = std::min<uint64_t>(kChunkBytes, len - done);
    if (fenced && !fence.protect(start + done, n)) break;
    std::memcpy(tmp + done, at + done, n);
    const bool moved = remap_over(tmp + done, n, at + done) != MAP_FAILED;
    if (fenced) fence.wake(start + done, n);
    if (!moved) break;
  }
  if (done < len) ::munmap(tmp + done, len - done);  // what stayed where it was
  if (!done) {
    ::close(fd);
    return {};
  }
  // (A protect or remap the kernel refused half way -- no memory for page tables -- leaves
  // the pages before it converted and the rest as they were: nothing is lost either way.)
  return {fd, uint64_t(st.st_ino), std::min(done, len)};
}

}  // namespace vrnic::provider
