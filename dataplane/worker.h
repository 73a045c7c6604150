// A worker: one thread running the NIC's packet pipeline to completion, DPDK style:
// doorbells -> send work (bounded per QP) -> port receive -> timers -> idle policy.
// Every QP belongs to one worker and is touched only on its thread, so the fast path takes
// no locks. Control operations reach the worker's state through execute().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "device.h"
#include "packet.h"
#include "port.h"
#include "vrnic/shm_layout.h"

namespace vrnic {

struct SessionRings {
  uint32_t id;
  shm::DoorbellRing *doorbells;  // this worker's ring in the session's shared memory
};

class Worker {
 public:
  static constexpr uint16_t kBurst = 32;
  static constexpr uint32_t kPoolPackets = 4096;
  static constexpr uint32_t kQpBudget = 64;  // packets per QP per turn, for fairness

  Worker(Device &dev, uint32_t index, shm::DaemonShared *daemon_shm);
  ~Worker();
  Worker(const Worker &) = delete;
  Worker &operator=(const Worker &) = delete;

  void start();
  void stop();
  // Runs fn on the worker thread between bursts, with no packet in flight, and waits.
  void execute(const std::function<void()> &fn);
  int wake_fd() const { return wake_fd_; }
  uint32_t index() const { return index_; }

  // The port to the wire (udp, later dpdk); packets for local GIDs still take the loop port.
  // Before start() only.
  void attach_wire_port(std::unique_ptr<Port> port) { wire_ = std::move(port); }
  Port *wire_port() const { return wire_.get(); }

  void add_session(uint32_t id, shm::DoorbellRing *ring);  // worker thread only
  void remove_session(uint32_t id);                        // worker thread only
  void forget_qp(QueuePair &qp);                           // worker thread only

  // For the transport engines (worker thread only).
  Device &dev;
  PacketPool pool{kPoolPackets};
  uint64_t now = 0;  // ns, CLOCK_MONOTONIC, refreshed every loop turn
  Packet *alloc_packet() { return pool.alloc(); }
  void transmit(QueuePair &qp, Packet *pkt);
  // Counts an event for the device and for the QP it happened on.
  void count(QueuePair &qp, TransportCounter c, uint64_t n = 1) {
    dev.counters[c] += n;
    qp.counters[c] += n;
  }
  void schedule(QueuePair &qp);
  void watch_timers(QueuePair &qp);
  void ack_later(QueuePair &qp);

 private:
  void run();
  bool poll_doorbells();
  bool serve_run_queue();
  bool receive();
  void flush_acks();
  void check_timers();
  void flush_tx();
  void drain();
  bool run_commands();
  void idle_wait(uint64_t idle_ns);

  uint32_t index_;
  shm::DaemonShared *daemon_shm_;
  int wake_fd_ = -1;
  std::unique_ptr<Port> loop_;
  std::unique_ptr<Port> wire_;
  std::thread thread_;
  std::atomic<bool> running_{false};

  std::vector<SessionRings> sessions_;
  std::vector<QueuePair *> run_queue_, run_next_;
  std::vector<QueuePair *> ack_list_;
  std::vector<QueuePair *> timer_list_;
  uint64_t next_timer_check_ = 0;
  struct TxBatch {
    Packet *pkts[kBurst];
    uint16_t n = 0;
  };
  TxBatch loop_tx_, wire_tx_;
  void flush(Port &port, TxBatch &batch);
  bool quiescent() const;

  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  std::vector<std::function<void()>> commands_;
  std::atomic<bool> commands_pending_{false};
  uint64_t commands_done_ = 0, commands_queued_ = 0;
};

}  // namespace vrnic
