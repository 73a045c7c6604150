// Responder: executes the peer's requests in PSN order (SEND into receive WQEs, WRITE into
// memory, READ and atomics from memory), checks rkeys and access rights, and answers with
// coalesced ACKs, NAKs and read/atomic responses (which go out in PSN order).
#include <infiniband/verbs.h>

#include <atomic>
#include <cstring>

#include "events.h"
#include "ip_header.h"
#include "sge_io.h"
#include "transport.h"
#include "transport_host.h"

namespace vrnic {
namespace {

using namespace wire;

constexpr uint8_t kAckSyndrome = kAethAck | kAethCreditsInvalid;

void send_aeth(TransportHost &w, QueuePair &qp, uint32_t psn, uint8_t syndrome) {
  Packet *pkt = new_packet(w, qp, kAcknowledge, psn, false);
  if (!pkt) return;  // lost ACKs are recovered by the requester's timer
  pkt->ext<Aeth>(opcode_info(kAcknowledge).aeth_off).set(syndrome, qp.resp.msn);
  w.transmit(qp, pkt);
}

// UC has no NAKs: a message the responder cannot take is dropped whole (IB spec 9.9.4).
void drop_uc_message(TransportHost &w, QueuePair &qp) {
  w.count(qp, kPacketsDropped);
  qp.resp.in_send = qp.resp.in_write = false;
  qp.resp.uc_drop = true;
}

// Responder-detected errors (IB spec 9.9.3): NAK the request, then the QP enters error.
void fail(TransportHost &w, QueuePair &qp, uint32_t psn, uint8_t nak_code) {
  if (qp.type == IBV_QPT_UC) return drop_uc_message(w, qp);
  w.count(qp, kNaksSent);
  send_aeth(w, qp, psn, nak_code);
  qp_enter_error(w, qp);
}

// Completes the receive WQE at the head of the receive queue.
// Takes the next receive WQE for a new message; false when there is none.
bool take_recv_wqe(QueuePair &qp) {
  SharedGuard guard(qp.rq->lock, qp.rq->multi_worker);
  if (qp.rq->empty()) return false;
  qp.resp.wqe = qp.rq->head();
  qp.resp.wqe.num_sge = std::min(qp.resp.wqe.num_sge, shm::kMaxSge);
  qp.resp.has_wqe = true;
  qp.rq->pop();
  return true;
}

SgeList recv_sges(const QueuePair &qp) {
  return {qp.resp.wqe.sge, qp.resp.wqe.num_sge, qp.rq->pd};
}

// Completes the receive WQE the message used.
bool complete_recv(TransportHost &w, QueuePair &qp, shm::Cqe cqe, bool solicited) {
  cqe.wr_id = qp.resp.wqe.wr_id;
  cqe.qp_num = qp.qpn;
  if (qp.type != IBV_QPT_UD) cqe.src_qp = qp.attr.dest_qp_num;
  qp.resp.has_wqe = false;
  if (!qp.recv_cq->push(cqe, solicited)) {
    qp_fatal(w, qp);
    return false;
  }
  return true;
}

void fail_recv(TransportHost &w, QueuePair &qp, uint32_t psn, uint8_t wc_status, uint8_t nak_code) {
  shm::Cqe cqe{};
  cqe.status = wc_status;
  cqe.opcode = IBV_WC_RECV;
  complete_recv(w, qp, cqe, false);
  if (qp.type == IBV_QPT_UC) return qp_enter_error(w, qp);  // a local error: no NAK to send
  fail(w, qp, psn, nak_code);
}

void rnr_nak(TransportHost &w, QueuePair &qp, uint32_t psn) {
  if (qp.type == IBV_QPT_UC) return drop_uc_message(w, qp);  // no receive WQE: dropped
  w.count(qp, kRnrNaksSent);
  qp.resp.nak_sent = qp.resp.rnr_nak_sent = true;
  send_aeth(w, qp, psn, kAethRnrNak | (qp.attr.min_rnr_timer & 0x1f));
}

// An XRC target executes each request for the SRQ its XRCETH names: one of the target's XRC
// domain, whose PD the request's memory accesses are checked against and whose CQ takes its
// receive completions. What the QP holds of the SRQ is valid while it executes the packet: an
// SRQ leaves its table for a grace period before it goes. True for any other QP.
bool xrc_bind_request(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  if (qp.type != IBV_QPT_XRC_RECV) return true;
  // A message's later packets are for the SRQ its first named: a receive WQE is taken.
  const uint32_t srqn = pkt.ext<Xrceth>(info.xrceth_off).srqn();
  if ((qp.resp.in_send || qp.resp.in_write) && srqn != qp.resp.xrc_srqn) return false;
  if (!xrc_target_bind(w.dev, qp, srqn)) return false;
  qp.resp.xrc_srqn = srqn;
  return true;
}

// Checks an rkey for `len` bytes at va with `right`; the QP must allow it too.
const MemoryRegion *remote_mr(TransportHost &w, QueuePair &qp, uint32_t rkey, uint64_t va,
                              uint64_t len, uint32_t right) {
  return w.dev.resolve_rkey(qp, rkey, va, len, right);
}

void finish_message(QueuePair &qp) {
  qp.resp.msn = (qp.resp.msn + 1) & 0xffffff;
}

void receive_send(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  ResponderState &r = qp.resp;
  uint32_t psn = pkt.bth().psn();
  if (info.flags & kOpFirst) {
    if (!r.has_wqe && !take_recv_wqe(qp)) return rnr_nak(w, qp, psn);
    r.in_send = true;
    r.recv_bytes = 0;
    r.recv_sge = r.recv_sge_offset = 0;
  }
  SgeList list = recv_sges(qp);
  SgeCursor cur{r.recv_sge, r.recv_sge_offset};
  if (int st = sge_scatter(w.dev, list, cur, pkt.payload, pkt.payload_len)) {
    if (st == IBV_WC_LOC_LEN_ERR) return fail_recv(w, qp, psn, st, kNakInvalidRequest);
    return fail_recv(w, qp, psn, st, kNakRemoteOperational);
  }
  r.recv_sge = cur.index;
  r.recv_sge_offset = cur.offset;
  r.recv_bytes += pkt.payload_len;
  r.psn = psn_add(psn, 1);
  if (info.flags & kOpLast) {
    r.in_send = false;
    finish_message(qp);
    shm::Cqe cqe{};
    cqe.status = IBV_WC_SUCCESS;
    cqe.opcode = IBV_WC_RECV;
    cqe.byte_len = r.recv_bytes;
    if (info.flags & kOpImm) {
      cqe.imm_data = pkt.ext<ImmDt>(info.imm_off).raw();
      cqe.wc_flags = IBV_WC_WITH_IMM;
    }
    if (info.flags & kOpIeth) {
      uint32_t rkey = pkt.ext<Ieth>(info.ieth_off).rkey();
      if (!invalidate_window(w.dev, qp, rkey))
        return fail_recv(w, qp, psn, IBV_WC_REM_INV_REQ_ERR, kNakInvalidRequest);
      cqe.imm_data = rkey;  // ibv_wc.invalidated_rkey, host order
      cqe.wc_flags = IBV_WC_WITH_INV;
    }
    complete_recv(w, qp, cqe, pkt.bth().solicited());
  }
}

void receive_write(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  ResponderState &r = qp.resp;
  uint32_t psn = pkt.bth().psn();
  bool last = info.flags & kOpLast;
  // The immediate needs a receive WQE: check before changing any state or memory, so an RNR
  // retry of this packet starts from the same place.
  if (last && (info.flags & kOpImm) && !r.has_wqe && !take_recv_wqe(qp)) return rnr_nak(w, qp, psn);
  if (info.flags & kOpFirst) {
    const Reth &reth = pkt.ext<Reth>(info.reth_off);
    const MemoryRegion *mr = reth.dma_len() ? remote_mr(w, qp, reth.rkey(), reth.va(),
                                                        reth.dma_len(), IBV_ACCESS_REMOTE_WRITE)
                                            : nullptr;
    if (reth.dma_len() && !mr) return fail(w, qp, psn, kNakRemoteAccess);
    r.in_write = true;
    r.write_rkey = reth.rkey();
    r.write_va = reth.va();
    r.write_left = r.write_total = reth.dma_len();
  }
  if (pkt.payload_len > r.write_left || (last && pkt.payload_len != r.write_left))
    return fail(w, qp, psn, kNakInvalidRequest);
  if (pkt.payload_len) {
    // The region as it is now: ibv_rereg_mr or an access change may have come between the
    // first packet and this one.
    const MemoryRegion *mr = remote_mr(w, qp, r.write_rkey, r.write_va, pkt.payload_len,
                                       IBV_ACCESS_REMOTE_WRITE);
    if (!mr || !mr->write(r.write_va, pkt.payload, pkt.payload_len))
      return fail(w, qp, psn, kNakRemoteAccess);
  }
  r.write_va += pkt.payload_len;
  r.write_left -= pkt.payload_len;
  r.psn = psn_add(psn, 1);
  if (last) {
    r.in_write = false;
    finish_message(qp);
    if (info.flags & kOpImm) {
      shm::Cqe cqe{};
      cqe.status = IBV_WC_SUCCESS;
      cqe.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      cqe.byte_len = r.write_total;
      cqe.imm_data = pkt.ext<ImmDt>(info.imm_off).raw();
      cqe.wc_flags = IBV_WC_WITH_IMM;
      complete_recv(w, qp, cqe, pkt.bth().solicited());
    }
  }
}

// Takes a responder resource slot for a new request; nullptr when the peer exceeds
// max_dest_rd_atomic. A conforming requester has at most max_rd_atomic requests outstanding,
// the newest of them the one arriving, so when the queue is full of first answers the peer
// really exceeded the limit; a replay queued there may be useless (the original answer may
// have arrived after all) and gives way.
ResponderResource *new_resource(QueuePair &qp) {
  ResponderState &r = qp.resp;
  uint32_t limit = std::max<uint32_t>(1, qp.attr.max_dest_rd_atomic);
  if (r.res_head - r.res_sending >= limit) {
    uint32_t i = r.res_sending;
    while (i != r.res_head && !r.res[i].replay) i++;
    if (i == r.res_head) return nullptr;
    for (; i + 1 != r.res_head; i++) r.res[i] = r.res[i + 1];
    r.res_head--;
  }
  ResponderResource &res = r.res[r.res_head++];
  res = ResponderResource{};
  return &res;
}

uint32_t next_unsent(const ResponderResource &res) { return psn_add(res.first_psn, res.sent); }

// A request asked again for PSNs [psn, psn + packets): a queued answer whose unsent rest it
// covers gives way (it will be sent again), and the replay takes its place in PSN order, ahead
// of a later answer being sent, so the queue stays in PSN order. A requester that goes back N
// (rxe) asks again for every later request too, and each of those takes its queued answer's
// place in turn; one that asks only for what is missing (vrnic, read_holes.h) keeps the answers
// queued for everything else (dropping them made it wait for its timer). nullptr when the
// queue is full: the request is dropped, as the spec allows, and asked for again.
ResponderResource *insert_replay(QueuePair &qp, uint32_t psn, uint32_t packets) {
  ResponderState &r = qp.resp;
  const uint32_t end = psn_add(psn, packets);
  uint32_t kept = r.res_sending;
  for (uint32_t i = r.res_sending; i != r.res_head; i++) {
    const ResponderResource &queued = r.res[i];
    uint32_t last = psn_add(queued.first_psn, queued.packets - 1);
    if (psn_diff(next_unsent(queued), psn) >= 0 && psn_diff(last, end) < 0) continue;
    if (kept != i) r.res[kept] = queued;
    kept++;
  }
  r.res_head = kept;
  if (r.res_head - r.res_sending >= std::max<uint32_t>(1, qp.attr.max_dest_rd_atomic))
    return nullptr;
  uint32_t at = r.res_sending;
  while (at != r.res_head && psn_diff(next_unsent(r.res[at]), psn) <= 0) at++;
  for (uint32_t i = r.res_head; i != at; i--) r.res[i] = r.res[i - 1];
  r.res_head++;
  ResponderResource &res = r.res[at];
  res = ResponderResource{};
  res.replay = true;
  return &res;
}

void receive_read(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info,
                  bool duplicate) {
  uint32_t psn = pkt.bth().psn();
  const Reth &reth = pkt.ext<Reth>(info.reth_off);
  const MemoryRegion *mr = reth.dma_len() ? remote_mr(w, qp, reth.rkey(), reth.va(), reth.dma_len(),
                                                      IBV_ACCESS_REMOTE_READ)
                                          : nullptr;
  if (reth.dma_len() && !mr) {
    if (!duplicate) fail(w, qp, psn, kNakRemoteAccess);
    return;
  }
  uint32_t packets = reth.dma_len() ? (reth.dma_len() + qp.mtu - 1) / qp.mtu : 1;
  ResponderResource *res = duplicate ? insert_replay(qp, psn, packets) : new_resource(qp);
  if (!res) {
    if (!duplicate) fail(w, qp, psn, kNakInvalidRequest);
    return;
  }
  res->kind = ResponderResource::kRead;
  res->pd = qp.pd;
  res->first_psn = psn;
  res->packets = packets;
  res->va = reth.va();
  res->rkey = reth.rkey();
  res->length = reth.dma_len();
  if (!duplicate) {
    qp.resp.psn = psn_add(psn, res->packets);
    finish_message(qp);
  }
  w.schedule(qp);
}

void receive_atomic(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  uint32_t psn = pkt.bth().psn();
  const AtomicEth &eth = pkt.ext<AtomicEth>(info.atomic_eth_off);
  if (eth.va() & 7) return fail(w, qp, psn, kNakInvalidRequest);
  const MemoryRegion *mr = remote_mr(w, qp, eth.rkey(), eth.va(), 8, IBV_ACCESS_REMOTE_ATOMIC);
  if (!mr) return fail(w, qp, psn, kNakRemoteAccess);
  ResponderResource *res = new_resource(qp);
  if (!res) return fail(w, qp, psn, kNakInvalidRequest);
  uint64_t orig;
  bool ok = op_operation(pkt.bth().opcode()) == kCompareSwap
                ? mr->atomic_cmp_swap(eth.va(), eth.compare(), eth.swap_add(), &orig)
                : mr->atomic_fetch_add(eth.va(), eth.swap_add(), &orig);
  if (!ok) {
    qp.resp.res_head--;
    return fail(w, qp, psn, kNakRemoteAccess);
  }
  res->kind = ResponderResource::kAtomic;
  res->first_psn = psn;
  res->packets = 1;
  res->atomic_orig = orig;
  qp.resp.atomics[qp.resp.atomics_next++ ] = {psn, true, orig};
  qp.resp.psn = psn_add(psn, 1);
  finish_message(qp);
  w.schedule(qp);
}

// The answer to an ATOMIC WRITE: an empty read response, from the responder's queue of
// answers (so that it follows the reads and atomics before it).
void answer_atomic_write(TransportHost &w, QueuePair &qp, ResponderResource *res, uint32_t psn) {
  res->kind = ResponderResource::kRead;
  res->first_psn = psn;
  res->packets = 1;
  res->va = 0;
  res->rkey = 0;
  res->length = 0;
  w.schedule(qp);
}

// IBTA 1.5 ATOMIC WRITE: 8 bytes, 8-byte aligned, stored at once (no reader sees half of
// them), with REMOTE_WRITE access.
void receive_atomic_write(TransportHost &w, QueuePair &qp, const Packet &pkt,
                          const OpcodeInfo &info) {
  uint32_t psn = pkt.bth().psn();
  const Reth &reth = pkt.ext<Reth>(info.reth_off);
  if (reth.dma_len() != 8 || pkt.payload_len != 8 || (reth.va() & 7))
    return fail(w, qp, psn, kNakInvalidRequest);
  const MemoryRegion *mr = remote_mr(w, qp, reth.rkey(), reth.va(), 8, IBV_ACCESS_REMOTE_WRITE);
  if (!mr) return fail(w, qp, psn, kNakRemoteAccess);
  ResponderResource *res = new_resource(qp);
  if (!res) return fail(w, qp, psn, kNakInvalidRequest);
  uint64_t value;
  std::memcpy(&value, pkt.payload, 8);
  bool ok;
  if (uint8_t *p = mr->local_span(reth.va(), 8)) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t *>(p)).store(value);
    ok = true;
  } else {
    ok = mr->write(reth.va(), &value, 8);
  }
  if (!ok) {
    qp.resp.res_head--;
    return fail(w, qp, psn, kNakRemoteAccess);
  }
  qp.resp.psn = psn_add(psn, 1);
  finish_message(qp);
  answer_atomic_write(w, qp, res, psn);
}

