// PDs, MRs and MWs of one device (memory_objects.h).
#include "memory_objects.h"

#include "client_fds.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace vrnic {
namespace {

constexpr uint32_t kValidAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                  IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                  IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_ON_DEMAND;

// How far a reused slot's key byte moves: 1 to 255 at random, so that the key of a new MR or
// window cannot be told from the keys seen before it (issue 17, row 2) and never equals the
// slot's previous key.
uint8_t random_key_step() {
  return uint8_t(1 + ::arc4random_uniform(255));
}

}  // namespace

// Maps [fd_offset, fd_offset + length) of a memfd into `mr` (one of its mappings) and points
// `piece` at it; what fstat says of it in *file. Only a memfd sealed against shrinking:
// vrnicd's access to a page cut off would die of SIGBUS (issue 17, row 4). Other files have
// no seals at all.
int MemoryObjects::map_memfd(int fd, uint64_t fd_offset, uint64_t length, MemoryRegion &mr,
                             MrPieceMap &piece, struct stat *file) {
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) return EINVAL;
  struct stat &st = *file;
  if (::fstat(fd, &st) < 0 || fd_offset + length > uint64_t(st.st_size) ||
      fd_offset + length < fd_offset)
    return EINVAL;
  uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  uint64_t base = fd_offset & ~(page - 1);
  size_t len = size_t(fd_offset + length - base);
  void *map = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(base));
  if (map == MAP_FAILED) return errno;
  mr.mappings.push_back({map, len});
  piece.local = static_cast<uint8_t *>(map) + (fd_offset - base);
  return 0;
}

int MemoryObjects::alloc_pd(Session &s, ctl::HandleResp &resp) {
  if (pds_.size() >= dev_.capacity.pds) return ENOMEM;
  QuotaCharge charge = s.pay(quotas_, Quota::kPds);
  if (charge.status()) return charge.status();
  uint32_t h = pds_.insert(std::make_unique<ProtectionDomain>(ProtectionDomain{s.id, s.payer()}));
  if (!h) return ENOMEM;
  charge.keep();
  s.pds.insert(h);
  resp.handle = h;
  return 0;
}

int MemoryObjects::dealloc_pd(Session &s, uint32_t handle) {
  ProtectionDomain *pd = pds_.get(handle);
  if (!pd || pd->session != s.id) return EINVAL;
  if (pd->refs) return EBUSY;
  s.refund(quotas_, pd->payer, Quota::kPds);
  pds_.remove(handle);
  s.pds.erase(handle);
  return 0;
}

