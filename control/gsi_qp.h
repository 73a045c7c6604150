// QP1 of a device: the UD QP the connection manager sends and receives its MADs on (the GSI
// QP, Q_Key 0x80010000), as Linux's ib_mad keeps one per port. vrnicd is its own client here:
// the QP, its CQs and buffers live in vrnicd's memory, made with the same dataplane calls as a
// client's (qp_init, a registered region), and run by worker 0 like any QP; the control
// thread posts to its rings and is woken through its receive CQ's completion channel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "dataplane/device.h"
#include "vrnic/cm_wire.h"
#include "worker_group.h"

namespace vrnic {

class GsiQp {
 public:
  GsiQp(Device &dev, WorkerGroup &workers);
  ~GsiQp();
  GsiQp(const GsiQp &) = delete;
  GsiQp &operator=(const GsiQp &) = delete;

  // Creates QP1 in RTS on worker 0 with every receive buffer posted.
  absl::Status start();
  // Takes it off the device (the workers must still run); also done by the destructor.
  void stop();
  // Readable when MADs have arrived (then call receive()).
  int poll_fd() const { return pipe_[0]; }
  // A MAD to the peer's QP1, posted; it goes out at the next flush() (or when the ring is
  // full: then the worker is asked to send what is there, and the post waits for a slot).
  bool send(const cm::Gid &to, const cm::Mad &mad);
  // Has the worker send what was posted: one hand-over per batch of MADs, not per MAD.
  void flush();
  // Every MAD received since the last call, with the GID it came from; buffers re-posted.
  void receive(const std::function<void(const cm::Gid &from, const cm::Mad &mad)> &fn);
  uint64_t dropped() const { return dropped_; }  // too short or too long to be a MAD

 private:
  // A burst of connections (cmtime -c 1000) sends and receives thousands of MADs at once: a
  // lost one costs a CM retry (seconds), so receive buffers are plentiful and a send waits for
  // a slot rather than fail.
  static constexpr uint32_t kSendSlots = 256;
  static constexpr uint32_t kRecvSlots = 4096;
  static constexpr uint32_t kGrhBytes = 40;
  static constexpr uint32_t kRecvBytes = kGrhBytes + cm::kMadBytes;

  void post_recv(uint32_t slot);
  void reap_sends();

  Device &dev_;
  WorkerGroup &workers_;
  struct Memory;
  std::unique_ptr<Memory> mem_;
  QueuePair *qp_ = nullptr;
  uint32_t send_head_ = 0;  // next send slot (free-running); slots reaped up to sq consumer
  uint32_t recv_posted_ = 0;
  uint32_t recv_polled_ = 0;
  uint32_t send_cq_polled_ = 0;
  bool unsent_ = false;  // posted since the last flush()
  int pipe_[2] = {-1, -1};
  uint64_t dropped_ = 0;
};

}  // namespace vrnic
