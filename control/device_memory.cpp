// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr): memory of the NIC's own. In
// vrnicd that is a memfd it allocates, sealed at its size, which the client maps for
// ibv_memcpy_to_dm/from_dm and which MRs registered on it map too (each a mapping of its own,
// so a region never outlives the pages it points at). It is charged to the user as mr_bytes
// and one mapping, as memory vrnicd holds for it. Zero based: an MR's IOVA 0 is its offset
// in the device memory, as the kernel's DM MRs are.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "errno_status.h"
#include "memory_objects.h"
#include "shared_region.h"

namespace vrnic {

DeviceMemoryBlock::~DeviceMemoryBlock() {
  if (fd >= 0) ::close(fd);
}

namespace {

// What an MR on device memory may allow, as mlx5: no memory windows, no ODP.
constexpr uint32_t kDmMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_ZERO_BASED | IBV_ACCESS_RELAXED_ORDERING;

}  // namespace

int MemoryObjects::alloc_dm(Session &s, const ctl::AllocDmReq &req, ctl::AllocDmResp &resp,
                            std::vector<int> &fds) {
  // Alignment up to a page is what a memfd mapping has; more is not offered.
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  if (req.comp_mask || req.length == 0 || (uint64_t(1) << std::min(req.log_align_req, 63u)) > page)
    return EINVAL;
  if (req.length > dev_.info.max_dm_size) return ENOMEM;
  const uint64_t bytes = (req.length + page - 1) & ~(page - 1);
  QuotaCharge byte_charge = s.pay(quotas_, Quota::kMrBytes, bytes);
  QuotaCharge map_charge = s.pay(quotas_, Quota::kMappings);
  QuotaCharge fd_charge = s.pay(quotas_, Quota::kFds);  // the memfd, kept
  if (byte_charge.status() || map_charge.status() || fd_charge.status()) return ENOMEM;
  absl::StatusOr<SharedRegion> region = make_shared_region("vrnic-dm", bytes);
  if (!region.ok()) return errno_of(region.status());
  // vrnicd keeps the memfd (its MRs map it), not a mapping: what it reads and writes of it
  // goes through those MRs.
  ::munmap(region->map, region->bytes);
  const int kept = ::fcntl(region->fd, F_DUPFD_CLOEXEC, 0);
  if (kept < 0) {
    ::close(region->fd);
    return errno;
  }
  auto dm = std::make_unique<DeviceMemoryBlock>();
  dm->session = s.id;
  dm->payer = s.payer();
  dm->fd = kept;
  dm->length = req.length;
  dm->map_length = bytes;
  const uint32_t handle = dms_.insert(std::move(dm));
  if (!handle) {
    ::close(region->fd);
    return ENOMEM;
  }
  byte_charge.keep();
  map_charge.keep();
  fd_charge.keep();
  s.dms.insert(handle);
  resp.handle = handle;
  resp.map_length = bytes;
  fds.push_back(region->fd);
  return 0;
}

// ibv_import_dm: the session's DM, its memfd lent once more (the importer maps it).
int MemoryObjects::import_dm(Session &s, uint32_t handle, ctl::ImportDmResp &resp,
                             std::vector<int> &fds) {
  if (!s.dms.contains(handle)) return ENOENT;
  const DeviceMemoryBlock *dm = dms_.get(handle);
  const int fd = ::fcntl(dm->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno;
  resp.handle = handle;
  resp.length = dm->length;
  resp.map_length = dm->map_length;
  fds.push_back(fd);
  return 0;
}

int MemoryObjects::free_dm(Session &s, uint32_t handle) {
  if (!s.dms.contains(handle)) return EINVAL;
  DeviceMemoryBlock *dm = dms_.get(handle);
  if (dm->refs) return EBUSY;  // MRs are registered on it
  s.refund(quotas_, dm->payer, Quota::kMrBytes, dm->map_length);
  s.refund(quotas_, dm->payer, Quota::kMappings);
  s.refund(quotas_, dm->payer, Quota::kFds);
  dms_.remove(handle);
  s.dms.erase(handle);
  return 0;
}

void MemoryObjects::release_dms(Session &s) {
  // Its MRs are out of the key table, each with its own mapping: the memfds can go (their
  // quotas go back with the session's ledger).
  for (uint32_t h : s.dms) dms_.remove(h);
  s.dms.clear();
}

int MemoryObjects::reg_dm_mr(Session &s, const ctl::RegDmMrReq &req, ctl::RegMrResp &resp) {
  ProtectionDomain *pd = pds_.get(req.pd);
  if (!pd || pd->session != s.id || !s.dms.contains(req.dm)) return EINVAL;
  DeviceMemoryBlock *dm = dms_.get(req.dm);
  // (A length of 0 is an MR, as the kernel registers it: no byte but address 0 of it.)
  if ((req.access & ~kDmMrAccess) || !(req.access & IBV_ACCESS_ZERO_BASED) ||
      req.offset > dm->length || req.length > dm->length - req.offset)
    return EINVAL;
  if ((req.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(req.access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  if (dev_.mrs.size() >= dev_.capacity.mrs) return ENOMEM;
  const uint64_t maps = req.length ? 1 : 0;
  QuotaCharge map_charge = s.pay(quotas_, Quota::kMappings, maps);
  if (map_charge.status()) return map_charge.status();
  auto mr = std::make_unique<MemoryRegion>();
  mr->pd = req.pd;
  mr->access = req.access & ~uint32_t(IBV_ACCESS_RELAXED_ORDERING);
  mr->session = s.id;
  mr->payer = s.payer();
  mr->length = req.length;
  mr->dm = req.dm;
  MrPieceMap piece{0, req.length, nullptr};  // the region's addresses are its IOVAs
  struct stat file {};
  if (maps) {
    if (int err = map_memfd(dm->fd, req.offset, req.length, *mr, piece, &file)) return err;
    mr->pieces.push_back(piece);
  }
  if (maps && req.client_fd >= 0 && publishes_direct(s))
    mr->direct.reset(new shm::DirectoryMr{0, req.pd, mr->access, uint32_t(s.caller.pid),
                                          uint32_t(req.client_fd), 0, uint64_t(file.st_ino),
                                          uint64_t(file.st_dev), req.offset, 0, req.length});
  if (int err = insert_mr(s, std::move(mr), resp)) return err;
  map_charge.keep();
  dm->refs++;
  return 0;
}

}  // namespace vrnic
