// rdma_cm ports (cm_service.h): several ids at one port, as the kernel's CM allows -- ids of
// different addresses, and an IPv4 and an IPv6 wildcard when both set RDMA_OPTION_ID_AFONLY
// (cma_check_port) -- and, for a request to the port, the listening id its destination
// address is for: the id of that address, else a wildcard of its family (an IPv6 wildcard
// without AFONLY takes IPv4 requests too, as a dual-stack socket does). The engine has one
// listener per service ID: the port's, owned by one of its listening ids.
#include "cm_service.h"

#include <cerrno>
#include <cstring>

namespace vrnic {
namespace {

bool same_address(const uint8_t a[16], const uint8_t b[16]) {
  return std::memcmp(a, b, 16) == 0;
}

}  // namespace

int CmService::port_conflict(uint32_t key, const ctl::CmAddress &addr, bool afonly) const {
  auto at = ports_.find(key);
  if (at == ports_.end()) return 0;
  const bool v4 = ctl::cm_ipv4_mapped(addr.gid);
  for (uint32_t h : at->second) {
    const Id &other = ids_.at(h);
    if (afonly && other.afonly && v4 != ctl::cm_ipv4_mapped(other.local.gid)) continue;
    if (ctl::cm_wildcard(addr.gid) || ctl::cm_wildcard(other.local.gid)) return EADDRNOTAVAIL;
    if (same_address(addr.gid, other.local.gid)) return EADDRINUSE;
  }
  return 0;
}

absl::Status CmService::listen_port(Id &id, uint32_t handle) {
  const uint32_t key = uint32_t(id.port_space) << 16 | id.local.port;
  for (uint32_t h : ports_[key])
    if (h != handle && ids_.at(h).listening) return absl::OkStatus();  // the port listens
  return engine_->listen(cm::service_id(id.port_space, id.local.port), handle);
}

void CmService::unlisten_port(Id &id, uint32_t handle) {
  const uint64_t service = cm::service_id(id.port_space, id.local.port);
  engine_->stop_listening(service);
  // Another id still listening at the port owns the engine's listener from now on.
  for (uint32_t h : ports_[uint32_t(id.port_space) << 16 | id.local.port])
    if (h != handle && ids_.at(h).listening) {
      (void)engine_->listen(service, h);
      return;
    }
}

CmService::Id *CmService::listener_for(uint16_t port_space, uint16_t port, const uint8_t dst[16],
                                       uint32_t *handle) {
  auto at = ports_.find(uint32_t(port_space) << 16 | port);
  if (at == ports_.end()) return nullptr;
  const bool v4 = ctl::cm_ipv4_mapped(dst);
  uint32_t wildcard = 0;
  for (uint32_t h : at->second) {
    Id &id = ids_.at(h);
    if (!id.listening) continue;
    if (same_address(id.local.gid, dst)) {
      *handle = h;
      return &id;
    }
    if (!ctl::cm_wildcard(id.local.gid)) continue;
    const bool id_v4 = ctl::cm_ipv4_mapped(id.local.gid);
    if (id_v4 == v4 || (!id_v4 && !id.afonly)) {
      // Its own family's wildcard before a dual-stack one.
      if (!wildcard || id_v4 == v4) wildcard = h;
    }
  }
  if (!wildcard) return nullptr;
  *handle = wildcard;
  return &ids_.at(wildcard);
}

}  // namespace vrnic
