// A registered memory region as vrnicd sees it: the "DMA engine" view of a client's buffer.
// Most of a region is reached in place through memfd pages shared with the client (zero
// copy); pieces the provider could not share safely (partial pages, stacks, shared mappings)
// are reached with process_vm_readv/writev. Every access is by IOVA and bounds-checked.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "vrnic/direct_directory.h"

namespace vrnic {

struct MrPieceMap {
  uint64_t va;  // client virtual address of the piece
  uint64_t length;
  uint8_t *local;  // our mapping of va, or nullptr: reach it through process_vm_*
};

struct Mapping {
  void *base;
  size_t length;
};

class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(const MemoryRegion &) = delete;
  MemoryRegion &operator=(const MemoryRegion &) = delete;
  ~MemoryRegion();

  uint32_t handle = 0;
  uint32_t key = 0;  // lkey == rkey: table index << 8 | generation byte
  uint32_t pd = 0;
  uint32_t access = 0;
  uint32_t session = 0;
  uint32_t payer = 0;  // the uid charged for it (control/session.h: Session::pay)
  // The client's /proc/self/mem (its session's, open while the MR lives), for pieces not
  // mapped here: bound to that process's memory, it reads nothing once the process is gone.
  int mem_fd = -1;
  int own_mem_fd = -1;  // a forked child's /proc/self/mem (its MRs), closed with the region
  uint64_t addr = 0;  // client VA of the first byte
  uint64_t iova = 0;  // address the region is accessed by
  uint64_t length = 0;
  // What its user's direct-path directory says of it once it has a key (control/
  // memory_objects.cpp): only for a region with one memfd piece (a pointer: a million null
  // MRs are not made bigger by it).
  std::unique_ptr<shm::DirectoryMr> direct;
  // ibv_alloc_null_mr: reads give zeros, writes are dropped, any address is in range.
  bool null_mr = false;
  // IBV_ACCESS_ON_DEMAND: one piece, reached through mem_fd as the client's page tables are
  // at each access; nothing pinned, so nothing of it counts as mr_bytes (nor does a DM MR's
  // memory, which its device memory was charged for).
  bool on_demand = false;
  // ibv_reg_dm_mr: the device memory (control/device_memory.cpp) it is part of, or 0. Its
  // piece is a mapping of that memory of its own.
  uint32_t dm = 0;
  uint64_t pinned_bytes() const { return on_demand || dm ? 0 : length; }  // (a DM's own: charged once)
  // Windows bound to it (bound and unbound by the workers of the QPs that post the binds):
  // deregistration is refused while any is.
  std::atomic<uint32_t> bound_windows{0};
  std::vector<MrPieceMap> pieces;  // sorted, covering [addr, addr + length)
  std::vector<Mapping> mappings;   // unmapped on destruction

  bool contains(uint64_t io_addr, uint64_t len) const {
    return null_mr || (io_addr >= iova && len <= length && io_addr - iova <= length - len);
  }
  // A pointer to [io_addr, io_addr + len) if it lies in one locally mapped piece.
  uint8_t *local_span(uint64_t io_addr, uint64_t len) const;
  // Copies between the region and our memory; false if the client memory is unreachable.
  bool read(uint64_t io_addr, void *dst, size_t len) const;
  bool write(uint64_t io_addr, const void *src, size_t len) const;
  // 64-bit atomics on an 8-byte aligned address; false when unreachable.
  bool atomic_cmp_swap(uint64_t io_addr, uint64_t compare, uint64_t swap, uint64_t *orig) const;
  bool atomic_fetch_add(uint64_t io_addr, uint64_t add, uint64_t *orig) const;

 private:
  const MrPieceMap *find_piece(uint64_t va) const;
  template <typename Fn>
  bool for_each_chunk(uint64_t io_addr, size_t len, Fn &&fn) const;
};

}  // namespace vrnic
