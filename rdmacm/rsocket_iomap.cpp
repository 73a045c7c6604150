// riomap, riounmap and riowrite: RDMA WRITEs into the memory a stream rsocket's peer mapped,
// in order with the stream (one RC QP).
#include <arpa/inet.h>
#include <endian.h>
#include <sys/mman.h>

#include <algorithm>

#include "internal.h"
#include "rsocket_dgram.h"
#include "rsocket_stream.h"

using vrnic::rdmacm::fail;
using namespace vrnic::rdmacm::stream;
namespace dgram = vrnic::rdmacm::dgram;

extern "C" {

// As rdma-core's: a connected socket, PROT_WRITE (or PROT_NONE: registered, not writable by
// the peer), no flags; offset -1 lets the library choose (the buffer's address).
RDMACM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset) {
  if (dgram::find(socket)) return fail(EOPNOTSUPP);  // streams only, as rdma-core's
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  if (rs->state != State::kConnected || !buf || !len || flags || (prot & ~PROT_WRITE) ||
      offset < -1)
    return fail(EINVAL);
  const int access = IBV_ACCESS_LOCAL_WRITE | ((prot & PROT_WRITE) ? IBV_ACCESS_REMOTE_WRITE : 0);
  ibv_mr *mr = ibv_reg_mr(rs->id->qp->pd, buf, len, access);
  if (!mr) return -1;
  if (offset == -1) offset = off_t(reinterpret_cast<uintptr_t>(buf));
  const IoMapMsg m{htobe64(uint64_t(offset)), htobe64(reinterpret_cast<uintptr_t>(buf)),
                   htobe64(len), htonl((prot & PROT_WRITE) ? mr->rkey : 0), 0};
  int err = block_until(rs, false, [&] { return !rs->free_send.empty() || rs->peer_done; });
  if (!err && rs->peer_done) err = rs->error ? rs->error : EPIPE;
  if (!err && send_chunk(rs, reinterpret_cast<const uint8_t *>(&m), sizeof(m), kIoMap) != 0)
    err = EIO;
  if (err) {
    ibv_dereg_mr(mr);
    return fail(err);
  }
  rs->local_maps.push_back({buf, len, mr});
  return offset;
}

// Ours only: the peer is not told, and a riowrite of its into it then fails its connection,
// as with rdma-core's.
RDMACM_EXPORT int riounmap(int socket, void *buf, size_t len) {
  Rs *rs = find(socket);
  if (!rs) return fail(ENOTSOCK);
  for (auto it = rs->local_maps.begin(); it != rs->local_maps.end(); ++it) {
    if (it->buf != buf || it->len != len) continue;
    ibv_dereg_mr(it->mr);
    rs->local_maps.erase(it);
    return 0;
  }
  return fail(EINVAL);
}

// count bytes at `offset` of the peer's riomap'ed memory; what was written, or -1 (as
// size_t) and errno: EINVAL when no mapping of the peer's covers the offset (or is writable).
RDMACM_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags) {
  if (dgram::find(socket)) return size_t(fail(EOPNOTSUPP));
  Rs *rs = find(socket);
  if (!rs) return size_t(fail(ENOTSOCK));
  if (rs->state != State::kConnected)
    return size_t(fail(rs->state == State::kFailed ? rs->error : ENOTCONN));
  if (rs->shut_wr) return size_t(fail(EPIPE));
  const bool nb = rs->nonblocking || (flags & MSG_DONTWAIT);
  const auto *p = static_cast<const uint8_t *>(buf);
  size_t done = 0;
  while (done < count) {
    int err = block_until(rs, nb, [&] { return !rs->free_send.empty() || rs->peer_done; });
    if (rs->peer_done) err = rs->error ? rs->error : EPIPE;
    const uint64_t at = uint64_t(offset) + done;
    const IoMapMsg *map = nullptr;
    for (const IoMapMsg &m : rs->remote_maps)
      if (m.rkey && at >= m.offset && at - m.offset < m.len) map = &m;
    if (!err && !map) err = EINVAL;
    if (err) return done ? done : size_t(fail(err));
    const uint32_t n = uint32_t(
        std::min<uint64_t>({count - done, uint64_t(kSlotBytes), map->len - (at - map->offset)}));
    if (send_chunk(rs, p + done, n, 0, map->addr + (at - map->offset), map->rkey) != 0)
      return done ? done : size_t(fail(EIO));
    done += n;
  }
  return done;
}

}  // extern "C"
