// vrnicd's IB CM on its own: two engines (A active, B passive) joined by a scripted wire and a
// virtual clock; each test asserts the MADs that crossed it, their fields, the events each
// owner got and when, for the connection's whole life and its failures.
#include <catch2/catch.hpp>
#include <deque>
#include <random>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "control/cm_engine.h"

using namespace vrnic::cm;

namespace {

constexpr uint64_t kOwnerA = 0xa, kOwnerB = 0xb;
constexpr uint64_t kService = 0x0000000001060000ull | 7471;  // RDMA_PS_TCP, port 7471
const Gid kGidA = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
const Gid kGidB = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};

const char *attr_name(Attr a) {
  switch (a) {
    case Attr::kReq:
      return "REQ";
    case Attr::kMra:
      return "MRA";
    case Attr::kRej:
      return "REJ";
    case Attr::kRep:
      return "REP";
    case Attr::kRtu:
      return "RTU";
    case Attr::kDreq:
      return "DREQ";
    case Attr::kDrep:
      return "DREP";
    case Attr::kSidrReq:
      return "SIDR_REQ";
    case Attr::kSidrRep:
      return "SIDR_REP";
    default:
      return "?";
  }
}

struct Seen {
  char who;  // whose owner
  EventType type;
  uint32_t conn;
  uint16_t reason;
  bool timed_out;
  uint64_t at;
  Mad mad;  // a copy of what caused it (zero if nothing)
};

// Two engines on a wire. `drop` decides the fate of each MAD ("A>B REQ" style names); events
// are recorded, and `on_event` may act on them (accept, establish, ...) as an owner would.
struct Wire {
  uint64_t now = 0;
  std::deque<std::pair<char, Mad>> in_flight;  // to whom
  std::vector<std::string> log;
  std::vector<Seen> events;
  std::function<bool(const std::string &)> drop;
  std::function<void(const Seen &)> on_event;
  Timing timing;
  Engine a{0x0276726e69630001ull, hooks('A'), timing, seeded(11)};
  Engine b{0x0276726e69630002ull, hooks('B'), timing, seeded(22)};

  // Communication IDs from a seeded generator: the same run every time.
  static std::function<uint32_t()> seeded(uint32_t seed) {
    return [rng = std::mt19937(seed)]() mutable { return uint32_t(rng()); };
  }

  Engine::Hooks hooks(char self) {
    return {[this, self](const Gid &to, const Mad &m) {
              const char dest = to == kGidA ? 'A' : 'B';
              std::string line = std::string(1, self) + ">" + dest + " " + attr_name(m.attr());
              const bool lost = drop && drop(line);
              log.push_back(line + (lost ? " (dropped)" : ""));
              if (!lost) in_flight.push_back({dest, m});
            },
            [this, self](const Event &e) {
              Seen s{self, e.type, e.conn, e.reason, e.timed_out, now, {}};
              if (e.mad) s.mad = *e.mad;
              events.push_back(s);
              if (on_event) on_event(events.back());
            }};
  }
  // Delivers until the wire is empty, then runs the timers, in virtual time, for at most
  // `limit` ns.
  void run(uint64_t limit = 600'000'000'000ull) {
    const uint64_t end = now + limit;
    for (;;) {
      while (!in_flight.empty()) {
        auto [to, m] = in_flight.front();
        in_flight.pop_front();
        (to == 'A' ? a : b).receive(to == 'A' ? kGidB : kGidA, m, now);
      }
      uint64_t next = 0;
      for (uint64_t d : {a.next_deadline(), b.next_deadline()})
        if (d && (!next || d < next)) next = d;
      if (!next || next > end) return;
      now = next;
      a.tick(now);
      b.tick(now);
    }
  }
  std::vector<EventType> types(char who) const {
    std::vector<EventType> out;
    for (const Seen &s : events)
      if (s.who == who) out.push_back(s.type);
    return out;
  }
  const Seen *last(char who, EventType t) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it)
      if (it->who == who && it->type == t) return &*it;
    return nullptr;
  }
};

