// The provider's objects: each verbs object embeds the public struct programs see, followed
// by what the driver needs (its shared rings, its handle in vrnicd).
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "async_events.h"
#include "direct_path.h"
#include "export.h"
#include "vrnic/ctl_io.h"
#include "vrnic/ece.h"
#include "vrnic/shm_layout.h"

// From rdma-core's private driver.h (not installed): the GID type ibv_query_gid_type reports.
enum ibv_gid_type_sysfs {
  IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
  IBV_GID_TYPE_SYSFS_ROCE_V2,
};

namespace vrnic::provider {

template <typename Outer, typename Inner>
Outer *outer_of(Inner *inner, Inner Outer::*member) {
  auto offset = reinterpret_cast<size_t>(&(static_cast<Outer *>(nullptr)->*member));
  return reinterpret_cast<Outer *>(reinterpret_cast<char *>(inner) - offset);
}

// A connection to vrnicd: one per open device, requests serialized -- across processes too:
// a child of fork() may go on using its parent's context (as with the kernel's command fd),
// and two processes' requests and replies on one stream must not interleave.
class DaemonConnection {
 public:
  ~DaemonConnection();
  int open(const char *path);
  // Sends a request and waits for its response; returns 0 or an errno (the daemon's or ours).
  int call(ctl::Op op, const void *req, size_t req_len, void *resp, size_t resp_len,
           const int *fds = nullptr, size_t nfds = 0, std::vector<int> *resp_fds = nullptr);
  int sock() const { return sock_; }

 private:
  // A robust, process-shared mutex in a page of its own (MAP_SHARED, so fork keeps it one).
  pthread_mutex_t *mu_ = nullptr;
  int sock_ = -1;
  bool dead_ = false;
};

struct Mr;

struct Context {
  verbs_context vctx;  // ibv_context is its last member
  DaemonConnection conn;
  ctl::DeviceInfo info;
  uint32_t session = 0;
  int async_write_fd = -1;
  shm::SessionShared *session_shm = nullptr;
  const shm::DaemonShared *daemon_shm = nullptr;
  int wake_fd = -1;  // the session's: wakes whichever worker sleeps
  // The session's ring arena as this process maps it: chunk i at ring_chunks[i] (its QPs'
  // memory; vrnicd names the chunk and the offset of each QP's).
  std::mutex ring_chunks_mu;
  std::vector<std::pair<void *, size_t>> ring_chunks;
  // Where chunk `chunk` of `bytes` is mapped here, mapping it from `fd` the first time;
  // nullptr when it cannot be.
  uint8_t *ring_chunk(uint32_t chunk, size_t bytes, int fd);
  std::atomic<bool> fatal_reported{false};
  std::unique_ptr<DirectPath> direct;  // the same-host direct path; nullptr when off
  // vrnicd took our /proc/self/mem at Hello: it can reach memory that is not shared with it,
  // and so on-demand paging works (on_demand.cpp).
  bool reaches_memory = false;
  pid_t opener = 0;  // the process that opened it (a forked child may use it too)
  // ibv_import_device's: the exported context's cmd_fd, which this context holds (and so
  // the session it speaks for), closed with it; -1 for a context ibv_open_device made.
  int imported_cmd_fd = -1;
  // The QPs and SRQs its async events may name (async_events.h).
  AsyncObjects async_objects;
  // This context's ODP regions by lkey, for ibv_advise_mr.
  std::mutex odp_mu;
  std::unordered_map<uint32_t, Mr *> odp_mrs;

