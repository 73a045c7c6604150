// The QP life cycle on the data path, as rxe's rxe_qp.c: create-side setup (rings laid out
// in the QP's shared region, queues attached), applying attributes and the effect of each
// transition (control/ checks ownership and legality, then calls qp_modify once),
// reset, error and send error (a QP in error completes everything outstanding with
// IBV_WC_WR_FLUSH_ERR), SQ drain, release on destroy; and what the three engines share of QP state:
// whether a packet comes from the connected peer, the transport snapshot vrnicctl shows.
#include <infiniband/verbs.h>

#include <algorithm>

#include "events.h"
#include "transport.h"
#include "transport_host.h"

namespace vrnic {

static void qp_flush_receive_side(Device &dev, QueuePair &qp);

// Work requests a QP in error (or SQE) gives back unexecuted.
static shm::Cqe flush_cqe(const QueuePair &qp, uint64_t wr_id, uint8_t opcode) {
  shm::Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.status = IBV_WC_WR_FLUSH_ERR;
  cqe.opcode = opcode;
  cqe.qp_num = qp.qpn;
  return cqe;
}

Packet *new_packet_to(TransportHost &w, QueuePair &qp, uint8_t opcode, uint32_t psn, bool ack_req,
                      bool solicited, const PacketDestination &to) {
  Packet *pkt = w.alloc_packet();
  if (!pkt) return nullptr;
  const ctl::GidEntry &sgid = w.dev.info.gids[to.sgid_index % ctl::kGidTableLen];
  std::memcpy(pkt->src_gid, sgid.gid, 16);
  std::memcpy(pkt->dst_gid, to.dgid, 16);
  // Flow entropy, constant per QP so its packets stay in order (ROCE.md).
  pkt->udp_sport = uint16_t(0xc000 | ((qp.qpn * 0x9e3779b1u) >> 18));
  opcode = uint8_t(qp.transport() | wire::op_operation(opcode));  // the QP's transport
  pkt->header_len = opcode_info(opcode).header_bytes;
  pkt->payload = nullptr;
  pkt->payload_len = 0;
  pkt->bth().set(opcode, solicited, 0, wire::kDefaultPkey, to.qpn, ack_req, psn);
  pkt->src_qpn = qp.qpn;
  return pkt;
}

bool from_connected_peer(const QueuePair &qp, const Packet &pkt) {
  return std::memcmp(pkt.src_gid, qp.attr.ah.dgid, 16) == 0 &&
         (pkt.src_qpn == Packet::kUnknownSource || pkt.src_qpn == qp.attr.dest_qp_num);
}

Packet *new_packet(TransportHost &w, QueuePair &qp, uint8_t opcode, uint32_t psn, bool ack_req,
                   bool solicited) {
  PacketDestination to{qp.attr.ah.dgid, qp.attr.dest_qp_num, qp.attr.ah.sgid_index};
  return new_packet_to(w, qp, opcode, psn, ack_req, solicited, to);
}

void qp_init(QueuePair &qp, uint8_t type, void *region, uint32_t sq_slots, uint32_t rq_slots,
             uint32_t ud_mtu) {
  qp.type = type;
  qp.shared = static_cast<shm::QpShared *>(region);
  auto *base = static_cast<uint8_t *>(region);
  qp.sq = reinterpret_cast<shm::SendWqe *>(base + shm::kQpHeaderBytes);
  qp.sq_mask = sq_slots - 1;
  qp.own_rq.indices = &qp.shared->rq;
  qp.own_rq.ring = reinterpret_cast<shm::RecvWqe *>(base + shm::kQpHeaderBytes +
                                                    sq_slots * sizeof(shm::SendWqe));
  qp.own_rq.mask = rq_slots - 1;
  qp.own_rq.pd = qp.pd;
  qp.meta.reset(new WqeMeta[sq_slots]());
  qp.attr.qp_state = IBV_QPS_RESET;
  qp.attr.cap = {sq_slots, rq_slots, shm::kMaxSge, shm::kMaxSge, shm::kMaxInline, 0};
  qp.attr.port_num = 1;
  // A UD message is one packet: up to the port's MTU (connected QPs get theirs at RTR).
  if (type == IBV_QPT_UD) qp.mtu = ud_mtu;
  qp.shared->state.store(IBV_QPS_RESET);
}

void qp_attach_queues(QueuePair &qp, CompletionQueue *send_cq, CompletionQueue *recv_cq,
                      ReceiveQueue *srq) {
  qp.send_cq = send_cq;
  qp.recv_cq = recv_cq;
  send_cq->refs++;
  recv_cq->refs++;
  if (srq) {
    qp.rq = srq;
    srq->refs++;
  }
}

void qp_detach_queues(QueuePair &qp) {
  if (qp.type == IBV_QPT_XRC_RECV) return;  // it has none (xrc_target_bind)
  qp.send_cq->refs--;
  qp.recv_cq->refs--;
  if (qp.rq != &qp.own_rq) qp.rq->refs--;
}

void qp_release(TransportHost &w, QueuePair &qp) {
  w.forget_qp(qp);
  qp_detach_queues(qp);
}

void qp_reset_transport(QueuePair &qp) {
  qp.req = RequesterState{};
  qp.comp = CompleterState{};
  qp.resp = ResponderState{};
  uint32_t sq_pos = qp.shared->sq.producer.load(std::memory_order_acquire);
  // A reset QP starts with empty queues: whatever its rings held is discarded (an SRQ's
  // WQEs belong to the SRQ and stay).
  qp.req.wqe = qp.req.started = qp.comp.wqe = sq_pos;
  qp.shared->sq.consumer.store(sq_pos, std::memory_order_release);
  qp.shared->sq_retired.store(sq_pos, std::memory_order_release);
  qp.own_rq.discard();
}

uint32_t mtu_bytes(uint32_t ibv_mtu) {
  return 128u << std::clamp<uint32_t>(ibv_mtu, IBV_MTU_256, IBV_MTU_4096);
}

void qp_publish_direct(QueuePair &qp, bool clear) {
  if (!qp.directory) return;
  shm::DirectoryQp e{};
  if (!clear)
    e = {qp.qpn, qp.attr.qp_state, qp.attr.dest_qp_num, qp.pd, qp.attr.qp_access_flags, 0};
  qp.directory->write(e);
}

// The state as vrnicd holds it, the provider's mirror and the directory's, together.
static void set_state(QueuePair &qp, uint32_t state) {
  qp.attr.qp_state = state;
  qp.shared->state.store(state, std::memory_order_release);
  qp_publish_direct(qp);
}

bool qp_modify(TransportHost &w, QueuePair &qp, const ctl::QpAttrWire &a, uint32_t mask,
               uint32_t next) {
  const uint32_t cur = qp.attr.qp_state;
  ctl::QpAttrWire &q = qp.attr;
  if (mask & IBV_QP_ACCESS_FLAGS) q.qp_access_flags = a.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) q.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) q.port_num = a.port_num;
  if (mask & IBV_QP_QKEY) q.qkey = a.qkey;
  if (mask & IBV_QP_AV) q.ah = a.ah;
  if (mask & IBV_QP_PATH_MTU) {
    q.path_mtu = a.path_mtu;
    qp.mtu = mtu_bytes(a.path_mtu);
  }
  if (mask & IBV_QP_TIMEOUT) q.timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) q.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_RQ_PSN) q.rq_psn = a.rq_psn & wire::kPsnMask;
  if (mask & IBV_QP_SQ_PSN) q.sq_psn = a.sq_psn & wire::kPsnMask;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q.max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) q.min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_DEST_QPN) q.dest_qp_num = a.dest_qp_num & wire::kQpnMask;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) q.en_sqd_async_notify = a.en_sqd_async_notify;

  if (next == IBV_QPS_RESET) {
    w.forget_qp(qp);  // first: it detaches the QP from its peer's window
    qp_reset_transport(qp);
    qp.in_run_queue = qp.in_ack_list = qp.in_timer_list = false;
  } else if (next == IBV_QPS_ERR) {
    qp_enter_error(w, qp);  // flushes every outstanding WR
    return false;
  }
  bool resolve = false;
  if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    qp.resp = ResponderState{};
    qp.resp.psn = q.rq_psn;
    qp.resp.sack_reported = wire::psn_add(q.rq_psn, -1u);
    resolve = qp.type != IBV_QPT_UD && q.ah.is_global;
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) || (cur == IBV_QPS_INIT && next == IBV_QPS_RTR)) {
    // Room for what the peer may have outstanding; what is held stays (SQD to SQD).
    ResponderState &r = qp.resp;
    r.res.resize(q.max_dest_rd_atomic, r.res_sending, r.res_head);
    r.atomics.resize(q.max_dest_rd_atomic, r.atomics_next - r.atomics.capacity(), r.atomics_next);
  }
  if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    qp.req.psn = qp.req.psn_end = q.sq_psn;
    qp.comp.acked_psn = wire::psn_add(q.sq_psn, -1u);
    qp.comp.retry_left = q.retry_cnt;
    qp.comp.rnr_left = q.rnr_retry;
  }
  if (next == IBV_QPS_SQD && cur != IBV_QPS_SQD) qp.sq_drained_reported = false;
  set_state(qp, next);
  if (next == IBV_QPS_RTS && qp.reliable()) w.attach_peer(qp);
  if (next == IBV_QPS_RTS) w.schedule(qp);  // WQEs posted before RTS may now go
  if (next == IBV_QPS_SQD) qp_check_drained(qp);
  return resolve;
}

