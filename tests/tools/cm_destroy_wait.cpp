// cm_destroy_wait PORT: rdma_destroy_id must wait until each event reported for the id has
// been acknowledged, as rdma-core's does (man rdma_destroy_id: "Users must free any
// associated QP ... and acknowledge any related events"). An id's ADDR_RESOLVED and, on a
// listener, a CONNECT_REQUEST are left unacknowledged; another thread acknowledges each after
// 300 ms; the destroy must return only after that. Prints PASS or FAIL lines; exit 0 on PASS.
// A plain rdma_cm program: it links the system's librdmacm and runs on vrnic's through
// LD_LIBRARY_PATH.
#include <atomic>
#include <chrono>
#include <thread>

#include "cm_tool.h"

using namespace cm_tool;

namespace {

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
  sockaddr_in addr = loopback_port(argc, argv, "cm_destroy_wait");
  // A listener, and a client that connects to it.
  auto [lch, cch, listener, client] = listen_and_resolve(addr);
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
