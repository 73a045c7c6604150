// Completer: consumes ACKs, NAKs, read responses and atomic ACKs; retires WQEs in order with
// their completions; owns the local ACK timeout and RNR timer and rewinds the requester for
// go-back-N retransmission.
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

// IB spec table 45: RNR NAK timer field -> microseconds.
constexpr uint32_t kRnrTimerUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                      160,    240,   320,   480,    640,    960,    1280,   1920,
                                      2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

bool outstanding(const QueuePair &qp) {
  return qp.comp.wqe != qp.req.started;
}

void restart_ack_timer(TransportHost &w, QueuePair &qp) {
  if (outstanding(qp) && qp.attr.timeout) {
    qp.comp.ack_deadline = w.now + (4096ull << qp.attr.timeout);
    w.watch_timers(qp);
  } else {
    qp.comp.ack_deadline = 0;
  }
}

// A read or atomic has its whole answer. It stays counted against max_rd_atomic until it
// retires (see RequesterState::rd_atomic_outstanding).
void answered(QueuePair &qp, uint32_t index) {
  qp.wqe_meta(index).resp_done = true;
}

void fail_oldest(TransportHost &w, QueuePair &qp, uint8_t status) {
  if (outstanding(qp)) qp.wqe_meta(qp.comp.wqe).status = status;
  completer_retire(w, qp);
}

// Packets from `psn` on were lost (a timeout, or a NAK saying so): both windows shrink, and the
// requester goes back to send them again.
void lost(TransportHost &w, QueuePair &qp, PeerWindow::Loss kind, uint32_t psn, Reask reask) {
  qp.req.window.on_loss();
  if (qp.req.peer) qp.req.peer->on_loss(kind, w.now);
  qp.comp.rtt_sent_at = 0;  // what is timed will be sent again: no sample from it
  requester_rewind(qp, psn, reask);
  w.recharge_peer(qp);
  w.schedule(qp);
}

// The shortest selective-repeat round: a round trip between two vrnicd on one host is tens of
// microseconds, and one not measured yet (no peer window: a loop-port pair) is taken as this.
constexpr uint64_t kMinSackRoundNs = 20'000;

// A run of this many requests missing in a Sack is taken for overload (the windows shrink).
constexpr uint32_t kOverloadRun = 4;

// How long a selective-repeat round lasts: two round trips, at least kMinSackRoundNs.
uint64_t sack_round_ns(const QueuePair &qp) {
  return std::max<uint64_t>(qp.req.peer ? 2 * qp.req.peer->srtt_ns() : 0, kMinSackRoundNs);
}

// Arms the repair timer (CompleterState::sack_deadline) while a responder that sends Sacks
// (or, with --selective-repeat, any: every peer is a vrnic) has something outstanding, unless
// armed.
void arm_repair_timer(TransportHost &w, QueuePair &qp) {
  if (!qp.reliable() || qp.comp.sack_deadline ||
      !(qp.comp.peer_sacks || uses_selective_repeat(w.dev, qp)) || !outstanding(qp))
    return;
  qp.comp.sack_deadline = w.now + (sack_round_ns(qp) << qp.comp.sack_probes);
  w.watch_timers(qp);
}

// The ACK acknowledges every PSN up to and including psn.
void acknowledge(TransportHost &w, QueuePair &qp, uint32_t psn) {
  if (int32_t acked = psn_diff(psn, qp.comp.acked_psn); acked > 0) {
    qp.req.window.on_progress(uint32_t(acked));
    qp.comp.acked_psn = psn;
    if (PeerWindow *peer = qp.req.peer) {
      peer->on_progress(uint32_t(acked));
      if (qp.comp.rtt_sent_at && psn_diff(psn, qp.comp.rtt_psn) >= 0) {
        peer->rtt_sample(w.now - qp.comp.rtt_sent_at);
        qp.comp.rtt_sent_at = 0;
      }
      w.recharge_peer(qp);
      qp.comp.probes = 0;
      qp.comp.probe_deadline = 0;
      if (outstanding(qp)) completer_arm_probe(w, qp);
    }
    w.schedule(qp);  // the window may have held the requester back
    qp.comp.sack_deadline = 0;  // progress: the repair timer counts from now
    qp.comp.sack_probes = 0;
    arm_repair_timer(w, qp);
    qp.comp.retry_left = qp.attr.retry_cnt;
    qp.comp.nak_rewound_valid = false;
  }
  completer_retire(w, qp);
  restart_ack_timer(w, qp);
}