void qp_enter_error(TransportHost &w, QueuePair &qp) {
  if (qp.attr.qp_state == IBV_QPS_ERR) return;
  set_state(qp, IBV_QPS_ERR);
  qp.comp.ack_deadline = qp.comp.rnr_deadline = 0;
  w.detach_peer(qp);  // it sends no more: what it had out holds no other QP back
  w.release_held(qp);  // it executes no more
  qp_flush(w, qp);
  // A QP on an SRQ takes no more WQEs from it: tell the owner (IB spec 11.6.3).
  if (qp.rq != &qp.own_rq && qp.type != IBV_QPT_XRC_RECV)
    raise_event(qp.async_fd, IBV_EVENT_QP_LAST_WQE_REACHED, qp.cookie);
}

void qp_fatal(TransportHost &w, QueuePair &qp) {
  if (qp.attr.qp_state == IBV_QPS_ERR) return;
  raise_event(qp.async_fd, IBV_EVENT_QP_FATAL, qp.cookie);
  qp_enter_error(w, qp);
}

void qp_enter_send_error(TransportHost &w, QueuePair &qp) {
  set_state(qp, IBV_QPS_SQE);
  qp_flush_send_queue(qp);
  (void)w;
}

bool qp_sq_busy(const QueuePair &qp) {
  return qp.comp.wqe != qp.req.started;
}

