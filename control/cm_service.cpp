// rdma_cm in vrnicd (cm_service.h): rdma_cm calls to CM messages, CM events to rdma_cm events.
#include "cm_service.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "client_fds.h"
#include "errno_status.h"
#include "vrnic/ctl_io.h"

namespace vrnic {
namespace {

// enum rdma_port_space.
constexpr uint16_t kPsIpoib = 0x0002, kPsTcp = 0x0106, kPsUdp = 0x0111, kPsIb = 0x013f;
// Ports vrnicd hands out for a bind to port 0 (Linux's default ip_local_port_range).
constexpr uint16_t kEphemeralFirst = 32768, kEphemeralLast = 60999;
// What an rdma_cm REQ's private data holds after the IP header (RDMACM.md: 56 and 180).
constexpr size_t kReqUserData = cm::req::kPrivateData.len - cm::kIpHeaderBytes;
constexpr size_t kSidrUserData = cm::sidr_req::kPrivateData.len - cm::kIpHeaderBytes;
constexpr uint32_t kRdmaUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
// A listen backlog of 0, or of more than this, is this (ucma's max_backlog default).
constexpr uint32_t kMaxBacklog = 1024;

// The header carries IPv4 addresses in the last 4 of 16 bytes, the rest zero (not ::ffff).
void to_header_address(const uint8_t gid[16], uint8_t out[16]) {
  std::memset(out, 0, 16);
  if (ctl::cm_ipv4_mapped(gid)) {
    std::memcpy(out + 12, gid + 12, 4);
  } else {
    std::memcpy(out, gid, 16);
  }
}

std::vector<uint8_t> with_ip_header(const ctl::CmAddress &src, const ctl::CmAddress &dst,
                                    const ctl::CmConnParams &p, size_t room) {
  cm::IpServiceHeader h{};
  h.ip_version = ctl::cm_ipv4_mapped(src.gid) ? 4 : 6;
  h.src_port = src.port;
  to_header_address(src.gid, h.src);
  to_header_address(dst.gid, h.dst);
  std::vector<uint8_t> out(cm::kIpHeaderBytes + std::min<size_t>(p.private_data_len, room));
  h.write(out.data());
  std::memcpy(out.data() + cm::kIpHeaderBytes, p.private_data, out.size() - cm::kIpHeaderBytes);
  return out;
}

void copy_private(ctl::CmConnParams &p, const uint8_t *from, size_t len) {
  p.private_data_len = uint32_t(std::min(len, sizeof(p.private_data)));
  std::memcpy(p.private_data, from, p.private_data_len);
}

bool is_ud(uint16_t port_space, uint8_t qp_type) {
  return port_space == kPsUdp || port_space == kPsIpoib || qp_type == IBV_QPT_UD;
}

// The CM's timers: Linux's unless the environment says otherwise (README, "rdma_cm"):
// VRNIC_CM_RESPONSE_TIMEOUT (4.096 us << value, 8..31, default 20) and VRNIC_CM_RETRIES
// (0..15, default 15). A REQ is sent again after 2 packet lifetimes (268 ms each) plus the
// response timeout: 4.6 s by default, UNREACHABLE after 16 tries (74 s).
cm::Timing timing() {
  cm::Timing t;
  auto env = [](const char *name, long lo, long hi, uint8_t *out) {
    const char *v = std::getenv(name);
    if (!v || !*v) return;
    char *end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end == 0 && n >= lo && n <= hi) *out = uint8_t(n);
  };
  env("VRNIC_CM_RESPONSE_TIMEOUT", 8, 31, &t.cm_response_timeout);
  env("VRNIC_CM_RETRIES", 0, 15, &t.max_cm_retries);
  return t;
}

}  // namespace

CmService::Channel::~Channel() {
  if (fd >= 0) ::close(fd);
}

