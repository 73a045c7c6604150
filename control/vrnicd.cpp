// vrnicd: the NIC. Runs in the foreground until SIGINT or SIGTERM, then exits 0 after
// removing its socket and releasing its shared memory.
#include <arpa/inet.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "cpu_list.h"
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
      "usage: vrnicd [--socket PATH] [--socket-group GROUP] [--limits SPEC] DEVICE\n"
      "              [--device DEVICE]...\n"
      "  DEVICE: [--workers N] [--cpus LIST] [--no-direct-path] [--selective-repeat]\n"
      "          [--no-host-addresses]\n"
      "          [--udp ADDR [--udp-port PORT] [--udp-buffer BYTES] [--no-gso]]\n"
      "          [--dpdk ADDR --eal 'EAL ARGS' [--udp-port PORT]] [--faults SPEC]\n"
      "  --socket PATH    control socket (default: $VRNIC_SOCKET, else\n"
      "                   $XDG_RUNTIME_DIR/vrnicd.sock, else /tmp/vrnicd-<uid>/vrnicd.sock);\n"
      "                   vrnic0's, and clients ask it for the others. Mode 0600: only\n"
      "                   this user (and root) may connect\n"
      "  --socket-group GROUP  mode 0660 and this group instead: a root vrnicd serving the\n"
      "                   group's users (each sees and changes only its own objects; faults\n"
      "                   and QP moves stay root's)\n"
      "  --limits SPEC    quotas per user and device, NAME=N,..., e.g. sessions=64,pds=256,\n"
      "                   mrs=4096,qps=1024,mr_bytes=1073741824. NAMEs: sessions, channels\n"
      "                   (completion and rdma_cm event channels), pds, mrs, mws, cqs, qps,\n"
      "                   srqs, ahs, cm_ids, mappings (vrnicd's: session page, rings, MR\n"
      "                   pieces), mcast (multicast attachments), mr_bytes (default: the\n"
      "                   machine's RAM; device memory counts too); each one's default\n"
      "                   and value: vrnicctl stats (limit_NAME). Past one, the request fails\n"
      "                   with ENOMEM\n"
      "  --device         starts the next device (vrnic1, vrnic2, ... up to 8): a virtual NIC\n"
      "                   with its own port, addresses, GID table, workers and socket\n"
      "                   (PATH.vrnicN); the options after it are its own. Each needs a wire\n"
      "                   port and a distinct address\n"
      "  --workers N      dataplane worker threads, 1 to 8 (default 1); each QP runs on one\n"
      "                   (the least loaded when it is created), each has its own udp port\n"
      "                   or dpdk queue pair\n"
      "  --cpus LIST      pin the workers to these CPUs, worker i to the i-th (round robin),\n"
      "                   e.g. 1 or 2,3 or 4-7 (default: unpinned, the kernel places them)\n"
      "  --udp ADDR       RoCEv2 over UDP on this IPv4 or IPv6 address (GID 0); without\n"
      "                   it vrnic0 has only the loop port (peers are local processes)\n"
      "  --no-host-addresses  a loop-only device's GIDs: 127.0.0.1 alone (by default also\n"
      "                   every address of the host's interfaces that are up and not\n"
      "                   loopback, IPv6 link-local aside, as rxe on an interface has its\n"
      "                   addresses: programs find the device by them, libfabric's verbs\n"
      "                   provider among them; they reach local processes only)\n"
      "  --dpdk ADDR      RoCEv2 on an Ethernet device driven by DPDK, with this IPv4 or IPv6\n"
      "                   address (GID 0); the device and EAL options come from --eal, e.g.\n"
      "                   --eal '--no-huge -m 512 --no-pci --vdev net_af_xdp0,iface=eth1'\n"
      "                   (added unless given: --in-memory --iova-mode=va --no-telemetry\n"
      "                   --log-level=warning -l <current cpu>). DPDK is set up once, by the\n"
      "                   first dpdk device's --eal: a later one's names its own device and\n"
      "                   repeats the other options or gives none\n"
      "  --eal ARGS       DPDK EAL arguments, split at spaces\n"
      "  --udp-port PORT  UDP port to listen on and send to (default 4791)\n"
      "  --udp-buffer BYTES  each udp socket's receive and send buffer (default 33554432);\n"
      "                   without root the kernel caps it at net.core.rmem_max/wmem_max\n"
      "  --no-direct-path every work request goes through the workers (by default a\n"
      "                   client runs a WR between two QPs of its own process itself; the\n"
      "                   environment variable VRNIC_DIRECT_PATH=0 does the same per process)\n"
      "  --selective-repeat  a sequence NAK says which later packets this device holds, so\n"
      "                   that a vrnic peer sends again only the missing ones (by default\n"
      "                   it goes back N from the first), on QPs that did not agree per\n"
      "                   connection (rdma_cm does, through ECE); for wires where every\n"
      "                   such RC peer is a vrnicd that knows it (vrnic 14 and later): rxe\n"
      "                   and hardware NICs need the default. Out-of-order packets are kept\n"
      "                   either way\n"
      "  --no-gso         one sendmsg per packet (by default runs of equal-size packets to\n"
      "                   an IPv6 or loopback peer leave as one UDP GSO send)\n"
      "  --faults SPEC    inject faults on the wire port's receive path, e.g.\n"
      "                   loss=1,dup=1,reorder=5,corrupt=1,delay_us=100,seed=7 (percent);\n"
      "                   hold_op=N holds every frame of BTH opcode N behind the next one;\n"
      "                   drop_mad=A drops the first copy of each CM MAD of attribute A\n"
      "                   (21: DREQ), which the sender's CM timer sends again\n");
}