// A request we already executed: answer again without executing it twice.
void receive_duplicate(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  ResponderState &r = qp.resp;
  w.count(qp, kDuplicates);
  uint32_t psn = pkt.bth().psn();
  if (!xrc_bind_request(w, qp, pkt, info)) return;  // an SRQ gone since: nothing to answer
  if (info.flags & kOpReadRequest) return receive_read(w, qp, pkt, info, true);
  if (info.flags & kOpAtomicWrite) {  // executed: its answer again, never the write
    if (ResponderResource *again = insert_replay(qp, psn, 1)) answer_atomic_write(w, qp, again, psn);
    return;
  }
  if (info.flags & kOpAtomic) {
    for (const ResponderState::AtomicResult &done : r.atomics) {
      if (!done.valid || done.psn != psn) continue;
      if (ResponderResource *again = insert_replay(qp, psn, 1)) {
        again->kind = ResponderResource::kAtomic;
        again->first_psn = psn;
        again->packets = 1;
        again->atomic_orig = done.orig;
      }
      w.schedule(qp);
      return;
    }
    return;  // too old to replay: drop, as the spec allows
  }
  r.ack_pending = true;
  r.ack_psn = psn_add(r.psn, -1u);
  w.ack_later(qp);
}

bool sequence_ok(const ResponderState &r, const OpcodeInfo &info) {
  if (r.in_send) return (info.flags & kOpSend) && !(info.flags & kOpFirst);
  if (r.in_write) return (info.flags & kOpWrite) && !(info.flags & kOpFirst);
  return info.flags & kOpFirst;
}