// The oldest WQE, a read or atomic, lacks answers from `resp_psn` on: ask again at once rather
// than wait for the timer, once per gap (every later packet in flight would show the gap).
void reask(TransportHost &w, QueuePair &qp, uint32_t resp_psn) {
  if (qp.comp.rerequested_psn_valid && qp.comp.rerequested_psn == resp_psn) return;
  qp.comp.rerequested_psn = resp_psn;
  qp.comp.rerequested_psn_valid = true;
  w.count(qp, kRetransmits);
  lost(w, qp, PeerWindow::Loss::kNak, resp_psn, Reask::kYes);
}

// The read or atomic, outstanding and not yet answered, whose request had `psn` among its
// PSNs; the end index when there is none. The oldest is checked first: answers come in order
// unless the path reorders them.
uint32_t unanswered_wqe_at(const QueuePair &qp, uint32_t psn) {
  for (uint32_t i = qp.comp.wqe; i != qp.req.started; i++) {
    const WqeMeta &m = const_cast<QueuePair &>(qp).wqe_meta(i);
    if (psn_diff(psn, m.first_psn) < 0) break;
    if (psn_diff(psn, m.last_psn) > 0) continue;
    if (wr::is_read_or_atomic(m.opcode) && !m.resp_done && !m.status) return i;
    break;
  }
  return qp.req.started;
}

// The QP's table of missing read answers, taken from the host's pool at the first gap;
// nullptr when the pool has none left.
ReadHoles *holes_for(TransportHost &w, QueuePair &qp) {
  if (!qp.comp.holes) qp.comp.holes = w.read_holes.take();
  return qp.comp.holes;
}

// Asks again for the lowest hole of the read at `index`, unless the answer to a request for
// one of its holes is still awaited: one at a time per read, in PSN order (read_holes.h),
// which rxe needs. Where every peer is a vrnic (--selective-repeat), whose responder answers
// repeats in PSN order among what it has queued, every hole not asked for yet at once.
void ask_next_hole(TransportHost &w, QueuePair &qp, uint32_t index) {
  ReadHoles *holes = qp.comp.holes;
  if (holes && uses_selective_repeat(w.dev, qp)) {
    while (ReadHoles::Hole *h = holes->unasked(index)) {
      w.count(qp, kRetransmits);
      if (!(h->asked = requester_reask_read(w, qp, index, h->psn, h->packets))) return;
    }
    return;
  }
  if (!holes || holes->asking(index)) return;
  ReadHoles::Hole *h = holes->lowest(index);
  if (!h) return;
  w.count(qp, kRetransmits);
  h->asked = requester_reask_read(w, qp, index, h->psn, h->packets);
}

// The answers to the read at `index` from its frontier to its end are missing: a hole, asked
// for. False when there is no room to note it.
bool missing_tail(TransportHost &w, QueuePair &qp, uint32_t index) {
  WqeMeta &m = qp.wqe_meta(index);
  ReadHoles *holes = holes_for(w, qp);
  if (!holes || holes->full()) return false;
  holes->add(index, m.resp_psn, uint32_t(psn_diff(m.last_psn, m.resp_psn)) + 1, false);
  m.resp_psn = psn_add(m.last_psn, 1);
  ask_next_hole(w, qp, index);
  return true;
}

// The responder answers requests in PSN order (rxe answers a request asked again after those
// it had queued, vrnic's responder in its PSN order among them), so an answer to a later
// request -- or an ACK of PSNs past an unfinished read or atomic -- while that one still
// lacks answers it was sent means they went missing: lost, or overtaken on the way. The spec's
// implied NAK: without it the requester waited for the ack timer (17 ms and more, with the
// window halved). A read's missing tail is asked for on its own; a missing atomic answer, or
// a tail with no room to note it, takes the requester back to the oldest such WQE. The packet
// shows that the responder has answered everything before `answered_before`: an answer's own
// PSN, or one past an ACK's.
void reask_missing_answers(TransportHost &w, QueuePair &qp, uint32_t answered_before) {
  for (uint32_t i = qp.comp.wqe; i != qp.req.started; i++) {
    WqeMeta &m = qp.wqe_meta(i);
    if (psn_diff(answered_before, m.last_psn) <= 0) return;  // its own answer, or older
    if (!wr::is_read_or_atomic(m.opcode) || m.resp_done || m.status) continue;
    if (psn_diff(qp.comp.acked_psn, m.last_psn) < 0) return;
    if (m.opcode == IBV_WR_RDMA_READ) {
      if (psn_diff(m.resp_psn, m.last_psn) > 0) continue;  // its tail came; holes are asked
      if (missing_tail(w, qp, i)) continue;
    }
    if (i == qp.comp.wqe) reask(w, qp, m.resp_psn);
    return;
  }
}

