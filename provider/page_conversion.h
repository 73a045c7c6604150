// Turning a buffer's private pages into memfd pages at the same address: ibv_reg_mr's "DMA
// mapping", which lets vrnicd and the same-host direct path map them (memory.cpp).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace vrnic::provider {

#ifdef MADV_POPULATE_READ
inline constexpr int kMadvPopulateRead = MADV_POPULATE_READ;
#else
inline constexpr int kMadvPopulateRead = 22;  // Linux 5.14's, where the headers are older
#endif

// A memfd made of [start, start+len) (whole pages of one private anonymous, writable
// mapping), now mapped there in place of the old pages, the same bytes in it; fd -1 when the
// range could not be converted without risking a write (the caller reaches it another way),
// and what was converted (from start) when the kernel refused the rest.
// Every write another thread makes meanwhile lands (issue 53): each chunk of the range is
// write-protected with a userfaultfd while it is copied and remapped, so a writer waits, a
// few microseconds, and then writes into the new page. Without privilege, only writes from
// user mode wait: a system call writing into a chunk being converted fails with EFAULT. With
// no userfaultfd at all (seccomp, an old kernel) only a process's sole thread converts.
// What no fence holds: a writer that took the page before the fence and writes through its
// own reference -- O_DIRECT or io_uring reads into the buffer, another process's
// process_vm_writev, vrnicd writing an on-demand region over the same pages -- and finishes
// after the copy: as with any page a program registers while a device writes into it.
struct ConvertedPages {
  int fd = -1;
  uint64_t inode = 0;
  uint64_t bytes = 0;  // from start: all of len, or (the kernel short of memory) less
};
ConvertedPages convert_pages(uint64_t start, uint64_t len, const char *memfd_name);

// Moves the mapping at `from` over [to, to+len): a system call of our own, not libc's
// mremap (see page_conversion.cpp).
void *remap_over(void *from, size_t len, void *to);

}  // namespace vrnic::provider
