// vrnicd: the NIC. Runs in the foreground until SIGINT or SIGTERM, then exits 0 after
// removing its socket and releasing its shared memory.
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_split.h"
#include "server.h"
#include "vrnic/socket_path.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop = true;
}

void usage(FILE *out) {
  std::fprintf(
      out,
      "usage: vrnicd [--socket PATH] [--workers N] [--udp ADDR [--udp-port PORT] [--no-gso]]\n"
      "              [--dpdk ADDR --eal 'EAL ARGS' [--udp-port PORT]] [--faults SPEC]\n"
      "  --socket PATH    control socket (default: $VRNIC_SOCKET, else\n"
      "                   $XDG_RUNTIME_DIR/vrnicd.sock, else /tmp/vrnicd-<uid>.sock)\n"
      "  --workers N      dataplane worker threads, 1 to 8 (default 1); each QP runs on one\n"
      "                   (the least loaded when it is created), each has its own udp port\n"
      "                   or dpdk queue pair\n"
      "  --udp ADDR       RoCEv2 over UDP on this IPv4 or IPv6 address (GID 0); without\n"
      "                   it vrnic0 has only the loop port (peers are local processes)\n"
      "  --dpdk ADDR      RoCEv2 on an Ethernet device driven by DPDK, with this IPv4\n"
      "                   address (GID 0); the device and EAL options come from --eal, e.g.\n"
      "                   --eal '--no-huge -m 512 --no-pci --vdev net_af_xdp0,iface=eth1'\n"
      "                   (added unless given: --in-memory --iova-mode=va --no-telemetry\n"
      "                   --log-level=warning -l <current cpu>)\n"
      "  --eal ARGS       DPDK EAL arguments, split at spaces\n"
      "  --udp-port PORT  UDP port to listen on and send to (default 4791)\n"
      "  --no-gso         one sendmsg per packet (by default runs of equal-size packets to\n"
      "                   an IPv6 or loopback peer leave as one UDP GSO send)\n"
      "  --faults SPEC    inject faults on the wire port's receive path, e.g.\n"
      "                   loss=1,dup=1,reorder=5,corrupt=1,delay_us=100,seed=7 (percent)\n");
}

bool parse_number(const char *text, unsigned long lo, unsigned long hi, unsigned long *out) {
  char *end;
  errno = 0;
  *out = std::strtoul(text, &end, 10);
  return *text && !*end && !errno && *out >= lo && *out <= hi;
}

}  // namespace

int main(int argc, char **argv) {
  vrnic::ServerConfig cfg;
  cfg.socket_path = vrnic::default_socket_path();
  for (int i = 1; i < argc; i++) {
    std::string arg = argv[i];
    bool takes_value = arg == "--socket" || arg == "--workers" || arg == "--udp" ||
                       arg == "--udp-port" || arg == "--faults" || arg == "--dpdk" ||
                       arg == "--eal";
    if (takes_value && i + 1 >= argc) {
      std::fprintf(stderr, "vrnicd: %s needs a value\n", arg.c_str());
      return 2;
    }
    unsigned long n;
    if (arg == "--socket") {
      cfg.socket_path = argv[++i];
    } else if (arg == "--workers") {
      if (!parse_number(argv[++i], 1, vrnic::shm::kMaxWorkers, &n)) {
        std::fprintf(stderr, "vrnicd: --workers: a number from 1 to %u\n", vrnic::shm::kMaxWorkers);
        return 2;
      }
      cfg.workers = uint32_t(n);
    } else if (arg == "--udp") {
      cfg.udp = true;
      cfg.udp_port.address = argv[++i];
    } else if (arg == "--udp-port") {
      if (!parse_number(argv[++i], 1, 65535, &n)) {
        std::fprintf(stderr, "vrnicd: --udp-port: '%s' is not a port number\n", argv[i]);
        return 2;
      }
      cfg.udp_port.udp_port = uint16_t(n);
      cfg.dpdk_port.udp_port = uint16_t(n);
    } else if (arg == "--dpdk") {
      cfg.dpdk = true;
      cfg.dpdk_port.address = argv[++i];
    } else if (arg == "--eal") {
      for (absl::string_view word : absl::StrSplit(argv[++i], ' ', absl::SkipEmpty()))
        cfg.dpdk_port.eal_args.emplace_back(word);
    } else if (arg == "--no-gso") {
      cfg.udp_port.gso = false;
    } else if (arg == "--faults") {
      absl::StatusOr<vrnic::FaultConfig> faults = vrnic::FaultConfig::parse(argv[++i]);
      if (!faults.ok()) {
        std::fprintf(stderr, "vrnicd: --faults: %s\n",
                     std::string(faults.status().message()).c_str());
        return 2;
      }
      cfg.faults = *faults;
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "vrnicd: unknown argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (cfg.udp && cfg.dpdk) {
    std::fprintf(stderr, "vrnicd: one wire port: --udp or --dpdk, not both\n");
    return 2;
  }
  if (!cfg.dpdk && !cfg.dpdk_port.eal_args.empty()) {
    std::fprintf(stderr, "vrnicd: --eal is for the dpdk port (--dpdk ADDR)\n");
    return 2;
  }
  if (cfg.faults.any() && !cfg.udp && !cfg.dpdk) {
    std::fprintf(stderr, "vrnicd: --faults needs a wire port (--udp or --dpdk)\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  vrnic::Server server(cfg);
  if (absl::Status st = server.start(); !st.ok()) {
    std::fprintf(stderr, "vrnicd: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::string port =
      cfg.udp ? "udp port " + cfg.udp_port.address + ":" + std::to_string(cfg.udp_port.udp_port)
      : cfg.dpdk
          ? "dpdk port " + cfg.dpdk_port.address + ":" + std::to_string(cfg.dpdk_port.udp_port)
          : "loop port";
  std::fprintf(stderr, "vrnicd: vrnic0 ready on %s (%s, %u worker%s)\n", cfg.socket_path.c_str(),
               port.c_str(), cfg.workers, cfg.workers == 1 ? "" : "s");
  server.serve(g_stop);
  std::fprintf(stderr, "vrnicd: shutting down\n");
  return 0;
}
