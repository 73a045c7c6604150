// What the dpdk module's files share: its sizes and limits, the clock, and the per-packet
// scratch kept in Packet::wire while DPDK owns a packet. Nothing here leaves the module
// (../dpdk_port.h is its only boundary).
#pragma once

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <cstdint>
#include <cstring>

#include "dataplane/neighbor_table.h"
#include "dataplane/packet.h"

namespace vrnic::dpdk {

class DpdkPort;

constexpr uint16_t kQueueDescriptors = 1024;
constexpr unsigned kMbufs = 16383;        // a power of two minus one suits rte_mempool
constexpr unsigned kRxJumboMbufs = 4095;  // of up to 9 KiB each
constexpr unsigned kMbufCache = 256;
constexpr uint16_t kBurst = 32;
constexpr uint32_t kZeroCopyMin = 256;  // smaller payloads cost less to copy than to attach
constexpr uint32_t kMaxPendingPerPeer = 256;
constexpr uint64_t kHousekeepingNs = 50'000'000;  // link state, ARP retries
constexpr uint64_t kPollNs = 200'000;             // no RX interrupt: look this often when idle
constexpr uint64_t kMemifRetryNs = 1'000'000'000;
constexpr uint8_t kTtl = 64;
// Frames a full TX queue had no room for wait here (a slow memif peer, a busy kernel behind
// af_packet), as a NIC's send engine waits for descriptors, rather than being dropped for
// go-back-N to resend. At most two frame mbufs each: half the pool, the rest left to receive
// into (two daemons, each holding mbufs until the other drains its ring, must not starve).
constexpr uint32_t kTxBacklog = 4096;
// A backlog this long stops the worker making new packets (tx_full): what is made meanwhile
// (the rest of a QP's turn, ACKs and read responses to what arrives) still finds room.
constexpr uint32_t kTxBacklogFull = kTxBacklog / 2;
// A queue that has taken nothing for this long has a peer that stopped reading (a stopped
// process on the other end of memif, a wedged device): its backlog is dropped, so that a
// worker waiting for its port to empty (before a QP is destroyed, at exit) is not stuck; and
// so is whatever it is offered after, until it takes a frame again. (A stall timed from each new
// backlog instead held every control operation 200 ms while a stopped peer's QPs resent.)
constexpr uint64_t kTxStallNs = 200'000'000;
constexpr uint16_t kMaxQueues = 8;  // one RX/TX pair per worker

// Whether a packet's payload is in its own bounce buffer (copied out of registered memory).
inline bool bounced(const Packet *pkt) {
  return pkt->payload >= pkt->bounce && pkt->payload < pkt->bounce + kPacketBufferBytes;
}

// Nanoseconds from the TSC: a clock_gettime per burst showed in profiles.
inline uint64_t now_ns() {
  static const double ns_per_cycle = 1e9 / double(rte_get_tsc_hz());
  return uint64_t(double(rte_get_tsc_cycles()) * ns_per_cycle);
}

inline void key_to_gid(IpKey key, uint8_t gid[16]) {
  const uint64_t hi = absl::Uint128High64(key), lo = absl::Uint128Low64(key);
  std::memcpy(gid, &hi, 8);
  std::memcpy(gid + 8, &lo, 8);
}

// Per-packet state while DPDK owns a packet's payload (zero-copy transmit), or while a
// received packet holds its mbuf, kept in Packet::wire.
struct TxScratch {
  rte_mbuf_ext_shared_info shinfo;
  DpdkPort *port;
};
struct RxScratch {
  uint8_t ip[60];  // the IPv4 or IPv6 header as received (the ICRC covers it)
  uint8_t udp[8];
  uint8_t ip_len;
};
static_assert(sizeof(TxScratch) <= sizeof(WireScratch::storage));
static_assert(sizeof(RxScratch) <= sizeof(WireScratch::storage));

template <typename T>
T &scratch(Packet *pkt) {
  return *reinterpret_cast<T *>(pkt->wire.storage);
}

}  // namespace vrnic::dpdk