ConnectParams connect_params() {
  ConnectParams p;
  p.service_id = kService;
  p.qpn = 0x000123;
  p.starting_psn = 0x00abcd;
  p.responder_resources = 4;
  p.initiator_depth = 4;
  p.local_gid = kGidA;
  p.remote_gid = kGidB;
  p.ece_vendor_id = 0xa1b2c3;  // ECE: three bytes, each its own (Linux's byte order)
  p.ece_options = 0x80000001;
  p.private_data = {1, 2, 3, 4};
  return p;
}

AcceptParams accept_params() {
  AcceptParams p;
  p.qpn = 0x000456;
  p.starting_psn = 0x00ef01;
  p.responder_resources = 4;
  p.initiator_depth = 4;
  p.ece_vendor_id = 0xa1b2c3;
  p.ece_options = 0x40000002;
  p.private_data = {9, 8, 7};
  return p;
}

// The owners of a plain connection: B accepts, A establishes.
void owners_connect(Wire &w) {
  w.on_event = [&w](const Seen &s) {
    if (s.who == 'B' && s.type == EventType::kReqReceived)
      REQUIRE(w.b.accept(s.conn, accept_params(), w.now).ok());
    if (s.who == 'A' && s.type == EventType::kRepReceived)
      REQUIRE(w.a.establish(s.conn, w.now).ok());
  };
}

// B listens, and the owners connect (owners_connect).
void listen_and_connect(Wire &w) {
  REQUIRE(w.b.listen(kService, kOwnerB).ok());
  owners_connect(w);
}

// The wire loses the first MAD named `what` ("B>A REP"), once.
void lose_first(Wire &w, const std::string &what) {
  auto dropped = std::make_shared<bool>(false);
  w.drop = [what, dropped](const std::string &m) {
    return m == what && !std::exchange(*dropped, true);
  };
}

uint64_t req_wait(const Timing &t) {
  return 2 * Timing::ns(t.packet_life_time) + Timing::ns(t.cm_response_timeout);
}

}  // namespace

TEST_CASE("CM: REQ, REP, RTU set up a connection; the fields go across", "[cm]") {
  Wire w;
  listen_and_connect(w);
  auto id = w.a.connect(kOwnerA, kGidB, connect_params(), 0);
  REQUIRE(id.ok());
  w.run();
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REP", "A>B RTU"});
  CHECK(w.types('A') == std::vector<EventType>{EventType::kRepReceived});
  CHECK(w.types('B') == std::vector<EventType>{EventType::kReqReceived, EventType::kEstablished});
  const Seen *req = w.last('B', EventType::kReqReceived);
  REQUIRE(req);
  CHECK(req->mad[req::kServiceId] == kService);
  CHECK(req->mad[req::kLocalQpn] == 0x000123);
  CHECK(req->mad[req::kStartingPsn] == 0x00abcd);
  CHECK(req->mad[req::kLocalCommId] == *id);
  CHECK(req->mad[req::kMaxCmRetries] == 15);
  CHECK(req->mad[req::kVendorId] == 0xa1b2c3);  // ECE: REQ bytes 5-7, options in attr_mod
  CHECK(req->mad.bytes[kMadHeaderBytes + 5] == 0xa1);
  CHECK(req->mad.attr_mod() == 0x80000001);
  CHECK(std::vector<uint8_t>(req->mad.at(req::kPrivateData), req->mad.at(req::kPrivateData) + 4) ==
        std::vector<uint8_t>{1, 2, 3, 4});
  const Seen *rep = w.last('A', EventType::kRepReceived);
  REQUIRE(rep);
  CHECK(rep->mad[rep::kRemoteCommId] == *id);
  CHECK(rep->mad[rep::kLocalQpn] == 0x000456);
  CHECK(rep->mad[rep::kStartingPsn] == 0x00ef01);
  CHECK(rep_vendor_id(rep->mad) == 0xa1b2c3);  // REP bytes 15, 19, 23 between QPN and PSN
  CHECK(rep->mad.bytes[kMadHeaderBytes + 15] == 0xa1);
  CHECK(rep->mad.bytes[kMadHeaderBytes + 23] == 0xc3);
  CHECK(rep->mad.attr_mod() == 0x40000002);
  CHECK(rep->mad.tid() == req->mad.tid());  // the passive side answers in the REQ's transaction
  CHECK(w.a.connections() == 1);
  CHECK(w.b.connections() == 1);
}