// A read response for the read at `index` (the oldest, or a later one whose answer overtook
// an earlier one's), taken in any order: at its frontier, past it (a gap: the PSNs between
// become a hole, asked for at once), or into a hole. Duplicates are dropped.
void read_response(TransportHost &w, QueuePair &qp, const Packet &pkt) {
  uint32_t psn = pkt.bth().psn();
  acknowledge(w, qp, psn_add(psn, -1u));
  reask_missing_answers(w, qp, psn);
  uint32_t index = unanswered_wqe_at(qp, psn);
  if (index == qp.req.started) return;  // a duplicate, or for what has been answered
  shm::SendWqe &wqe = qp.wqe(index);
  WqeMeta &meta = qp.wqe_meta(index);
  if (meta.opcode == IBV_WR_ATOMIC_WRITE) {  // answered by one empty read response
    if (psn != meta.first_psn || pkt.payload_len) return;
    answered(qp, index);
    acknowledge(w, qp, psn);
    w.schedule(qp);
    return;
  }
  if (meta.opcode != IBV_WR_RDMA_READ) return;
  uint32_t offset = uint32_t(psn_diff(psn, meta.first_psn)) * qp.mtu;
  uint32_t expect = psn == meta.last_psn ? meta.length - offset : qp.mtu;
  if (offset > meta.length || pkt.payload_len != expect) return;  // malformed: drop
  int32_t ahead = psn_diff(psn, meta.resp_psn);
  ReadHoles *holes = qp.comp.holes;
  if (ahead < 0 && (!holes || !holes->can_fill(index, psn))) return;  // a duplicate
  if (ahead > 0) {
    holes = holes_for(w, qp);
    if (!holes || holes->full()) {  // no room to note the gap: go back to it
      if (index == qp.comp.wqe) reask(w, qp, meta.resp_psn);
      return;
    }
  }
  SgeList list = send_sge_list(wqe, qp.pd);
  SgeCursor cur = sge_seek(list, offset);
  if (int st = sge_scatter(w.dev, list, cur, pkt.payload, pkt.payload_len)) {
    meta.status = uint8_t(st);
    completer_retire(w, qp);
    return;
  }
  qp.comp.retry_left = qp.attr.retry_cnt;
  if (ahead > 0) {
    w.count(qp, kReadGaps);
    holes->add(index, meta.resp_psn, uint32_t(ahead), false);
    meta.resp_psn = psn_add(psn, 1);
    ask_next_hole(w, qp, index);
  } else if (ahead == 0) {
    meta.resp_psn = psn_add(psn, 1);
  } else if (holes->fill(index, psn)) {
    ask_next_hole(w, qp, index);
  }
  if (psn_diff(meta.resp_psn, meta.last_psn) > 0 && !(holes && holes->any(index))) {
    if (holes && holes->empty()) w.release_read_holes(qp, false);
    answered(qp, index);
    acknowledge(w, qp, meta.last_psn);  // the whole read, up to its last PSN
    w.schedule(qp);
    return;
  }
  restart_ack_timer(w, qp);
}

void atomic_ack(TransportHost &w, QueuePair &qp, const Packet &pkt) {
  uint32_t psn = pkt.bth().psn();
  acknowledge(w, qp, psn_add(psn, -1u));
  reask_missing_answers(w, qp, psn);
  uint32_t index = unanswered_wqe_at(qp, psn);
  if (index == qp.req.started) return;
  shm::SendWqe &wqe = qp.wqe(index);
  WqeMeta &meta = qp.wqe_meta(index);
  if (wr::rule(meta.opcode).kind != wr::Kind::kAtomic || psn != meta.first_psn) return;
  uint8_t orig[8];
  uint64_t value = pkt.ext<AtomicAckEth>(pkt.info().atomic_ack_off).orig();
  std::memcpy(orig, &value, 8);  // host order into the application's buffer, as NICs do
  SgeList list{wqe.sge, 1, qp.pd};
  SgeCursor cur;
  if (int st = sge_scatter(w.dev, list, cur, orig, 8)) {
    meta.status = uint8_t(st);
    completer_retire(w, qp);
    return;
  }
  answered(qp, index);
  acknowledge(w, qp, psn);
  w.schedule(qp);
}

