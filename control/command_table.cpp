// vrnicd's command table: for each op of the control protocol, who may send it and the
// handler that serves it (a method of the Server, MemoryObjects, QueueObjects or CmService). The
// method's parameters say what it takes from the request and gives back, and call<> decodes and
// encodes accordingly, so a new command is one row here and one method:
//   uint32_t                the handle of a HandleReq (0, which names nothing, if absent)
//   const Req &             the body as Req; a shorter body is EINVAL without a call
//   const ctl::Message &    the whole message (bodies of variable length, received fds)
//   Resp &                  the reply's body, zeroed
//   std::vector<int> &      descriptors to pass with the reply
// Each method returns 0 or a positive errno, the reply's status.
#include <cerrno>
#include <new>
#include <type_traits>

#include "server.h"

namespace vrnic {
namespace {

template <typename P>
using Bare = std::remove_cvref_t<P>;

template <typename P>
constexpr bool kIsRequest =
    std::is_const_v<std::remove_reference_t<P>> && !std::is_same_v<Bare<P>, ctl::Message> &&
    !std::is_same_v<Bare<P>, uint32_t>;

// Whether the message carries what parameter P needs.
template <typename P>
bool present(const ctl::Message &m) {
  if constexpr (kIsRequest<P>)
    return m.as<Bare<P>>() != nullptr;
  else
    return true;
}

template <typename P>
decltype(auto) argument(const ctl::Message &m, Server::Reply &r) {
  using T = Bare<P>;
  if constexpr (std::is_same_v<T, uint32_t>) {
    const auto *h = m.as<ctl::HandleReq>();
    return h ? h->handle : 0u;
  } else if constexpr (std::is_same_v<T, ctl::Message>) {
    return (m);
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    return (r.fds);
  } else if constexpr (kIsRequest<P>) {
    return (*m.as<T>());
  } else {
    return (r.body<T>());
  }
}

}  // namespace

template <typename C, typename... P>
int invoke_handler(Server &srv, int (C::*method)(Session &, P...), Session &s,
                   const ctl::Message &m, Server::Reply &r) {
  if (!(present<P>(m) && ...)) return EINVAL;
  return (srv.handler_object(static_cast<const C *>(nullptr)).*method)(s, argument<P>(m, r)...);
}

namespace {

template <auto Method>
int call(Server &srv, Session &s, const ctl::Message &m, Server::Reply &r) {
  return invoke_handler(srv, Method, s, m, r);
}

}  // namespace

const Server::Command *Server::command(ctl::Op op) {
  using enum ctl::Op;
  using W = Who;
  static constexpr Command kTable[] = {
      {kHello, W::kNewClient, true, call<&Server::hello>},
      {kImportDevice, W::kNewClient, true, call<&Server::import_device>},
      {kImportPd, W::kClient, false, call<&MemoryObjects::import_pd>},
      {kImportMr, W::kClient, false, call<&MemoryObjects::import_mr>},
      {kImportDm, W::kClient, false, call<&MemoryObjects::import_dm>},
      {kAllocPd, W::kClient, false, call<&MemoryObjects::alloc_pd>},
      {kDeallocPd, W::kClient, false, call<&MemoryObjects::dealloc_pd>},
      {kRegMr, W::kClient, false, call<&MemoryObjects::reg_mr>},
      {kDeregMr, W::kClient, false, call<&MemoryObjects::dereg_mr>},
      {kAllocNullMr, W::kClient, false, call<&MemoryObjects::alloc_null_mr>},
      {kAllocDm, W::kClient, false, call<&MemoryObjects::alloc_dm>},
      {kFreeDm, W::kClient, false, call<&MemoryObjects::free_dm>},
      {kRegDmMr, W::kClient, false, call<&MemoryObjects::reg_dm_mr>},
      {kAllocMw, W::kClient, false, call<&MemoryObjects::alloc_mw>},
      {kDeallocMw, W::kClient, false, call<&MemoryObjects::dealloc_mw>},
      {kCreateChannel, W::kClient, false, call<&QueueObjects::create_channel>},
      {kDestroyChannel, W::kClient, false, call<&QueueObjects::destroy_channel>},
      {kCreateCq, W::kClient, false, call<&QueueObjects::create_cq>},
      {kResizeCq, W::kClient, false, call<&QueueObjects::resize_cq>},
      {kDestroyCq, W::kClient, false, call<&QueueObjects::destroy_cq>},
      {kCreateQp, W::kClient, true, call<&QueueObjects::create_qp>},
      {kModifyQp, W::kClient, false, call<&QueueObjects::modify_qp>},
      {kQueryQp, W::kClient, false, call<&QueueObjects::query_qp>},
      {kSetEce, W::kClient, false, call<&QueueObjects::set_ece>},
      {kDestroyQp, W::kClient, false, call<&QueueObjects::destroy_qp>},
      {kCreateSrq, W::kClient, false, call<&QueueObjects::create_srq>},
      {kModifySrq, W::kClient, false, call<&QueueObjects::modify_srq>},
      {kQuerySrq, W::kClient, false, call<&QueueObjects::query_srq>},
      {kDestroySrq, W::kClient, false, call<&QueueObjects::destroy_srq>},
      {kAttachMcast, W::kClient, false, call<&QueueObjects::attach_mcast>},
      {kDetachMcast, W::kClient, false, call<&QueueObjects::detach_mcast>},
      {kOpenXrcd, W::kClient, false, call<&QueueObjects::open_xrcd>},
      {kCloseXrcd, W::kClient, false, call<&QueueObjects::close_xrcd>},
      {kOpenQp, W::kClient, false, call<&QueueObjects::open_qp>},
      {kCreateAh, W::kClient, false, call<&QueueObjects::create_ah>},
      {kDestroyAh, W::kClient, false, call<&QueueObjects::destroy_ah>},
      {kStats, W::kAnyone, false, call<&Server::stats>},
      {kListQps, W::kAnyone, false, call<&Server::list_qps>},
      {kListDevices, W::kAnyone, false, call<&Server::list_devices>},
      {kSetFaults, W::kAdmin, false, call<&Server::set_faults>},
      {kMoveQp, W::kAdmin, false, call<&Server::move_qp>},
      {kCaptureStart, W::kAdmin, false, call<&Server::start_capture>},
      {kCaptureStop, W::kAdmin, false, call<&Server::stop_capture>},
      {kCmCreateChannel, W::kConnection, false, call<&CmService::create_channel>},
      {kCmDestroyChannel, W::kConnection, false, call<&CmService::destroy_channel>},
      {kCmCreateId, W::kConnection, false, call<&CmService::create_id>},
      {kCmDestroyId, W::kConnection, false, call<&CmService::destroy_id>},
      {kCmBind, W::kConnection, false, call<&CmService::bind>},
      {kCmListen, W::kConnection, false, call<&CmService::listen>},
      {kCmConnect, W::kConnection, false, call<&CmService::connect>},
      {kCmAccept, W::kConnection, false, call<&CmService::accept>},
      {kCmReject, W::kConnection, false, call<&CmService::reject>},
      {kCmEstablish, W::kConnection, false, call<&CmService::establish>},
      {kCmDisconnect, W::kConnection, false, call<&CmService::disconnect>},
      {kCmMigrate, W::kConnection, false, call<&CmService::migrate>},
  };
  for (const Command &c : kTable)
    if (c.op == op) return &c;
  return nullptr;
}

}  // namespace vrnic
