// vrnicd: the NIC. Runs in the foreground until SIGINT or SIGTERM, then exits 0 after
// removing its socket and releasing its shared memory.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "server.h"
#include "vrnic/socket_path.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

void usage(FILE *out) {
  std::fprintf(out,
               "usage: vrnicd [--socket PATH] [--workers N]\n"
               "  --socket PATH  control socket (default: $VRNIC_SOCKET, else\n"
               "                 $XDG_RUNTIME_DIR/vrnicd.sock, else /tmp/vrnicd-<uid>.sock)\n"
               "  --workers N    dataplane worker threads (default 1)\n");
}

}  // namespace

int main(int argc, char **argv) {
  std::string socket_path = vrnic::default_socket_path();
  uint32_t workers = 1;
  for (int i = 1; i < argc; i++) {
    std::string arg = argv[i];
    if ((arg == "--socket" || arg == "--workers") && i + 1 >= argc) {
      std::fprintf(stderr, "vrnicd: %s needs a value\n", arg.c_str());
      return 2;
    }
    if (arg == "--socket") {
      socket_path = argv[++i];
    } else if (arg == "--workers") {
      char *end;
      unsigned long n = std::strtoul(argv[++i], &end, 10);
      if (*end || n < 1 || n > 1) {
        std::fprintf(stderr, "vrnicd: --workers: only 1 worker is supported so far\n");
        return 2;
      }
      workers = uint32_t(n);
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "vrnicd: unknown argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  vrnic::Server server(socket_path, workers);
  if (absl::Status st = server.start(); !st.ok()) {
    std::fprintf(stderr, "vrnicd: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "vrnicd: vrnic0 ready on %s (loop port, %u worker%s)\n",
               socket_path.c_str(), workers, workers == 1 ? "" : "s");
  server.serve(g_stop);
  std::fprintf(stderr, "vrnicd: shutting down\n");
  return 0;
}