absl::Status CmService::start() {
  if (absl::Status st = gsi_.start(); !st.ok()) return st;
  // VRNIC_CM_TRACE=1: every MAD and CM event on stderr, for debugging a peer.
  trace_ = std::getenv("VRNIC_CM_TRACE") != nullptr;
  cm::Engine::Hooks hooks{[this](const cm::Gid &to, const cm::Mad &m) {
                            if (trace_)
                              std::fprintf(stderr, "vrnicd cm: send attr 0x%04x tid %llx\n",
                                           unsigned(m.attr()), (unsigned long long)m.tid());
                            gsi_.send(to, m);
                          },
                          [this](const cm::Event &e) {
                            if (trace_)
                              std::fprintf(stderr, "vrnicd cm: event %d conn %x owner %llu\n",
                                           int(e.type), e.conn, (unsigned long long)e.owner);
                            on_event(e);
                          }};
  engine_ =
      std::make_unique<cm::Engine>(dev_.info.node_guid, std::move(hooks), timing());
  next_port_ = uint16_t(kEphemeralFirst + ::arc4random_uniform(kEphemeralLast - kEphemeralFirst));
  return absl::OkStatus();
}

// rdma_cm needs no Hello: the user's quotas (cm_ids, channels) bound what any local process
// of the user, and any peer connecting to the user's listeners, can make vrnicd keep.
CmService::Id *CmService::new_id(uint32_t session, uid_t uid, uint32_t *handle) {
  if (quotas_.charge(uid, Quota::kCmIds)) return nullptr;
  *handle = next_handle_++;
  Id &id = ids_[*handle];
  id.session = session;
  id.uid = uid;
  return &id;
}

CmService::Id *CmService::owned(Session &s, uint32_t handle) {
  auto it = ids_.find(handle);
  return it != ids_.end() && it->second.session == s.id ? &it->second : nullptr;
}

int CmService::create_channel(Session &s, const ctl::Message &m, ctl::HandleResp &resp) {
  if (m.fds.size() != 1) return EINVAL;
  // An fd in vrnicd, as a completion channel is: the same quota (issue 28, row 5).
  // Charged to whoever sent the request (issue 52: the connection's process, or another
  // holding its socket), and given back to that user.
  const uid_t uid = s.caller.uid;
  QuotaCharge charge(quotas_, uid, Quota::kChannels), fd_charge(quotas_, uid, Quota::kFds);
  if (charge.status() || fd_charge.status()) return ENOMEM;
  // Written only with non-blocking sends: a client that reads nothing must not block vrnicd.
  int fd = take_event_channel(m.fds[0], uid);
  if (fd < 0) return -fd;
  charge.keep();
  fd_charge.keep();
  const uint32_t h = next_handle_++;
  channels_[h] = std::unique_ptr<Channel>(new Channel{s.id, uid, fd, {}});
  resp.handle = h;
  return 0;
}

int CmService::destroy_channel(Session &s, uint32_t handle) {
  auto it = channels_.find(handle);
  if (it == channels_.end() || it->second->session != s.id) return EINVAL;
  for (const auto &[h, id] : ids_)
    if (id.channel == handle) return EBUSY;  // rdma_destroy_event_channel: ids first
  quotas_.release(it->second->uid, Quota::kChannels);
  quotas_.release(it->second->uid, Quota::kFds);
  channels_.erase(it);
  return 0;
}

int CmService::create_id(Session &s, const ctl::CmCreateIdReq &req, ctl::HandleResp &resp) {
  auto ch = channels_.find(req.channel);
  if (ch == channels_.end() || ch->second->session != s.id) return EINVAL;
  if (req.port_space != kPsTcp && req.port_space != kPsUdp && req.port_space != kPsIb &&
      req.port_space != kPsIpoib)
    return EPROTONOSUPPORT;
  if (req.qp_type != IBV_QPT_RC && req.qp_type != IBV_QPT_UC && req.qp_type != IBV_QPT_UD)
    return EINVAL;
  uint32_t h;
  Id *made = new_id(s.id, s.caller.uid, &h);
  if (!made) return ENOMEM;
  Id &id = *made;
  id.channel = req.channel;
  id.cookie = req.cookie;
  id.port_space = req.port_space;
  id.qp_type = req.qp_type;
  resp.handle = h;
  return 0;
}

void CmService::unbind(Id &id, uint32_t handle) {
  if (id.listening) unlisten_port(id, handle);
  id.listening = false;
  if (id.bound) {
    const uint32_t key = uint32_t(id.port_space) << 16 | id.local.port;
    std::vector<uint32_t> &at = ports_[key];
    std::erase(at, handle);
    if (at.empty()) ports_.erase(key);
  }
  id.bound = false;
}