bool length_ok(const QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  if (!(info.flags & kOpPayload)) return pkt.payload_len == 0;
  if (info.flags & kOpLast) return pkt.payload_len <= qp.mtu;
  return pkt.payload_len == qp.mtu;  // first and middle packets are full
}

// What a UD receive completion says of the packet's L3 header, in wc.sl: RoCEv2 carries no SL,
// and IBTA Annex 17 (A17.4.5.1) has the completion tell IPv4 from IPv6. Verbs has no field
// for it; ConnectX NICs report it in sl (bit 3: UDP-encapsulated, bits 2-0: 1 IPv6, 2 IPv4),
// and UCX's UD transport reads it there to find the destination GID in the GRH area: with 0
// it read an IPv4 packet as IPv6 and dropped every datagram (issue 18).
uint8_t roce_l3_type_sl(const uint8_t src_gid[16]) {
  return gid_is_ipv4(src_gid) ? 0x8 | 0x2 : 0x8 | 0x1;
}

// The 40 bytes a UD receive buffer starts with: the GRH, which for RoCEv2 holds the IP
// header the packet came with (IPv4: in the last 20 bytes, after 20 unused ones).
void build_grh(const Packet &pkt, uint8_t grh[40]) {
  std::memset(grh, 0, 40);
  uint16_t l4_len = uint16_t(kUdpHeaderBytes + pkt.header_len + pkt.payload_len + kIcrcBytes);
  if (gid_is_ipv4(pkt.src_gid)) {
    build_ipv4(grh + 20, pkt.src_gid, pkt.dst_gid, l4_len, /*tos=*/0, /*ttl=*/64, /*id=*/0,
               /*dont_fragment=*/true);
  } else {
    build_ipv6(grh, pkt.src_gid, pkt.dst_gid, l4_len, /*traffic_class=*/0, /*flow_label=*/0,
               /*hop_limit=*/64);
  }
}

