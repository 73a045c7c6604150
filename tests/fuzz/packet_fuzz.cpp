// packet_fuzz: hostile input for a vrnicd udp port. Sends mutated RoCEv2 datagrams (BTH ...
// payload, pad, ICRC) from 127.0.0.3 (and 127.0.0.4) to a running vrnicd's udp port, at a
// bounded rate, from a seeded generator. Run it against a vrnicd built with ASan+UBSan
// (tests/integration/70_fuzz.sh does): the daemon must survive every packet without a
// sanitizer report while real traffic through it goes on.
//
// What is sent. Every packet starts well formed and is then mutated (or not):
//   * requests of every kind to the fuzzer's OWN QPs on the daemon, created here through
//     vrnic's libibverbs on $VRNIC_SOCKET with 127.0.0.3 as their peer: RC with path MTU
//     1024, 4096 (gives up after one RNR retry), 256 (receives and CQs serviced only every
//     100 ms: RNR NAKs, CQ overruns) and 1024 on an SRQ; UC 1024 and 256 (this one left in
//     RTR); UD. Whole multi-packet SEND/WRITE messages (with immediate, with invalidate),
//     READ requests (also bursts beyond max_dest_rd_atomic) and atomics, in PSN order from
//     the PSN the responder expects (learned from its ACKs and NAKs); RETH/AtomicETH aimed at
//     our memory or just outside it, with rkeys of an MR with all rights, a read-only MR, a
//     local-only MR, an MR deregistered and registered again every 10 ms (stale keys too),
//     memory windows of type 1 and 2; DETH with the right Q_Key or not; payloads 0..4096+.
//     QPs that fall into error are reset and brought up again within a millisecond or so;
//   * responses to the requests those QPs send: our RC QPs keep READs, atomics, WRITEs and
//     SENDs outstanding towards 127.0.0.3, where this program listens on the same UDP port;
//     it answers them with read responses, atomic ACKs, ACKs, RNR NAKs and NAKs of every
//     code, at the PSNs the daemon really used -- so the completer runs its real paths;
//   * every opcode of the opcode table and the 256 byte values, with random headers;
//   * the daemon's own packets reflected back at our QPs; packets for QPNs that cannot
//     exist; pure random bytes; oversized datagrams (beyond the daemon's 4352-byte buffer);
//   * CM MADs to QP1 (kMad: build_mad), valid and broken, for vrnicd's connection manager;
//   * 8% of all this from 127.0.0.4, a stranger: RC and UC QPs must ignore it;
// then mutations: bit flips, random bytes, truncation, extension, opcode/PSN/QPN/P_Key/pad/
// TVer/flag changes, RETH va/rkey/length, AtomicETH, AETH syndrome and MSN, DETH, IETH.
// About half of the packets then get a CORRECT ICRC (computed over the IP/UDP pseudo header
// exactly as the daemon rebuilds it, with dataplane/icrc.h and ip_header.h), so they pass the
// ICRC check and reach the transport; the others keep a wrong one (a flipped bit, random, or
// cut off).
//
// Which QPs may receive packets with a correct ICRC. RoCE has no authentication: anyone on
// the path who can compute an ICRC can break any connection (a NAK, a wrong PSN, a bad
// rkey). So packets with a correct ICRC go only to the fuzzer's own QPs, or to QPNs no QP
// can have (below 0x10, or beyond the daemon's table). The valid traffic's QPs (--victim-qpn,
// and the whole range QPNs are handed out from) get well-formed packets with a WRONG ICRC
// only: they must be dropped at the ICRC check without touching the QP. If a mutation moves
// a correct-ICRC packet's QPN onto any other QPN, the packet is re-aimed at an own QP or its
// ICRC is spoiled.
//
// Reproducing. The seed is printed (--seed N repeats the generator). The packets answering
// the daemon depend on what the daemon sends, hence on timing, so a run is not bit-for-bit
// repeatable; for an exact reproducer, --dump FILE writes the last 2048 packets sent (one
// hex line each, with the source socket) when the daemon given by --daemon-pid dies, and
// --replay FILE sends such a file again, one packet at a time, after creating the same own
// QPs (on a freshly started daemon they get the same QPNs; --no-verbs skips them).
//
// Output: progress on stderr every few seconds; at the end key=value lines on stdout
// (packets_sent=..., icrc_valid_sent=..., ...). Exit 0 when every packet was sent, 1 on a
// setup error, 3 when the daemon died (--daemon-pid).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dataplane/icrc.h"
#include "dataplane/ip_header.h"
#include "dataplane/opcode.h"
#include "dataplane/packet.h"
#include "vrnic/wire.h"

