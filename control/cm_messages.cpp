// The IB CM state machine (cm_engine.h), the messages' side: which state takes which MAD, what
// a duplicate is answered with, stale connections, and what is dropped and counted (malformed,
// unsolicited, from the wrong peer), as IBTA ch. 12 and Linux's ib_cm handle them.
#include "cm_engine.h"

namespace vrnic::cm {
namespace {

bool valid_header(const Mad &m) {
  return m.base_version() == kBaseVersion && m.mgmt_class() == kMgmtClassCm &&
         m.class_version() == kClassVersion && m.method() == kMethodSend;
}

}  // namespace

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
  if (Conn *c = by_remote_qp(from, remote_guid, remote_qpn)) {
    // The peer's QP is connected to us already: that connection is stale (IBTA 12.9.8.3.1).
    send_rej_to(from, mad.tid(), remote_id, 0, kRejStaleConnection);
    if (c->state == State::kEstablished) (void)disconnect(c->local_id, {}, now);
    return;
  }
  auto listener = listeners_.find(mad[req::kServiceId]);
  if (listener == listeners_.end())
    return send_rej_to(from, mad.tid(), remote_id, 0, kRejInvalidServiceId);
  if (conns_.size() >= kMaxConnections)
    return send_rej_to(from, mad.tid(), remote_id, 0, kRejNoResources);
  Conn &c = add(State::kReqReceived, listener->second, false, from);
  const uint32_t id = c.local_id;
  learn_remote(c, remote_id, remote_guid, remote_qpn);
  c.service_id = mad[req::kServiceId];
  c.tid = mad.tid();
  c.received = mad;
  // Kept only while its sender may still take an answer (issue 28, row 10: a request whose
  // sender vanished without a REJ waited for ever).
  set_deadline(c, now + sender_patience(uint8_t(mad[req::kRemoteCmResponseTimeout]),
                                        uint8_t(mad[req::kMaxCmRetries])));
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
  set_deadline(*c, now + Timing::ns(uint8_t(mad[mra::kServiceTimeout])) +
                       2 * Timing::ns(timing_.packet_life_time));
}

void Engine::on_rej(const Gid &from, const Mad &mad) {
  Conn *c = by_local(mad, rej::kRemoteCommId);
  // A REQ withdrawn by its sender, who may never have learnt our ID: the request we hold is
  // found by the sender's (else it waited for an answer nobody would take, for ever).
  if (!c && mad[rej::kRemoteCommId] == 0) {
    c = by_remote(from, uint32_t(mad[rej::kLocalCommId]));
    if (c && c->state != State::kReqReceived) c = nullptr;
  }
  if (!c || c->peer != from) {
    counters_.dropped++;
    return;
  }
  switch (c->state) {
    case State::kReqSent:
    case State::kMraReceived:
    case State::kRepReceived:
    case State::kRepSent:
    case State::kReqReceived:  // withdrawn before the owner answered
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
  set_deadline(*c, 0);
  learn_remote(*c, uint32_t(mad[rep::kLocalCommId]), mad[rep::kLocalCaGuid],
               uint32_t(mad[rep::kLocalQpn]));
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
  set_deadline(*c, 0);
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
      set_deadline(*c, 0);
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

void Engine::on_sidr_req(const Gid &from, const Mad &mad, uint64_t now) {
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
  learn_remote(c, request);
  c.service_id = mad[sidr_req::kServiceId];
  c.tid = mad.tid();
  c.received = mad;
  // A SIDR_REQ says nothing of its sender's timers: ours, as our own requests use them.
  set_deadline(c, now + sender_patience(timing_.cm_response_timeout, timing_.max_cm_retries));
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

}  // namespace vrnic::cm
