// port_event_watch: opens vrnic0, prints "ready port_state=STATE", then waits for the async
// events named on the command line, in order (PORT_ERR, PORT_ACTIVE), each within
// --timeout seconds. After each it prints the event and the port state ibv_query_port gives
// then, which must agree with it (DOWN after PORT_ERR, ACTIVE after PORT_ACTIVE). Exit 0
// when every event came in order and every state agreed; 1 otherwise, saying why.
#include <infiniband/verbs.h>
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "first_device.h"

namespace {

const char *state_name(ibv_port_state s) {
  return s == IBV_PORT_ACTIVE ? "ACTIVE" : s == IBV_PORT_DOWN ? "DOWN" : "OTHER";
}

int fail(const char *why) {
  std::printf("FAIL: %s\n", why);
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  int timeout_s = 10;
  std::vector<ibv_event_type> want;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--timeout" && i + 1 < argc) {
      timeout_s = std::atoi(argv[++i]);
    } else if (a == "PORT_ERR") {
      want.push_back(IBV_EVENT_PORT_ERR);
    } else if (a == "PORT_ACTIVE") {
      want.push_back(IBV_EVENT_PORT_ACTIVE);
    } else {
      std::fprintf(stderr, "usage: port_event_watch [--timeout S] PORT_ERR|PORT_ACTIVE...\n");
      return 2;
    }
  }
  const char *why = nullptr;
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) return fail(why);
  ibv_port_attr attr;
  if (ibv_query_port(ctx, 1, &attr)) return fail("ibv_query_port");
  std::printf("ready port_state=%s\n", state_name(attr.state));
  std::fflush(stdout);
  for (ibv_event_type type : want) {
    pollfd pfd{ctx->async_fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_s * 1000) != 1) {
      std::printf("FAIL: no %s within %d s\n", ibv_event_type_str(type), timeout_s);
      return 1;
    }
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) return fail("ibv_get_async_event");
    ibv_event_type got = ev.event_type;
    int port = ev.element.port_num;
    ibv_ack_async_event(&ev);
    if (ibv_query_port(ctx, 1, &attr)) return fail("ibv_query_port");
    std::printf("event %s port %d, port_state=%s\n", ibv_event_type_str(got), port,
                state_name(attr.state));
    std::fflush(stdout);
    if (got != type || port != 1) {
      std::printf("FAIL: expected %s on port 1\n", ibv_event_type_str(type));
      return 1;
    }
    ibv_port_state expect = type == IBV_EVENT_PORT_ERR ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    if (attr.state != expect) {
      std::printf("FAIL: ibv_query_port says %s after %s\n", state_name(attr.state),
                  ibv_event_type_str(got));
      return 1;
    }
  }
  ibv_close_device(ctx);
  return 0;
}
