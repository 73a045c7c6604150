// Access to a registered region by IOVA: in place through shared pages, else through the
// client's /proc/<pid>/mem; 64-bit atomics (memory_region.h).
#include "memory_region.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace vrnic {

MemoryRegion::~MemoryRegion() {
  for (const Mapping &m : mappings) ::munmap(m.base, m.length);
  if (own_mem_fd >= 0) ::close(own_mem_fd);
}

// The piece holding va, or nullptr: never one that va lies outside of (issue 28, row 1).
const MrPieceMap *MemoryRegion::find_piece(uint64_t va) const {
  auto it = std::upper_bound(pieces.begin(), pieces.end(), va,
                             [](uint64_t v, const MrPieceMap &p) { return v < p.va; });
  if (it == pieces.begin()) return nullptr;
  const MrPieceMap *p = &*(it - 1);
  return va - p->va < p->length ? p : nullptr;
}

namespace {
alignas(64) uint8_t g_zeros[4096];  // what a null MR reads as (never written)
}  // namespace

uint8_t *MemoryRegion::local_span(uint64_t io_addr, uint64_t len) const {
  if (null_mr) return len <= sizeof(g_zeros) ? g_zeros : nullptr;
  if (!contains(io_addr, len)) return nullptr;
  uint64_t va = addr + (io_addr - iova);
  const MrPieceMap *p = find_piece(va);
  if (!p || !p->local || len > p->length - (va - p->va)) return nullptr;
  return p->local + (va - p->va);
}

// Calls fn(piece, va, len) for each piece-contained chunk of the range; false, touching
// nothing, for a range outside the region. Callers check bounds first; this is the last line.
template <typename Fn>
bool MemoryRegion::for_each_chunk(uint64_t io_addr, size_t len, Fn &&fn) const {
  if (!contains(io_addr, len)) return false;
  uint64_t va = addr + (io_addr - iova);
  while (len) {
    const MrPieceMap *p = find_piece(va);
    if (!p) return false;
    size_t n = std::min<uint64_t>(len, p->va + p->length - va);
    if (!fn(*p, va, n)) return false;
    va += n;
    len -= n;
  }
  return true;
}

bool MemoryRegion::read(uint64_t io_addr, void *dst, size_t len) const {
  if (null_mr) {
    std::memset(dst, 0, len);
    return true;
  }
  auto *out = static_cast<uint8_t *>(dst);
  return for_each_chunk(io_addr, len, [&](const MrPieceMap &p, uint64_t va, size_t n) {
    if (p.local) {
      std::memcpy(out, p.local + (va - p.va), n);
    } else {
      if (::pread(mem_fd, out, n, off_t(va)) != ssize_t(n)) return false;
    }
    out += n;
    return true;
  });
}

bool MemoryRegion::write(uint64_t io_addr, const void *src, size_t len) const {
  if (null_mr) return true;
  auto *in = static_cast<const uint8_t *>(src);
  return for_each_chunk(io_addr, len, [&](const MrPieceMap &p, uint64_t va, size_t n) {
    if (p.local) {
      std::memcpy(p.local + (va - p.va), in, n);
    } else {
      if (::pwrite(mem_fd, in, n, off_t(va)) != ssize_t(n)) return false;
    }
    in += n;
    return true;
  });
}

// Atomics are atomic with respect to other vrnic operations (IBV_ATOMIC_HCA): in place with
// a CPU atomic where the page is shared, else read-modify-write by this (the only) worker.
bool MemoryRegion::atomic_cmp_swap(uint64_t io_addr, uint64_t compare, uint64_t swap,
                                   uint64_t *orig) const {
  if (null_mr) return false;
  if (uint8_t *p = local_span(io_addr, 8)) {
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t *>(p));
    uint64_t expected = compare;
    word.compare_exchange_strong(expected, swap);
    *orig = expected;
    return true;
  }
  if (!read(io_addr, orig, 8)) return false;
  return *orig != compare || write(io_addr, &swap, 8);
}

bool MemoryRegion::atomic_fetch_add(uint64_t io_addr, uint64_t add, uint64_t *orig) const {
  if (null_mr) return false;
  if (uint8_t *p = local_span(io_addr, 8)) {
    *orig = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t *>(p)).fetch_add(add);
    return true;
  }
  if (!read(io_addr, orig, 8)) return false;
  uint64_t sum = *orig + add;
  return write(io_addr, &sum, 8);
}

}  // namespace vrnic