// The repair timer expired: a round with no progress. What the responder waits for -- a resend
// lost again, a packet whose NAK was lost, the last packets sent (no later one shows their
// loss) -- goes again: the oldest unacknowledged request alone (the responder's NAK once it
// has it names any other gap), and the next NAK starts a new round. Cheap where the
// go-back-N probe (completer_arm_probe) is not: one packet, and the windows stay.
void repair_timeout(TransportHost &w, QueuePair &qp) {
  CompleterState &c = qp.comp;
  uint32_t psn = psn_add(c.acked_psn, 1), index;
  if (!outstanding(qp) || c.rnr_deadline || psn_diff(psn, qp.req.psn_end) >= 0) return;
  const WqeMeta &oldest = qp.wqe_meta(c.wqe);
  if (oldest.opcode == IBV_WR_RDMA_READ && !oldest.resp_done && !oldest.status &&
      int32_t(qp.req.wqe - c.wqe) > 0 && psn_diff(oldest.resp_psn, oldest.first_psn) > 0) {
    // A read partly answered: what it still lacks is asked for again (its holes, its tail).
    if (c.holes && c.holes->any(c.wqe)) {
      c.holes->unask(c.wqe);
      ask_next_hole(w, qp, c.wqe);
    } else if (psn_diff(oldest.resp_psn, oldest.last_psn) <= 0) {
      missing_tail(w, qp, c.wqe);
    }
  } else if (requester_request_at(qp, psn, &index) == ResendAt::kRequest &&
             requester_resend(w, qp, index, psn)) {
    w.count(qp, kSelectiveResends);
  }
  c.sack_round_end = w.now;
  c.sack_probes = uint8_t(std::min(c.sack_probes + 1, 6));
  arm_repair_timer(w, qp);
}

// The Sack a sequence NAK carries, if it carries one (only a vrnic responder that agreed
// selective repeat sends it).
const Sack *sack_of(const Packet *pkt) {
  if (!pkt || pkt->payload_len != Sack::kSize) return nullptr;
  const Sack *sack = reinterpret_cast<const Sack *>(pkt->payload);
  return sack->valid() ? sack : nullptr;
}

// A selective NAK: the responder lacks `psn` and holds the PSNs after it that the Sack says,
// up to the last it names; what it lacks among them is sent again, a packet each, except what
// was sent again in this round already (its copy is on the way). A round lasts two round
// trips; a NAK after that finds what is still missing lost again. Random loss keeps the
// windows (nothing says the path is overloaded: at 10% loss, four in a row are missing once in
// 10,000); a run of kOverloadRun requests missing, as an overflowing buffer drops them, shrinks
// them as a go-back-N NAK does. No retry is used up: the
// responder is there and answering. What is missing may be a SEND's or WRITE's packet or a
// read's or atomic's request (sent again whole: the responder has executed neither). False,
// with nothing sent, when a missing PSN is none of the requester's: then it goes back N.
bool selective_resend(TransportHost &w, QueuePair &qp, uint32_t psn, const Sack &sack) {
  CompleterState &c = qp.comp;
  const uint32_t span = sack.span();
  if (psn_diff(psn_add(psn, span), qp.req.psn_end) >= 0) return false;
  // The longest run of missing requests: random loss leaves short ones, a buffer that
  // overflowed long ones.
  uint32_t run = 0, longest = 0, index;
  for (uint32_t i = 0; i <= span; i++) {
    if (i && sack.held(i - 1)) {
      run = 0;
      continue;
    }
    ResendAt at = requester_request_at(qp, psn_add(psn, i), &index);
    if (at == ResendAt::kNone) return false;
    if (at == ResendAt::kRequest) longest = std::max(longest, ++run);
  }
  c.peer_sacks = true;
  uint64_t round = sack_round_ns(qp);
  if (w.now >= c.sack_round_end || psn_diff(c.sack_high, psn) < 0) {
    c.sack_round_end = w.now + round;
    c.sack_high = psn_add(psn, -1u);
  }
  // What was lost a second time (Sack::lost_below) goes once more at once, before the rest.
  for (uint32_t i = 0; i < sack.lost_below() && psn_diff(psn_add(psn, i), c.sack_high) <= 0; i++) {
    uint32_t p = psn_add(psn, i);
    if ((i && sack.held(i - 1)) || requester_request_at(qp, p, &index) != ResendAt::kRequest)
      continue;
    if (!requester_resend(w, qp, index, p)) break;
    w.count(qp, kSelectiveResends);
  }
  for (uint32_t i = 0; i <= span; i++) {
    uint32_t p = psn_add(psn, i);
    if ((i && sack.held(i - 1)) || psn_diff(p, c.sack_high) <= 0) continue;
    ResendAt at = requester_request_at(qp, p, &index);
    if (at == ResendAt::kSkip) continue;
    if (at != ResendAt::kRequest || !requester_resend(w, qp, index, p)) break;
    w.count(qp, kSelectiveResends);
    c.sack_high = p;
  }
  c.rtt_sent_at = 0;  // the PSN timed waits for the repair: no sample from it
  arm_repair_timer(w, qp);
  if (longest >= kOverloadRun) {
    qp.req.window.on_loss();
    if (qp.req.peer) qp.req.peer->on_loss(PeerWindow::Loss::kNak, w.now);
  } else if (qp.req.peer) {
    qp.req.peer->on_random_loss(w.now);
  }
  completer_arm_probe(w, qp);
  return true;
}

