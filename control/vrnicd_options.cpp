// vrnicd's command line with CLI11. The daemon's own options come first, with vrnic0's; each
// --device starts the next device, whose options follow it: argv is cut at every --device and
// each piece parsed by an App that has the device options (the first also the daemon's).
#include "vrnicd_options.h"

#include <arpa/inet.h>
#include <grp.h>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_split.h"
#include "cpu_list.h"
#include "metrics_server.h"
#include "vrnic/ctl_protocol.h"
#include "vrnic/shm_layout.h"
#include "vrnic/socket_path.h"

namespace vrnic {
namespace {

// A whole number in [lo, hi], or a ValidationError for `option` that says so with `what`.
unsigned long number_in(const std::string &option, const std::string &text, unsigned long lo,
                        unsigned long hi, const std::string &what) {
  char *end;
  errno = 0;
  unsigned long n = std::strtoul(text.c_str(), &end, 10);
  if (text.empty() || *end || errno || n < lo || n > hi || text[0] == '-')
    throw CLI::ValidationError(option, what);
  return n;
}

void add_device_options(CLI::App &app, ServerConfig &cfg) {
  const char *group = "Device options (vrnic0's; after --device, the next device's)";
  app.add_option_function<std::string>(
         "--workers",
         [&cfg](const std::string &v) {
           cfg.workers = uint32_t(number_in("--workers", v, 1, shm::kMaxWorkers,
                                            "a number from 1 to " +
                                                std::to_string(shm::kMaxWorkers)));
         },
         "dataplane worker threads (default 1); each QP runs on one (the\n"
         "least loaded when it is created), each has its own udp port or\n"
         "dpdk queue pair")
      ->type_name("N")
      ->group(group);
  app.add_option_function<std::string>(
         "--cpus",
         [&cfg](const std::string &v) {
           cpu_set_t allowed;
           CPU_ZERO(&allowed);
           if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
             throw CLI::ValidationError("--cpus", std::string("sched_getaffinity: ") +
                                                      std::strerror(errno));
           absl::StatusOr<std::vector<int>> cpus = parse_cpu_list(v, allowed);
           if (!cpus.ok()) throw CLI::ValidationError("--cpus", std::string(cpus.status().message()));
           cfg.worker_cpus = *cpus;
         },
         "pin the workers to these CPUs, worker i to the i-th (round\n"
         "robin), e.g. 1 or 2,3 or 4-7 (default: unpinned)")
      ->type_name("LIST")
      ->group(group);
  app.add_option_function<std::string>(
         "--udp",
         [&cfg](const std::string &v) {
           cfg.udp = true;
           cfg.udp_port.address = v;
         },
         "RoCEv2 over UDP on this IPv4 or IPv6 address (GID 0); without it\n"
         "vrnic0 has only the loop port (peers are local processes)")
      ->type_name("ADDR")
      ->group(group);
  app.add_option_function<std::string>(
         "--udp-port",
         [&cfg](const std::string &v) {
           uint16_t port = uint16_t(number_in("--udp-port", v, 1, 65535,
                                              "'" + v + "' is not a port number"));
           cfg.udp_port.udp_port = port;
           cfg.dpdk_port.udp_port = port;
         },
         "UDP port to listen on and send to (default 4791)")
      ->type_name("PORT")
      ->group(group);
  app.add_option_function<std::string>(
         "--udp-buffer",
         [&cfg](const std::string &v) {
           cfg.udp_port.socket_buffer = uint32_t(number_in(
               "--udp-buffer", v, 4096, 1ul << 30, "a number of bytes from 4096 to 1073741824"));
         },
         "each udp socket's receive and send buffer (default 33554432);\n"
         "without root the kernel caps it at net.core.rmem_max/wmem_max")
      ->type_name("BYTES")
      ->group(group);
  app.add_flag_callback(
         "--no-gso", [&cfg] { cfg.udp_port.gso = false; },
         "one sendmsg per packet (by default runs of equal-size packets to\n"
         "an IPv6 or loopback peer leave as one UDP GSO send)")
      ->group(group);
  app.add_flag_callback(
         "--no-host-addresses", [&cfg] { cfg.host_addresses = false; },
         "a loop-only device's GIDs: 127.0.0.1 alone (by default also the\n"
         "addresses of the host's interfaces that are up and not loopback,\n"
         "IPv6 link-local aside, as rxe on an interface has its addresses;\n"
         "they reach local processes only)")
      ->group(group);
  app.add_option_function<std::string>(
         "--dpdk",
         [&cfg](const std::string &v) {
           cfg.dpdk = true;
           cfg.dpdk_port.address = v;
         },
         "RoCEv2 on an Ethernet device driven by DPDK, with this IPv4 or\n"
         "IPv6 address (GID 0); the device and EAL options come from --eal")
      ->type_name("ADDR")
      ->group(group);
  app.add_option_function<std::string>(
         "--eal",
         [&cfg](const std::string &v) {
           for (absl::string_view word : absl::StrSplit(v, ' ', absl::SkipEmpty()))
             cfg.dpdk_port.eal_args.emplace_back(word);
         },
         "DPDK EAL arguments, split at spaces, e.g.\n"
         "'--no-huge -m 512 --no-pci --vdev net_af_xdp0,iface=eth1' (added\n"
         "unless given: --in-memory --iova-mode=va --no-telemetry\n"
         "--log-level=warning -l <current cpu>). EAL is set up once, by\n"
         "the first dpdk device's --eal: a later one's names its own\n"
         "device and repeats the other options or gives none")
      ->type_name("'ARGS'")
      ->group(group);
  app.add_flag_callback(
         "--no-direct-path", [&cfg] { cfg.direct_path = false; },
         "every work request goes through the workers (by default a client\n"
         "runs a WR between two QPs of its own process itself;\n"
         "VRNIC_DIRECT_PATH=0 does the same per process)")
      ->group(group);
  app.add_flag_callback(
         "--selective-repeat", [&cfg] { cfg.selective_repeat = true; },
         "a sequence NAK says which later packets this device holds, so\n"
         "that a vrnic peer resends only the missing ones (default: go back\n"
         "N), on QPs that did not agree per connection (rdma_cm does, by\n"
         "ECE); only where every RC peer is a vrnicd (14 and later): rxe and\n"
         "hardware NICs need the default")
      ->group(group);
  app.add_option_function<std::string>(
         "--faults",
         [&cfg](const std::string &v) {
           absl::StatusOr<FaultConfig> faults = FaultConfig::parse(v);
           if (!faults.ok())
             throw CLI::ValidationError("--faults", std::string(faults.status().message()));
           cfg.faults = *faults;
         },
         "inject faults on the wire port's receive path, e.g.\n"
         "loss=1,dup=1,reorder=5,corrupt=1,delay_us=100,seed=7 (percent);\n"
         "hold_op=N holds every frame of BTH opcode N behind the next one;\n"
         "drop_mad=A drops the first copy of each CM MAD of attribute A\n"
         "(21: DREQ), which the sender's CM timer sends again")
      ->type_name("SPEC")
      ->group(group);
}

void add_daemon_options(CLI::App &app, DaemonOptions *out) {
  const char *group = "Daemon options (before the first --device)";
  app.add_option("--socket", out->socket_path,
                 "control socket (default: $VRNIC_SOCKET, else\n"
                 "$XDG_RUNTIME_DIR/vrnicd.sock, else /tmp/vrnicd-<uid>/vrnicd.sock);\n"
                 "vrnic0's, vrnicN's is PATH.vrnicN. Mode 0600: only this user\n"
                 "(and root) may connect. Under systemd socket activation, the\n"
                 "socket systemd passes (LISTEN_FDS) instead")
      ->type_name("PATH")
      ->group(group);
  app.add_option_function<std::string>(
         "--socket-group",
         [out](const std::string &v) {
           const struct group *g = ::getgrnam(v.c_str());
           if (!g) throw CLI::ValidationError("--socket-group", "no group '" + v + "'");
           out->socket_group = g->gr_gid;
         },
         "mode 0660 and this group instead: a root vrnicd serving the group's\n"
         "users (each sees and changes only its own objects; faults and QP\n"
         "moves stay root's)")
      ->type_name("GROUP")
      ->group(group);
  app.add_option_function<std::string>(
         "--limits",
         [out](const std::string &v) {
           absl::StatusOr<UserLimits> l = UserLimits::parse(v);
           if (!l.ok()) throw CLI::ValidationError("--limits", std::string(l.status().message()));
           out->limits = *l;
         },
         "quotas per user and device, NAME=N,..., e.g. sessions=64,pds=256,\n"
         "mrs=4096,qps=1024,mr_bytes=1073741824. NAMEs: sessions, channels,\n"
         "pds, mrs, mws, cqs, qps, srqs, ahs, cm_ids, mappings, mcast, fds,\n"
         "mr_bytes; by default a quarter of each of the device's tables, of\n"
         "vrnicd's mappings and descriptors (0: that share), and the\n"
         "machine's RAM; each one's value: vrnicctl stats (limit_NAME).\n"
         "Past one, ENOMEM")
      ->type_name("SPEC")
      ->group(group);
  app.add_option("--metrics", out->metrics_address,
                 "serve Prometheus metrics (text exposition, GET /metrics) on this\n"
                 "address, e.g. 127.0.0.1:9464 or [::1]:9464; loopback only unless\n"
                 "--metrics-any-address")
      ->type_name("ADDR:PORT")
      ->group(group);
  app.add_flag("--metrics-any-address", out->metrics_any_address,
               "let --metrics listen on an address other than loopback (anyone\n"
               "who reaches it reads every counter)")
      ->group(group);
  app.add_flag("--metrics-qps", out->metrics_qps,
               "serve per-QP series too (vrnic_qp_*: every user's QPNs and\n"
               "PSNs, to anyone who reaches --metrics; off by default)")
      ->group(group);
  app.add_option_function<std::string>(
         "--exit-idle",
         [out](const std::string &v) {
           out->exit_idle_seconds = unsigned(
               number_in("--exit-idle", v, 1, 86400 * 365, "a number of seconds, 1 or more"));
         },
         "exit once no client has been connected for this many seconds\n"
         "(default: run until SIGINT or SIGTERM)")
      ->type_name("SECONDS")
      ->group(group);
  app.add_flag("--autostarted", out->autostarted,
               "say that a client library started this vrnicd (VRNIC_AUTOSTART);\n"
               "vrnicctl devices shows it")
      ->group(group);
  // Never parsed (argv is cut there): listed for --help.
  app.add_flag_callback("--device", [] {},
               "starts the next device (vrnic1, vrnic2, ... up to 8): a virtual NIC\n"
               "with its own port, addresses, GID table, workers and socket\n"
               "(PATH.vrnicN); the device options after it are its own. Each\n"
               "needs a wire port and a distinct address")
      ->group(group);
}

// A device's wire address and UDP port, comparable whatever way the address was written.
std::string wire_key(const ServerConfig &d) {
  const std::string &text = d.udp ? d.udp_port.address : d.dpdk_port.address;
  uint16_t port = d.udp ? d.udp_port.udp_port : d.dpdk_port.udp_port;
  unsigned char bytes[16] = {};
  if (inet_pton(AF_INET, text.c_str(), bytes) != 1) inet_pton(AF_INET6, text.c_str(), bytes);
  return std::string(reinterpret_cast<char *>(bytes), sizeof(bytes)) + std::to_string(port);
}

// Checks one device's options; returns an error message or "".
std::string check_device(const ServerConfig &d, uint32_t index) {
  if (d.udp && d.dpdk) return "one wire port per device: --udp or --dpdk, not both";
  if (!d.dpdk && !d.dpdk_port.eal_args.empty()) return "--eal is for the dpdk port (--dpdk ADDR)";
  if (!d.udp && d.udp_port.socket_buffer != UdpPortConfig{}.socket_buffer)
    return "--udp-buffer is for the udp port (--udp ADDR)";
  if (d.faults.any() && !d.udp && !d.dpdk) return "--faults needs a wire port (--udp or --dpdk)";
  if (index > 0 && !d.udp && !d.dpdk)
    return "vrnic" + std::to_string(index) + " needs a wire port (--udp or --dpdk)";
  return "";
}

// One device's or the daemon's App, as vrnicd's --help shows it.
void configure(CLI::App &app) {
  app.get_formatter()->column_width(34);
  app.set_help_flag("-h,--help", "print this help and exit");
}

int usage_error(const std::string &what) {
  std::fprintf(stderr, "vrnicd: %s\nvrnicd --help lists the options.\n", what.c_str());
  return 2;
}

}  // namespace

int parse_daemon_options(int argc, char **argv, DaemonOptions *out) {
  out->socket_path = default_socket_path();
  // argv cut at every --device; "--eal X" made "--eal=X" (an EAL argument list starts with a
  // dash, which CLI11 would take for the next option).
  std::vector<std::vector<std::string>> pieces(1);
  for (int i = 1; i < argc; i++) {
    std::string arg = argv[i];
    if (arg == "--device") {
      if (pieces.size() == ctl::kMaxDevices)
        return usage_error("at most " + std::to_string(ctl::kMaxDevices) + " devices");
      pieces.emplace_back();
    } else if (arg == "--eal" && i + 1 < argc) {
      pieces.back().push_back("--eal=" + std::string(argv[++i]));
    } else {
      pieces.back().push_back(arg);
    }
  }
  out->devices.assign(pieces.size(), ServerConfig{});
  for (size_t d = 0; d < pieces.size(); d++) {
    CLI::App app(d == 0 ? "vrnicd: the NIC. Runs until SIGINT or SIGTERM (or --exit-idle), "
                          "then exits 0\nafter removing its socket."
                        : "",
                 d == 0 ? "vrnicd" : "vrnicd ... --device");
    configure(app);
    if (d == 0) add_daemon_options(app, out);
    add_device_options(app, out->devices[d]);
    std::vector<const char *> args{"vrnicd"};
    for (const std::string &a : pieces[d]) args.push_back(a.c_str());
    try {
      app.parse(int(args.size()), args.data());
    } catch (const CLI::CallForHelp &) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError &e) {
      return usage_error((d ? "vrnic" + std::to_string(d) + ": " : std::string()) + e.what());
    }
  }
  if (!out->metrics_address.empty()) {
    absl::Status st = MetricsServer::check_address(out->metrics_address, out->metrics_any_address);
    if (!st.ok()) return usage_error(std::string(st.message()));
  }
  std::vector<std::string> wires;
  for (uint32_t d = 0; d < out->devices.size(); d++) {
    ServerConfig &cfg = out->devices[d];
    if (std::string err = check_device(cfg, d); !err.empty()) return usage_error(err);
    if (cfg.udp || cfg.dpdk) {
      std::string key = wire_key(cfg);
      if (std::find(wires.begin(), wires.end(), key) != wires.end())
        return usage_error("vrnic" + std::to_string(d) +
                           ": another device already has this address and port");
      wires.push_back(key);
    }
    cfg.device_index = d;
    cfg.dpdk_port.device = d;
    cfg.socket_path = device_socket_path(out->socket_path, d);
    cfg.socket_group = out->socket_group;
    cfg.limits = out->limits;
  }
  return -1;
}

}  // namespace vrnic
