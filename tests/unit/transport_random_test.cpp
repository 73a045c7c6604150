// The randomized transport harness (issue 31): the RC transport between two QPs on the
// harness's virtual clock, given random work -- WRITE, WRITE with immediate, SEND, SEND with
// immediate, READ, fetch-and-add and compare-and-swap, lengths around the MTU's multiples,
// up to 12 WRs in flight, receives posted late so that SENDs meet RNR -- over a wire that
// drops, duplicates and reorders at given rates, all drawn from one seed. Every byte, every
// completion (status, order, immediate, length) and every atomic's value is checked, and so is
// the cost: what the faults justify and no more (below, per case). A failing seed is printed
// with the wire's last packets, and becomes a regression case of its own at the end.
//
// Corruption is not a fate of its own here: a damaged packet is refused by the port's ICRC
// check before the transport sees it (icrc_test, wire_integrity_test's corrupt cases), so to
// the transport it is a loss.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>

#include "dataplane/transport.h"
#include "transport_harness.h"
#include "vrnic/wire.h"

using namespace vrnic;
using namespace vrnic::testing;

namespace {

constexpr size_t kSlotBytes = 4096;  // each WR of a round has its own 4 KiB in both memories
constexpr size_t kMaxWrs = 12;
constexpr size_t kAtomicBase = 60 * 1024;

// Per mille of packets, in both directions.
struct Faults {
  uint32_t drop = 0, dup = 0, hold = 0;
};

struct Mode {
  Faults faults;
  bool wire_peer = false;  // a udp/dpdk port's peer (window, probes), or a loop-port pair
  bool selective = false;  // both devices with selective repeat (--selective-repeat)
  bool xrc = false;        // A an XRC initiator, B an XRC target filling an XRC SRQ
};

enum Kind { kWrite, kWriteImm, kSend, kSendImm, kRead, kFetchAdd, kCmpSwap, kKinds };
const char *const kKindNames[] = {"WRITE", "WRITE_IMM", "SEND",   "SEND_IMM",
                                  "READ",  "FETCH_ADD", "CMP_SWAP"};

struct Posted {
  Kind kind;
  uint64_t wr_id;
  uint32_t length;
  size_t slot;
  uint64_t operand;  // the add, or the swap value
  bool compare_hits;
};

// What one seed cost.
struct Cost {
  uint64_t timeouts = 0;
  uint64_t resent_requests = 0;  // request packets A sent again (same PSN)
  uint64_t naks = 0;             // sequence NAKs A received
  uint64_t rnr_naks = 0;
  uint64_t packets = 0;  // all packets on the wire
  uint64_t selective_resends = 0;  // packets A sent again alone, named by a Sack
};

struct SeedResult {
  std::string error;  // "" when everything checked out
  Cost cost;
};

std::string describe_trace(const QpPair &p, size_t last) {
  std::ostringstream out;
  const std::vector<std::string> t = p.trace();
  for (size_t i = t.size() > last ? t.size() - last : 0; i < t.size(); i++)
    out << p.log[i].at_ns / 1000 << " us: " << t[i] << "\n";
  return out.str();
}

bool is_request(uint8_t opcode) {
  const uint8_t op = wire::op_operation(opcode);
  return op != wire::kAcknowledge && op != wire::kAtomicAcknowledge &&
         !(op >= wire::kReadResponseFirst && op <= wire::kReadResponseOnly);
}

// Request packets A put on the wire more than once.
uint64_t resent_requests(const QpPair &p) {
  std::vector<uint32_t> seen;
  uint64_t resent = 0;
  for (const WireRecord &r : p.log) {
    if (r.from != 'A' || !is_request(r.opcode)) continue;
    bool again = false;
    for (uint32_t psn : seen) again |= psn == r.psn;
    if (again)
      resent++;
    else
      seen.push_back(r.psn);
  }
  return resent;
}

uint32_t draw_length(std::mt19937 &rng) {
  switch (rng() % 4) {
    case 0: return 1 + rng() % 64;
    case 1:  // an MTU multiple, or one off (within the slot)
      return std::min<uint32_t>(1024 * (1 + rng() % 4) - 1 + rng() % 3, kSlotBytes);
    default: return 1 + rng() % kSlotBytes;
  }
}

// One seed: `rounds` rounds of up to 12 WRs each, posted at once.
SeedResult run_seed(uint32_t seed, Mode mode, uint32_t rounds) {
  std::mt19937 rng(seed);
  PairOptions o;
  o.wire_peer = mode.wire_peer;
  o.type = mode.xrc ? IBV_QPT_XRC_SEND : IBV_QPT_RC;
  o.psn_a = rng() & 0xffffff;  // also across the 24-bit wrap
  o.psn_b = rng() & 0xffffff;
  // Without loss a duplicate or an overtaken packet may cost a retry, never three; with loss,
  // the IB maximum.
  o.retry_cnt = mode.faults.drop ? 7 : 2;
  QpPair p(o);
  p.a.dev.selective_repeat = p.b.dev.selective_repeat = mode.selective;
  std::mt19937 wire_rng(seed * 7919u + 1);
  // Receives of a "late" round: posted when B first answers with an RNR NAK.
  std::vector<std::pair<uint64_t, size_t>> late_recvs;
  p.script = [&](const WireRecord &rec, Packet &) {
    if (rec.from == 'B' && wire::aeth_kind(rec.syndrome) == wire::kAethRnrNak &&
        wire::op_operation(rec.opcode) == wire::kAcknowledge) {
      for (auto [wr_id, off] : late_recvs) p.b.post_recv(wr_id, off, kSlotBytes);
      late_recvs.clear();
    }
    const Faults &f = mode.faults;
    uint32_t x = wire_rng() % 1000;
    if (x < f.drop) return Fate::kDrop;
    if (x < f.drop + f.dup) return Fate::kDuplicate;
    if (x < f.drop + f.dup + f.hold) return Fate::kHold;
    return Fate::kDeliver;
  };
  uint64_t target[kMaxWrs];  // the atomics' targets, as they should be
  for (size_t i = 0; i < kMaxWrs; i++) {
    target[i] = rng();
    std::memcpy(&p.b.mem[kAtomicBase + 8 * i], &target[i], 8);
  }
  uint64_t next_id = 1;
  for (uint32_t round = 0; round < rounds; round++) {
    std::vector<Posted> posted;
    const bool late = rng() % 4 == 0;
    const size_t n = 1 + rng() % kMaxWrs;
    for (size_t i = 0; i < n; i++) {
      Posted w{Kind(rng() % kKinds), next_id++, draw_length(rng), i, 0, false};
      const size_t off = i * kSlotBytes;
      for (size_t k = 0; k < kSlotBytes; k++) {
        p.a.mem[off + k] = uint8_t(rng());
        p.b.mem[off + k] = uint8_t(rng());
      }
      auto receive = [&](size_t at) {
        if (late)
          late_recvs.emplace_back(w.wr_id, at);
        else
          p.b.post_recv(w.wr_id, at, kSlotBytes);
      };
      shm::SendWqe wqe{};
      switch (w.kind) {
        case kWrite:
        case kWriteImm:
          wqe = write_wqe(w.wr_id, p.a, off, w.length, p.b, off);
          if (w.kind == kWriteImm) {
            wqe.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            wqe.imm_or_rkey = uint32_t(w.wr_id);
            receive(0);
          }
          break;
        case kSend:
        case kSendImm:
          wqe = send_wqe(w.wr_id, p.a, off, w.length);
          if (w.kind == kSendImm) {
            wqe.opcode = IBV_WR_SEND_WITH_IMM;
            wqe.imm_or_rkey = uint32_t(w.wr_id);
          }
          receive(off);
          break;
        case kRead:
          wqe = read_wqe(w.wr_id, p.a, off, w.length, p.b, off);
          break;
        case kFetchAdd:
        case kCmpSwap:
          w.length = 8;
          w.operand = rng();
          wqe = fetch_add_wqe(w.wr_id, p.a, off, p.b, kAtomicBase + 8 * i, w.operand);
          if (w.kind == kCmpSwap) {
            w.compare_hits = rng() % 2;
            wqe.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
            wqe.compare_add = w.compare_hits ? target[i] : ~target[i];
            wqe.swap = w.operand;
          }
          break;
        case kKinds: break;
      }
      p.a.post_send(wqe);
      posted.push_back(w);
    }
    p.run();
    if (!late_recvs.empty()) {
      // Nothing of the round needed a receive, or no RNR NAK was ever sent: post them now
      // for the record, and they must still be there unused.
      for (auto [wr_id, off] : late_recvs) p.b.post_recv(wr_id, off, kSlotBytes);
      late_recvs.clear();
      p.run();
    }
    std::ostringstream err;
    std::vector<shm::Cqe> sends = p.a.poll_send_cq();
    std::vector<shm::Cqe> recvs = p.b.poll_recv_cq();
    size_t want_recvs = 0, got_recv = 0;
    if (sends.size() != posted.size())
      err << "round " << round << ": " << sends.size() << " send completions for "
          << posted.size() << " WRs\n";
    for (size_t i = 0; i < posted.size() && i < sends.size(); i++) {
      const Posted &w = posted[i];
      if (sends[i].wr_id != w.wr_id || sends[i].status != IBV_WC_SUCCESS)
        err << "round " << round << ": WR " << w.wr_id << " (" << kKindNames[w.kind]
            << ") completed as wr_id " << sends[i].wr_id << " status " << int(sends[i].status)
            << "\n";
      const size_t off = w.slot * kSlotBytes;
      bool ok = true;
      if (w.kind == kFetchAdd || w.kind == kCmpSwap) {
        uint64_t orig, now;
        std::memcpy(&orig, &p.a.mem[off], 8);
        std::memcpy(&now, &p.b.mem[kAtomicBase + 8 * w.slot], 8);
        uint64_t want = w.kind == kFetchAdd ? target[w.slot] + w.operand
                        : w.compare_hits    ? w.operand
                                            : target[w.slot];
        ok = orig == target[w.slot] && now == want;
        target[w.slot] = now;
      } else {
        ok = std::memcmp(p.a.mem.data() + off, p.b.mem.data() + off, w.length) == 0;
      }
      if (!ok)
        err << "round " << round << ": WR " << w.wr_id << " (" << kKindNames[w.kind]
            << "): data differs\n";
      if (w.kind == kWriteImm || w.kind == kSend || w.kind == kSendImm) {
        want_recvs++;
        if (got_recv < recvs.size()) {
          const shm::Cqe &r = recvs[got_recv++];
          if (r.wr_id != w.wr_id || r.status != IBV_WC_SUCCESS ||
              (w.kind != kSend && r.imm_data != uint32_t(w.wr_id)) ||
              (w.kind != kWriteImm && r.byte_len != w.length))
            err << "round " << round << ": receive for WR " << w.wr_id << " as wr_id "
                << r.wr_id << " status " << int(r.status) << " byte_len " << r.byte_len << "\n";
        }
      }
    }
    if (recvs.size() != want_recvs)
      err << "round " << round << ": " << recvs.size() << " receive completions for "
          << want_recvs << "\n";
    if (!err.str().empty())
      return {err.str() + "last packets:\n" + describe_trace(p, 400), {}};
  }
  SeedResult out;
  out.cost.timeouts = p.a.qp->counters[kTimeouts] + p.b.qp->counters[kTimeouts];
  out.cost.resent_requests = resent_requests(p);
  out.cost.naks = p.a.qp->counters[kNaksReceived];
  out.cost.rnr_naks = p.a.qp->counters[kRnrNaksReceived];
  out.cost.packets = p.log.size();
  out.cost.selective_resends = p.a.qp->counters[kSelectiveResends];
  return out;
}

std::string describe(Mode m) {
  std::ostringstream out;
  out << "drop " << m.faults.drop << "/1000, dup " << m.faults.dup << "/1000, hold "
      << m.faults.hold << "/1000, " << (m.wire_peer ? "wire peer" : "loop-port pair")
      << (m.selective ? ", selective repeat" : ", go-back-N") << (m.xrc ? ", XRC" : "");
  return out.str();
}

// Runs seeds [first, first+count); fails at the first seed that goes wrong (printing it);
// returns the cost of them all.
Cost run_seeds(Mode mode, uint32_t first, uint32_t count, uint32_t rounds) {
  Cost all;
  if (mode.selective) count = (count + 1) / 2;  // within the fast suite's time: half the seeds
  for (uint32_t seed = first; seed < first + count; seed++) {
    SeedResult r = run_seed(seed, mode, rounds);
    if (!r.error.empty()) {
      INFO("seed " << seed << " (" << describe(mode) << ", " << rounds << " rounds):\n"
                   << r.error);
      FAIL_CHECK("the transport lost its way");
      break;
    }
    all.timeouts += r.cost.timeouts;
    all.resent_requests += r.cost.resent_requests;
    all.naks += r.cost.naks;
    all.rnr_naks += r.cost.rnr_naks;
    all.packets += r.cost.packets;
    all.selective_resends += r.cost.selective_resends;
  }
  WARN(describe(mode) << ", seeds " << first << "-" << first + count - 1 << ": "
                      << all.packets << " packets, " << all.resent_requests
                      << " requests resent, " << all.naks << " sequence NAKs, " << all.rnr_naks
                      << " RNR NAKs, " << all.timeouts << " timeouts, " << all.selective_resends
                      << " sent again alone");
  return all;
}

}  // namespace

