// Protection domains and memory registration: the "DMA mapping". Whole pages that belong to
// the buffer alone are turned into memfd-backed shared pages at the same address (copied and
// remapped over under a write fence: page_conversion.h) and shared with vrnicd: zero copy
// from then on. What cannot be converted safely -- partial first/last pages, the calling
// thread's stack, mappings that are already shared or file-backed, and any range when no
// fence can be had in a process of several threads -- vrnicd reaches through the process's
// /proc/<pid>/mem instead.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>

#include "internal.h"
#include "page_conversion.h"
#include "process_maps.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace vrnic;
using namespace vrnic::provider;

namespace {

constexpr char kMemfdName[] = "vrnic-mr";

// Memfds this process converted pages into, by inode; kept open so later registrations of
// the same pages can share them with vrnicd again.
std::mutex g_mu;
std::map<uint64_t, int> g_memfds;

bool is_our_memfd(const MapsEntry &e) {
  return e.shared && e.path.rfind(std::string("/memfd:") + kMemfdName, 0) == 0 &&
         g_memfds.count(e.inode);
}

bool convertible(const MapsEntry &e, uint64_t sp) {
  bool anonymous = e.inode == 0 && (e.path.empty() || e.path == "[heap]");
  bool stack = (sp >= e.start && sp < e.end) || e.path == "[stack]";
  return anonymous && e.readable && e.writable && !e.shared && !stack;
}

// Replaces [start, start+len) with memfd pages holding the same bytes (page_conversion.h),
// kept in g_memfds; the inode and the bytes converted, or 0 bytes.
std::pair<uint64_t, uint64_t> convert_and_keep(uint64_t start, uint64_t len) {
  const ConvertedPages c = convert_pages(start, len, kMemfdName);
  if (c.fd < 0) return {0, 0};
  g_memfds[c.inode] = c.fd;
  return {c.inode, c.bytes};
}

// A child of fork() must not share the parent's registered pages (MAP_SHARED would make
// them shared, unlike ordinary memory): give it private copies, as the kernel gives a child
// copies of pinned pages. Runs between fork and the child's return, so it uses only system
// calls and a static buffer.
void make_child_pages_private() {
  forget_maps_file_after_fork();
  static char buf[1 << 16];
  static uint64_t ranges[4096][2];
  size_t nranges = 0, used = 0;
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  for (;;) {
    ssize_t n = ::read(fd, buf + used, sizeof(buf) - 1 - used);
    if (n <= 0) break;
    used += size_t(n);
    buf[used] = 0;
    char *line = buf;
    for (char *nl; (nl = std::strchr(line, '\n')); line = nl + 1) {
      *nl = 0;
      unsigned long long start, end;
      if (std::strstr(line, "/memfd:vrnic-mr") && nranges < 4096 &&
          std::sscanf(line, "%llx-%llx", &start, &end) == 2) {
        ranges[nranges][0] = start;
        ranges[nranges][1] = end - start;
        nranges++;
      }
    }
    used = size_t(buf + used - line);
    std::memmove(buf, line, used);
  }
  ::close(fd);
  for (size_t i = 0; i < nranges; i++) {
    void *at = reinterpret_cast<void *>(ranges[i][0]);
    size_t len = ranges[i][1];
    // Both sides populated by one call each, not one page fault per 4 KiB page: fork() gives
    // the child no page table entries for a shared mapping, so the copy would otherwise fault
    // twice per page (perf/fork_cost 256: fork to child exit 1.32 s before, 0.65 s after).
    void *copy = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (copy == MAP_FAILED) continue;
    ::madvise(at, len, kMadvPopulateRead);  // (before Linux 5.14: EINVAL, and faults instead)
    std::memcpy(copy, at, len);
    if (remap_over(copy, len, at) == MAP_FAILED) ::munmap(copy, len);
  }
}

__attribute__((constructor)) void register_fork_handler() {
  pthread_atfork(nullptr, nullptr, make_child_pages_private);
}

struct PieceList {
  std::vector<ctl::MrPiece> pieces;
  std::vector<int> fds;
  int add(uint64_t va, uint64_t len, ctl::PieceKind kind, int fd = -1, uint64_t fd_off = 0) {
    if (!len) return 0;
    if (kind == ctl::PieceKind::kProcessVm && !pieces.empty() &&
        pieces.back().kind == uint32_t(kind) && pieces.back().va + pieces.back().length == va) {
      pieces.back().length += len;
      return 0;
    }
    if (pieces.size() == ctl::kMaxMrPieces) return ENOMEM;
    ctl::MrPiece p{va, len, fd_off, uint32_t(kind), 0, kind == ctl::PieceKind::kMemfd ? fd : -1, 0};
    if (kind == ctl::PieceKind::kMemfd) {
      auto it = std::find(fds.begin(), fds.end(), fd);
      p.fd_index = uint32_t(it - fds.begin());
      if (it == fds.end()) {
        if (fds.size() == ctl::kMaxFdsPerMessage) return ENOMEM;
        fds.push_back(fd);
      }
    }
    pieces.push_back(p);
    return 0;
  }
};

// Closes the memfds of memory the program has unmapped since (their pages go once vrnicd
// lets go too). A walk over every mapping: done every kGcEvery registrations, not each one.
void forget_freed_memfds() {
  std::set<uint64_t> live;
  for (const MapsEntry &e : read_maps())
    if (e.inode) live.insert(e.inode);
  for (auto it = g_memfds.begin(); it != g_memfds.end();) {
    if (live.count(it->first)) {
      ++it;
    } else {
      ::close(it->second);
      it = g_memfds.erase(it);
    }
  }
}
constexpr uint32_t kGcEvery = 64;

// Describes [addr, addr+len) to vrnicd, converting pages where that is safe.
int describe_range(uint64_t addr, uint64_t len, PieceList &out) {
  volatile char marker = 0;
  uint64_t sp = reinterpret_cast<uint64_t>(&marker);
  uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  static uint32_t registrations = 0;
  if (++registrations % kGcEvery == 0) forget_freed_memfds();
  uint64_t cur = addr, end = addr + len;
  if (end < addr) return EINVAL;
  while (cur < end) {
    std::optional<MapsEntry> found = mapping_at(cur);
    if (!found || !found->readable) return EFAULT;
    const MapsEntry &e = *found;
    uint64_t seg_end = std::min(end, e.end);
    int err = 0;
    if (is_our_memfd(e)) {
      err = out.add(cur, seg_end - cur, ctl::PieceKind::kMemfd, g_memfds[e.inode],
                    e.offset + (cur - e.start));
    } else if (convertible(e, sp)) {
      const uint64_t first = (cur + page - 1) & ~(page - 1), last = seg_end & ~(page - 1);
      const auto [inode, bytes] =
          first < last ? convert_and_keep(first, last - first) : std::pair<uint64_t, uint64_t>{};
      if (bytes) {
        err = out.add(cur, first - cur, ctl::PieceKind::kProcessVm);
        if (!err) err = out.add(first, bytes, ctl::PieceKind::kMemfd, g_memfds[inode], 0);
        if (!err) err = out.add(first + bytes, seg_end - first - bytes, ctl::PieceKind::kProcessVm);
      } else {
        err = out.add(cur, seg_end - cur, ctl::PieceKind::kProcessVm);
      }
    } else {
      err = out.add(cur, seg_end - cur, ctl::PieceKind::kProcessVm);
    }
    if (err) return err;
    cur = seg_end;
  }
  return 0;
}

constexpr int kKnownAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
    IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB;

// Registers [addr, addr + length) for access by iova and fills mr; with replaces, the
// registration takes that region's place (ibv_rereg_mr). mr is untouched on failure.
int register_range(ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned access,
                   uint32_t replaces, Mr *mr) {
  if (!length) return EINVAL;
  if (access & ~unsigned(kKnownAccess)) return EINVAL;
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  Context *c = Context::of(pd->context);
  const bool on_demand = access & IBV_ACCESS_ON_DEMAND;
  if (on_demand && !c->reaches_memory) return EOPNOTSUPP;  // as a device without ODP caps
  // An implicit ODP region: the whole address space, by its own addresses.
  const bool implicit = on_demand && !addr && length == SIZE_MAX;
  if (implicit && iova) return EINVAL;
  if (!implicit && reinterpret_cast<uint64_t>(addr) + length < reinterpret_cast<uint64_t>(addr))
    return EINVAL;
  // Hints: nothing to relax here, and huge pages are whatever the mapping is.
  access &= ~unsigned(IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_HUGETLB);
  auto req = std::make_unique<ctl::RegMrReq>();
  req->pd = pd->handle;
  req->access = access;
  req->addr = reinterpret_cast<uint64_t>(addr);
  req->length = length;
  req->iova = iova;
  req->replaces = replaces;
  PieceList pieces;
  int err;
  if (on_demand) {
    // Nothing converted, nothing checked: vrnicd reaches it as it is at each access.
    err = pieces.add(req->addr, length, ctl::PieceKind::kProcessVm);
  } else {
    std::lock_guard lock(g_mu);
    err = describe_range(req->addr, length, pieces);
  }
  if (err) return err;
  // Pieces vrnicd reaches through /proc/<pid>/mem must be this process's, not the opener's.
  int own_mem = -1;
  if (::getpid() != c->opener &&
      std::any_of(pieces.pieces.begin(), pieces.pieces.end(), [](const ctl::MrPiece &p) {
        return p.kind == uint32_t(ctl::PieceKind::kProcessVm);
      })) {
    own_mem = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    if (own_mem < 0) return EFAULT;
    if (pieces.fds.size() == ctl::kMaxFdsPerMessage) {
      ::close(own_mem);
      return ENOMEM;
    }
    pieces.fds.push_back(own_mem);
    req->own_mem = 1;
  }
  req->npieces = uint32_t(pieces.pieces.size());
  std::copy(pieces.pieces.begin(), pieces.pieces.end(), req->pieces);
  size_t req_len = offsetof(ctl::RegMrReq, pieces) + req->npieces * sizeof(ctl::MrPiece);
  ctl::RegMrResp resp{};
  err = c->conn.call(ctl::Op::kRegMr, req.get(), req_len, &resp, sizeof(resp),
                     pieces.fds.data(), pieces.fds.size());
  if (own_mem >= 0) ::close(own_mem);
  if (err) return err;
  mr->set(pd, addr, static_cast<uint8_t *>(addr), length, iova, int(access), resp);
  return 0;
}

}  // namespace

