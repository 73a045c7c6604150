// The same-host direct path (direct_path.h): the posting thread's epoch, the tables it reads,
// and the work requests it runs itself -- RC RDMA WRITE, READ and atomics between two QPs of
// this process, where everything the responder checks passes.
#include "direct_path.h"

#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "direct_section.h"
#include "internal.h"
#include "vrnic/object_keys.h"
#include "vrnic/work_request.h"

namespace vrnic::provider {
namespace {

// One cell per thread that ever takes the direct path: odd while it is in a section. Cells
// are claimed once per thread and given back when it exits.
constexpr uint32_t kReaderCells = 256;
struct alignas(64) ReaderCell {
  std::atomic<uint64_t> seq{0};
  std::atomic<bool> taken{false};
};
ReaderCell g_cells[kReaderCells];

struct ThreadCell {
  ReaderCell *cell = nullptr;
  bool tried = false;
  ~ThreadCell() {
    if (cell) cell->taken.store(false, std::memory_order_release);
  }
};
thread_local ThreadCell t_cell;

// A forked child has its parent's tables but not its parent's standing: a region its parent
// registered is reached by vrnicd through the parent, and is no longer reachable when that
// process is gone, so the child must meet exactly what the worker path gives it (the hostile
// group's row 1). The child takes the worker path only, and its copies of the cells, odd
// for sections other threads of its parent were in, must not hold its own deregistrations.
std::atomic<bool> g_forked{false};
void forked_child() {
  g_forked.store(true, std::memory_order_relaxed);
  for (ReaderCell &c : g_cells) c.seq.store(0, std::memory_order_relaxed);
}

ReaderCell *my_cell() {
  if (t_cell.cell || t_cell.tried) return t_cell.cell;
  t_cell.tried = true;
  for (ReaderCell &c : g_cells) {
    bool expected = false;
    if (c.taken.compare_exchange_strong(expected, true)) return t_cell.cell = &c;
  }
  return nullptr;  // more threads than cells: this one keeps to the worker path
}

// A registered range [addr, addr+len) of `mr` in this process, in the MR's I/O addresses;
// nullptr when it is not all inside it.
uint8_t *translate(const Mr *mr, uint64_t io_addr, uint64_t len) {
  if (!mr->local) return nullptr;  // a null MR: the worker path reads its zeros
  if (io_addr < mr->iova || len > mr->ibv.length || io_addr - mr->iova > mr->ibv.length - len)
    return nullptr;
  return mr->local + (io_addr - mr->iova);
}

// The region a key names, if it is one of this process's MRs with all of `access` on `pd`.
const Mr *region(const DirectPath *d, uint32_t key, bool remote, const ibv_pd *pd, int access) {
  if (key & kMwKeyBit) return nullptr;  // windows: the worker path resolves them
  const Mr *mr = d->mrs.get(key_handle(key));
  // An ODP region may have pages unmapped that a copy here would fault on; vrnicd's access
  // through /proc/self/mem turns that into the access error ODP promises.
  if (!mr || (remote ? mr->ibv.rkey : mr->ibv.lkey) != key || mr->ibv.pd->handle != pd->handle ||
      (mr->access & access) != access || (mr->access & IBV_ACCESS_ON_DEMAND))
    return nullptr;
  return mr;
}

// The local side of a WR, each SGE translated; false when one does not check out.
struct LocalSegments {
  uint8_t *addr[shm::kMaxSge];
  uint32_t len[shm::kMaxSge];
  uint32_t n = 0;
  uint64_t total = 0;
};

bool local_segments(const DirectPath *d, const Qp *qp, const ibv_send_wr *wr, int access,
                    LocalSegments *out) {
  if (wr->send_flags & IBV_SEND_INLINE) {
    // Inline data is read from the application's buffers as given, with no key.
    for (int i = 0; i < wr->num_sge; i++) {
      out->addr[i] = reinterpret_cast<uint8_t *>(wr->sg_list[i].addr);
      out->len[i] = wr->sg_list[i].length;
      out->total += wr->sg_list[i].length;
    }
    out->n = uint32_t(wr->num_sge);
    return out->total <= qp->caps.max_inline_data;
  }
  for (int i = 0; i < wr->num_sge; i++) {
    const ibv_sge &s = wr->sg_list[i];
    const Mr *mr = region(d, s.lkey, false, qp->ibv.pd, access);
    uint8_t *p = mr ? translate(mr, s.addr, s.length) : nullptr;
    if (!p) return false;
    out->addr[i] = p;
    out->len[i] = s.length;
    out->total += s.length;
  }
  out->n = uint32_t(wr->num_sge);
  return true;
}

// Copies between the local segments and remote memory at `remote` (write: out to it).
void copy(const LocalSegments &l, uint8_t *remote, bool write) {
  for (uint32_t i = 0; i < l.n; i++) {
    if (write)
      std::memmove(remote, l.addr[i], l.len[i]);
    else
      std::memmove(l.addr[i], remote, l.len[i]);
    remote += l.len[i];
  }
}

// An atomic needs one local segment of at least 8 bytes and an aligned target.
bool atomic_fits(const LocalSegments &l, const uint8_t *remote) {
  return l.n == 1 && l.len[0] >= 8 && reinterpret_cast<uintptr_t>(remote) % 8 == 0;
}

// Runs an atomic on the 8 bytes at `remote`, the original value into the local segment:
// atomic against the workers' (the same pages) and other threads'.
void run_atomic(const ibv_send_wr *wr, const LocalSegments &l, uint8_t *remote) {
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t *>(remote));
  uint64_t orig;
  if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
    orig = wr->wr.atomic.compare_add;
    word.compare_exchange_strong(orig, wr->wr.atomic.swap);
  } else {
    orig = word.fetch_add(wr->wr.atomic.compare_add);
  }
  std::memcpy(l.addr[0], &orig, 8);
}