namespace {

using namespace vrnic::wire;
using vrnic::opcode_info;
using vrnic::OpcodeInfo;

// ---------------------------------------------------------------------------------------------
// Random numbers: xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t &w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  uint32_t u32() { return uint32_t(next() >> 32); }
  uint32_t below(uint32_t n) { return n ? uint32_t((uint64_t(u32()) * n) >> 32) : 0; }
  uint32_t range(uint32_t lo, uint32_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool pct(uint32_t p) { return below(100) < p; }
  template <typename T, size_t N>
  T pick(const T (&a)[N]) {
    return a[below(N)];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
  std::string target = "127.0.0.1";      // the daemon's udp address
  std::string source = "127.0.0.3";      // our main address: our own QPs' peer
  std::string alt_source = "127.0.0.4";  // a stranger: RC/UC QPs must ignore it
  uint16_t port = 4791;
  uint64_t seed = 0;
  bool seed_given = false;
  uint64_t count = 1000000;
  uint32_t rate = 20000;  // packets per second
  bool verbs = true;
  std::vector<uint32_t> victims;  // QPNs of the valid traffic: wrong-ICRC packets only
  pid_t daemon_pid = 0;
  std::string dump, replay;
  uint32_t replay_delay_us = 1000;
  uint64_t replay_first = 1, replay_last = ~0ull;  // packets of the dump to send (1-based)
  bool probe_truncation = false;
  uint32_t valid_pct = 40;  // base share of packets given a correct ICRC (see Generator::make)
};

void usage(FILE *out) {
  std::fprintf(
      out,
      "usage: packet_fuzz --port UDP_PORT [options]\n"
      "  --target ADDR         the vrnicd udp address (default 127.0.0.1)\n"
      "  --port PORT           its udp port (also ours: the daemon sends to it)\n"
      "  --source ADDR         our address, peer of our own QPs (default 127.0.0.3)\n"
      "  --alt-source ADDR     a second sender no QP knows (default 127.0.0.4)\n"
      "  --seed N              generator seed (default: from the clock; printed)\n"
      "  --count N             packets to send (default 1000000)\n"
      "  --rate PPS            packets per second, at most (default 20000)\n"
      "  --valid-icrc-pct P    base share of packets given a correct ICRC, percent (default 40;\n"
      "                        in-order requests and responses get 20 more): about half overall\n"
      "  --victim-qpn N        a QPN of the valid traffic (repeatable): wrong ICRC only\n"
      "  --no-verbs            no own QPs (needs no $VRNIC_SOCKET)\n"
      "  --daemon-pid PID      stop (status 3) when this process dies; with --dump FILE,\n"
      "                        write the last packets sent there first\n"
      "  --dump FILE           where the last packets go (hex, one per line)\n"
      "  --replay FILE         send the packets of a dump file again and exit\n"
      "  --replay-delay-us N   pause between replayed packets (default 1000)\n"
      "  --replay-range A:B    replay only packets A..B of the file (1-based), to bisect\n"
      "  --probe-truncation    send two UD datagrams to QPN 0 and exit: the largest legitimate\n"
      "                        one, then one 100 bytes longer than the daemon's receive buffer\n"
      "                        whose ICRC is right for the part the buffer holds (it must count\n"
      "                        as malformed)\n");
}

bool parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (!*s || *end || errno) return false;
  *out = v;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Sockets and the ICRC as the daemon computes it

struct Sender {
  int fd = -1;
  uint8_t gid[16] = {};  // IPv4-mapped
  uint16_t port = 0;
};

void gid_of_ipv4(const in_addr &a, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  std::memcpy(gid + 12, &a, 4);
}

bool open_sender(const std::string &addr, uint16_t port, Sender *s, std::string *err) {
  in_addr a;
  if (inet_pton(AF_INET, addr.c_str(), &a) != 1) {
    *err = "not an IPv4 address: " + addr;
    return false;
  }
  s->fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s->fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  int size = 4 << 20;
  setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  setsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  // Don't fragment, as the daemon's pseudo header assumes (IPv4 ID 0, DF set).
  int pmtu = IP_PMTUDISC_DO;
  setsockopt(s->fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr = a;
  if (::bind(s->fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) < 0) {
    *err = "bind " + addr + ":" + std::to_string(port) + ": " + std::strerror(errno);
    return false;
  }
  gid_of_ipv4(a, s->gid);
  s->port = port;
  return true;
}

// The ICRC the daemon expects for `len` transport bytes from `from` to dst:dport: the IPv4
// header as vrnic rebuilds it on receive (ID 0, DF; TTL, TOS, checksums masked anyway).
uint32_t icrc_for(const Sender &from, const uint8_t dst_gid[16], uint16_t dport,
                  const uint8_t *body, size_t len) {
  uint8_t ip[20], udp[8];
  uint16_t udp_len = uint16_t(8 + len + kIcrcBytes);
  vrnic::build_ipv4(ip, from.gid, dst_gid, udp_len, 0, 64, 0, true);
  vrnic::build_udp(udp, from.port, dport, udp_len, 0);
  iovec iov{const_cast<uint8_t *>(body), len};
  return vrnic::roce_icrc(ip, 20, udp, &iov, 1);
}

// ---------------------------------------------------------------------------------------------
// Our own QPs on the daemon (through vrnic's libibverbs)

constexpr uint32_t kPeerQpnBase = 0xf00000;  // the dest QPN our QPs send to: index | base
constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kRegionBytes = 256 << 10;  // all remote rights
constexpr size_t kRoBytes = 16 << 10;       // remote read only
constexpr size_t kLocalBytes = 16 << 10;    // no remote rights
constexpr size_t kChurnBytes = 64 << 10;    // deregistered and registered again, all the time
constexpr size_t kRecvSlot = 8192;          // per receive WQE, in the region's upper half
constexpr uint32_t kRecvDepth = 16;
constexpr uint32_t kSendDepth = 4;
constexpr uint32_t kSrqDepth = 32;
constexpr uint64_t kLocalOpWr = ~0ull;  // wr_id of binds and invalidations (not counted)

struct Fields {
  uint64_t va = 0;
  uint32_t rkey = 0, dma_len = 0;
  uint64_t swap_add = 0, compare = 0;
  uint8_t syndrome = kAethAck | kAethCreditsInvalid;
  uint32_t msn = 0;
  uint64_t orig = 0;
  uint32_t imm = 0, ieth = 0;
  uint32_t qkey = 0, src_qp = 0;
};

struct Template {
  uint8_t opcode = 0;
  uint32_t qpn = 0, psn = 0;
  bool solicited = false, ack_req = false;
  Fields f;
  uint32_t payload_len = 0;
  bool burst = false;  // sent right after its predecessor, unmutated
};

struct SeenRequest {
  uint8_t opcode;
  uint32_t psn;
  uint32_t length;  // READ: DMA length
};

struct OwnQp {
  ibv_qp *qp = nullptr;
  ibv_cq *scq = nullptr, *rcq = nullptr;
  ibv_qp_type type = IBV_QPT_RC;
  ibv_mtu mtu_enum = IBV_MTU_1024;
  uint32_t mtu = 1024;
  uint32_t index = 0;
  uint32_t qpn = 0;
  uint32_t rpsn = 0;  // the PSN we believe its responder expects next
  uint32_t send_outstanding = 0, recv_posted = 0;
  bool suspect = false;    // an error completion: check its state soon
  bool on_srq = false;     // its receives come from the shared receive queue
  bool lazy_recv = false;  // receives refilled, CQs polled only every 100 ms: RNR NAKs
                           // and CQ overruns happen
  uint8_t rnr_retry = 7;
  uint32_t recv_depth = kRecvDepth;
  ibv_qp_state target = IBV_QPS_RTS;  // one UC QP stays in RTR: it only receives
  ibv_mw *mw2 = nullptr;              // RC: a type 2 window bound to this QP (SEND with invalidate)
  uint32_t mw2_rkey = 0;
  std::deque<Template> *plan = nullptr;
  std::vector<SeenRequest> seen;  // the daemon's requests from this QP (a small ring)
  size_t seen_next = 0;
  uint64_t resets = 0;
};

struct Verbs {
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  uint8_t *mem = nullptr;  // region | read-only | local
  ibv_mr *mr = nullptr, *mr_ro = nullptr, *mr_local = nullptr;
  ibv_mw *mw1 = nullptr;       // a type 1 window over the region's first 64 KiB
  ibv_mr *mr_churn = nullptr;  // re-registered every 10 ms: keys go stale under traffic
  uint8_t *churn_mem = nullptr;
  std::vector<uint32_t> stale_keys;
  uint64_t churns = 0;
  ibv_srq *srq = nullptr;
  uint32_t srq_posted = 0;
  std::vector<OwnQp> qps;
  std::vector<std::deque<Template>> plans;
  uint8_t peer_gid[16] = {};
  uint64_t completions_ok = 0, completions_err = 0, resets = 0, verbs_errors = 0;
};

int modify(ibv_qp *qp, ibv_qp_attr &a, int mask) {
  return ibv_modify_qp(qp, &a, mask);
}

// RESET -> INIT -> RTR -> RTS, then receives posted. PSNs start at 0 both ways.
bool bring_up(Verbs &v, OwnQp &q) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  if (modify(q.qp, a, IBV_QP_STATE)) return false;
  a = {};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (q.type == IBV_QPT_UD) {
    a.qkey = kQkey;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags =
        IBV_ACCESS_REMOTE_WRITE |
        (q.type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (modify(q.qp, a, mask)) return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  mask = IBV_QP_STATE;
  if (q.type != IBV_QPT_UD) {
    a.path_mtu = q.mtu_enum;
    a.dest_qp_num = kPeerQpnBase | q.index;
    a.rq_psn = 0;
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, v.peer_gid, 16);
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (q.type == IBV_QPT_RC) {
      a.max_dest_rd_atomic = 4;
      a.min_rnr_timer = 1;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  if (modify(q.qp, a, mask)) return false;
  if (q.target == IBV_QPS_RTR) {
    q.rpsn = 0;
    q.recv_posted = 0;
    q.suspect = false;
    q.plan->clear();
    return true;
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (q.type == IBV_QPT_RC) {
    a.timeout = 12;  // ~17 ms: retransmissions keep coming, each a new request to answer
    a.retry_cnt = 7;
    a.rnr_retry = q.rnr_retry;
    a.max_rd_atomic = 4;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  if (modify(q.qp, a, mask)) return false;
  q.rpsn = 0;
  q.send_outstanding = q.recv_posted = 0;
  if (q.mw2) {
    // Invalidate (a no-op if a peer's SEND with invalidate did it), then bind anew.
    ibv_send_wr inv{}, bind{}, *bad;
    inv.wr_id = bind.wr_id = kLocalOpWr;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.invalidate_rkey = q.mw2_rkey;
    inv.next = &bind;
    bind.opcode = IBV_WR_BIND_MW;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_mw.mw = q.mw2;
    bind.bind_mw.rkey = ibv_inc_rkey(q.mw2_rkey);
    bind.bind_mw.bind_info.mr = v.mr;
    bind.bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(v.mem) + 64 * 1024;
    bind.bind_mw.bind_info.length = 64 * 1024;
    bind.bind_mw.bind_info.mw_access_flags =
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_post_send(q.qp, &inv, &bad) == 0) q.mw2_rkey = bind.bind_mw.rkey;
  }
  q.suspect = false;
  q.plan->clear();
  q.seen.clear();
  q.seen_next = 0;
  return true;
}

void post_receives(Verbs &v, OwnQp &q) {
  while (q.on_srq && v.srq_posted < kSrqDepth) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(v.mem) + kRegionBytes / 2 +
               (v.srq_posted * kRecvSlot) % (kRegionBytes / 2 - kRecvSlot);
    sge.length = kRecvSlot;
    sge.lkey = v.mr->lkey;
    ibv_recv_wr wr{}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_srq_recv(v.srq, &wr, &bad)) return;
    v.srq_posted++;
  }
  while (!q.on_srq && q.recv_posted < q.recv_depth) {
    ibv_sge sge{};
    uint32_t slot = q.index * 64 + q.recv_posted;
    sge.addr = reinterpret_cast<uintptr_t>(v.mem) + kRegionBytes / 2 +
               (slot * kRecvSlot) % (kRegionBytes / 2 - kRecvSlot);
    sge.length = kRecvSlot;
    sge.lkey = v.mr->lkey;
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(q.qp, &wr, &bad)) {
      q.suspect = true;
      return;
    }
    q.recv_posted++;
  }
}

// Keeps requests outstanding towards our address, so that the daemon's completer waits for
// responses we can forge.
void post_sends(Verbs &v, OwnQp &q, Rng &rng) {
  if (q.type == IBV_QPT_UD || q.target != IBV_QPS_RTS) return;
  while (q.send_outstanding < kSendDepth) {
    ibv_sge sge{};
    ibv_send_wr wr{}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    sge.lkey = v.mr->lkey;
    sge.addr = reinterpret_cast<uintptr_t>(v.mem) + rng.below(kRegionBytes / 4) / 8 * 8;
    sge.length = rng.below(3 * q.mtu + 1);
    uint32_t kind = q.type == IBV_QPT_RC ? rng.below(5) : rng.below(2);
    wr.wr.rdma.remote_addr = 0x10000000ull + rng.below(1 << 20);
    wr.wr.rdma.rkey = rng.u32();
    if (v.mr_churn && rng.pct(15)) {  // local memory that may be gone when the data moves
      sge.lkey = rng.pct(80) || v.stale_keys.empty()
                     ? v.mr_churn->lkey
                     : v.stale_keys[rng.below(uint32_t(v.stale_keys.size()))];
      sge.addr = reinterpret_cast<uintptr_t>(v.churn_mem) + rng.below(kChurnBytes / 2) / 8 * 8;
    }
    switch (kind) {
      case 0:
        wr.opcode = IBV_WR_SEND;
        break;
      case 1:
        wr.opcode = IBV_WR_RDMA_WRITE;
        break;
      case 2:
        wr.opcode = IBV_WR_RDMA_READ;
        sge.length = rng.range(1, 4 * q.mtu);
        break;
      case 3:
      case 4:
        wr.opcode = kind == 3 ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        sge.length = 8;
        wr.wr.atomic.remote_addr = 0x10000000ull + rng.below(1 << 20) * 8;
        wr.wr.atomic.rkey = rng.u32();
        wr.wr.atomic.compare_add = rng.next();
        wr.wr.atomic.swap = rng.next();
        break;
    }
    if (ibv_post_send(q.qp, &wr, &bad)) {
      q.suspect = true;
      return;
    }
    q.send_outstanding++;
  }
}

void poll_cqs(Verbs &v, bool all) {
  ibv_wc wc[32];
  for (OwnQp &q : v.qps) {
    if (q.lazy_recv && !all) continue;
    for (ibv_cq *cq : {q.scq, q.rcq}) {
      int n;
      while ((n = ibv_poll_cq(cq, 32, wc)) > 0) {
        for (int i = 0; i < n; i++) {
          bool recv = cq == q.rcq;
          if (recv && q.on_srq && v.srq_posted) v.srq_posted--;
          if (recv && !q.on_srq && q.recv_posted) q.recv_posted--;
          if (!recv && wc[i].wr_id != kLocalOpWr && q.send_outstanding) q.send_outstanding--;
          if (wc[i].status == IBV_WC_SUCCESS) {
            v.completions_ok++;
          } else {
            v.completions_err++;
            q.suspect = true;
          }
        }
      }
      if (n < 0) {
        v.verbs_errors++;
        q.suspect = true;
      }
    }
  }
}

// QPs that fell into ERR (or SQE) are reset and brought up again, so the fuzz goes on
// reaching live QPs.
void churn(Verbs &v) {
  if (v.mr_churn) {
    v.stale_keys.push_back(v.mr_churn->rkey);
    if (v.stale_keys.size() > 8) v.stale_keys.erase(v.stale_keys.begin());
    if (ibv_dereg_mr(v.mr_churn)) v.verbs_errors++;
  }
  // Every other time not page aligned: the partial pages are reached another way.
  size_t skew = v.churns % 2 ? 100 : 0;
  v.mr_churn = ibv_reg_mr(v.pd, v.churn_mem + skew, kChurnBytes - 2 * skew,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  if (!v.mr_churn) v.verbs_errors++;
  v.churns++;
}

void maintain(Verbs &v, Rng &rng, bool check_all) {
  for (OwnQp &q : v.qps) {
    if (!q.suspect && !check_all) continue;
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(q.qp, &a, IBV_QP_STATE, &ia)) {
      v.verbs_errors++;
      continue;
    }
    if (a.qp_state != q.target) {
      poll_cqs(v, true);  // take what the flush completed first
      if (!bring_up(v, q)) {
        v.verbs_errors++;
        continue;
      }
      v.resets++;
      q.resets++;
    }
    q.suspect = false;
  }
  for (OwnQp &q : v.qps) {
    if (!q.lazy_recv || check_all) post_receives(v, q);
    post_sends(v, q, rng);
  }
}

bool setup_verbs(Verbs &v, const Sender &main_sender, std::string *err) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    *err = "no RDMA device (is $VRNIC_SOCKET set to the target vrnicd's socket?)";
    return false;
  }
  v.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!v.ctx) return *err = "ibv_open_device failed", false;
  v.pd = ibv_alloc_pd(v.ctx);
  if (!v.pd) return *err = "ibv_alloc_pd failed", false;
  size_t total = kRegionBytes + kRoBytes + kLocalBytes + kChurnBytes;
  v.mem = static_cast<uint8_t *>(std::aligned_alloc(4096, total));
  if (!v.mem) return *err = "out of memory", false;
  std::memset(v.mem, 0x5a, total);
  v.mr = ibv_reg_mr(v.pd, v.mem, kRegionBytes,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
  v.mr_ro = ibv_reg_mr(v.pd, v.mem + kRegionBytes, kRoBytes, IBV_ACCESS_REMOTE_READ);
  v.mr_local =
      ibv_reg_mr(v.pd, v.mem + kRegionBytes + kRoBytes, kLocalBytes, IBV_ACCESS_LOCAL_WRITE);
  if (!v.mr || !v.mr_ro || !v.mr_local) return *err = "ibv_reg_mr failed", false;
  v.churn_mem = v.mem + kRegionBytes + kRoBytes + kLocalBytes;
  churn(v);
  std::memcpy(v.peer_gid, main_sender.gid, 16);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 64;
  sa.attr.max_sge = 1;
  v.srq = ibv_create_srq(v.pd, &sa);
  if (!v.srq) return *err = "ibv_create_srq failed", false;
  v.mw1 = ibv_alloc_mw(v.pd, IBV_MW_TYPE_1);
  if (!v.mw1) return *err = "ibv_alloc_mw(type 1) failed", false;
  struct Spec {
    ibv_qp_type type;
    ibv_mtu mtu;
    bool srq, lazy;
    uint8_t rnr_retry;
  };
  // RC QPs with different MTUs (the length rules depend on it), one on the SRQ, one whose
  // receives run out now and then (RNR NAKs); UC; UD.
  // One RC QP gives up after one RNR retry (the others retry forever); the second UC QP
  // stays in RTR.
  const Spec specs[] = {
      {IBV_QPT_RC, IBV_MTU_1024, false, false, 7}, {IBV_QPT_RC, IBV_MTU_4096, false, false, 1},
      {IBV_QPT_RC, IBV_MTU_256, false, true, 7},   {IBV_QPT_RC, IBV_MTU_1024, true, false, 7},
      {IBV_QPT_UC, IBV_MTU_1024, false, false, 7}, {IBV_QPT_UC, IBV_MTU_256, false, false, 7},
      {IBV_QPT_UD, IBV_MTU_4096, false, false, 7}};
  v.qps.resize(std::size(specs));
  v.plans.resize(std::size(specs));
  for (size_t i = 0; i < std::size(specs); i++) {
    OwnQp &q = v.qps[i];
    q.index = uint32_t(i);
    q.type = specs[i].type;
    q.mtu_enum = specs[i].mtu;
    q.mtu = 128u << specs[i].mtu;
    q.plan = &v.plans[i];
    q.on_srq = specs[i].srq;
    q.lazy_recv = specs[i].lazy;
    q.rnr_retry = specs[i].rnr_retry;
    if (q.lazy_recv) q.recv_depth = 48;  // more than its CQs hold
    if (i == 5) q.target = IBV_QPS_RTR;
    int depth = q.lazy_recv ? 4 : 256;
    q.scq = ibv_create_cq(v.ctx, depth, nullptr, nullptr, 0);
    q.rcq = ibv_create_cq(v.ctx, depth, nullptr, nullptr, 0);
    if (!q.scq || !q.rcq) return *err = "ibv_create_cq failed", false;
    ibv_qp_init_attr ia{};
    ia.send_cq = q.scq;
    ia.recv_cq = q.rcq;
    ia.qp_type = q.type;
    ia.cap.max_send_wr = 64;
    ia.cap.max_recv_wr = 64;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    if (q.on_srq) ia.srq = v.srq;
    q.qp = ibv_create_qp(v.pd, &ia);
    if (!q.qp) return *err = "ibv_create_qp failed", false;
    q.qpn = q.qp->qp_num;
    if (q.type == IBV_QPT_RC) {
      q.mw2 = ibv_alloc_mw(v.pd, IBV_MW_TYPE_2);
      if (!q.mw2) return *err = "ibv_alloc_mw(type 2) failed", false;
      q.mw2_rkey = q.mw2->rkey;
    }
    if (!bring_up(v, q)) return *err = "bringing QP " + std::to_string(i) + " to RTS failed", false;
  }
  ibv_mw_bind mb{};
  mb.wr_id = kLocalOpWr;
  mb.send_flags = IBV_SEND_SIGNALED;
  mb.bind_info.mr = v.mr;
  mb.bind_info.addr = reinterpret_cast<uintptr_t>(v.mem);
  mb.bind_info.length = 64 * 1024;
  mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_bind_mw(v.qps[0].qp, v.mw1, &mb)) return *err = "ibv_bind_mw failed", false;
  return true;
}

