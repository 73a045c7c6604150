// A datagram rsocket's destinations (rsocket_dgram_socket.h): the addresses it has heard
// from, and those it found by SIDR (rdma_cm's address and route resolution, then a SIDR REQ to
// the port), each with the AH its datagrams go by, made when the first goes.
#include <errno.h>
#include <poll.h>

#include <chrono>
#include <cstring>

#include "rsocket_dgram_socket.h"

namespace vrnic::rdmacm::dgram {
namespace {

// The destination table's entry for `key`, made (the oldest forgotten past kMaxDests) if new.
Dest &dest_entry(Ds *ds, const AddrKey &key) {
  auto [it, made] = ds->dests.try_emplace(key);
  if (!made) {
    ds->dest_lru.splice(ds->dest_lru.end(), ds->dest_lru, it->second.used);  // used now
    return it->second;
  }
  it->second.used = ds->dest_lru.insert(ds->dest_lru.end(), key);
  if (ds->dests.size() > kMaxDests) {
    auto old = ds->dests.find(ds->dest_lru.front());
    ds->dest_lru.pop_front();
    if (old->second.ah) ibv_destroy_ah(old->second.ah);
    ds->dests.erase(old);
  }
  return it->second;
}

}  // namespace

// A datagram's sender: its path and QP, for answering it (no AH until then).
void update_dest(Ds *ds, const sockaddr *from, const ibv_wc &wc, const ibv_ah_attr &attr) {
  Dest &d = dest_entry(ds, key_of(from));
  if (d.qpn == wc.src_qp && std::memcmp(&d.attr, &attr, sizeof(attr)) == 0) return;
  if (d.ah) ibv_destroy_ah(d.ah);
  d.attr = attr;
  d.ah = nullptr;
  d.qpn = wc.src_qp;
  d.qkey = RDMA_UDP_QKEY;
}

namespace {

// The next event of resolution id `rid` on the socket's channel, or nullptr after the
// deadline.
rdma_cm_event *next_event_of(Ds *ds, rdma_cm_id *rid, std::chrono::steady_clock::time_point end) {
  for (;;) {
    rdma_cm_event *e;
    while (rdma_get_cm_event(ds->channel, &e) == 0) {
      if (e->id == rid) return e;
      rdma_ack_cm_event(e);  // an earlier resolution's, given up
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return nullptr;
    pollfd p{ds->fd(), POLLIN, 0};
    poll(&p, 1, int(left.count()));
  }
}

// The port `to` names, asked through rdma_cm (address, route, SIDR): its QP. 0 or an errno.
int resolve(Ds *ds, const sockaddr *to, Dest *out) {
  rdma_cm_id *rid = nullptr;
  if (rdma_create_id(ds->channel, &rid, nullptr, RDMA_PS_UDP) != 0) return errno;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kResolveMs);
  int err = 0;
  rdma_cm_event *e = nullptr;
  auto step = [&](rdma_cm_event_type want) {
    e = next_event_of(ds, rid, end);
    if (!e) return ETIMEDOUT;
    if (e->event == want) return 0;
    // A SIDR REP refusing (no one at that port) is UNREACHABLE, as the kernel's CM makes
    // it: for a datagram socket that is a port unreachable, ECONNREFUSED.
    const bool refused = e->event == RDMA_CM_EVENT_REJECTED ||
                         (e->event == RDMA_CM_EVENT_UNREACHABLE && e->status != -ETIMEDOUT);
    const int r = refused ? ECONNREFUSED : e->status == -ETIMEDOUT ? ETIMEDOUT : EHOSTUNREACH;
    rdma_ack_cm_event(e);
    e = nullptr;
    return r;
  };
  if (rdma_resolve_addr(rid, nullptr, const_cast<sockaddr *>(to), kResolveMs) != 0)
    err = errno;
  if (!err) err = step(RDMA_CM_EVENT_ADDR_RESOLVED);
  if (e) rdma_ack_cm_event(e), e = nullptr;
  if (!err && rdma_resolve_route(rid, kResolveMs) != 0) err = errno;
  if (!err) err = step(RDMA_CM_EVENT_ROUTE_RESOLVED);
  if (e) rdma_ack_cm_event(e), e = nullptr;
  rdma_conn_param p{};
  if (!err && rdma_connect(rid, &p) != 0) err = errno;
  if (!err) err = step(RDMA_CM_EVENT_ESTABLISHED);
  if (!err && rid->verbs != ds->qp->context) err = EHOSTUNREACH;  // another device's port
  if (!err) {
    out->attr = e->param.ud.ah_attr;
    out->qpn = e->param.ud.qp_num;
    out->qkey = e->param.ud.qkey;
  }
  if (e) rdma_ack_cm_event(e);
  rdma_destroy_id(rid);
  return err;
}

// Where a datagram to `to` goes, with its AH: known from a datagram it sent us or found by
// SIDR (resolve); nullptr and *err when neither.
}  // namespace

Dest *dest_for(Ds *ds, const sockaddr *to, int *err) {
  const AddrKey key = key_of(to);
  Dest *d;
  if (ds->dests.contains(key)) {
    d = &dest_entry(ds, key);  // (used now)
  } else {
    Dest found;
    if ((*err = resolve(ds, to, &found))) return nullptr;
    d = &dest_entry(ds, key);
    d->attr = found.attr;
    d->qpn = found.qpn;
    d->qkey = found.qkey;
  }
  if (!d->ah && !(d->ah = ibv_create_ah(ds->dev->pd, &d->attr))) {
    *err = errno ? errno : ENOMEM;
    return nullptr;
  }
  return d;
}

AddrKey key_of(const sockaddr *sa) {
  AddrKey k;
  k.family = sa->sa_family;
  if (sa->sa_family == AF_INET6) {
    auto *in = reinterpret_cast<const sockaddr_in6 *>(sa);
    k.port = in->sin6_port;
    std::memcpy(k.addr, &in->sin6_addr, 16);
  } else {
    auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    k.family = AF_INET;
    k.port = in->sin_port;
    std::memcpy(k.addr, &in->sin_addr, 4);
  }
  return k;
}

}  // namespace vrnic::rdmacm::dgram
