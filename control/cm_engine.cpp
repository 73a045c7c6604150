// The IB CM state machine (cm_engine.h), its owner's side: the calls that start, accept,
// refuse and end connections (each sends its MAD), and what each timer does when it runs out,
// as IBTA ch. 12 and Linux's ib_cm (drivers/infiniband/core/cm.c) do it. The messages
// received are cm_messages.cpp's.
#include "cm_engine.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "errno_status.h"

namespace vrnic::cm {
namespace {

void put_private(Mad &m, Bytes where, const std::vector<uint8_t> &pd) {
  if (!pd.empty()) m.put(where, pd.data(), pd.size());
}

}  // namespace

Engine::Engine(uint64_t ca_guid, Hooks hooks, Timing timing, std::function<uint32_t()> random)
    : ca_guid_(ca_guid), hooks_(std::move(hooks)), timing_(timing), random_(std::move(random)) {
  if (!random_) random_ = [] { return uint32_t(::arc4random()); };
}

uint32_t Engine::new_id() {
  // A communication ID nobody can predict: a forged DREQ or REJ needs the victim's, and IDs
  // that stepped by a constant from a random start gave away every later one with the first
  // (issue 28). Random, never 0, never one in use (timewait included).
  uint32_t id;
  do {
    id = random_();
  } while (id == 0 || conns_.contains(id));
  return id;
}

Engine::Conn *Engine::in_state(uint32_t conn, State want) {
  auto it = conns_.find(conn);
  return it != conns_.end() && it->second.state == want ? &it->second : nullptr;
}

absl::Status Engine::fits(const std::vector<uint8_t> &private_data, Bytes room) {
  if (private_data.size() > room.len) return errno_status(EINVAL, "private data too long");
  return absl::OkStatus();
}

absl::StatusOr<Engine::Conn *> Engine::ready(uint32_t conn, State want, const char *missing,
                                             const std::vector<uint8_t> &private_data, Bytes room) {
  Conn *c = in_state(conn, want);
  if (!c) return errno_status(EINVAL, missing);
  if (absl::Status st = fits(private_data, room); !st.ok()) return st;
  return c;
}

Engine::Conn &Engine::add(State state, uint64_t owner, bool active, const Gid &peer) {
  const uint32_t id = new_id();
  Conn &c = conns_[id];
  c.state = state;
  c.owner = owner;
  c.active = active;
  c.peer = peer;
  c.local_id = id;
  return c;
}

void Engine::send(Conn &c, const Mad &mad) {
  c.last_sent = mad;
  counters_.sent++;
  hooks_.send(c.peer, mad);
}

void Engine::arm(Conn &c, uint64_t now, uint64_t wait_ns, uint8_t retries) {
  c.wait_ns = wait_ns;
  set_deadline(c, now + wait_ns);
  c.retries_left = retries;
}

void Engine::set_deadline(Conn &c, uint64_t deadline) {
  if (c.deadline) timers_.erase({c.deadline, c.local_id});
  c.deadline = deadline;
  if (deadline) timers_.insert({deadline, c.local_id});
}

void Engine::forget(uint32_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  const Conn &c = it->second;
  set_deadline(it->second, 0);
  // Only the entries that are still this connection's (a newer one may have taken a key).
  if (auto r = by_remote_id_.find({c.peer, c.remote_id}); r != by_remote_id_.end() && r->second == id)
    by_remote_id_.erase(r);
  if (auto q = by_remote_qp_.find({c.peer, c.remote_ca_guid, c.remote_qpn});
      q != by_remote_qp_.end() && q->second == id)
    by_remote_qp_.erase(q);
  conns_.erase(it);
}

void Engine::enter_timewait(Conn &c, uint64_t now) {
  c.state = State::kTimewait;
  arm(c, now, 2 * Timing::ns(timing_.packet_life_time), 0);
}

void Engine::send_rej_to(const Gid &to, uint64_t tid, uint32_t remote_id, uint8_t msg_rejected,
                         uint16_t reason, uint32_t local_id) {
  Mad rej;
  rej.init(Attr::kRej, tid);
  rej.put(rej::kLocalCommId, local_id);
  rej.put(rej::kRemoteCommId, remote_id);
  rej.put(rej::kMessageRejected, msg_rejected);
  rej.put(rej::kReason, reason);
  if (reason == kRejTimeout) {  // IBTA: the ARI of a "timeout" REJ is the sender's CA GUID
    uint8_t guid[8];
    for (int i = 0; i < 8; i++) guid[i] = uint8_t(ca_guid_ >> (56 - 8 * i));
    rej.put(rej::kRejectedInfoLength, sizeof(guid));
    rej.put(rej::kAri, guid, sizeof(guid));
  }
  counters_.sent++;
  hooks_.send(to, rej);
}

Engine::Conn *Engine::by_remote(const Gid &peer, uint32_t remote_id) {
  auto it = by_remote_id_.find({peer, remote_id});
  return it == by_remote_id_.end() ? nullptr : &conns_.at(it->second);
}

Engine::Conn *Engine::by_remote_qp(const Gid &peer, uint64_t ca_guid, uint32_t qpn) {
  auto it = by_remote_qp_.find({peer, ca_guid, qpn});
  return it == by_remote_qp_.end() ? nullptr : &conns_.at(it->second);
}

void Engine::learn_remote(Conn &c, uint32_t remote_id, uint64_t ca_guid, uint32_t qpn) {
  c.remote_id = remote_id;
  by_remote_id_[{c.peer, remote_id}] = c.local_id;
  if (ca_guid || qpn) {
    c.remote_ca_guid = ca_guid;
    c.remote_qpn = qpn;
    by_remote_qp_[{c.peer, ca_guid, qpn}] = c.local_id;
  }
}

Engine::Conn *Engine::by_local(const Mad &mad, Field our_id_field) {
  auto it = conns_.find(uint32_t(mad[our_id_field]));
  return it == conns_.end() ? nullptr : &it->second;
}

absl::Status Engine::listen(uint64_t service_id, uint64_t owner) {
  if (!listeners_.emplace(service_id, owner).second)
    return errno_status(EADDRINUSE, "service ID taken");
  return absl::OkStatus();
}

void Engine::stop_listening(uint64_t service_id) {
  listeners_.erase(service_id);
}

absl::StatusOr<uint32_t> Engine::connect(uint64_t owner, const Gid &peer, const ConnectParams &p,
                                         uint64_t now) {
  if (absl::Status st = fits(p.private_data, req::kPrivateData); !st.ok()) return st;
  if (conns_.size() >= kMaxConnections) return errno_status(ENOMEM, "too many connections");
  Conn &c = add(State::kReqSent, owner, true, peer);
  const uint32_t id = c.local_id;
  c.service_id = p.service_id;
  Mad m;
  m.init(Attr::kReq, next_tid_++);
  m.set_attr_mod(p.ece_options);
  m.put(req::kLocalCommId, id);
  m.put(req::kVendorId, p.ece_vendor_id);
  m.put(req::kServiceId, p.service_id);
  m.put(req::kLocalCaGuid, ca_guid_);
  m.put(req::kLocalQpn, p.qpn);
  m.put(req::kResponderResources, p.responder_resources);
  m.put(req::kInitiatorDepth, p.initiator_depth);
  m.put(req::kRemoteCmResponseTimeout, timing_.cm_response_timeout);
  m.put(req::kTransportServiceType, p.transport);
  m.put(req::kStartingPsn, p.starting_psn);
  m.put(req::kLocalCmResponseTimeout, timing_.cm_response_timeout);
  m.put(req::kRetryCount, p.retry_count);
  m.put(req::kPartitionKey, 0xffff);
  m.put(req::kPathMtu, p.path_mtu);
  m.put(req::kRnrRetryCount, p.rnr_retry_count);
  m.put(req::kMaxCmRetries, timing_.max_cm_retries);
  m.put(req::kSrq, p.srq);
  // RoCE: no LIDs (permissive when routed, as Linux fills them), GIDs are the IP addresses.
  m.put(req::kPrimaryLocalLid, 0xffff);
  m.put(req::kPrimaryRemoteLid, 0xffff);
  m.put(req::kPrimaryLocalGid, p.local_gid.data(), 16);
  m.put(req::kPrimaryRemoteGid, p.remote_gid.data(), 16);
  m.put(req::kPrimaryTrafficClass, p.traffic_class);
  m.put(req::kPrimaryHopLimit, p.hop_limit);
  m.put(req::kPrimarySubnetLocal, p.hop_limit <= 1);
  m.put(req::kPrimaryLocalAckTimeout, p.local_ack_timeout);
  put_private(m, req::kPrivateData, p.private_data);
  send(c, m);
  arm(c, now, 2 * Timing::ns(timing_.packet_life_time) + Timing::ns(timing_.cm_response_timeout),
      timing_.max_cm_retries);
  return id;
}

absl::Status Engine::establish(uint32_t conn, uint64_t) {
  Conn *found = in_state(conn, State::kRepReceived);
  if (!found) return errno_status(EINVAL, "no REP to answer");
  Conn &c = *found;
  Mad m;
  m.init(Attr::kRtu, c.last_sent.tid());
  m.put(rtu::kLocalCommId, c.local_id);
  m.put(rtu::kRemoteCommId, c.remote_id);
  send(c, m);
  c.state = State::kEstablished;
  set_deadline(c, 0);
  return absl::OkStatus();
}

absl::Status Engine::accept(uint32_t conn, const AcceptParams &p, uint64_t now) {
  absl::StatusOr<Conn *> found =
      ready(conn, State::kReqReceived, "no REQ to accept", p.private_data, rep::kPrivateData);
  if (!found.ok()) return found.status();
  Conn &c = **found;
  Mad m;
  m.init(Attr::kRep, c.tid);
  m.set_attr_mod(p.ece_options);
  m.put(rep::kLocalCommId, c.local_id);
  put_rep_vendor_id(m, p.ece_vendor_id);
  m.put(rep::kRemoteCommId, c.remote_id);
  m.put(rep::kLocalQpn, p.qpn);
  m.put(rep::kStartingPsn, p.starting_psn);
  m.put(rep::kResponderResources, p.responder_resources);
  m.put(rep::kInitiatorDepth, p.initiator_depth);
  m.put(rep::kTargetAckDelay, p.target_ack_delay);
  m.put(rep::kRnrRetryCount, p.rnr_retry_count);
  m.put(rep::kSrq, p.srq);
  m.put(rep::kLocalCaGuid, ca_guid_);
  put_private(m, rep::kPrivateData, p.private_data);
  send(c, m);
  c.state = State::kRepSent;
  // The active side said how long it takes to answer, and how often we may ask.
  arm(c, now,
      2 * Timing::ns(timing_.packet_life_time) +
          Timing::ns(uint8_t(c.received[req::kLocalCmResponseTimeout])),
      uint8_t(c.received[req::kMaxCmRetries]));
  return absl::OkStatus();
}

// The passive side refuses a REQ; the active side, the REP it received (Linux's
// ib_send_cm_rej in REP_RCVD: rdma_reject after CONNECT_RESPONSE, which librdmacm itself sends
// when the REP's ECE or the QP's RTR/RTS fails).
absl::Status Engine::reject(uint32_t conn, uint16_t reason,
                            const std::vector<uint8_t> &private_data, uint64_t) {
  const bool rep = in_state(conn, State::kRepReceived) != nullptr;
  absl::StatusOr<Conn *> found =
      ready(conn, rep ? State::kRepReceived : State::kReqReceived, "no REQ or REP to reject",
            private_data, rej::kPrivateData);
  if (!found.ok()) return found.status();
  Conn &c = **found;
  Mad m;
  m.init(Attr::kRej, rep ? c.received.tid() : c.tid);
  m.put(rej::kLocalCommId, c.local_id);
  m.put(rej::kRemoteCommId, c.remote_id);
  m.put(rej::kMessageRejected, rep ? 1 : 0);
  m.put(rej::kReason, reason);
  put_private(m, rej::kPrivateData, private_data);
  send(c, m);
  forget(conn);
  return absl::OkStatus();
}

absl::Status Engine::disconnect(uint32_t conn, const std::vector<uint8_t> &private_data,
                                uint64_t now) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return errno_status(EINVAL, "no such connection");
  Conn &c = it->second;
  if (c.state == State::kEstablished) {
    Mad m;
    m.init(Attr::kDreq, next_tid_++);
    m.put(dreq::kLocalCommId, c.local_id);
    m.put(dreq::kRemoteCommId, c.remote_id);
    m.put(dreq::kRemoteQpn, c.remote_qpn);
    put_private(m, dreq::kPrivateData, private_data);
    send(c, m);
    c.state = State::kDreqSent;
    arm(c, now, 2 * Timing::ns(timing_.packet_life_time) + Timing::ns(timing_.cm_response_timeout),
        timing_.max_cm_retries);
    return absl::OkStatus();
  }
  if (c.state == State::kDreqReceived) {
    Mad m;
    m.init(Attr::kDrep, c.tid);
    m.put(drep::kLocalCommId, c.local_id);
    m.put(drep::kRemoteCommId, c.remote_id);
    put_private(m, drep::kPrivateData, private_data);
    send(c, m);
    enter_timewait(c, now);
    return absl::OkStatus();
  }
  if (c.state == State::kDreqSent || c.state == State::kTimewait)
    return absl::OkStatus();  // already on its way down
  return errno_status(EINVAL, "not connected");
}

