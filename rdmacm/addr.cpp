// Devices and addresses for the drop-in librdmacm: the vrnic devices (opened once per process,
// one PD each, as rdma-core's library keeps them), which device an IP address belongs to (its
// GID table), the daemons' sockets, and rdma_getaddrinfo.
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "internal.h"
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
  if (ctl::list_devices(default_socket_path().c_str(), found.get()) != 0) return;
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
  return false;  // AF_IB: not supported
}

void to_sockaddr(const ctl::CmAddress &a, int family, sockaddr_storage *out) {
  std::memset(out, 0, sizeof(*out));
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (family == AF_INET || (family != AF_INET6 && std::memcmp(a.gid, mapped, 12) == 0)) {
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

RDMACM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                                   const rdma_addrinfo *hints, rdma_addrinfo **res) {
  if (!res || (!node && !service)) {
    errno = EINVAL;
    return -1;
  }
  addrinfo h{};
  h.ai_socktype = SOCK_STREAM;
  if (hints) {
    h.ai_family = hints->ai_family == AF_IB ? AF_UNSPEC : hints->ai_family;
    if (hints->ai_flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
    if (hints->ai_flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
  }
  addrinfo *found = nullptr;
  if (int rc = getaddrinfo(node, service, &h, &found); rc != 0) {
    errno = rc == EAI_SYSTEM ? errno : ENOENT;
    return rc;
  }
  rdma_addrinfo *first = nullptr, **link = &first;
  for (addrinfo *ai = found; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    auto *r = static_cast<rdma_addrinfo *>(std::calloc(1, sizeof(rdma_addrinfo)));
    auto *addr = static_cast<sockaddr *>(std::calloc(1, ai->ai_addrlen));
    if (!r || !addr) {
      std::free(r);
      std::free(addr);
      break;
    }
    std::memcpy(addr, ai->ai_addr, ai->ai_addrlen);
    r->ai_flags = hints ? hints->ai_flags : 0;
    r->ai_family = ai->ai_family;
    r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
    r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
    if (r->ai_flags & RAI_PASSIVE) {
      r->ai_src_addr = addr;
      r->ai_src_len = ai->ai_addrlen;
    } else {
      r->ai_dst_addr = addr;
      r->ai_dst_len = ai->ai_addrlen;
      if (hints && hints->ai_src_addr) {
        r->ai_src_addr = static_cast<sockaddr *>(std::calloc(1, hints->ai_src_len));
        if (r->ai_src_addr) {
          std::memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
          r->ai_src_len = hints->ai_src_len;
        }
      }
    }
    if (ai->ai_canonname)
      ((r->ai_flags & RAI_PASSIVE) ? r->ai_src_canonname : r->ai_dst_canonname) =
          strdup(ai->ai_canonname);
    *link = r;
    link = &r->ai_next;
  }
  freeaddrinfo(found);
  if (!first) {
    errno = ENOENT;
    return EAI_NONAME;
  }
  *res = first;
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
