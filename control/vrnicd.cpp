// vrnicd: the NIC. Runs in the foreground until SIGINT or SIGTERM (or --exit-idle), then
// exits 0 after removing its socket and releasing its shared memory.
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "metrics_server.h"
#include "server.h"
#include "vrnic/socket_path.h"
#include "vrnicd_options.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop = true;
}

// systemd's socket activation (sd_listen_fds(3)): the first passed fd, 3, when LISTEN_PID is
// us and LISTEN_FDS says one or more; -1 otherwise. Read once and cleared, so that no child
// takes them for its own.
int systemd_listen_fd() {
  const char *pid = std::getenv("LISTEN_PID"), *fds = std::getenv("LISTEN_FDS");
  const bool ours = pid && fds && std::strtol(pid, nullptr, 10) == ::getpid() &&
                    std::strtol(fds, nullptr, 10) >= 1;
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  return ours ? 3 : -1;
}

// The path of a passed socket, which must be a listening AF_UNIX SOCK_SEQPACKET one with a
// name (the unit's ListenSequentialPacket=); "" otherwise.
std::string passed_socket_path(int fd) {
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  int type = 0, listening = 0;
  socklen_t ilen = sizeof(int);
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) < 0 ||
      addr.sun_family != AF_UNIX || !addr.sun_path[0] ||
      ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ilen) < 0 || type != SOCK_SEQPACKET ||
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen) < 0 || !listening)
    return "";
  return std::string(addr.sun_path, strnlen(addr.sun_path, sizeof(addr.sun_path)));
}

}  // namespace

int main(int argc, char **argv) {
  vrnic::DaemonOptions opts;
  if (int status = vrnic::parse_daemon_options(argc, argv, &opts); status >= 0) return status;
  std::vector<vrnic::ServerConfig> &devices = opts.devices;
  if (int fd = systemd_listen_fd(); fd >= 0) {
    const std::string path = passed_socket_path(fd);
    if (path.empty()) {
      std::fprintf(stderr, "vrnicd: systemd passed fd 3, which is no listening AF_UNIX "
                           "SOCK_SEQPACKET socket with a path (ListenSequentialPacket=PATH)\n");
      return 1;
    }
    devices[0].inherited_listen_fd = fd;
    for (uint32_t d = 0; d < devices.size(); d++)
      devices[d].socket_path = vrnic::device_socket_path(path, d);
  }
  devices[0].exit_idle_seconds = opts.exit_idle_seconds;
  devices[0].autostarted = opts.autostarted;
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
  vrnic::MetricsServer metrics;
  if (!opts.metrics_address.empty()) {
    std::vector<vrnic::MetricsServer::Device> served;
    for (const vrnic::ctl::DeviceListEntry &e : list) served.push_back({e.name, e.socket});
    if (absl::Status st = metrics.start(opts.metrics_address, opts.metrics_any_address,
                                                opts.metrics_qps, served);
        !st.ok()) {
      std::fprintf(stderr, "vrnicd: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    std::fprintf(stderr, "vrnicd: metrics on http://%s/metrics\n", metrics.where().c_str());
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
  g_stop = true;  // device 0 stopped on --exit-idle: so do the others
  for (std::thread &t : control) t.join();
  std::fprintf(stderr, "vrnicd: shutting down\n");
  servers.clear();
  return 0;
}
