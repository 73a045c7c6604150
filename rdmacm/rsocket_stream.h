// The stream rsocket as rdmacm's rsocket files share it (rsocket.cpp has the stream and the
// socket and data calls): a socket's state, queues and buffers, and the steps every call
// takes with it -- progress (what the CM and the CQ have), readiness, waiting, sending a
// buffer's worth.
#pragma once

#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

namespace vrnic::rdmacm::stream {

inline constexpr int kSlots = 16;
inline constexpr uint32_t kSlotBytes = 64 * 1024;
inline constexpr uint32_t kFin = 1;    // the immediate data of an end of stream
inline constexpr uint32_t kIoMap = 2;  // ... of a riomap's mapping, told to the peer
inline constexpr uint64_t kFinWrId = ~0ull;

enum class State { kIdle, kListening, kConnecting, kConnected, kFailed };

// A riomap'ed region as the peer is told it (big-endian on the wire).
struct IoMapMsg {
  uint64_t offset;  // where riowrite's offsets start in it
  uint64_t addr;
  uint64_t len;
  uint32_t rkey;
  uint32_t reserved;
};

// One stream rsocket.
struct Rs {
  rdma_event_channel *channel = nullptr;
  rdma_cm_id *id = nullptr;
  State state = State::kIdle;
  bool nonblocking = false;
  int error = 0;           // a failed connection's errno (SO_ERROR), kept for the stream too
  bool peer_done = false;  // the peer's end of stream (or its disconnect) came
  bool shut_wr = false;
  ibv_comp_channel *cc = nullptr;
  ibv_cq *cq = nullptr;
  ibv_mr *mr = nullptr;
  uint8_t *buf = nullptr;  // kSlots receive slots, then kSlots send slots
  struct Received {
    int slot;
    uint32_t offset, len;
  };
  std::deque<Received> received;      // in order, the data not read yet
  std::vector<int> free_send;         // send slots not in flight
  std::deque<rdma_cm_id *> requests;  // a listener's connections not accepted yet
  struct LocalMap {
    void *buf;
    size_t len;
    ibv_mr *mr;
  };
  std::vector<LocalMap> local_maps;   // ours (riomap), until riounmap
  std::vector<IoMapMsg> remote_maps;  // the peer's, host order
  int sndbuf = kSlots * int(kSlotBytes), rcvbuf = kSlots * int(kSlotBytes);

  uint8_t *recv_slot(int i) { return buf + size_t(i) * kSlotBytes; }
  uint8_t *send_slot(int i) { return buf + size_t(kSlots + i) * kSlotBytes; }
  int fd() const { return channel->fd; }
};

// The rsocket whose descriptor fd is, or nullptr.
Rs *find(int fd);
// Takes what the socket's CM events and CQ hold, without waiting.
void progress(Rs *rs);
// poll()'s revents for the socket, of `want` (and POLLERR, POLLHUP).
short readiness(Rs *rs, short want);
// Waits on the socket's event channel and completion channel (ms < 0: for ever).
void wait_on(Rs *rs, int ms);
// A send buffer's worth: a SEND of the stream (imm 0: without immediate data), or an RDMA
// WRITE into the peer's memory (rkey != 0). A free send slot must be there.
int send_chunk(Rs *rs, const uint8_t *data, uint32_t len, uint32_t imm = 0, uint64_t remote = 0,
               uint32_t rkey = 0);
sockaddr *local_of(Rs *rs);
// As getsockname's: NULL with a length of 0 asks the length alone (librspreload does).
int copy_address(const sockaddr *from, sockaddr *to, socklen_t *len);

using Clock = std::chrono::steady_clock;
inline constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

// Waits until `ready` holds (0), or says EAGAIN at once when non-blocking, or ETIMEDOUT after
// `ms` (< 0: no limit).
template <typename Ready>
int block_until(Rs *rs, bool nonblocking, Ready ready, int ms = -1) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    progress(rs);
    if (ready()) return 0;
    if (nonblocking) return EAGAIN;
    if (ms >= 0 && Clock::now() >= deadline) return ETIMEDOUT;
    wait_on(rs, 100);
  }
}

}  // namespace vrnic::rdmacm::stream
