// vrnicd's command table: for each op of the control protocol, who may send it and the
// Server method that serves it. The method's parameters say what it takes from the request
// and gives back, and call<> decodes and encodes accordingly, so a new command is one row
// here and one method:
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

template <typename... P>
int invoke(Server &srv, int (Server::*method)(Session &, P...), Session &s, const ctl::Message &m,
           Server::Reply &r) {
  if (!(present<P>(m) && ...)) return EINVAL;
  return (srv.*method)(s, argument<P>(m, r)...);
}

template <auto Method>
int call(Server &srv, Session &s, const ctl::Message &m, Server::Reply &r) {
  return invoke(srv, Method, s, m, r);
}

}  // namespace

const Server::Command *Server::command(ctl::Op op) {
  using enum ctl::Op;
  using W = Who;
  static constexpr Command kTable[] = {
      {kHello, W::kNewClient, true, call<&Server::hello>},
      {kAllocPd, W::kClient, false, call<&Server::alloc_pd>},
      {kDeallocPd, W::kClient, false, call<&Server::dealloc_pd>},
      {kRegMr, W::kClient, false, call<&Server::reg_mr>},
      {kDeregMr, W::kClient, false, call<&Server::dereg_mr>},
      {kAllocNullMr, W::kClient, false, call<&Server::alloc_null_mr>},
      {kAllocMw, W::kClient, false, call<&Server::alloc_mw>},
      {kDeallocMw, W::kClient, false, call<&Server::dealloc_mw>},
      {kCreateChannel, W::kClient, false, call<&Server::create_channel>},
      {kDestroyChannel, W::kClient, false, call<&Server::destroy_channel>},
      {kCreateCq, W::kClient, false, call<&Server::create_cq>},
      {kResizeCq, W::kClient, false, call<&Server::resize_cq>},
      {kDestroyCq, W::kClient, false, call<&Server::destroy_cq>},
      {kCreateQp, W::kClient, false, call<&Server::create_qp>},
      {kModifyQp, W::kClient, false, call<&Server::modify_qp>},
      {kQueryQp, W::kClient, false, call<&Server::query_qp>},
      {kDestroyQp, W::kClient, false, call<&Server::destroy_qp>},
      {kCreateSrq, W::kClient, false, call<&Server::create_srq>},
      {kModifySrq, W::kClient, false, call<&Server::modify_srq>},
      {kQuerySrq, W::kClient, false, call<&Server::query_srq>},
      {kDestroySrq, W::kClient, false, call<&Server::destroy_srq>},
      {kCreateAh, W::kClient, false, call<&Server::create_ah>},
      {kDestroyAh, W::kClient, false, call<&Server::destroy_ah>},
      {kStats, W::kAnyone, false, call<&Server::stats>},
      {kListQps, W::kAnyone, false, call<&Server::list_qps>},
      {kListDevices, W::kAnyone, false, call<&Server::list_devices>},
      {kSetFaults, W::kAdmin, false, call<&Server::set_faults>},
      {kMoveQp, W::kAdmin, false, call<&Server::move_qp>},
  };
  for (const Command &c : kTable)
    if (c.op == op) return &c;
  return nullptr;
}

}  // namespace vrnic