TEST_CASE("CM: no listener -> REJ reason 8; the consumer's reject -> REJ 28 with its data",
          "[cm]") {
  SECTION("no listener") {
    Wire w;
    REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
    w.run();
    CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REJ"});
    const Seen *rej = w.last('A', EventType::kRejected);
    REQUIRE(rej);
    CHECK(rej->reason == kRejInvalidServiceId);
    CHECK(w.a.connections() == 0);
    CHECK(w.b.connections() == 0);
  }
  SECTION("rejected by the owner") {
    Wire w;
    REQUIRE(w.b.listen(kService, kOwnerB).ok());
    w.on_event = [&w](const Seen &s) {
      if (s.who == 'B' && s.type == EventType::kReqReceived)
        REQUIRE(w.b.reject(s.conn, kRejConsumerDefined, {42, 43}, w.now).ok());
    };
    REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
    w.run();
    CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REJ"});
    const Seen *rej = w.last('A', EventType::kRejected);
    REQUIRE(rej);
    CHECK(rej->reason == kRejConsumerDefined);
    CHECK(rej->mad.at(rej::kPrivateData)[0] == 42);
    CHECK(rej->mad.at(rej::kPrivateData)[1] == 43);
    CHECK(w.b.connections() == 0);
  }
  SECTION("the REP rejected by the active side (rdma_reject after CONNECT_RESPONSE)") {
    Wire w;
    REQUIRE(w.b.listen(kService, kOwnerB).ok());
    w.on_event = [&w](const Seen &s) {
      if (s.who == 'B' && s.type == EventType::kReqReceived)
        REQUIRE(w.b.accept(s.conn, accept_params(), w.now).ok());
      if (s.who == 'A' && s.type == EventType::kRepReceived)
        REQUIRE(w.a.reject(s.conn, kRejVendorOptionNotSupported, {}, w.now).ok());
    };
    REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
    w.run();
    CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REP", "A>B REJ"});
    const Seen *rej = w.last('B', EventType::kRejected);
    REQUIRE(rej);
    CHECK(rej->reason == kRejVendorOptionNotSupported);
    CHECK(rej->mad[rej::kMessageRejected] == 1);  // the REP
    const Seen *rep = w.last('A', EventType::kRepReceived);
    REQUIRE(rep);
    CHECK(rej->mad.tid() == rep->mad.tid());  // in the REP's transaction
    CHECK(w.a.connections() == 0);
    CHECK(w.b.connections() == 0);
    CHECK(w.types('B') == std::vector<EventType>{EventType::kReqReceived, EventType::kRejected});
  }
}

TEST_CASE("CM: a lost REQ is sent again after the response timeout", "[cm]") {
  Wire w;
  listen_and_connect(w);
  lose_first(w, "A>B REQ");
  REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
  w.run();
  CHECK(w.log == std::vector<std::string>{"A>B REQ (dropped)", "A>B REQ", "B>A REP", "A>B RTU"});
  const Seen *est = w.last('B', EventType::kEstablished);
  REQUIRE(est);
  CHECK(est->at == req_wait(w.timing));  // 2 packet lifetimes + the CM response timeout
  CHECK(w.a.counters().resent == 1);
}

