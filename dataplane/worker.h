// A worker: one thread running the NIC's packet pipeline to completion, DPDK style:
// doorbells -> send work (bounded per QP) -> port receive -> timers -> idle policy.
// Every QP belongs to one worker and is touched only on its thread, so the fast path takes
// no locks. With several workers each has its own ports; a packet received by one for a QP
// of another crosses over an SPSC ring (and goes back to its pool the same way). Control
// operations reach the workers' state through execute() (one worker) or with every worker
// parked (park()/unpark(), several).
// The transport itself (run queue, ACK and timer lists, peer windows, the engines' turns) is
// the TransportHost this class is (transport_host.h); a worker adds the thread, ports,
// doorbells and hand-over around it.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "device.h"
#include "doorbell_budget.h"
#include "packet.h"
#include "port.h"
#include "spsc_ring.h"
#include "transport_host.h"
#include "vrnic/shm_layout.h"
#include "vrnic/wire.h"

namespace vrnic {

struct SessionRings {
  uint32_t id;
  uint32_t user;                    // its user's slot in the worker's DoorbellBudget
  shm::DoorbellConsumer doorbells;  // this worker's ring in the session's shared memory
};

class Worker final : public TransportHost {
 public:
  static constexpr uint16_t kBurst = 32;
  static constexpr uint32_t kPoolPackets = 4096;
  // Packets new sends may not take: what arrives meanwhile (and the ACKs and read responses it
  // calls for) needs packets too, or it is dropped (rx_no_buffer) and sent again.
  static constexpr uint32_t kRxReserve = kPoolPackets / 4;

  Worker(Device &dev, uint32_t index, shm::DaemonShared *daemon_shm);
  ~Worker();
  Worker(const Worker &) = delete;
  Worker &operator=(const Worker &) = delete;

  // Starts the worker's thread, pinned to `cpu` unless it is -1; 0 or the errno of pinning
  // (the thread then runs unpinned).
  int start(int cpu = -1);
  void stop();
  // Several workers: each gets the others, for handing packets over. Before start() only.
  void connect(const std::vector<Worker *> &all);
  // Parking, for control operations with several workers: request_park() stops the worker's
  // send work and has it drain its ports and inbox; wait_parked() returns once it has and
  // waits. Another worker may still hand it packets while draining itself: the caller checks
  // inbox_empty() on every parked worker and, if one is not, has them all drain again
  // (redrain(), wait_parked()). Then nothing in flight references client memory and the
  // workers' state may be changed from another thread, until unpark().
  void request_park();
  void wait_parked();
  void redrain();
  bool inbox_empty() const;
  void unpark();
  // Runs fn on the worker thread between bursts, with no packet in flight, and waits.
  void execute(const std::function<void()> &fn);
  // Runs fn on the worker thread between bursts and waits; packets in flight stay in flight
  // (what fn changes is the worker's own state: its QPs' transport, its lists).
  void run_between_bursts(const std::function<void()> &fn);

  // A grace period (issue 29): once wait_grace(epoch) returns after ask_grace(epoch), this
  // worker holds nothing it found in a device table before ask_grace -- it has passed a
  // point between bursts since -- and every packet it built before then is back in its pool
  // (sent, delivered, or dropped). So what was taken out of a table before ask_grace may be
  // freed and unmapped, and the worker never stopped. One grace period at a time, asked by
  // one thread (the control thread).
  void ask_grace(uint64_t epoch);
  void wait_grace(uint64_t epoch) const;
  // The worker's own eventfd: vrnicd's threads and its port wake it there, and only it reads
  // it. Never handed to a client (issue 52, row 4: a client that shared it could clear its
  // O_NONBLOCK and block the worker's read, or drain the wakes meant for others).
  int wake_fd() const { return wake_fd_; }
  // A session's wake eventfd, which its clients write when this worker sleeps: watched
  // edge-triggered, so that every write wakes the worker and the worker never reads it (what
  // a client does to it -- flags, reads, a full counter -- is felt by that session alone).
  // Any thread; unwatch before the session's fd is closed.
  void watch_session_wake(int fd);
  void unwatch_session_wake(int fd);
  uint32_t index() const { return index_; }

