// vrnicd's command line: what the daemon as a whole and each of its devices are started with,
// parsed with CLI11 (one place for each option, its value and its help).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "quota.h"
#include "server_config.h"

namespace vrnic {

struct DaemonOptions {
  std::string socket_path;       // device 0's; device N's is device_socket_path(socket_path, N)
  gid_t socket_group = gid_t(-1);
  UserLimits limits;
  std::vector<ServerConfig> devices;  // vrnic0, vrnic1, ...: complete, checked
  // Prometheus text exposition on this loopback address ("" : none), e.g. 127.0.0.1:9464.
  std::string metrics_address;
  bool metrics_any_address = false;  // --metrics may name an address other than loopback
  bool metrics_qps = false;          // --metrics serves per-QP series too
  // Exit once no client has been connected for this long (0: never). Auto-started daemons.
  unsigned exit_idle_seconds = 0;
  bool autostarted = false;  // started by a client library (vrnicctl devices says so)
};

// Parses argv. Returns -1 when vrnicd should go on, else the status to exit with at once:
// 0 after --help (printed on stdout), 2 after a usage error (printed on stderr, naming the
// option and what it takes).
int parse_daemon_options(int argc, char **argv, DaemonOptions *out);

}  // namespace vrnic