void CmService::drop_id(uint32_t handle) {
  auto it = ids_.find(handle);
  if (it == ids_.end()) return;
  Id &id = it->second;
  if (id.conn) {
    conn_ids_.erase(id.conn);
    engine_->abandon(id.conn, now_);
  }
  unbind(id, handle);
  mark_fetched(id);
  quotas_.release(id.uid, Quota::kCmIds);
  ids_.erase(it);
}

int CmService::destroy_id(Session &s, uint32_t handle) {
  if (!owned(s, handle)) return EINVAL;
  drop_id(handle);
  return 0;
}

int CmService::bind(Session &s, const ctl::CmBindReq &req, ctl::CmBindResp &resp) {
  Id *id = owned(s, req.id);
  if (!id || id->bound) return EINVAL;
  if (!ctl::cm_wildcard(req.addr.gid)) {
    bool ours = false;
    for (const ctl::GidEntry &g : dev_.info.gids)
      ours |= g.type != ctl::kGidEmpty && std::memcmp(g.gid, req.addr.gid, 16) == 0;
    if (!ours) return EADDRNOTAVAIL;
  }
  uint16_t port = req.addr.port;
  // Ports below 1024 are privileged, as the kernel's cma_get_port has them (EACCES without
  // CAP_NET_BIND_SERVICE): here root's only, since vrnicd knows a client's uid, not its
  // capabilities (issue 28, row 13).
  if (port != 0 && port < 1024 && s.caller.uid != 0) return EACCES;
  const uint32_t space = uint32_t(id->port_space) << 16;
  if (port == 0) {
    for (uint32_t tries = 0; tries <= kEphemeralLast - kEphemeralFirst; tries++) {
      if (++next_port_ > kEphemeralLast || next_port_ < kEphemeralFirst)
        next_port_ = kEphemeralFirst;
      if (!ports_.contains(space | next_port_)) {  // a port no id is at
        port = next_port_;
        break;
      }
    }
    if (port == 0) return EADDRINUSE;
  } else if (int err = port_conflict(space | port, req.addr, req.flags & ctl::kCmBindAfOnly)) {
    return err;
  }
  ports_[space | port].push_back(req.id);
  id->afonly = req.flags & ctl::kCmBindAfOnly;
  id->bound = true;
  id->local = req.addr;
  id->local.port = port;
  resp.addr = id->local;
  return 0;
}

int CmService::listen(Session &s, const ctl::CmListenReq &req) {
  Id *id = owned(s, req.id);
  if (!id || !id->bound || id->conn) return EINVAL;
  // As ucma's: a backlog of 0 or past the maximum is the maximum; listening again sets it.
  id->backlog = req.backlog > 0 && req.backlog < kMaxBacklog ? req.backlog : kMaxBacklog;
  if (id->listening) return 0;
  absl::Status st = listen_port(*id, req.id);
  if (!st.ok()) return errno_of(st);
  id->listening = true;
  return 0;
}

int CmService::connect(Session &s, const ctl::CmConnectReq &req) {
  Id *id = owned(s, req.id);
  if (!id || !id->bound || id->listening || id->conn) return EINVAL;
  if (!is_ud(id->port_space, id->qp_type) && foreign_qp_ && foreign_qp_(s, req.p.qp_num))
    return EINVAL;
  if (ctl::cm_wildcard(id->local.gid)) {
    // Bound to a wildcard: the source rdma_resolve_addr picked, if it is ours.
    if (!dev_.is_local_gid(req.src.gid)) return EINVAL;
    std::copy(std::begin(req.src.gid), std::end(req.src.gid), std::begin(id->local.gid));
  }
  id->peer = req.dst;
  cm::Gid peer;
  std::copy(std::begin(req.dst.gid), std::end(req.dst.gid), peer.begin());
  absl::StatusOr<uint32_t> conn;
  if (is_ud(id->port_space, id->qp_type)) {
    conn = engine_->sidr_request(req.id, peer, cm::service_id(id->port_space, req.dst.port),
                                 with_ip_header(id->local, req.dst, req.p, kSidrUserData), now_);
  } else {
    cm::ConnectParams p;
    p.service_id = cm::service_id(id->port_space, req.dst.port);
    p.qpn = req.p.qp_num;
    p.starting_psn = req.p.starting_psn;
    p.transport = id->qp_type == IBV_QPT_UC ? 1 : 0;
    p.responder_resources = req.p.responder_resources;
    p.initiator_depth = req.p.initiator_depth;
    p.retry_count = std::min<uint8_t>(req.p.retry_count, 7);
    p.rnr_retry_count = std::min<uint8_t>(req.p.rnr_retry_count, 7);
    p.path_mtu = req.p.path_mtu;
    p.srq = req.p.srq;
    p.ece_vendor_id = req.p.ece_vendor_id;
    p.ece_options = req.p.ece_options;
    std::copy(std::begin(id->local.gid), std::end(id->local.gid), p.local_gid.begin());
    p.remote_gid = peer;
    p.private_data = with_ip_header(id->local, req.dst, req.p, kReqUserData);
    conn = engine_->connect(req.id, peer, p, now_);
  }
  if (!conn.ok()) return errno_of(conn.status());
  id->conn = *conn;
  conn_ids_[*conn] = req.id;
  return 0;
}