void Engine::abandon(uint32_t conn, uint64_t now) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  Conn &c = it->second;
  c.owner = 0;  // no more events
  switch (c.state) {
    case State::kReqSent:
    case State::kMraReceived:
      // As Linux: the REQ is withdrawn with REJ "timeout", naming our ID (the peer, holding
      // the REQ, knows us by it) and the message as "other", as ib_cm's cm_format_rej does.
      send_rej_to(c.peer, c.last_sent.tid(), 0, 2, kRejTimeout, c.local_id);
      return forget(conn);
    case State::kRepReceived:
      send_rej_to(c.peer, c.received.tid(), c.remote_id, 1, kRejConsumerDefined, c.local_id);
      return forget(conn);
    case State::kReqReceived:
    case State::kRepSent:
      send_rej_to(c.peer, c.tid, c.remote_id, c.state == State::kReqReceived ? 0 : 2,
                  kRejConsumerDefined, c.local_id);
      return forget(conn);
    case State::kEstablished:
    case State::kDreqReceived:
      (void)disconnect(conn, {}, now);  // DREQ (then time-wait), or DREP
      return;
    case State::kDreqSent:
    case State::kTimewait:
      return;  // ends on its own
    case State::kSidrReqSent:
    case State::kSidrReqReceived:
      return forget(conn);
  }
}

