// A worker's thread: doorbells, the transport's turns, ports, hand-over between workers,
// parking and the idle policy (worker.h).
#include "worker.h"

#include <infiniband/verbs.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <memory>
#include <thread>

#include "vrnic/clock.h"
#include "loop_port.h"
#include "transport.h"

namespace vrnic {
namespace {

// Idle policy for a 2-core machine shared with busy-polling clients: spin while there is
// work and briefly after, then yield the CPU each turn, and block on the wake eventfd only
// after a long idle period (waking a blocked thread costs ~70 us here).
constexpr uint64_t kSpinNs = 20'000;
constexpr uint64_t kYieldNs = 20'000'000;
constexpr uint64_t kTimerPeriodNs = 50'000;
constexpr int kMaxSleepMs = 100;
// A yield that gives the CPU away this long means a task that never yields shares our core
// (an application spinning on memory, as ib_write_lat does): the scheduler hands the core
// back only at its next tick, 4 ms on at HZ=250, and every packet we owe it waits that long.
// For a while after, an idle worker naps on a timer, kContendedSleepNs at a time, instead of
// yielding: a thread that wakes preempts the spinner.
constexpr uint64_t kLongYieldNs = 500'000;
constexpr uint64_t kContendedNs = 200'000'000;
constexpr uint64_t kContendedSleepNs = 20'000;
constexpr unsigned long kTimerSlackNs = 5'000;  // the default 50 us would dwarf that sleep

}  // namespace

Worker::Worker(Device &d, uint32_t index, shm::DaemonShared *daemon_shm)
    : TransportHost(d, kPoolPackets, kRxReserve, uint8_t(index)),
      index_(index),
      daemon_shm_(daemon_shm) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  session_wakes_ = ::epoll_create1(EPOLL_CLOEXEC);
  loop_ = std::make_unique<LoopPort>(kPoolPackets);
}

Worker::~Worker() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (session_wakes_ >= 0) ::close(session_wakes_);
}

void Worker::watch_session_wake(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = fd;
  ::epoll_ctl(session_wakes_, EPOLL_CTL_ADD, fd, &ev);
}

void Worker::unwatch_session_wake(int fd) {
  ::epoll_ctl(session_wakes_, EPOLL_CTL_DEL, fd, nullptr);
}

int Worker::start(int cpu) {
  running_ = true;
  thread_ = std::thread([this] { run(); });
  if (cpu < 0) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set);
}

void Worker::stop() {
  if (!running_.exchange(false)) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
}

void Worker::execute(const std::function<void()> &fn) { queue_command(fn, true); }

void Worker::run_between_bursts(const std::function<void()> &fn) { queue_command(fn, false); }

void Worker::queue_command(const std::function<void()> &fn, bool drain) {
  if (!running_ || std::this_thread::get_id() == thread_.get_id()) {
    fn();
    return;
  }
  // Shared with the command: the worker may still be notifying when this thread, having seen
  // the flag, returns.
  auto done_ptr = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> &done = *done_ptr;
  {
    std::lock_guard lock(cmd_mu_);
    commands_.push_back({[&fn, done_ptr] {
                           fn();
                           done_ptr->store(true, std::memory_order_release);
                           done_ptr->notify_one();
                         },
                         drain});
    commands_pending_.store(true, std::memory_order_seq_cst);
  }
  // Pairs with idle_wait(): it flags sleeping, then looks at commands_pending_. A worker that
  // is not asleep sees the command at its next turn, with no system call on either side.
  if (daemon_shm_->workers[index_].sleeping.load(std::memory_order_seq_cst)) wake();
  // A command takes a turn of a running worker, microseconds: wait for it on this CPU, giving
  // the CPU away meanwhile (two vCPUs), and block only if it takes longer.
  for (int spins = 0; spins < 256 && !done.load(std::memory_order_acquire); spins++) sched_yield();
  while (!done.load(std::memory_order_acquire)) done.wait(false, std::memory_order_acquire);
}