void qp_check_drained(QueuePair &qp) {
  if (qp.state() != IBV_QPS_SQD || qp_sq_busy(qp) || qp.sq_drained_reported) return;
  qp.sq_drained_reported = true;
  if (qp.attr.en_sqd_async_notify) raise_event(qp.async_fd, IBV_EVENT_SQ_DRAINED, qp.cookie);
}

void qp_flush(TransportHost &w, QueuePair &qp) {
  qp_flush_send_queue(qp);
  qp_flush_receive_side(w.dev, qp);
}

void qp_flush_send_queue(QueuePair &qp) {
  uint32_t producer = qp.sq_producer();
  while (qp.comp.wqe != producer) {
    if (!qp.send_cq->push(flush_cqe(qp, qp.wqe(qp.comp.wqe).wr_id, IBV_WC_SEND), false)) break;
    qp.comp.wqe++;
  }
  qp.req.wqe = qp.req.started = qp.comp.wqe;
  qp.req.offset = 0;
  qp.shared->sq.consumer.store(qp.comp.wqe, std::memory_order_release);
  qp.shared->sq_retired.store(qp.comp.wqe, std::memory_order_release);
}

static void qp_flush_receive_side(Device &dev, QueuePair &qp) {
  // An XRC target's message in progress took its WQE from the SRQ it named (if that is still
  // there), whose CQ is told.
  const bool xrc_target = qp.type == IBV_QPT_XRC_RECV;
  if (qp.resp.has_wqe && (!xrc_target || xrc_target_bind(dev, qp, qp.resp.xrc_srqn))) {
    qp.recv_cq->push(flush_cqe(qp, qp.resp.wqe.wr_id, IBV_WC_RECV), false);
  }
  qp.resp.has_wqe = false;
  qp.resp.in_send = false;
  if (xrc_target) return;  // it has no receive queue of its own
  // Only the QP's own receive queue is flushed; an SRQ serves its other QPs on.
  while (qp.rq == &qp.own_rq && !qp.own_rq.empty()) {
    uint64_t wr_id = qp.own_rq.head().wr_id;
    qp.own_rq.pop();
    if (!qp.recv_cq->push(flush_cqe(qp, wr_id, IBV_WC_RECV), false)) break;
  }
}

ctl::QpTransportState qp_transport_state(const Device &dev, QueuePair &qp, uint64_t now) {
  auto until = [now](uint64_t deadline) -> uint32_t {
    if (!deadline) return 0;
    return deadline > now ? uint32_t(std::min<uint64_t>((deadline - now) / 1000, UINT32_MAX)) : 1;
  };
  ctl::QpTransportState t{};
  t.sq_psn = qp.req.psn;
  t.acked_psn = qp.comp.acked_psn;
  t.rq_psn = qp.resp.psn;
  t.window = qp.req.window.psns();
  t.wqes_started = qp.req.started - qp.comp.wqe;
  t.wqes_unsent = qp.shared ? qp.sq_producer() - qp.req.wqe : 0;
  t.rd_atomic = qp.req.rd_atomic_outstanding;
  t.responses = qp.resp.res_head - qp.resp.res_sending;
  t.ack_timer_us = until(qp.comp.ack_deadline);
  t.rnr_timer_us = until(qp.comp.rnr_deadline);
  t.retry_left = qp.comp.retry_left;
  t.rnr_left = qp.comp.rnr_left;
  t.nak_sent = qp.resp.nak_sent;
  t.probes = qp.comp.probes;
  if (const PeerWindow *p = qp.req.peer) {
    t.peer_window = p->packets();
    t.peer_in_flight = p->in_flight();
    t.srtt_us = uint32_t(std::min<uint64_t>(p->srtt_ns() / 1000, UINT32_MAX));
  }
  t.probe_timer_us = until(qp.comp.probe_deadline);
  t.selective_repeat = qp.reliable() && uses_selective_repeat(dev, qp);
  t.ece_set = qp.ece_set;
  return t;
}

}  // namespace vrnic
