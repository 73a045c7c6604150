// rdma_cm multicast (rdma_join_multicast, rdma_join_multicast_ex, rdma_leave_multicast) on
// RoCE, as the kernel's CM does it for an Ethernet port: there is no SA to ask, so a join is
// the group's GID (an IPv4 group IPv4-mapped, an IPv6 one as it is), the id's UD QP attached
// to it (ibv_attach_mcast; not for a send-only member) and a MULTICAST_JOIN event the library
// raises itself, whose UD parameters address the group: QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY.
// Groups reach the QPs of one vrnicd (dataplane/multicast.h).
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "internal.h"

namespace vrnic::rdmacm {
namespace {

constexpr uint32_t kMulticastQpn = 0xffffff;

bool same_address(const sockaddr_storage &a, const sockaddr *b) {
  if (a.ss_family != b->sa_family) return false;
  if (b->sa_family == AF_INET)
    return std::memcmp(&reinterpret_cast<const sockaddr_in &>(a).sin_addr,
                       &reinterpret_cast<const sockaddr_in *>(b)->sin_addr, 4) == 0;
  return std::memcmp(&reinterpret_cast<const sockaddr_in6 &>(a).sin6_addr,
                     &reinterpret_cast<const sockaddr_in6 *>(b)->sin6_addr, 16) == 0;
}

// The group's GID, if `addr` is a multicast address of IPv4 or IPv6.
bool group_gid(const sockaddr *addr, ibv_gid *gid) {
  ctl::CmAddress a;
  if (!to_cm_address(addr, &a)) return false;
  std::memcpy(gid->raw, a.gid, 16);
  if (addr->sa_family == AF_INET) return (a.gid[12] & 0xf0) == 0xe0;  // 224.0.0.0/4
  return a.gid[0] == 0xff;
}

int join(rdma_cm_id *cmid, const sockaddr *addr, uint32_t flags, void *context) {
  if (!cmid || !addr || !cmid->verbs) return EINVAL;  // bound or resolved to a device first
  if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return EINVAL;
  Id *id = of(cmid);
  ibv_gid gid;
  if (!group_gid(addr, &gid)) return EINVAL;
  if (std::any_of(id->groups.begin(), id->groups.end(),
                  [&](const Id::Group &g) { return same_address(g.addr, addr); }))
    return EADDRINUSE;
  Id::Group g{};
  std::memcpy(&g.addr, addr, addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
  g.gid = gid;
  g.context = context;
  g.flags = flags;
  // rdma-core attaches the id's QP when it reports the join; a send-only member never.
  if (cmid->qp && flags == RDMA_MC_JOIN_FLAG_FULLMEMBER) {
    if (int err = ibv_attach_mcast(cmid->qp, &gid, 0)) return err;
    g.attached = true;
  }
  id->groups.push_back(g);
  ctl::CmAddress group{};
  std::memcpy(group.gid, gid.raw, 16);
  raise(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0, &group);
  return complete(id, {RDMA_CM_EVENT_MULTICAST_JOIN});
}

}  // namespace

void fill_multicast_join(const Id *id, const ctl::CmEventRecord &rec, rdma_cm_event *event) {
  rdma_ud_param &ud = event->param.ud;
  ud.qp_num = kMulticastQpn;
  ud.qkey = RDMA_UDP_QKEY;
  ud.ah_attr.is_global = 1;
  ud.ah_attr.port_num = 1;
  ud.ah_attr.grh.hop_limit = 64;
  ud.ah_attr.grh.sgid_index = id->gid_index;
  std::memcpy(ud.ah_attr.grh.dgid.raw, rec.peer.gid, 16);
  for (const Id::Group &g : id->groups)
    if (std::memcmp(g.gid.raw, rec.peer.gid, 16) == 0) ud.private_data = g.context;
}

}  // namespace vrnic::rdmacm

using namespace vrnic::rdmacm;

extern "C" {

RDMACM_EXPORT int rdma_join_multicast(rdma_cm_id *cmid, sockaddr *addr, void *context) {
  if (int err = join(cmid, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context)) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_join_multicast_ex(rdma_cm_id *cmid, rdma_cm_join_mc_attr_ex *attr,
                                         void *context) {
  // As rdma-core: the address and the join flags are required.
  constexpr uint32_t kNeeded = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  if (!attr || (attr->comp_mask & kNeeded) != kNeeded) return fail(EINVAL);
  if (int err = join(cmid, attr->addr, attr->join_flags, context)) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_leave_multicast(rdma_cm_id *cmid, sockaddr *addr) {
  if (!cmid || !addr) return fail(EINVAL);
  Id *id = of(cmid);
  auto g = std::find_if(id->groups.begin(), id->groups.end(),
                        [&](const Id::Group &m) { return same_address(m.addr, addr); });
  if (g == id->groups.end()) return fail(EADDRNOTAVAIL);
  if (g->attached && cmid->qp) ibv_detach_mcast(cmid->qp, &g->gid, 0);
  id->groups.erase(g);
  return 0;
}

}  // extern "C"