void teardown_verbs(Verbs &v) {
  for (OwnQp &q : v.qps) {
    if (q.qp) ibv_destroy_qp(q.qp);
    if (q.mw2) ibv_dealloc_mw(q.mw2);
    if (q.scq) ibv_destroy_cq(q.scq);
    if (q.rcq) ibv_destroy_cq(q.rcq);
  }
  if (v.mw1) ibv_dealloc_mw(v.mw1);
  if (v.srq) ibv_destroy_srq(v.srq);
  if (v.mr) ibv_dereg_mr(v.mr);
  if (v.mr_ro) ibv_dereg_mr(v.mr_ro);
  if (v.mr_local) ibv_dereg_mr(v.mr_local);
  if (v.mr_churn) ibv_dereg_mr(v.mr_churn);
  if (v.pd) ibv_dealloc_pd(v.pd);
  if (v.ctx) ibv_close_device(v.ctx);
  std::free(v.mem);
}

// ---------------------------------------------------------------------------------------------
// The generator

constexpr size_t kMaxDatagram = 9000;              // more than the daemon's receive buffer (4352)
constexpr uint32_t kQpnLimit = 0x10 + (1u << 20);  // beyond the daemon's QP table

enum Kind : uint8_t {
  kMessage,      // in-order request packets for an own QP
  kResponse,     // read responses, ACKs, NAKs, atomic ACKs for an own RC QP
  kAnyOpcode,    // any opcode byte (table or not) at an own QP, random headers
  kReflect,      // a packet the daemon sent, aimed back at an own QP
  kVictim,       // well formed, at a valid-traffic QPN: wrong ICRC always
  kNoSuchQp,     // QPNs that cannot exist: correct ICRC
  kRandomBytes,  // noise
  kMad,          // a CM MAD (or something like one) to QP1: the connection manager's input
  kKinds,
};
const char *const kKindNames[kKinds] = {"message", "response",     "any_opcode", "reflect",
                                        "victim",  "no_such_qp",   "random_bytes", "mad"};

const uint32_t kInteresting32[] = {
    0,    1,    2,    3,    4,    7,          8,          255,        256,        1023,
    1024, 1025, 4095, 4096, 4097, 0x7fffffff, 0x80000000, 0xfffffff8, 0xfffffffc, 0xffffffff};

const uint8_t kBoundaryBytes[] = {0, 1, 0x7f, 0x80, 0xfe, 0xff};
const uint8_t kTransportBits[] = {0x00, 0x20, 0x40, 0x60, 0x80, 0xa0};
const uint32_t kPsnSteps[] = {1, 2, 0xffffff, 0xfffffe, 0x800000, 0x7fffff};
const uint16_t kPkeys[] = {0, 0x7fff, 0x8000, 0xfffe};
const uint8_t kBth1Bits[] = {0x80, 0x40};

struct Out {
  uint8_t buf[kMaxDatagram + 64];
  size_t len = 0;
  bool alt = false;  // sent from the stranger's socket
  bool icrc_valid = false;
  Kind kind = kMessage;
};

class Generator {
 public:
  Generator(const Options &o, Rng &rng, Verbs *v) : o_(o), rng_(rng), v_(v) {
    for (int op = 0; op < 256; op++)
      if (opcode_info(uint8_t(op)).flags & vrnic::kOpValid) valid_ops_.push_back(uint8_t(op));
    noise_.resize(64 << 10);
    for (auto &b : noise_) b = uint8_t(rng_.u32());
  }