bool parse_number(const char *text, unsigned long lo, unsigned long hi, unsigned long *out) {
  char *end;
  errno = 0;
  *out = std::strtoul(text, &end, 10);
  return *text && !*end && !errno && *out >= lo && *out <= hi;
}

// A device's wire address and UDP port, comparable whatever way the address was written.
std::string wire_key(const vrnic::ServerConfig &d) {
  const std::string &text = d.udp ? d.udp_port.address : d.dpdk_port.address;
  uint16_t port = d.udp ? d.udp_port.udp_port : d.dpdk_port.udp_port;
  unsigned char bytes[16] = {};
  if (inet_pton(AF_INET, text.c_str(), bytes) != 1) inet_pton(AF_INET6, text.c_str(), bytes);
  return std::string(reinterpret_cast<char *>(bytes), sizeof(bytes)) + std::to_string(port);
}

// Checks one device's options; returns an error message or "".
std::string check_device(const vrnic::ServerConfig &d, uint32_t index) {
  if (d.udp && d.dpdk) return "one wire port per device: --udp or --dpdk, not both";
  if (!d.dpdk && !d.dpdk_port.eal_args.empty()) return "--eal is for the dpdk port (--dpdk ADDR)";
  if (!d.udp && d.udp_port.socket_buffer != vrnic::UdpPortConfig{}.socket_buffer)
    return "--udp-buffer is for the udp port (--udp ADDR)";
  if (d.faults.any() && !d.udp && !d.dpdk) return "--faults needs a wire port (--udp or --dpdk)";
  if (index > 0 && !d.udp && !d.dpdk)
    return "vrnic" + std::to_string(index) + " needs a wire port (--udp or --dpdk)";
  return "";
}

}  // namespace

