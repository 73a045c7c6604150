// Two QPs back to back, for the transport's unit tests: each end on a fake host of its own
// (its own Device, registered memory and CQs), the two joined by a wire the test scripts
// (drop, hold back to reorder, duplicate, corrupt) and that logs every packet. There is no
// thread, port or client: the engines run as on a worker (TransportHost's turns), and time is
// virtual -- the wire and the work take none, and when both ends are idle the clock jumps to
// the next armed timer. So a test asserts the exact packets, PSNs and completions.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/transport_host.h"

namespace vrnic::testing {

class FakeHost final : public TransportHost {
 public:
  explicit FakeHost(Device &dev, uint8_t home) : TransportHost(dev, 1024, 0, home) {}
  void transmit(QueuePair &, Packet *pkt) override {
    sent.push_back(pkt);
    if (on_transmit) on_transmit(*pkt);
  }
  bool delivery_pending(const QueuePair &) const override {
    return still_queued && still_queued();
  }
  std::vector<Packet *> sent;  // not yet on the wire
  // What a worker answers when the ACK timer expires: are the QP's packets still queued
  // for the peer's worker (not lost)? Unset: no.
  std::function<bool()> still_queued;
  // Called as each packet is sent, before the engine builds the next: a test changes the
  // host's state there, between two packets of one burst (a rereg between read responses).
  std::function<void(const Packet &)> on_transmit;
};

// One packet as it crossed the wire.
struct WireRecord {
  char from;  // 'A' or 'B'
  uint8_t opcode;
  uint32_t psn;
  bool ack_req;
  uint8_t syndrome;  // the AETH's, when the packet has one
  uint32_t payload_len;
  uint64_t reth_offset;  // READ requests: remote address less the peer's memory base
  uint32_t reth_len;
  uint64_t at_ns;  // virtual time it was sent
  std::string fate;
};

// What the wire does with one packet; the script may also change the packet (corrupt it).
enum class Fate { kDeliver, kDrop, kDuplicate, kHold /* delivered after the next one */ };
using WireScript = std::function<Fate(const WireRecord &, Packet &)>;

struct PairOptions {
  // RC, UC, or XRC: IBV_QPT_XRC_SEND makes A an XRC initiator and B an XRC target that
  // delivers to an XRC SRQ of its domain (B's receives, B's receive CQ).
  uint8_t type = IBV_QPT_RC;
  uint32_t path_mtu = IBV_MTU_1024;
  uint8_t timeout = 14;  // 4.096 us << 14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 us
  uint32_t psn_a = 100, psn_b = 5000;
  uint8_t max_rd_atomic = 16;
  // The peer is across the wire: each requester gets its worker's window towards it
  // (peer_window.h), as a udp or dpdk port's QPs do. Off: a loop-port pair, no window.
  bool wire_peer = false;
};

// One end: its host, device, QP, CQs and memory.
class QpEnd {
 public:
  QpEnd(char name, const uint8_t gid[16], uint8_t type);
  ~QpEnd();
  QpEnd(const QpEnd &) = delete;
  QpEnd &operator=(const QpEnd &) = delete;

  const char name;
  Device dev;
  FakeHost host;
  QueuePair *qp = nullptr;
  uint32_t key = 0;          // lkey and rkey of `mem`
  std::vector<uint8_t> mem;  // 64 KiB, registered

  // An XRC initiator's: the SRQ number its WQEs name (the peer target's SRQ).
  uint32_t xrc_srqn = 0;
  uint32_t srq_number() const { return srq_ ? srq_->handle : 0; }

  uint64_t addr(size_t offset) const { return reinterpret_cast<uint64_t>(mem.data()) + offset; }
  // Posts as the provider does (ring slot, producer index) and rings the doorbell; receives
  // go to an XRC target's SRQ.
  void post_send(const shm::SendWqe &wqe);
  void post_recv(uint64_t wr_id, size_t offset, uint32_t length);
  std::vector<shm::Cqe> poll_send_cq();
  std::vector<shm::Cqe> poll_recv_cq();
  std::vector<uint32_t> async_events();  // ibv_event_type, in order
  void modify(const ctl::QpAttrWire &attr, uint32_t mask);

 private:
  std::vector<shm::Cqe> poll(CompletionQueue &cq);
  void *qp_region_ = nullptr;
  void *srq_region_ = nullptr;  // an XRC target's SRQ
  ReceiveQueue *srq_ = nullptr;
  void *cq_region_[2] = {};
  CompletionQueue *cq_[2] = {};
  int events_[2] = {-1, -1};  // the async-event pipe
};

class QpPair {
 public:
  explicit QpPair(PairOptions o = {});
  QpEnd a, b;
  WireScript script;  // unset: everything is delivered
  // Called just before each packet reaches its receiver: a test changes the receiver's state
  // there, between two packets that arrive together (a rereg between WRITE packets).
  std::function<void(const QpEnd &to, const Packet &)> before_delivery;
  std::vector<WireRecord> log;
  uint64_t now = 0;

  // Runs both ends until neither has work or an armed timer, or `max_ns` of virtual time.
  void run(uint64_t max_ns = 60'000'000'000ull);
  // The log as lines "<from> <opcode> <psn>[ ack_req][ <syndrome>][ <fate>]".
  std::vector<std::string> trace() const;
  uint64_t ack_timeout_ns() const { return 4096ull << options_.timeout; }

 private:
  bool carry(QpEnd &from, QpEnd &to);
  bool deliver();
  uint64_t next_deadline() const;
  PairOptions options_;
  struct InFlight {
    QpEnd *to;
    Packet *pkt;
  };
  std::vector<InFlight> wire_, held_;
};

// Work requests as the provider writes them.
shm::SendWqe write_wqe(uint64_t wr_id, const QpEnd &from, size_t offset, uint32_t length,
                       const QpEnd &to, size_t remote_offset);
shm::SendWqe send_wqe(uint64_t wr_id, const QpEnd &from, size_t offset, uint32_t length);
shm::SendWqe read_wqe(uint64_t wr_id, const QpEnd &into, size_t offset, uint32_t length,
                      const QpEnd &from, size_t remote_offset);
shm::SendWqe fetch_add_wqe(uint64_t wr_id, const QpEnd &into, size_t offset, const QpEnd &at,
                           size_t remote_offset, uint64_t add);
// IBTA 1.5 ATOMIC WRITE of `value`'s 8 bytes (no SGE: they travel in the WQE).
shm::SendWqe atomic_write_wqe(uint64_t wr_id, uint64_t value, const QpEnd &at,
                              size_t remote_offset);

}  // namespace vrnic::testing