  // One packet: body built, mutated, then the ICRC (valid or not) appended.
  void make(Out &out, const Sender &main_s, const Sender &alt_s, const uint8_t dst_gid[16]) {
    if (burst_qp_ && !burst_qp_->plan->empty() && burst_qp_->plan->front().burst) {
      Template t = burst_qp_->plan->front();
      burst_qp_->plan->pop_front();
      out.kind = kMessage;
      out.alt = false;
      out.len = build(t, out.buf);
      append_icrc(out, true, main_s, dst_gid);
      return;
    }
    burst_qp_ = nullptr;
    Kind kind = choose_kind();
    out.kind = kind;
    out.alt = rng_.pct(8);
    bool mutate_it = true, want_valid = rng_.pct(o_.valid_pct);
    OwnQp *q = nullptr;
    if ((kind == kMessage || kind == kResponse || kind == kAnyOpcode || kind == kReflect) &&
        (!v_ || v_->qps.empty()))
      kind = out.kind = kNoSuchQp;
    switch (kind) {
      case kMessage: {
        q = &v_->qps[rng_.below(uint32_t(v_->qps.size()))];
        if (q->plan->empty()) plan_message(*q);
        Template t = q->plan->front();
        q->plan->pop_front();
        if (!q->plan->empty() && q->plan->front().burst) burst_qp_ = q;
        out.len = build(t, out.buf);
        mutate_it = rng_.pct(55);
        want_valid = rng_.pct(std::min(100u, o_.valid_pct + 20));
        break;
      }
      case kResponse: {
        q = pick_rc();
        if (q->plan->empty() || rng_.pct(30)) {
          std::deque<Template> resp;
          plan_response(*q, resp);
          Template t = resp.front();
          out.len = build(t, out.buf);
          // The rest of a multi-packet read response follows in order most of the time.
          if (resp.size() > 1 && rng_.pct(70)) {
            q->plan->clear();
            for (size_t i = 1; i < resp.size(); i++) q->plan->push_back(resp[i]);
          }
        } else {
          Template t = q->plan->front();
          q->plan->pop_front();
          out.len = build(t, out.buf);
        }
        mutate_it = rng_.pct(50);
        want_valid = rng_.pct(std::min(100u, o_.valid_pct + 20));
        break;
      }
      case kAnyOpcode: {
        q = &v_->qps[rng_.below(uint32_t(v_->qps.size()))];
        Template t = random_template(q->qpn, q->rpsn, q->mtu);
        t.opcode = rng_.pct(60) ? valid_ops_[rng_.below(uint32_t(valid_ops_.size()))]
                                : uint8_t(rng_.u32());
        out.len = build(t, out.buf);
        break;
      }
      case kReflect: {
        q = &v_->qps[rng_.below(uint32_t(v_->qps.size()))];
        if (captured_.empty()) {
          Template t = random_template(q->qpn, q->rpsn, q->mtu);
          out.len = build(t, out.buf);
        } else {
          const std::vector<uint8_t> &c = captured_[rng_.below(uint32_t(captured_.size()))];
          out.len = std::min(c.size(), kMaxDatagram);
          std::memcpy(out.buf, c.data(), out.len);
          if (out.len >= 8) store_be24(out.buf + 5, q->qpn);
        }
        break;
      }
      case kVictim: {
        uint32_t qpn = !o_.victims.empty() && rng_.pct(70)
                           ? o_.victims[rng_.below(uint32_t(o_.victims.size()))]
                           : rng_.range(0x10, 0x40);
        Template t = random_template(qpn, rng_.u32() & kPsnMask, 1024);
        t.opcode = valid_ops_[rng_.below(uint32_t(valid_ops_.size()))];
        out.len = build(t, out.buf);
        mutate_it = rng_.pct(30);
        want_valid = false;
        break;
      }
      case kNoSuchQp: {
        uint32_t qpn = rng_.pct(50) ? rng_.below(0x10) : rng_.range(kQpnLimit, kQpnMask);
        Template t = random_template(qpn, rng_.u32() & kPsnMask, 1024);
        t.opcode = rng_.pct(80) ? valid_ops_[rng_.below(uint32_t(valid_ops_.size()))]
                                : uint8_t(rng_.u32());
        out.len = build(t, out.buf);
        mutate_it = rng_.pct(30);
        want_valid = true;
        break;
      }
      case kRandomBytes: {
        out.len = rng_.pct(80) ? rng_.below(80) : rng_.below(kMaxDatagram - 4);
        fill_noise(out.buf, out.len);
        mutate_it = false;
        break;
      }
      case kMad:
        out.len = build_mad(out.buf);
        mutate_it = rng_.pct(15);
        want_valid = rng_.pct(90);
        break;
      case kKinds:
        break;
    }
    if (mutate_it) mutate(out.buf, out.len, q);
    append_icrc(out, want_valid, out.alt ? alt_s : main_s, dst_gid);
  }

  // What the daemon sent to us: learn PSNs, remember requests to answer, keep seeds.
  void observe(const uint8_t *p, size_t len) {
    stats_daemon_packets++;
    if (len < Bth::kSize + kIcrcBytes) return;
    uint8_t op = p[0];
    uint32_t dest = load_be24(p + 5), psn = load_be24(p + 9);
    const OpcodeInfo &info = opcode_info(op);
    if (captured_.size() < 64) {
      captured_.emplace_back(p, p + len - kIcrcBytes);
    } else if (rng_.pct(5)) {
      captured_[rng_.below(64)].assign(p, p + len - kIcrcBytes);
    }
    if (!v_ || (dest & ~0xffu) != kPeerQpnBase || (dest & 0xff) >= v_->qps.size()) return;
    OwnQp &q = v_->qps[dest & 0xff];
    if (info.flags & vrnic::kOpRequest) {
      stats_daemon_requests++;
      // Answer the last packet of a message (or READ / atomic requests).
      if (!(info.flags & vrnic::kOpLast)) return;
      SeenRequest s{op, psn, 0};
      if ((info.flags & vrnic::kOpReth) && len >= info.header_bytes + kIcrcBytes)
        s.length = load_be32(p + info.reth_off + 12);
      if (q.seen.size() < 16) {
        q.seen.push_back(s);
      } else {
        q.seen[q.seen_next++ % 16] = s;
      }
      return;
    }
    // A response from the responder of one of our QPs: tells where its PSN stands.
    if ((info.flags & vrnic::kOpAeth) && len >= info.header_bytes + kIcrcBytes) {
      uint8_t syn = p[info.aeth_off];
      if (aeth_kind(syn) == kAethAck) {
        stats_daemon_acks++;
        if (op == make_opcode(kRc, kAcknowledge)) q.rpsn = psn_add(psn, 1);
      } else if (aeth_kind(syn) == kAethRnrNak) {
        stats_daemon_rnr_naks++;
        q.rpsn = psn;
      } else {
        stats_daemon_naks++;
        if (syn == kNakPsnSeqError) q.rpsn = psn;
      }
    } else {
      stats_daemon_other++;
    }
  }

  uint64_t stats_daemon_packets = 0, stats_daemon_requests = 0, stats_daemon_acks = 0,
           stats_daemon_naks = 0, stats_daemon_rnr_naks = 0, stats_daemon_other = 0;
  uint64_t stats_retargeted = 0, stats_spoiled = 0, stats_truncated_valid = 0;
  uint32_t last_comm_id_ = 0;

 private:
  Kind choose_kind() {
    uint32_t r = rng_.below(100);
    if (r < 38) return kMessage;
    if (r < 52) return kResponse;
    if (r < 62) return kAnyOpcode;
    if (r < 70) return kReflect;
    if (r < 82) return kVictim;
    if (r < 88) return kNoSuchQp;
    if (r < 94) return kMad;
    return kRandomBytes;
  }

  OwnQp *pick_rc() {
    for (int tries = 0; tries < 8; tries++) {
      OwnQp &q = v_->qps[rng_.below(uint32_t(v_->qps.size()))];
      if (q.type == IBV_QPT_RC) return &q;
    }
    return &v_->qps[0];
  }

  void fill_noise(uint8_t *p, size_t n) {
    size_t off = rng_.below(uint32_t(noise_.size()));
    while (n) {
      size_t k = std::min(n, noise_.size() - off);
      std::memcpy(p, noise_.data() + off, k);
      p += k;
      n -= k;
      off = 0;
    }
  }

  uint64_t any_va() {
    uint64_t base = reinterpret_cast<uintptr_t>(v_ ? v_->mem : nullptr);
    switch (rng_.below(8)) {
      case 0:
        return 0;
      case 1:
        return ~0ull;
      case 2:
        return base + kRegionBytes - rng_.below(16);
      case 3:
        return base - rng_.below(64);
      case 4:
        return 0x8000000000000000ull;
      case 5:
        return rng_.next();
      default:
        return base + rng_.below(kRegionBytes + 64);
    }
  }
  uint32_t any_rkey() {
    if (!v_) return rng_.u32();
    switch (rng_.below(9)) {
      case 0:
        return v_->mr_ro->rkey;
      case 1:
        return v_->mr_local->rkey;
      case 2:
        return v_->mr->rkey ^ (1u << rng_.below(32));
      case 3:
        return rng_.u32();
      case 4:
        return rng_.pct(50) ? v_->mw1->rkey
               : v_->stale_keys.empty() || rng_.pct(50)
                   ? (v_->mr_churn ? v_->mr_churn->rkey : 0)
                   : v_->stale_keys[rng_.below(uint32_t(v_->stale_keys.size()))];
      case 5:
      case 6: {  // a type 2 window: bound to one QP, maybe not the one the packet reaches
        const OwnQp &q = v_->qps[rng_.below(uint32_t(v_->qps.size()))];
        return q.mw2 ? q.mw2_rkey : v_->mr->rkey;
      }
      default:
        return v_->mr->rkey;
    }
  }

  Template random_template(uint32_t qpn, uint32_t psn, uint32_t mtu) {
    Template t;
    t.qpn = qpn;
    t.psn = rng_.pct(50) ? psn : rng_.u32() & kPsnMask;
    t.solicited = rng_.pct(20);
    t.ack_req = rng_.pct(50);
    t.f.va = any_va();
    t.f.rkey = any_rkey();
    t.f.dma_len = rng_.pct(50) ? rng_.below(4 * mtu + 1) : rng_.pick(kInteresting32);
    t.f.swap_add = rng_.next();
    t.f.compare = rng_.next();
    t.f.syndrome = uint8_t(rng_.u32());
    t.f.msn = rng_.u32() & 0xffffff;
    t.f.orig = rng_.next();
    t.f.imm = rng_.u32();
    t.f.ieth = any_rkey();
    t.f.qkey = rng_.pct(70) ? kQkey : rng_.u32();
    t.f.src_qp = rng_.u32() & kQpnMask;
    t.payload_len = rng_.pct(50) ? rng_.below(mtu + 1) : rng_.below(4097);
    t.opcode = 0;
    return t;
  }

