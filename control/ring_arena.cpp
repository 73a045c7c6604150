// A session's QP rings in a few shared chunks (ring_arena.h).
#include "ring_arena.h"

#include <bit>
#include <cstring>

namespace vrnic {

RingArena::~RingArena() {
  for (Chunk &c : chunks_) c.region.release();
}

size_t RingArena::block_bytes(size_t bytes) { return std::bit_ceil(std::max(bytes, kMinBlock)); }

uint32_t RingArena::size_class(size_t block) { return uint32_t(std::countr_zero(block)); }

bool RingArena::needs_chunk(size_t bytes) const {
  const size_t block = block_bytes(bytes);
  if (!free_[size_class(block)].empty()) return false;
  return chunks_.empty() || block > kChunkBytes || chunks_.back().used + block > chunks_.back().region.bytes;
}

absl::StatusOr<RingBlock> RingArena::allocate(size_t bytes) {
  const size_t block = block_bytes(bytes);
  std::vector<RingBlock> &free_list = free_[size_class(block)];
  if (!free_list.empty()) {
    RingBlock b = free_list.back();
    free_list.pop_back();
    std::memset(b.map, 0, b.bytes);  // a QP's rings start empty
    return b;
  }
  if (needs_chunk(bytes)) {
    absl::StatusOr<SharedRegion> region = make_shared_region("vrnic-qp", std::max(block, kChunkBytes));
    if (!region.ok()) return region.status();
    chunks_.push_back({*region, 0});
  }
  Chunk &c = chunks_.back();
  // Fresh pages of a new memfd: zeros already, and untouched until the QP uses them.
  RingBlock b{uint32_t(chunks_.size() - 1), c.used, block, static_cast<uint8_t *>(c.region.map) + c.used};
  c.used += block;
  return b;
}

void RingArena::free(const RingBlock &block) { free_[size_class(block.bytes)].push_back(block); }

}  // namespace vrnic