  static Context *of(ibv_context *c) {
    return outer_of(reinterpret_cast<verbs_context *>(reinterpret_cast<char *>(c) -
                                                      offsetof(verbs_context, context)),
                    &Context::vctx);
  }
  void ring_doorbell(uint32_t worker, uint32_t qp_handle);
  // A command on one object (destroy, query, ...): 0 or an errno.
  int call_on(ctl::Op op, uint32_t handle, void *resp = nullptr, size_t resp_len = 0) {
    ctl::HandleReq req{handle, 0};
    return conn.call(op, &req, sizeof(req), resp, resp_len);
  }
  // Runs a create command whose response starts with the new object's handle and carries
  // the memfd of its shared memory, and maps that memory (length_of(resp) bytes). On any
  // failure the object is destroyed again (destroy_op) and an errno returned.
  template <typename Resp, typename LengthOf>
  int create_mapped(ctl::Op create_op, const void *req, size_t req_len, Resp &resp,
                    ctl::Op destroy_op, LengthOf length_of, void **map, size_t *map_len) {
    static_assert(offsetof(Resp, handle) == 0);
    std::vector<int> fds;
    int err = conn.call(create_op, req, req_len, &resp, sizeof(resp), nullptr, 0, &fds);
    if (!err && fds.size() != 1) err = EPROTO;
    if (!err) {
      *map_len = length_of(resp);
      *map = mmap_shared(fds[0], *map_len);
      if (!*map) err = ENOMEM;
    }
    for (int fd : fds) close_fd(fd);
    if (err && resp.handle) {
      ctl::HandleReq d{resp.handle, 0};
      conn.call(destroy_op, &d, sizeof(d), nullptr, 0);
    }
    return err;
  }
  static void *mmap_shared(int fd, size_t len);
  static void close_fd(int fd);
};

struct Td {
  ibv_td ibv;
  std::atomic<int> parents{0};  // parent domains holding it
  static Td *of(ibv_td *t) { return outer_of(t, &Td::ibv); }
};

// A protection domain (vrnicd's), or a parent domain over one (parent_domain.cpp).
struct Pd {
  ibv_pd ibv;
  Pd *protection_domain = nullptr;  // a parent domain's; nullptr for a protection domain
  Td *td = nullptr;
  void *pd_context = nullptr;
  std::atomic<int> parents{0};  // a protection domain's parent domains
  static Pd *of(ibv_pd *p) { return outer_of(p, &Pd::ibv); }
};

struct Mr {
  ibv_mr ibv;
  int access = 0;
  uint64_t iova = 0;  // the I/O address of `local` (keys name memory by it)
  // Where byte `iova` is in this process: ibv.addr, or for device memory (whose ibv.addr is
  // NULL, as rdma-core gives) the DM's mapping at the MR's offset.
  uint8_t *local = nullptr;
  static Mr *of(ibv_mr *m) { return outer_of(m, &Mr::ibv); }
  // What vrnicd registered, as the application sees it.
  void set(ibv_pd *pd, void *addr, uint8_t *local_addr, size_t length, uint64_t io_addr,
           int access_flags, const ctl::RegMrResp &resp) {
    access = access_flags;
    iova = io_addr;
    local = local_addr;
    ibv.context = pd->context;
    ibv.pd = pd;
    ibv.addr = addr;
    ibv.length = length;
    ibv.handle = resp.handle;
    ibv.lkey = resp.lkey;
    ibv.rkey = resp.rkey;
  }
};

// A position in a CQ's two sources of completions, vrnicd's ring and the direct path's.
struct CqCursor {
  uint32_t worker = 0;  // the next index of vrnicd's ring
  uint32_t direct = 0;  // the next of the direct completions
  const shm::Cqe *cqe = nullptr;  // the completion last stepped over
};

struct Cq {
  // ibv_cq_ex begins with ibv_cq's fields: one object serves both APIs.
  union {
    ibv_cq ibv;
    ibv_cq_ex ex;
  };
  uint32_t handle = 0;
  shm::CqShared *shared = nullptr;
  shm::Cqe *ring = nullptr;
  uint64_t *stamps = nullptr;  // each slot's time, if the CQ stamps its completions
  uint32_t mask = 0;
  uint32_t consumer = 0;
  size_t map_len = 0;
  pthread_spinlock_t lock;
  uint64_t event_cookie = 0;  // what its events name it by (async_events.h)
  uint64_t wc_flags = 0;  // what the ibv_cq_ex read functions may be asked for
  // Completions of WRs the direct path ran (direct_path.h), under `lock`: each is delivered
  // after the CQEs vrnicd had written when it was made (`after`, an index of vrnicd's ring),
  // so that a QP's completions come in the order of its WRs whichever path they took.
  struct DirectCqe {
    shm::Cqe cqe;  // first: the CQE a cursor points at is its DirectCqe
    uint32_t after;
    uint64_t stamp;  // when it was made (the CQ stamps its completions)
  };
  static constexpr uint32_t kDirectSlots = 256;
  std::unique_ptr<DirectCqe[]> direct;
  uint32_t direct_head = 0, direct_tail = 0;
  uint32_t direct_reserved = 0;  // slots promised to WRs running on the direct path
  CqCursor poll;                 // ibv_start_poll/next_poll: past the CQE being read
  static Cq *of(ibv_cq *c) { return reinterpret_cast<Cq *>(c); }
  static Cq *of(ibv_cq_ex *c) { return reinterpret_cast<Cq *>(c); }
  // The time of a completion a cursor points at (vrnic/clock.h's monotonic_ns), if the CQ
  // stamps its completions.
  uint64_t stamp_of(const shm::Cqe *cqe) const {
    if (cqe >= ring && cqe <= ring + mask) return stamps[cqe - ring];
    return reinterpret_cast<const DirectCqe *>(cqe)->stamp;
  }
};
static_assert(offsetof(Cq, ibv) == 0 && offsetof(Cq, ex) == 0);

struct Qp {
  // ibv_qp_ex begins with an ibv_qp: one object serves both APIs.
  union {
    ibv_qp ibv;
    ibv_qp_ex ex;
  };
  uint32_t handle = 0;
  uint32_t worker = 0;
  uint64_t event_cookie = 0;  // what vrnicd names it by in async events (async_events.h)
  shm::QpShared *shared = nullptr;
  shm::SendWqe *sq = nullptr;
  shm::RecvWqe *rq = nullptr;
  uint32_t sq_slots = 0, rq_slots = 0;
  ctl::QpCaps caps{};
  bool sq_sig_all = false;
  pthread_spinlock_t sq_lock, rq_lock;
  bool extended = false;  // created with send_ops_flags: ibv_qp_to_qp_ex works
  uint32_t ece_options = kEceSupported;  // ibv_query_ece: what vrnicd took at ibv_set_ece
  // What the direct path checks of this QP as a peer, kept by ibv_modify_qp.
  std::atomic<uint32_t> dest_qpn{0};
  std::atomic<int> access_flags{0};
  std::atomic<bool> dest_local{false};  // its path leads to one of this device's GIDs
  // An XRC target's state mirror: it shares no memory with vrnicd (it has no queue).
  std::unique_ptr<shm::QpShared> own_shared;
  // ibv_wr_* batch between ibv_wr_start and ibv_wr_complete (sq_lock held meanwhile).
  uint32_t wr_producer = 0;  // next slot to fill
  int wr_error = 0;          // first error in the batch, reported by ibv_wr_complete
  static Qp *of(ibv_qp *q) { return reinterpret_cast<Qp *>(q); }
  static Qp *of(ibv_qp_ex *q) { return reinterpret_cast<Qp *>(q); }
};
static_assert(offsetof(Qp, ibv) == 0 && offsetof(Qp, ex) == 0);

struct Ah {
  ibv_ah ibv;
  ctl::AddressVector av;  // copied into each UD send WQE
  static Ah *of(ibv_ah *a) { return outer_of(a, &Ah::ibv); }
};

struct Srq {
  ibv_srq ibv;
  uint32_t handle = 0;
  uint64_t event_cookie = 0;  // (async_events.h)
  shm::SrqShared *shared = nullptr;
  shm::RecvWqe *ring = nullptr;
  uint32_t slots = 0;
  uint32_t max_wr = 0;  // what the application may have outstanding
  uint32_t max_sge = 0;
  size_t map_len = 0;
  pthread_spinlock_t lock;
  static Srq *of(ibv_srq *s) { return outer_of(s, &Srq::ibv); }
};

struct Xrcd {
  ibv_xrcd ibv;
  uint32_t handle = 0;  // vrnicd's, of this open of the domain
  static Xrcd *of(ibv_xrcd *x) { return outer_of(x, &Xrcd::ibv); }
};

struct Channel {
  ibv_comp_channel ibv;
  uint32_t handle = 0;
  int write_fd = -1;  // our copy of the end vrnicd writes: the direct path's events
  static Channel *of(ibv_comp_channel *c) { return outer_of(c, &Channel::ibv); }
};

// Sets errno and returns NULL: for the verbs that return pointers.
template <typename T = void>
T *fail_null(int err) {
  errno = err;
  return nullptr;
}

// A context on the vrnicd at `path`: a new session, or with imported_cmd_fd >= 0 one that
// speaks for the session of that exported cmd_fd (device.cpp; import.cpp).
ibv_context *open_context(ibv_device *device, const std::string &path, int imported_cmd_fd);
ibv_device *device_at(const std::string &path);  // the device that vrnicd serves, or nullptr

// Per-object-family entry points used when the context is set up.
int post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad_wr);
// allow_type1: the WR list comes from ibv_bind_mw (type 1 window binds).
int post_send_wrs(Qp *qp, ibv_send_wr *wr, ibv_send_wr **bad_wr, bool allow_type1);
ibv_mw *alloc_mw(ibv_pd *pd, ibv_mw_type type);
int dealloc_mw(ibv_mw *mw);
int bind_mw(ibv_qp *qp, ibv_mw *mw, ibv_mw_bind *bind);
int post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad_wr);
int poll_cq(ibv_cq *cq, int n, ibv_wc *wc);
// Drops the completions of QP qpn not yet polled from cq, keeping the others in order: a QP
// moved to RESET or destroyed leaves nothing behind, as mlx5 and mlx4 do it.
void clean_cq(ibv_cq *cq, uint32_t qpn);
int req_notify_cq(ibv_cq *cq, int solicited_only);
// The CQ's next completion in order after `c` (advancing it), from vrnicd's ring (up to
// `producer`, its published index) or the direct path's; false when there is none. Under
// the CQ's lock; cq_consume gives back everything up to `c`.
bool cq_next(Cq *cq, CqCursor &c, uint32_t producer);
CqCursor cq_cursor(const Cq *cq);
void cq_consume(Cq *cq, const CqCursor &c);
// The direct path's side: a slot promised (false when the CQ is full or its lock busy, as
// when the posting thread itself is between ibv_start_poll and ibv_end_poll), then filled.
bool cq_reserve_direct(Cq *cq);
void cq_push_direct(Cq *cq, const shm::Cqe &cqe);
int query_port(ibv_context *ctx, uint8_t port, ibv_port_attr *attr, size_t len);
int query_device_ex(ibv_context *ctx, const ibv_query_device_ex_input *input,
                    ibv_device_attr_ex *attr, size_t attr_size);
