// One device's workers as a group: started with their wire ports, a new QP placed on the
// least loaded, a control-plane change run where it may touch any worker's state
// (execute_all), QPs moved between workers (vrnicctl move and the rebalancer), and what the
// ports say or are told (link, faults, a peer's link-layer address).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/device.h"
#include "dataplane/worker.h"
#include "server_config.h"

namespace vrnic {

class WorkerGroup {
 public:
  WorkerGroup(Device &dev, const ServerConfig &cfg) : dev_(dev), cfg_(cfg) {}
  ~WorkerGroup() { stop(); }
  WorkerGroup(const WorkerGroup &) = delete;
  WorkerGroup &operator=(const WorkerGroup &) = delete;

  // Creates the workers and their wire ports (GID 0 and the port MTU come from the port),
  // connects them and starts their threads.
  absl::Status start(shm::DaemonShared *daemon_shm);
  void stop();

  size_t size() const { return workers_.size(); }
  Worker &operator[](size_t i) { return *workers_[i]; }
  const std::vector<std::unique_ptr<Worker>> &all() { return workers_; }

  // The worker a new QP goes to (the one with the fewest QPs); qp_added/qp_removed keep count.
  Worker &for_new_qp();
  void qp_added(uint32_t worker) { qps_per_worker_[worker]++; }
  void qp_removed(uint32_t worker) { qps_per_worker_[worker]--; }

  // Runs fn where it may change any worker's state: on the worker (one), or with every
  // worker parked (several).
  void execute_all(const std::function<void()> &fn);
  // A grace period on every worker (Worker::ask_grace): once it returns, no worker holds
  // anything taken out of a device table before the call, and no packet built before it is
  // still in flight. What it costs the workers: nothing; the caller waits a turn of each.
  void synchronize();
  // Moves the QP to another worker; EINVAL for no such QP or worker.
  int move_qp(uint32_t qpn, uint32_t worker);
  // Several workers: every second, moves a QP from the busiest worker to the idlest when
  // their loads (packets in and out) are far apart.
  void rebalance();
  uint64_t moves() const { return moves_; }
  // How many times every worker was stopped for the control thread (execute_all): what issue
  // 29 takes away from the control path, one operation at a time. Grace periods and commands
  // run between a worker's bursts (Worker::run_between_bursts) stop none.
  uint64_t stops() const { return stops_; }
  uint64_t grace_periods() const { return grace_epoch_; }

  // Whether the wire port (if any) has its link up.
  bool link_up();
  // Every wire port injects these faults; ENODEV without a wire port.
  int set_faults(const FaultConfig &cfg);
  // The worker's port looks up the link-layer address of a peer GID (ARP/ND) ahead of use.
  void resolve_peer(uint32_t worker, const uint8_t gid[16]);

 private:
  absl::StatusOr<std::unique_ptr<Port>> open_wire_port(Worker &w);

  Device &dev_;
  const ServerConfig &cfg_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<uint32_t> qps_per_worker_;
  uint64_t moves_ = 0;
  uint64_t stops_ = 0;
  uint64_t grace_epoch_ = 0;
  uint64_t next_rebalance_ns_ = 0;
  std::vector<uint64_t> last_qp_packets_;  // by QP handle, at the last rebalance
};

}  // namespace vrnic