extern "C" {

VRNIC_EXPORT ibv_pd *ibv_alloc_pd(ibv_context *context) {
  Context *c = Context::of(context);
  ctl::HandleResp resp{};
  if (int err = c->conn.call(ctl::Op::kAllocPd, nullptr, 0, &resp, sizeof(resp)))
    return fail_null<ibv_pd>(err);
  auto *pd = new (std::nothrow) Pd{};
  if (!pd) return fail_null<ibv_pd>(ENOMEM);  // vrnicd frees it with the session
  pd->ibv.context = context;
  pd->ibv.handle = resp.handle;
  return &pd->ibv;
}

VRNIC_EXPORT int ibv_dealloc_pd(ibv_pd *pd) {
  Pd *p = Pd::of(pd);
  if (p->protection_domain) return dealloc_parent_domain(p);
  if (p->parents.load()) return EBUSY;  // parent domains are over it
  int err = Context::of(pd->context)->call_on(ctl::Op::kDeallocPd, pd->handle);
  if (!err) delete p;
  return err;
}

VRNIC_EXPORT ibv_mr *ibv_reg_mr_iova2(ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                      unsigned int access) {
  if (!pd) return fail_null<ibv_mr>(EINVAL);
  auto *mr = new (std::nothrow) Mr{};
  if (!mr) return fail_null<ibv_mr>(ENOMEM);
  if (int err = register_range(pd, addr, length, iova, access, 0, mr)) {
    delete mr;
    return fail_null<ibv_mr>(err);
  }
  direct_publish_mr(Context::of(pd->context)->direct.get(), mr);
  odp_track(Context::of(pd->context), mr);
  return &mr->ibv;
}

VRNIC_EXPORT ibv_mr *ibv_reg_mr(ibv_pd *pd, void *addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr), unsigned(access));
}