bool Worker::run_commands() {
  if (!commands_pending_.load(std::memory_order_acquire)) return false;
  std::vector<Command> cmds;
  {
    std::lock_guard lock(cmd_mu_);
    cmds.swap(commands_);
    commands_pending_.store(false, std::memory_order_relaxed);
  }
  if (std::any_of(cmds.begin(), cmds.end(), [](const Command &c) { return c.drain; })) drain();
  for (auto &c : cmds) c.fn();
  return true;
}

void Worker::ask_grace(uint64_t epoch) {
  grace_asked_.store(epoch, std::memory_order_seq_cst);
  // Pairs with idle_wait(): it flags sleeping, then looks at grace_asked_.
  if (daemon_shm_->workers[index_].sleeping.load(std::memory_order_seq_cst)) wake();
}

void Worker::wait_grace(uint64_t epoch) const {
  // A busy worker passes a point between bursts every few microseconds; an idle one yields
  // or naps at most 20 us at a time. Its packets in flight come back as fast as the port
  // sends them.
  for (int spins = 0; running_ && grace_done_.load(std::memory_order_acquire) < epoch; spins++) {
    if (spins < 64) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  }
}

// Between bursts, the worker holds no object it found in a table: a grace period asked for
// starts here (the packets built from now on count in a new epoch) and ends once the packets
// of the epoch before are back. The acquire pairs with ask_grace's store, which follows the
// control thread's taking the object out of its table: from here on no lookup finds it.
void Worker::pass_quiescent_point() {
  const uint64_t asked = grace_asked_.load(std::memory_order_acquire);
  if (asked != grace_seen_) {
    grace_seen_ = asked;
    pool.new_epoch();
    grace_waiting_ = true;
  }
  if (grace_waiting_ && pool.previous_epoch_done()) {
    grace_waiting_ = false;
    grace_done_.store(grace_seen_, std::memory_order_release);
  }
}

// Delivers everything in flight so that commands (which may unmap memory that queued
// packets reference) run against a quiescent port. Receive-only: ACKs are absorbed by the
// completer without generating new packets, so this terminates.
void Worker::drain() {
  while (!quiescent()) {
    flush_tx();
    receive();
    flush_acks();
  }
}

bool Worker::quiescent() const {
  return !loop_->in_flight() && !loop_tx_.n && !wire_tx_.n && (!wire_ || !wire_->in_flight());
}

void Worker::add_session(uint32_t id, uid_t uid, shm::DoorbellRing *ring) {
  sessions_.push_back({id, doorbell_budget_.join(uid), shm::DoorbellConsumer{ring}});
}

void Worker::remove_session(uint32_t id) {
  std::erase_if(sessions_, [&](const SessionRings &s) {
    if (s.id != id) return false;
    doorbell_budget_.leave(s.user);
    return true;
  });
}

void Worker::move_qp(QueuePair &qp, Worker &to) {
  bool acks = qp.in_ack_list, timers = qp.in_timer_list, peer = qp.req.peer != nullptr;
  forget_qp(qp);
  qp.in_run_queue = qp.in_ack_list = qp.in_timer_list = false;
  qp.worker = uint8_t(to.index_);
  qp.shared->worker.store(to.index_, std::memory_order_release);
  to.schedule(qp);  // whatever was posted or rung before the move
  if (acks) to.ack_later(qp);
  if (timers) to.watch_timers(qp);
  if (peer) to.attach_peer(qp);
}