int CmService::accept(Session &s, const ctl::CmAcceptReq &req) {
  Id *id = owned(s, req.id);
  if (!id || !id->conn || !id->listen_id) return EINVAL;
  if (foreign_qp_ && foreign_qp_(s, req.p.qp_num)) return EINVAL;
  const std::vector<uint8_t> pd(
      req.p.private_data, req.p.private_data + std::min<uint32_t>(req.p.private_data_len, 256));
  if (int err = step_qp(s, req.qp)) return err;
  absl::Status st;
  if (is_ud(id->port_space, id->qp_type)) {
    st = engine_->sidr_reply(id->conn, cm::kSidrValid, req.p.qp_num,
                             req.p.qkey ? req.p.qkey : kRdmaUdpQkey, pd);
    conn_ids_.erase(id->conn);
    id->conn = 0;  // SIDR is done once answered
  } else {
    cm::AcceptParams p;
    p.qpn = req.p.qp_num;
    p.starting_psn = req.p.starting_psn;
    p.responder_resources = req.p.responder_resources;
    p.initiator_depth = req.p.initiator_depth;
    p.rnr_retry_count = std::min<uint8_t>(req.p.rnr_retry_count, 7);
    p.srq = req.p.srq;
    p.ece_vendor_id = req.p.ece_vendor_id;
    p.ece_options = req.p.ece_options;
    p.private_data = pd;
    st = engine_->accept(id->conn, p, now_);
  }
  if (!st.ok()) fail_qp(s, req.qp);
  return st.ok() ? 0 : errno_of(st);
}

int CmService::reject(Session &s, const ctl::CmRejectReq &req) {
  Id *id = owned(s, req.id);
  // A request received, or (RC, the active side) a REP received: the engine knows which.
  if (!id || !id->conn || (!id->listen_id && is_ud(id->port_space, id->qp_type))) return EINVAL;
  // rdma_reject, or rdma_reject_ece: no other reason is the application's to give.
  if (req.reason && req.reason != cm::kRejVendorOptionNotSupported) return EINVAL;
  const std::vector<uint8_t> pd(req.private_data,
                                req.private_data + std::min<uint32_t>(req.private_data_len, 256));
  const uint16_t reason = req.reason ? uint16_t(req.reason) : uint16_t(cm::kRejConsumerDefined);
  absl::Status st = is_ud(id->port_space, id->qp_type)
                        ? engine_->sidr_reply(id->conn, cm::kSidrRejected, 0, 0, pd)
                        : engine_->reject(id->conn, reason, pd, now_);
  conn_ids_.erase(id->conn);
  id->conn = 0;
  return st.ok() ? 0 : errno_of(st);
}

int CmService::establish(Session &s, const ctl::CmIdStepsReq &req) {
  Id *id = owned(s, req.id);
  if (!id || !id->conn) return EINVAL;
  if (int err = step_qp(s, req.qp)) return err;
  absl::Status st = engine_->establish(id->conn, now_);
  if (!st.ok()) fail_qp(s, req.qp);
  return st.ok() ? 0 : errno_of(st);
}