int main(int argc, char **argv) {
  std::string socket_path = vrnic::default_socket_path();
  gid_t socket_group = gid_t(-1);
  vrnic::UserLimits limits;
  std::vector<vrnic::ServerConfig> devices(1);
  for (int i = 1; i < argc; i++) {
    vrnic::ServerConfig &cfg = devices.back();
    std::string arg = argv[i];
    bool takes_value = arg == "--socket" || arg == "--workers" || arg == "--cpus" ||
                       arg == "--udp" || arg == "--udp-port" || arg == "--udp-buffer" ||
                       arg == "--faults" || arg == "--dpdk" || arg == "--eal" ||
                       arg == "--socket-group" || arg == "--limits";
    if (takes_value && i + 1 >= argc) {
      std::fprintf(stderr, "vrnicd: %s needs a value\n", arg.c_str());
      return 2;
    }
    unsigned long n;
    if (arg == "--socket") {
      socket_path = argv[++i];
    } else if (arg == "--socket-group") {
      const group *g = ::getgrnam(argv[++i]);
      if (!g) {
        std::fprintf(stderr, "vrnicd: --socket-group: no group '%s'\n", argv[i]);
        return 2;
      }
      socket_group = g->gr_gid;
    } else if (arg == "--limits") {
      absl::StatusOr<vrnic::UserLimits> l = vrnic::UserLimits::parse(argv[++i]);
      if (!l.ok()) {
        std::fprintf(stderr, "vrnicd: --limits: %s\n", std::string(l.status().message()).c_str());
        return 2;
      }
      limits = *l;
    } else if (arg == "--device") {
      if (devices.size() == vrnic::ctl::kMaxDevices) {
        std::fprintf(stderr, "vrnicd: at most %u devices\n", vrnic::ctl::kMaxDevices);
        return 2;
      }
      devices.emplace_back();
    } else if (arg == "--workers") {
      if (!parse_number(argv[++i], 1, vrnic::shm::kMaxWorkers, &n)) {
        std::fprintf(stderr, "vrnicd: --workers: a number from 1 to %u\n", vrnic::shm::kMaxWorkers);
        return 2;
      }
      cfg.workers = uint32_t(n);
    } else if (arg == "--cpus") {
      cpu_set_t allowed;
      CPU_ZERO(&allowed);
      if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        std::fprintf(stderr, "vrnicd: --cpus: sched_getaffinity: %s\n", std::strerror(errno));
        return 2;
      }
      absl::StatusOr<std::vector<int>> cpus = vrnic::parse_cpu_list(argv[++i], allowed);
      if (!cpus.ok()) {
        std::fprintf(stderr, "vrnicd: --cpus %s\n", std::string(cpus.status().message()).c_str());
        return 2;
      }
      cfg.worker_cpus = *cpus;
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
    } else if (arg == "--udp-buffer") {
      if (!parse_number(argv[++i], 4096, 1ul << 30, &n)) {
        std::fprintf(stderr, "vrnicd: --udp-buffer: a number of bytes from 4096 to 1073741824\n");
        return 2;
      }
      cfg.udp_port.socket_buffer = uint32_t(n);
    } else if (arg == "--dpdk") {
      cfg.dpdk = true;
      cfg.dpdk_port.address = argv[++i];
    } else if (arg == "--eal") {
      for (absl::string_view word : absl::StrSplit(argv[++i], ' ', absl::SkipEmpty()))
        cfg.dpdk_port.eal_args.emplace_back(word);
    } else if (arg == "--no-direct-path") {
      cfg.direct_path = false;
    } else if (arg == "--selective-repeat") {
      cfg.selective_repeat = true;
    } else if (arg == "--no-host-addresses") {
      cfg.host_addresses = false;
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
  std::vector<std::string> wires;
  for (uint32_t d = 0; d < devices.size(); d++) {
    vrnic::ServerConfig &cfg = devices[d];
    if (std::string err = check_device(cfg, d); !err.empty()) {
      std::fprintf(stderr, "vrnicd: %s\n", err.c_str());
      return 2;
    }
    if (cfg.udp || cfg.dpdk) {
      std::string key = wire_key(cfg);
      if (std::find(wires.begin(), wires.end(), key) != wires.end()) {
        std::fprintf(stderr, "vrnicd: vrnic%u: another device already has this address and port\n",
                     d);
        return 2;
      }
      wires.push_back(key);
    }
    cfg.device_index = d;
    cfg.dpdk_port.device = d;
    cfg.socket_path = vrnic::device_socket_path(socket_path, d);
    cfg.socket_group = socket_group;
    cfg.limits = limits;
  }
  // Every client costs a few fds (its socket, event pipe, session memory) and each completion
  // channel one: as many as the hard limit allows, the quotas share them out.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::unique_ptr<vrnic::Server>> servers;
  std::vector<vrnic::ctl::DeviceListEntry> list;
  for (const vrnic::ServerConfig &cfg : devices) {
    servers.push_back(std::make_unique<vrnic::Server>(cfg));
    if (absl::Status st = servers.back()->start(); !st.ok()) {
      std::fprintf(
          stderr, "vrnicd: %s%s\n",
          devices.size() > 1 ? ("vrnic" + std::to_string(cfg.device_index) + ": ").c_str() : "",
          std::string(st.message()).c_str());
      return 1;
    }
    list.push_back(servers.back()->entry());
  }
  for (uint32_t d = 0; d < devices.size(); d++) {
    const vrnic::ServerConfig &cfg = devices[d];
    servers[d]->set_device_list(list);
    std::string port =
        cfg.udp ? "udp port " + cfg.udp_port.address + ":" + std::to_string(cfg.udp_port.udp_port)
        : cfg.dpdk
            ? "dpdk port " + cfg.dpdk_port.address + ":" + std::to_string(cfg.dpdk_port.udp_port)
            : "loop port";
    std::string pinned;
    for (int cpu : cfg.worker_cpus)
      pinned += (pinned.empty() ? " on CPUs " : ",") + std::to_string(cpu);
    std::fprintf(stderr, "vrnicd: vrnic%u ready on %s (%s, %u worker%s%s)\n", d,
                 cfg.socket_path.c_str(), port.c_str(), cfg.workers, cfg.workers == 1 ? "" : "s",
                 pinned.c_str());
  }
  // Device 0 is served on this thread, every other on one of its own.
  std::vector<std::thread> control;
  for (uint32_t d = 1; d < servers.size(); d++)
    control.emplace_back([&, d] { servers[d]->serve(g_stop); });
  servers[0]->serve(g_stop);
  for (std::thread &t : control) t.join();
  std::fprintf(stderr, "vrnicd: shutting down\n");
  servers.clear();
  return 0;
}