int query_rt_values(ibv_context *ctx, ibv_values_ex *values);
ibv_qp *create_qp_ex(ibv_context *ctx, ibv_qp_init_attr_ex *attr);
// What create_qp_ex and open_qp share: the ibv_qp's fields and locks (qp->handle set), and an
// XRC target's own state mirror (nullptr when out of memory).
void init_ibv_qp(Qp *qp, ibv_context *context, void *qp_context, ibv_qp_type type, uint32_t qpn);
shm::QpShared *own_state_mirror(Qp *qp);
ibv_srq *create_srq_ex(ibv_context *ctx, ibv_srq_init_attr_ex *attr);
// XRC (xrc.cpp).
ibv_xrcd *open_xrcd(ibv_context *context, ibv_xrcd_init_attr *attr);
int close_xrcd(ibv_xrcd *xrcd);
int get_srq_num(ibv_srq *srq, uint32_t *srq_num);
ibv_qp *open_qp(ibv_context *context, ibv_qp_open_attr *attr);
ibv_mr *alloc_null_mr(ibv_pd *pd);
// On-demand paging (on_demand.cpp): the caps, the ODP regions ibv_advise_mr may name.
void fill_odp_caps(const Context &c, ibv_device_attr_ex *attr);
void odp_track(Context *c, Mr *mr);  // after registration or rereg: in if ODP, else out
void odp_forget(Context *c, Mr *mr);
int advise_mr(ibv_pd *pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge *sg_list,
              uint32_t num_sge);
