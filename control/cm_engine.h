// vrnicd's IB connection manager for one device (IBTA vol. 1 ch. 12, as Linux's ib_cm does
// it): the state of each connection, the MADs it sends and answers, their timers and retries,
// MRA, duplicates, stale connections, disconnection and time-wait, and service ID resolution
// (SIDR) for UD. It does no I/O: MADs go out and events go up through the Hooks, and the time
// comes in with each call. So the very engine runs between two vrnicd, against a kernel peer,
// and in the unit tests with a virtual clock (tests/unit/cm_engine_test.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vrnic/cm_wire.h"

namespace vrnic::cm {

// The timers, as IBA encodes them (4.096 us << value), and the retry count.
struct Timing {
  uint8_t cm_response_timeout = 20;  // ours, and what we wait for the peer's: 4.3 s
  uint8_t packet_life_time = 16;     // the path's, each way: 268 ms
  uint8_t max_cm_retries = 15;
  // 4.096 us << value, in ns.
  static constexpr uint64_t ns(uint8_t value) { return 4096ull << value; }
};

// What a REQ says of the active side's QP and path (rdma_connect's parameters).
struct ConnectParams {
  uint64_t service_id = 0;
  uint32_t qpn = 0;
  uint32_t starting_psn = 0;  // the PSN the active side will receive (Linux's rule)
  uint8_t transport = 0;      // 0 RC, 1 UC
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t path_mtu = 3;  // enum ibv_mtu
  bool srq = false;
  Gid local_gid{}, remote_gid{};
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint8_t local_ack_timeout = 18;
  uint32_t ece_vendor_id = 0;  // ECE: 0 offers none
  uint32_t ece_options = 0;
  std::vector<uint8_t> private_data;  // up to 92 bytes
};

// What a REP says of the passive side's QP (rdma_accept's parameters).
struct AcceptParams {
  uint32_t qpn = 0;
  uint32_t starting_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t rnr_retry_count = 7;
  uint8_t target_ack_delay = 15;
  bool srq = false;
  uint32_t ece_vendor_id = 0;  // ECE: the REQ's vendor ID echoed (0: none), our choice of its options
  uint32_t ece_options = 0;
  std::vector<uint8_t> private_data;  // up to 196 bytes
};

enum class EventType {
  kReqReceived,        // passive: a REQ for one of the owner's listeners (conn is new)
  kRepReceived,        // active: the peer accepted; establish() sends the RTU
  kEstablished,        // passive: the RTU came
  kRejected,           // the peer refused (reason); the connection is gone
  kUnreachable,        // no answer after every retry; the connection is gone
  kDisconnectRequest,  // the peer sent a DREQ; disconnect() answers it
  kDisconnected,       // our DREQ was answered (or ran out of retries: timed_out)
  kTimewaitExit,       // time-wait over; the connection is gone
  kSidrReqReceived,    // passive: a SIDR_REQ for one of the owner's listeners
  kSidrRepReceived,    // active: the answer (status, QPN, Q_Key); the request is gone
};

struct Event {
  EventType type;
  uint32_t conn;           // our communication ID (SIDR: our request)
  uint64_t owner;          // whose listener or connection it is
  uint16_t reason = 0;     // kRejected: the REJ reason; kSidrRepReceived: the status
  bool timed_out = false;  // kDisconnected: the DREQ went unanswered
  Gid peer{};
  const Mad *mad = nullptr;  // the message that caused it (fields, private data), if any
};

class Engine {
 public:
  struct Hooks {
    std::function<void(const Gid &to, const Mad &mad)> send;  // to the peer's QP1
    std::function<void(const Event &e)> event;
  };
  struct Counters {
    uint64_t sent = 0, received = 0;
    uint64_t dropped = 0;  // malformed, unknown, or for no connection it could be
    uint64_t resent = 0;   // retries after a timeout
    uint64_t duplicates = 0;
  };

