// A session's QP rings, carved out of a few large shared memfds (chunks) rather than one memfd
// and one mapping per QP. 65,536 QPs in one process would otherwise be 65,536 mappings in
// vrnicd and as many in the client, past vm.max_map_count (65,530), and as many memfds (issue
// 29). A chunk is one mapping on each side, charged to the user's mappings quota; the client
// maps it the first time a QP's reply names it. Blocks come in power-of-two sizes with a
// free list each, so a destroyed QP's block serves the next QP of its size; the chunks go
// with the session.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "shared_region.h"

namespace vrnic {

struct RingBlock {
  uint32_t chunk = 0;   // index among the session's chunks
  uint64_t offset = 0;  // in the chunk
  size_t bytes = 0;     // a power of two, at least the size asked for
  void *map = nullptr;  // vrnicd's view of it
};

class RingArena {
 public:
  static constexpr size_t kChunkBytes = size_t(64) << 20;  // sparse until QPs use it
  static constexpr size_t kMinBlock = 1024;

  RingArena() = default;
  ~RingArena();
  RingArena(const RingArena &) = delete;
  RingArena &operator=(const RingArena &) = delete;

  // Whether a block of `bytes` needs a chunk the arena does not have yet (one mapping more,
  // which the caller charges before allocate()). A block larger than a chunk gets a chunk of
  // its own.
  bool needs_chunk(size_t bytes) const;
  // A zeroed block of at least `bytes`.
  absl::StatusOr<RingBlock> allocate(size_t bytes);
  // The block serves another QP; the caller makes sure nothing uses it any more.
  void free(const RingBlock &block);

  size_t chunks() const { return chunks_.size(); }
  int chunk_fd(uint32_t chunk) const { return chunks_[chunk].region.fd; }
  size_t chunk_bytes(uint32_t chunk) const { return chunks_[chunk].region.bytes; }

 private:
  static size_t block_bytes(size_t bytes);
  static uint32_t size_class(size_t block);  // log2

  struct Chunk {
    SharedRegion region;
    size_t used = 0;  // bytes handed out from its start, never given back (free lists are)
  };
  std::vector<Chunk> chunks_;
  std::array<std::vector<RingBlock>, 64> free_;
};

}  // namespace vrnic
