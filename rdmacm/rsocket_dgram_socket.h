// A datagram rsocket's state and what its parts share (rsocket_dgram.cpp says how they
// work): the socket (Ds), its receive buffer's accounting, its table of destinations.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <compare>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <list>
#include <map>
#include <vector>

#include "internal.h"

namespace vrnic::rdmacm::dgram {

inline constexpr int kSendSlots = 64;
inline constexpr uint32_t kGrhBytes = 40;
inline constexpr uint32_t kSlotBytes = 4096 + kGrhBytes;
inline constexpr uint8_t kVersion = 1;
inline constexpr int kResolveMs = 5000;

// A socket's receive buffer, as a kernel UDP socket keeps one (issue 53): what it has
// received and not yet read is charged about what the kernel charges a datagram (its
// skb's truesize: measured on loopback, 212,992 bytes hold 256 datagrams of 64 bytes, 92 of
// 1 KiB or 1,472, 25 of 4,000; this charge gives 256, 90 and 26), and a datagram that comes
// while the charges already pass SO_RCVBUF is dropped. Enough receives are posted that the
// NIC never drops before that: one per smallest charge.
inline constexpr size_t kSmallestCharge = 832;
inline size_t charge_of(size_t payload) {
  return std::bit_ceil(payload + 448) + 320;
}
// SO_RCVBUF as the kernel has it: the default (net.core.rmem_default), and a value set kept
// doubled and bounded by net.core.rmem_max (and at least the kernel's 2,304).
inline int sysctl_int(const char *path, int fallback) {
  int v = fallback;
  if (FILE *f = std::fopen(path, "r")) {
    if (std::fscanf(f, "%d", &v) != 1) v = fallback;
    std::fclose(f);
  }
  return v;
}
inline int default_rcvbuf() { return sysctl_int("/proc/sys/net/core/rmem_default", 212992); }
inline int rcvbuf_for(int asked) {
  const int max = sysctl_int("/proc/sys/net/core/rmem_max", 212992);
  return std::max(2304, 2 * std::clamp(asked, 0, max));
}
inline int recv_slots_for(int rcvbuf) {
  return int(std::clamp<size_t>(size_t(rcvbuf) / kSmallestCharge + 1, 64, 4096));
}

// Before every datagram's payload.
struct DgramHeader {
  uint8_t version;
  uint8_t reserved;
  uint16_t port;  // the sender's, network order
};

// An address as the table of destinations keys it: family, port and address bytes, with no
// allocation (a lookup per datagram sent and received).
struct AddrKey {
  uint16_t family = 0;
  uint16_t port = 0;  // network order
  uint8_t addr[16] = {};
  auto operator<=>(const AddrKey &) const = default;
};

// Where datagrams to one address go: its QP, by an address handle of ours -- made when the
// first datagram goes there (what a sender's datagram tells is only its path, `attr`).
struct Dest {
  ibv_ah_attr attr{};
  ibv_ah *ah = nullptr;
  uint32_t qpn = 0;
  uint32_t qkey = RDMA_UDP_QKEY;
  std::list<AddrKey>::iterator used;  // its place in Ds::dest_lru
};
// Destinations a socket remembers. Every datagram names its sender's address (a header any
// sender writes), so a sender could fill a table without bound, and an AH each would take a
// call to vrnicd and the user's AH quota: past this many the least recently used is forgotten
// (its AH destroyed; a later datagram to it finds the path again). A UDP socket keeps none.
inline constexpr size_t kMaxDests = 1024;

struct Ds {
  int domain = AF_INET;
  bool nonblocking = false;
  rdma_event_channel *channel = nullptr;  // its fd is the socket's descriptor
  rdma_cm_id *id = nullptr;               // bound and listening, once bound
  bool bound = false;
  Device *dev = nullptr;
  ibv_comp_channel *cc = nullptr;
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  ibv_mr *mr = nullptr;
  uint32_t qpn = 0;  // the QP's, for the request thread (under g_mu)
  int recv_slots = 0;      // posted receives, made for SO_RCVBUF at the socket's binding
  uint8_t *buf = nullptr;  // recv_slots receive slots, then kSendSlots send slots
  uint32_t max_payload = 0;
  struct Received {
    int slot;
    uint32_t len;  // payload bytes
    sockaddr_storage from;
  };
  std::deque<Received> received;
  size_t received_charge = 0;  // of `received`, against rcvbuf (charge_of)
  uint64_t rcvbuf_drops = 0;   // datagrams dropped for a full receive buffer
  std::vector<int> free_send;
  std::map<AddrKey, Dest> dests;
  std::list<AddrKey> dest_lru;  // least recently used first, for forgetting past kMaxDests
  bool connected = false;
  sockaddr_storage peer{};
  int sndbuf = kSendSlots * int(kSlotBytes), rcvbuf = default_rcvbuf();

  int fd() const { return channel->fd; }
  uint8_t *recv_slot(int i) { return buf + size_t(i) * kSlotBytes; }
  uint8_t *send_slot(int i) { return buf + size_t(recv_slots + i) * kSlotBytes; }
};

// An address as the destinations are keyed.
AddrKey key_of(const sockaddr *sa);
// The destinations (rsocket_dgram_dests.cpp): a datagram's sender, remembered for answering
// it; where a datagram to `to` goes, with its AH (nullptr and *err when nowhere).
void update_dest(Ds *ds, const sockaddr *from, const ibv_wc &wc, const ibv_ah_attr &attr);
Dest *dest_for(Ds *ds, const sockaddr *to, int *err);

}  // namespace vrnic::rdmacm::dgram
