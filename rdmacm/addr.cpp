// Devices and addresses for the drop-in librdmacm: the vrnic devices (opened once per process,
// one PD each, as rdma-core's library keeps them), which device an IP address belongs to (its
// GID table), the daemons' sockets, and rdma_getaddrinfo.
#include <arpa/inet.h>
#include <infiniband/ib.h>
#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "internal.h"
#include "vrnic/autostart.h"
#include "vrnic/ctl_io.h"
#include "vrnic/socket_path.h"

namespace vrnic::rdmacm {
namespace {

std::mutex g_mu;
std::vector<Device *> g_devices;
bool g_looked = false;

void look_for_devices() {
  if (g_looked) return;
  g_looked = true;
  auto found = std::make_unique<ctl::DeviceListResp>();
  std::string path;
  if (ctl::find_devices(&path, found.get()) != 0) return;
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (!list) return;
  for (int i = 0; i < n; i++) {
    for (uint32_t k = 0; k < found->count; k++) {
      if (std::strcmp(ibv_get_device_name(list[i]), found->devices[k].name) != 0) continue;
      ibv_context *ctx = ibv_open_device(list[i]);
      if (!ctx) continue;
      auto *d = new Device;
      d->verbs = ctx;
      d->pd = ibv_alloc_pd(ctx);
      d->daemon = new Daemon;
      d->daemon->socket = found->devices[k].socket;
      ibv_port_attr port{};
      if (ibv_query_port(ctx, 1, &port) == 0) d->active_mtu = uint8_t(port.active_mtu);
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0) d->max_rd_atomic = uint8_t(attr.max_qp_rd_atom);
      g_devices.push_back(d);
    }
  }
  ibv_free_device_list(list);
}

}  // namespace

int Daemon::call(ctl::Op op, const void *req, size_t len, void *resp, size_t resp_len,
                 int pass_fd) {
  std::lock_guard lock(mu);
  if (sock < 0) {
    sock = ctl::connect_daemon(socket.c_str());
    if (sock < 0) {
      int err = -sock;
      sock = -1;
      return err;
    }
  }
  int fds[1] = {pass_fd};
  int err = ctl::send_message(sock, op, 0, req, len, fds, pass_fd >= 0 ? 1 : 0);
  auto m = std::make_unique<ctl::Message>();
  if (!err) err = ctl::recv_message(sock, m.get());
  if (err) {
    ::close(sock);
    sock = -1;
    return err == ECONNRESET ? ENODEV : err;
  }
  m->close_fds();
  if (m->header.status) return m->header.status;
  if (resp_len) {
    if (m->header.length < resp_len) return EPROTO;
    std::memcpy(resp, m->body, resp_len);
  }
  return 0;
}

std::vector<Device *> &devices() {
  std::lock_guard lock(g_mu);
  look_for_devices();
  return g_devices;
}

Device *device_of_gid(const uint8_t gid[16], uint8_t *gid_index) {
  for (Device *d : devices()) {
    ibv_port_attr port{};
    if (ibv_query_port(d->verbs, 1, &port) != 0) continue;
    for (int i = 0; i < port.gid_tbl_len; i++) {
      ibv_gid g{};
      if (ibv_query_gid(d->verbs, 1, i, &g) != 0) continue;
      if (std::memcmp(g.raw, gid, 16) == 0) {
        *gid_index = uint8_t(i);
        return d;
      }
    }
  }
  return nullptr;
}