  // A device-wide bound, behind the per-user cm_ids quota and each listener's backlog (which
  // are what a flood of connects or REQs meets first): past it REJ "no resources".
  static constexpr size_t kMaxConnections = 1u << 20;
  // A request nobody answers is given up this long after it came, at the most: by then its
  // sender has stopped waiting (sender_patience), however long its REQ says it waits.
  static constexpr uint64_t kMaxPendingNs = 600'000'000'000;

  // random: where communication IDs come from (default: arc4random, which no number of
  // observed IDs predicts; tests give a seeded one).
  Engine(uint64_t ca_guid, Hooks hooks, Timing timing = {},
         std::function<uint32_t()> random = nullptr);

  // Passive side: REQs and SIDR_REQs for service_id go to `owner`. EADDRINUSE if taken.
  absl::Status listen(uint64_t service_id, uint64_t owner);
  void stop_listening(uint64_t service_id);

  // Active side: sends a REQ; our communication ID.
  absl::StatusOr<uint32_t> connect(uint64_t owner, const Gid &peer, const ConnectParams &p,
                                   uint64_t now);
  // After kRepReceived: the RTU, and the connection is established.
  absl::Status establish(uint32_t conn, uint64_t now);

  // Passive side, after kReqReceived: a REP (then kEstablished with the RTU), or a REJ.
  absl::Status accept(uint32_t conn, const AcceptParams &p, uint64_t now);
  absl::Status reject(uint32_t conn, uint16_t reason, const std::vector<uint8_t> &private_data,
                      uint64_t now);

  // Either side, established: a DREQ (kDisconnected follows), or the DREP of a DREQ received.
  absl::Status disconnect(uint32_t conn, const std::vector<uint8_t> &private_data, uint64_t now);
  // Hands a connection to another owner (rdma_cm: a REQ's connection goes from the listener to
  // the id made for it).
  void set_owner(uint32_t conn, uint64_t owner) {
    if (auto it = conns_.find(conn); it != conns_.end()) it->second.owner = owner;
  }
  // The owner is gone: whatever the state needs (REJ, DREQ, DREP), then forgotten.
  void abandon(uint32_t conn, uint64_t now);
  // A request (REQ or SIDR_REQ) its listener has no room for: forgotten without an answer,
  // as ib_cm does when the listener's backlog is full, so that the sender's next try of the
  // same request may find room.
  void drop_request(uint32_t conn) { forget(conn); }

  // UD: a SIDR_REQ and its answer.
  absl::StatusOr<uint32_t> sidr_request(uint64_t owner, const Gid &peer, uint64_t service_id,
                                        const std::vector<uint8_t> &private_data, uint64_t now);
  absl::Status sidr_reply(uint32_t request, uint8_t status, uint32_t qpn, uint32_t qkey,
                          const std::vector<uint8_t> &private_data);

  void receive(const Gid &from, const Mad &mad, uint64_t now);
  // Runs the timers due by `now`.
  void tick(uint64_t now);
  // The next timer, or 0 when none is armed.
  uint64_t next_deadline() const;

  const Counters &counters() const { return counters_; }
  size_t connections() const { return conns_.size(); }

 private:
  enum class State {
    kReqSent,
    kMraReceived,  // active: the peer asked for more time
    kRepReceived,  // active: waiting for establish()
    kReqReceived,  // passive: waiting for accept() or reject()
    kRepSent,
    kEstablished,
    kDreqSent,
    kDreqReceived,
    kTimewait,
    kSidrReqSent,
    kSidrReqReceived,
  };
  struct Conn {
    State state = State::kReqSent;
    uint64_t owner = 0;
    bool active = false;
    Gid peer{};
    uint32_t local_id = 0;
    uint32_t remote_id = 0;
    uint64_t remote_ca_guid = 0;
    uint32_t remote_qpn = 0;
    uint64_t service_id = 0;
    uint64_t tid = 0;       // the transaction the passive side answers in (the REQ's, a DREQ's)
    Mad received;           // the last message that moved it (the REQ, REP, DREQ, ...)
    Mad last_sent;          // resent as is on a timeout or a duplicate
    uint64_t deadline = 0;  // 0: no timer; changed only through set_deadline
    uint8_t retries_left = 0;
    uint64_t wait_ns = 0;  // between resends
    bool mra_sent = false;
  };