// UD: no sequence, no acknowledgement; a datagram without a receive WQE or with the wrong
// Q_Key is dropped.
void receive_ud(TransportHost &w, QueuePair &qp, const Packet &pkt, const OpcodeInfo &info) {
  const Deth &deth = pkt.ext<Deth>(info.deth_off);
  if (op_transport(pkt.bth().opcode()) != kUd || deth.qkey() != qp.attr.qkey ||
      !take_recv_wqe(qp)) {
    w.count(qp, kPacketsDropped);
    return;
  }
  SgeList list = recv_sges(qp);
  SgeCursor cur;
  uint8_t grh[40];
  build_grh(pkt, grh);
  int st = sge_scatter(w.dev, list, cur, grh, sizeof(grh));
  if (!st) st = sge_scatter(w.dev, list, cur, pkt.payload, pkt.payload_len);
  shm::Cqe cqe{};
  cqe.status = uint8_t(st);
  cqe.opcode = IBV_WC_RECV;
  cqe.src_qp = deth.src_qp();
  cqe.sl = roce_l3_type_sl(pkt.src_gid);
  if (!st) {
    cqe.byte_len = uint32_t(sizeof(grh)) + pkt.payload_len;
    cqe.wc_flags = IBV_WC_GRH;
    if (info.flags & kOpImm) {
      cqe.imm_data = pkt.ext<ImmDt>(info.imm_off).raw();
      cqe.wc_flags |= IBV_WC_WITH_IMM;
    }
  }
  complete_recv(w, qp, cqe, pkt.bth().solicited());
}

