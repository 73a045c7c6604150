// The transport test harness: two fake hosts, a scripted wire and a virtual clock (see
// transport_harness.h).
#include "transport_harness.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "dataplane/transport.h"
#include "vrnic/ctl_io.h"

namespace vrnic::testing {
namespace {

using namespace wire;

constexpr uint32_t kPd = 1;
constexpr uint32_t kSlots = 256;
constexpr uint32_t kRoceV2 = 1;  // GidEntry::type

void *zeroed_region(size_t bytes) {
  void *p = std::aligned_alloc(4096, (bytes + 4095) & ~size_t(4095));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

const char *operation_name(uint8_t opcode) {
  static const char *const kNames[] = {"SEND_FIRST",
                                       "SEND_MIDDLE",
                                       "SEND_LAST",
                                       "SEND_LAST_IMM",
                                       "SEND_ONLY",
                                       "SEND_ONLY_IMM",
                                       "WRITE_FIRST",
                                       "WRITE_MIDDLE",
                                       "WRITE_LAST",
                                       "WRITE_LAST_IMM",
                                       "WRITE_ONLY",
                                       "WRITE_ONLY_IMM",
                                       "READ_REQUEST",
                                       "READ_RESPONSE_FIRST",
                                       "READ_RESPONSE_MIDDLE",
                                       "READ_RESPONSE_LAST",
                                       "READ_RESPONSE_ONLY",
                                       "ACK",
                                       "ATOMIC_ACK",
                                       "CMP_SWAP",
                                       "FETCH_ADD"};
  uint8_t op = op_operation(opcode);
  if (op == kAtomicWrite) return "ATOMIC_WRITE";
  return op < std::size(kNames) ? kNames[op] : "?";
}

std::string syndrome_name(uint8_t syndrome) {
  switch (aeth_kind(syndrome)) {
    case kAethAck:
      return "";
    case kAethRnrNak:
      return " RNR_NAK";
    default:
      return syndrome == kNakPsnSeqError ? " NAK_SEQ" : " NAK_" + std::to_string(syndrome & 0x1f);
  }
}

}  // namespace

QpEnd::QpEnd(char n, const uint8_t gid[16], uint8_t type)
    : name(n), dev(uint32_t(n - 'A')), host(dev, uint8_t(n - 'A')), mem(64 * 1024) {
  dev.set_gid(0, gid, kRoceV2, 0);
  auto mr = std::make_unique<MemoryRegion>();
  mr->pd = kPd;
  mr->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  mr->addr = mr->iova = addr(0);
  mr->length = mem.size();
  mr->pieces.push_back({addr(0), mem.size(), mem.data()});
  MemoryRegion *raw_mr = mr.get();
  uint32_t handle = dev.mrs.insert(std::move(mr));
  key = raw_mr->key = handle << 8 | 0x5a;
  raw_mr->handle = handle;

  // The async events' channel, as the provider makes it; read without waiting.
  if (ctl::make_event_channel(events_) != 0) throw std::runtime_error("event channel");
  ::fcntl(events_[0], F_SETFL, O_NONBLOCK);
  for (int i = 0; i < 2; i++) {
    auto cq = std::make_unique<CompletionQueue>();
    cq_region_[i] = zeroed_region(shm::cq_region_bytes(kSlots));
    cq->lay_out(cq_region_[i], kSlots, false);
    cq->async_fd = events_[1];
    cq_[i] = cq.get();
    cq_[i]->handle = dev.cqs.insert(std::move(cq));
  }

  auto qp_owned = std::make_unique<QueuePair>();
  qp_owned->pd = kPd;
  qp_owned->async_fd = events_[1];
  qp_region_ = zeroed_region(shm::qp_region_bytes(kSlots, kSlots));
  qp_init(*qp_owned, type, qp_region_, kSlots, kSlots, mtu_bytes(IBV_MTU_1024));
  qp = qp_owned.get();
  qp->handle = dev.qps.insert(std::move(qp_owned));
  qp->qpn = Device::qpn_of_handle(qp->handle, uint32_t(n));
  if (type != IBV_QPT_XRC_RECV) {
    qp_attach_queues(*qp, cq_[0], cq_[1], nullptr);
    return;
  }
  // An XRC target: no queues of its own, an XRC SRQ in its domain (1) with the receive CQ.
  constexpr uint32_t kDomain = 1;
  qp->pd = 0;
  qp->xrcd = kDomain;
  auto srq = std::make_unique<ReceiveQueue>();
  srq_region_ = zeroed_region(shm::srq_region_bytes(kSlots));
  srq->indices = &static_cast<shm::SrqShared *>(srq_region_)->ring;
  srq->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<uint8_t *>(srq_region_) +
                                               shm::kSrqHeaderBytes);
  srq->mask = kSlots - 1;
  srq->pd = kPd;
  srq->xrcd = kDomain;
  srq->cq = cq_[1];
  srq->async_fd = events_[1];
  srq_ = srq.get();
  srq_->handle = dev.srqs.insert(std::move(srq));
}

QpEnd::~QpEnd() {
  qp_release(host, *qp);
  dev.qps.remove(qp->handle);
  if (srq_) {
    dev.srqs.remove(srq_->handle);
    std::free(srq_region_);
  }
  for (int i = 0; i < 2; i++) {
    dev.cqs.remove(cq_[i]->handle);
    std::free(cq_region_[i]);
  }
  std::free(qp_region_);
  ::close(events_[0]);
  ::close(events_[1]);
}

void QpEnd::post_send(const shm::SendWqe &wqe) {
  uint32_t p = qp->shared->sq.producer.load();
  qp->sq[p & qp->sq_mask] = wqe;
  if (qp->type == IBV_QPT_XRC_SEND) qp->sq[p & qp->sq_mask].remote_srqn = xrc_srqn;
  qp->shared->sq.producer.store(p + 1);
  host.schedule(*qp);
}

void QpEnd::post_recv(uint64_t wr_id, size_t offset, uint32_t length) {
  ReceiveQueue &rq = srq_ ? *srq_ : qp->own_rq;
  uint32_t p = rq.indices->producer.load();
  shm::RecvWqe &w = rq.ring[p & rq.mask];
  w = {};
  w.wr_id = wr_id;
  w.num_sge = 1;
  w.length = length;
  w.sge[0] = {addr(offset), length, key};
  rq.indices->producer.store(p + 1);
}

std::vector<shm::Cqe> QpEnd::poll(CompletionQueue &cq) {
  std::vector<shm::Cqe> out;
  uint32_t c = cq.shared->ring.consumer.load();
  while (c != cq.shared->ring.producer.load()) out.push_back(cq.ring[c++ & cq.mask]);
  cq.shared->ring.consumer.store(c);
  return out;
}

std::vector<shm::Cqe> QpEnd::poll_send_cq() {
  return poll(*cq_[0]);
}

std::vector<shm::Cqe> QpEnd::poll_recv_cq() {
  return poll(*cq_[1]);
}

std::vector<uint32_t> QpEnd::async_events() {
  std::vector<uint32_t> out;
  ctl::EventRecord rec;
  while (::read(events_[0], &rec, sizeof(rec)) == sizeof(rec)) out.push_back(rec.type);
  return out;
}

void QpEnd::modify(const ctl::QpAttrWire &attr, uint32_t mask) {
  qp_modify(host, *qp, attr, mask, (mask & IBV_QP_STATE) ? attr.qp_state : qp->state());
}

QpPair::QpPair(PairOptions o)
    : a('A', (const uint8_t[16]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}, o.type),
      b('B', (const uint8_t[16]){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2},
        o.type == IBV_QPT_XRC_SEND ? uint8_t(IBV_QPT_XRC_RECV) : o.type),
      options_(o) {
  a.xrc_srqn = b.srq_number();
  // Each device also holds the other's GID, as one vrnicd on the loop port does: no peer
  // window (unless the test asks for one), so every retransmission is the IB transport's own.
  for (QpEnd *end : {&a, &b}) {
    if (o.wire_peer) break;
    QpEnd &peer = end == &a ? b : a;
    end->dev.set_gid(1, peer.dev.info.gids[0].gid, kRoceV2, 0);
  }
  for (QpEnd *end : {&a, &b}) {
    QpEnd &peer = end == &a ? b : a;
    ctl::QpAttrWire attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.qp_access_flags =
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    attr.port_num = 1;
    end->modify(attr, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_PKEY_INDEX);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = o.path_mtu;
    attr.dest_qp_num = peer.qp->qpn;
    attr.rq_psn = end == &a ? o.psn_b : o.psn_a;
    attr.max_dest_rd_atomic = o.max_rd_atomic;
    attr.min_rnr_timer = o.min_rnr_timer;
    attr.ah.is_global = 1;
    attr.ah.sgid_index = 0;
    std::memcpy(attr.ah.dgid, peer.dev.info.gids[0].gid, 16);
    end->modify(attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = end == &a ? o.psn_a : o.psn_b;
    attr.timeout = o.timeout;
    attr.retry_cnt = o.retry_cnt;
    attr.rnr_retry = o.rnr_retry;
    attr.max_rd_atomic = o.max_rd_atomic;
    end->modify(attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  a.async_events();  // nothing of the set-up is a test's business
  b.async_events();
}

// Puts what `from` sent on the wire to `to`, as the script says, each as a copy in `to`'s
// pool (the receiver owns its packets, and a change by the script stays on the wire).
bool QpPair::carry(QpEnd &from, QpEnd &to) {
  bool any = !from.host.sent.empty();
  for (Packet *p : from.host.sent) {
    const OpcodeInfo &info = p->info();
    WireRecord rec{};
    rec.from = from.name;
    rec.opcode = p->bth().opcode();
    rec.psn = p->bth().psn();
    rec.ack_req = p->bth().ack_req();
    rec.syndrome = (info.flags & kOpAeth) ? p->ext<Aeth>(info.aeth_off).syndrome() : 0;
    rec.payload_len = p->payload_len;
    if (op_operation(rec.opcode) == kReadRequest) {
      const Reth &reth = p->ext<Reth>(info.reth_off);
      rec.reth_offset = reth.va() - to.addr(0);
      rec.reth_len = reth.dma_len();
    }
    rec.at_ns = now;
    Packet *copy = to.host.alloc_packet();
    if (!copy) throw std::runtime_error("receiver out of packets");
    std::memcpy(copy->src_gid, p->src_gid, 16);
    std::memcpy(copy->dst_gid, p->dst_gid, 16);
    copy->udp_sport = p->udp_sport;
    copy->header_len = p->header_len;
    std::memcpy(copy->header, p->header, p->header_len);
    copy->payload_len = p->payload_len;
    if (p->payload_len) std::memcpy(copy->bounce, p->payload, p->payload_len);
    copy->payload = copy->bounce;
    copy->src_qpn = p->src_qpn;
    from.host.pool.free(p);
    Fate fate = script ? script(rec, *copy) : Fate::kDeliver;
    switch (fate) {
      case Fate::kDeliver:
        wire_.push_back({&to, copy});
        break;
      case Fate::kDrop:
        rec.fate = "dropped";
        to.host.pool.free(copy);
        break;
      case Fate::kDuplicate:
        rec.fate = "twice";
        wire_.push_back({&to, copy});
        wire_.push_back({&to, copy});
        break;
      case Fate::kHold:
        rec.fate = "held";
        held_.push_back({&to, copy});
        break;
    }
    if (fate != Fate::kHold && !held_.empty() && fate != Fate::kDrop) {
      for (InFlight &h : held_) wire_.push_back(h);  // overtaken: now it arrives
      held_.clear();
    }
    log.push_back(rec);
  }
  from.host.sent.clear();
  return any;
}

// Hands every packet on the wire to its receiver, in order (a duplicate is the same packet
// twice: the receiver frees it only after its last delivery).
bool QpPair::deliver() {
  if (wire_.empty()) return false;
  std::vector<InFlight> batch;
  batch.swap(wire_);
  for (size_t i = 0; i < batch.size(); i++) {
    if (before_delivery) before_delivery(*batch[i].to, *batch[i].pkt);
    batch[i].to->host.deliver(batch[i].pkt);
    bool again = false;
    for (size_t k = i + 1; k < batch.size(); k++) again |= batch[k].pkt == batch[i].pkt;
    if (!again) batch[i].to->host.pool.free(batch[i].pkt);
  }
  return true;
}

uint64_t QpPair::next_deadline() const {
  uint64_t next = 0;
  for (const QpEnd *end : {&a, &b})
    if (uint64_t d = end->qp->comp.next_deadline(); d && (!next || d < next)) next = d;
  return next;
}

void QpPair::run(uint64_t max_ns) {
  const uint64_t end = now + max_ns;
  for (uint32_t turns = 0; turns < 1'000'000; turns++) {
    a.host.now = b.host.now = now;
    bool work = a.host.serve_run_queue();
    work |= b.host.serve_run_queue();
    work |= carry(a, b);
    work |= carry(b, a);
    // As a worker's receive loop: deliver, send the coalesced ACKs, until the wire is quiet.
    while (deliver()) {
      work = true;
      a.host.flush_acks();
      b.host.flush_acks();
      carry(a, b);
      carry(b, a);
    }
    if (work) continue;
    if (!held_.empty()) {  // nothing overtook it: late, but it arrives
      for (InFlight &h : held_) wire_.push_back(h);
      held_.clear();
      continue;
    }
    uint64_t next = next_deadline();
    if (!next || next > end) return;
    now = std::max(now, next);
    a.host.now = b.host.now = now;
    a.host.check_timers();
    b.host.check_timers();
  }
  throw std::runtime_error("the transport did not settle in a million turns");
}

std::vector<std::string> QpPair::trace() const {
  std::vector<std::string> out;
  for (const WireRecord &r : log) {
    std::string line =
        std::string(1, r.from) + " " + operation_name(r.opcode) + " " + std::to_string(r.psn);
    if (r.ack_req) line += " ack_req";
    if (op_operation(r.opcode) == kAcknowledge || op_operation(r.opcode) == kAtomicAcknowledge)
      line += syndrome_name(r.syndrome);
    if (op_operation(r.opcode) == kReadRequest)
      line += " @" + std::to_string(r.reth_offset) + "+" + std::to_string(r.reth_len);
    if (!r.fate.empty()) line += " (" + r.fate + ")";
    out.push_back(line);
  }
  return out;
}

namespace {

shm::SendWqe base_wqe(uint64_t wr_id, uint8_t opcode, const QpEnd &local, size_t offset,
                      uint32_t length) {
  shm::SendWqe w{};
  w.wr_id = wr_id;
  w.opcode = opcode;
  w.flags = shm::kWqeSignaled;
  w.num_sge = 1;
  w.length = length;
  w.sge[0] = {local.addr(offset), length, local.key};
  return w;
}

// A WQE on the remote end's memory (WRITE, READ, atomics).
shm::SendWqe remote_wqe(uint64_t wr_id, uint8_t opcode, const QpEnd &local, size_t offset,
                        uint32_t length, const QpEnd &remote, size_t remote_offset) {
  shm::SendWqe w = base_wqe(wr_id, opcode, local, offset, length);
  w.remote_addr = remote.addr(remote_offset);
  w.rkey = remote.key;
  return w;
}

}  // namespace

shm::SendWqe write_wqe(uint64_t wr_id, const QpEnd &from, size_t offset, uint32_t length,
                       const QpEnd &to, size_t remote_offset) {
  return remote_wqe(wr_id, IBV_WR_RDMA_WRITE, from, offset, length, to, remote_offset);
}

shm::SendWqe send_wqe(uint64_t wr_id, const QpEnd &from, size_t offset, uint32_t length) {
  return base_wqe(wr_id, IBV_WR_SEND, from, offset, length);
}

shm::SendWqe read_wqe(uint64_t wr_id, const QpEnd &into, size_t offset, uint32_t length,
                      const QpEnd &from, size_t remote_offset) {
  return remote_wqe(wr_id, IBV_WR_RDMA_READ, into, offset, length, from, remote_offset);
}

shm::SendWqe fetch_add_wqe(uint64_t wr_id, const QpEnd &into, size_t offset, const QpEnd &at,
                           size_t remote_offset, uint64_t add) {
  shm::SendWqe w =
      remote_wqe(wr_id, IBV_WR_ATOMIC_FETCH_AND_ADD, into, offset, 8, at, remote_offset);
  w.compare_add = add;
  return w;
}

shm::SendWqe atomic_write_wqe(uint64_t wr_id, uint64_t value, const QpEnd &at,
                              size_t remote_offset) {
  shm::SendWqe w = remote_wqe(wr_id, IBV_WR_ATOMIC_WRITE, at, 0, 8, at, remote_offset);
  w.num_sge = 0;  // the 8 bytes travel in the WQE, as they are
  w.sge[0] = {};
  w.compare_add = value;
  return w;
}

}  // namespace vrnic::testing
