// Channels, CQs, QPs, SRQs and AHs of one device (queue_objects.h).
#include "queue_objects.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <thread>

#include "dataplane/transport.h"
#include "client_fds.h"
#include "errno_status.h"
#include "qp_state_machine.h"
#include "shared_region.h"

namespace vrnic {
namespace {

// What ibv_modify_qp may set in qp_access_flags: the enum ibv_access_flags bits, which the
// kernel passes on unchecked (pyverbs gives a QP its MRs' flags, ON_DEMAND among them). Only
// the remote ones mean anything to a QP; a bit outside the enum is EINVAL.
constexpr uint32_t kQpAccessKnown =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
    IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;

}  // namespace

int QueueObjects::create_channel(Session &s, const ctl::Message &m, ctl::HandleResp &resp) {
  if (m.fds.size() != 1) return EINVAL;
  // Each costs vrnicd an fd (issue 17, row 9).
  QuotaCharge charge = s.pay(quotas_, Quota::kChannels), fd_charge = s.pay(quotas_, Quota::kFds);
  if (charge.status() || fd_charge.status()) return ENOMEM;
  int fd = take_event_channel(m.fds[0], s.caller.uid);
  if (fd < 0) return -fd;
  uint32_t h = channels_.insert(
      std::unique_ptr<CompletionChannel>(new CompletionChannel{s.id, s.payer(), fd}));
  if (!h) return ENOMEM;
  charge.keep();
  fd_charge.keep();
  s.channels.insert(h);
  resp.handle = h;
  return 0;
}

int QueueObjects::destroy_channel(Session &s, uint32_t handle) {
  CompletionChannel *ch = channels_.get(handle);
  if (!ch || ch->session != s.id) return EINVAL;
  if (ch->refs) return EBUSY;
  s.refund(quotas_, ch->payer, Quota::kChannels);
  s.refund(quotas_, ch->payer, Quota::kFds);
  channels_.remove(handle);
  s.channels.erase(handle);
  return 0;
}

int QueueObjects::create_cq(Session &s, const ctl::CreateCqReq &req, ctl::CreateCqResp &resp,
                            std::vector<int> &fds) {
  if (req.cqe < 1 || req.cqe > dev_.info.max_cqe) return EINVAL;
  if (dev_.cqs.size() >= dev_.capacity.cqs) return ENOMEM;
  CompletionChannel *ch = nullptr;
  if (req.channel) {
    ch = channels_.get(req.channel);
    if (!ch || ch->session != s.id) return EINVAL;
  }
  QuotaCharge charge = s.pay(quotas_, Quota::kCqs), map_charge = s.pay(quotas_, Quota::kMappings);
  if (charge.status() || map_charge.status()) return ENOMEM;
  if (req.flags & ~ctl::kCqStamped) return EINVAL;
  const bool stamped = req.flags & ctl::kCqStamped;
  uint32_t slots = std::bit_ceil(req.cqe);
  size_t bytes = shm::cq_region_bytes(slots, stamped);
  absl::StatusOr<SharedRegion> region = make_shared_region("vrnic-cq", bytes);
  if (!region.ok()) return errno_of(region.status());
  void *map = region->map;
  const int fd = region->fd;
  auto cq = std::make_unique<CompletionQueue>();
  cq->session = s.id;
  cq->payer = s.payer();
  cq->cookie = req.cookie;
  cq->channel_fd = ch ? ch->fd : -1;
  cq->channel = req.channel;
  cq->async_fd = s.async_fd;
  cq->lay_out(map, slots, stamped);
  cq->multi_worker = workers_.size() > 1;  // its QPs may be on several workers
  // Published complete, with no worker stopped: none reaches it before a QP is attached to it.
  const uint32_t handle =
      dev_.cqs.insert(std::move(cq), 1, [](CompletionQueue &c, uint32_t h, uint8_t) { c.handle = h; });
  if (!handle) {
    region->release();
    return ENOMEM;
  }
  charge.keep();
  map_charge.keep();
  if (ch) ch->refs++;
  s.cqs.insert(handle);
  resp.handle = handle;
  resp.slots = slots;
  fds.push_back(fd);
  return 0;
}

int QueueObjects::destroy_cq(Session &s, uint32_t handle) {
  if (!owns(s.cqs, handle)) return EINVAL;
  // No QP uses it (the refs are this thread's: QPs attach and detach here), and the workers
  // reach a CQ only through a QP: it goes with no worker involved.
  if (dev_.cqs.get(handle)->refs) return EBUSY;
  const uid_t payer = dev_.cqs.get(handle)->payer;
  const uint32_t channel = remove_cq(handle);
  if (CompletionChannel *ch = channels_.get(channel)) ch->refs--;
  s.cqs.erase(handle);
  s.refund(quotas_, payer, Quota::kCqs);
  s.refund(quotas_, payer, Quota::kMappings);
  return 0;
}

// A new ring takes over the CQEs not yet polled; the provider holds its CQ lock meanwhile.
int QueueObjects::resize_cq(Session &s, const ctl::ResizeCqReq &req, ctl::CreateCqResp &resp,
                            std::vector<int> &fds) {
  if (!owns(s.cqs, req.handle)) return EINVAL;
  if (req.cqe < 1 || req.cqe > dev_.info.max_cqe) return EINVAL;
  // The new ring is mapped before the old one goes: for that moment, one mapping more.
  QuotaCharge map_charge(quotas_, s.caller.uid, Quota::kMappings);
  if (map_charge.status()) return map_charge.status();
  uint32_t slots = std::bit_ceil(req.cqe);
  const bool stamped = dev_.cqs.get(req.handle)->stamps != nullptr;  // as it was made
  size_t bytes = shm::cq_region_bytes(slots, stamped);
  absl::StatusOr<SharedRegion> region = make_shared_region("vrnic-cq", bytes);
  if (!region.ok()) return errno_of(region.status());
  void *map = region->map;
  const int fd = region->fd;
  auto *fresh = static_cast<shm::CqShared *>(map);
  int st = 0;
  // The resize comes after the work requests posted before it, as on a NIC that has taken
  // their doorbells: the completions it counts include those of UD and UC sends still in
  // their send queues, which complete when sent (an RC completion waits for its peer's ACK,
  // which nothing here waits for). Without this, what a resize found depended on how far the
  // worker had got (pyverbs' test_resize_cq failed now and then on the loop port). Bounded:
  // a worker that has not sent them in 20 ms is not waited for longer.
  CompletionQueue *target = dev_.cqs.get(req.handle);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  for (bool sending = true; sending && std::chrono::steady_clock::now() < deadline;) {
    workers_.execute_all([&] {
      sending = false;
      for (uint32_t h : s.qps) {
        QueuePair *qp = dev_.qps.get(h);
        if (qp && qp->send_cq == target && qp->type != IBV_QPT_RC && requester_has_work(*qp))
          sending = true;
      }
    });
    if (sending) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  workers_.execute_all([&] {
    CompletionQueue &cq = *dev_.cqs.get(req.handle);
    uint32_t consumer = cq.shared->ring.consumer.load(std::memory_order_acquire);
    uint32_t pending = cq.producer - consumer;
    if (pending > slots) {
      st = EINVAL;  // the completions waiting would not fit
      return;
    }
    shm::Cqe *ring = shm::cq_ring(map);
    uint64_t *stamps = stamped ? shm::cq_stamps(map, slots) : nullptr;
    for (uint32_t i = 0; i < pending; i++) {
      ring[i] = cq.ring[(consumer + i) & cq.mask];
      if (stamps) stamps[i] = cq.stamps[(consumer + i) & cq.mask];
    }
    fresh->ring.producer.store(pending);
    fresh->ring.consumer.store(0);
    fresh->notify.store(cq.shared->notify.load());
    ::munmap(cq.shared, cq.region_bytes());
    cq.lay_out(map, slots, stamped);
    cq.producer = pending;
    cq.overrun_reported = false;
  });
  if (st) {
    region->release();
    return st;
  }
  resp.handle = req.handle;
  resp.slots = slots;
  fds.push_back(fd);
  return 0;
}

int QueueObjects::create_qp(Session &s, const ctl::CreateQpReq &req, ctl::CreateQpResp &resp,
                            std::vector<int> &fds) {
  if (req.qp_type == IBV_QPT_RAW_PACKET || req.qp_type == IBV_QPT_DRIVER) return EOPNOTSUPP;
  if (req.qp_type == IBV_QPT_XRC_RECV) return create_xrc_target(s, req, resp);  // xrc_targets.cpp
  if (req.qp_type != IBV_QPT_RC && req.qp_type != IBV_QPT_UC && req.qp_type != IBV_QPT_UD &&
      req.qp_type != IBV_QPT_XRC_SEND)
    return EINVAL;
  // An XRC initiator (IB spec 9.8.2) is a send queue in a PD, with no receive side.
  const bool xrc_initiator = req.qp_type == IBV_QPT_XRC_SEND;
  ProtectionDomain *pd = memory_.pds().get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (!owns(s.cqs, req.send_cq) || (!xrc_initiator && !owns(s.cqs, req.recv_cq))) return EINVAL;
  if (req.srq && (xrc_initiator || req.qp_type == IBV_QPT_UD || !owns(s.srqs, req.srq) ||
                  dev_.srqs.get(req.srq)->xrcd))
    return EINVAL;  // an XRC SRQ is reached through its domain's target QPs only
  const ctl::QpCaps &c = req.caps;
  if (c.max_send_wr > dev_.info.max_qp_wr || c.max_recv_wr > dev_.info.max_qp_wr ||
      c.max_send_sge > shm::kMaxSge || c.max_recv_sge > shm::kMaxSge ||
      c.max_inline_data > shm::kMaxInline)
    return EINVAL;
  if (s.qps.size() >= shm::kMaxQpsPerSession || dev_.qps.size() >= dev_.capacity.qps) return ENOMEM;
  // An initiator's receive queue gets the smallest ring, which vrnicd never reads.
  uint32_t sq_slots = std::bit_ceil(std::max(c.max_send_wr, 1u));
  uint32_t rq_slots = xrc_initiator ? 1 : std::bit_ceil(std::max(c.max_recv_wr, 1u));
  size_t bytes = shm::qp_region_bytes(sq_slots, rq_slots);
  // A mapping only when the session's ring arena opens a chunk for it.
  // A new chunk is a mapping and a descriptor vrnicd keeps until the session closes.
  const uint64_t chunk = s.rings.needs_chunk(bytes) ? 1 : 0;
  QuotaCharge charge = s.pay(quotas_, Quota::kQps),
              map_charge = s.pay(quotas_, Quota::kMappings, chunk),
              fd_charge = s.pay(quotas_, Quota::kFds, chunk);
  if (charge.status() || map_charge.status() || fd_charge.status()) return ENOMEM;
  absl::StatusOr<RingBlock> ring = s.rings.allocate(bytes);
  if (!ring.ok()) return errno_of(ring.status());
  const uint32_t handle =
      publish_qp(s, req, ring->map, sq_slots, rq_slots, [&](QueuePair &q) {
        CompletionQueue *send_cq = dev_.cqs.get(req.send_cq);
        qp_attach_queues(q, send_cq, xrc_initiator ? send_cq : dev_.cqs.get(req.recv_cq),
                         req.srq ? dev_.srqs.get(req.srq) : nullptr);
      });
  if (!handle) {
    s.rings.free(*ring);
    return ENOMEM;
  }
  charge.keep();
  map_charge.keep();
  fd_charge.keep();
  pd->refs++;
  s.qps.insert(handle);
  qp_owners_[handle] = {req.pd, req.send_cq, req.recv_cq, req.srq, s.payer(), *ring};
  const QueuePair &qp = *dev_.qps.get(handle);
  resp.handle = handle;
  resp.qpn = qp.qpn;
  resp.sq_slots = sq_slots;
  resp.rq_slots = rq_slots;
  resp.worker = qp.worker;
  resp.caps = {sq_slots, rq_slots, shm::kMaxSge, shm::kMaxSge, shm::kMaxInline, 0};
  if (xrc_initiator) resp.caps.max_recv_wr = resp.caps.max_recv_sge = 0;
  resp.ring_chunk = ring->chunk;
  resp.ring_offset = ring->offset;
  resp.ring_chunk_bytes = s.rings.chunk_bytes(ring->chunk);
  fds.push_back(s.rings.chunk_fd(ring->chunk));  // lent: the arena keeps it (command_table)
  return 0;
}

uint32_t QueueObjects::publish_qp(Session &s, const ctl::CreateQpReq &req, void *region,
                                  uint32_t sq_slots, uint32_t rq_slots,
                                  absl::FunctionRef<void(QueuePair &)> attach) {
  auto qp = std::make_unique<QueuePair>();
  qp->session = s.id;
  qp->pd = req.qp_type == IBV_QPT_XRC_RECV ? 0 : req.pd;
  qp->sq_sig_all = req.sq_sig_all;
  qp->cookie = req.cookie;
  qp->async_fd = s.async_fd;
  qp_init(*qp, uint8_t(req.qp_type), region, sq_slots, rq_slots,
          mtu_bytes(dev_.info.port_active_mtu));
  Worker &w = workers_.for_new_qp();
  qp->worker = uint8_t(w.index());
  qp->shared->worker.store(w.index());
  // Published complete, with no worker stopped: a worker reaches a QP in RESET only to find
  // nothing to do, and it is its own from the first modify (run there).
  const uint32_t handle = dev_.qps.insert(std::move(qp), 1, [&](QueuePair &q, uint32_t h, uint8_t) {
    q.handle = h;
    q.qpn = Device::qpn_of_handle(h, ::arc4random());
    if (s.directory && q.type == IBV_QPT_RC) q.directory = &s.directory->qps[qpn_index(q.qpn)];
    attach(q);
  });
  if (handle) workers_.qp_added(w.index());
  return handle;
}

int QueueObjects::modify_qp(Session &s, const ctl::ModifyQpReq &req) {
  const ctl::CmQpSteps::Step step{req.attr_mask, 0, req.attr};
  return modify_qp_steps(s, req.handle, &step, 1);
}

int QueueObjects::modify_qp_steps(Session &s, uint32_t handle, const ctl::CmQpSteps::Step *steps,
                                  uint32_t n) {
  if (!owns(s.qps, handle)) return EINVAL;
  int st = 0;
  int resolve_on = -1;  // the worker whose port should look up the peer's link address
  uint8_t peer[16];
  // Every step in one command to the QP's worker, between its bursts: the others never
  // notice, and the change has taken effect when the call returns.
  QueuePair &qp = *dev_.qps.get(handle);
  Worker &owner = workers_[qp.worker];
  owner.run_between_bursts([&] {
    for (uint32_t i = 0; i < n && !st; i++) {
      bool resolve = false;
      st = modify_step(qp, steps[i].attr, steps[i].attr_mask, s.caller.uid == 0, &resolve);
      if (!st && resolve) {
        resolve_on = qp.worker;
        std::memcpy(peer, qp.attr.ah.dgid, sizeof(peer));
      }
    }
  });
  if (resolve_on >= 0) workers_.resolve_peer(uint32_t(resolve_on), peer);
  return st;
}

// One ibv_modify_qp, on the QP's worker: the checks the kernel makes (EINVAL), then the change.
int QueueObjects::modify_step(QueuePair &qp, const ctl::QpAttrWire &a, uint32_t mask,
                              bool privileged, bool *resolve) {
  uint32_t cur = qp.attr.qp_state;
  if ((mask & IBV_QP_CUR_STATE) && a.cur_qp_state != cur) return EINVAL;
  uint32_t next = (mask & IBV_QP_STATE) ? a.qp_state : cur;
  if (int st = check_qp_transition(qp.type, cur, next, mask)) return st;
  // RoCE has no alternate paths (no automatic path migration): refused as Linux does.
  if (mask & IBV_QP_ALT_PATH) return EINVAL;
  // A controlled Q_Key (high bit set: the GSI's 0x80010000 among them) only for a privileged
  // user, as Linux's uverbs allows it only with CAP_NET_RAW: with one, any UD QP could pass
  // datagrams to QP1s as the CM (issue 28, row 8). EPERM, as the kernel answers.
  if ((mask & IBV_QP_QKEY) && (a.qkey & 0x80000000u) && !privileged) return EPERM;
  // Attribute values (EINVAL as the kernel answers them).
  if (((mask & IBV_QP_PORT) && a.port_num != 1) ||
      ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0) ||
      ((mask & IBV_QP_PATH_MTU) &&
       (a.path_mtu < IBV_MTU_256 || a.path_mtu > dev_.info.port_active_mtu)) ||
      ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > kMaxRdAtomic) ||
      ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > kMaxRdAtomic) ||
      ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) ||
      ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) ||
      ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) ||
      ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) ||
      ((mask & IBV_QP_ACCESS_FLAGS) && (a.qp_access_flags & ~kQpAccessKnown)) ||
      ((mask & IBV_QP_AV) &&
       (a.ah.sgid_index >= ctl::kGidTableLen ||
        dev_.info.gids[a.ah.sgid_index].type == ctl::kGidEmpty || !a.ah.is_global)))
    return EINVAL;
  *resolve = qp_modify(workers_[qp.worker], qp, a, mask, next);
  return 0;
}

