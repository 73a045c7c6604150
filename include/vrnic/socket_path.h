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

}  // namespace vrnic