void Worker::transmit(QueuePair &qp, Packet *pkt) {
  qp.counters[kPacketsSent]++;  // the device counts what the port accepts (flush)
  count(qp, kBytesSent, pkt->header_len + pkt->payload_len);
  // Multicast: to this vrnicd's members through the loop port (which fans it out), and, with a
  // wire port, a copy to the group's IP address, for other vrnicds' (UdpPort joins a group
  // for its members; its own copy back is dropped on receipt, a local source from the wire).
  const bool multicast = is_multicast_gid(pkt->dst_gid);
  if (multicast && wire_) {
    if (Packet *copy = bounce_copy(*pkt)) {
      wire_tx_.pkts[wire_tx_.n++] = copy;
      if (wire_tx_.n == kBurst) flush(*wire_, wire_tx_);
    }
  }
  bool wire = wire_ && !dev.is_local_gid(pkt->dst_gid) && !multicast;
  TxBatch &batch = wire ? wire_tx_ : loop_tx_;
  batch.pkts[batch.n++] = pkt;
  if (batch.n == kBurst) flush(wire ? *wire_ : *loop_, batch);
}

void Worker::flush_tx() {
  if (loop_tx_.n) flush(*loop_, loop_tx_);
  if (wire_tx_.n) flush(*wire_, wire_tx_);
}

// A port that cannot take a packet drops it: a lost packet, which the transport recovers from.
// (The loop port always takes all: the pool holds no more packets than it can queue.)
void Worker::flush(Port &port, TxBatch &batch) {
  if (const CaptureTap *tap = dev.capture.load(std::memory_order_acquire))
    tap->record(index_, batch.pkts, batch.n, false);
  uint16_t sent = port.tx_burst(batch.pkts, batch.n);
  counters[kPacketsSent] += sent;
  for (uint16_t i = sent; i < batch.n; i++) {
    counters[kPacketsDropped]++;
    pool.free(batch.pkts[i]);
  }
  batch.n = 0;
}

bool Worker::poll_doorbells() {
  bool any = false;
  const uint32_t n = uint32_t(sessions_.size());
  const uint32_t start = doorbell_budget_.new_look(n);
  for (uint32_t k = 0; k < n; k++) {
    SessionRings &s = sessions_[(start + k) % n];
    uint32_t handle;
    // A bounded share of the look per user: the cells are client memory, and a client that
    // keeps forging them must not hold the worker here (issue 17, row 14), however many
    // sessions it opens (issue 28, row 12).
    for (;;) {
      if (!doorbell_budget_.take(s.user)) {
        any = true;  // what is left waits for the next look, which must come soon
        break;
      }
      if (!s.doorbells.pop(&handle)) break;
      QueuePair *qp = dev.qps.get(handle);
      if (!qp || qp->session != s.id) continue;  // stale or foreign: ignore
      if (qp->worker != index_) {
        // Rung here before the QP moved (or forged): pass it on, once, and never wait for
        // the owner. A parked owner does not empty its inbox, and waiting for it kept this
        // worker from parking: every worker and the control thread stopped for good (issue
        // 28, row 4). With one entry per QP an inbox (one slot per QP a session may have)
        // fills only past that; then the ring is dropped and the client rings again at its
        // next post (doorbell_pending cleared): only the session's own QP waits.
        if (qp->worker < peers_.size() && !qp->doorbell_forwarded.exchange(true)) {
          Worker &owner = *peers_[qp->worker];
          if (owner.doorbells_in_[index_]->push(qp)) {
            owner.wake();
          } else {
            qp->doorbell_forwarded.store(false);
            qp->shared->doorbell_pending.store(0, std::memory_order_seq_cst);
          }
        }
        continue;
      }
      take_doorbell(*qp);
      any = true;
    }
  }
  return any;
}

// A doorbell of one of our QPs: the provider may ring again (a QP is in a ring at most once),
// and its send queue is looked at on the next turn.
void Worker::take_doorbell(QueuePair &qp) {
  qp.shared->doorbell_pending.store(0, std::memory_order_seq_cst);
  qp.prefetch_wqe(qp.req.wqe);
  schedule(qp);
}