  // A whole message at the PSNs the responder expects, queued for the next packets.
  void plan_message(OwnQp &q) {
    Template base;
    base.qpn = q.qpn;
    base.f.qkey = kQkey;
    if (q.type == IBV_QPT_UD) {
      Template t = base;
      t.opcode = make_opcode(kUd, rng_.pct(50) ? kSendOnly : kSendOnlyImm);
      t.psn = rng_.u32() & kPsnMask;
      t.f.qkey = rng_.pct(85) ? kQkey : rng_.u32();
      t.f.src_qp = rng_.u32() & kQpnMask;
      t.f.imm = rng_.u32();
      t.payload_len = rng_.pct(90) ? rng_.below(q.mtu + 1) : rng_.below(4097);
      t.solicited = rng_.pct(20);
      q.plan->push_back(t);
      return;
    }
    Transport tr = q.type == IBV_QPT_RC ? kRc : kUc;
    uint32_t kind = q.type == IBV_QPT_RC ? rng_.below(100) : rng_.below(70);
    uint32_t len = rng_.pct(40) ? rng_.below(q.mtu + 1) : rng_.below(4 * q.mtu + 1);
    uint32_t n = len ? (len + q.mtu - 1) / q.mtu : 1;
    uint32_t psn = q.rpsn;
    uint64_t base_va = reinterpret_cast<uintptr_t>(v_->mem);
    if (kind < 70) {  // SEND or WRITE, possibly multi-packet
      bool send = kind < 40;
      uint32_t msg_va_off =
          len < kRegionBytes / 2 ? rng_.below(uint32_t(kRegionBytes / 2 - len)) : 0;
      uint32_t variant = rng_.below(3);  // plain, with immediate, with invalidate (RC SEND)
      for (uint32_t i = 0; i < n; i++) {
        Template t = base;
        bool first = i == 0, last = i + 1 == n;
        Opcode op;
        if (send) {
          if (first && last)
            op = variant == 1 ? kSendOnlyImm : variant == 2 && tr == kRc ? kSendOnlyInv : kSendOnly;
          else if (first)
            op = kSendFirst;
          else if (last)
            op = variant == 1 ? kSendLastImm : variant == 2 && tr == kRc ? kSendLastInv : kSendLast;
          else
            op = kSendMiddle;
        } else {
          if (first && last)
            op = variant == 1 ? kWriteOnlyImm : kWriteOnly;
          else if (first)
            op = kWriteFirst;
          else if (last)
            op = variant == 1 ? kWriteLastImm : kWriteLast;
          else
            op = kWriteMiddle;
        }
        t.opcode = make_opcode(tr, op);
        t.psn = psn_add(psn, i);
        t.ack_req = last || rng_.pct(10);
        t.solicited = last && rng_.pct(30);
        t.f.va = rng_.pct(85) ? base_va + msg_va_off : any_va();
        t.f.rkey = rng_.pct(75) ? v_->mr->rkey : q.mw2 && rng_.pct(50) ? q.mw2_rkey : any_rkey();
        t.f.dma_len = rng_.pct(90) ? len : rng_.pick(kInteresting32);
        t.f.imm = rng_.u32();
        t.f.ieth = q.mw2 && rng_.pct(60) ? q.mw2_rkey : any_rkey();
        t.payload_len = last ? len - (n - 1) * q.mtu : q.mtu;
        q.plan->push_back(t);
      }
      q.rpsn = psn_add(psn, n);
    } else if (kind < 75) {  // a burst of READs: more than max_dest_rd_atomic at once
      uint32_t count = rng_.range(3, 8);
      for (uint32_t i = 0; i < count; i++) {
        Template t = base;
        t.opcode = make_opcode(kRc, kReadRequest);
        t.psn = psn;
        t.f.va = base_va + rng_.below(kRegionBytes - 4 * q.mtu);
        t.f.rkey = v_->mr->rkey;
        t.f.dma_len = rng_.range(1, 4 * q.mtu);
        t.burst = i > 0;
        q.plan->push_back(t);
        psn = psn_add(psn, (t.f.dma_len + q.mtu - 1) / q.mtu);
      }
      q.rpsn = psn;
    } else if (kind < 88) {  // READ
      Template t = base;
      t.opcode = make_opcode(kRc, kReadRequest);
      t.psn = psn;
      t.ack_req = true;
      t.f.va = rng_.pct(80) ? base_va + rng_.below(kRegionBytes - len + 1) : any_va();
      t.f.rkey = rng_.pct(70) ? v_->mr->rkey : rng_.pct(50) ? v_->mr_ro->rkey : any_rkey();
      if (v_->mr_churn && rng_.pct(15)) {
        t.f.rkey = v_->mr_churn->rkey;
        t.f.va = reinterpret_cast<uintptr_t>(v_->churn_mem) + rng_.below(kChurnBytes - len + 1);
      }
      t.f.dma_len = rng_.pct(90) ? len : rng_.pick(kInteresting32);
      t.payload_len = 0;
      q.plan->push_back(t);
      q.rpsn = psn_add(psn, t.f.dma_len ? (t.f.dma_len + q.mtu - 1) / q.mtu : 1);
    } else {  // atomics
      Template t = base;
      t.opcode = make_opcode(kRc, rng_.pct(50) ? kCompareSwap : kFetchAdd);
      t.psn = psn;
      t.ack_req = true;
      t.f.va = rng_.pct(80) ? base_va + rng_.below(kRegionBytes / 8) * 8 : any_va();
      t.f.rkey = rng_.pct(85) ? v_->mr->rkey : any_rkey();
      t.f.swap_add = rng_.next();
      t.f.compare = rng_.pct(50) ? 0x5a5a5a5a5a5a5a5aull : rng_.next();
      t.payload_len = 0;
      q.plan->push_back(t);
      q.rpsn = psn_add(psn, 1);
    }
  }

  // Answers to a request the daemon sent from q (or to a PSN made up, if none seen yet).
  void plan_response(OwnQp &q, std::deque<Template> &out) {
    SeenRequest s{make_opcode(kRc, kSendOnly), rng_.u32() & kPsnMask, 0};
    if (!q.seen.empty()) s = q.seen[rng_.below(uint32_t(q.seen.size()))];
    const OpcodeInfo &info = opcode_info(s.opcode);
    Template base;
    base.qpn = q.qpn;
    base.f.msn = rng_.u32() & 0xffffff;
    base.f.syndrome = ack_syndrome();
    if (info.flags & vrnic::kOpReadRequest) {
      uint32_t len = s.length, n = len ? (len + q.mtu - 1) / q.mtu : 1;
      n = std::min<uint32_t>(n, 64);
      for (uint32_t i = 0; i < n; i++) {
        Template t = base;
        bool first = i == 0, last = i + 1 == n;
        t.opcode = make_opcode(kRc, first && last ? kReadResponseOnly
                                    : first       ? kReadResponseFirst
                                    : last        ? kReadResponseLast
                                                  : kReadResponseMiddle);
        t.psn = psn_add(s.psn, i);
        t.f.syndrome = rng_.pct(90) ? uint8_t(kAethAck | kAethCreditsInvalid) : ack_syndrome();
        t.payload_len = last ? len - std::min(len, (n - 1) * q.mtu) : q.mtu;
        if (rng_.pct(5)) t.payload_len = rng_.below(4097);
        out.push_back(t);
      }
      return;
    }
    Template t = base;
    t.psn = rng_.pct(85) ? s.psn : psn_add(s.psn, rng_.range(0, 4) - 2);
    if (info.flags & vrnic::kOpAtomic) {
      t.opcode = make_opcode(kRc, rng_.pct(85) ? kAtomicAcknowledge : kAcknowledge);
      t.f.orig = rng_.next();
    } else {
      t.opcode = make_opcode(kRc, rng_.pct(90) ? kAcknowledge : kAtomicAcknowledge);
    }
    out.push_back(t);
  }

  uint8_t ack_syndrome() {
    uint32_t r = rng_.below(100);
    if (r < 60) return uint8_t(kAethAck | rng_.below(32));
    if (r < 70) return uint8_t(kAethRnrNak | rng_.range(1, 6));  // short RNR timers only
    if (r < 80) return kNakPsnSeqError;
    if (r < 92) return uint8_t(kNakInvalidRequest + rng_.below(4));
    return uint8_t(rng_.u32());
  }

  // The body: BTH, the opcode's extension headers, payload, pad. Returns its length.
  size_t build(const Template &t, uint8_t *b) {
    const OpcodeInfo &info = opcode_info(t.opcode);
    size_t hdr = (info.flags & vrnic::kOpValid) ? info.header_bytes : 12 + 4 * rng_.below(13);
    uint32_t payload = std::min<uint32_t>(t.payload_len, uint32_t(kMaxDatagram - 64 - hdr));
    uint8_t pad = uint8_t(-payload & 3);
    b[0] = t.opcode;
    b[1] = uint8_t((t.solicited ? 0x80 : 0) | 0x40 | pad << 4);
    store_be16(b + 2, kDefaultPkey);
    b[4] = 0;
    store_be24(b + 5, t.qpn & kQpnMask);
    b[8] = t.ack_req ? 0x80 : 0;
    store_be24(b + 9, t.psn & kPsnMask);
    if (info.flags & vrnic::kOpValid) {
      const Fields &f = t.f;
      if (info.flags & vrnic::kOpDeth)
        reinterpret_cast<Deth *>(b + info.deth_off)->set(f.qkey, f.src_qp);
      if (info.flags & vrnic::kOpReth)
        reinterpret_cast<Reth *>(b + info.reth_off)->set(f.va, f.rkey, f.dma_len);
      if (info.flags & vrnic::kOpAtomicEth)
        reinterpret_cast<AtomicEth *>(b + info.atomic_eth_off)
            ->set(f.va, f.rkey, f.swap_add, f.compare);
      if (info.flags & vrnic::kOpAeth)
        reinterpret_cast<Aeth *>(b + info.aeth_off)->set(f.syndrome, f.msn);
      if (info.flags & vrnic::kOpAtomicAckEth)
        reinterpret_cast<AtomicAckEth *>(b + info.atomic_ack_off)->set(f.orig);
      if (info.flags & vrnic::kOpImm) reinterpret_cast<ImmDt *>(b + info.imm_off)->set_raw(f.imm);
      if (info.flags & vrnic::kOpIeth) reinterpret_cast<Ieth *>(b + info.ieth_off)->set(f.ieth);
    } else {
      fill_noise(b + 12, hdr - 12);
    }
    fill_noise(b + hdr, payload);
    std::memset(b + hdr + payload, 0, pad);
    return hdr + payload + pad;
  }