// UC: in-order delivery of whole messages or nothing. A gap in PSNs loses the message in
// progress; the responder waits for the next first (or only) packet.
bool uc_accept(QueuePair &qp, uint32_t psn, const OpcodeInfo &info) {
  ResponderState &r = qp.resp;
  if (psn != r.psn) {
    r.in_send = r.in_write = false;
    r.uc_drop = true;
  }
  r.psn = psn_add(psn, 1);
  if (info.flags & kOpFirst) {
    if (r.in_send || r.in_write) r.in_send = r.in_write = false;  // the last packet was lost
    r.uc_drop = false;
  }
  return !r.uc_drop;
}

// The request at the expected PSN (RC): executed.
void receive_in_sequence(TransportHost &w, QueuePair &qp, const Packet &pkt,
                         const OpcodeInfo &info) {
  ResponderState &r = qp.resp;
  uint32_t psn = pkt.bth().psn();
  r.nak_sent = r.rnr_nak_sent = r.relost_nak_sent = false;
  if (psn_diff(r.sack_reported, psn) < 0) r.sack_reported = psn;  // kept near the expected PSN
  if (!sequence_ok(r, info) || !length_ok(qp, pkt, info) || !xrc_bind_request(w, qp, pkt, info))
    return fail(w, qp, psn, kNakInvalidRequest);
  if (info.flags & kOpSend) {
    receive_send(w, qp, pkt, info);
  } else if (info.flags & kOpWrite) {
    receive_write(w, qp, pkt, info);
  } else if (info.flags & kOpReadRequest) {
    return receive_read(w, qp, pkt, info, false);
  } else if (info.flags & kOpAtomic) {
    return receive_atomic(w, qp, pkt, info);
  } else if (info.flags & kOpAtomicWrite) {
    return receive_atomic_write(w, qp, pkt, info);
  }
  if (pkt.bth().ack_req() && qp.state() != IBV_QPS_ERR && !r.nak_sent && psn_diff(r.psn, psn) > 0) {
    r.ack_pending = true;
    r.ack_psn = psn;
    w.ack_later(qp);
  }
}

