// cm_destroy_wait PORT: rdma_destroy_id must wait until each event reported for the id has
// been acknowledged, as rdma-core's does (man rdma_destroy_id: "Users must free any
// associated QP ... and acknowledge any related events"). An id's ADDR_RESOLVED and, on a
// listener, a CONNECT_REQUEST are left unacknowledged; another thread acknowledges each after
// 300 ms; the destroy must return only after that. Prints PASS or FAIL lines; exit 0 on PASS.
// A plain rdma_cm program: it links the system's librdmacm and runs on vrnic's through
// LD_LIBRARY_PATH.
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

int failures = 0;

void expect(bool ok, const char *what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
  failures += !ok;
}

rdma_cm_event *next_event(rdma_event_channel *ch, rdma_cm_event_type want) {
  rdma_cm_event *e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) {
    std::perror("rdma_get_cm_event");
    std::exit(2);
  }
  if (e->event != want) {
    std::printf("FAIL: event %s, want %s\n", rdma_event_str(e->event), rdma_event_str(want));
    std::exit(1);
  }
  return e;
}

// Destroys `id` while `e` (reported for it) is unacknowledged; a thread acknowledges `e`
// 300 ms later. True if the destroy returned after the acknowledgement.
bool destroy_waits(rdma_cm_id *id, rdma_cm_event *e) {
  std::atomic<bool> acked{false};
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    acked.store(true);
    rdma_ack_cm_event(e);
  });
  const int rc = rdma_destroy_id(id);
  const bool after = acked.load();
  later.join();
  return rc == 0 && after;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cm_destroy_wait PORT\n");
    return 2;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(std::atoi(argv[1])));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);

  // A listener, and a client that connects to it.
  rdma_event_channel *lch = rdma_create_event_channel();
  rdma_event_channel *cch = rdma_create_event_channel();
  rdma_cm_id *listener = nullptr, *client = nullptr;
  if (!lch || !cch || rdma_create_id(lch, &listener, nullptr, RDMA_PS_TCP) ||
      rdma_bind_addr(listener, reinterpret_cast<sockaddr *>(&addr)) || rdma_listen(listener, 4) ||
      rdma_create_id(cch, &client, nullptr, RDMA_PS_TCP) ||
      rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr *>(&addr), 2000)) {
    std::perror("set-up");
    return 2;
  }
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(client, 2000)) return std::perror("rdma_resolve_route"), 2;
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  rdma_conn_param p{};
  p.retry_count = 7;
  if (rdma_connect(client, &p)) return std::perror("rdma_connect"), 2;

  // The CONNECT_REQUEST is reported on the listener: destroying the new id does not wait for
  // it, destroying the listener does.
  rdma_cm_event *req = next_event(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
  rdma_reject(req->id, nullptr, 0);
  expect(rdma_destroy_id(req->id) == 0, "the request's own id is destroyed at once");
  expect(destroy_waits(listener, req),
         "the listener's destroy waits for its CONNECT_REQUEST to be acknowledged");
  rdma_ack_cm_event(next_event(cch, RDMA_CM_EVENT_REJECTED));

  // An id with its ADDR_RESOLVED unacknowledged.
  rdma_cm_id *other = nullptr;
  if (rdma_create_id(cch, &other, nullptr, RDMA_PS_TCP) ||
      rdma_resolve_addr(other, nullptr, reinterpret_cast<sockaddr *>(&addr), 2000))
    return std::perror("second id"), 2;
  rdma_cm_event *resolved = next_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
  expect(destroy_waits(other, resolved),
         "an id's destroy waits for its ADDR_RESOLVED to be acknowledged");

  rdma_destroy_id(client);
  rdma_destroy_event_channel(cch);
  rdma_destroy_event_channel(lch);
  return failures ? 1 : 0;
}