void nak(TransportHost &w, QueuePair &qp, uint32_t psn, uint8_t syndrome, const Packet *pkt) {
  acknowledge(w, qp, psn_add(psn, -1u));
  if (!outstanding(qp)) return;
  w.count(qp, aeth_kind(syndrome) == kAethRnrNak ? kRnrNaksReceived : kNaksReceived);
  if (aeth_kind(syndrome) == kAethRnrNak) {
    if (qp.comp.rnr_left == 0) {
      fail_oldest(w, qp, IBV_WC_RNR_RETRY_EXC_ERR);
      return;
    }
    if (qp.attr.rnr_retry != 7) qp.comp.rnr_left--;
    requester_rewind(qp, psn, Reask::kNo);
    w.recharge_peer(qp);
    qp.comp.rnr_deadline = w.now + uint64_t(kRnrTimerUs[syndrome & 0x1f]) * 1000;
    qp.comp.ack_deadline = 0;
    w.watch_timers(qp);
    return;
  }
  switch (syndrome) {
    case kNakPsnSeqError:
      // Old news, as rxe's completer takes it (started_retry): a NAK for PSNs acknowledged
      // since, or at or before where the last NAK had us resend from with no progress since (a
      // copy of that NAK: duplicated or overtaken on the way). Acted on, each would resend the
      // whole window again and use up a retry: a duplicating path ran a QP out of retries.
      if (psn_diff(psn, qp.comp.acked_psn) <= 0 ||
          (qp.comp.nak_rewound_valid && psn_diff(psn, qp.comp.nak_rewound_psn) <= 0))
        return;
      if (const Sack *sack = sack_of(pkt); sack && selective_resend(w, qp, psn, *sack)) return;
      if (qp.comp.retry_left == 0) {
        fail_oldest(w, qp, IBV_WC_RETRY_EXC_ERR);
        return;
      }
      qp.comp.retry_left--;
      w.count(qp, kRetransmits);
      lost(w, qp, PeerWindow::Loss::kNak, psn, Reask::kNo);
      qp.comp.nak_rewound_psn = psn;
      qp.comp.nak_rewound_valid = true;
      return;
    case kNakRemoteAccess:
      fail_oldest(w, qp, IBV_WC_REM_ACCESS_ERR);
      return;
    case kNakRemoteOperational:
      fail_oldest(w, qp, IBV_WC_REM_OP_ERR);
      return;
    default:
      fail_oldest(w, qp, IBV_WC_REM_INV_REQ_ERR);
      return;
  }
}

}  // namespace

uint32_t read_lowest_missing(QueuePair &qp, uint32_t index) {
  const WqeMeta &m = qp.wqe_meta(index);
  const ReadHoles::Hole *h = qp.comp.holes ? qp.comp.holes->lowest(index) : nullptr;
  return h && psn_diff(h->psn, m.resp_psn) < 0 ? h->psn : m.resp_psn;
}