// A sequence NAK for the expected PSN. With selective repeat agreed (--selective-repeat), it
// says which later PSNs are held (wire::Sack), so that the requester sends only the others,
// and, with `lost_below`, which of them were lost a second time.
void sequence_nak(TransportHost &w, QueuePair &qp, uint32_t lost_below = 0) {
  ResponderState &r = qp.resp;
  r.nak_sent = true;
  w.count(qp, kNaksSent);
  Packet *pkt = new_packet(w, qp, kAcknowledge, r.psn, false);
  if (!pkt) return;  // the requester's timer recovers
  pkt->ext<Aeth>(opcode_info(kAcknowledge).aeth_off).set(kNakPsnSeqError, r.msn);
  if (uses_selective_repeat(w.dev, qp) && r.held && !r.held->empty()) {
    uint32_t span = std::min<uint32_t>(uint32_t(psn_diff(r.held->high(), r.psn)), Sack::kMaxSpan);
    Sack *sack = reinterpret_cast<Sack *>(pkt->bounce);
    sack->start(span, std::min(lost_below, span));
    for (uint32_t i = 0; i < span; i++)
      if (r.held->at(psn_add(r.psn, i + 1))) sack->set_held(i);
    pkt->payload = pkt->bounce;
    pkt->payload_len = Sack::kSize;
  }
  w.transmit(qp, pkt);
}

// Selective repeat: whether the held packets show a gap not reported yet at least
// kReorderPackets below `psn`. A gap is taken for a loss only once that many later packets
// have come, as TCP waits for three duplicate ACKs: a packet overtaken by one or two others
// lands before its NAK would go out, and costs nothing. (The last packets of a burst leave no
// such gap; the requester's repair timer covers them.)
constexpr uint32_t kReorderPackets = 3;

bool new_loss_below(ResponderState &r, uint32_t psn) {
  const uint32_t confirm = psn_add(psn, -kReorderPackets);
  if (psn_diff(confirm, r.psn) < 0) return false;
  uint32_t p = psn_diff(r.sack_reported, r.psn) >= 0 ? psn_add(r.sack_reported, 1) : r.psn;
  bool lost = false;
  for (; psn_diff(p, confirm) <= 0 && !lost; p = psn_add(p, 1)) lost = !r.held->at(p);
  if (psn_diff(confirm, r.sack_reported) > 0) r.sack_reported = confirm;
  return lost;
}

