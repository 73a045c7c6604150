// Where vrnicd listens and clients connect: --socket, else $VRNIC_SOCKET, else
// $XDG_RUNTIME_DIR/vrnicd.sock, else /tmp/vrnicd-<uid>.sock.
#pragma once

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace vrnic {

inline std::string default_socket_path() {
  if (const char *env = std::getenv("VRNIC_SOCKET"); env && *env) return env;
  if (const char *dir = std::getenv("XDG_RUNTIME_DIR"); dir && *dir)
    return std::string(dir) + "/vrnicd.sock";
  return "/tmp/vrnicd-" + std::to_string(getuid()) + ".sock";
}

// Device `index` of a vrnicd listening on `base`: device 0 on base itself (where clients look
// first), device N on base.vrnicN.
inline std::string device_socket_path(const std::string &base, uint32_t index) {
  return index == 0 ? base : base + ".vrnic" + std::to_string(index);
}

}  // namespace vrnic