TEST_CASE("CM: a dead peer is UNREACHABLE after every retry", "[cm]") {
  Wire w;
  w.drop = [](const std::string &) { return true; };
  REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
  w.run();
  CHECK(w.log.size() == 16);  // the REQ and 15 retries
  const Seen *u = w.last('A', EventType::kUnreachable);
  REQUIRE(u);
  CHECK(u->at == 16 * req_wait(w.timing));  // about 74 s with Linux's timers
  CHECK(w.a.connections() == 0);
}

TEST_CASE("CM: many connections' timers each run on their own deadline, and leave with them",
          "[cm]") {
  Wire w;
  w.drop = [](const std::string &) { return true; };
  constexpr int kConns = 300;
  std::map<uint32_t, uint64_t> started;  // our ID -> when its REQ went out
  for (int i = 0; i < kConns; i++) {
    // Out of order in time as well: later IDs start earlier, some at the same instant.
    const uint64_t at = uint64_t((kConns - i) / 2) * 1'000'000;
    auto id = w.a.connect(kOwnerA, kGidB, connect_params(), at);
    REQUIRE(id.ok());
    started[*id] = at;
  }
  CHECK(w.a.next_deadline() == req_wait(w.timing));  // the earliest: those started at 0
  w.now = 0;
  w.run();
  int unreachable = 0;
  for (const Seen &s : w.events) {
    if (s.who != 'A' || s.type != EventType::kUnreachable) continue;
    unreachable++;
    CHECK(s.at == started.at(s.conn) + 16 * req_wait(w.timing));
  }
  CHECK(unreachable == kConns);
  CHECK(w.log.size() == size_t(16 * kConns));
  CHECK(w.a.connections() == 0);
  CHECK(w.a.next_deadline() == 0);  // no timer left behind to wake the loop for nothing
}

TEST_CASE("CM: a slow owner's peer is asked to wait (MRA), once", "[cm]") {
  Wire w;
  REQUIRE(w.b.listen(kService, kOwnerB).ok());
  uint32_t pending = 0;
  w.on_event = [&](const Seen &s) {
    if (s.who == 'B' && s.type == EventType::kReqReceived) pending = s.conn;  // no answer yet
    if (s.who == 'A' && s.type == EventType::kRepReceived)
      REQUIRE(w.a.establish(s.conn, w.now).ok());
  };
  REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
  // Two response timeouts go by: A resends, B answers the duplicate with an MRA, A waits.
  w.run(req_wait(w.timing) + 1);
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "A>B REQ", "B>A MRA"});
  CHECK(w.b.counters().duplicates == 1);
  // The MRA asked for the service timeout: no resend before it.
  const uint64_t mra_wait =
      Timing::ns(w.timing.cm_response_timeout) + 2 * Timing::ns(w.timing.packet_life_time);
  w.run(mra_wait - 2);
  CHECK(w.log.size() == 3);
  REQUIRE(w.b.accept(pending, accept_params(), w.now).ok());
  w.run();
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "A>B REQ", "B>A MRA", "B>A REP", "A>B RTU"});
  CHECK(w.types('B').back() == EventType::kEstablished);
}

TEST_CASE("CM: a lost REP or RTU: the passive side resends its REP", "[cm]") {
  SECTION("REP lost") {
    Wire w;
    listen_and_connect(w);
    lose_first(w, "B>A REP");
    REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
    w.run();
    // Both timers run out together: the REQ's repeat is not answered (the REP's timer is).
    CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REP (dropped)", "A>B REQ", "B>A REP",
                                            "A>B RTU"});
    CHECK(w.types('A') == std::vector<EventType>{EventType::kRepReceived});
  }
  SECTION("RTU lost: the established side answers the repeated REP with its RTU") {
    Wire w;
    listen_and_connect(w);
    lose_first(w, "A>B RTU");
    REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
    w.run();
    CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REP", "A>B RTU (dropped)", "B>A REP",
                                            "A>B RTU"});
    CHECK(w.types('A') == std::vector<EventType>{EventType::kRepReceived});  // once
    CHECK(w.types('B') == std::vector<EventType>{EventType::kReqReceived, EventType::kEstablished});
  }
}