ReadAsk completer_read_resend(TransportHost &w, QueuePair &qp, uint32_t index) {
  WqeMeta &m = qp.wqe_meta(index);
  // The timer or a NAK sent the requester back: whatever was asked for is presumed lost.
  if (qp.comp.holes) qp.comp.holes->unask(index);
  ReadHoles *holes = holes_for(w, qp);
  bool tail = psn_diff(m.resp_psn, m.last_psn) <= 0;
  if (holes && tail && !holes->full()) {
    // The tail as a hole: answers still on their way from earlier requests fill it, and
    // open no gap of their own to ask for again.
    holes->add(index, m.resp_psn, uint32_t(psn_diff(m.last_psn, m.resp_psn)) + 1, false);
    m.resp_psn = psn_add(m.last_psn, 1);
    tail = false;
  }
  ReadHoles::Hole *h = holes && !tail ? holes->lowest(index) : nullptr;
  if (h) {
    h->asked = true;
    return {h->psn, h->packets};
  }
  // No table, or a full one with the tail still missing: go back to the first missing answer.
  uint32_t from = holes ? holes->collapse(index, m.resp_psn) : m.resp_psn;
  m.resp_psn = from;
  return {from, uint32_t(psn_diff(m.last_psn, from)) + 1};
}

void completer_retire(TransportHost &w, QueuePair &qp) {
  CompleterState &comp = qp.comp;
  bool retired = false;
  while (outstanding(qp)) {
    WqeMeta &meta = qp.wqe_meta(comp.wqe);
    if (meta.status == IBV_WC_SUCCESS) {
      bool done = !qp.reliable() ? comp.wqe != qp.req.wqe  // fully sent
                  : wr::is_read_or_atomic(meta.opcode)
                      ? meta.resp_done
                      : psn_diff(meta.last_psn, comp.acked_psn) <= 0;
      if (!done) break;
    }
    const shm::SendWqe &wqe = qp.wqe(comp.wqe);
    bool report =
        meta.status != IBV_WC_SUCCESS || (meta.flags & shm::kWqeSignaled) || qp.sq_sig_all;
    shm::Cqe cqe{};
    cqe.wr_id = wqe.wr_id;
    cqe.status = meta.status;
    cqe.opcode = wr::rule(meta.opcode).wc_opcode;
    cqe.byte_len = meta.length;
    cqe.qp_num = qp.qpn;
    // A read or atomic the requester has sent (it is not back before it) no longer counts.
    if (wr::is_read_or_atomic(meta.opcode) && meta.status == IBV_WC_SUCCESS &&
        int32_t(qp.req.wqe - comp.wqe) > 0 && qp.req.rd_atomic_outstanding)
      qp.req.rd_atomic_outstanding--;
    // Free the slot before the completion is visible: a program that sees the completion
    // may post into the slot at once.
    comp.wqe++;
    retired = true;
    qp.shared->sq.consumer.store(comp.wqe, std::memory_order_release);
    if (report && !qp.send_cq->push(cqe, false)) {
      qp_fatal(w, qp);
      return;
    }
    if (meta.status != IBV_WC_SUCCESS) {
      // An unreliable QP's send errors stop only its send queue (IB spec 10.3.1: SQE).
      if (qp.reliable()) {
        qp_enter_error(w, qp);
      } else {
        qp_enter_send_error(w, qp);
      }
      return;
    }
  }
  if (retired) {
    // Every completion of what retired is written: the provider may run the next WR itself.
    qp.shared->sq_retired.store(comp.wqe, std::memory_order_release);
    w.schedule(qp);
  }
  qp_check_drained(qp);
}