bool Worker::receive() {
  Packet *pkts[kBurst];
  uint16_t n = loop_->rx_burst(pkts, kBurst);
  const uint16_t from_loop = n;
  if (wire_ && n < kBurst) n += wire_->rx_burst(pkts + n, uint16_t(kBurst - n));
  if (n > from_loop) {
    if (const CaptureTap *tap = dev.capture.load(std::memory_order_acquire))
      tap->record(index_, pkts + from_loop, uint16_t(n - from_loop), true);
  }
  for (uint16_t i = 0; i < n; i++) {
    Packet *pkt = pkts[i];
    // vrnicd sends to its own addresses through the loop port, never the wire: from the wire,
    // a packet with one of them as its source is forged (any local user's UDP socket on
    // 127.0.0.1 sends from vrnicd's loopback address), and would pass for the loop port's
    // peer of a local connection, whose packets carry no source QPN (issue 28, row 8).
    if (i >= from_loop && dev.is_local_gid(pkt->src_gid)) {
      counters[kPacketsDropped]++;
      recycle(pkt);
      continue;
    }
    if (pkt->bth().dest_qp() == kMulticastQpn && is_multicast_gid(pkt->dst_gid)) {
      fan_out(*pkt);
      recycle(pkt);
      continue;
    }
    route(pkt);
  }
  return n != 0;
}

void Worker::route(Packet *pkt) {
  QueuePair *qp = dev.qp_by_qpn(pkt->bth().dest_qp());
  if (qp && qp->worker != index_ && qp->worker < peers_.size()) {
    // Another worker's QP: handed over whole, in arrival order.
    Worker &owner = *peers_[qp->worker];
    if (owner.inbox_[index_]->push(pkt)) {
      // Pairs with idle_wait(): it flags sleeping, then looks at its inbox; we push, then
      // look at the flag. Without the fence the load may pass the push.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (daemon_shm_->workers[owner.index_].sleeping.load(std::memory_order_relaxed))
        owner.wake();
    } else {
      counters[kPacketsDropped]++;  // its inbox is full: a lost packet
      recycle(pkt);
    }
    return;
  }
  deliver(pkt);
  recycle(pkt);
}

// Each copy is an ordinary UD datagram to one member's QPN, with the payload in its own
// buffer: it may go to another worker, and the original's may be the sender's memory.
void Worker::fan_out(const Packet &pkt) {
  const MulticastGroups *all = dev.multicast.load(std::memory_order_acquire);
  const MulticastGroups::Group *group = all ? all->find(pkt.dst_gid) : nullptr;
  if (!group || pkt.payload_len > kPacketBufferBytes) {
    counters[kPacketsDropped]++;  // nobody is attached: dropped, as a switch would
    return;
  }
  for (uint32_t qpn : group->qpns) {
    Packet *copy = bounce_copy(pkt);
    if (!copy) continue;
    copy->bth().set_dest_qp(qpn);
    route(copy);
  }
}

Packet *Worker::bounce_copy(const Packet &pkt) {
  Packet *copy = pkt.payload_len <= kPacketBufferBytes ? pool.alloc() : nullptr;
  if (!copy) {
    counters[kPacketsDropped]++;
    return nullptr;
  }
  std::memcpy(copy->src_gid, pkt.src_gid, 16);
  std::memcpy(copy->dst_gid, pkt.dst_gid, 16);
  copy->udp_sport = pkt.udp_sport;
  copy->header_len = pkt.header_len;
  std::memcpy(copy->header, pkt.header, pkt.header_len);
  std::memcpy(copy->bounce, pkt.payload, pkt.payload_len);
  copy->payload = copy->bounce;
  copy->payload_len = pkt.payload_len;
  copy->src_qpn = pkt.src_qpn;
  return copy;
}

void Worker::recycle(Packet *pkt) {
  if (pkt->home == index_ || peers_.empty()) {
    pool.free(pkt);
    return;
  }
  if (pkt->release) {
    void (*release)(Packet *) = pkt->release;
    pkt->release = nullptr;
    release(pkt);
  }
  // Never full: the ring holds as many packets as the pool has.
  while (!peers_[pkt->home]->returns_[index_]->push(pkt)) sched_yield();
}

