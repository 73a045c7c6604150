// The RC/UC transport, split as rxe splits it: requester (send WQEs -> packets), completer
// (ACKs and responses -> completions, retransmission), responder (requests -> memory,
// receive completions, ACKs, read and atomic responses). All run on the QP's worker.
#pragma once

#include <cstdint>

#include "device.h"
#include "packet.h"
#include "queue_pair.h"

namespace vrnic {

class TransportHost;

// Whether the QP runs selective repeat with its peer: as ECE agreed, else the device's default.
inline bool uses_selective_repeat(const Device &dev, const QueuePair &qp) {
  return qp.ece_set ? (qp.ece_options & kEceSelectiveRepeat) != 0 : dev.selective_repeat;
}

// Requester: packets for new and retransmitted WQEs, and local operations; returns the steps
// it took of the budget (a packet sent or a local operation done).
uint32_t requester_run(TransportHost &w, QueuePair &qp, uint32_t budget);
bool requester_has_work(QueuePair &qp);

// Whether a rewind asks again for reads and atomics the responder has already taken.
enum class Reask : bool {
  // A NAK: the responder took everything before its PSN; answers to reads and atomics there
  // are queued or on their way (a lost one shows as a gap, or the timer fires).
  kNo,
  // The timer fired, or a read's answer has a gap: ask again for what is missing.
  kYes,
};
// Go-back-N: the requester sends again from `psn` (on a NAK, a timeout or a read gap, and
// when ACKs show it was about to send again what the responder has).
void requester_rewind(QueuePair &qp, uint32_t psn, Reask reask);
// Asks again for PSNs [psn, psn + packets) of the read at send-queue index `index` (a hole in
// its answers, read_holes.h), apart from the requester's go-back-N order; false when no
// packet buffer was free.
bool requester_reask_read(TransportHost &w, QueuePair &qp, uint32_t index, uint32_t psn,
                          uint32_t packets);

// Selective repeat (wire::Sack). What PSN `psn` is to the requester: one packet of a SEND or
// WRITE, or the request of a read or atomic that starts there (its send-queue index in
// *index, sent and not retired); nothing to send alone (a later PSN of a read's range, or one
// the requester is about to send anyway, having gone back before it); or none of its own.
enum class ResendAt { kRequest, kSkip, kNone };
ResendAt requester_request_at(QueuePair &qp, uint32_t psn, uint32_t *index);
// Sends the request at `psn` of the WQE at `index` again, without moving the requester: the
// SEND or WRITE packet, the whole read's request, the atomic's request (a Sack names only
// PSNs past the one the responder expects: it has executed neither). False when no packet
// buffer was free.
bool requester_resend(TransportHost &w, QueuePair &qp, uint32_t index, uint32_t psn);

// Local operations of the send queue (memory window bind, local invalidate), executed when
// the requester reaches them; returns 0 or the ibv_wc_status of the failure.
int execute_local_op(Device &dev, QueuePair &qp, const shm::SendWqe &wqe);
// Remote invalidation (SEND with invalidate) of a type 2 window bound to `qp`.
bool invalidate_window(Device &dev, const QueuePair &qp, uint32_t rkey);

// Completer.
void completer_receive(TransportHost &w, QueuePair &qp, const Packet &pkt);
void completer_check_timers(TransportHost &w, QueuePair &qp);
void completer_arm_probe(TransportHost &w, QueuePair &qp);
void completer_retire(TransportHost &w, QueuePair &qp);
// The read at `index` is about to be asked for again (the requester went back to it): which
// of its PSNs to ask for. Its lowest hole (read_holes.h), its missing tail noted as one more;
// with no table to hold holes, everything from its first missing answer on.
struct ReadAsk {
  uint32_t psn;
  uint32_t packets;
};
ReadAsk completer_read_resend(TransportHost &w, QueuePair &qp, uint32_t index);
// The read's first missing answer: its lowest hole, else its frontier.
uint32_t read_lowest_missing(QueuePair &qp, uint32_t index);

// Responder.
void responder_receive(TransportHost &w, QueuePair &qp, const Packet &pkt);
uint32_t responder_send_reads(TransportHost &w, QueuePair &qp, uint32_t budget);
bool responder_has_work(const QueuePair &qp);
// XRC target: takes the SRQ numbered `srqn` for what it executes now (its receive queue, CQ
// and PD), if the SRQ is of the QP's XRC domain; false, with nothing changed, if not.
bool xrc_target_bind(Device &dev, QueuePair &qp, uint32_t srqn);
void responder_send_ack(TransportHost &w, QueuePair &qp);

// QP life cycle on the data path (qp_lifecycle.cpp).
// Create side: lays the QP's rings out in its shared region (shm::qp_region_bytes(sq_slots,
// rq_slots) bytes, qp.pd already set) and puts it in RESET; a UD QP sends up to `ud_mtu`.
void qp_init(QueuePair &qp, uint8_t type, void *region, uint32_t sq_slots, uint32_t rq_slots,
             uint32_t ud_mtu);
// Its completion queues and, if any, the SRQ it draws from (each counts the QP, in the
// control plane's thread: the refs are its own). With several workers they may be reached
// from more than one, and lock: their multi_worker is set where they are made.
void qp_attach_queues(QueuePair &qp, CompletionQueue *send_cq, CompletionQueue *recv_cq,
                      ReceiveQueue *srq);
// Destroy side: off its queues' counts; qp_release also takes it off its host's lists
// (forget_qp, on the host's thread). The owner unmaps the region.
void qp_detach_queues(QueuePair &qp);
void qp_release(TransportHost &w, QueuePair &qp);
// Bytes of an enum ibv_mtu.
uint32_t mtu_bytes(uint32_t ibv_mtu);
// Applies attributes already checked and the effect of the transition to `next` (RESET:
// transport state cleared; ERR: everything flushed; RTR: responder PSN; RTS: requester PSN,
// retry budgets, peer window, posted WQEs scheduled; SQD: drain watched). True when the
// peer's link address should now be resolved (a connected QP entering RTR with a GRH).
bool qp_modify(TransportHost &w, QueuePair &qp, const ctl::QpAttrWire &a, uint32_t mask,
               uint32_t next);
void qp_enter_error(TransportHost &w, QueuePair &qp);
// What the direct path of another process checks of the QP (its directory entry), written
// again after every change of state, access flags or destination; cleared when it goes
// (clear: the QP left its table and its worker forgot it).
void qp_publish_direct(QueuePair &qp, bool clear = false);
// A completion could not be written (its CQ is full): the QP is lost to its owner, who is
// told with IBV_EVENT_QP_FATAL (the CQ's owner got IBV_EVENT_CQ_ERR).
void qp_fatal(TransportHost &w, QueuePair &qp);
void qp_enter_send_error(TransportHost &w, QueuePair &qp);  // UC/UD: SQE, receive side goes on
void qp_flush_send_queue(QueuePair &qp);
// SQD: tells the owner once nothing is outstanding (if it asked to be told).
void qp_check_drained(QueuePair &qp);
bool qp_sq_busy(const QueuePair &qp);
void qp_flush(TransportHost &w, QueuePair &qp);  // completes everything outstanding with FLUSH_ERR
void qp_reset_transport(QueuePair &qp);
// A snapshot of where the QP's transport stands (vrnicctl qps); `now` in ns.
ctl::QpTransportState qp_transport_state(const Device &dev, QueuePair &qp, uint64_t now);

// Builds the BTH and addressing of a packet from the QP (connected QPs) or from an
// explicit destination (UD); the caller adds the rest.
struct PacketDestination {
  const uint8_t *dgid;
  uint32_t qpn;
  uint8_t sgid_index;
};
Packet *new_packet(TransportHost &w, QueuePair &qp, uint8_t opcode, uint32_t psn, bool ack_req,
                   bool solicited = false);
// Whether a packet for a connected (RC/UC) QP comes from the peer it is connected to: its
// source address, and on the loop port the very QP (RoCE itself carries no source QPN for
// connected QPs; between local sessions vrnicd knows it).
bool from_connected_peer(const QueuePair &qp, const Packet &pkt);
Packet *new_packet_to(TransportHost &w, QueuePair &qp, uint8_t opcode, uint32_t psn, bool ack_req,
                      bool solicited, const PacketDestination &to);

}  // namespace vrnic
