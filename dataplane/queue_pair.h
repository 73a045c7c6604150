// vrnicd's state of one queue pair. Touched only by the worker that owns the QP, so no locks.
// Hot state is grouped by the three RC engines (rxe's split): the requester turns send WQEs
// into packets, the completer retires them on ACKs and responses, the responder executes the
// peer's requests.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "completion_queue.h"
#include "peer_window.h"
#include "receive_queue.h"
#include "responder_ring.h"
#include "send_window.h"
#include "vrnic/counters.h"
#include "vrnic/ctl_protocol.h"
#include "vrnic/direct_directory.h"
#include "vrnic/shm_layout.h"
#include "vrnic/wire.h"

namespace vrnic {

class ReadHoles;    // read_holes.h
class HeldPackets;  // held_packets.h

// Worker-private bookkeeping per send-queue slot (never trusted to shared memory).
struct WqeMeta {
  uint32_t first_psn;
  uint32_t last_psn;
  uint32_t length;
  // Read/atomic: next response PSN expected. A read's answers below it have arrived, but for
  // the holes its QP's ReadHoles lists.
  uint32_t resp_psn;
  uint8_t opcode;     // the ibv_wr_opcode read when the WQE was started
  uint8_t flags;
  uint8_t status;  // ibv_wc_status found while sending (local errors), else 0
  bool resp_done;  // read/atomic: response fully received
};

struct RequesterState {
  uint32_t psn = 0;                  // next PSN to send
  uint32_t psn_end = 0;              // one past the highest PSN ever sent (psn may rewind)
  uint32_t wqe = 0;                  // WQE being sent (free-running index)
  uint32_t offset = 0;               // bytes of it already sent
  uint32_t sge = 0, sge_offset = 0;  // gather cursor within the WQE
  // Reads and atomics sent and not yet retired, answered or not: at most max_rd_atomic. Until
  // the oldest retires, any of them may be asked for again, and the responder remembers only
  // its last max_dest_rd_atomic atomics' results to replay: counting only the unanswered ones
  // let newer atomics push an unanswered one's result out, and its every retry then went
  // unanswered (RETRY_EXC_ERR under corrupt=1).
  uint32_t rd_atomic_outstanding = 0;
  uint32_t started = 0;  // WQEs [completer.wqe, started) have been started
  SendWindow window;
  // RC, from RTS until error, reset or destroy: the window shared with the worker's other QPs
  // to the same peer, the PSNs it counts for this QP, and whether the QP waits for it.
  PeerWindow *peer = nullptr;
  uint32_t peer_charged = 0;
  bool peer_waiting = false;
};

struct CompleterState {
  uint32_t wqe = 0;        // oldest WQE not yet retired
  uint32_t acked_psn = 0;  // last PSN the responder acknowledged
  uint8_t retry_left = 0;
  uint8_t rnr_left = 0;
  uint64_t ack_deadline = 0;     // local ACK timeout; 0: not armed
  uint64_t rnr_deadline = 0;     // requester paused until then; 0: not paused
  uint32_t rerequested_psn = 0;  // read response gap already asked again for (going back)
  bool rerequested_psn_valid = false;
  // Missing answers below outstanding reads' frontiers (read_holes.h): a table from the
  // host's pool while there are any, else none.
  ReadHoles *holes = nullptr;
  // The PSN a sequence NAK last made the requester resend from, until the next progress: a
  // NAK at or before it is old news (a copy of it, or one overtaken on the way).
  uint32_t nak_rewound_psn = 0;
  bool nak_rewound_valid = false;
  // With a peer window (wire peers): the probe timer (0: not armed) and how many probes in a
  // row found no progress (each doubles the wait); the PSN being timed and when it left (0:
  // none).
  uint8_t probes = 0;
  uint64_t probe_deadline = 0;
  // The ACK timer fired and cost a retry: the first packet of the resend goes out whatever
  // the peer window says, so that every retry counted was tried on the wire.
  bool timeout_resend = false;
  uint32_t rtt_psn = 0;
  uint64_t rtt_sent_at = 0;
  // Selective repeat (wire::Sack): the highest PSN sent again alone in this round, and when the
  // round ends. A round lasts two round trips; after it, what is still missing is sent again.
  uint32_t sack_high = 0;
  uint64_t sack_round_end = 0;
  // The responder sends Sacks (one came): then the repair timer (0: not armed) runs while
  // anything is outstanding, and a round without progress sends the oldest unacknowledged
  // request again alone (a resend lost again, a NAK lost, the last packets lost). Each in a
  // row doubles the wait.
  bool peer_sacks = false;
  uint64_t sack_deadline = 0;
  uint8_t sack_probes = 0;