// On the loop port nothing is lost: a packet waits in this worker's loop ring or in the
// inbox of the worker that owns its QP until that worker runs. A worker the scheduler keeps
// off its CPU for longer than a QP's ACK timeout (4 ms for timeout 10) has not lost the
// packets it has not yet taken.
bool Worker::delivery_pending(const QueuePair &qp) const {
  if (!dev.is_local_gid(qp.attr.ah.dgid)) return false;
  if (loop_->in_flight() || loop_tx_.n) return true;
  const QueuePair *peer = dev.qp_by_qpn(qp.attr.dest_qp_num);
  if (!peer || peer->worker == index_ || peer->worker >= peers_.size()) return false;
  return !peers_[peer->worker]->inbox_[index_]->empty();
}

bool Worker::take_doorbells_from(size_t peer) {
  bool any = false;
  while (QueuePair *qp = doorbells_in_[peer]->pop()) {
    // (A QP moves only with every worker parked, after this ring was emptied: it is ours.)
    qp->doorbell_forwarded.store(false);
    take_doorbell(*qp);
    any = true;
  }
  return any;
}

void Worker::take_forwarded_doorbells() {
  for (size_t i = 0; i < doorbells_in_.size(); i++)
    if (i != index_) take_doorbells_from(i);
}

// Packets other workers handed us, and our own packets they are done with.
bool Worker::poll_peers() {
  bool any = false;
  for (size_t i = 0; i < peers_.size(); i++) {
    if (i == index_) continue;
    while (Packet *p = returns_[i]->pop()) pool.free(p);
    any |= take_doorbells_from(i);
    for (uint16_t k = 0; k < kBurst; k++) {
      Packet *p = inbox_[i]->pop();
      if (!p) break;
      deliver(p);
      recycle(p);
      any = true;
    }
  }
  return any;
}

void Worker::connect(const std::vector<Worker *> &all) {
  peers_ = all;
  inbox_.clear();
  returns_.clear();
  doorbells_in_.clear();
  for (size_t i = 0; i < all.size(); i++) {
    inbox_.push_back(std::make_unique<SpscRing<Packet>>(kPoolPackets));
    returns_.push_back(std::make_unique<SpscRing<Packet>>(kPoolPackets));
    doorbells_in_.push_back(std::make_unique<SpscRing<QueuePair>>(shm::DoorbellRing::kSlots));
  }
}

void Worker::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void Worker::request_park() {
  {
    std::lock_guard lock(cmd_mu_);
    drain_round_++;
    park_requested_.store(true, std::memory_order_release);
  }
  wake();
}

void Worker::redrain() {
  {
    std::lock_guard lock(cmd_mu_);
    drain_round_++;
  }
  park_cv_.notify_all();
}

void Worker::wait_parked() {
  if (!running_) return;
  std::unique_lock lock(cmd_mu_);
  park_cv_.wait(lock, [&] { return parked_round_ == drain_round_; });
}

void Worker::unpark() {
  {
    std::lock_guard lock(cmd_mu_);
    park_requested_.store(false, std::memory_order_release);
  }
  park_cv_.notify_all();
}

bool Worker::inbox_empty() const {
  for (size_t i = 0; i < inbox_.size(); i++)
    if (i != index_ && (!inbox_[i]->empty() || !doorbells_in_[i]->empty())) return false;
  return true;
}