// A request ahead of the expected PSN: the ones before it were lost or are late. It is kept
// (held_packets.h) when there is room, and a sequence NAK goes out: the first time (go-back-N:
// the requester sends everything again from the NAK's PSN, and this one's copy is then a
// duplicate), or, with selective repeat, whenever a gap below it is taken for a loss.
void receive_ahead(TransportHost &w, QueuePair &qp, const Packet &pkt, uint32_t ahead) {
  ResponderState &r = qp.resp;
  w.count(qp, kOutOfSequence);
  uint32_t psn = pkt.bth().psn();
  if (r.held && r.held->at(psn)) return;  // held already: a duplicate
  bool gap = !r.held || r.held->empty() || psn_diff(psn, r.held->high()) > 1;
  bool fills = !gap && psn_diff(psn, r.held->high()) < 0;  // into a gap below the highest held
  bool kept = ahead < HeldPackets::kSlots && w.hold_packet(qp, pkt);
  if (kept) w.count(qp, kPacketsHeld);
  if (!kept || !uses_selective_repeat(w.dev, qp)) {
    if (!r.nak_sent) sequence_nak(w, qp);
    return;
  }
  // After an RNR NAK the requester waits its timer and then sends everything again from the
  // NAK's PSN: no sequence NAK (it would have it resend before the timer).
  if (r.rnr_nak_sent) return;
  if (new_loss_below(r, psn)) {
    sequence_nak(w, qp);
  } else if (fills && !r.relost_nak_sent) {
    // Once per expected PSN: a resend of it lost again is not asked for twice.
    r.relost_nak_sent = true;
    sequence_nak(w, qp, ahead);
  }
}

// The expected PSN came: the held requests it was missing for run now, in PSN order, until
// the next gap (or a request that does not advance: an RNR NAK or an error, which the
// requester's resend from there repairs). What they took is acknowledged at once -- with a
// selective NAK for the next gap when they leave one.
void deliver_held(TransportHost &w, QueuePair &qp) {
  ResponderState &r = qp.resp;
  bool delivered = false;
  while (qp.state() != IBV_QPS_ERR) {
    Packet *held = w.take_held(qp, r.psn);
    if (!held) break;
    uint32_t before = r.psn;
    receive_in_sequence(w, qp, *held, held->info());
    w.pool.free(held);
    delivered = true;
    if (r.psn == before || r.nak_sent) break;
  }
  if (r.held && (qp.state() == IBV_QPS_ERR || r.held->empty())) w.release_held(qp);
  if (!delivered || qp.state() == IBV_QPS_ERR || r.nak_sent) return;
  if (r.held && uses_selective_repeat(w.dev, qp)) return sequence_nak(w, qp);
  r.ack_pending = true;
  r.ack_psn = psn_add(r.psn, -1u);
  w.ack_later(qp);
}

}  // namespace

void responder_receive(TransportHost &w, QueuePair &qp, const Packet &pkt) {
  const OpcodeInfo &info = pkt.info();
  if (qp.state() == IBV_QPS_ERR) {
    w.count(qp, kPacketsDropped);
    return;
  }
  // The first packet a QP receives in RTR tells its owner the connection is up.
  if (qp.state() == IBV_QPS_RTR && !qp.comm_established) {
    qp.comm_established = true;
    raise_event(qp.async_fd, IBV_EVENT_COMM_EST, qp.cookie);
  }
  if (qp.type == IBV_QPT_UD) return receive_ud(w, qp, pkt, info);
  // An XRC initiator has no receive side: requests for it are dropped as any in the wrong
  // transport.
  if (op_transport(pkt.bth().opcode()) != qp.transport() || qp.type == IBV_QPT_XRC_SEND ||
      !from_connected_peer(qp, pkt)) {
    w.count(qp, kPacketsDropped);
    return;
  }
  ResponderState &r = qp.resp;
  uint32_t psn = pkt.bth().psn();
  if (qp.type == IBV_QPT_UC) {
    if (!uc_accept(qp, psn, info)) {
      w.count(qp, kPacketsDropped);
      return;
    }
    r.psn = psn;  // the handlers below advance it
    if (!sequence_ok(r, info) || !length_ok(qp, pkt, info)) return drop_uc_message(w, qp);
    if (info.flags & kOpSend) return receive_send(w, qp, pkt, info);
    return receive_write(w, qp, pkt, info);
  }
  int32_t d = psn_diff(psn, r.psn);
  if (d < 0) return receive_duplicate(w, qp, pkt, info);
  if (d > 0) return receive_ahead(w, qp, pkt, uint32_t(d));
  receive_in_sequence(w, qp, pkt, info);
  if (r.held) deliver_held(w, qp);
}

