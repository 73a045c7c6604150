// The EAL, set up once per process, and what devices' EAL arguments say (eal.h).
#include "eal.h"

#include <net/if.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "dataplane/ethernet.h"

namespace vrnic::dpdk {
namespace {

// The value of KEY= in the --vdev arguments of a DRIVER device ("net_memif0,bsize=8192"),
// "" when not given.
std::string vdev_arg(const std::vector<std::string> &eal_args, const char *driver,
                     const std::string &key) {
  for (const std::string &arg : eal_args) {
    if (arg.rfind(driver, 0) != 0) continue;
    for (size_t at = arg.find(','); at != std::string::npos; at = arg.find(',', at + 1)) {
      if (arg.compare(at + 1, key.size() + 1, key + "=") != 0) continue;
      const size_t from = at + key.size() + 2, end = arg.find(',', from);
      return arg.substr(from, end == std::string::npos ? std::string::npos : end - from);
    }
  }
  return {};
}

bool has_arg(const std::vector<std::string> &args, const char *prefix) {
  for (const std::string &a : args)
    if (a.rfind(prefix, 0) == 0) return true;
  return false;
}

// The EAL is set up once per process, by the first dpdk device's arguments: DPDK cannot be set
// up twice. A later device hot-plugs the devices its arguments name; its other arguments are
// the first's or none (memory, cores and prefix are the process's, not a device's).
std::mutex g_eal_mu;
bool g_eal_done = false;
std::vector<std::string> g_eal_rest;  // the first device's arguments other than devices

}  // namespace

std::string kernel_interface(const std::vector<std::string> &eal_args) {
  std::string iface = vdev_arg(eal_args, "net_af_packet", "iface");
  return iface.empty() ? vdev_arg(eal_args, "net_af_xdp", "iface") : iface;
}

// memif carries a frame in one of its buffers (bsize=, 2048 bytes unless given; both ends must
// give the same) or, larger, in a chain of them -- which DPDK 22.11's memif corrupts when its
// ring is nearly full (it fills a slot it does not own with a chained frame's second buffer,
// then backs out): its link MTU is what one buffer holds, not the 1500 it reports.
uint16_t memif_mtu(const std::vector<std::string> &eal_args) {
  const std::string bsize = vdev_arg(eal_args, "net_memif", "bsize");
  const unsigned long bytes = bsize.empty() ? 2048 : std::strtoul(bsize.c_str(), nullptr, 0);
  return uint16_t(std::clamp<unsigned long>(bytes, 1280 + kEthHeaderBytes, 9216) - kEthHeaderBytes);
}

bool kernel_link_running(const std::string &iface) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  ifreq req{};
  std::strncpy(req.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  bool running = ioctl(fd, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_RUNNING);
  ::close(fd);
  return running;
}

EalArgs split_eal_args(const std::vector<std::string> &args) {
  EalArgs out;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string &a = args[i];
    if ((a == "--vdev" || a == "-a" || a == "--allow") && i + 1 < args.size()) {
      out.devices.push_back(args[++i]);
    } else if (a.rfind("--vdev=", 0) == 0 || a.rfind("--allow=", 0) == 0) {
      out.devices.push_back(a.substr(a.find('=') + 1));
    } else if (a.size() > 2 && a.rfind("-a", 0) == 0) {
      out.devices.push_back(a.substr(2));
    } else {
      out.rest.push_back(a);
    }
  }
  return out;
}

bool init_eal(const std::vector<std::string> &user_args, std::string *error) {
  std::lock_guard<std::mutex> lock(g_eal_mu);
  EalArgs split = split_eal_args(user_args);
  if (g_eal_done) {
    if (!split.rest.empty() && split.rest != g_eal_rest) {
      *error =
          "EAL arguments other than --vdev and -a must be the first dpdk device's, or none "
          "(DPDK's EAL is set up once per process, by that device's --eal)";
      return false;
    }
    for (const std::string &spec : split.devices) {
      // -EEXIST: the first device's arguments had it (which device takes it is checked next).
      if (int rc = rte_dev_probe(spec.c_str()); rc != 0 && rc != -EEXIST) {
        *error = "cannot add device " + spec + " (rte_dev_probe: " + rte_strerror(-rc) + ")";
        return false;
      }
    }
    return true;
  }
  std::vector<std::string> args{"vrnicd"};
  // Several vrnicd on one host must not share DPDK's runtime files: unless the user names a
  // prefix, keep none (in-memory mode; without hugepages, which it does not combine with, no
  // shared configuration).
  if (!has_arg(user_args, "--file-prefix") && !has_arg(user_args, "--in-memory") &&
      !has_arg(user_args, "--no-shconf"))
    args.push_back(has_arg(user_args, "--no-huge") ? "--no-shconf" : "--in-memory");
  if (!has_arg(user_args, "--iova-mode")) args.push_back("--iova-mode=va");
  if (!has_arg(user_args, "--no-telemetry") && !has_arg(user_args, "--telemetry"))
    args.push_back("--no-telemetry");
  if (!has_arg(user_args, "--log-level")) args.push_back("--log-level=warning");
  if (!has_arg(user_args, "-l") && !has_arg(user_args, "-c") && !has_arg(user_args, "--lcores")) {
    // One lcore: the worker is vrnic's own thread, registered with DPDK when it first polls.
    args.push_back("-l");
    args.push_back(std::to_string(sched_getcpu() < 0 ? 0 : sched_getcpu()));
  }
  args.insert(args.end(), user_args.begin(), user_args.end());
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // rte_eal_init pins the calling thread to its main lcore; vrnicd's threads (created after
  // this, inheriting it) must keep running on any CPU.
  cpu_set_t cpus;
  bool have_cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0;
  int rc = rte_eal_init(int(argv.size() - 1), argv.data());
  if (have_cpus) sched_setaffinity(0, sizeof(cpus), &cpus);
  if (rc < 0) {
    *error = std::string("rte_eal_init: ") + rte_strerror(rte_errno);
    return false;
  }
  g_eal_done = true;
  g_eal_rest = std::move(split.rest);
  return true;
}

}  // namespace vrnic::dpdk