absl::StatusOr<uint32_t> Engine::sidr_request(uint64_t owner, const Gid &peer, uint64_t service_id,
                                              const std::vector<uint8_t> &private_data,
                                              uint64_t now) {
  if (absl::Status st = fits(private_data, sidr_req::kPrivateData); !st.ok()) return st;
  if (conns_.size() >= kMaxConnections) return errno_status(ENOMEM, "too many requests");
  Conn &c = add(State::kSidrReqSent, owner, true, peer);
  const uint32_t id = c.local_id;
  c.service_id = service_id;
  Mad m;
  m.init(Attr::kSidrReq, next_tid_++);
  m.put(sidr_req::kRequestId, id);
  m.put(sidr_req::kPartitionKey, 0xffff);
  m.put(sidr_req::kServiceId, service_id);
  put_private(m, sidr_req::kPrivateData, private_data);
  send(c, m);
  arm(c, now, Timing::ns(timing_.cm_response_timeout), timing_.max_cm_retries);
  return id;
}

absl::Status Engine::sidr_reply(uint32_t request, uint8_t status, uint32_t qpn, uint32_t qkey,
                                const std::vector<uint8_t> &private_data) {
  absl::StatusOr<Conn *> found = ready(request, State::kSidrReqReceived, "no SIDR_REQ to answer",
                                       private_data, sidr_rep::kPrivateData);
  if (!found.ok()) return found.status();
  Conn &c = **found;
  Mad m;
  m.init(Attr::kSidrRep, c.tid);
  m.put(sidr_rep::kRequestId, c.remote_id);
  m.put(sidr_rep::kStatus, status);
  m.put(sidr_rep::kQpn, qpn);
  m.put(sidr_rep::kServiceId, c.service_id);
  m.put(sidr_rep::kQkey, qkey);
  put_private(m, sidr_rep::kPrivateData, private_data);
  send(c, m);
  forget(request);
  return absl::OkStatus();
}

