// Requester: turns send WQEs into request packets, path-MTU sized, with PSNs. It never
// retires anything; the completer does, and rewinds it for retransmission.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

#include "sge_io.h"
#include "transport.h"
#include "vrnic/work_request.h"
#include "transport_host.h"

namespace vrnic {
namespace {

using namespace wire;

// Long messages ask for an ACK this often, so the completer sees progress (and its timer
// does not fire) before the last packet.
constexpr uint32_t kAckReqInterval = 256;

// A request packet for the WQE (new_packet gives it the QP's transport); an XRC initiator's
// names the SRQ of the target's domain the WQE is for.
Packet *new_request(TransportHost &w, QueuePair &qp, const shm::SendWqe &wqe, uint8_t operation,
                    uint32_t psn, bool ack_req, bool solicited = false) {
  Packet *pkt = new_packet(w, qp, operation, psn, ack_req, solicited);
  if (pkt && (pkt->info().flags & kOpXrceth))
    pkt->ext<Xrceth>(pkt->info().xrceth_off).set(wqe.remote_srqn & kQpnMask);
  return pkt;
}

uint32_t packets_for(uint32_t length, uint32_t mtu) {
  return length ? (length + mtu - 1) / mtu : 1;
}

// Records the WQE's PSN range and checks what the requester can check locally. A failure is
// kept in meta.status; the completer reports it in order.
void start_wqe(TransportHost &w, QueuePair &qp, shm::SendWqe &wqe, WqeMeta &meta) {
  meta.opcode = wqe.opcode;
  meta.flags = wqe.flags;
  meta.status = IBV_WC_SUCCESS;
  meta.resp_done = false;
  meta.first_psn = meta.resp_psn = qp.req.psn;
  uint64_t total = 0;
  // The provider checked the opcode, but the ring is client memory: check again.
  switch (wr::fits_qp(qp.type, wqe.opcode) ? wqe.opcode : 0xff) {
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      meta.status = uint8_t(execute_local_op(w.dev, qp, wqe));
      meta.last_psn = psn_add(meta.first_psn, -1u);  // no packet, no PSN
      meta.length = 0;
      qp.req.started++;
      return;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      if (wqe.flags & shm::kWqeInline) {
        total = wqe.length;
        if (total > shm::kMaxInline) meta.status = IBV_WC_LOC_LEN_ERR;
      } else if (wqe.num_sge > shm::kMaxSge) {
        meta.status = IBV_WC_LOC_QP_OP_ERR;
      } else {
        meta.status = uint8_t(sge_validate(w.dev, send_sge_list(wqe, qp.pd), false, &total));
      }
      break;
    case IBV_WR_RDMA_READ:
      if (wqe.num_sge > shm::kMaxSge || (wqe.flags & shm::kWqeInline))
        meta.status = IBV_WC_LOC_QP_OP_ERR;
      else
        meta.status = uint8_t(sge_validate(w.dev, send_sge_list(wqe, qp.pd), true, &total));
      break;
    case IBV_WR_ATOMIC_WRITE:  // the 8 bytes are in the WQE
      total = 8;
      if (wqe.num_sge || (wqe.flags & shm::kWqeInline) || (wqe.remote_addr & 7))
        meta.status = IBV_WC_LOC_QP_OP_ERR;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      total = 8;
      if (wqe.num_sge != 1 || wqe.sge[0].length != 8 || (wqe.remote_addr & 7)) {
        meta.status = IBV_WC_LOC_QP_OP_ERR;
      } else {
        uint64_t len;
        meta.status = uint8_t(sge_validate(w.dev, {wqe.sge, 1, qp.pd}, true, &len));
      }
      break;
    default:
      meta.status = IBV_WC_LOC_QP_OP_ERR;  // not supported on this QP yet
  }
  if (total > (1ull << 31)) meta.status = IBV_WC_LOC_LEN_ERR;
  if (qp.type == IBV_QPT_UD && total > qp.mtu) meta.status = IBV_WC_LOC_LEN_ERR;  // one packet
  meta.length = uint32_t(total);
  uint32_t psns = meta.status ? 0
                  : wr::rule(wqe.opcode).kind == wr::Kind::kAtomic ||
                          wr::rule(wqe.opcode).kind == wr::Kind::kAtomicWrite
                      ? 1
                      : packets_for(meta.length, qp.mtu);
  meta.last_psn = psn_add(meta.first_psn, psns ? psns - 1 : 0);
  qp.req.started++;
}

uint8_t send_or_write_opcode(uint8_t wr_op, bool first, bool last) {
  bool write = wr_op == IBV_WR_RDMA_WRITE || wr_op == IBV_WR_RDMA_WRITE_WITH_IMM;
  bool imm = wr_op == IBV_WR_SEND_WITH_IMM || wr_op == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (wr_op == IBV_WR_SEND_WITH_INV && last) return first ? kSendOnlyInv : kSendLastInv;
  if (first && last)
    return write ? (imm ? kWriteOnlyImm : kWriteOnly) : (imm ? kSendOnlyImm : kSendOnly);
  if (first) return write ? kWriteFirst : kSendFirst;
  if (!last) return write ? kWriteMiddle : kSendMiddle;
  return write ? (imm ? kWriteLastImm : kWriteLast) : (imm ? kSendLastImm : kSendLast);
}

// One packet of a SEND or WRITE; false if it could not be built (no packet buffer, or the
// WQE turned out bad, which is then recorded for the completer).
bool send_data_packet(TransportHost &w, QueuePair &qp, shm::SendWqe &wqe, WqeMeta &meta) {
  RequesterState &req = qp.req;
  uint32_t chunk = std::min(qp.mtu, meta.length - req.offset);
  bool first = req.offset == 0;
  bool last = req.offset + chunk == meta.length;
  const uint8_t operation = send_or_write_opcode(meta.opcode, first, last);
  // Within a message, ask often enough that the ACKs reopen the window before it closes. A
  // peer window below its ceiling (it has seen a loss, or is still growing) is shared: the
  // other QPs may fill it behind this one, and packets that ask for no ACK would hold it shut
  // until a probe. Then every packet asks (the responder still sends one ACK per burst).
  uint32_t interval = std::clamp<uint32_t>(req.window.psns() / 2, 1, kAckReqInterval);
  bool peer_limited = req.peer && !req.peer->at_ceiling();
  bool ack_req = qp.reliable() &&
                 (last || peer_limited ||
                  uint32_t(psn_diff(req.psn, meta.first_psn)) % interval == interval - 1);
  bool solicited = last && (meta.flags & shm::kWqeSolicited);
  Packet *pkt;
  if (qp.type == IBV_QPT_UD) {
    const shm::UdAddress &ud = wqe.ud;
    pkt = new_packet_to(w, qp, operation, req.psn, false, solicited,
                        {ud.dgid, ud.remote_qpn & kQpnMask, ud.sgid_index});
  } else {
    pkt = new_request(w, qp, wqe, operation, req.psn, ack_req, solicited);
  }
  if (!pkt) return false;
  const OpcodeInfo &info = pkt->info();
  if (info.flags & kOpReth)
    pkt->ext<Reth>(info.reth_off).set(wqe.remote_addr, wqe.rkey, meta.length);
  if (info.flags & kOpImm) pkt->ext<ImmDt>(info.imm_off).set_raw(wqe.imm_or_rkey);
  if (info.flags & kOpIeth) pkt->ext<Ieth>(info.ieth_off).set(wqe.imm_or_rkey);
  if (info.flags & kOpDeth) {
    // A Q_Key with the high bit set means "use the QP's own" (IB spec 10.2.5).
    uint32_t qkey = int32_t(wqe.ud.remote_qkey) < 0 ? qp.attr.qkey : wqe.ud.remote_qkey;
    pkt->ext<Deth>(info.deth_off).set(qkey, qp.qpn);
  }
  pkt->payload_len = chunk;
  // Zero copy only where the WQE outlives the packet: an RC WQE retires on the ACK, after
  // the port is done with the packet; UC and UD WQEs retire once sent, and the application
  // may then reuse the buffer (or the inline slot) while the packet still waits in the port.
  // A retransmission (below the highest PSN sent) is copied too: the ACK of its first copy
  // may retire the WQE while it waits in the port.
  bool reference = qp.reliable() && psn_diff(req.psn, req.psn_end) >= 0;
  if ((meta.flags & shm::kWqeInline) && reference) {
    pkt->payload = wqe.inline_data + req.offset;
  } else if (meta.flags & shm::kWqeInline) {
    std::memcpy(pkt->bounce, wqe.inline_data + req.offset, chunk);
    pkt->payload = pkt->bounce;
  } else if (chunk) {
    SgeList list = send_sge_list(wqe, qp.pd);
    SgeCursor cur{req.sge, req.sge_offset};
    pkt->payload = reference ? sge_reference(w.dev, list, cur, chunk) : nullptr;
    if (!pkt->payload) {
      cur = {req.sge, req.sge_offset};
      if (int st = sge_gather(w.dev, list, cur, pkt->bounce, chunk)) {
        w.pool.free(pkt);
        meta.status = uint8_t(st);  // e.g. the MR was deregistered under the WQE
        return false;
      }
      pkt->payload = pkt->bounce;
    }
    req.sge = cur.index;
    req.sge_offset = cur.offset;
  }
  w.transmit(qp, pkt);
  req.psn = psn_add(req.psn, 1);
  req.offset += chunk;
  if (last) {
    req.wqe++;
    req.offset = req.sge = req.sge_offset = 0;
  }
  return true;
}

// A READ request for the read's PSNs [psn, psn + packets): the whole read, or a part of it
// asked for again. Its answers carry the PSNs they would have had.
bool send_read_request(TransportHost &w, QueuePair &qp, const shm::SendWqe &wqe,
                       const WqeMeta &meta, uint32_t psn, uint32_t packets) {
  Packet *pkt = new_request(w, qp, wqe, kReadRequest, psn, true);
  if (!pkt) return false;
  uint32_t offset = uint32_t(psn_diff(psn, meta.first_psn)) * qp.mtu;
  uint32_t length = std::min(meta.length - offset, packets * qp.mtu);
  pkt->ext<Reth>(pkt->info().reth_off)
      .set(wqe.remote_addr + offset, wqe.rkey, length);
  w.transmit(qp, pkt);
  return true;
}

// An atomic's request packet.
// ATOMIC WRITE: the RETH and the WQE's 8 bytes as the payload.
bool send_atomic_write(TransportHost &w, QueuePair &qp, const shm::SendWqe &wqe,
                       const WqeMeta &meta) {
  Packet *pkt = new_request(w, qp, wqe, kAtomicWrite, meta.first_psn, true);
  if (!pkt) return false;
  pkt->ext<Reth>(pkt->info().reth_off).set(wqe.remote_addr, wqe.rkey, 8);
  std::memcpy(pkt->bounce, &wqe.compare_add, 8);
  pkt->payload = pkt->bounce;
  pkt->payload_len = 8;
  w.transmit(qp, pkt);
  return true;
}

bool send_atomic_request(TransportHost &w, QueuePair &qp, const shm::SendWqe &wqe,
                         const WqeMeta &meta) {
  if (meta.opcode == IBV_WR_ATOMIC_WRITE) return send_atomic_write(w, qp, wqe, meta);
  uint8_t opcode = meta.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? kCompareSwap : kFetchAdd;
  Packet *pkt = new_request(w, qp, wqe, opcode, meta.first_psn, true);
  if (!pkt) return false;
  const OpcodeInfo &info = pkt->info();
  if (opcode == kCompareSwap) {
    pkt->ext<AtomicEth>(info.atomic_eth_off)
        .set(wqe.remote_addr, wqe.rkey, wqe.swap, wqe.compare_add);
  } else {
    pkt->ext<AtomicEth>(info.atomic_eth_off).set(wqe.remote_addr, wqe.rkey, wqe.compare_add, 0);
  }
  w.transmit(qp, pkt);
  return true;
}

bool send_read_or_atomic(TransportHost &w, QueuePair &qp, shm::SendWqe &wqe, WqeMeta &meta) {
  if (meta.opcode == IBV_WR_RDMA_READ) {
    // Sent before: ask for what is still missing (its lowest hole); new: all of it.
    ReadAsk ask = psn_diff(meta.last_psn, qp.req.psn_end) < 0
                      ? completer_read_resend(w, qp, qp.req.wqe)
                      : ReadAsk{meta.first_psn, uint32_t(psn_diff(meta.last_psn,
                                                                  meta.first_psn)) + 1};
    if (!send_read_request(w, qp, wqe, meta, ask.psn, ask.packets)) return false;
  } else if (!send_atomic_request(w, qp, wqe, meta)) {
    return false;
  }
  meta.resp_done = false;
  qp.req.offset = 0;
  qp.req.psn = psn_add(meta.last_psn, 1);
  qp.req.rd_atomic_outstanding++;
  qp.req.wqe++;
  return true;
}

}  // namespace

bool requester_reask_read(TransportHost &w, QueuePair &qp, uint32_t index, uint32_t psn,
                          uint32_t packets) {
  return send_read_request(w, qp, qp.wqe(index), qp.wqe_meta(index), psn, packets);
}

ResendAt requester_request_at(QueuePair &qp, uint32_t psn, uint32_t *index) {
  for (uint32_t i = qp.comp.wqe; i != qp.req.started; i++) {
    const WqeMeta &m = qp.wqe_meta(i);
    if (wr::is_local(m.opcode) || m.status) continue;  // no PSN of its own
    if (psn_diff(psn, m.first_psn) < 0) return ResendAt::kNone;
    if (psn_diff(psn, m.last_psn) > 0) continue;
    if (wr::is_read_or_atomic(m.opcode) && psn != m.first_psn) return ResendAt::kSkip;
    if (int32_t(qp.req.wqe - i) <= 0 && psn_diff(psn, qp.req.psn) >= 0)
      return ResendAt::kSkip;  // not sent since the requester last went back: it will be
    *index = i;
    return ResendAt::kRequest;
  }
  return ResendAt::kNone;
}

bool requester_resend(TransportHost &w, QueuePair &qp, uint32_t index, uint32_t psn) {
  RequesterState &req = qp.req;
  WqeMeta &meta = qp.wqe_meta(index);
  if (meta.opcode == IBV_WR_RDMA_READ)
    return send_read_request(w, qp, qp.wqe(index), meta, meta.first_psn,
                             uint32_t(psn_diff(meta.last_psn, meta.first_psn)) + 1);
  if (wr::is_read_or_atomic(meta.opcode)) return send_atomic_request(w, qp, qp.wqe(index), meta);
  // Where the requester stands (send_data_packet moves it): put back after the one packet.
  const uint32_t psn_was = req.psn, wqe_was = req.wqe, offset_was = req.offset;
  const uint32_t sge_was = req.sge, sge_offset_was = req.sge_offset;
  WqeMeta &m = qp.wqe_meta(index);
  const shm::SendWqe &wqe = qp.wqe(index);
  req.wqe = index;
  req.psn = psn;
  req.offset = uint32_t(psn_diff(psn, m.first_psn)) * qp.mtu;
  req.sge = req.sge_offset = 0;
  if (!(m.flags & shm::kWqeInline)) {
    SgeCursor cur = sge_seek(send_sge_list(wqe, qp.pd), req.offset);
    req.sge = cur.index;
    req.sge_offset = cur.offset;
  }
  bool sent = send_data_packet(w, qp, qp.wqe(index), m);
  req.psn = psn_was;
  req.wqe = wqe_was;
  req.offset = offset_was;
  req.sge = sge_was;
  req.sge_offset = sge_offset_was;
  return sent;
}

// Go-back-N: send again from `psn`, the first PSN the responder has not taken -- from the
// middle of a SEND or WRITE if need be (the responder still holds the message's context).
// An unfinished READ or atomic before that point is asked for again when `reask` says so:
// the responder re-executes reads and replays atomics.
namespace {

// Positions the requester at WQE `index`, PSN `psn`, and counts the reads and atomics it has
// sent before there that have not retired.
void resume_at(QueuePair &qp, uint32_t index, uint32_t psn) {
  RequesterState &req = qp.req;
  req.wqe = index;
  req.psn = psn;
  req.rd_atomic_outstanding = 0;
  for (uint32_t i = qp.comp.wqe; i != index; i++) {
    const WqeMeta &m = qp.wqe_meta(i);
    if (wr::is_read_or_atomic(m.opcode) && !m.status) req.rd_atomic_outstanding++;
  }
}

}  // namespace

void requester_rewind(QueuePair &qp, uint32_t psn, Reask reask) {
  RequesterState &req = qp.req;
  // About to ask again for an unanswered read or atomic before `psn`: a NAK says the
  // responder took the request, not that its answer arrived, so going on from `psn` would
  // drop the re-request and leave the answer to the ACK timer. Keep it (and what follows).
  if (reask == Reask::kNo && req.wqe != req.started) {
    const WqeMeta &m = qp.wqe_meta(req.wqe);
    if (wr::is_read_or_atomic(m.opcode) && !m.resp_done && !m.status &&
        psn_diff(psn, m.last_psn) > 0)
      return;
  }
  req.offset = req.sge = req.sge_offset = 0;
  for (uint32_t i = qp.comp.wqe; i != req.started; i++) {
    WqeMeta &m = qp.wqe_meta(i);
    if (wr::is_local(m.opcode) || m.status) continue;
    if (wr::is_read_or_atomic(m.opcode)) {
      if (m.resp_done) continue;
      if (reask == Reask::kNo && psn_diff(psn, m.last_psn) > 0) continue;  // awaits its answer
      // A read asks again from its first missing answer (send_read_or_atomic); an atomic is
      // asked again whole.
      resume_at(qp, i, m.opcode == IBV_WR_RDMA_READ ? read_lowest_missing(qp, i) : m.first_psn);
      return;
    }
    if (psn_diff(psn, m.last_psn) > 0) continue;  // all of it was acknowledged
    uint32_t into = uint32_t(std::max(0, psn_diff(psn, m.first_psn)));
    resume_at(qp, i, psn_add(m.first_psn, into));
    req.offset = into * qp.mtu;
    const shm::SendWqe &wqe = qp.wqe(i);
    if (!(m.flags & shm::kWqeInline)) {
      SgeCursor cur = sge_seek(send_sge_list(wqe, qp.pd), req.offset);
      req.sge = cur.index;
      req.sge_offset = cur.offset;
    }
    return;
  }
  // Everything started has been taken: carry on with new work.
  resume_at(qp, req.started, req.psn_end);  // the PSN after everything sent
}

// After a rewind, ACKs and answers may cover what the requester was about to send again
// (the first copies arrived after all): go on from what the responder still lacks, rather
// than send again what it has taken -- or what has retired, whose slot may hold a new WQE.
void skip_taken(QueuePair &qp) {
  RequesterState &req = qp.req;
  if (!qp.reliable() || req.wqe == req.started) return;
  bool taken = int32_t(req.wqe - qp.comp.wqe) < 0;
  if (!taken) {
    const WqeMeta &m = qp.wqe_meta(req.wqe);
    if (wr::is_read_or_atomic(m.opcode)) {
      taken = m.resp_done;
    } else if (!wr::is_local(m.opcode) && !m.status) {
      taken = psn_diff(req.psn, qp.comp.acked_psn) <= 0;
    }
  }
  if (taken) requester_rewind(qp, psn_add(qp.comp.acked_psn, 1), Reask::kNo);
}

// Send queue draining (SQD) finishes what was started, retransmissions included, but starts
// nothing new.
uint32_t send_limit(QueuePair &qp) {
  return qp.state() == IBV_QPS_SQD ? qp.req.started : qp.sq_producer();
}

bool requester_has_work(QueuePair &qp) {
  return (qp.state() == IBV_QPS_RTS || qp.state() == IBV_QPS_SQD) && !qp.comp.rnr_deadline &&
         qp.req.wqe != send_limit(qp);
}

uint32_t requester_run(TransportHost &w, QueuePair &qp, uint32_t budget) {
  RequesterState &req = qp.req;
  if ((qp.state() != IBV_QPS_RTS && qp.state() != IBV_QPS_SQD) || qp.comp.rnr_deadline) return 0;
  uint32_t producer = send_limit(qp);
  uint32_t sent = 0;
  // WQEs that send nothing (local operations) cost a step of the budget too: a ring full of
  // them must not hold the worker longer than one of sends would (issue 17, row 11).
  uint32_t local_steps = 0;
  bool retire = false;
  while (sent + local_steps < budget && req.wqe != producer) {
    skip_taken(qp);
    if (req.wqe == producer) break;
    if (qp.reliable() && !req.window.allows(psn_diff(req.psn, qp.comp.acked_psn))) break;
    // Past the window only for the resend a timeout paid for: the other QPs to this peer can
    // keep a small window full, and a QP that could not send would use up its retries
    // waiting (a QP failed with RETRY_EXC_ERR having sent nothing in its last 8 timeouts).
    if (req.peer && !req.peer->allows() && !qp.comp.timeout_resend) {
      w.wait_for_peer(qp);
      break;
    }
    shm::SendWqe &wqe = qp.wqe(req.wqe);
    WqeMeta &meta = qp.wqe_meta(req.wqe);
    if (req.wqe + 1 != producer) qp.prefetch_wqe(req.wqe + 1);
    bool fresh = req.wqe == req.started;
    uint8_t op = fresh ? wqe.opcode : meta.opcode;
    if (wr::is_read_or_atomic(op)) {
      uint32_t limit = qp.attr.max_rd_atomic ? qp.attr.max_rd_atomic : 1;
      if (req.rd_atomic_outstanding >= limit) break;
    }
    if ((fresh ? wqe.flags : meta.flags) & shm::kWqeFence && req.rd_atomic_outstanding) break;
    if (fresh) start_wqe(w, qp, wqe, meta);
    if (meta.status) {  // stop here; the completer reports it once earlier WQEs retire
      retire = true;
      break;
    }
    if (wr::is_local(meta.opcode)) {  // done when started: nothing goes on the wire
      req.wqe++;
      local_steps++;
      retire = true;
      continue;
    }
    bool ok = wr::is_read_or_atomic(meta.opcode) ? send_read_or_atomic(w, qp, wqe, meta)
                                                 : send_data_packet(w, qp, wqe, meta);
    if (!ok) {
      retire = meta.status != 0;
      break;
    }
    sent++;
    qp.comp.timeout_resend = false;
    // Kept up to date packet by packet: a rewind further on (skip_taken) lowers req.psn.
    if (psn_diff(req.psn, req.psn_end) > 0) {
      req.psn_end = req.psn;
      if (req.peer && !qp.comp.rtt_sent_at) {  // time a PSN sent for the first time
        qp.comp.rtt_psn = psn_add(req.psn, -1u);
        qp.comp.rtt_sent_at = w.now;
      }
    }
    // Per packet while the peer window matters; at its ceiling a QP's turn may overshoot it.
    if (req.peer && !req.peer->at_ceiling()) w.recharge_peer(qp);
  }
  w.recharge_peer(qp);
  if (sent && !qp.comp.ack_deadline && qp.attr.timeout && qp.reliable()) {
    qp.comp.ack_deadline = w.now + (4096ull << qp.attr.timeout);
    w.watch_timers(qp);
  }
  if (sent) completer_arm_probe(w, qp);
  // Unreliable QPs retire WQEs as soon as they are sent; a failed WQE is reported once the
  // ones before it have retired.
  if (retire || (sent && !qp.reliable())) completer_retire(w, qp);
  return sent + local_steps;
}

}  // namespace vrnic