bool to_cm_address(const sockaddr *sa, ctl::CmAddress *out) {
  *out = {};
  if (!sa) return false;
  if (sa->sa_family == AF_INET) {
    const auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    out->gid[10] = out->gid[11] = 0xff;
    std::memcpy(out->gid + 12, &in->sin_addr, 4);
    out->port = ntohs(in->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    std::memcpy(out->gid, &in6->sin6_addr, 16);
    out->port = ntohs(in6->sin6_port);
    return true;
  }
  if (sa->sa_family == AF_IB) {
    const auto *ib = reinterpret_cast<const sockaddr_ib *>(sa);
    std::memcpy(out->gid, ib->sib_addr.sib_raw, 16);
    out->port = uint16_t(be64toh(ib->sib_sid) & RDMA_IB_IP_PORT_MASK);
    return true;
  }
  return false;
}

socklen_t sockaddr_length(const sockaddr *sa) {
  switch (sa->sa_family) {
    case AF_INET6:
      return sizeof(sockaddr_in6);
    case AF_IB:
      return sizeof(sockaddr_ib);
    default:
      return sizeof(sockaddr_in);
  }
}

uint16_t port_of(const sockaddr *sa) {
  ctl::CmAddress a;
  return to_cm_address(sa, &a) ? a.port : 0;
}

void set_port(sockaddr_storage *ss, uint16_t port) {
  switch (ss->ss_family) {
    case AF_INET6:
      reinterpret_cast<sockaddr_in6 *>(ss)->sin6_port = htons(port);
      break;
    case AF_IB: {
      auto *ib = reinterpret_cast<sockaddr_ib *>(ss);
      const uint64_t sid = be64toh(ib->sib_sid);
      ib->sib_sid = htobe64((sid & RDMA_IB_IP_PS_MASK) | port);
      ib->sib_sid_mask |= htobe64(RDMA_IB_IP_PORT_MASK);
      break;
    }
    default:
      reinterpret_cast<sockaddr_in *>(ss)->sin_port = htons(port);
  }
}

sockaddr_storage ip_form(const sockaddr *sa) {
  sockaddr_storage ss{};
  ctl::CmAddress a;
  if (sa->sa_family == AF_IB && to_cm_address(sa, &a))
    to_sockaddr(a, 0, &ss);
  else
    std::memcpy(&ss, sa, sockaddr_length(sa));
  return ss;
}

void to_sockaddr(const ctl::CmAddress &a, int family, sockaddr_storage *out, int ps) {
  std::memset(out, 0, sizeof(*out));
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (family == AF_IB) {
    auto *ib = reinterpret_cast<sockaddr_ib *>(out);
    ib->sib_family = AF_IB;
    ib->sib_pkey = htobe16(0xffff);
    std::memcpy(ib->sib_addr.sib_raw, a.gid, 16);
    ib->sib_sid = htobe64(uint64_t(ps) << 16 | a.port);
    ib->sib_sid_mask = htobe64(RDMA_IB_IP_PS_MASK | (a.port ? RDMA_IB_IP_PORT_MASK : 0));
  } else if (family == AF_INET || (family != AF_INET6 && std::memcmp(a.gid, mapped, 12) == 0)) {
    auto *in = reinterpret_cast<sockaddr_in *>(out);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, a.gid + 12, 4);
    in->sin_port = htons(a.port);
  } else {
    auto *in6 = reinterpret_cast<sockaddr_in6 *>(out);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, a.gid, 16);
    in6->sin6_port = htons(a.port);
  }
}

}  // namespace vrnic::rdmacm

using namespace vrnic::rdmacm;