int QueueObjects::query_qp(Session &s, uint32_t handle, ctl::QueryQpResp &resp) {
  if (!owns(s.qps, handle)) return EINVAL;
  QueuePair &qp = *dev_.qps.get(handle);
  workers_[qp.worker].run_between_bursts([&] {
    resp.attr = qp.attr;
    resp.attr.cur_qp_state = qp.attr.qp_state;
    resp.attr.sq_draining = qp.attr.qp_state == IBV_QPS_SQD && qp_sq_busy(qp);
  });
  return 0;
}

// ECE: the options the QP runs with from now on, those of them vrnic knows (an unknown one is
// not an error: the answer says what was taken, as ibv_set_ece's IN/OUT argument does).
int QueueObjects::set_ece(Session &s, const ctl::SetEceReq &req, ctl::SetEceResp &resp) {
  if (!owns(s.qps, req.handle)) return EINVAL;
  QueuePair &qp = *dev_.qps.get(req.handle);
  resp.options = req.options & kEceSupported;
  workers_[qp.worker].run_between_bursts([&] {
    qp.ece_set = true;
    qp.ece_options = resp.options;
  });
  return 0;
}

// Out of the table first, then two grace periods around its worker's forgetting it: the
// first ends every other worker's hold on it (a doorbell passed on to its owner is in the
// owner's ring by then), the second the packets it built (inline data points into its send
// queue). No worker stops.
int QueueObjects::destroy_qp(Session &s, uint32_t handle) {
  if (!owns(s.qps, handle)) return EINVAL;
  // A target QP another session has opened stays for it: only this session's hold goes (and
  // its charge: a target's holders are refunded as they let go).
  const bool xrc_target = xrc_targets_.contains(handle);
  if (let_go_of_xrc_target(s, handle)) {
    s.qps.erase(handle);
    return 0;
  }
  std::unique_ptr<QueuePair> qp = dev_.qps.remove(handle);
  workers_.synchronize();
  Worker &owner = workers_[qp->worker];
  owner.run_between_bursts([&] {
    owner.take_forwarded_doorbells();
    owner.keep_direct_counts(*qp);
    owner.forget_qp(*qp);
  });
  workers_.synchronize();
  free_qp(std::move(qp));
  leave_mcast(s, {handle});
  const QpOwner &owner_of = qp_owners_[handle];
  if (ProtectionDomain *pd = memory_.pds().get(owner_of.pd)) pd->refs--;
  if (owner_of.ring.map) s.rings.free(owner_of.ring);  // its chunk stays mapped for the next QP
  if (!xrc_target) s.refund(quotas_, owner_of.payer, Quota::kQps);
  qp_owners_.erase(handle);
  s.qps.erase(handle);
  return 0;
}

