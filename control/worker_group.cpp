// WorkerGroup (worker_group.h): one device's workers, started, used and moved as a group.
#include "worker_group.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "vrnic/clock.h"
#include "load_balance.h"

namespace vrnic {
namespace {

uint64_t qp_packets(const QueuePair &qp) {
  return __atomic_load_n(&qp.counters.value[kPacketsSent], __ATOMIC_RELAXED) +
         __atomic_load_n(&qp.counters.value[kPacketsReceived], __ATOMIC_RELAXED);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Port>> WorkerGroup::open_wire_port(Worker &w) {
  if (cfg_.dpdk) {
    DpdkPortConfig dpdk_cfg = cfg_.dpdk_port;
    dpdk_cfg.queue = uint16_t(w.index());
    dpdk_cfg.queues = uint16_t(cfg_.workers);
    return open_dpdk_port(dpdk_cfg, w.pool);
  }
  UdpPortConfig udp_cfg = cfg_.udp_port;
  udp_cfg.reuse_port = cfg_.workers > 1;
  absl::StatusOr<std::unique_ptr<UdpPort>> udp = UdpPort::open(udp_cfg, w.pool, w.wake_fd());
  if (!udp.ok()) return udp.status();
  return std::unique_ptr<Port>(std::move(*udp));
}

// With a wire port, GID 0 is the port's address.
absl::Status WorkerGroup::start(shm::DaemonShared *daemon_shm) {
  const uint32_t n = cfg_.workers;
  dev_.info.num_workers = n;
  for (uint32_t i = 0; i < n; i++) {
    auto w = std::make_unique<Worker>(dev_, i, daemon_shm);
    if (cfg_.udp || cfg_.dpdk) {
      absl::StatusOr<std::unique_ptr<Port>> port = open_wire_port(*w);
      if (!port.ok()) return port.status();
      // A udp port's address is on a kernel interface; a dpdk port's NIC is not the kernel's.
      const uint8_t *gid = (*port)->gid();
      dev_.set_gid(0, gid, dev_.info.gids[0].type, cfg_.udp ? kernel_interface_of(gid) : 0);
      // The port's MTU caps every path MTU (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5).
      dev_.info.port_active_mtu = uint32_t(std::countr_zero((*port)->mtu_bytes())) - 7;
      (*port)->set_faults(cfg_.faults);
      w->attach_wire_port(std::move(*port));
    }
    workers_.push_back(std::move(w));
  }
  if (!cfg_.udp && !cfg_.dpdk && cfg_.host_addresses) dev_.add_host_addresses();
  qps_per_worker_.assign(n, 0);
  if (n > 1) {
    std::vector<Worker *> all;
    for (auto &w : workers_) all.push_back(w.get());
    for (auto &w : workers_) w->connect(all);
  }
  for (uint32_t i = 0; i < n; i++) {
    const std::vector<int> &cpus = cfg_.worker_cpus;
    const int cpu = cpus.empty() ? -1 : cpus[i % cpus.size()];
    if (int err = workers_[i]->start(cpu))
      return absl::InternalError("pinning worker " + std::to_string(i) + " to CPU " +
                                 std::to_string(cpu) + ": " + std::strerror(err));
  }
  return absl::OkStatus();
}

void WorkerGroup::stop() {
  for (auto &w : workers_) w->stop();
  workers_.clear();
}

Worker &WorkerGroup::for_new_qp() {
  size_t best = 0;
  for (size_t i = 1; i < workers_.size(); i++)
    if (qps_per_worker_[i] < qps_per_worker_[best]) best = i;
  return *workers_[best];
}

void WorkerGroup::execute_all(const std::function<void()> &fn) {
  stops_++;
  if (workers_.size() == 1) {
    workers_[0]->execute(fn);
    return;
  }
  for (auto &w : workers_) w->request_park();
  for (auto &w : workers_) w->wait_parked();
  // A worker that drained later may have handed packets to one parked earlier: drain again
  // until every inbox is empty (a few rounds at most: draining starts no new sends).
  auto inboxes_empty = [&] {
    return std::all_of(workers_.begin(), workers_.end(), [](auto &w) { return w->inbox_empty(); });
  };
  while (!inboxes_empty()) {
    for (auto &w : workers_) w->redrain();
    for (auto &w : workers_) w->wait_parked();
  }
  fn();
  for (auto &w : workers_) w->unpark();
}

void WorkerGroup::synchronize() {
  const uint64_t epoch = ++grace_epoch_;
  for (auto &w : workers_) w->ask_grace(epoch);
  for (auto &w : workers_) w->wait_grace(epoch);
}

int WorkerGroup::move_qp(uint32_t qpn, uint32_t worker) {
  if (worker >= workers_.size()) return EINVAL;
  int err = 0;
  execute_all([&] {
    QueuePair *qp = dev_.qp_by_qpn(qpn);
    if (!qp || qp->qpn != qpn) {
      err = EINVAL;
      return;
    }
    if (qp->worker == worker) return;
    moves_++;
    qps_per_worker_[qp->worker]--;
    qps_per_worker_[worker]++;
    workers_[qp->worker]->move_qp(*qp, *workers_[worker]);
  });
  return err;
}

void WorkerGroup::rebalance() {
  uint64_t now = monotonic_ns();
  if (workers_.size() < 2 || now < next_rebalance_ns_) return;
  next_rebalance_ns_ = now + 1'000'000'000;
  std::vector<QpLoad> qps;
  dev_.qps.for_each([&](uint32_t handle, QueuePair &qp) {
    if (handle >= last_qp_packets_.size()) last_qp_packets_.resize(handle + 1024, 0);
    uint64_t total = qp_packets(qp);
    uint64_t delta = total >= last_qp_packets_[handle] ? total - last_qp_packets_[handle] : total;
    last_qp_packets_[handle] = total;
    qps.push_back({qp.qpn, qp.worker, delta});
  });
  std::optional<QpMove> move = choose_move(qps, uint32_t(workers_.size()));
  if (!move) return;
  if (move_qp(move->qpn, move->to) == 0) {
    std::fprintf(stderr, "vrnicd: QP 0x%x moved from worker %u to %u (loads %llu, %llu)\n",
                 move->qpn, move->from, move->to, static_cast<unsigned long long>(move->from_load),
                 static_cast<unsigned long long>(move->to_load));
  }
}

bool WorkerGroup::link_up() {
  Port *wire = workers_.empty() ? nullptr : workers_[0]->wire_port();
  return !wire || wire->link_up();
}

int WorkerGroup::set_faults(const FaultConfig &cfg) {
  if (workers_.empty() || !workers_[0]->wire_port()) return ENODEV;  // injected on a wire
  execute_all([&] {
    for (auto &w : workers_) w->wire_port()->set_faults(cfg);
  });
  return 0;
}

void WorkerGroup::resolve_peer(uint32_t worker, const uint8_t gid[16]) {
  Worker &w = *workers_[worker];
  if (!w.wire_port() || dev_.is_local_gid(gid)) return;
  w.execute([&] { w.wire_port()->resolve(gid); });
}

}  // namespace vrnic