TEST_CASE("CM: DREQ, DREP, then time-wait on both sides", "[cm]") {
  Wire w;
  listen_and_connect(w);
  auto id = w.a.connect(kOwnerA, kGidB, connect_params(), 0);
  REQUIRE(id.ok());
  w.run();
  w.on_event = [&w](const Seen &s) {
    if (s.who == 'B' && s.type == EventType::kDisconnectRequest)
      REQUIRE(w.b.disconnect(s.conn, {}, w.now).ok());
  };
  const uint64_t t0 = w.now;
  REQUIRE(w.a.disconnect(*id, {}, w.now).ok());
  w.run();
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REP", "A>B RTU", "A>B DREQ", "B>A DREP"});
  const Seen *down = w.last('A', EventType::kDisconnected);
  REQUIRE(down);
  CHECK_FALSE(down->timed_out);
  const Seen *exit_a = w.last('A', EventType::kTimewaitExit);
  const Seen *exit_b = w.last('B', EventType::kTimewaitExit);
  REQUIRE(exit_a);
  REQUIRE(exit_b);
  CHECK(exit_a->at == t0 + 2 * Timing::ns(w.timing.packet_life_time));
  CHECK(w.a.connections() == 0);
  CHECK(w.b.connections() == 0);
}

TEST_CASE("CM: a DREQ that never arrives still ends in DISCONNECTED", "[cm]") {
  Wire w;
  listen_and_connect(w);
  auto id = w.a.connect(kOwnerA, kGidB, connect_params(), 0);
  REQUIRE(id.ok());
  w.run();
  w.drop = [](const std::string &m) { return m == "A>B DREQ"; };
  const uint64_t t0 = w.now;
  REQUIRE(w.a.disconnect(*id, {}, w.now).ok());
  w.run();
  const Seen *down = w.last('A', EventType::kDisconnected);
  REQUIRE(down);
  CHECK(down->timed_out);
  CHECK(down->at == t0 + 16 * req_wait(w.timing));
  CHECK(w.a.counters().resent == 15);
}

TEST_CASE("CM: a second REQ from a connected QP is a stale connection", "[cm]") {
  Wire w;
  listen_and_connect(w);
  REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
  w.run();
  w.on_event = nullptr;
  REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), w.now).ok());  // same QPN, new ID
  w.run(1);
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REP", "A>B RTU", "A>B REQ", "B>A REJ",
                                          "B>A DREQ"});
  CHECK(w.last('A', EventType::kDisconnectRequest));  // the old connection is taken down
  const Seen *rej = w.last('A', EventType::kRejected);
  REQUIRE(rej);
  CHECK(rej->reason == kRejStaleConnection);
}

TEST_CASE("CM: among 2,000 connections, the stale one is the one from the same peer QP", "[cm]") {
  Wire w;
  listen_and_connect(w);
  for (uint32_t i = 0; i < 2000; i++) {
    ConnectParams p = connect_params();
    p.qpn = 0x1000 + i;
    REQUIRE(w.a.connect(kOwnerA, kGidB, p, w.now).ok());
  }
  w.run();
  CHECK(w.types('B').size() == 4000);  // a request and an establishment each
  w.on_event = nullptr;
  w.log.clear();
  ConnectParams again = connect_params();
  again.qpn = 0x1000 + 1234;  // that QP is connected already
  REQUIRE(w.a.connect(kOwnerA, kGidB, again, w.now).ok());
  w.run(1);
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "B>A REJ", "B>A DREQ"});
  const Seen *rej = w.last('A', EventType::kRejected);
  REQUIRE(rej);
  CHECK(rej->reason == kRejStaleConnection);
}