// Runs no send work until nothing this worker sent is in flight and its inbox is empty, then
// waits for unpark() -- or for redrain(). Packets that arrive meanwhile are received and
// answered (ACKs), as in drain().
void Worker::park_here() {
  std::unique_lock lock(cmd_mu_);
  while (park_requested_.load(std::memory_order_acquire)) {
    uint64_t round = drain_round_;
    lock.unlock();
    while (!quiescent() || !inbox_empty()) {
      flush_tx();
      receive();
      poll_peers();
      flush_acks();
    }
    lock.lock();
    parked_round_ = round;
    park_cv_.notify_all();
    park_cv_.wait(lock, [&] {
      return !park_requested_.load(std::memory_order_acquire) || drain_round_ != round;
    });
  }
}

void Worker::check_timers_due() {
  if (now < next_timer_check_) return;
  next_timer_check_ = now + kTimerPeriodNs;
  check_timers();
}

void Worker::idle_wait(uint64_t idle_ns) {
  if (idle_ns < kSpinNs) return;
  if (idle_ns < kYieldNs || timers_armed()) {
    if (now < contended_until_) {
      // A timer, not the eventfd: the application's doorbells stay system-call free.
      const timespec nap{0, long(kContendedSleepNs)};
      ::nanosleep(&nap, nullptr);
      return;
    }
    sched_yield();
    if (monotonic_ns() - now >= kLongYieldNs) contended_until_ = now + kContendedNs;
    return;
  }
  // Tell producers to write our eventfd, then look once more before sleeping.
  std::atomic<uint32_t> &sleeping = daemon_shm_->workers[index_].sleeping;
  sleeping.store(1, std::memory_order_seq_cst);
  bool work = commands_pending_.load() || work_scheduled() ||
              park_requested_.load(std::memory_order_acquire) || grace_waiting_ ||
              grace_asked_.load(std::memory_order_seq_cst) != grace_seen_;
  if (!inbox_empty()) work = true;
  for (SessionRings &s : sessions_)
    if (s.doorbells.ready()) work = true;
  if (!work && running_) {
    // The port's RX interrupt wakes us when it has one; a port that cannot wake us is polled
    // at its pace: adaptive polling.
    const int rx_fd = wire_ ? wire_->arm_rx_interrupt() : -1;
    uint64_t sleep_ns = uint64_t(kMaxSleepMs) * 1'000'000;
    if (wire_ && wire_->max_sleep_ns()) sleep_ns = std::min(sleep_ns, wire_->max_sleep_ns());
    timespec timeout{time_t(sleep_ns / 1'000'000'000), long(sleep_ns % 1'000'000'000)};
    pollfd pfd[3] = {{wake_fd_, POLLIN, 0}, {session_wakes_, POLLIN, 0}, {rx_fd, POLLIN, 0}};
    ::ppoll(pfd, rx_fd >= 0 ? 3 : 2, &timeout, nullptr);
    if (rx_fd >= 0) wire_->rx_interrupt_done();
  }
  sleeping.store(0, std::memory_order_relaxed);
  uint64_t drain_buf;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &drain_buf, sizeof(drain_buf));
  // The sessions' wakes are taken off the epoll's ready list, never read from their fds.
  epoll_event ready[64];
  while (::epoll_wait(session_wakes_, ready, 64, 0) == 64) {
  }
}

void Worker::run() {
  char name[16];
  std::snprintf(name, sizeof(name), "vrnic-w%u", index_);
  pthread_setname_np(pthread_self(), name);
  prctl(PR_SET_TIMERSLACK, kTimerSlackNs);
  uint64_t last_work = monotonic_ns();
  while (running_) {
    now = monotonic_ns();
    if (park_requested_.load(std::memory_order_acquire)) park_here();
    pass_quiescent_point();
    bool work = run_commands();
    work |= poll_doorbells();
    work |= serve_run_queue();
    flush_tx();
    while (receive() | poll_peers()) {
      flush_acks();
      flush_tx();
      pass_quiescent_point();  // a worker that keeps receiving still ends grace periods
      work = true;
    }
    check_timers_due();
    flush_tx();
    if (work) {
      last_work = now;
    } else {
      idle_wait(now - last_work);
    }
  }
  drain();
}

}  // namespace vrnic