  uint32_t new_id();
  Conn &add(State state, uint64_t owner, bool active, const Gid &peer);
  // The connection if it is in state `want` (what a call on it requires), else nullptr.
  Conn *in_state(uint32_t conn, State want);
  // EINVAL when private data does not fit the message's room for it.
  static absl::Status fits(const std::vector<uint8_t> &private_data, Bytes room);
  // Both: what an owner's call answering a message checks first (EINVAL, saying `missing`).
  absl::StatusOr<Conn *> ready(uint32_t conn, State want, const char *missing,
                               const std::vector<uint8_t> &private_data, Bytes room);
  void send(Conn &c, const Mad &mad);
  void arm(Conn &c, uint64_t now, uint64_t wait_ns, uint8_t retries);
  // Arms (or with 0 stops) the connection's one timer, kept in timers_ too.
  void set_deadline(Conn &c, uint64_t deadline);
  // Events of connections whose owner is gone (abandon) are not told.
  void emit(const Event &e) {
    if (e.owner) hooks_.event(e);
  }
  void forget(uint32_t id);
  void enter_timewait(Conn &c, uint64_t now);
  // local_id: ours, when the REJ ends a connection of ours the peer may know of (0: none).
  void send_rej_to(const Gid &to, uint64_t tid, uint32_t remote_id, uint8_t msg_rejected,
                   uint16_t reason, uint32_t local_id = 0);
  Conn *by_remote(const Gid &peer, uint32_t remote_id);
  // The connection whose peer QP (CA GUID and QPN, at that address) is this one, if any.
  Conn *by_remote_qp(const Gid &peer, uint64_t ca_guid, uint32_t qpn);
  // What a REQ, REP or SIDR_REQ tells of the other side, written through here so that the
  // lookups above are an index, not a walk over every connection (issue 28, row 10: each
  // REQ cost O(connections); at 45 K connections a stats call waited 38 s).
  void learn_remote(Conn &c, uint32_t remote_id, uint64_t ca_guid = 0, uint32_t qpn = 0);
  Conn *by_local(const Mad &mad, Field local_id_field);

  void on_req(const Gid &from, const Mad &mad, uint64_t now);
  void on_mra(const Gid &from, const Mad &mad, uint64_t now);
  void on_rej(const Gid &from, const Mad &mad);
  void on_rep(const Gid &from, const Mad &mad, uint64_t now);
  void on_rtu(const Gid &from, const Mad &mad);
  void on_dreq(const Gid &from, const Mad &mad, uint64_t now);
  void on_drep(const Gid &from, const Mad &mad, uint64_t now);
  void on_sidr_req(const Gid &from, const Mad &mad, uint64_t now);
  void on_sidr_rep(const Gid &from, const Mad &mad);
  void expire(Conn &c, uint64_t now);
  // How long a sender whose REQ says `response_timeout` and `retries` keeps asking, our MRA
  // included: a request we hold unanswered past that is answered by nobody.
  uint64_t sender_patience(uint8_t response_timeout, uint8_t retries) const;

  uint64_t ca_guid_;
  Hooks hooks_;
  Timing timing_;
  std::function<uint32_t()> random_;
  uint64_t next_tid_ = 1;
  Counters counters_;
  std::map<uint32_t, Conn> conns_;  // by our ID
  std::map<std::pair<Gid, uint32_t>, uint32_t> by_remote_id_;               // -> our ID
  std::map<std::tuple<Gid, uint64_t, uint32_t>, uint32_t> by_remote_qp_;  // -> our ID
  // The armed timers in deadline order, so that a turn of tick() or next_deadline() costs
  // what is due, not a walk over every connection (cmtime keeps thousands alive at once).
  std::set<std::pair<uint64_t, uint32_t>> timers_;     // (deadline, our ID)
  absl::flat_hash_map<uint64_t, uint64_t> listeners_;  // service ID -> owner
};

}  // namespace vrnic::cm