TEST_CASE("CM: a REQ withdrawn before the listener answers ends the request there", "[cm]") {
  Wire w;
  REQUIRE(w.b.listen(kService, kOwnerB).ok());  // B's owner never answers
  auto id = w.a.connect(kOwnerA, kGidB, connect_params(), 0);
  REQUIRE(id.ok());
  w.run(1);  // the REQ is delivered; nothing is due yet
  const Seen *req = w.last('B', EventType::kReqReceived);
  REQUIRE(req);
  const uint32_t request = req->conn;  // (events grows: no pointer into it kept)
  w.a.abandon(*id, w.now);  // rdma_destroy_id on the connecting side
  w.run(1);
  CHECK(w.log == std::vector<std::string>{"A>B REQ", "A>B REJ"});
  const Seen *rej = w.last('B', EventType::kRejected);
  REQUIRE(rej);  // B's request is over: its owner hears so, and B holds nothing
  CHECK(rej->conn == request);
  CHECK(rej->reason == kRejTimeout);
  CHECK(rej->mad[rej::kLocalCommId] == *id);
  CHECK(!w.b.accept(request, accept_params(), w.now).ok());
}

TEST_CASE("CM: a request nobody answers ends when its sender has stopped waiting", "[cm]") {
  Wire w;
  REQUIRE(w.b.listen(kService, kOwnerB).ok());  // B's owner never answers
  REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
  w.run();
  // A asks 16 times (once more after B's MRA), then gives up; B's request outlives that by
  // no more than the time its REQ took to come: then B says so to A, and holds nothing.
  const Seen *gave_up = w.last('A', EventType::kUnreachable);
  const Seen *over = w.last('B', EventType::kUnreachable);
  REQUIRE(gave_up);
  REQUIRE(over);
  CHECK(over->at == 16 * req_wait(w.timing));  // the REQ came at 0
  CHECK(gave_up->at <= over->at);
  CHECK(w.log.back() == "B>A REJ");
  CHECK(w.b.connections() == 0);
  CHECK(w.b.next_deadline() == 0);
  CHECK(!w.b.accept(over->conn, accept_params(), w.now).ok());
}

TEST_CASE("CM: how long an unanswered request is kept follows what its REQ says", "[cm]") {
  auto kept_for = [](uint8_t response_timeout, uint8_t retries) {
    Wire w;
    REQUIRE(w.b.listen(kService, kOwnerB).ok());
    REQUIRE(w.a.connect(kOwnerA, kGidB, connect_params(), 0).ok());
    REQUIRE(w.in_flight.size() == 1);
    Mad req = w.in_flight.front().second;  // A's REQ, rewritten as another sender's
    w.in_flight.clear();
    req.put(req::kRemoteCmResponseTimeout, response_timeout);
    req.put(req::kMaxCmRetries, retries);
    w.b.receive(kGidA, req, 0);
    REQUIRE(w.b.connections() == 1);
    return w.b.next_deadline();
  };
  const Timing t;
  // One try, at least as long as the MRA B would send asks for.
  CHECK(kept_for(8, 0) == req_wait(t));
  CHECK(kept_for(22, 3) == 4 * (Timing::ns(22) + 2 * Timing::ns(t.packet_life_time)));
  // A REQ that says it waits for hours is given up after ten minutes all the same.
  CHECK(kept_for(31, 15) == Engine::kMaxPendingNs);
}

