// cm_backlog PORT: rdma_listen's backlog, as ucma's (issue 28, row 10). A listener with a
// backlog of 2 fetches none of its events while three clients connect: two CONNECT_REQUESTs
// are reported, the third request gets no answer and is kept nowhere (the kernel's ucma
// drops it the same way, for the sender to try again). Once the listener has fetched and
// accepted the two, the third request, sent again by its CM, is reported and accepted too:
// all three clients get their CONNECT_RESPONSE. Prints PASS or FAIL lines; exit 0 on PASS.
// A plain rdma_cm program: it links the system's librdmacm and runs on vrnic's through
// LD_LIBRARY_PATH.
#include <fcntl.h>
#include <poll.h>

#include <chrono>
#include <thread>
#include <vector>

#include "cm_tool.h"

using namespace cm_tool;

namespace {

constexpr int kClients = 3;
constexpr int kBacklog = 2;

// The events the channel holds now, without waiting.
std::vector<rdma_cm_event *> events_now(rdma_event_channel *ch) {
  std::vector<rdma_cm_event *> out;
  const int flags = ::fcntl(ch->fd, F_GETFL);
  ::fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
  rdma_cm_event *e;
  while (rdma_get_cm_event(ch, &e) == 0) out.push_back(e);
  ::fcntl(ch->fd, F_SETFL, flags);
  return out;
}

// The next event within `seconds`, or nullptr.
rdma_cm_event *event_within(rdma_event_channel *ch, int seconds) {
  pollfd p{ch->fd, POLLIN, 0};
  rdma_cm_event *e = nullptr;
  if (::poll(&p, 1, seconds * 1000) == 1 && rdma_get_cm_event(ch, &e) == 0) return e;
  return nullptr;
}

bool accept(rdma_cm_event *req, uint32_t qpn) {
  rdma_conn_param p{};
  p.qp_num = qpn;
  p.responder_resources = p.initiator_depth = 1;
  const bool ok = req->event == RDMA_CM_EVENT_CONNECT_REQUEST && rdma_accept(req->id, &p) == 0;
  rdma_ack_cm_event(req);
  return ok;
}

}  // namespace

int main(int argc, char **argv) {
  sockaddr_in addr = loopback_port(argc, argv, "cm_backlog");
  auto *sa = reinterpret_cast<sockaddr *>(&addr);
  rdma_event_channel *lch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
  rdma_cm_id *listener = nullptr;
  if (!lch || !cch || rdma_create_id(lch, &listener, nullptr, RDMA_PS_TCP) ||
      rdma_bind_addr(listener, sa) || rdma_listen(listener, kBacklog))
    return std::perror("listener"), 2;
  std::vector<rdma_cm_id *> clients(kClients);
  for (rdma_cm_id *&c : clients) {
    if (rdma_create_id(cch, &c, nullptr, RDMA_PS_TCP) || rdma_resolve_addr(c, nullptr, sa, 2000))
      return std::perror("client"), 2;
    rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(c, 2000)) return std::perror("rdma_resolve_route"), 2;
    rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  }
  for (int i = 0; i < kClients; i++) {
    rdma_conn_param p{};
    p.qp_num = uint32_t(0x100 + i);
    p.responder_resources = p.initiator_depth = 1;
    p.retry_count = 7;
    if (rdma_connect(clients[i], &p)) return std::perror("rdma_connect"), 2;
  }
  // Every REQ is in by now (one vrnicd, its loop port); the listener has fetched nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<rdma_cm_event *> first = events_now(lch);
  std::printf("reported_while_unfetched=%zu\n", first.size());
  expect(first.size() == kBacklog, "backlog 2: two of three requests reported, the third not");
  bool accepted = true;
  for (rdma_cm_event *e : first) accepted &= accept(e, 0x200);
  // The third, sent again by the client's CM (after its response timeout, 4.3 s by default).
  rdma_cm_event *third = event_within(lch, 30);
  expect(third && third->event == RDMA_CM_EVENT_CONNECT_REQUEST,
         "the third request, sent again, is reported once the backlog has room");
  if (third) accepted &= accept(third, 0x201);
  expect(accepted, "each request reported is accepted");
  int responses = 0;
  for (int i = 0; i < kClients; i++) {
    rdma_cm_event *e = event_within(cch, 30);
    if (!e) break;
    responses += e->event == RDMA_CM_EVENT_CONNECT_RESPONSE;
    rdma_ack_cm_event(e);
  }
  std::printf("connect_responses=%d\n", responses);
  expect(responses == kClients, "every client gets its CONNECT_RESPONSE");
  return failures ? 1 : 0;
}