void Engine::expire(Conn &c, uint64_t now) {
  if (c.state == State::kTimewait) {
    Conn gone = c;
    forget(gone.local_id);
    return emit(
        {EventType::kTimewaitExit, gone.local_id, gone.owner, 0, false, gone.peer, nullptr});
  }
  if (c.retries_left > 0) {
    c.retries_left--;
    counters_.resent++;
    counters_.sent++;
    hooks_.send(c.peer, c.last_sent);
    set_deadline(c, now + c.wait_ns);
    return;
  }
  if (c.state == State::kDreqSent) {  // no DREP: down all the same
    enter_timewait(c, now);
    return emit({EventType::kDisconnected, c.local_id, c.owner, 0, true, c.peer, nullptr});
  }
  // A request the owner never answered: its sender has stopped waiting. It hears so, in
  // case it has not (as an abandoned one would), and the owner's request is over.
  if (c.state == State::kReqReceived)
    send_rej_to(c.peer, c.tid, c.remote_id, 0, kRejTimeout, c.local_id);
  Conn gone = c;
  forget(gone.local_id);
  emit({EventType::kUnreachable, gone.local_id, gone.owner, 0, true, gone.peer, nullptr});
}

uint64_t Engine::sender_patience(uint8_t response_timeout, uint8_t retries) const {
  // Each try waits the response timeout, or the service timeout of the MRA we send once,
  // whichever is longer, plus the way there and back.
  const uint64_t try_ns = std::max(Timing::ns(response_timeout & 31),
                                   Timing::ns(timing_.cm_response_timeout)) +
                          2 * Timing::ns(timing_.packet_life_time);
  return std::min(kMaxPendingNs, (uint64_t(retries & 15) + 1) * try_ns);  // no overflow: < 2^48
}

void Engine::tick(uint64_t now) {
  std::vector<uint32_t> due;
  for (auto t = timers_.begin(); t != timers_.end() && t->first <= now; ++t)
    due.push_back(t->second);
  for (uint32_t id : due) {
    auto it = conns_.find(id);  // an event of an earlier one may have changed it
    if (it != conns_.end() && it->second.deadline && it->second.deadline <= now)
      expire(it->second, now);
  }
}

uint64_t Engine::next_deadline() const {
  return timers_.empty() ? 0 : timers_.begin()->first;
}

}  // namespace vrnic::cm