TEST_CASE("CM: SIDR resolves a UD service, or says there is none", "[cm]") {
  Wire w;
  REQUIRE(w.b.listen(kService, kOwnerB).ok());
  w.on_event = [&w](const Seen &s) {
    if (s.who == 'B' && s.type == EventType::kSidrReqReceived)
      REQUIRE(w.b.sidr_reply(s.conn, kSidrValid, 0x000789, 0x01234567, {5}).ok());
  };
  REQUIRE(w.a.sidr_request(kOwnerA, kGidB, kService, {1, 2}, 0).ok());
  REQUIRE(w.a.sidr_request(kOwnerA, kGidB, kService + 1, {}, 0).ok());
  w.run();
  CHECK(w.log ==
        std::vector<std::string>{"A>B SIDR_REQ", "A>B SIDR_REQ", "B>A SIDR_REP", "B>A SIDR_REP"});
  REQUIRE(w.events.size() == 3);
  CHECK(w.events[1].type == EventType::kSidrRepReceived);
  CHECK(w.events[1].reason == kSidrValid);
  CHECK(w.events[1].mad[sidr_rep::kQpn] == 0x000789);
  CHECK(w.events[1].mad[sidr_rep::kQkey] == 0x01234567);
  CHECK(w.events[2].reason == kSidrServiceIdNotSupported);
  CHECK(w.a.connections() == 0);
  CHECK(w.b.connections() == 0);
}

TEST_CASE("CM: malformed and unsolicited MADs are counted and dropped", "[cm]") {
  Wire w;
  REQUIRE(w.b.listen(kService, kOwnerB).ok());
  Mad m;
  m.init(Attr::kReq, 1);
  m.bytes[2] = 1;  // class version 1
  w.b.receive(kGidA, m, 0);
  m.init(Attr::kReq, 1);
  m.bytes[1] = 0x04;  // another class
  w.b.receive(kGidA, m, 0);
  m.init(Attr(0x0099), 1);  // no such attribute
  w.b.receive(kGidA, m, 0);
  m.init(Attr::kRtu, 1);  // for no connection
  m.put(rtu::kRemoteCommId, 0x1234);
  w.b.receive(kGidA, m, 0);
  m.init(Attr::kReq, 1);
  m.put(req::kServiceId, kService);
  m.put(req::kTransportServiceType, 3);  // XRC
  w.b.receive(kGidA, m, 0);
  CHECK(w.b.counters().dropped == 4);
  CHECK(w.events.empty());
  CHECK(w.log == std::vector<std::string>{"B>A REJ"});  // the XRC REQ: invalid transport type
  m.init(Attr::kRep, 1);  // a REP for nothing asked: REJ invalid comm ID
  w.b.receive(kGidA, m, 0);
  CHECK(w.log.back() == "B>A REJ");
  CHECK(w.b.connections() == 0);
}

TEST_CASE("CM: an owner that goes away leaves nothing behind", "[cm]") {
  Wire w;
  listen_and_connect(w);
  auto id = w.a.connect(kOwnerA, kGidB, connect_params(), 0);
  REQUIRE(id.ok());
  w.run();
  size_t events_before = w.types('A').size();
  w.on_event = [&w](const Seen &s) {
    if (s.who == 'B' && s.type == EventType::kDisconnectRequest)
      REQUIRE(w.b.disconnect(s.conn, {}, w.now).ok());
  };
  w.a.abandon(*id, w.now);  // established: a DREQ, and no event for the gone owner
  w.run();
  CHECK(w.log.back() == "B>A DREP");
  CHECK(w.types('A').size() == events_before);
  CHECK(w.a.connections() == 0);
  CHECK(w.b.connections() == 0);
}

TEST_CASE("CM: communication IDs are random, not a walk one observed ID predicts", "[cm]") {
  // vrnicd's engine (the default generator): a forged DREQ or REJ needs the victim's ID.
  Engine e{0x0276726e69630001ull, {[](const Gid &, const Mad &) {}, [](const Event &) {}}};
  std::vector<uint32_t> ids;
  for (int i = 0; i < 4; i++) {
    auto id = e.connect(kOwnerA, kGidB, connect_params(), 0);
    REQUIRE(id.ok());
    CHECK(*id != 0);
    ids.push_back(*id);
  }
  // A constant step (the old walk) makes every difference equal; random IDs (one chance in
  // 2^32 per pair) do not.
  CHECK(!(ids[1] - ids[0] == ids[2] - ids[1] && ids[2] - ids[1] == ids[3] - ids[2]));
}