extern "C" {

RDMACM_EXPORT ibv_context **rdma_get_devices(int *num_devices) {
  std::vector<Device *> &all = devices();
  auto **list = static_cast<ibv_context **>(std::calloc(all.size() + 1, sizeof(ibv_context *)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < all.size(); i++) list[i] = all[i]->verbs;
  if (num_devices) *num_devices = int(all.size());
  return list;
}

RDMACM_EXPORT void rdma_free_devices(ibv_context **list) {
  std::free(list);  // the devices stay open, as rdma-core keeps them
}

namespace {

bool copy_address(sockaddr **dst, socklen_t *dst_len, const sockaddr *src, socklen_t len) {
  *dst = static_cast<sockaddr *>(std::malloc(len));
  if (!*dst) return false;
  std::memcpy(*dst, src, len);
  *dst_len = len;
  return true;
}

// The first of getaddrinfo's answers, as rdma-core's librdmacm makes it: the QP type from the
// socket type and the port space from the protocol unless the hints name them; the address
// is the source when passive, else the destination.
int resolve_name(const char *node, const char *service, const rdma_addrinfo &hints,
                 rdma_addrinfo *r) {
  addrinfo h{};
  if (hints.ai_flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
  if (hints.ai_flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
  if (hints.ai_family != AF_IB) h.ai_family = hints.ai_family;
  h.ai_socktype = hints.ai_qp_type == IBV_QPT_UD ? SOCK_DGRAM : hints.ai_qp_type ? SOCK_STREAM : 0;
  if (hints.ai_port_space == RDMA_PS_TCP) h.ai_protocol = IPPROTO_TCP;
  if (hints.ai_port_space == RDMA_PS_UDP || hints.ai_port_space == RDMA_PS_IPOIB)
    h.ai_protocol = IPPROTO_UDP;
  if (hints.ai_port_space == RDMA_PS_IB)
    h.ai_protocol = h.ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : h.ai_socktype ? IPPROTO_TCP : 0;
  addrinfo *found = nullptr;
  if (int rc = getaddrinfo(node, service, &h, &found); rc != 0) return rc;
  const addrinfo *ai = found;
  r->ai_qp_type = hints.ai_qp_type                ? hints.ai_qp_type
                  : ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD
                                                  : IBV_QPT_RC;
  r->ai_port_space = hints.ai_port_space              ? hints.ai_port_space
                     : ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP
                                                      : RDMA_PS_TCP;
  r->ai_family = ai->ai_family;
  // AF_IB asked for, with a numeric host (a GID written as an IPv6 address, or an IPv4 one):
  // that GID as an AF_IB address, its service ID the port space's and the port, as
  // rdma-core's (which has no name service for GIDs either).
  sockaddr_storage ib{};
  const sockaddr *addr = ai->ai_addr;
  socklen_t addr_len = ai->ai_addrlen;
  vrnic::ctl::CmAddress gid;
  if ((hints.ai_flags & RAI_FAMILY) && hints.ai_family == AF_IB &&
      (hints.ai_flags & RAI_NUMERICHOST) && to_cm_address(ai->ai_addr, &gid)) {
    to_sockaddr(gid, AF_IB, &ib, r->ai_port_space);
    addr = reinterpret_cast<const sockaddr *>(&ib);
    addr_len = sizeof(sockaddr_ib);
    r->ai_family = AF_IB;
  }
  bool ok;
  if (ai->ai_flags & AI_PASSIVE) {
    r->ai_flags = RAI_PASSIVE;
    if (ai->ai_canonname) r->ai_src_canonname = strdup(ai->ai_canonname);
    ok = copy_address(&r->ai_src_addr, &r->ai_src_len, addr, addr_len);
  } else {
    if (ai->ai_canonname) r->ai_dst_canonname = strdup(ai->ai_canonname);
    ok = copy_address(&r->ai_dst_addr, &r->ai_dst_len, addr, addr_len);
  }
  freeaddrinfo(found);
  return ok ? 0 : EAI_MEMORY;
}

}  // namespace

// As rdma-core's: with neither node nor service the answer is the hints' own; a failure is
// -1 with errno the getaddrinfo code (EAI_*), which is what callers of rdma-core's read.
RDMACM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                                   const rdma_addrinfo *hints, rdma_addrinfo **res) {
  if (!res || (!node && !service && !hints)) return fail(EINVAL);
  static const rdma_addrinfo kNoHints{};
  const rdma_addrinfo &h = hints ? *hints : kNoHints;
  auto *r = static_cast<rdma_addrinfo *>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!r) return fail(ENOMEM);
  int rc = 0;
  if (node || service) {
    rc = resolve_name(node, service, h, r);
  } else {
    r->ai_flags = h.ai_flags;
    r->ai_family = h.ai_family;
    r->ai_qp_type = h.ai_qp_type;
    r->ai_port_space = h.ai_port_space;
    if (h.ai_dst_len && !copy_address(&r->ai_dst_addr, &r->ai_dst_len, h.ai_dst_addr, h.ai_dst_len))
      rc = ENOMEM;
  }
  if (!rc && !r->ai_src_len && h.ai_src_len &&
      !copy_address(&r->ai_src_addr, &r->ai_src_len, h.ai_src_addr, h.ai_src_len))
    rc = ENOMEM;
  if (rc) {
    rdma_freeaddrinfo(r);
    return fail(rc);
  }
  *res = r;
  return 0;
}

RDMACM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo *res) {
  while (res) {
    rdma_addrinfo *next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

}  // extern "C"
