// What the transport engines (requester, completer, responder, the QP life cycle) need of
// whoever runs them, and nothing more: the device, packets, the clock, transmit, the run
// queue, the ACK and timer lists, counters and the peer windows. A worker (worker.h) is one
// host, with a thread, ports and doorbells around it; the unit tests' fake host
// (tests/unit/transport_harness.h) is another, with a virtual clock and a scripted wire. The
// transport's own turns (serve the run queue, deliver a packet, send coalesced ACKs, check
// timers) live here too, so both hosts run exactly the same transport.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "device.h"
#include "packet.h"
#include "peer_window.h"
#include "queue_pair.h"
#include "held_packets.h"
#include "read_holes.h"
#include "vrnic/counters.h"
#include "vrnic/wire.h"

namespace vrnic {

class TransportHost {
 public:
  static constexpr uint32_t kQpBudget = 64;  // packets per QP per turn, for fairness

  // `pool_packets` packets, of which `rx_reserve` new sends may not take: what arrives
  // meanwhile (and the ACKs and read responses it calls for) needs packets too, or it is
  // dropped and sent again.
  TransportHost(Device &dev, uint32_t pool_packets, uint32_t rx_reserve, uint8_t pool_home);
  virtual ~TransportHost() = default;
  TransportHost(const TransportHost &) = delete;
  TransportHost &operator=(const TransportHost &) = delete;

  Device &dev;
  PacketPool pool;
  // Tables of missing read answers for this host's QPs (read_holes.h): few QPs lose answers
  // to several large reads at once.
  static constexpr uint32_t kReadHoleTables = 64;
  ReadHolesPool read_holes{kReadHoleTables};
  // Tables of out-of-order requests held by this host's responders (held_packets.h).
  static constexpr uint32_t kHeldPacketTables = 64;
  TransportCounters counters;  // this host's share of the device's counters
  uint64_t now = 0;            // ns, CLOCK_MONOTONIC (a worker) or virtual (the tests)

  Packet *alloc_packet() { return pool.alloc_counted(); }
  // Takes a packet the engines built: the host sends it (or drops it, a loss the transport
  // recovers from) and frees it.
  virtual void transmit(QueuePair &qp, Packet *pkt) = 0;
  // Counts an event for the device and for the QP it happened on.
  void count(QueuePair &qp, TransportCounter c, uint64_t n = 1) {
    counters[c] += n;
    qp.counters[c] += n;
  }

  // The QP has work: served on the next turn.
  void schedule(QueuePair &qp);
  // The QP armed a timer (ACK, RNR, probe): looked at by check_timers() until none is armed.
  void watch_timers(QueuePair &qp);
  // The QP owes its peer an ACK: sent, coalesced, by flush_acks().
  void ack_later(QueuePair &qp);
  // Takes the QP off every list (reset, destroy, move); detaches its peer window first.
  void forget_qp(QueuePair &qp);
  // The same for many QPs at once (a closing session's, whose direct-path counts it keeps),
  // in one pass over each list.
  void forget_qps(std::span<QueuePair *const> qps);
  // Gives the QP's table of missing read answers back to the pool; with `keep_frontiers`,
  // each read it listed holes for first goes back to its lowest missing answer (what comes
  // above it is taken again as new).
  void release_read_holes(QueuePair &qp, bool keep_frontiers);
  // Keeps a copy of `pkt`, a request ahead of the QP's expected PSN (within
  // HeldPackets::kSlots of it, not held yet); false when there is no room: no table, the
  // host's share of its pool for held packets used up, or the pool itself running low.
  bool hold_packet(QueuePair &qp, const Packet &pkt);
  // Takes the held copy of `psn` out (nullptr if none); the caller frees it to the pool.
  Packet *take_held(QueuePair &qp, uint32_t psn);
  // Frees what the QP holds and gives its table back.
  void release_held(QueuePair &qp);
  // Adds what the provider counted in a destroyed QP's shared page (direct_ops, direct_bytes)
  // to this host's counters, so that the device's totals keep it.
  void keep_direct_counts(const QueuePair &qp);

  // The window an RC requester shares with this host's other QPs to the same peer
  // (peer_window.h): attached at RTS, detached on error, reset, destroy and move (both
  // idempotent). recharge_peer() brings the QP's share up to date after it sent, was
  // acknowledged or rewound, and schedules the QPs waiting once the window has room;
  // wait_for_peer() makes the QP one of them.
  void attach_peer(QueuePair &qp);
  void detach_peer(QueuePair &qp);
  void recharge_peer(QueuePair &qp) {
    PeerWindow *p = qp.req.peer;
    if (!p) return;
    int32_t out = wire::psn_diff(qp.req.psn, qp.comp.acked_psn) - 1;
    uint32_t charged = out > 0 ? uint32_t(out) : 0;
    p->charge(qp.req.peer_charged, charged);
    qp.req.peer_charged = charged;
    if (!p->waiting.empty()) wake_peer_waiters(*p);
  }
  void wait_for_peer(QueuePair &qp);

  // The transport's turns. serve_run_queue() runs send work (read responses first, then the
  // requester) for the QPs scheduled since the last turn; true when it got anything done.
  bool serve_run_queue();
  // A received packet for this host's QPs: to the responder or the completer (counted, and
  // dropped when no QP is ready for it). The caller frees it.
  void deliver(Packet *pkt);
  void flush_acks();
  void check_timers();
  // Packets of the QP's that are still inside this NIC, not yet taken by the peer QP's worker
  // (one vrnicd, another worker): its ACK timer then measures a stalled worker, not a loss.
  virtual bool delivery_pending(const QueuePair &) const { return false; }

 protected:
  // The port cannot take more for now: send work waits for the next turn.
  virtual bool tx_blocked() const { return false; }
  bool timers_armed() const { return !timer_list_.empty(); }
  bool work_scheduled() const { return !run_next_.empty(); }

 private:
  void wake_peer_waiters(PeerWindow &p);

  uint32_t rx_reserve_;
  HeldPacketsPool held_tables_{kHeldPacketTables};
  uint32_t held_count_ = 0;  // packets of the pool held, over all QPs
  uint32_t held_cap_;        // at most a quarter of the pool
  std::vector<QueuePair *> run_queue_, run_next_;
  std::vector<QueuePair *> ack_list_;
  std::vector<QueuePair *> timer_list_;
  absl::flat_hash_map<std::array<uint8_t, 16>, std::unique_ptr<PeerWindow>> peer_windows_;
};

}  // namespace vrnic