  // The earliest of the timers armed (ACK, RNR, probe, repair); 0 if none is.
  uint64_t next_deadline() const {
    uint64_t next = 0;
    for (uint64_t d : {ack_deadline, rnr_deadline, probe_deadline, sack_deadline})
      if (d && (!next || d < next)) next = d;
    return next;
  }
};

// A read or atomic the responder is answering (IB "responder resources").
struct ResponderResource {
  enum Kind : uint8_t { kFree, kRead, kAtomic } kind = kFree;
  // Answers a repeated request. The original answer may have arrived after all, so a replay
  // can be useless; it gives way to newer requests when the queue is full.
  bool replay = false;
  uint32_t first_psn = 0;
  uint32_t packets = 0;
  uint32_t sent = 0;  // read response packets sent
  uint64_t va = 0;
  // The rkey as the request gave it: resolved again for every response packet, so that a
  // rereg, dereg, access change or window invalidation mid-read stops the read there.
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint64_t atomic_orig = 0;
  uint32_t pd = 0;  // XRC: the PD of the SRQ the request named, whose regions it may reach
};

struct ResponderState {
  uint32_t psn = 0;  // expected PSN
  uint32_t msn = 0;
  bool nak_sent = false;  // a NAK (sequence or RNR) is out for `psn`
  bool rnr_nak_sent = false;  // and it is an RNR NAK
  bool relost_nak_sent = false;  // a Sack with lost_below is out for `psn`
  // Selective repeat: gaps up to here have been NAKed (never far from `psn`: set at RTR and
  // moved up by every request taken in sequence).
  uint32_t sack_reported = 0;
  bool uc_drop = false;   // UC: the message in progress was dropped; skip to the next first
  // The receive WQE taken for the message in progress: a private copy, since the ring slot
  // (or, for an SRQ, the next WQE) may be reused as soon as it is taken.
  bool has_wqe = false;
  shm::RecvWqe wqe;
  // SEND in progress
  bool in_send = false;
  uint32_t recv_bytes = 0;
  uint32_t recv_sge = 0, recv_sge_offset = 0;
  // WRITE in progress
  bool in_write = false;
  // The rkey as the first packet gave it: every packet is checked against the region (or
  // window) as it is when that packet lands, bounds, access and PD (issue 28, rows 1, 11).
  uint32_t write_rkey = 0;
  uint64_t write_va = 0;
  uint32_t write_left = 0;
  uint32_t write_total = 0;
  // coalesced ACK
  bool ack_pending = false;
  uint32_t ack_psn = 0;
  bool ack_sent_valid = false;  // the last ACK sent, so a partial one is not repeated
  uint32_t ack_sent = 0;
  // reads and atomics, oldest first
  // The results of the last atomics executed, so a repeated request is answered again
  // without executing it twice (kept apart from the response queue, which a requester's
  // go-back-N may truncate).
  struct AtomicResult {
    uint32_t psn;
    bool valid;
    uint64_t orig;
  };
  ResponderRing<AtomicResult> atomics;  // the newest capacity() of them
  uint32_t atomics_next = 0;
  ResponderRing<ResponderResource> res;
  uint32_t res_head = 0;     // one past the newest
  uint32_t res_sending = 0;  // first resource with read responses left to send
  // Requests received ahead of `psn`, kept until it comes (held_packets.h): a table from the
  // host's pool while there are any.
  HeldPackets *held = nullptr;
  // XRC target: the SRQ the message in progress was for (its XRCETH), 0 when none.
  uint32_t xrc_srqn = 0;
};

class QueuePair {
 public:
  uint32_t handle = 0;
  uint32_t qpn = 0;
  uint32_t session = 0;
  // Its protection domain; an XRC target QP has none of its own, and takes that of the SRQ
  // each request names (xrc_target_bind) while it executes the request.
  uint32_t pd = 0;
  uint32_t xrcd = 0;   // XRC target: the XRC domain whose SRQs it delivers to
  uint8_t type = 0;    // enum ibv_qp_type
  uint8_t worker = 0;  // the worker that owns it (changes only with every worker parked)
  // A doorbell another worker took for it waits in the owner's inbox: at most one entry per
  // QP, so forged doorbells cannot fill an inbox (set by the forwarding worker, cleared by
  // the owner as it takes the entry).
  std::atomic<bool> doorbell_forwarded{false};
  bool sq_sig_all = false;
  uint64_t cookie = 0;
  int async_fd = -1;