  // The port to the wire (udp, later dpdk); packets for local GIDs still take the loop port.
  // Before start() only.
  void attach_wire_port(std::unique_ptr<Port> port) { wire_ = std::move(port); }
  Port *wire_port() const { return wire_.get(); }
  // The most doorbell cells one user took in one of this worker's looks (DoorbellBudget).
  uint32_t doorbell_user_look_max() const { return doorbell_budget_.most_taken(); }

  void add_session(uint32_t id, uid_t uid, shm::DoorbellRing *ring);  // worker thread only
  void remove_session(uint32_t id);                        // worker thread only
  // Schedules the QPs whose doorbells other workers passed on to this one (worker thread
  // only): before a QP is forgotten and freed, so that no ring still points at it.
  void take_forwarded_doorbells();
  // Moves a QP to worker `to` with every worker parked: its place in run queue, ACK and timer
  // lists goes with it, and `to` looks at its send queue at once.
  void move_qp(QueuePair &qp, Worker &to);

  // The transport host's hooks (worker thread only): packets for this device's own GIDs take
  // the loop port, the rest the wire (if any), in bursts.
  void transmit(QueuePair &qp, Packet *pkt) override;
  // A packet this worker is done with goes back to its pool (another worker's, perhaps).
  void recycle(Packet *pkt);

 private:
  void run();
  bool poll_doorbells();
  bool receive();
  // A received packet to the QP it names: delivered here, or handed to the worker that owns
  // the QP; taken either way.
  void route(Packet *pkt);
  // A multicast datagram: a copy to each attached QP (multicast.h); the original is left.
  void fan_out(const Packet &pkt);
  // A packet with the same headers and a copy of the payload in its own buffer (nullptr:
  // none free, counted as a drop).
  Packet *bounce_copy(const Packet &pkt);
  void check_timers_due();
  bool tx_blocked() const override { return wire_ && wire_->tx_full(); }
  bool delivery_pending(const QueuePair &qp) const override;
  void flush_tx();
  void drain();
  bool run_commands();
  void idle_wait(uint64_t idle_ns);
  bool poll_peers();
  bool take_doorbells_from(size_t peer);
  void take_doorbell(QueuePair &qp);
  void wake();
  void park_here();
  void pass_quiescent_point();

  uint32_t index_;
  shm::DaemonShared *daemon_shm_;
  int wake_fd_ = -1;
  int session_wakes_ = -1;  // epoll: the sessions' wake eventfds, edge-triggered
  std::unique_ptr<Port> loop_;
  std::unique_ptr<Port> wire_;
  std::thread thread_;
  std::atomic<bool> running_{false};

  std::vector<SessionRings> sessions_;
  DoorbellBudget doorbell_budget_;
  uint64_t next_timer_check_ = 0;
  uint64_t contended_until_ = 0;  // nap rather than yield when idle until then
  struct TxBatch {
    Packet *pkts[kBurst];
    uint16_t n = 0;
  };
  TxBatch loop_tx_, wire_tx_;
  void flush(Port &port, TxBatch &batch);
  bool quiescent() const;

  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  struct Command {
    std::function<void()> fn;
    bool drain;  // run with no packet in flight
  };
  std::vector<Command> commands_;
  void queue_command(const std::function<void()> &fn, bool drain);
  std::atomic<bool> commands_pending_{false};
  uint64_t commands_done_ = 0, commands_queued_ = 0;

  // Several workers: peers_[i] is worker i; inbox_[i] brings packets from worker i for our
  // QPs, returns_[i] brings back our packets worker i is done with.
  std::vector<Worker *> peers_;
  std::vector<std::unique_ptr<SpscRing<Packet>>> inbox_, returns_;
  // Doorbells that reached worker i for a QP of ours (it was moved to us).
  std::vector<std::unique_ptr<SpscRing<QueuePair>>> doorbells_in_;
  std::atomic<bool> park_requested_{false};
  // Grace periods: the epoch asked for (control thread), the one this worker has seen (its
  // own), and the last one it has finished (read by the control thread).
  std::atomic<uint64_t> grace_asked_{0};
  uint64_t grace_seen_ = 0;
  bool grace_waiting_ = false;  // seen, but packets of the epoch before are still out
  std::atomic<uint64_t> grace_done_{0};
  uint64_t drain_round_ = 0;   // under cmd_mu_: asked for by the control thread ...
  uint64_t parked_round_ = 0;  // ... and done, parked after it
  std::condition_variable park_cv_;
};

}  // namespace vrnic