int CmService::disconnect(Session &s, const ctl::CmIdStepsReq &req) {
  Id *id = owned(s, req.id);
  if (!id) return EINVAL;
  // The QP to ERR first, connected or not, as rdma-core's rdma_disconnect does.
  if (int err = step_qp(s, req.qp)) return err;
  if (!id->conn) return EINVAL;
  absl::Status st = engine_->disconnect(id->conn, {}, now_);
  return st.ok() ? 0 : errno_of(st);
}

int CmService::step_qp(Session &s, const ctl::CmQpSteps &steps) {
  if (steps.count == 0) return 0;
  if (steps.count > ctl::kMaxCmQpSteps || !step_qp_) return EINVAL;
  return step_qp_(s, steps);
}

void CmService::fail_qp(Session &s, const ctl::CmQpSteps &steps) {
  if (steps.count == 0) return;
  ctl::CmQpSteps err{};
  err.qpn = steps.qpn;
  err.count = 1;
  err.steps[0].attr_mask = IBV_QP_STATE;
  err.steps[0].attr.qp_state = IBV_QPS_ERR;
  (void)step_qp(s, err);
}

int CmService::migrate(Session &s, const ctl::CmMigrateReq &req) {
  Id *id = owned(s, req.id);
  auto ch = channels_.find(req.channel);
  if (!id || ch == channels_.end() || ch->second->session != s.id) return EINVAL;
  id->channel = req.channel;
  if (req.cookie) id->cookie = req.cookie;
  mark_fetched(*id);  // the library names a request's id as it hands its event out
  return 0;
}

void CmService::mark_fetched(Id &id) {
  if (id.fetched) return;
  id.fetched = true;
  auto listener = ids_.find(id.listen_id);
  if (listener != ids_.end() && listener->second.unfetched) listener->second.unfetched--;
}

void CmService::stats(ctl::StatsResp &resp) const {
  resp.cm_ids = ids_.size();
  resp.cm_listeners = size_t(
      std::count_if(ids_.begin(), ids_.end(), [](const auto &kv) { return kv.second.listening; }));
  if (!engine_) return;
  const cm::Engine::Counters &c = engine_->counters();
  resp.cm_connections = engine_->connections();
  resp.cm_mads_sent = c.sent;
  resp.cm_mads_received = c.received;
  resp.cm_mads_dropped = c.dropped + gsi_.dropped();
  resp.cm_mads_resent = c.resent;
}

void CmService::release(Session &s) {
  std::vector<uint32_t> gone;
  for (const auto &[h, id] : ids_)
    if (id.session == s.id) gone.push_back(h);
  for (uint32_t h : gone) drop_id(h);
  std::erase_if(channels_, [&](const auto &kv) {
    if (kv.second->session != s.id) return false;
    quotas_.release(kv.second->uid, Quota::kChannels);
    quotas_.release(kv.second->uid, Quota::kFds);
    return true;
  });
}

ctl::CmEventRecord CmService::record(uint32_t event, uint32_t handle, const Id &id) const {
  ctl::CmEventRecord rec{};
  rec.event = event;
  rec.id = handle;
  rec.cookie = id.cookie;
  rec.local = id.local;
  rec.peer = id.peer;
  return rec;
}

void CmService::flush(Channel &ch) {
  while (!ch.backlog.empty()) {
    if (!ctl::send_event(ch.fd, &ch.backlog.front(), sizeof(ctl::CmEventRecord)) &&
        errno == EAGAIN)
      return;               // later: the client reads its events
    ch.backlog.pop_front();  // written, or the client is gone
  }
}

void CmService::post(uint32_t channel, const ctl::CmEventRecord &rec) {
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  it->second->backlog.push_back(rec);
  flush(*it->second);
}