int QueueObjects::create_srq(Session &s, const ctl::CreateSrqReq &req, ctl::CreateSrqResp &resp,
                             std::vector<int> &fds) {
  ProtectionDomain *pd = memory_.pds().get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (req.srq_type == IBV_SRQT_TM) return EOPNOTSUPP;  // no hardware tag matching
  if (req.srq_type != IBV_SRQT_BASIC && req.srq_type != IBV_SRQT_XRC) return EINVAL;
  // An XRC SRQ: in an XRC domain, with its own CQ (IB spec 9.8.2).
  const bool xrc = req.srq_type == IBV_SRQT_XRC;
  const uint32_t xrc_domain = xrc ? xrcd_domain(s, req.xrcd) : 0;
  if (xrc && (!xrc_domain || !owns(s.cqs, req.cq))) return EINVAL;
  const ctl::SrqAttrWire &a = req.attr;
  if (a.max_wr < 1 || a.max_wr > dev_.info.max_srq_wr || a.max_sge > shm::kMaxSge ||
      a.srq_limit > a.max_wr)
    return EINVAL;
  if (dev_.srqs.size() >= dev_.capacity.srqs) return ENOMEM;
  QuotaCharge charge = s.pay(quotas_, Quota::kSrqs), map_charge = s.pay(quotas_, Quota::kMappings);
  if (charge.status() || map_charge.status()) return ENOMEM;
  uint32_t slots = std::bit_ceil(a.max_wr);
  size_t bytes = shm::srq_region_bytes(slots);
  absl::StatusOr<SharedRegion> region = make_shared_region("vrnic-srq", bytes);
  if (!region.ok()) return errno_of(region.status());
  void *map = region->map;
  const int fd = region->fd;
  auto srq = std::make_unique<ReceiveQueue>();
  auto *shared = static_cast<shm::SrqShared *>(map);
  shared->limit.store(a.srq_limit);
  srq->indices = &shared->ring;
  srq->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<uint8_t *>(map) + shm::kSrqHeaderBytes);
  srq->mask = slots - 1;
  srq->limit = &shared->limit;
  srq->session = s.id;
  srq->payer = s.payer();
  srq->pd = req.pd;
  srq->cookie = req.cookie;
  srq->async_fd = s.async_fd;
  srq->multi_worker = workers_.size() > 1;  // its QPs may be on several workers
  srq->xrcd = xrc_domain;
  srq->cq = xrc ? dev_.cqs.get(req.cq) : nullptr;
  const uint32_t handle =
      dev_.srqs.insert(std::move(srq), 1, [](ReceiveQueue &q, uint32_t h, uint8_t) { q.handle = h; });
  if (!handle) {
    region->release();
    return ENOMEM;
  }
  charge.keep();
  map_charge.keep();
  pd->refs++;
  if (xrc) {
    dev_.cqs.get(req.cq)->refs++;
    hold_xrcd(req.xrcd, +1);
    xrc_srq_opens_[handle] = req.xrcd;
  }
  s.srqs.insert(handle);
  resp.handle = handle;
  resp.slots = slots;
  resp.attr = {slots, shm::kMaxSge, a.srq_limit, 0};
  fds.push_back(fd);
  return 0;
}