bool xrc_target_bind(Device &dev, QueuePair &qp, uint32_t srqn) {
  ReceiveQueue *srq = srqn ? dev.srqs.get(srqn) : nullptr;
  if (!srq || !srq->xrcd || srq->xrcd != qp.xrcd) return false;
  qp.rq = srq;
  qp.recv_cq = srq->cq;
  qp.pd = srq->pd;
  return true;
}

bool responder_has_work(const QueuePair &qp) {
  return qp.resp.res_sending != qp.resp.res_head;
}

void responder_send_ack(TransportHost &w, QueuePair &qp) {
  ResponderState &r = qp.resp;
  if (!r.ack_pending || qp.state() == IBV_QPS_ERR) return;
  uint32_t psn = r.ack_psn;
  if (responder_has_work(qp)) {
    // An ACK must not overtake read or atomic responses still queued: acknowledge what lies
    // before them now (so the requester's timer sees progress) and the rest after them.
    const ResponderResource &oldest = r.res[r.res_sending ];
    uint32_t before = psn_add(oldest.first_psn, -1u);
    if (psn_diff(before, psn) < 0) psn = before;
    if (r.ack_sent_valid && psn_diff(psn, r.ack_sent) <= 0) return;  // nothing new yet
  } else {
    r.ack_pending = false;
  }
  r.ack_sent = psn;
  r.ack_sent_valid = true;
  send_aeth(w, qp, psn, kAckSyndrome);
}

uint32_t responder_send_reads(TransportHost &w, QueuePair &qp, uint32_t budget) {
  ResponderState &r = qp.resp;
  uint32_t sent = 0;
  while (sent < budget && r.res_sending != r.res_head) {
    ResponderResource &res = r.res[r.res_sending ];
    uint32_t psn = psn_add(res.first_psn, res.sent);
    if (res.kind == ResponderResource::kAtomic) {
      Packet *pkt = new_packet(w, qp, kAtomicAcknowledge, psn, false);
      if (!pkt) break;
      const OpcodeInfo &info = opcode_info(kAtomicAcknowledge);
      pkt->ext<Aeth>(info.aeth_off).set(kAckSyndrome, r.msn);
      pkt->ext<AtomicAckEth>(info.atomic_ack_off).set(res.atomic_orig);
      w.transmit(qp, pkt);
      r.res_sending++;
      sent++;
      continue;
    }
    uint32_t offset = res.sent * qp.mtu;
    uint32_t chunk = std::min(qp.mtu, res.length - offset);
    bool first = res.sent == 0, last = res.sent + 1 == res.packets;
    uint8_t opcode = first && last ? kReadResponseOnly
                     : first       ? kReadResponseFirst
                     : last        ? kReadResponseLast
                                   : kReadResponseMiddle;
    // The region as it is now (bounds, access, PD, window): it may have changed under the read.
    if (qp.type == IBV_QPT_XRC_RECV) qp.pd = res.pd;  // the PD of the SRQ the read named
    const MemoryRegion *mr =
        chunk ? remote_mr(w, qp, res.rkey, res.va + offset, chunk, IBV_ACCESS_REMOTE_READ)
              : nullptr;
    if (chunk && !mr) {
      r.res_sending = r.res_head;  // the region changed or went away under the read
      fail(w, qp, psn, kNakRemoteAccess);
      return sent;
    }
    Packet *pkt = new_packet(w, qp, opcode, psn, false);
    if (!pkt) break;
    const OpcodeInfo &info = opcode_info(opcode);
    if (info.flags & kOpAeth) pkt->ext<Aeth>(info.aeth_off).set(kAckSyndrome, r.msn);
    pkt->payload_len = chunk;
    if (chunk) {
      // A replay may answer a read the requester has finished with, whose memory the
      // application may be changing: copied, so the packet is whole and its ICRC right.
      pkt->payload = res.replay ? nullptr : mr->local_span(res.va + offset, chunk);
      if (!pkt->payload) {
        if (!mr->read(res.va + offset, pkt->bounce, chunk)) {
          w.pool.free(pkt);
          r.res_sending = r.res_head;
          fail(w, qp, psn, kNakRemoteAccess);
          return sent;
        }
        pkt->payload = pkt->bounce;
      }
    }
    w.transmit(qp, pkt);
    sent++;
    if (++res.sent == res.packets) r.res_sending++;
  }
  if (r.res_sending == r.res_head && r.ack_pending) responder_send_ack(w, qp);
  return sent;
}

}  // namespace vrnic