int MemoryObjects::reg_mr(Session &s, const ctl::Message &m, ctl::RegMrResp &resp) {
  // The request carries only the pieces it uses.
  if (m.header.length < offsetof(ctl::RegMrReq, pieces)) return EINVAL;
  auto *req = reinterpret_cast<const ctl::RegMrReq *>(m.body);
  if (req->npieces == 0 || req->npieces > ctl::kMaxMrPieces ||
      m.header.length < offsetof(ctl::RegMrReq, pieces) + req->npieces * sizeof(ctl::MrPiece))
    return EINVAL;
  ProtectionDomain *pd = pds_.get(req->pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if ((req->access & ~kValidAccess) || req->length == 0) return EINVAL;
  if ((req->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(req->access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  // On-demand paging: the region is the client's address space as it is at each access
  // (its /proc/self/mem), never mapped or pinned here; so nothing is probed, and, as the
  // kernel does not count ODP against RLIMIT_MEMLOCK, nothing is charged as mr_bytes. An
  // implicit region (ibv_reg_mr(pd, NULL, SIZE_MAX, ...)) is the whole address space.
  const bool on_demand = req->access & IBV_ACCESS_ON_DEMAND;
  const bool implicit = on_demand && req->addr == 0 && req->length == UINT64_MAX;
  // Whose memory the pieces outside memfds are: the caller's, always (issue 52) -- a forked
  // child's own or an imported context's, sent with the request, or the session's opener's
  // when it is the caller. An importer's connection has none of its own: it sends its own.
  int mem_fd = s.caller.mem_fd;
  if (req->own_mem) {
    if (m.fds.empty() || !is_proc_mem(m.fds.back())) return EINVAL;
    mem_fd = m.fds.back();
  }
  if (on_demand && (mem_fd < 0 || req->npieces != 1 ||
                    req->pieces[0].kind != uint32_t(ctl::PieceKind::kProcessVm) ||
                    (implicit && req->iova != 0)))
    return EINVAL;
  // (max_mr_size is bounded by the user's mr_bytes, which ODP does not take.)
  if ((req->length > dev_.info.max_mr_size && !on_demand) || dev_.mrs.size() >= dev_.capacity.mrs)
    return ENOMEM;
  auto mr = std::make_unique<MemoryRegion>();
  mr->pd = req->pd;
  mr->access = req->access;
  mr->session = s.id;
  mr->payer = s.payer();
  if (req->own_mem) {
    mr->own_mem_fd = ::fcntl(mem_fd, F_DUPFD_CLOEXEC, 0);
    if (mr->own_mem_fd < 0) return errno;
    mem_fd = mr->own_mem_fd;
  }
  mr->mem_fd = mem_fd;
  mr->addr = req->addr;
  mr->iova = req->iova;
  mr->length = req->length;
  mr->on_demand = on_demand;
  // Each memfd piece is a mapping in vrnicd: one-byte pieces on pages of their own took
  // vrnicd to the kernel's mapping limit for 65 KB of mr_bytes (issue 28, row 7).
  uint64_t maps = 0;
  for (uint32_t i = 0; i < req->npieces; i++) maps += req->pieces[i].kind == uint32_t(ctl::PieceKind::kMemfd);
  QuotaCharge map_charge = s.pay(quotas_, Quota::kMappings, maps);
  QuotaCharge fd_charge = s.pay(quotas_, Quota::kFds, req->own_mem ? 1 : 0);  // own_mem_fd
  if (map_charge.status() || fd_charge.status()) return ENOMEM;
  uint64_t expect = req->addr;
  for (uint32_t i = 0; i < req->npieces; i++) {
    const ctl::MrPiece &p = req->pieces[i];
    if (p.va != expect || p.length == 0) return EINVAL;
    expect += p.length;
    MrPieceMap piece{p.va, p.length, nullptr};
    if (p.kind == uint32_t(ctl::PieceKind::kMemfd)) {
      if (p.fd_index >= m.fds.size()) return EINVAL;
      struct stat file {};
      if (int err = map_memfd(m.fds[p.fd_index], p.fd_offset, p.length, *mr, piece, &file))
        return err;
      // The direct path: a poster of the same user may map this piece too, if it is the
      // region's only memfd piece (between the partial pages at its ends, if any), from the
      // process that registered it (its fd there).
      if (maps == 1 && p.client_fd >= 0 && publishes_direct(s))
        mr->direct.reset(new shm::DirectoryMr{0, req->pd, req->access, uint32_t(s.caller.pid),
                                              uint32_t(p.client_fd), 0, uint64_t(file.st_ino),
                                              uint64_t(file.st_dev), p.fd_offset,
                                              req->iova + (p.va - req->addr), p.length});
    } else if (p.kind == uint32_t(ctl::PieceKind::kProcessVm)) {
      // Through the client's own /proc/self/mem: is the memory there? (On demand: whenever
      // it is reached.)
      uint8_t probe;
      if (!on_demand && (mem_fd < 0 || ::pread(mem_fd, &probe, 1, off_t(p.va)) != 1))
        return EFAULT;
    } else {
      return EINVAL;
    }
    mr->pieces.push_back(piece);
  }
  if (expect != req->addr + req->length) return EINVAL;
  // Charged like the kernel's pinned memory (RLIMIT_MEMLOCK): what vrnicd maps or reaches
  // for the user, so that sparse memfds cannot take vrnicd's address space (issue 17, row 8).
  QuotaCharge byte_charge = s.pay(quotas_, Quota::kMrBytes, mr->pinned_bytes());
  if (byte_charge.status()) return byte_charge.status();
  if (int err = req->replaces ? replace_mr(s, req->replaces, std::move(mr), resp)
                              : insert_mr(s, std::move(mr), resp))
    return err;
  map_charge.keep();
  byte_charge.keep();
  fd_charge.keep();
  return 0;
}

int MemoryObjects::insert_mr(Session &s, std::unique_ptr<MemoryRegion> mr, ctl::RegMrResp &resp) {
  QuotaCharge charge = s.pay(quotas_, Quota::kMrs);
  if (charge.status()) return charge.status();
  uint32_t key = 0;
  const uint32_t pd = mr->pd;
  // Published complete, with no worker stopped: a worker finds it only by its key, which the
  // client learns from this reply (issue 29).
  const uint32_t handle = dev_.mrs.insert(std::move(mr), random_key_step(),
                                          [&](MemoryRegion &m, uint32_t h, uint8_t generation) {
                                            m.handle = h;
                                            m.key = key = h << 8 | generation;
                                          });
  if (!handle) return ENOMEM;
  charge.keep();
  pds_.get(pd)->refs++;
  s.mrs.insert(handle);
  publish_direct(s, *dev_.mrs.get(handle));
  resp.handle = handle;
  resp.lkey = resp.rkey = key;
  return 0;
}

// ibv_rereg_mr: the new translation, PD and access take the old region's place under the
// same handle and keys, in one store; a packet sees one region or the other. The old one is
// freed (unmapped) after a grace period: the call returns once no access to it can land.
int MemoryObjects::replace_mr(Session &s, uint32_t handle, std::unique_ptr<MemoryRegion> mr,
                              ctl::RegMrResp &resp) {
  if (!owns(s.mrs, handle)) return EINVAL;
  uint32_t new_pd = mr->pd;
  MemoryRegion *cur = dev_.mrs.get(handle);
  if (cur->null_mr || cur->dm) return EINVAL;  // as the kernel: no rereg of these
  if (cur->bound_windows.load()) return EBUSY;  // memory windows still expose the old translation
  // The region is the caller's from now on, as what it holds is (reg_mr charged it): its
  // count moves from the old payer to the new one, if that is another.
  const bool payer_changes = cur->payer != s.payer();
  QuotaCharge counted = s.pay(quotas_, Quota::kMrs, payer_changes ? 1 : 0);
  if (counted.status()) return counted.status();
  mr->handle = handle;
  mr->key = cur->key;
  MemoryRegion &now = *mr;
  std::unique_ptr<MemoryRegion> old = dev_.mrs.replace(handle, std::move(mr));
  // The caller waits for the posters still on the old translation.
  if (now.direct)
    publish_direct(s, now);
  else
    publish_direct(s, *old, true);
  workers_.synchronize();
  counted.keep();
  if (payer_changes) s.refund(quotas_, old->payer, Quota::kMrs);
  s.refund(quotas_, old->payer, Quota::kMrBytes, old->pinned_bytes());
  s.refund(quotas_, old->payer, Quota::kMappings, old->mappings.size());
  if (old->own_mem_fd >= 0) s.refund(quotas_, old->payer, Quota::kFds);
  if (ProtectionDomain *p = pds_.get(old->pd)) p->refs--;
  pds_.get(new_pd)->refs++;
  resp.handle = handle;
  resp.lkey = resp.rkey = old->key;
  return 0;
}

int MemoryObjects::alloc_null_mr(Session &s, uint32_t pd, ctl::RegMrResp &resp) {
  ProtectionDomain *p = pds_.get(pd);
  if (!p || p->session != s.id) return EINVAL;
  auto mr = std::make_unique<MemoryRegion>();
  mr->pd = pd;
  mr->session = s.id;
  mr->payer = s.payer();
  mr->null_mr = true;
  mr->access = IBV_ACCESS_LOCAL_WRITE;  // local use only: no rkey works on it
  mr->length = UINT64_MAX;
  return insert_mr(s, std::move(mr), resp);
}

int MemoryObjects::dereg_mr(Session &s, uint32_t handle) {
  if (!owns(s.mrs, handle)) return EINVAL;
  // Memory windows bound to it still expose it: EBUSY. (A bind racing with this call, on a
  // worker that found the region before it left its table, leaves a window on a key that no
  // longer resolves: its accesses fail, as after an invalidation.)
  if (dev_.mrs.get(handle)->bound_windows.load()) return EBUSY;
  std::unique_ptr<MemoryRegion> mr = remove_mr(s, handle);
  // Returns only once no access to the region can land: no worker holds it, no packet
  // points into it. Then it is unmapped (the unique_ptr), with no worker stopped.
  workers_.synchronize();
  if (ProtectionDomain *p = pds_.get(mr->pd)) p->refs--;
  s.mrs.erase(handle);
  return 0;
}

int MemoryObjects::import_pd(Session &s, uint32_t handle) {
  return owns(s.pds, handle) ? 0 : ENOENT;
}

int MemoryObjects::import_mr(Session &s, uint32_t handle, ctl::ImportMrResp &resp) {
  if (!owns(s.mrs, handle)) return ENOENT;
  const MemoryRegion *mr = dev_.mrs.get(handle);
  resp.handle = handle;
  resp.lkey = resp.rkey = mr->key;
  resp.length = mr->length;
  return 0;
}

int MemoryObjects::alloc_mw(Session &s, const ctl::AllocMwReq &req, ctl::AllocMwResp &resp) {
  ProtectionDomain *pd = pds_.get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (req.type != IBV_MW_TYPE_1 && req.type != IBV_MW_TYPE_2) return EINVAL;
  if (dev_.mws.size() >= dev_.capacity.mws) return ENOMEM;
  QuotaCharge charge = s.pay(quotas_, Quota::kMws);
  if (charge.status()) return charge.status();
  auto mw = std::make_unique<MemoryWindow>();
  mw->pd = req.pd;
  mw->session = s.id;
  mw->payer = s.payer();
  mw->type = uint8_t(req.type);
  const uint32_t handle = dev_.mws.insert(std::move(mw), random_key_step(),
                                          [&](MemoryWindow &w, uint32_t h, uint8_t generation) {
                                            w.handle = h;
                                            w.key = resp.rkey = kMwKeyBit | h << 8 | generation;
                                          });
  if (!handle) return ENOMEM;
  charge.keep();
  pd->refs++;
  s.mws.insert(handle);
  resp.handle = handle;
  return 0;
}

int MemoryObjects::dealloc_mw(Session &s, uint32_t handle) {
  if (!owns(s.mws, handle)) return EINVAL;
  std::unique_ptr<MemoryWindow> mw = dev_.mws.remove(handle);
  // After the grace period no worker binds or invalidates it any more: what it is bound to
  // now is final.
  workers_.synchronize();
  unbind_removed(*mw);
  if (ProtectionDomain *p = pds_.get(mw->pd)) p->refs--;
  s.mws.erase(handle);
  s.refund(quotas_, mw->payer, Quota::kMws);
  return 0;
}

void MemoryObjects::unbind_removed(const MemoryWindow &mw) {
  if (!mw.bound) return;
  if (MemoryRegion *mr = dev_.mr_by_key(mw.mr_key)) mr->bound_windows--;
}

// The region's entry in its user's directory: written once it has a key, cleared when it
// leaves (the deregistering process then waits for the posters in flight).
// Only regions that are in it are written (a million null MRs touched 64 MiB of directory
// pages, and their teardown took 0.4 s longer).
bool MemoryObjects::publishes_direct(const Session &s) {
  return s.directory && s.caller.uid == s.uid;
}

void MemoryObjects::publish_direct(Session &s, MemoryRegion &mr, bool clear) {
  if (!s.directory || !mr.direct || key_handle(mr.key) >= shm::kDirectoryMrs) return;
  shm::DirectoryMr e{};
  if (!clear) {
    mr.direct->key = mr.key;
    e = *mr.direct;
    s.direct_mrs.insert(mr.handle);
  } else {
    s.direct_mrs.erase(mr.handle);
  }
  s.directory->mrs[key_handle(mr.key)].write(e);
}

std::unique_ptr<MemoryRegion> MemoryObjects::remove_mr(Session &s, uint32_t handle) {
  std::unique_ptr<MemoryRegion> mr = dev_.mrs.remove(handle);
  if (!mr) return nullptr;
  if (DeviceMemoryBlock *dm = dms_.get(mr->dm)) dm->refs--;
  publish_direct(s, *mr, true);
  s.refund(quotas_, mr->payer, Quota::kMrs);
  s.refund(quotas_, mr->payer, Quota::kMappings, mr->mappings.size());
  if (!mr->null_mr) s.refund(quotas_, mr->payer, Quota::kMrBytes, mr->pinned_bytes());
  if (mr->own_mem_fd >= 0) s.refund(quotas_, mr->payer, Quota::kFds);
  return mr;
}

void MemoryObjects::take_out(Session &s) {
  // Its windows expose only its own regions, which go too: nothing to unbind.
  closing_mws_.reserve(s.mws.size());
  for (uint32_t h : s.mws)
    if (std::unique_ptr<MemoryWindow> mw = dev_.mws.remove(h)) closing_mws_.push_back(std::move(mw));
  // Out of the directory, then out of the table without touching each region (a cache miss
  // each: a million took the control thread most of a second); their quotas go back with
  // the session's ledger.
  for (uint32_t h : s.direct_mrs)
    if (MemoryRegion *mr = dev_.mrs.get(h)) s.directory->mrs[key_handle(mr->key)].write({});
  s.direct_mrs.clear();
  retired_.reserve(retired_.size() + s.mrs.size());
  for (uint32_t h : s.mrs)
    if (std::unique_ptr<MemoryRegion> mr = dev_.mrs.remove(h)) retired_.push_back(std::move(mr));
}

void MemoryObjects::free_taken() {
  closing_mws_.clear();
  closing_mws_.shrink_to_fit();
}

bool MemoryObjects::reap(size_t max) {
  for (size_t i = 0; i < max && !retired_.empty(); i++) retired_.pop_back();
  if (retired_.empty()) retired_.shrink_to_fit();
  return !retired_.empty();
}

void MemoryObjects::release(Session &s) {
  release_dms(s);
  for (uint32_t h : s.pds) pds_.remove(h);
}

}  // namespace vrnic