int QueueObjects::modify_srq(Session &s, const ctl::ModifySrqReq &req) {
  if (!owns(s.srqs, req.handle)) return EINVAL;
  if (req.attr_mask & ~uint32_t(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  // The limit is shared memory the workers read atomically: no worker is involved.
  ReceiveQueue &srq = *dev_.srqs.get(req.handle);
  uint32_t slots = srq.mask + 1;
  // The ring is sized at creation; "resizing" within it is all vrnic offers.
  if ((req.attr_mask & IBV_SRQ_MAX_WR) && (req.attr.max_wr < 1 || req.attr.max_wr > slots))
    return EINVAL;
  if (req.attr_mask & IBV_SRQ_LIMIT) {
    if (req.attr.srq_limit > slots) return EINVAL;
    srq.limit->store(req.attr.srq_limit);
  }
  return 0;
}

int QueueObjects::query_srq(Session &s, uint32_t handle, ctl::QuerySrqResp &resp) {
  if (!owns(s.srqs, handle)) return EINVAL;
  ReceiveQueue &srq = *dev_.srqs.get(handle);
  resp.attr = {srq.mask + 1, shm::kMaxSge, srq.limit->load(), 0};
  return 0;
}

int QueueObjects::destroy_srq(Session &s, uint32_t handle) {
  if (!owns(s.srqs, handle)) return EINVAL;
  // As a CQ: reached by the workers only through its QPs, of which it has none.
  if (dev_.srqs.get(handle)->refs) return EBUSY;
  const uid_t payer = dev_.srqs.get(handle)->payer;
  const uint32_t pd = remove_srq(handle);  // (after a grace period, for an XRC SRQ)
  if (ProtectionDomain *p = memory_.pds().get(pd)) p->refs--;
  s.srqs.erase(handle);
  s.refund(quotas_, payer, Quota::kSrqs);
  s.refund(quotas_, payer, Quota::kMappings);
  return 0;
}

int QueueObjects::create_ah(Session &s, const ctl::CreateAhReq &req, ctl::HandleResp &resp) {
  ProtectionDomain *pd = memory_.pds().get(req.pd);
  if (!pd || pd->session != s.id) return EINVAL;
  if (req.av.port_num != 1) return EINVAL;
  // RoCE addresses by GID: an AH without a GRH names no peer (the kernel's
  // rdma_check_ah_attr refuses it with EINVAL as well).
  if (!req.av.is_global || req.av.sgid_index >= ctl::kGidTableLen ||
      dev_.info.gids[req.av.sgid_index].type == ctl::kGidEmpty)
    return EINVAL;
  if (ahs_.size() >= dev_.capacity.ahs) return ENOMEM;
  QuotaCharge charge = s.pay(quotas_, Quota::kAhs);
  if (charge.status()) return charge.status();
  uint32_t h =
      ahs_.insert(std::make_unique<AddressHandle>(AddressHandle{s.id, s.payer(), req.pd, req.av}));
  if (!h) return ENOMEM;
  charge.keep();
  pd->refs++;
  s.ahs.insert(h);
  resp.handle = h;
  if (!is_multicast_gid(req.av.dgid)) workers_.resolve_peer(0, req.av.dgid);  // (a group has no neighbour)
  return 0;
}

int QueueObjects::destroy_ah(Session &s, uint32_t handle) {
  AddressHandle *ah = ahs_.get(handle);
  if (!ah || ah->session != s.id) return EINVAL;
  if (ProtectionDomain *pd = memory_.pds().get(ah->pd)) pd->refs--;
  s.refund(quotas_, ah->payer, Quota::kAhs);
  ahs_.remove(handle);
  s.ahs.erase(handle);
  return 0;
}

// A QP out of its table and off its worker's lists, after the grace periods: its queues
// count it no more. (Its memory is its session's ring arena's.)
void QueueObjects::free_qp(std::unique_ptr<QueuePair> qp) {
  qp_publish_direct(*qp, true);  // no worker has it now: this thread is its only writer
  qp_detach_queues(*qp);
  workers_.qp_removed(qp->worker);
  xrc_targets_.erase(qp->handle);  // (a target's memory is vrnicd's own)
}

// SRQs and CQs are reached by the workers only through QPs: out of a table, one is gone once
// its QPs are (a closing session's, after their grace periods).

// An XRC SRQ is reached by number, by the target QPs of its domain, whoever's: out of its
// table, it goes after a grace period.
uint32_t QueueObjects::remove_srq(uint32_t handle) {
  std::unique_ptr<ReceiveQueue> srq = dev_.srqs.remove(handle);
  const uint32_t pd = srq->pd;
  if (srq->xrcd) {
    workers_.synchronize();
    forget_xrc_srq(handle);
  }
  free_srq(std::move(srq));
  return pd;
}

void QueueObjects::forget_xrc_srq(uint32_t handle) {
  hold_xrcd(xrc_srq_opens_.at(handle), -1);
  xrc_srq_opens_.erase(handle);
}

void QueueObjects::free_srq(std::unique_ptr<ReceiveQueue> srq) {
  if (srq->cq) srq->cq->refs--;
  ::munmap(reinterpret_cast<uint8_t *>(srq->indices), shm::srq_region_bytes(srq->mask + 1));
}

uint32_t QueueObjects::remove_cq(uint32_t handle) {
  CompletionQueue *cq = dev_.cqs.get(handle);
  uint32_t channel = cq->channel;
  ::munmap(cq->shared, cq->region_bytes());
  dev_.cqs.remove(handle);
  return channel;
}

void QueueObjects::take_out(Session &s) {
  // Target QPs that others have opened stay for them.
  std::vector<uint32_t> kept;
  for (uint32_t h : s.qps)
    if (let_go_of_xrc_target(s, h)) kept.push_back(h);
  for (uint32_t h : kept) s.qps.erase(h);
  closing_qps_.reserve(s.qps.size());
  for (uint32_t h : s.qps)
    if (std::unique_ptr<QueuePair> qp = dev_.qps.remove(h)) closing_qps_.push_back(std::move(qp));
  // Its XRC SRQs too: other sessions' target QPs reach them by number until the grace period.
  for (uint32_t h : s.srqs) {
    if (!dev_.srqs.get(h)->xrcd) continue;
    closing_srqs_.push_back(dev_.srqs.remove(h));
    forget_xrc_srq(h);
  }
}

void QueueObjects::forget_taken() {
  std::vector<std::vector<QueuePair *>> by_worker(workers_.size());
  for (auto &qp : closing_qps_) by_worker[qp->worker].push_back(qp.get());
  for (size_t i = 0; i < workers_.size(); i++) {
    Worker &w = workers_[i];
    w.run_between_bursts([&] {
      w.take_forwarded_doorbells();
      w.forget_qps(by_worker[i]);
    });
  }
}

void QueueObjects::free_taken(Session &s) {
  for (auto &qp : closing_qps_) free_qp(std::move(qp));
  closing_qps_.clear();
  closing_qps_.shrink_to_fit();
  for (auto &srq : closing_srqs_) free_srq(std::move(srq));
  closing_srqs_.clear();
  for (uint32_t h : s.srqs) {
    const ReceiveQueue *srq = dev_.srqs.get(h);
    if (srq && srq->session == s.id) remove_srq(h);  // (the XRC ones went above)
  }
  for (uint32_t h : s.cqs) remove_cq(h);
}

void QueueObjects::release(Session &s) {
  leave_mcast(s, s.qps);
  release_xrcds(s);
  for (uint32_t h : s.qps) qp_owners_.erase(h);
  for (uint32_t h : s.ahs) ahs_.remove(h);
  for (uint32_t h : s.channels) channels_.remove(h);
  // (What the session still held goes back with its ledger.)
}

}  // namespace vrnic
