// Gather and scatter between SGE lists and packets, every piece checked against its MR
// (sge_io.h).
#include "sge_io.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

namespace vrnic {
namespace {

const MemoryRegion *local_mr(const Device &dev, const SgeList &list, const shm::Sge &sge,
                             bool need_write) {
  const MemoryRegion *mr = dev.mr_by_key(sge.lkey);
  if (!mr || mr->pd != list.pd) return nullptr;
  if (need_write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return nullptr;
  return mr;
}

template <typename Fn>
int walk(const Device &dev, const SgeList &list, SgeCursor &cur, uint32_t len, bool need_write,
         Fn &&fn) {
  while (len) {
    if (cur.index >= list.count) return IBV_WC_LOC_LEN_ERR;
    const shm::Sge &sge = list.sge[cur.index];
    if (cur.offset >= sge.length) {
      cur.index++;
      cur.offset = 0;
      continue;
    }
    uint32_t n = std::min(len, sge.length - cur.offset);
    const MemoryRegion *mr = local_mr(dev, list, sge, need_write);
    uint64_t addr = sge.addr + cur.offset;
    if (!mr || !mr->contains(addr, n)) return IBV_WC_LOC_PROT_ERR;
    if (!fn(*mr, addr, n)) return IBV_WC_LOC_PROT_ERR;
    cur.offset += n;
    len -= n;
  }
  return 0;
}

}  // namespace

SgeCursor sge_seek(const SgeList &list, uint64_t offset) {
  SgeCursor cur;
  while (cur.index < list.count && offset >= list.sge[cur.index].length) {
    offset -= list.sge[cur.index].length;
    cur.index++;
  }
  cur.offset = uint32_t(offset);
  return cur;
}

int sge_scatter(const Device &dev, const SgeList &list, SgeCursor &cur, const uint8_t *src,
                uint32_t len) {
  return walk(dev, list, cur, len, true, [&](const MemoryRegion &mr, uint64_t addr, uint32_t n) {
    bool ok = mr.write(addr, src, n);
    src += n;
    return ok;
  });
}

int sge_gather(const Device &dev, const SgeList &list, SgeCursor &cur, uint8_t *dst, uint32_t len) {
  return walk(dev, list, cur, len, false, [&](const MemoryRegion &mr, uint64_t addr, uint32_t n) {
    bool ok = mr.read(addr, dst, n);
    dst += n;
    return ok;
  });
}

const uint8_t *sge_reference(const Device &dev, const SgeList &list, SgeCursor &cur, uint32_t len) {
  uint32_t index = cur.index, offset = cur.offset;
  while (index < list.count && offset >= list.sge[index].length) {
    index++;
    offset = 0;
  }
  if (index >= list.count) return nullptr;
  const shm::Sge &sge = list.sge[index];
  if (sge.length - offset < len) return nullptr;
  const MemoryRegion *mr = local_mr(dev, list, sge, false);
  uint64_t addr = sge.addr + offset;
  if (!mr || !mr->contains(addr, len)) return nullptr;
  const uint8_t *p = mr->local_span(addr, len);
  if (!p) return nullptr;
  // Written back in one store: the caller copies the cursor at once as one 8-byte word, which
  // two 4-byte stores could not hand on (the load would wait for them to reach the cache).
  static_assert(sizeof(SgeCursor) == 8 && offsetof(SgeCursor, offset) == 4 &&
                std::endian::native == std::endian::little);
  const uint64_t both = uint64_t(offset + len) << 32 | index;
  std::memcpy(static_cast<void *>(&cur), &both, sizeof(both));
  return p;
}

int sge_validate(const Device &dev, const SgeList &list, bool need_write, uint64_t *total) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < list.count; i++) {
    const shm::Sge &sge = list.sge[i];
    sum += sge.length;
    if (!sge.length) continue;
    const MemoryRegion *mr = local_mr(dev, list, sge, need_write);
    if (!mr || !mr->contains(sge.addr, sge.length)) return IBV_WC_LOC_PROT_ERR;
  }
  *total = sum;
  return 0;
}

}  // namespace vrnic