// What a WR asks of its peer's memory.
struct Target {
  uint32_t rkey;
  uint64_t addr;
  uint64_t span;
  int right;  // IBV_ACCESS_REMOTE_*
};

// Where a WR's target is: here (`remote` points at it), for the worker path to decide, in
// another process, or in a region of another process this one must map first.
enum class Reach { kHere, kWorkerPath, kElsewhere, kMapFirst };

// The peer QP (by `dest_qpn`) if it is this process's.
Reach reach_in_process(const DirectPath *d, const Qp *qp, const Target &t, uint8_t **remote) {
  const uint32_t dest = qp->dest_qpn.load(std::memory_order_relaxed);
  const Qp *peer = d->qps.get(qpn_index(dest));
  if (!peer || peer->ibv.qp_num != dest) return Reach::kElsewhere;
  const uint32_t state = peer->shared->state.load(std::memory_order_acquire);
  if (peer->ibv.qp_type != IBV_QPT_RC ||
      peer->dest_qpn.load(std::memory_order_relaxed) != qp->ibv.qp_num ||
      (state != IBV_QPS_RTR && state != IBV_QPS_RTS) ||
      !(peer->access_flags.load(std::memory_order_relaxed) & t.right))
    return Reach::kWorkerPath;
  const Mr *target = region(d, t.rkey, true, peer->ibv.pd, t.right);
  *remote = target ? translate(target, t.addr, t.span) : nullptr;
  return *remote ? Reach::kHere : Reach::kWorkerPath;
}