// Every case runs for the four kinds of pair: loop port or wire peer, go-back-N or selective
// repeat.
const Mode kPairs[] = {{{}, false, false}, {{}, true, false}, {{}, false, true}, {{}, true, true}};
Mode with(Faults f, Mode pair) {
  pair.faults = f;
  return pair;
}

// No fault: no NAK and no timeout (what is sent twice is what an RNR NAK asked for again).
TEST_CASE("transport random: a clean wire costs no NAK and no timeout", "[transport][random][random_a]") {
  for (Mode pair : kPairs) {
    Cost c = run_seeds(with({}, pair), 1, 500, 6);
    CHECK(c.timeouts == 0);
    CHECK(c.naks == 0);
    CHECK(c.selective_resends == 0);
  }
}

// Duplicates alone never need the timer or a resend: each copy is answered again, or old
// news.
TEST_CASE("transport random: duplicates alone cost no timeout and no resend",
          "[transport][random][random_a]") {
  for (Mode pair : kPairs) {
    Cost c = run_seeds(with({0, 100, 0}, pair), 1, 500, 6);
    CHECK(c.timeouts == 0);
    CHECK(c.naks == 0);
  }
}

// An overtaken request is held by the responder and executed once the late one lands; the
// NAK it caused sends again (go-back-N) or sends that one packet again (selective repeat).
// An overtaken answer is asked for again at once. Nothing is left to the timer: it once was
// (go-back-N's blind spot, a resent packet overtaken in turn while the responder's one NAK per
// gap was out), until the responder kept what came early.
TEST_CASE("transport random: reordering alone", "[transport][random][random_a]") {
  for (Mode pair : kPairs) {
    Cost c = run_seeds(with({0, 0, 100}, pair), 1, 500, 6);
    CHECK(c.timeouts == 0);
  }
}

