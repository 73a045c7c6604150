// Layout of the memory shared between the provider (the driver) and vrnicd (the NIC): the
// equivalent of a hardware NIC's BAR. Work queues and completion queues are single-producer,
// single-consumer rings with free-running 32-bit indices; doorbells are a multi-producer ring
// per session and worker. Everything here is plain data, identical in both processes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vrnic::shm {

inline constexpr size_t kCacheLine = 64;
inline constexpr uint32_t kMaxSge = 16;
inline constexpr uint32_t kMaxInline = 256;
inline constexpr uint32_t kMaxWorkers = 8;
inline constexpr uint32_t kMaxQpsPerSession = 65536;

static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Producer and consumer indices on separate cache lines so the two sides do not false-share.
struct RingIndices {
  alignas(kCacheLine) std::atomic<uint32_t> producer;
  alignas(kCacheLine) std::atomic<uint32_t> consumer;
};

struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

enum WqeFlags : uint8_t {
  kWqeSignaled = 1 << 0,
  kWqeSolicited = 1 << 1,
  kWqeInline = 1 << 2,
  kWqeFence = 1 << 3,
};

// A send work request as posted. opcode is enum ibv_wr_opcode. Inline data, when present,
// occupies the SGE area. RC/UC requests name remote memory; UD sends carry their address
// vector (copied from the AH at post time, so the AH may be destroyed afterwards).
struct UdAddress {
  uint8_t dgid[16];
  uint32_t remote_qpn;
  uint32_t remote_qkey;
  uint32_t flow_label;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
  uint8_t sl;
};

struct SendWqe {
  uint64_t wr_id;
  uint8_t opcode;
  uint8_t flags;
  uint8_t num_sge;
  uint8_t reserved0;
  uint32_t imm_or_rkey;  // imm_data (big-endian, as the application gave it) or invalidate rkey
  uint32_t length;       // total bytes (sum of SGEs, or inline length)
  uint32_t remote_srqn;  // XRC: the SRQ of the target's XRC domain the message is for
  union {
    struct {
      uint64_t remote_addr;
      uint32_t rkey;
      uint32_t reserved2;
      uint64_t compare_add;
      uint64_t swap;
    };
    UdAddress ud;
  };
  uint64_t reserved3;
  union {
    Sge sge[kMaxSge];
    uint8_t inline_data[kMaxInline];
  };
};
static_assert(sizeof(SendWqe) == 64 + 256);

struct RecvWqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t length;  // sum of SGE lengths
  Sge sge[kMaxSge];
};
static_assert(sizeof(RecvWqe) == 16 + 256);

// A completion as ibv_poll_cq returns it (status, opcode and flags are the ibv_wc enums).
struct Cqe {
  uint64_t wr_id;
  uint32_t byte_len;
  uint32_t imm_data;  // big-endian as on the wire, or the invalidated rkey
  uint32_t qp_num;
  uint32_t src_qp;
  uint8_t status;
  uint8_t opcode;
  uint8_t wc_flags;
  uint8_t sl;
  uint16_t pkey_index;
  uint16_t slid;
};
static_assert(sizeof(Cqe) == 32);

// QP memory: this header, then the send ring, then the receive ring. A QP's memory is a block
// of its session's ring arena (control/ring_arena.h), not a memfd of its own.
struct QpShared {
  RingIndices sq;
  RingIndices rq;
  // Set by the provider when it queues a doorbell for this QP, cleared by the worker before
  // it looks at the rings; so a QP is in a doorbell ring at most once.
  alignas(kCacheLine) std::atomic<uint32_t> doorbell_pending;
  // Mirror of the QP state (enum ibv_qp_state) kept by vrnicd for the provider's checks.
  std::atomic<uint32_t> state;
  // The worker that runs the QP, whose doorbell ring the provider uses: vrnicd may move a QP
  // (a doorbell that still reaches the old worker is passed on).
  std::atomic<uint32_t> worker;
  // The send queue position up to which vrnicd has retired every WQE and written its
  // completion (sq.consumer moves before the CQE is written): the provider's direct path
  // runs a WR itself only when nothing earlier is still with vrnicd.
  std::atomic<uint32_t> sq_retired;
  // Work requests and bytes the provider ran on the same-host direct path (it counts them,
  // vrnicd reports them).
  alignas(kCacheLine) std::atomic<uint64_t> direct_ops;
  std::atomic<uint64_t> direct_bytes;
};

inline constexpr size_t kQpHeaderBytes = 512;
static_assert(sizeof(QpShared) <= kQpHeaderBytes);

inline size_t qp_region_bytes(uint32_t sq_slots, uint32_t rq_slots) {
  return kQpHeaderBytes + size_t(sq_slots) * sizeof(SendWqe) + size_t(rq_slots) * sizeof(RecvWqe);
}

// Shared receive queue memory: this header page, then the receive ring.
struct SrqShared {
  RingIndices ring;
  // Low-water mark armed by ibv_modify_srq(IBV_SRQ_LIMIT); vrnicd disarms it (sets 0) when
  // it raises IBV_EVENT_SRQ_LIMIT_REACHED.
  alignas(kCacheLine) std::atomic<uint32_t> limit;
};
inline constexpr size_t kSrqHeaderBytes = 4096;
static_assert(sizeof(SrqShared) <= kSrqHeaderBytes);
inline size_t srq_region_bytes(uint32_t slots) {
  return kSrqHeaderBytes + size_t(slots) * sizeof(RecvWqe);
}