void CmService::on_request(Id &listener, uint32_t listen_handle, const cm::Event &e) {
  const bool ud = e.type == cm::EventType::kSidrReqReceived;
  const uint8_t *pd = ud ? e.mad->at(cm::sidr_req::kPrivateData) : e.mad->at(cm::req::kPrivateData);
  cm::IpServiceHeader h{};
  auto refuse = [&](auto rej_reason) {
    if (ud) {
      (void)engine_->sidr_reply(e.conn, cm::kSidrRejected, 0, 0, {});
    } else {
      (void)engine_->reject(e.conn, rej_reason, {}, now_);
    }
  };
  if (!h.read(pd)) {  // not from rdma_cm: refused, as Linux's rdma_cm does
    refuse(cm::kRejConsumerDefined);
    return;
  }
  if (listener.unfetched >= listener.backlog) {
    // Its backlog is full of requests the application has not fetched: as ucma's full
    // backlog, no answer (the sender tries again), and nothing kept (issue 28, row 10: a
    // flood of REQs filled one table for every user).
    engine_->drop_request(e.conn);
    return;
  }
  uint32_t handle;
  Id *made = new_id(listener.session, listener.uid, &handle);
  if (!made) {  // the listener's user holds all the ids it may: as a full accept queue
    refuse(cm::kRejNoResources);
    return;
  }
  Id &id = *made;
  id.channel = listener.channel;
  id.port_space = listener.port_space;
  id.qp_type = listener.qp_type;
  id.listen_id = listen_handle;
  id.fetched = false;
  listener.unfetched++;
  id.conn = e.conn;
  id.local.port = listener.local.port;
  id.peer.port = h.src_port;
  std::copy(e.peer.begin(), e.peer.end(), id.peer.gid);
  ctl::CmEventRecord rec = record(ctl::kCmConnectRequest, handle, id);
  rec.listen_id = listen_handle;
  rec.cookie = listener.cookie;
  const cm::Mad &m = *e.mad;
  if (ud) {
    std::memcpy(id.local.gid, dev_.info.gids[0].gid, 16);
    rec.local = id.local;
    copy_private(rec.p, pd + cm::kIpHeaderBytes, kSidrUserData);
  } else {
    std::memcpy(id.local.gid, m.at(cm::req::kPrimaryRemoteGid), 16);
    std::memcpy(id.peer.gid, m.at(cm::req::kPrimaryLocalGid), 16);
    rec.local = id.local;
    rec.peer = id.peer;
    rec.p.qp_num = uint32_t(m[cm::req::kLocalQpn]);
    rec.p.starting_psn = uint32_t(m[cm::req::kStartingPsn]);
    // Seen from the passive side, as ib_cm reports them: the peer's initiator depth is the
    // responder resources it asks of us, and the other way round.
    rec.p.responder_resources = uint8_t(m[cm::req::kInitiatorDepth]);
    rec.p.initiator_depth = uint8_t(m[cm::req::kResponderResources]);
    rec.p.flow_control = uint8_t(m[cm::req::kEndToEndFlowControl]);
    rec.p.retry_count = uint8_t(m[cm::req::kRetryCount]);
    rec.p.rnr_retry_count = uint8_t(m[cm::req::kRnrRetryCount]);
    rec.p.srq = uint8_t(m[cm::req::kSrq]);
    rec.p.path_mtu = uint8_t(m[cm::req::kPathMtu]);
    rec.p.ece_vendor_id = uint32_t(m[cm::req::kVendorId]);
    rec.p.ece_options = m.attr_mod();
    copy_private(rec.p, pd + cm::kIpHeaderBytes, kReqUserData);
  }
  conn_ids_[e.conn] = handle;
  engine_->set_owner(e.conn, handle);
  post(id.channel, rec);
}

