// On-demand paging (IBV_ACCESS_ON_DEMAND): what the device reports of it, and ibv_advise_mr.
// An ODP region is never converted or pinned: vrnicd reaches it through this process's
// /proc/self/mem, so each access sees the page tables as they are then, as an ODP NIC's
// page faults do. Memory unmapped after registration gives an access error, memory mapped
// again at its address is what later accesses see, and an implicit region
// (ibv_reg_mr(pd, NULL, SIZE_MAX, ...)) is the whole address space.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "internal.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14's, where the headers are older
#define MADV_POPULATE_WRITE 23
#endif

namespace vrnic::provider {

void fill_odp_caps(const Context &c, ibv_device_attr_ex *attr) {
  if (!c.reaches_memory) return;  // vrnicd has no /proc/self/mem of ours: no ODP
  constexpr uint32_t kRecvs = IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  ibv_odp_caps &odp = attr->odp_caps;
  odp.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  constexpr uint32_t kAtomicWrite = 1 << 7;  // IBV_ODP_SUPPORT_ATOMIC_WRITE (rdma-core 45)
  odp.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | kRecvs | IBV_ODP_SUPPORT_WRITE |
                                       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                                       kAtomicWrite;
  odp.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | kRecvs | IBV_ODP_SUPPORT_WRITE;
  odp.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | kRecvs;
  // XRC: what RC does, receives through XRC SRQs.
  attr->xrc_odp_caps = odp.per_transport_caps.rc_odp_caps & ~IBV_ODP_SUPPORT_RECV;
}

void odp_track(Context *c, Mr *mr) {
  std::lock_guard lock(c->odp_mu);
  if (mr->access & IBV_ACCESS_ON_DEMAND)
    c->odp_mrs[mr->ibv.lkey] = mr;
  else
    c->odp_mrs.erase(mr->ibv.lkey);
}

void odp_forget(Context *c, Mr *mr) {
  std::lock_guard lock(c->odp_mu);
  c->odp_mrs.erase(mr->ibv.lkey);
}

namespace {

// Faults [addr, addr + len) in as the advice asks, whole pages.
int populate(uint64_t addr, uint64_t len, bool write) {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t first = addr & ~(page - 1), end = (addr + len + page - 1) & ~(page - 1);
  if (::madvise(reinterpret_cast<void *>(first), end - first,
                write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ))
    return errno == EINVAL ? 0 : EFAULT;  // EINVAL: a kernel before 5.14, nothing to ask
  return 0;
}

}  // namespace

// As mlx5 answers: an advice it does not know EOPNOTSUPP, unknown flags or no SGE EINVAL, an
// lkey that is not an ODP region of the PD (or PREFETCH_WRITE on one without local write)
// ENOENT, a range outside its region EFAULT. Prefetching runs at once, in this thread;
// without IBV_ADVISE_MR_FLAG_FLUSH it is best effort, and memory that is not there (yet) is
// no error, as the kernel's asynchronous prefetch reports none.
int advise_mr(ibv_pd *pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge *sg_list,
              uint32_t num_sge) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  if ((flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) || !num_sge || !sg_list) return EINVAL;
  const bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  Context *c = Context::of(pd->context);
  struct Range {
    uint64_t addr, len;
  };
  std::vector<Range> ranges;
  {
    std::lock_guard lock(c->odp_mu);
    for (uint32_t i = 0; i < num_sge; i++) {
      const ibv_sge &s = sg_list[i];
      auto it = c->odp_mrs.find(s.lkey);
      if (it == c->odp_mrs.end()) return ENOENT;
      const Mr *mr = it->second;
      // (By handle: a parent domain names its protection domain's.)
      if (mr->ibv.pd->handle != pd->handle || (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
        return ENOENT;
      if (s.addr < mr->iova || s.length > mr->ibv.length ||
          s.addr - mr->iova > mr->ibv.length - s.length)
        return EFAULT;
      ranges.push_back({reinterpret_cast<uint64_t>(mr->ibv.addr) + (s.addr - mr->iova), s.length});
    }
  }
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return 0;  // only what is there: it is
  for (const Range &r : ranges) {
    if (!r.len) continue;
    int err = populate(r.addr, r.len, write);
    if (err && (flags & IBV_ADVISE_MR_FLAG_FLUSH)) return err;
  }
  return 0;
}

}  // namespace vrnic::provider