  // A UD SEND to QP1 carrying a CM MAD: mostly a valid header (base 1, class 0x07 version 2,
  // SEND) with an attribute of ch. 12 (REQ ... SIDR_REP, LAP/APR) or any, and data that is
  // random or a plausible message -- a REQ for a random service ID, or a reply naming a random
  // or recently used communication ID; the Q_Key mostly QP1's; sometimes not 256 bytes. The
  // daemon's CM must answer what deserves an answer (a REJ for a REQ nobody listens to) and
  // count and drop the rest.
  size_t build_mad(uint8_t *b) {
    Template t;
    t.opcode = make_opcode(kUd, kSendOnly);
    t.qpn = 1;
    t.psn = rng_.u32() & kPsnMask;
    t.f.qkey = rng_.pct(90) ? 0x80010000u : rng_.u32();
    t.f.src_qp = rng_.pct(90) ? 1 : rng_.u32() & kQpnMask;
    t.payload_len = rng_.pct(92) ? 256 : rng_.below(600);
    size_t len = build(t, b);
    if (t.payload_len < 24) return len;
    uint8_t *mad = b + opcode_info(t.opcode).header_bytes;
    if (rng_.pct(85)) {
      mad[0] = 1;
      mad[1] = 0x07;
      mad[2] = rng_.pct(95) ? 2 : uint8_t(rng_.below(4));
      mad[3] = rng_.pct(95) ? 0x03 : uint8_t(rng_.u32());
      std::memset(mad + 4, 0, 4);
      const uint16_t attr = rng_.pct(90) ? uint16_t(0x10 + rng_.below(11)) : uint16_t(rng_.u32());
      store_be16(mad + 16, attr);
      if (t.payload_len >= 256 && rng_.pct(50)) {
        uint8_t *data = mad + 24;
        // Communication IDs seen or guessed; a REQ's transport RC or UC, a valid IP header.
        store_be32(data + 0, rng_.pct(50) ? last_comm_id_ : rng_.u32());
        store_be32(data + 4, rng_.pct(50) ? last_comm_id_ + 1 : rng_.u32());
        if (attr == 0x10) {
          store_be32(data + 8, 0);
          store_be32(data + 12, 0x01060000u | rng_.below(65536));  // TCP port space
          data[43] = uint8_t(rng_.below(2) << 1);
          data[140] = 0;
          data[141] = 0x40;
        }
        last_comm_id_ = rng_.u32();
      }
    }
    return len;
  }

  // Field-aware and blind mutations, 1 to 8 of them.
  void mutate(uint8_t *b, size_t &len, OwnQp *q) {
    uint32_t n = rng_.pct(60) ? 1 : rng_.range(2, 8);
    for (uint32_t m = 0; m < n; m++) {
      const OpcodeInfo &info = opcode_info(len ? b[0] : 0);
      bool have_hdr = (info.flags & vrnic::kOpValid) && len >= info.header_bytes;
      switch (rng_.below(25)) {
        case 0:
        case 1:  // flip a bit (mostly in the headers)
          if (len) {
            size_t at = rng_.pct(70) ? rng_.below(uint32_t(std::min<size_t>(len, 64)))
                                     : rng_.below(uint32_t(len));
            b[at] ^= uint8_t(1u << rng_.below(8));
          }
          break;
        case 2:  // a random or boundary byte
          if (len)
            b[rng_.below(uint32_t(std::min<size_t>(len, 64)))] =
                rng_.pct(50) ? uint8_t(rng_.u32()) : rng_.pick(kBoundaryBytes);
          break;
        case 3:  // truncate
          len = rng_.pct(50) ? rng_.below(uint32_t(std::min<size_t>(len, 64)) + 1)
                             : rng_.below(uint32_t(len) + 1);
          break;
        case 4: {  // extend
          size_t add = rng_.pct(70) ? rng_.range(1, 16) : rng_.below(uint32_t(kMaxDatagram - len));
          add = std::min(add, kMaxDatagram - len);
          fill_noise(b + len, add);
          len += add;
          break;
        }
        case 5:  // opcode: another of the table, or any byte
          if (len)
            b[0] = rng_.pct(60) ? valid_ops_[rng_.below(uint32_t(valid_ops_.size()))]
                                : uint8_t(rng_.u32());
          break;
        case 6:  // opcode: same operation, another transport
          if (len) b[0] = uint8_t((b[0] & 0x1f) | rng_.pick(kTransportBits));
          break;
        case 7:  // PSN
          if (len >= 12) {
            uint32_t psn = load_be24(b + 9);
            uint32_t d = rng_.pick(kPsnSteps);
            store_be24(b + 9, rng_.pct(70) ? psn_add(psn, d) : rng_.u32() & kPsnMask);
          }
          break;
        case 8:  // QPN (a QPN outside our own is re-aimed or spoiled later)
          if (len >= 8) {
            uint32_t qpn = rng_.pct(60) && v_ && !v_->qps.empty()
                               ? v_->qps[rng_.below(uint32_t(v_->qps.size()))].qpn
                               : rng_.u32() & kQpnMask;
            store_be24(b + 5, qpn);
          }
          break;
        case 9:  // P_Key
          if (len >= 4) store_be16(b + 2, rng_.pct(50) ? uint16_t(rng_.u32()) : rng_.pick(kPkeys));
          break;
        case 10:  // pad count
          if (len >= 2) b[1] = uint8_t((b[1] & ~0x30) | rng_.below(4) << 4);
          break;
        case 11:  // TVer
          if (len >= 2) b[1] = uint8_t((b[1] & ~0x0f) | rng_.range(1, 15));
          break;
        case 12:  // SE, MigReq, AckReq, FECN/BECN/reserved bits
          if (len >= 9) {
            b[1] ^= uint8_t(rng_.pick(kBth1Bits));
            b[4] = uint8_t(rng_.u32());
            b[8] ^= uint8_t(rng_.pct(50) ? 0x80 : rng_.u32() & 0x7f);
          }
          break;
        case 13:  // RETH va
          if (have_hdr && (info.flags & vrnic::kOpReth)) store_be64(b + info.reth_off, any_va());
          break;
        case 14:  // RETH rkey
          if (have_hdr && (info.flags & vrnic::kOpReth))
            store_be32(b + info.reth_off + 8, any_rkey());
          break;
        case 15:  // RETH DMA length
          if (have_hdr && (info.flags & vrnic::kOpReth))
            store_be32(b + info.reth_off + 12,
                       rng_.pct(50) ? rng_.pick(kInteresting32) : rng_.u32() >> rng_.below(32));
          break;
        case 16:  // AtomicETH: va (misaligned, outside), rkey, operands
          if (have_hdr && (info.flags & vrnic::kOpAtomicEth)) {
            uint8_t *e = b + info.atomic_eth_off;
            switch (rng_.below(3)) {
              case 0:
                store_be64(e, any_va() + rng_.below(8));
                break;
              case 1:
                store_be32(e + 8, any_rkey());
                break;
              default:
                store_be64(e + 12 + 8 * rng_.below(2), rng_.next());
                break;
            }
          }
          break;
        case 17:  // AETH syndrome, MSN
          if (have_hdr && (info.flags & vrnic::kOpAeth)) {
            if (rng_.pct(70))
              b[info.aeth_off] = ack_syndrome();
            else
              store_be24(b + info.aeth_off + 1, rng_.u32() & 0xffffff);
          }
          break;
        case 18:  // DETH Q_Key, source QP
          if (have_hdr && (info.flags & vrnic::kOpDeth)) {
            if (rng_.pct(50))
              store_be32(b + info.deth_off, rng_.pct(50) ? kQkey ^ 1 : rng_.u32());
            else
              store_be24(b + info.deth_off + 5, rng_.u32() & kQpnMask);
          }
          break;
        case 19:  // IETH rkey
          if (have_hdr && (info.flags & vrnic::kOpIeth)) store_be32(b + info.ieth_off, any_rkey());
          break;
        case 20:  // payload length: cut or grow by a little (keeps or breaks the 4-byte pad rule)
          if (len > 12) {
            if (rng_.pct(50)) {
              len -= std::min<size_t>(len - 12, rng_.range(1, 8));
            } else {
              size_t add = std::min<size_t>(rng_.range(1, 8), kMaxDatagram - len);
              fill_noise(b + len, add);
              len += add;
            }
          }
          break;
        case 21:  // copy a chunk within the packet
          if (len > 8) {
            uint32_t from = rng_.below(uint32_t(len)), to = rng_.below(uint32_t(len));
            uint32_t k = rng_.below(uint32_t(len - std::max(from, to)) + 1);
            std::memmove(b + to, b + from, k);
          }
          break;
        case 22:  // an extension header's bytes at random
          if (have_hdr && info.header_bytes > 12)
            fill_noise(b + 12, rng_.below(info.header_bytes - 12u) + 1);
          break;
        case 23:  // the PSN the responder expects, exactly (in-window garbage goes deeper)
          if (len >= 12 && q) store_be24(b + 9, q->rpsn);
          break;
        case 24: {  // a length at an edge: the daemon's receive buffer, the largest MTU
          size_t total = rng_.pct(60) ? vrnic::kPacketBufferBytes - rng_.below(16)
                                      : vrnic::kMaxPayload + rng_.range(12, 80);
          size_t want = total - kIcrcBytes;  // the ICRC is appended after the body
          if (want > len) fill_noise(b + len, want - len);
          len = want;
          break;
        }
      }
    }
  }

  bool qpn_may_take_valid_icrc(uint32_t qpn) const {
    if (qpn < 0x10 || qpn >= kQpnLimit) return true;  // no QP can have it
    if (!v_) return false;
    for (const OwnQp &q : v_->qps)
      if (q.qpn == qpn) return true;
    return false;
  }