void CmService::on_event(const cm::Event &e) {
  auto it = ids_.find(uint32_t(e.owner));
  if (it == ids_.end()) return;
  Id &id = it->second;
  if (e.type == cm::EventType::kReqReceived || e.type == cm::EventType::kSidrReqReceived) {
    // The engine's listener is the port's; the request is for the id whose address it names.
    const bool ud = e.type == cm::EventType::kSidrReqReceived;
    cm::IpServiceHeader h{};
    uint32_t handle = it->first;
    Id *listener = &id;
    if (h.read(ud ? e.mad->at(cm::sidr_req::kPrivateData) : e.mad->at(cm::req::kPrivateData))) {
      uint8_t dst[16] = {};
      if (h.ip_version == 4) {  // (the header keeps an IPv4 address in its last four bytes)
        dst[10] = dst[11] = 0xff;
        std::memcpy(dst + 12, h.dst + 12, 4);
      } else {
        std::memcpy(dst, h.dst, 16);
      }
      listener = listener_for(id.port_space, id.local.port, dst, &handle);
    }
    if (!listener) {  // none of the port's listeners takes this address: as no listener
      if (ud)
        (void)engine_->sidr_reply(e.conn, cm::kSidrRejected, 0, 0, {});
      else
        (void)engine_->reject(e.conn, cm::kRejInvalidServiceId, {}, now_);
      return;
    }
    return on_request(*listener, handle, e);
  }
  ctl::CmEventRecord rec = record(0, it->first, id);
  bool over = false;  // the connection is gone after this event
  switch (e.type) {
    case cm::EventType::kRepReceived: {
      const cm::Mad &m = *e.mad;
      rec.event = ctl::kCmConnectResponse;
      rec.p.qp_num = uint32_t(m[cm::rep::kLocalQpn]);
      rec.p.starting_psn = uint32_t(m[cm::rep::kStartingPsn]);
      rec.p.responder_resources = uint8_t(m[cm::rep::kInitiatorDepth]);
      rec.p.initiator_depth = uint8_t(m[cm::rep::kResponderResources]);
      rec.p.flow_control = uint8_t(m[cm::rep::kEndToEndFlowControl]);
      rec.p.rnr_retry_count = uint8_t(m[cm::rep::kRnrRetryCount]);
      rec.p.srq = uint8_t(m[cm::rep::kSrq]);
      rec.p.ece_vendor_id = cm::rep_vendor_id(m);
      rec.p.ece_options = m.attr_mod();
      copy_private(rec.p, m.at(cm::rep::kPrivateData), cm::rep::kPrivateData.len);
      break;
    }
    case cm::EventType::kEstablished:
      rec.event = ctl::kCmEstablished;
      break;
    case cm::EventType::kRejected:
      rec.event = ctl::kCmRejected;
      rec.status = e.reason;
      copy_private(rec.p, e.mad->at(cm::rej::kPrivateData), cm::rej::kPrivateData.len);
      over = true;
      break;
    case cm::EventType::kUnreachable:
      rec.event = ctl::kCmUnreachable;
      rec.status = -ETIMEDOUT;
      over = true;
      break;
    case cm::EventType::kDisconnectRequest:
      rec.event = ctl::kCmDisconnected;
      break;
    case cm::EventType::kDisconnected:
      rec.event = ctl::kCmDisconnected;
      rec.status = e.timed_out ? -ETIMEDOUT : 0;
      break;
    case cm::EventType::kTimewaitExit:
      rec.event = ctl::kCmTimewaitExit;
      over = true;
      break;
    case cm::EventType::kSidrRepReceived: {
      const cm::Mad &m = *e.mad;
      over = true;
      if (e.reason != cm::kSidrValid) {  // the status as it came, positive (as Linux's CM)
        rec.event = ctl::kCmUnreachable;
        rec.status = int32_t(e.reason);
        break;
      }
      rec.event = ctl::kCmEstablished;
      rec.p.qp_num = uint32_t(m[cm::sidr_rep::kQpn]);
      rec.p.qkey = uint32_t(m[cm::sidr_rep::kQkey]);
      copy_private(rec.p, m.at(cm::sidr_rep::kPrivateData), cm::sidr_rep::kPrivateData.len);
      break;
    }
    default:
      return;
  }
  if (over) {
    conn_ids_.erase(id.conn);
    id.conn = 0;
  }
  post(id.channel, rec);
}

void CmService::run(uint64_t now) {
  now_ = now;
  if (!engine_) return;
  gsi_.receive([&](const cm::Gid &from, const cm::Mad &m) {
    if (trace_)
      std::fprintf(stderr, "vrnicd cm: recv attr 0x%04x tid %llx\n", unsigned(m.attr()),
                   (unsigned long long)m.tid());
    engine_->receive(from, m, now);
  });
  engine_->tick(now);
  gsi_.flush();
  for (auto &[h, ch] : channels_) flush(*ch);
}

int CmService::poll_timeout_ms(uint64_t now) const {
  int ms = 100;
  for (const auto &[h, ch] : channels_)
    if (!ch->backlog.empty()) ms = 10;
  const uint64_t next = engine_ ? engine_->next_deadline() : 0;
  if (next) ms = std::min<int>(ms, next <= now ? 0 : int((next - now) / 1'000'000) + 1);
  return ms;
}

}  // namespace vrnic
