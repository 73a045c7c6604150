// The IB CM state machine (cm_engine.h). Message by message, as IBTA ch. 12 and Linux's ib_cm
// (drivers/infiniband/core/cm.c) handle them: which state takes which message, what a
// duplicate is answered with, and what each timer does when it runs out.
#include "cm_engine.h"

#include <cerrno>

#include "errno_status.h"

namespace vrnic::cm {
namespace {

// More connections than this (a flood of REQs) are refused with REJ "no resources".
constexpr size_t kMaxConnections = 1u << 16;

bool valid_header(const Mad &m) {
  return m.base_version() == kBaseVersion && m.mgmt_class() == kMgmtClassCm &&
         m.class_version() == kClassVersion && m.method() == kMethodSend;
}

void put_private(Mad &m, Bytes where, const std::vector<uint8_t> &pd) {
  if (!pd.empty()) m.put(where, pd.data(), pd.size());
}

}  // namespace

Engine::Engine(uint64_t ca_guid, Hooks hooks, Timing timing, uint32_t seed)
    : ca_guid_(ca_guid), hooks_(std::move(hooks)), timing_(timing), next_id_(seed | 1) {}

uint32_t Engine::new_id() {
  // A communication ID a peer cannot confuse with one we used before: an odd-step walk from
  // a random start, skipping 0 and IDs in use.
  do {
    next_id_ += 0x9e3779b9u;
  } while (next_id_ == 0 || conns_.contains(next_id_));
  return next_id_;
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
  c.deadline = now + wait_ns;
  c.retries_left = retries;
}

void Engine::forget(uint32_t id) {
  conns_.erase(id);
}

void Engine::enter_timewait(Conn &c, uint64_t now) {
  c.state = State::kTimewait;
  arm(c, now, 2 * Timing::ns(timing_.packet_life_time), 0);
}

void Engine::send_rej_to(const Gid &to, uint64_t tid, uint32_t remote_id, uint8_t msg_rejected,
                         uint16_t reason) {
  Mad rej;
  rej.init(Attr::kRej, tid);
  rej.put(rej::kRemoteCommId, remote_id);
  rej.put(rej::kMessageRejected, msg_rejected);
  rej.put(rej::kReason, reason);
  counters_.sent++;
  hooks_.send(to, rej);
}

Engine::Conn *Engine::by_remote(const Gid &peer, uint32_t remote_id) {
  for (auto &[id, c] : conns_)
    if (c.remote_id == remote_id && c.peer == peer) return &c;
  return nullptr;
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
  if (p.private_data.size() > req::kPrivateData.len)
    return errno_status(EINVAL, "private data too long");
  if (conns_.size() >= kMaxConnections) return errno_status(ENOMEM, "too many connections");
  Conn &c = add(State::kReqSent, owner, true, peer);
  const uint32_t id = c.local_id;
  c.service_id = p.service_id;
  Mad m;
  m.init(Attr::kReq, next_tid_++);
  m.put(req::kLocalCommId, id);
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
  auto it = conns_.find(conn);
  if (it == conns_.end() || it->second.state != State::kRepReceived)
    return errno_status(EINVAL, "no REP to answer");
  Conn &c = it->second;
  Mad m;
  m.init(Attr::kRtu, c.last_sent.tid());
  m.put(rtu::kLocalCommId, c.local_id);
  m.put(rtu::kRemoteCommId, c.remote_id);
  send(c, m);
  c.state = State::kEstablished;
  c.deadline = 0;
  return absl::OkStatus();
}

absl::Status Engine::accept(uint32_t conn, const AcceptParams &p, uint64_t now) {
  auto it = conns_.find(conn);
  if (it == conns_.end() || it->second.state != State::kReqReceived)
    return errno_status(EINVAL, "no REQ to accept");
  if (p.private_data.size() > rep::kPrivateData.len)
    return errno_status(EINVAL, "private data too long");
  Conn &c = it->second;
  Mad m;
  m.init(Attr::kRep, c.tid);
  m.put(rep::kLocalCommId, c.local_id);
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

absl::Status Engine::reject(uint32_t conn, uint16_t reason,
                            const std::vector<uint8_t> &private_data, uint64_t) {
  auto it = conns_.find(conn);
  if (it == conns_.end() || it->second.state != State::kReqReceived)
    return errno_status(EINVAL, "no REQ to reject");
  if (private_data.size() > rej::kPrivateData.len)
    return errno_status(EINVAL, "private data too long");
  Conn &c = it->second;
  Mad m;
  m.init(Attr::kRej, c.tid);
  m.put(rej::kLocalCommId, c.local_id);
  m.put(rej::kRemoteCommId, c.remote_id);
  m.put(rej::kMessageRejected, 0);
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
      // As Linux: the REQ is withdrawn with REJ "timeout".
      send_rej_to(c.peer, c.last_sent.tid(), 0, 0, kRejTimeout);
      return forget(conn);
    case State::kRepReceived:
      send_rej_to(c.peer, c.received.tid(), c.remote_id, 1, kRejConsumerDefined);
      return forget(conn);
    case State::kReqReceived:
    case State::kRepSent:
      send_rej_to(c.peer, c.tid, c.remote_id, c.state == State::kReqReceived ? 0 : 2,
                  kRejConsumerDefined);
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
  if (private_data.size() > sidr_req::kPrivateData.len)
    return errno_status(EINVAL, "private data too long");
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
  auto it = conns_.find(request);
  if (it == conns_.end() || it->second.state != State::kSidrReqReceived)
    return errno_status(EINVAL, "no SIDR_REQ to answer");
  if (private_data.size() > sidr_rep::kPrivateData.len)
    return errno_status(EINVAL, "private data too long");
  Conn &c = it->second;
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

void Engine::receive(const Gid &from, const Mad &mad, uint64_t now) {
  counters_.received++;
  if (!valid_header(mad)) {
    counters_.dropped++;
    return;
  }
  switch (mad.attr()) {
    case Attr::kReq:
      return on_req(from, mad, now);
    case Attr::kMra:
      return on_mra(from, mad, now);
    case Attr::kRej:
      return on_rej(from, mad);
    case Attr::kRep:
      return on_rep(from, mad, now);
    case Attr::kRtu:
      return on_rtu(from, mad);
    case Attr::kDreq:
      return on_dreq(from, mad, now);
    case Attr::kDrep:
      return on_drep(from, mad, now);
    case Attr::kSidrReq:
      return on_sidr_req(from, mad, now);
    case Attr::kSidrRep:
      return on_sidr_rep(from, mad);
    default:  // LAP/APR (no alternate paths on RoCE), or nothing of ch. 12
      counters_.dropped++;
      return;
  }
}

void Engine::on_req(const Gid &from, const Mad &mad, uint64_t now) {
  const uint32_t remote_id = uint32_t(mad[req::kLocalCommId]);
  if (Conn *dup = by_remote(from, remote_id)) {
    // As Linux's cm_dup_req_handler: an MRA while the owner decides, REJ "stale" in time-wait,
    // else nothing (a lost REP is resent by its own timer).
    counters_.duplicates++;
    if (dup->state == State::kReqReceived && !dup->mra_sent) {
      // The owner is slow to answer: ask for time once (Linux's delayed MRA).
      Mad m;
      m.init(Attr::kMra, dup->tid);
      m.put(mra::kLocalCommId, dup->local_id);
      m.put(mra::kRemoteCommId, dup->remote_id);
      m.put(mra::kMessageMraed, 0);
      m.put(mra::kServiceTimeout, timing_.cm_response_timeout);
      counters_.sent++;
      hooks_.send(from, m);
      dup->mra_sent = true;
    } else if (dup->state == State::kTimewait) {
      send_rej_to(from, mad.tid(), remote_id, 0, kRejStaleConnection);
    }
    return;
  }
  const uint64_t transport = mad[req::kTransportServiceType];
  if (transport != 0 && transport != 1)  // RC and UC; no RD or XRC
    return send_rej_to(from, mad.tid(), remote_id, 0, kRejInvalidTransportType);
  const uint64_t remote_guid = mad[req::kLocalCaGuid];
  const uint32_t remote_qpn = uint32_t(mad[req::kLocalQpn]);
  for (auto &[id, c] : conns_) {
    if (c.remote_ca_guid != remote_guid || c.remote_qpn != remote_qpn || c.peer != from) continue;
    // The peer's QP is connected to us already: that connection is stale (IBTA 12.9.8.3.1).
    send_rej_to(from, mad.tid(), remote_id, 0, kRejStaleConnection);
    if (c.state == State::kEstablished) (void)disconnect(id, {}, now);
    return;
  }
  auto listener = listeners_.find(mad[req::kServiceId]);
  if (listener == listeners_.end())
    return send_rej_to(from, mad.tid(), remote_id, 0, kRejInvalidServiceId);
  if (conns_.size() >= kMaxConnections)
    return send_rej_to(from, mad.tid(), remote_id, 0, kRejNoResources);
  Conn &c = add(State::kReqReceived, listener->second, false, from);
  const uint32_t id = c.local_id;
  c.remote_id = remote_id;
  c.remote_ca_guid = remote_guid;
  c.remote_qpn = remote_qpn;
  c.service_id = mad[req::kServiceId];
  c.tid = mad.tid();
  c.received = mad;
  emit({EventType::kReqReceived, id, c.owner, 0, false, from, &c.received});
}

void Engine::on_mra(const Gid &from, const Mad &mad, uint64_t now) {
  Conn *c = by_local(mad, mra::kRemoteCommId);
  if (!c || c->peer != from) {
    counters_.dropped++;
    return;
  }
  const uint64_t what = mad[mra::kMessageMraed];
  const bool for_req =
      what == 0 && (c->state == State::kReqSent || c->state == State::kMraReceived);
  const bool for_rep = what == 1 && c->state == State::kRepSent;
  if (!for_req && !for_rep) {
    counters_.dropped++;
    return;
  }
  if (for_req) c->state = State::kMraReceived;
  // The peer needs this long; our resends wait until then (the retries left are kept).
  c->deadline = now + Timing::ns(uint8_t(mad[mra::kServiceTimeout])) +
                2 * Timing::ns(timing_.packet_life_time);
}

void Engine::on_rej(const Gid &from, const Mad &mad) {
  Conn *c = by_local(mad, rej::kRemoteCommId);
  if (!c || c->peer != from) {
    counters_.dropped++;
    return;
  }
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReceived:
    case State::kRepReceived:
    case State::kRepSent:
      break;
    default:
      counters_.dropped++;
      return;
  }
  Conn gone = *c;
  gone.received = mad;
  forget(gone.local_id);
  emit({EventType::kRejected, gone.local_id, gone.owner, uint16_t(mad[rej::kReason]), false, from,
        &gone.received});
}

void Engine::on_rep(const Gid &from, const Mad &mad, uint64_t) {
  Conn *c = by_local(mad, rep::kRemoteCommId);
  if (!c || c->peer != from || !c->active) {
    // A REP for nothing we asked for (IBTA: REJ "invalid communication ID").
    counters_.dropped++;
    return send_rej_to(from, mad.tid(), uint32_t(mad[rep::kLocalCommId]), 1, kRejInvalidCommId);
  }
  if (c->state == State::kEstablished) {  // our RTU was lost
    counters_.duplicates++;
    counters_.sent++;
    hooks_.send(from, c->last_sent);
    return;
  }
  if (c->state != State::kReqSent && c->state != State::kMraReceived) {
    counters_.duplicates++;
    return;
  }
  c->state = State::kRepReceived;
  c->deadline = 0;
  c->remote_id = uint32_t(mad[rep::kLocalCommId]);
  c->remote_qpn = uint32_t(mad[rep::kLocalQpn]);
  c->remote_ca_guid = mad[rep::kLocalCaGuid];
  c->received = mad;
  emit({EventType::kRepReceived, c->local_id, c->owner, 0, false, from, &c->received});
}

void Engine::on_rtu(const Gid &from, const Mad &mad) {
  Conn *c = by_local(mad, rtu::kRemoteCommId);
  if (!c || c->peer != from || c->state != State::kRepSent) {
    counters_.dropped++;
    return;
  }
  c->state = State::kEstablished;
  c->deadline = 0;
  emit({EventType::kEstablished, c->local_id, c->owner, 0, false, from, &mad});
}

void Engine::on_dreq(const Gid &from, const Mad &mad, uint64_t now) {
  Conn *c = by_local(mad, dreq::kRemoteCommId);
  auto drep = [&](uint32_t local_id, uint32_t remote_id) {
    Mad m;
    m.init(Attr::kDrep, mad.tid());
    m.put(drep::kLocalCommId, local_id);
    m.put(drep::kRemoteCommId, remote_id);
    counters_.sent++;
    hooks_.send(from, m);
  };
  if (!c || c->peer != from) {
    // Forgotten already (time-wait over): answered all the same, so the peer's DREQ ends.
    counters_.duplicates++;
    return drep(uint32_t(mad[dreq::kRemoteCommId]), uint32_t(mad[dreq::kLocalCommId]));
  }
  switch (c->state) {
    case State::kRepSent:  // the RTU was lost, but the peer is up: established, then this
      c->state = State::kEstablished;
      emit({EventType::kEstablished, c->local_id, c->owner, 0, false, from, nullptr});
      [[fallthrough]];
    case State::kEstablished:
      c->state = State::kDreqReceived;
      c->deadline = 0;
      c->tid = mad.tid();
      c->received = mad;
      if (c->owner) {
        emit({EventType::kDisconnectRequest, c->local_id, c->owner, 0, false, from, &c->received});
      } else {
        (void)disconnect(c->local_id, {}, now);  // nobody to ask: answer at once
      }
      return;
    case State::kDreqSent: {  // both ended at once
      drep(c->local_id, c->remote_id);
      enter_timewait(*c, now);
      emit({EventType::kDisconnected, c->local_id, c->owner, 0, false, from, &mad});
      return;
    }
    case State::kTimewait:
      counters_.duplicates++;
      return drep(c->local_id, c->remote_id);
    default:
      counters_.duplicates++;
      return;
  }
}

void Engine::on_drep(const Gid &from, const Mad &mad, uint64_t now) {
  Conn *c = by_local(mad, drep::kRemoteCommId);
  if (!c || c->peer != from || c->state != State::kDreqSent) {
    counters_.dropped++;
    return;
  }
  enter_timewait(*c, now);
  emit({EventType::kDisconnected, c->local_id, c->owner, 0, false, from, &mad});
}

void Engine::on_sidr_req(const Gid &from, const Mad &mad, uint64_t) {
  const uint32_t request = uint32_t(mad[sidr_req::kRequestId]);
  if (by_remote(from, request)) {
    counters_.duplicates++;
    return;  // the owner has it and will answer
  }
  auto listener = listeners_.find(mad[sidr_req::kServiceId]);
  if (listener == listeners_.end() || conns_.size() >= kMaxConnections) {
    Mad m;
    m.init(Attr::kSidrRep, mad.tid());
    m.put(sidr_rep::kRequestId, request);
    m.put(sidr_rep::kStatus, listener == listeners_.end() ? kSidrServiceIdNotSupported : kSidrNoQp);
    m.put(sidr_rep::kServiceId, mad[sidr_req::kServiceId]);
    counters_.sent++;
    hooks_.send(from, m);
    return;
  }
  Conn &c = add(State::kSidrReqReceived, listener->second, false, from);
  const uint32_t id = c.local_id;
  c.remote_id = request;
  c.service_id = mad[sidr_req::kServiceId];
  c.tid = mad.tid();
  c.received = mad;
  emit({EventType::kSidrReqReceived, id, c.owner, 0, false, from, &c.received});
}

void Engine::on_sidr_rep(const Gid &from, const Mad &mad) {
  Conn *c = by_local(mad, sidr_rep::kRequestId);
  if (!c || c->peer != from || c->state != State::kSidrReqSent) {
    counters_.dropped++;
    return;
  }
  Conn gone = *c;
  gone.received = mad;
  forget(gone.local_id);
  emit({EventType::kSidrRepReceived, gone.local_id, gone.owner, uint16_t(mad[sidr_rep::kStatus]),
        false, from, &gone.received});
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
    c.deadline = now + c.wait_ns;
    return;
  }
  if (c.state == State::kDreqSent) {  // no DREP: down all the same
    enter_timewait(c, now);
    return emit({EventType::kDisconnected, c.local_id, c.owner, 0, true, c.peer, nullptr});
  }
  Conn gone = c;
  forget(gone.local_id);
  emit({EventType::kUnreachable, gone.local_id, gone.owner, 0, true, gone.peer, nullptr});
}

void Engine::tick(uint64_t now) {
  std::vector<uint32_t> due;
  for (auto &[id, c] : conns_)
    if (c.deadline && c.deadline <= now) due.push_back(id);
  for (uint32_t id : due) {
    auto it = conns_.find(id);  // an event of an earlier one may have changed it
    if (it != conns_.end() && it->second.deadline && it->second.deadline <= now)
      expire(it->second, now);
  }
}

uint64_t Engine::next_deadline() const {
  uint64_t next = 0;
  for (const auto &[id, c] : conns_)
    if (c.deadline && (!next || c.deadline < next)) next = c.deadline;
  return next;
}

}  // namespace vrnic::cm