  shm::QpShared *shared = nullptr;
  // Its entry in its user's direct-path directory (an RC QP of a session that has one), kept
  // by qp_publish_direct: what a poster in another process checks of it as a peer.
  shm::Published<shm::DirectoryQp> *directory = nullptr;
  shm::SendWqe *sq = nullptr;
  uint32_t sq_mask = 0;
  ReceiveQueue own_rq;         // the QP's receive ring
  ReceiveQueue *rq = &own_rq;  // or the SRQ it draws from
  std::unique_ptr<WqeMeta[]> meta;
  CompletionQueue *send_cq = nullptr;
  CompletionQueue *recv_cq = nullptr;

  ctl::QpAttrWire attr{};  // as last modified (state, path, timers, ...)
  uint32_t mtu = 1024;     // path MTU in bytes

  RequesterState req;
  CompleterState comp;
  ResponderState resp;
  TransportCounters counters;

  // ECE (vrnic/ece.h): the options ibv_set_ece agreed for this QP (rdma_cm sets them from
  // the REQ and REP); until it is called the QP follows the device's default.
  bool ece_set = false;
  uint32_t ece_options = 0;

  bool sq_drained_reported = false;  // SQD: IBV_EVENT_SQ_DRAINED sent for this drain
  bool comm_established = false;     // IBV_EVENT_COMM_EST sent
  bool in_run_queue = false;
  bool in_ack_list = false;
  bool in_timer_list = false;

  uint32_t state() const { return attr.qp_state; }
  // RC, or either half of XRC (the initiator sends, the target receives): acknowledged,
  // retransmitted, executed in PSN order.
  bool reliable() const {
    return type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV;
  }
  // The transport bits of its packets' opcodes (IB spec table 38).
  uint8_t transport() const {
    switch (type) {
      case IBV_QPT_UC:
        return wire::kUc;
      case IBV_QPT_UD:
        return wire::kUd;
      case IBV_QPT_XRC_SEND:
      case IBV_QPT_XRC_RECV:
        return wire::kXrc;
      default:
        return wire::kRc;
    }
  }
  bool sq_empty() const { return comp.wqe == sq_producer(); }
  // The provider's producer index, read from shared memory and held to what the ring can
  // hold: a client writing one far ahead would have vrnicd walk its ring round and round
  // (issue 17, row 11); one behind the oldest WQE unretired counts as nothing posted.
  uint32_t sq_producer() const {
    uint32_t p = shared->sq.producer.load(std::memory_order_acquire);
    return p - comp.wqe > sq_mask + 1 ? comp.wqe + sq_mask + 1 : p;
  }
  shm::SendWqe &wqe(uint32_t index) { return sq[index & sq_mask]; }
  // Starts loading a WQE the provider wrote on another core (its header and first SGE), so
  // that the requester does not wait for it when it gets there.
  void prefetch_wqe(uint32_t index) {
    const auto *p = reinterpret_cast<const char *>(&wqe(index));
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
  }
  WqeMeta &wqe_meta(uint32_t index) { return meta[index & sq_mask]; }
};

}  // namespace vrnic
