// Device memory: ibv_alloc_dm, ibv_memcpy_to_dm/from_dm, ibv_free_dm, ibv_reg_dm_mr. vrnicd
// allocates it (control/device_memory.cpp) and lends its memfd, which this process maps for
// the copies and keeps open so that the same-host direct path's peers may map its MRs too.
// The rules are mlx5's: copies 4-byte aligned in offset and length (EINVAL), inside the
// allocation (EFAULT); MRs zero based (ibv.addr NULL, IOVA 0 at the MR's offset).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "internal.h"

namespace vrnic::provider {
namespace {

struct Dm {
  ibv_dm ibv;
  uint8_t *map = nullptr;
  size_t map_len = 0;
  uint64_t length = 0;
  int fd = -1;
  static Dm *of(ibv_dm *d) { return outer_of(d, &Dm::ibv); }
};

// Word by word, each word whole (relaxed atomics): a WRITE or an atomic on the memory may
// run at the same time in vrnicd or on the direct path.
int access_dm(Dm *dm, uint64_t offset, uint32_t *host, size_t length, bool read) {
  if (offset > dm->length || length > dm->length - offset) return EFAULT;
  if ((offset & 3) || (length & 3)) return EINVAL;
  auto *words = reinterpret_cast<uint32_t *>(dm->map + offset);
  for (size_t i = 0; i < length / 4; i++) {
    std::atomic_ref<uint32_t> word(words[i]);
    uint32_t v;
    if (read) {
      v = word.load(std::memory_order_relaxed);
      std::memcpy(reinterpret_cast<uint8_t *>(host) + 4 * i, &v, 4);
    } else {
      std::memcpy(&v, reinterpret_cast<const uint8_t *>(host) + 4 * i, 4);
      word.store(v, std::memory_order_relaxed);
    }
  }
  return 0;
}

int memcpy_to_dm(ibv_dm *dm, uint64_t offset, const void *host, size_t length) {
  return access_dm(Dm::of(dm), offset, static_cast<uint32_t *>(const_cast<void *>(host)), length,
                   false);
}

int memcpy_from_dm(void *host, ibv_dm *dm, uint64_t offset, size_t length) {
  return access_dm(Dm::of(dm), offset, static_cast<uint32_t *>(host), length, true);
}

// A DM vrnicd answered for (err 0, its memfd in fds) mapped here; on failure nullptr with
// errno set, and the fds closed.
ibv_dm *map_dm(ibv_context *ctx, int err, std::vector<int> &fds, uint32_t handle,
               uint64_t length, uint64_t map_length) {
  if (!err && fds.size() != 1) err = EPROTO;
  auto *dm = err ? nullptr : new (std::nothrow) Dm{};
  void *map = dm ? ::mmap(nullptr, map_length, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0)
                 : MAP_FAILED;
  if (err || map == MAP_FAILED) {
    if (!err) err = dm ? errno : ENOMEM;
    delete dm;
    for (int fd : fds) ::close(fd);
    return fail_null<ibv_dm>(err);
  }
  dm->ibv.context = ctx;
  dm->ibv.memcpy_to_dm = memcpy_to_dm;
  dm->ibv.memcpy_from_dm = memcpy_from_dm;
  dm->ibv.handle = handle;
  dm->map = static_cast<uint8_t *>(map);
  dm->map_len = map_length;
  dm->length = length;
  dm->fd = fds[0];
  return &dm->ibv;
}

}  // namespace

ibv_dm *alloc_dm(ibv_context *ctx, ibv_alloc_dm_attr *attr) {
  if (!attr) return fail_null<ibv_dm>(EINVAL);
  Context *c = Context::of(ctx);
  ctl::AllocDmReq req{attr->length, attr->log_align_req, attr->comp_mask};
  ctl::AllocDmResp resp{};
  std::vector<int> fds;
  int err = c->conn.call(ctl::Op::kAllocDm, &req, sizeof(req), &resp, sizeof(resp), nullptr, 0,
                         &fds);
  ibv_dm *dm = map_dm(ctx, err, fds, resp.handle, attr->length, resp.map_length);
  if (!dm && resp.handle) {
    const int saved = errno;
    c->call_on(ctl::Op::kFreeDm, resp.handle);
    errno = saved;
  }
  return dm;
}

// ibv_import_dm: the session's DM (ENOENT if none), mapped here too. Not freed by unimport.
ibv_dm *import_dm(ibv_context *ctx, uint32_t handle) {
  ctl::HandleReq req{handle, 0};
  ctl::ImportDmResp resp{};
  std::vector<int> fds;
  int err = Context::of(ctx)->conn.call(ctl::Op::kImportDm, &req, sizeof(req), &resp,
                                        sizeof(resp), nullptr, 0, &fds);
  return map_dm(ctx, err, fds, handle, resp.length, resp.map_length);
}

void unimport_dm(ibv_dm *ibdm) {
  Dm *dm = Dm::of(ibdm);
  ::munmap(dm->map, dm->map_len);
  ::close(dm->fd);
  delete dm;
}

int free_dm(ibv_dm *ibdm) {
  Dm *dm = Dm::of(ibdm);
  if (int err = Context::of(ibdm->context)->call_on(ctl::Op::kFreeDm, ibdm->handle)) return err;
  ::munmap(dm->map, dm->map_len);
  ::close(dm->fd);
  delete dm;
  return 0;
}

ibv_mr *reg_dm_mr(ibv_pd *pd, ibv_dm *ibdm, uint64_t offset, size_t length, unsigned access) {
  // DM MRs are zero based (rdma-core's ibv_cmd_reg_dm_mr says so before the kernel is asked).
  if (!pd || !ibdm || !(access & IBV_ACCESS_ZERO_BASED)) return fail_null<ibv_mr>(EINVAL);
  Dm *dm = Dm::of(ibdm);
  Context *c = Context::of(pd->context);
  ctl::RegDmMrReq req{pd->handle, ibdm->handle, offset, length, access, dm->fd};
  ctl::RegMrResp resp{};
  if (int err = c->conn.call(ctl::Op::kRegDmMr, &req, sizeof(req), &resp, sizeof(resp)))
    return fail_null<ibv_mr>(err);
  auto *mr = new (std::nothrow) Mr{};
  if (!mr) return fail_null<ibv_mr>(ENOMEM);  // vrnicd frees it with the session
  mr->set(pd, nullptr, dm->map + offset, length, 0, int(access), resp);
  direct_publish_mr(c->direct.get(), mr);
  return &mr->ibv;
}

}  // namespace vrnic::provider