// The peer QP as its user's directory has it, in another process (or in this one, a QP the
// tables above do not have). Inside a poster section: the region's owner, deregistering it,
// waits for this section.
Reach reach_other_process(const DirectPeers &peers, const Qp *qp, const Target &t,
                          uint8_t **remote, PeerMrWanted *want) {
  const shm::Directory &dir = peers.directory();
  const uint32_t dest = qp->dest_qpn.load(std::memory_order_relaxed);
  shm::DirectoryQp peer{};
  uint64_t version;
  if (!dir.qps[qpn_index(dest)].read(&peer, &version) || peer.qpn != dest ||
      peer.dest_qpn != qp->ibv.qp_num ||
      (peer.state != IBV_QPS_RTR && peer.state != IBV_QPS_RTS) || !(peer.access & t.right))
    return Reach::kWorkerPath;
  const uint32_t handle = key_handle(t.rkey);
  shm::DirectoryMr mr{};
  if ((t.rkey & kMwKeyBit) || handle >= shm::kDirectoryMrs ||
      !dir.mrs[handle].read(&mr, &version) || mr.key != t.rkey || mr.pd != peer.pd ||
      (mr.access & t.right) != uint32_t(t.right) || t.addr < mr.iova || t.span > mr.length ||
      t.addr - mr.iova > mr.length - t.span)
    return Reach::kWorkerPath;
  const PeerMr *mapped = peers.mapped(handle, mr.key, version);
  if (!mapped) {
    *want = {handle, version, mr};
    return Reach::kMapFirst;
  }
  if (!mapped->base) return Reach::kWorkerPath;  // it could not be mapped
  *remote = mapped->base + (t.addr - mr.iova);
  return Reach::kHere;
}

// Runs the WR against `remote` and completes it; false (nothing done) when the atomic's
// target is misaligned or there is no room for the completion.
bool run(Qp *qp, const ibv_send_wr *wr, const LocalSegments &local, uint8_t *remote,
         uint64_t span) {
  const wr::Kind kind = wr::rule(wr->opcode).kind;
  const bool atomic = kind == wr::Kind::kAtomic;
  if (atomic && !atomic_fits(local, remote)) return false;
  Cq *cq = Cq::of(qp->ibv.send_cq);
  const bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all;
  // Room for the completion first: past this point the WR is done here (an atomic cannot be
  // run twice).
  if (signaled && !cq_reserve_direct(cq)) return false;
  if (atomic)
    run_atomic(wr, local, remote);
  else
    copy(local, remote, wr->opcode == IBV_WR_RDMA_WRITE);
  if (signaled) {
    shm::Cqe cqe{};
    cqe.wr_id = wr->wr_id;
    cqe.status = IBV_WC_SUCCESS;
    cqe.opcode = wr::rule(wr->opcode).wc_opcode;
    cqe.byte_len = uint32_t(span);
    cqe.qp_num = qp->ibv.qp_num;
    cq_push_direct(cq, cqe);
  }
  shm::QpShared &s = *qp->shared;
  s.direct_ops.store(s.direct_ops.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  s.direct_bytes.store(s.direct_bytes.load(std::memory_order_relaxed) + span,
                       std::memory_order_relaxed);
  return true;
}

}  // namespace

std::unique_ptr<DirectPath> make_direct_path(const std::atomic<uint32_t> &daemon_allows,
                                             std::unique_ptr<DirectPeers> peers) {
  const char *env = std::getenv("VRNIC_DIRECT_PATH");
  if (env && std::strcmp(env, "0") == 0) return nullptr;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { ::pthread_atfork(nullptr, nullptr, forked_child); });
  std::unique_ptr<DirectPath> d(new (std::nothrow) DirectPath);
  if (d) {
    d->peers = std::move(peers);
    d->allowed = &daemon_allows;
  }
  return d;
}

void direct_synchronize() { wait_for_sections(g_cells, kReaderCells); }

void direct_synchronize_peers(DirectPath *d) {
  if (d && d->peers) d->peers->synchronize();
}

void direct_publish_mr(DirectPath *d, Mr *mr) {
  if (d && mr->ibv.lkey) d->mrs.publish(key_handle(mr->ibv.lkey), mr);
}

void direct_unpublish_mr(DirectPath *d, Mr *mr) {
  if (!d) return;
  d->mrs.unpublish(key_handle(mr->ibv.lkey));
  direct_synchronize();
  direct_synchronize_peers(d);
}