VRNIC_EXPORT ibv_mr *ibv_reg_mr_iova(ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                     int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, unsigned(access));
}

VRNIC_EXPORT int ibv_dereg_mr(ibv_mr *mr) {
  Context *c = Context::of(mr->context);
  int err = c->call_on(ctl::Op::kDeregMr, mr->handle);
  if (err) return err;
  // vrnicd's workers can no longer reach it; now no direct section either.
  direct_unpublish_mr(c->direct.get(), Mr::of(mr));
  odp_forget(c, Mr::of(mr));
  delete Mr::of(mr);
  return 0;
}

// The new translation, PD and access replace the old in place: handle, lkey and rkey stay
// (rxe and mlx5 keep them too, and rdma-core's tests rely on it). On failure the old
// registration stands.
VRNIC_EXPORT int ibv_rereg_mr(ibv_mr *mr, int flags, ibv_pd *pd, void *addr, size_t length,
                              int access) {
  constexpr int kKnown =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if (!mr || !flags || (flags & ~kKnown)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  ibv_pd *new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  void *new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
  size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;
  int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : Mr::of(mr)->access;
  if (!new_pd || new_pd->context != mr->context) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  // Out of the direct path's reach while its translation changes (the worker path serves it
  // meanwhile); back in whichever registration stands.
  DirectPath *direct = Context::of(mr->context)->direct.get();
  direct_unpublish_mr(direct, Mr::of(mr));
  int err = register_range(new_pd, new_addr, new_len, reinterpret_cast<uint64_t>(new_addr),
                           unsigned(new_access), mr->handle, Mr::of(mr));
  // vrnicd has the new translation in the directory: no poster elsewhere is on the old one.
  direct_synchronize_peers(direct);
  direct_publish_mr(direct, Mr::of(mr));
  odp_track(Context::of(mr->context), Mr::of(mr));
  if (err) {
    errno = err;
    return IBV_REREG_MR_ERR_INPUT;
  }
  return 0;
}

// Registered memory stays usable in the parent; children see it as MADV_DONTFORK asks.
VRNIC_EXPORT int ibv_fork_init(void) {
  return 0;
}
VRNIC_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) {
  return IBV_FORK_UNNEEDED;
}
VRNIC_EXPORT int ibv_dontfork_range(void *base, size_t size) {
  return ::madvise(base, size, MADV_DONTFORK) ? errno : 0;
}
VRNIC_EXPORT int ibv_dofork_range(void *base, size_t size) {
  return ::madvise(base, size, MADV_DOFORK) ? errno : 0;
}

}  // extern "C"

namespace vrnic::provider {

ibv_mr *alloc_null_mr(ibv_pd *pd) {
  ctl::RegMrResp resp{};
  if (int err =
          Context::of(pd->context)->call_on(ctl::Op::kAllocNullMr, pd->handle, &resp, sizeof(resp)))
    return fail_null<ibv_mr>(err);
  auto *mr = new (std::nothrow) Mr{};
  if (!mr) return fail_null<ibv_mr>(ENOMEM);
  resp.rkey = 0;  // nothing remote can reach it
  mr->set(pd, nullptr, nullptr, SIZE_MAX, 0, IBV_ACCESS_LOCAL_WRITE, resp);
  return &mr->ibv;
}

}  // namespace vrnic::provider