  void append_icrc(Out &out, bool want_valid, const Sender &from, const uint8_t dst_gid[16]) {
    uint8_t *b = out.buf;
    size_t len = out.len;
    // A packet with a correct ICRC must not reach a QP of the valid traffic.
    if (want_valid && len + kIcrcBytes >= Bth::kSize + kIcrcBytes &&
        !qpn_may_take_valid_icrc(load_be24(b + 5))) {
      if (v_ && !v_->qps.empty() && rng_.pct(50)) {
        store_be24(b + 5, v_->qps[rng_.below(uint32_t(v_->qps.size()))].qpn);
        stats_retargeted++;
      } else {
        want_valid = false;
        stats_spoiled++;
      }
    }
    // Longer than the daemon's receive buffer, and yet a correct ICRC where the kernel
    // cuts the datagram (recvmsg truncates to the buffer): does the daemon notice the cut?
    if (want_valid && len >= Bth::kSize && rng_.pct(2)) {
      size_t cut = vrnic::kPacketBufferBytes - kIcrcBytes;
      if (len < cut) fill_noise(b + len, cut - len);
      vrnic::store_icrc(b + cut, icrc_for(from, dst_gid, o_.port, b, cut));
      out.len = vrnic::kPacketBufferBytes + rng_.range(1, 4000);
      fill_noise(b + vrnic::kPacketBufferBytes, out.len - vrnic::kPacketBufferBytes);
      out.icrc_valid = true;
      stats_truncated_valid++;
      return;
    }
    uint32_t icrc = icrc_for(from, dst_gid, o_.port, b, len);
    if (want_valid) {
      vrnic::store_icrc(b + len, icrc);
      out.len = len + kIcrcBytes;
      out.icrc_valid = true;
      return;
    }
    out.icrc_valid = false;
    switch (rng_.below(5)) {
      case 0:
      case 1:  // one bit off
        vrnic::store_icrc(b + len, icrc ^ (1u << rng_.below(32)));
        out.len = len + kIcrcBytes;
        break;
      case 2:                                         // random
        vrnic::store_icrc(b + len, rng_.u32() | 1u);  // never icrc by chance: differs somewhere
        if (vrnic::load_icrc(b + len) == icrc) b[len] ^= 2;
        out.len = len + kIcrcBytes;
        break;
      case 3:  // the right ICRC, then bytes after it
        vrnic::store_icrc(b + len, icrc);
        out.len = len + kIcrcBytes + rng_.range(1, 8);
        fill_noise(b + len + kIcrcBytes, out.len - len - kIcrcBytes);
        break;
      default:  // the right ICRC, cut short
        vrnic::store_icrc(b + len, icrc);
        out.len = len + rng_.below(4);
        break;
    }
  }

  const Options &o_;
  Rng &rng_;
  Verbs *v_;
  std::vector<uint8_t> valid_ops_;
  std::vector<uint8_t> noise_;
  std::vector<std::vector<uint8_t>> captured_;
  OwnQp *burst_qp_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Recent packets, for a reproducer when the daemon dies

class History {
 public:
  explicit History(size_t n) : ring_(n) {}
  void add(const Out &o) {
    Entry &e = ring_[next_++ % ring_.size()];
    e.alt = o.alt;
    e.bytes.assign(o.buf, o.buf + o.len);
  }
  // The own QPNs come first, so that a replay can re-aim the packets at the QPs it makes.
  bool write(const std::string &path, const Verbs *v) const {
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    std::fprintf(f, "own-qpns");
    if (v)
      for (const OwnQp &q : v->qps) std::fprintf(f, " %u", q.qpn);
    std::fprintf(f, "\n");
    size_t n = std::min(next_, ring_.size());
    for (size_t i = next_ - n; i < next_; i++) {
      const Entry &e = ring_[i % ring_.size()];
      std::fprintf(f, "%s ", e.alt ? "alt" : "main");
      for (uint8_t c : e.bytes) std::fprintf(f, "%02x", c);
      std::fprintf(f, "\n");
    }
    return std::fclose(f) == 0;
  }