enum CqNotify : uint32_t { kNotifyNone = 0, kNotifyNext = 1, kNotifySolicited = 2 };

// CQ memory: this header page, then the CQE ring, then, for a CQ that stamps its completions
// (ibv_create_cq_ex asked for a completion timestamp), each slot's time: vrnic/clock.h's
// monotonic_ns when the CQE was written (an array apart, so that CQs without stamps keep
// their 32-byte CQEs and pay nothing).
struct CqShared {
  RingIndices ring;
  // Armed by ibv_req_notify_cq; vrnicd disarms it when it sends the event.
  alignas(kCacheLine) std::atomic<uint32_t> notify;
  std::atomic<uint32_t> overrun;  // set when vrnicd found the ring full
};
inline constexpr size_t kCqHeaderBytes = 4096;
static_assert(sizeof(CqShared) <= kCqHeaderBytes);

inline size_t cq_region_bytes(uint32_t slots, bool stamped = false) {
  return kCqHeaderBytes + size_t(slots) * (sizeof(Cqe) + (stamped ? sizeof(uint64_t) : 0));
}
inline Cqe *cq_ring(void *region) {
  return reinterpret_cast<Cqe *>(static_cast<uint8_t *>(region) + kCqHeaderBytes);
}
inline uint64_t *cq_stamps(void *region, uint32_t slots) {
  return reinterpret_cast<uint64_t *>(cq_ring(region) + slots);
}

// Doorbell ring: a bounded multi-producer (any provider thread), single-consumer (one
// worker) queue of QP handles. Each cell carries a sequence number so producers claim cells
// with one CAS and the consumer sees a cell only once it is fully written. The number is
// stored less the cell's index, so that a ring of zeros is a ring ready for use: its pages
// cost nothing until a QP rings (a ring holds a cell per QP a session may have, 65,536).
struct DoorbellCell {
  std::atomic<uint32_t> seq;  // the sequence number, less the cell's index
  uint32_t qp_handle;
};

struct DoorbellRing {
  static constexpr uint32_t kSlots = kMaxQpsPerSession;  // >= QPs per session: never full
  alignas(kCacheLine) std::atomic<uint32_t> tail;        // producers
  // The consumer's index is not here: it lives in vrnicd's own memory (DoorbellConsumer), so
  // that a client rewriting the ring cannot send the worker round it forever (issue 17,
  // row 14); the cells' sequence numbers are all a client can forge, and each one popped
  // costs a budgeted step.
  alignas(kCacheLine) DoorbellCell cells[kSlots];

  // The sequence number of the cell position `pos` falls in.
  uint32_t seq_at(uint32_t pos) const {
    return cells[pos % kSlots].seq.load(std::memory_order_acquire) + pos % kSlots;
  }
  void set_seq(uint32_t pos, uint32_t seq) {
    cells[pos % kSlots].seq.store(seq - pos % kSlots, std::memory_order_release);
  }

  bool push(uint32_t handle) {
    uint32_t pos = tail.load(std::memory_order_relaxed);
    for (;;) {
      DoorbellCell &c = cells[pos % kSlots];
      uint32_t seq = seq_at(pos);
      int32_t dif = int32_t(seq - pos);
      if (dif == 0) {
        if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.qp_handle = handle;
          set_seq(pos, pos + 1);
          return true;
        }
      } else if (dif < 0) {
        return false;  // full
      } else {
        pos = tail.load(std::memory_order_relaxed);
      }
    }
  }
};

// The worker's side of a DoorbellRing, in vrnicd's memory.
struct DoorbellConsumer {
  DoorbellRing *ring = nullptr;
  uint32_t head = 0;

  bool ready() const { return int32_t(ring->seq_at(head) - (head + 1)) >= 0; }
  bool pop(uint32_t *handle) {
    if (!ready()) return false;
    *handle = ring->cells[head % DoorbellRing::kSlots].qp_handle;
    ring->set_seq(head, head + DoorbellRing::kSlots);
    head++;
    return true;
  }
};

// Session memory: one doorbell ring per worker.
struct SessionShared {
  DoorbellRing doorbells[kMaxWorkers];
};

// Daemon-wide memory, mapped read-only by every client: whether each worker sleeps (and so
// needs its eventfd written after a doorbell).
struct DaemonShared {
  struct alignas(kCacheLine) WorkerStatus {
    std::atomic<uint32_t> sleeping;
  };
  WorkerStatus workers[kMaxWorkers];
  // enum ibv_port_state of port 1, kept current by vrnicd (ibv_query_port reads it here).
  alignas(kCacheLine) std::atomic<uint32_t> port_state;
  // Whether providers may run work requests between local QPs themselves (the same-host
  // direct path): vrnicd clears it when started with --no-direct-path and while fault
  // injection is set, which only packets through a port can meet (providers look at it
  // before each direct WR).
  std::atomic<uint32_t> direct_path;
};

}  // namespace vrnic::shm