void completer_receive(TransportHost &w, QueuePair &qp, const Packet &pkt) {
  // An XRC target sends no requests, and so takes no responses.
  if (!qp.reliable() || qp.type == IBV_QPT_XRC_RECV || qp.state() == IBV_QPS_ERR) return;
  // Responses come from the connected peer only (as requests do, see the responder), in the
  // QP's own transport.
  if (op_transport(pkt.bth().opcode()) != qp.transport() || !from_connected_peer(qp, pkt)) {
    w.count(qp, kPacketsDropped);
    return;
  }
  uint32_t psn = pkt.bth().psn();
  const OpcodeInfo &info = pkt.info();
  // Only responses to PSNs we sent. Read responses may follow an ACK that covered their
  // PSNs (the ACK only acknowledges the request); anything else must be newer than acked.
  // Compared with the highest PSN ever sent, not req.psn: after a go-back-N rewind, ACKs for
  // packets sent before it are still good news.
  if (psn_diff(psn, qp.req.psn_end) >= 0) return;
  // Responses to reads and atomics may come after an ACK that covered their PSNs (a lost
  // response, asked for again): the ACK acknowledged the request, not the response.
  const uint8_t op = op_operation(pkt.bth().opcode());
  bool response = (info.flags & kOpReadResponse) || op == kAtomicAcknowledge;
  if (!response && psn_diff(psn, qp.comp.acked_psn) <= 0) return;
  if (info.flags & kOpReadResponse) {
    if (info.flags & kOpAeth) {
      uint8_t syndrome = pkt.ext<Aeth>(info.aeth_off).syndrome();
      if (aeth_kind(syndrome) != kAethAck) return nak(w, qp, psn, syndrome, nullptr);
    }
    return read_response(w, qp, pkt);
  }
  uint8_t syndrome = pkt.ext<Aeth>(info.aeth_off).syndrome();
  if (aeth_kind(syndrome) != kAethAck) return nak(w, qp, psn, syndrome, &pkt);
  if (op == kAtomicAcknowledge) return atomic_ack(w, qp, pkt);
  acknowledge(w, qp, psn);
  reask_missing_answers(w, qp, psn_add(psn, 1));
}

// A probe resends from the oldest unacknowledged PSN after a few round trips without progress,
// long before the IB timeout (attr.timeout: the give-up clock, which alone counts against
// retry_cnt), as a NIC's adaptive retransmission does; only while the path loses packets
// (peer_window.h). Each probe in a row doubles the wait; one that would come after half the IB
// timeout is not armed.
void completer_arm_probe(TransportHost &w, QueuePair &qp) {
  arm_repair_timer(w, qp);
  if (!qp.req.peer || !qp.attr.timeout || qp.comp.probe_deadline) return;
  if (!qp.req.peer->lossy(w.now)) return;
  uint64_t wait = qp.req.peer->probe_ns() << qp.comp.probes;
  if (wait >= (4096ull << qp.attr.timeout) / 2) return;
  qp.comp.probe_deadline = w.now + wait;
  w.watch_timers(qp);
}

void completer_check_timers(TransportHost &w, QueuePair &qp) {
  CompleterState &comp = qp.comp;
  if (qp.state() == IBV_QPS_ERR) {
    comp.ack_deadline = comp.rnr_deadline = comp.probe_deadline = comp.sack_deadline = 0;
    return;
  }
  if (comp.sack_deadline && w.now >= comp.sack_deadline) {
    comp.sack_deadline = 0;
    repair_timeout(w, qp);
  }
  if (comp.rnr_deadline && w.now >= comp.rnr_deadline) {
    comp.rnr_deadline = 0;
    w.count(qp, kRetransmits);
    w.schedule(qp);
  }
  if (comp.probe_deadline && w.now >= comp.probe_deadline) {
    comp.probe_deadline = 0;
    if (outstanding(qp) && !comp.rnr_deadline) {
      comp.probes = uint8_t(std::min(comp.probes + 1, 6));
      w.count(qp, kRetransmits);
      lost(w, qp, PeerWindow::Loss::kProbe, psn_add(comp.acked_psn, 1), Reask::kYes);
    }
  }
  if (comp.ack_deadline && w.now >= comp.ack_deadline) {
    comp.ack_deadline = 0;
    comp.probe_deadline = 0;
    if (!outstanding(qp)) return;
    if (w.delivery_pending(qp)) {  // not lost, only not yet taken: no retry, no resend
      restart_ack_timer(w, qp);
      return;
    }
    w.count(qp, kTimeouts);
    if (comp.retry_left == 0) {
      fail_oldest(w, qp, IBV_WC_RETRY_EXC_ERR);
      return;
    }
    comp.retry_left--;
    w.count(qp, kRetransmits);
    comp.timeout_resend = true;
    lost(w, qp, PeerWindow::Loss::kTimeout, psn_add(comp.acked_psn, 1), Reask::kYes);
    // The next retry's clock starts now, not when the peer window next lets the QP send: a
    // dead peer's QPs must each run out of retries in their own budget, not in turns.
    restart_ack_timer(w, qp);
  }
}

}  // namespace vrnic