// Thread and parent domains (parent_domain.cpp).
ibv_td *alloc_td(ibv_context *ctx, ibv_td_init_attr *attr);
int dealloc_td(ibv_td *td);
ibv_pd *alloc_parent_domain(ibv_context *ctx, ibv_parent_domain_init_attr *attr);
int dealloc_parent_domain(Pd *parent);
// Device memory (device_memory.cpp).
ibv_dm *alloc_dm(ibv_context *ctx, ibv_alloc_dm_attr *attr);
int free_dm(ibv_dm *dm);
ibv_dm *import_dm(ibv_context *ctx, uint32_t handle);
void unimport_dm(ibv_dm *dm);  // this process's mapping only
ibv_mr *reg_dm_mr(ibv_pd *pd, ibv_dm *dm, uint64_t offset, size_t length, unsigned access);
int modify_cq(ibv_cq *cq, ibv_modify_cq_attr *attr);
int post_srq_recv(ibv_srq *srq, ibv_recv_wr *wr, ibv_recv_wr **bad_wr);
// Writes receive WRs into a ring; returns 0 or the errno for ibv_post_recv/_srq_recv.
int post_recv_wrs(shm::RingIndices &ring, shm::RecvWqe *slots, uint32_t nslots, uint32_t max_wr,
                  uint32_t max_sge, ibv_recv_wr *wr, ibv_recv_wr **bad_wr);
ibv_cq_ex *create_cq_ex(ibv_context *ctx, ibv_cq_init_attr_ex *attr);
// Shared by ibv_create_cq and ibv_create_cq_ex (stamped: each completion's time kept, for a
// completion timestamp); NULL with errno set on failure.
Cq *create_cq(ibv_context *ctx, int cqe, void *cq_context, ibv_comp_channel *channel,
              int comp_vector, bool stamped = false);
// The ibv_wr_* and ibv_cq_ex entry points (qp_ex.cpp, cq_ex.cpp). Returns 0 or an errno.
int setup_qp_ex(Qp *qp, uint64_t send_ops_flags);
int setup_cq_ex(Cq *cq, uint64_t wc_flags);
// Rings the QP's doorbell after new WQEs were published.
void ring_sq_doorbell(Qp *qp);

}  // namespace vrnic::provider