 private:
  struct Entry {
    bool alt = false;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> ring_;
  size_t next_ = 0;
};

bool daemon_alive(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return false;
  size_t p = s.rfind(')');
  return p != std::string::npos && p + 2 < s.size() && s[p + 2] != 'Z' && s[p + 2] != 'X';
}

// Sends a dump again. Packets for the QPs the fuzzer had then go to the QPs it has now (the
// i-th to the i-th), with their ICRC made right again if it was right; between packets the
// QPs are serviced as in a fuzz run (receives reposted, QPs in error brought up again).
int replay(const Options &o, Sender &main_s, Sender &alt_s, const sockaddr_in &dst,
           const uint8_t dst_gid[16], Verbs *v, Rng &rng) {
  std::ifstream in(o.replay);
  if (!in) {
    std::fprintf(stderr, "packet_fuzz: cannot read %s\n", o.replay.c_str());
    return 1;
  }
  std::string line;
  uint64_t n = 0, index = 0, reaimed = 0;
  std::vector<uint32_t> old_qpns;
  while (std::getline(in, line)) {  // "main|alt HEX" (HEX may be empty: a 0-byte datagram)
    size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string who = line.substr(0, sp), hex = line.substr(sp + 1);
    if (who == "own-qpns") {
      std::istringstream qs(hex);
      for (uint32_t q; qs >> q;) old_qpns.push_back(q);
      continue;
    }
    index++;
    if (index < o.replay_first || index > o.replay_last) continue;
    std::vector<uint8_t> b(hex.size() / 2);
    for (size_t i = 0; i < b.size(); i++)
      b[i] = uint8_t(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    const Sender &from = who == "alt" ? alt_s : main_s;
    if (v && b.size() >= Bth::kSize + kIcrcBytes) {
      // The daemon sees at most its buffer's worth: its ICRC is the last 4 bytes of that.
      size_t body = std::min(b.size(), vrnic::kPacketBufferBytes) - kIcrcBytes;
      uint32_t qpn = load_be24(b.data() + 5);
      for (size_t i = 0; i < old_qpns.size() && i < v->qps.size(); i++) {
        if (old_qpns[i] != qpn || v->qps[i].qpn == qpn) continue;
        bool valid =
            icrc_for(from, dst_gid, o.port, b.data(), body) == vrnic::load_icrc(b.data() + body);
        store_be24(b.data() + 5, v->qps[i].qpn);
        if (valid)
          vrnic::store_icrc(b.data() + body, icrc_for(from, dst_gid, o.port, b.data(), body));
        reaimed++;
        break;
      }
    }
    int fd = from.fd;
    if (::sendto(fd, b.data(), b.size(), 0, reinterpret_cast<const sockaddr *>(&dst), sizeof(dst)) <
        0)
      std::fprintf(stderr, "packet_fuzz: sendto: %s\n", std::strerror(errno));
    n++;
    usleep(o.replay_delay_us);
    if (v) {
      poll_cqs(*v, true);
      maintain(*v, rng, true);
    }
    if (o.daemon_pid && !daemon_alive(o.daemon_pid)) {
      // The daemon takes a moment to die (the sanitizer writes its report first): the culprit
      // is this packet or one shortly before it; --replay-range narrows it down.
      std::printf("daemon died after replayed packet %" PRIu64 " of the file: %s %s\n", index,
                  who.c_str(), hex.c_str());
      return 3;
    }
  }
  std::printf("replayed=%" PRIu64 "\nreaimed=%" PRIu64 "\n", n, reaimed);
  return 0;
}

// Two UD SENDs to QPN 0 (no such QP): a control of the largest legitimate size (4096 bytes
// of payload), then a datagram 100 bytes longer than the daemon's receive buffer, with a
// correct ICRC for the part that fits: the kernel hands the daemon that part. A datagram cut
// short is malformed, whatever its ICRC says.
int probe_truncation(const Options &o, const Sender &s, const sockaddr_in &dst,
                     const uint8_t dst_gid[16]) {
  static uint8_t b[vrnic::kPacketBufferBytes + 100];
  const OpcodeInfo &info = opcode_info(make_opcode(kUd, kSendOnly));
  for (size_t i = 0; i < sizeof(b); i++) b[i] = uint8_t(i * 7);
  b[0] = make_opcode(kUd, kSendOnly);
  b[1] = 0x40;  // pad 0: both payloads are multiples of 4
  store_be16(b + 2, kDefaultPkey);
  b[4] = 0;
  store_be24(b + 5, 0);
  b[8] = 0;
  store_be24(b + 9, 0);
  reinterpret_cast<Deth *>(b + info.deth_off)->set(kQkey, 1);
  size_t control_body = info.header_bytes + vrnic::kMaxPayload;
  size_t cut_body = vrnic::kPacketBufferBytes - kIcrcBytes;
  struct {
    size_t body, len;
  } probes[] = {{control_body, control_body + kIcrcBytes}, {cut_body, sizeof(b)}};
  for (auto p : probes) {
    uint8_t saved[4];
    std::memcpy(saved, b + p.body, 4);
    vrnic::store_icrc(b + p.body, icrc_for(s, dst_gid, o.port, b, p.body));
    if (::sendto(s.fd, b, p.len, 0, reinterpret_cast<const sockaddr *>(&dst), sizeof(dst)) < 0) {
      std::fprintf(stderr, "packet_fuzz: sendto: %s\n", std::strerror(errno));
      return 1;
    }
    std::memcpy(b + p.body, saved, 4);
    usleep(20000);
  }
  std::printf("probe_control_bytes=%zu\nprobe_oversized_bytes=%zu\nprobe_buffer_bytes=%zu\n",
              control_body + kIcrcBytes, sizeof(b), vrnic::kPacketBufferBytes);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "packet_fuzz: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    uint64_t n = 0;
    auto number = [&](uint64_t lo, uint64_t hi) {
      const char *s = value();
      if (!parse_u64(s, &n) || n < lo || n > hi) {
        std::fprintf(stderr, "packet_fuzz: %s: bad value '%s'\n", a.c_str(), s);
        std::exit(2);
      }
      return n;
    };
    if (a == "--target")
      o.target = value();
    else if (a == "--source")
      o.source = value();
    else if (a == "--alt-source")
      o.alt_source = value();
    else if (a == "--port")
      o.port = uint16_t(number(1, 65535));
    else if (a == "--seed")
      o.seed = number(0, ~0ull), o.seed_given = true;
    else if (a == "--count")
      o.count = number(0, ~0ull);
    else if (a == "--rate")
      o.rate = uint32_t(number(1, 10000000));
    else if (a == "--valid-icrc-pct")
      o.valid_pct = uint32_t(number(0, 100));
    else if (a == "--victim-qpn")
      o.victims.push_back(uint32_t(number(0, kQpnMask)));
    else if (a == "--no-verbs")
      o.verbs = false;
    else if (a == "--probe-truncation")
      o.probe_truncation = true;
    else if (a == "--daemon-pid")
      o.daemon_pid = pid_t(number(1, 1u << 30));
    else if (a == "--dump")
      o.dump = value();
    else if (a == "--replay")
      o.replay = value();
    else if (a == "--replay-delay-us")
      o.replay_delay_us = uint32_t(number(0, 10000000));
    else if (a == "--replay-range") {
      const char *r = value();
      if (std::sscanf(r, "%" SCNu64 ":%" SCNu64, &o.replay_first, &o.replay_last) != 2 ||
          o.replay_first < 1 || o.replay_last < o.replay_first) {
        std::fprintf(stderr, "packet_fuzz: --replay-range: want A:B with 1 <= A <= B\n");
        return 2;
      }
    } else if (a == "-h" || a == "--help")
      return usage(stdout), 0;
    else {
      std::fprintf(stderr, "packet_fuzz: unknown argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (!o.seed_given) o.seed = now_ns() ^ (uint64_t(getpid()) << 32);
  signal(SIGPIPE, SIG_IGN);

  std::string err;
  Sender main_s, alt_s;
  if (!open_sender(o.source, o.port, &main_s, &err) ||
      !open_sender(o.alt_source, o.port, &alt_s, &err)) {
    std::fprintf(stderr, "packet_fuzz: %s\n", err.c_str());
    return 1;
  }
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(o.port);
  if (inet_pton(AF_INET, o.target.c_str(), &dst.sin_addr) != 1) {
    std::fprintf(stderr, "packet_fuzz: --target: not an IPv4 address\n");
    return 1;
  }
  uint8_t dst_gid[16];
  gid_of_ipv4(dst.sin_addr, dst_gid);
  if (o.probe_truncation) return probe_truncation(o, main_s, dst, dst_gid);

  std::printf("seed=%" PRIu64 "\n", o.seed);
  std::fflush(stdout);
  std::fprintf(stderr,
               "packet_fuzz: seed %" PRIu64 " (--seed %" PRIu64 " repeats the generator), %" PRIu64
               " packets at <= %u/s to %s:%u from %s and %s\n",
               o.seed, o.seed, o.count, o.rate, o.target.c_str(), o.port, o.source.c_str(),
               o.alt_source.c_str());
  Rng rng(o.seed);
  std::unique_ptr<Verbs> verbs;
  if (o.verbs) {
    verbs = std::make_unique<Verbs>();
    if (!setup_verbs(*verbs, main_s, &err)) {
      std::fprintf(stderr, "packet_fuzz: verbs setup: %s\n", err.c_str());
      teardown_verbs(*verbs);
      return 1;
    }
    maintain(*verbs, rng, true);
    std::fprintf(stderr, "packet_fuzz: own QPs (targets of packets with a correct ICRC):");
    for (const OwnQp &q : verbs->qps)
      std::fprintf(stderr, " %s:0x%x",
                   q.type == IBV_QPT_RC   ? "RC"
                   : q.type == IBV_QPT_UC ? "UC"
                                          : "UD",
                   q.qpn);
    std::fprintf(stderr, "\n");
  }
  if (!o.replay.empty()) {
    int rc = replay(o, main_s, alt_s, dst, dst_gid, verbs.get(), rng);
    if (verbs) teardown_verbs(*verbs);
    return rc;
  }
  Generator gen(o, rng, verbs.get());
  History history(2048);

  constexpr size_t kBatch = 32;
  static Out outs[kBatch];
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  uint64_t sent = 0, bytes = 0, send_errors = 0, icrc_valid = 0, icrc_bad = 0, from_alt = 0;
  uint64_t by_kind[kKinds] = {};
  uint64_t start = now_ns(), last_poll = 0, last_maint = 0, last_full = 0, last_churn = 0;
  uint64_t last_report = start;
  uint8_t rx[kMaxDatagram];
  int status = 0;
  while (sent < o.count) {
    size_t n = size_t(std::min<uint64_t>(kBatch, o.count - sent));
    for (size_t i = 0; i < n; i++) {
      Out &out = outs[i];
      gen.make(out, main_s, alt_s, dst_gid);
      history.add(out);
      by_kind[out.kind]++;
      (out.icrc_valid ? icrc_valid : icrc_bad)++;
      from_alt += out.alt;
      bytes += out.len;
    }
    // One sendmmsg per source socket, in order within each.
    for (int alt = 0; alt < 2; alt++) {
      size_t k = 0;
      for (size_t i = 0; i < n; i++) {
        if (outs[i].alt != bool(alt)) continue;
        iovs[k] = {outs[i].buf, outs[i].len};
        msgs[k] = {};
        msgs[k].msg_hdr.msg_name = &dst;
        msgs[k].msg_hdr.msg_namelen = sizeof(dst);
        msgs[k].msg_hdr.msg_iov = &iovs[k];
        msgs[k].msg_hdr.msg_iovlen = 1;
        k++;
      }
      size_t done = 0;
      while (done < k) {
        int r = ::sendmmsg(alt ? alt_s.fd : main_s.fd, msgs + done, unsigned(k - done), 0);
        if (r < 0) {
          if (errno == EINTR) continue;
          send_errors++;  // e.g. ECONNREFUSED from an earlier ICMP error: the packet is lost
          done++;
          continue;
        }
        done += size_t(r);
      }
    }
    sent += n;
    // What the daemon sent us: ACKs, NAKs, requests of our QPs.
    for (int i = 0; i < 256; i++) {
      ssize_t r = ::recv(main_s.fd, rx, sizeof(rx), MSG_DONTWAIT);
      if (r <= 0) break;
      gen.observe(rx, size_t(r));
    }
    for (;;) {  // the stranger's socket only gets ICMP errors or strays: keep it empty
      if (::recv(alt_s.fd, rx, sizeof(rx), MSG_DONTWAIT) <= 0) break;
    }
    uint64_t t = now_ns();
    // Completions every millisecond; QPs whose completions failed are checked (and reset
    // if they fell into error) right away, every QP every 100 ms.
    if (verbs && t - last_poll > 1'000'000) {
      last_poll = t;
      bool all = t - last_full > 100'000'000;
      if (all) last_full = t;
      poll_cqs(*verbs, all);
      maintain(*verbs, rng, all);
      if (t - last_churn > 10'000'000) {
        last_churn = t;
        churn(*verbs);
      }
    }
    if (t - last_maint > 20'000'000) {
      last_maint = t;
      if (o.daemon_pid && !daemon_alive(o.daemon_pid)) {
        std::fprintf(stderr, "packet_fuzz: the daemon (pid %d) died after %" PRIu64 " packets\n",
                     int(o.daemon_pid), sent);
        if (!o.dump.empty()) {
          if (history.write(o.dump, verbs.get()))
            std::fprintf(stderr, "packet_fuzz: the last packets sent are in %s (--replay it)\n",
                         o.dump.c_str());
        }
        status = 3;
        break;
      }
    }
    if (t - last_report > 5'000'000'000ull) {
      last_report = t;
      std::fprintf(stderr,
                   "packet_fuzz: %" PRIu64 "/%" PRIu64 " sent, %.0f/s, %" PRIu64
                   " daemon packets seen, %" PRIu64 " QP resets\n",
                   sent, o.count, double(sent) * 1e9 / double(t - start), gen.stats_daemon_packets,
                   verbs ? verbs->resets : 0);
    }
    // The rate bound: the sent packets' schedule, not faster.
    uint64_t due = start + uint64_t(double(sent) * 1e9 / o.rate);
    if (due > t) {
      timespec ts{time_t(due / 1000000000ull), long(due % 1000000000ull)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
  }
  double secs = double(now_ns() - start) / 1e9;
  if (verbs) poll_cqs(*verbs, true);
  std::printf("packets_sent=%" PRIu64 "\n", sent);
  std::printf("bytes_sent=%" PRIu64 "\n", bytes);
  std::printf("send_errors=%" PRIu64 "\n", send_errors);
  std::printf("icrc_valid_sent=%" PRIu64 "\n", icrc_valid);
  std::printf("icrc_bad_sent=%" PRIu64 "\n", icrc_bad);
  std::printf("from_stranger=%" PRIu64 "\n", from_alt);
  for (int k = 0; k < kKinds; k++) std::printf("kind_%s=%" PRIu64 "\n", kKindNames[k], by_kind[k]);
  std::printf("qpn_retargeted=%" PRIu64 "\n", gen.stats_retargeted);
  std::printf("qpn_icrc_spoiled=%" PRIu64 "\n", gen.stats_spoiled);
  std::printf("oversized_icrc_at_cut=%" PRIu64 "\n", gen.stats_truncated_valid);
  std::printf("daemon_packets_seen=%" PRIu64 "\n", gen.stats_daemon_packets);
  std::printf("daemon_requests_seen=%" PRIu64 "\n", gen.stats_daemon_requests);
  std::printf("daemon_acks_seen=%" PRIu64 "\n", gen.stats_daemon_acks);
  std::printf("daemon_naks_seen=%" PRIu64 "\n", gen.stats_daemon_naks);
  std::printf("daemon_rnr_naks_seen=%" PRIu64 "\n", gen.stats_daemon_rnr_naks);
  if (verbs) {
    std::printf("own_qp_resets=%" PRIu64 "\n", verbs->resets);
    std::printf("own_mr_reregistrations=%" PRIu64 "\n", verbs->churns);
    std::printf("own_completions_ok=%" PRIu64 "\n", verbs->completions_ok);
    std::printf("own_completions_error=%" PRIu64 "\n", verbs->completions_err);
    std::printf("own_verbs_errors=%" PRIu64 "\n", verbs->verbs_errors);
  }
  std::printf("seconds=%.1f\n", secs);
  std::printf("rate=%.0f\n", double(sent) / secs);
  std::fflush(stdout);
  if (verbs) teardown_verbs(*verbs);
  return status;
}
