// What the three engines share: packet headers from QP state, completions, and the error
// state (a QP in error completes everything outstanding with IBV_WC_WR_FLUSH_ERR).
#include <infiniband/verbs.h>

#include "events.h"
#include "transport.h"
#include "worker.h"

namespace vrnic {

static void qp_flush_receive_side(QueuePair &qp);

// Work requests a QP in error (or SQE) gives back unexecuted.
static shm::Cqe flush_cqe(const QueuePair &qp, uint64_t wr_id, uint8_t opcode) {
  shm::Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.status = IBV_WC_WR_FLUSH_ERR;
  cqe.opcode = opcode;
  cqe.qp_num = qp.qpn;
  return cqe;
}

Packet *new_packet_to(Worker &w, QueuePair &qp, uint8_t opcode, uint32_t psn, bool ack_req,
                      bool solicited, const PacketDestination &to) {
  Packet *pkt = w.alloc_packet();
  if (!pkt) return nullptr;
  const ctl::GidEntry &sgid = w.dev.info.gids[to.sgid_index % ctl::kGidTableLen];
  std::memcpy(pkt->src_gid, sgid.gid, 16);
  std::memcpy(pkt->dst_gid, to.dgid, 16);
  // Flow entropy, constant per QP so its packets stay in order (ROCE.md).
  pkt->udp_sport = uint16_t(0xc000 | ((qp.qpn * 0x9e3779b1u) >> 18));
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

Packet *new_packet(Worker &w, QueuePair &qp, uint8_t opcode, uint32_t psn, bool ack_req,
                   bool solicited) {
  PacketDestination to{qp.attr.ah.dgid, qp.attr.dest_qp_num, qp.attr.ah.sgid_index};
  return new_packet_to(w, qp, opcode, psn, ack_req, solicited, to);
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
  qp.own_rq.discard();
}

void qp_enter_error(Worker &w, QueuePair &qp) {
  if (qp.attr.qp_state == IBV_QPS_ERR) return;
  qp.attr.qp_state = IBV_QPS_ERR;
  qp.shared->state.store(IBV_QPS_ERR, std::memory_order_release);
  qp.comp.ack_deadline = qp.comp.rnr_deadline = 0;
  w.detach_peer(qp);  // it sends no more: what it had out holds no other QP back
  qp_flush(w, qp);
  // A QP on an SRQ takes no more WQEs from it: tell the owner (IB spec 11.6.3).
  if (qp.rq != &qp.own_rq) raise_event(qp.async_fd, IBV_EVENT_QP_LAST_WQE_REACHED, qp.cookie);
}

void qp_fatal(Worker &w, QueuePair &qp) {
  if (qp.attr.qp_state == IBV_QPS_ERR) return;
  raise_event(qp.async_fd, IBV_EVENT_QP_FATAL, qp.cookie);
  qp_enter_error(w, qp);
}

void qp_enter_send_error(Worker &w, QueuePair &qp) {
  qp.attr.qp_state = IBV_QPS_SQE;
  qp.shared->state.store(IBV_QPS_SQE, std::memory_order_release);
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

void qp_flush(Worker &w, QueuePair &qp) {
  qp_flush_send_queue(qp);
  qp_flush_receive_side(qp);
  (void)w;
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
}

static void qp_flush_receive_side(QueuePair &qp) {
  if (qp.resp.has_wqe) {  // taken for a message that will not finish now
    qp.resp.has_wqe = false;
    qp.recv_cq->push(flush_cqe(qp, qp.resp.wqe.wr_id, IBV_WC_RECV), false);
  }
  // Only the QP's own receive queue is flushed; an SRQ serves its other QPs on.
  while (qp.rq == &qp.own_rq && !qp.own_rq.empty()) {
    uint64_t wr_id = qp.own_rq.head().wr_id;
    qp.own_rq.pop();
    if (!qp.recv_cq->push(flush_cqe(qp, wr_id, IBV_WC_RECV), false)) break;
  }
  qp.resp.in_send = false;
}

ctl::QpTransportState qp_transport_state(QueuePair &qp, uint64_t now) {
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
  return t;
}

}  // namespace vrnic
