// The transport's side of a host: its lists (run queue, ACKs, timers), the peer windows and
// the turns that drive the three engines. See transport_host.h.
#include "transport_host.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

#include "transport.h"

namespace vrnic {

TransportHost::TransportHost(Device &d, uint32_t pool_packets, uint32_t rx_reserve,
                             uint8_t pool_home)
    : dev(d), pool(pool_packets, pool_home), rx_reserve_(rx_reserve), held_cap_(pool_packets / 4) {}

void TransportHost::schedule(QueuePair &qp) {
  if (qp.in_run_queue) return;
  qp.in_run_queue = true;
  run_next_.push_back(&qp);
}

void TransportHost::watch_timers(QueuePair &qp) {
  if (qp.in_timer_list) return;
  qp.in_timer_list = true;
  timer_list_.push_back(&qp);
}

void TransportHost::ack_later(QueuePair &qp) {
  if (qp.in_ack_list) return;
  qp.in_ack_list = true;
  ack_list_.push_back(&qp);
}

// What the provider counted in a QP's shared page stays in the device's totals when it goes.
void TransportHost::keep_direct_counts(const QueuePair &qp) {
  counters[kDirectOps] += qp.shared->direct_ops.load(std::memory_order_relaxed);
  counters[kDirectBytes] += qp.shared->direct_bytes.load(std::memory_order_relaxed);
}

void TransportHost::release_read_holes(QueuePair &qp, bool keep_frontiers) {
  ReadHoles *holes = qp.comp.holes;
  if (!holes) return;
  if (keep_frontiers) {
    for (uint32_t i = 0; i < holes->size(); i++) {
      const ReadHoles::Hole &h = (*holes)[i];
      WqeMeta &m = qp.wqe_meta(h.wqe);
      if (wire::psn_diff(h.psn, m.resp_psn) < 0) m.resp_psn = h.psn;
    }
  }
  read_holes.give(holes);
  qp.comp.holes = nullptr;
}

bool TransportHost::hold_packet(QueuePair &qp, const Packet &pkt) {
  if (held_count_ >= held_cap_ || pkt.payload_len > kMaxPayload ||
      pool.available() < rx_reserve_ + 2 * kQpBudget)
    return false;
  if (!qp.resp.held && !(qp.resp.held = held_tables_.take())) return false;
  Packet *copy = pool.alloc();
  std::memcpy(copy->src_gid, pkt.src_gid, sizeof(pkt.src_gid));
  std::memcpy(copy->dst_gid, pkt.dst_gid, sizeof(pkt.dst_gid));
  copy->udp_sport = pkt.udp_sport;
  copy->header_len = pkt.header_len;
  std::memcpy(copy->header, pkt.header, sizeof(pkt.header));
  std::memcpy(copy->bounce, pkt.payload, pkt.payload_len);
  copy->payload = copy->bounce;
  copy->payload_len = pkt.payload_len;
  copy->src_qpn = pkt.src_qpn;
  if (Packet *stale = qp.resp.held->put(copy)) {
    pool.free(stale);
  } else {
    held_count_++;
  }
  return true;
}

Packet *TransportHost::take_held(QueuePair &qp, uint32_t psn) {
  Packet *p = qp.resp.held ? qp.resp.held->take(psn) : nullptr;
  if (p) held_count_--;
  return p;
}

void TransportHost::release_held(QueuePair &qp) {
  HeldPackets *held = qp.resp.held;
  if (!held) return;
  held_count_ -= held->size();
  held->free_all([this](Packet *p) { pool.free(p); });
  held_tables_.give(held);
  qp.resp.held = nullptr;
}

void TransportHost::forget_qp(QueuePair &qp) {
  release_read_holes(qp, true);
  release_held(qp);
  detach_peer(qp);
  std::erase(run_queue_, &qp);
  std::erase(run_next_, &qp);
  std::erase(ack_list_, &qp);
  std::erase(timer_list_, &qp);
}

void TransportHost::forget_qps(std::span<QueuePair *const> qps) {
  if (qps.empty()) return;
  absl::flat_hash_set<const QueuePair *> gone(qps.begin(), qps.end());
  for (QueuePair *qp : qps) {
    release_read_holes(*qp, false);
    release_held(*qp);
    keep_direct_counts(*qp);
    detach_peer(*qp);
  }
  auto is_gone = [&](const QueuePair *qp) { return gone.contains(qp); };
  std::erase_if(run_queue_, is_gone);
  std::erase_if(run_next_, is_gone);
  std::erase_if(ack_list_, is_gone);
  std::erase_if(timer_list_, is_gone);
}

void TransportHost::attach_peer(QueuePair &qp) {
  // The loop port loses nothing: a peer on this device needs no window.
  if (qp.req.peer || dev.is_local_gid(qp.attr.ah.dgid)) return;
  std::array<uint8_t, 16> gid;
  std::copy(std::begin(qp.attr.ah.dgid), std::end(qp.attr.ah.dgid), gid.begin());
  std::unique_ptr<PeerWindow> &p = peer_windows_[gid];
  if (!p) {
    p = std::make_unique<PeerWindow>();
    p->gid = gid;
  }
  p->refs++;
  qp.req.peer = p.get();
  qp.req.peer_charged = 0;
  recharge_peer(qp);
}

void TransportHost::detach_peer(QueuePair &qp) {
  PeerWindow *p = qp.req.peer;
  if (!p) return;
  p->charge(qp.req.peer_charged, 0);
  if (qp.req.peer_waiting) std::erase(p->waiting, &qp);
  qp.req.peer = nullptr;
  qp.req.peer_charged = 0;
  qp.req.peer_waiting = false;
  if (--p->refs == 0) {
    peer_windows_.erase(p->gid);
    return;
  }
  wake_peer_waiters(*p);
}

void TransportHost::wake_peer_waiters(PeerWindow &p) {
  if (!p.allows()) return;
  for (QueuePair *waiter : p.waiting) {
    waiter->req.peer_waiting = false;
    schedule(*waiter);
  }
  p.waiting.clear();
}

void TransportHost::wait_for_peer(QueuePair &qp) {
  if (qp.req.peer_waiting || !qp.req.peer) return;
  qp.req.peer_waiting = true;
  qp.req.peer->waiting.push_back(&qp);
}

// QPs held back (no packets, or a port that cannot take more) are not work: a worker that
// only waits for its port to drain must count as idle and give its CPU up in time, or a peer
// sharing that CPU (the other end of a memif) never empties the queue it waits for.
bool TransportHost::serve_run_queue() {
  if (run_next_.empty()) return false;
  run_queue_.swap(run_next_);
  bool progress = false;
  for (QueuePair *qp : run_queue_) {
    qp->in_run_queue = false;
    // Out of packets, or the port cannot take more for now: try again next turn.
    if (pool.available() < rx_reserve_ + kQpBudget || tx_blocked()) {
      schedule(*qp);
      continue;
    }
    progress = true;
    if (qp->state() == IBV_QPS_ERR) {
      qp_flush(*this, *qp);
      continue;
    }
    if (qp->state() == IBV_QPS_SQE) {  // new sends complete in error; receives go on
      qp_flush_send_queue(*qp);
      continue;
    }
    uint32_t sent = responder_send_reads(*this, *qp, kQpBudget);
    if (sent < kQpBudget) sent += requester_run(*this, *qp, kQpBudget - sent);
    if (requester_has_work(*qp) || responder_has_work(*qp)) {
      if (sent) schedule(*qp);  // more to do; blocked QPs wait for an ACK or timer instead
    }
  }
  run_queue_.clear();
  return progress;
}

void TransportHost::deliver(Packet *pkt) {
  counters[kPacketsReceived]++;
  counters[kBytesReceived] += pkt->header_len + pkt->payload_len;
  const OpcodeInfo &info = pkt->info();
  QueuePair *qp = dev.qp_by_qpn(pkt->bth().dest_qp());
  if (qp) {
    qp->counters[kPacketsReceived]++;
    qp->counters[kBytesReceived] += pkt->header_len + pkt->payload_len;
  }
  if (!(info.flags & kOpValid) || !qp || qp->state() < IBV_QPS_RTR) {
    counters[kPacketsDropped]++;
  } else if (info.flags & kOpRequest) {
    responder_receive(*this, *qp, *pkt);
  } else {
    completer_receive(*this, *qp, *pkt);
  }
}

void TransportHost::flush_acks() {
  for (QueuePair *qp : ack_list_) {
    qp->in_ack_list = false;
    responder_send_ack(*this, *qp);
  }
  ack_list_.clear();
}

void TransportHost::check_timers() {
  for (size_t i = 0; i < timer_list_.size();) {
    QueuePair *qp = timer_list_[i];
    completer_check_timers(*this, *qp);
    if (!qp->comp.next_deadline()) {
      qp->in_timer_list = false;
      timer_list_[i] = timer_list_.back();
      timer_list_.pop_back();
    } else {
      i++;
    }
  }
}

}  // namespace vrnic
