// mem_hooks: what UCX's memory hooks (UCM) see of ibv_reg_mr. UCM replaces libc's mmap,
// munmap and mremap (by patching their relocations) to learn when a program unmaps memory
// that UCX has registered, and then drops those registrations. This program does the same,
// the simplest way: its own definitions of the three functions take the place of libc's for
// every library in the process, vrnic's libibverbs included. It registers page-aligned
// buffers (the pages vrnic moves into shared memory), and fails if any hooked call touched
// them: a library tracking mappings would have taken it for the program unmapping its buffer
// while the NIC still uses it (issue 18: UCX's transports read zeros). It also checks that
// the bytes survived registration. Exit 0 when nothing was seen and the data is intact.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "first_device.h"

namespace {

// Ranges the hooks saw, as [start, end).
struct Seen {
  uintptr_t start, end;
  const char *call;
};
Seen g_seen[4096];
int g_nseen = 0;

void record(const char *call, const void *addr, size_t len) {
  if (g_nseen < 4096) {
    const auto a = reinterpret_cast<uintptr_t>(addr);
    g_seen[g_nseen++] = {a, a + len, call};
  }
}

}  // namespace

extern "C" {

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (flags & MAP_FIXED) record("mmap(MAP_FIXED)", addr, len);
  return reinterpret_cast<void *>(::syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}

int munmap(void *addr, size_t len) {
  record("munmap", addr, len);
  return int(::syscall(SYS_munmap, addr, len));
}

void *mremap(void *old_addr, size_t old_len, size_t new_len, int flags, ...) {
  void *new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void *);
    va_end(ap);
    record("mremap (target)", new_addr, new_len);
  }
  record("mremap (source)", old_addr, old_len);
  return reinterpret_cast<void *>(
      ::syscall(SYS_mremap, old_addr, old_len, new_len, flags, new_addr));
}

}  // extern "C"

int main() {
  const char *why = "";
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) {
    std::printf("FAIL: %s\n", why);
    return 1;
  }
  ibv_pd *pd = ibv_alloc_pd(ctx);
  if (!pd) {
    std::printf("FAIL: ibv_alloc_pd\n");
    return 1;
  }
  int failures = 0;
  const size_t sizes[] = {4096, 65536, 3 * 4096 + 100};
  for (size_t len : sizes) {
    // Private anonymous pages, as malloc and UCX's memory pools hand out.
    void *p = reinterpret_cast<void *>(::syscall(SYS_mmap, nullptr, len, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto *b = static_cast<uint8_t *>(p);
    for (size_t i = 0; i < len; i++) b[i] = uint8_t(i * 7 + len);
    const int before = g_nseen;
    ibv_mr *mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) {
      std::printf("FAIL: ibv_reg_mr of %zu bytes\n", len);
      failures++;
      continue;
    }
    const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + len;
    int touched = 0;
    for (int i = before; i < g_nseen; i++) {
      if (g_seen[i].start < hi && lo < g_seen[i].end) {
        std::printf("FAIL: ibv_reg_mr of %zu bytes at %p called %s on [%#lx, %#lx)\n", len, p,
                    g_seen[i].call, static_cast<unsigned long>(g_seen[i].start),
                    static_cast<unsigned long>(g_seen[i].end));
        touched++;
      }
    }
    size_t wrong = 0;
    for (size_t i = 0; i < len; i++) wrong += b[i] != uint8_t(i * 7 + len);
    if (wrong) std::printf("FAIL: %zu bytes changed by registration\n", wrong);
    std::printf("%zu bytes: %d hooked calls on the buffer, %zu bytes changed\n", len, touched,
                wrong);
    failures += touched + (wrong != 0);
    ibv_dereg_mr(mr);
  }
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return failures ? 1 : 0;
}
