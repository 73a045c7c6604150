// ibv_import_device, ibv_import_pd, ibv_import_mr, ibv_import_dm: objects of another context, shared as the
// kernel shares them through its uverbs file. vrnic's cmd_fd is the client end of a session's
// socket; a process that holds a copy of it (dup, SCM_RIGHTS) opens a connection of its own
// that vrnicd lets speak for that session (Server::import_device), so that two processes'
// calls never share one stream. Imported PDs, MRs and DMs are handles of the session, looked
// up (a DM's memory mapped here too).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "internal.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace {

// The vrnicd socket that cmd_fd is connected to, or "" when it is no vrnic cmd_fd.
std::string daemon_socket_of(int cmd_fd) {
  struct stat st;
  if (::fstat(cmd_fd, &st) < 0 || !S_ISSOCK(st.st_mode)) return {};
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(cmd_fd, reinterpret_cast<sockaddr *>(&addr), &len) < 0 ||
      addr.sun_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path) || !addr.sun_path[0])
    return {};
  return std::string(addr.sun_path, strnlen(addr.sun_path, sizeof(addr.sun_path)));
}

}  // namespace

extern "C" {

// As rdma-core's: EINVAL for a descriptor that is no device's command fd, ENODEV when its
// device is not found; the context owns cmd_fd from then on (ibv_close_device closes it).
VRNIC_EXPORT ibv_context *ibv_import_device(int cmd_fd) {
  const std::string path = daemon_socket_of(cmd_fd);
  if (path.empty()) return fail_null<ibv_context>(EINVAL);
  ibv_device *device = device_at(path);
  if (!device) return fail_null<ibv_context>(ENODEV);
  return open_context(device, path, cmd_fd);
}

VRNIC_EXPORT ibv_pd *ibv_import_pd(ibv_context *context, uint32_t pd_handle) {
  if (!context) return fail_null<ibv_pd>(EINVAL);
  auto *pd = new (std::nothrow) Pd{};
  if (!pd) return fail_null<ibv_pd>(ENOMEM);
  if (int err = Context::of(context)->call_on(ctl::Op::kImportPd, pd_handle)) {
    delete pd;
    return fail_null<ibv_pd>(err);
  }
  pd->ibv.context = context;
  pd->ibv.handle = pd_handle;
  return &pd->ibv;
}

// Only this process's object goes; the PD stays the session's (ibv_dealloc_pd destroys it).
VRNIC_EXPORT void ibv_unimport_pd(ibv_pd *pd) {
  if (pd) delete Pd::of(pd);
}

// As the kernel's query: keys and length, no address (rdma-core leaves addr NULL).
VRNIC_EXPORT ibv_mr *ibv_import_mr(ibv_pd *pd, uint32_t mr_handle) {
  if (!pd) return fail_null<ibv_mr>(EINVAL);
  auto *mr = new (std::nothrow) Mr{};
  if (!mr) return fail_null<ibv_mr>(ENOMEM);
  ctl::ImportMrResp resp{};
  ctl::HandleReq req{mr_handle, 0};
  if (int err = Context::of(pd->context)
                    ->conn.call(ctl::Op::kImportMr, &req, sizeof(req), &resp, sizeof(resp))) {
    delete mr;
    return fail_null<ibv_mr>(err);
  }
  mr->ibv.context = pd->context;
  mr->ibv.pd = pd;
  mr->ibv.addr = nullptr;
  mr->ibv.length = resp.length;
  mr->ibv.handle = resp.handle;
  mr->ibv.lkey = resp.lkey;
  mr->ibv.rkey = resp.rkey;
  return &mr->ibv;
}

VRNIC_EXPORT void ibv_unimport_mr(ibv_mr *mr) {
  if (mr) delete Mr::of(mr);
}

VRNIC_EXPORT ibv_dm *ibv_import_dm(ibv_context *context, uint32_t dm_handle) {
  return context ? import_dm(context, dm_handle) : fail_null<ibv_dm>(EINVAL);
}

VRNIC_EXPORT void ibv_unimport_dm(ibv_dm *dm) {
  if (dm) unimport_dm(dm);
}

}  // extern "C"
