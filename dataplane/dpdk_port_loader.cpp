// Loads the dpdk port module (vrnic_port_dpdk.so) on demand and opens a port through its
// entry point, so that vrnicd runs its other ports without DPDK's libraries (dpdk_port.h).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "dpdk_port.h"
#include "vrnic/install_paths.h"

namespace vrnic {
namespace {

std::string module_path() {
  if (const char *env = std::getenv("VRNIC_DPDK_MODULE"); env && *env) return env;
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "vrnic_port_dpdk.so";
  std::string dir(exe, size_t(n));
  dir.resize(dir.rfind('/') + 1);
  // In the build tree the module sits in dataplane/dpdk/, next to control/ where vrnicd is;
  // installed, in vrnic's library directory.
  const std::string installed = VRNIC_LIB_FROM_BIN "/vrnic_port_dpdk.so";
  for (const std::string &candidate :
       {std::string("../dataplane/dpdk/vrnic_port_dpdk.so"), installed}) {
    std::string path = candidate[0] == '/' ? candidate : dir + candidate;
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return dir + "vrnic_port_dpdk.so";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Port>> open_dpdk_port(const DpdkPortConfig &cfg, PacketPool &pool) {
  std::string path = module_path();
  // Kept loaded for the life of the process: DPDK cannot be torn down and set up again.
  void *module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!module)
    return absl::FailedPreconditionError(
        "the dpdk port needs its module (built when DPDK's libdpdk-dev is installed): " +
        std::string(dlerror()));
  auto open = reinterpret_cast<DpdkPortOpenFn>(::dlsym(module, kDpdkPortOpenSymbol));
  if (!open) return absl::InternalError(path + " has no " + kDpdkPortOpenSymbol);
  std::string error;
  std::unique_ptr<Port> port(open(&cfg, &pool, &error));
  if (!port) return absl::InvalidArgumentError("dpdk port: " + error);
  return port;
}

}  // namespace vrnic