void direct_publish_qp(DirectPath *d, Qp *qp) {
  if (d) d->qps.publish(qpn_index(qp->ibv.qp_num), qp);
}

void direct_unpublish_qp(DirectPath *d, Qp *qp) {
  if (!d) return;
  d->qps.unpublish(qpn_index(qp->ibv.qp_num));
  direct_synchronize();
}

void direct_note_modify(Qp *qp, const ibv_qp_attr &attr, int attr_mask) {
  if (attr_mask & IBV_QP_ACCESS_FLAGS)
    qp->access_flags.store(attr.qp_access_flags, std::memory_order_relaxed);
  if (attr_mask & IBV_QP_DEST_QPN) qp->dest_qpn.store(attr.dest_qp_num, std::memory_order_relaxed);
  if (attr_mask & IBV_QP_AV) {
    // The peer is on this device when the path leads to one of its own GIDs.
    bool local = false;
    const ctl::DeviceInfo &info = Context::of(qp->ibv.context)->info;
    for (uint32_t i = 0; attr.ah_attr.is_global && i < ctl::kGidTableLen; i++)
      local |= info.gids[i].type != ctl::kGidEmpty &&
               std::memcmp(info.gids[i].gid, attr.ah_attr.grh.dgid.raw, 16) == 0;
    qp->dest_local.store(local, std::memory_order_relaxed);
  }
}

bool direct_post_send(DirectPath *d, Qp *qp, const ibv_send_wr *wr) {
  const wr::Kind kind = wr::rule(wr->opcode).kind;
  const bool write = wr->opcode == IBV_WR_RDMA_WRITE;
  if ((!write && kind != wr::Kind::kRead && kind != wr::Kind::kAtomic) ||
      qp->ibv.qp_type != IBV_QPT_RC || wr->num_sge < 0 ||
      uint32_t(wr->num_sge) > qp->caps.max_send_sge ||
      ((wr->send_flags & IBV_SEND_INLINE) && !write) ||
      !d->allowed->load(std::memory_order_relaxed) ||
      qp->shared->state.load(std::memory_order_acquire) != IBV_QPS_RTS ||
      !qp->dest_local.load(std::memory_order_relaxed))
    return false;
  ReaderCell *cell = g_forked.load(std::memory_order_relaxed) ? nullptr : my_cell();
  if (!cell) return false;
  const bool atomic = kind == wr::Kind::kAtomic;
  const int right = write    ? IBV_ACCESS_REMOTE_WRITE
                    : atomic ? IBV_ACCESS_REMOTE_ATOMIC
                             : IBV_ACCESS_REMOTE_READ;
  // A region of another process not mapped here yet is mapped between two tries, outside
  // any section; the WR takes the worker path if it still cannot run.
  for (int attempt = 0; attempt < 2; attempt++) {
    PeerMrWanted want;
    {
      Section section(cell);
      LocalSegments local;
      if (!local_segments(d, qp, wr, write ? 0 : IBV_ACCESS_LOCAL_WRITE, &local)) return false;
      const Target t{atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey,
                     atomic ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr,
                     atomic ? 8 : local.total, right};
      if (t.span > (1ull << 31)) return false;
      uint8_t *remote = nullptr;
      Reach r = reach_in_process(d, qp, t, &remote);
      if (r == Reach::kHere) return run(qp, wr, local, remote, t.span);
      shm::PosterCell *poster_cell = nullptr;
      if (r != Reach::kElsewhere || !d->peers || !(poster_cell = d->peers->my_cell()))
        return false;
      Section poster(poster_cell);
      r = reach_other_process(*d->peers, qp, t, &remote, &want);
      if (r == Reach::kHere) return run(qp, wr, local, remote, t.span);
      if (r != Reach::kMapFirst) return false;
    }
    d->peers->map(want);
  }
  return false;
}

}  // namespace vrnic::provider