TEST_CASE("transport random: duplicates and reordering together", "[transport][random][random_b]") {
  for (Mode pair : kPairs) {
    Cost a = run_seeds(with({0, 50, 50}, pair), 1, 300, 6);
    Cost b = run_seeds(with({0, 200, 200}, pair), 1, 100, 6);
    CHECK(a.timeouts + b.timeouts == 0);
  }
}

// Loss: everything arrives, once, within the IB's seven retries.
TEST_CASE("transport random: loss", "[transport][random][random_b]") {
  for (Mode pair : kPairs) {
    run_seeds(with({10, 0, 0}, pair), 1, 300, 6);
    run_seeds(with({50, 0, 0}, pair), 1, 200, 6);
  }
}

TEST_CASE("transport random: loss, duplicates and reordering together", "[transport][random][random_b]") {
  for (Mode pair : kPairs) {
    run_seeds(with({10, 10, 50}, pair), 1, 300, 6);
    run_seeds(with({50, 50, 50}, pair), 1, 200, 6);
  }
}

// XRC: the same work from an initiator to a target that takes the SRQ each request's XRCETH
// names; what the faults cost is what they cost RC.
TEST_CASE("transport random: XRC, on a clean wire and with loss, duplicates and reordering",
          "[transport][random][random_b]") {
  for (Mode pair : {kPairs[0], kPairs[3]}) {
    pair.xrc = true;
    Cost c = run_seeds(with({}, pair), 1, 200, 6);
    CHECK(c.timeouts == 0);
    CHECK(c.naks == 0);
    Cost d = run_seeds(with({0, 100, 100}, pair), 1, 200, 6);
    CHECK(d.timeouts == 0);
    run_seeds(with({50, 50, 50}, pair), 1, 200, 6);
  }
}
