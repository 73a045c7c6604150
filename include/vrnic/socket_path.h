// Where vrnicd listens and clients connect: --socket, else $VRNIC_SOCKET, else
// $XDG_RUNTIME_DIR/vrnicd.sock, else <private_socket_dir()>/vrnicd.sock; a client with none
// of its user's there uses the host's (/run/vrnic/vrnicd.sock, systemd). The last is in a
// directory of the user's own (0700) rather than in /tmp itself, where another user could
// take the name first (issue 17, row 13); clients also check who the daemon they reach is
// (ctl::connect_daemon).
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace vrnic {

// A directory of this user's own (by effective uid, as SO_PEERCRED and vrnicd's checks see
// users) that no one else may enter: the only kind that holds a private vrnicd's socket.
inline bool is_private_dir(const std::string &dir) {
  struct stat st;
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         !(st.st_mode & 077);
}

// The private directory of the last default: /tmp/vrnicd-<euid>, made here mode 0700 if it
// is not there. In /tmp another user can take that name first (issue 52, row 10); then the
// user's directory is /tmp/vrnicd-<euid>.XXXXXX, one that only the user can have made (an
// owner cannot be faked): the first such in name order, made with mkdtemp if there is none,
// so that every process of the user -- vrnicd, auto-start, clients -- finds the same one.
inline std::string first_private_socket_dir() {
  return "/tmp/vrnicd-" + std::to_string(::geteuid());
}
inline std::string private_socket_dir() {
  const std::string primary = first_private_socket_dir();
  if (::mkdir(primary.c_str(), 0700) == 0 || is_private_dir(primary)) return primary;
  auto first_own = [&] {
    std::vector<std::string> own;
    if (DIR *d = ::opendir("/tmp")) {
      const std::string prefix = primary.substr(5) + ".";
      while (const dirent *e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0 &&
            is_private_dir("/tmp/" + name))
          own.push_back("/tmp/" + name);
      }
      ::closedir(d);
    }
    std::sort(own.begin(), own.end());
    return own.empty() ? std::string() : own.front();
  };
  std::string dir = first_own();
  if (!dir.empty()) return dir;
  std::string made = primary + ".XXXXXX";
  if (!::mkdtemp(made.data())) return primary;  // (vrnicd refuses it, naming its owner)
  dir = first_own();  // another process of the user may have made one at the same time
  if (dir != made) ::rmdir(made.c_str());
  return dir.empty() ? primary : dir;
}

inline std::string default_socket_path() {
  if (const char *env = std::getenv("VRNIC_SOCKET"); env && *env) return env;
  if (const char *dir = std::getenv("XDG_RUNTIME_DIR"); dir && *dir)
    return std::string(dir) + "/vrnicd.sock";
  return private_socket_dir() + "/vrnicd.sock";
}

// The host's vrnicd, as vrnicd.socket (systemd) makes it.
inline constexpr const char *kHostSocketPath = "/run/vrnic/vrnicd.sock";

// Where a client looks: $VRNIC_SOCKET; else the user's own vrnicd's socket if there is one;
// else the host's if there is one; else the user's own (where auto-start puts a vrnicd).
inline std::string client_socket_path() {
  const std::string own = default_socket_path();
  struct stat st;
  if (std::getenv("VRNIC_SOCKET") || ::stat(own.c_str(), &st) == 0) return own;
  if (::stat(kHostSocketPath, &st) == 0 && S_ISSOCK(st.st_mode)) return kHostSocketPath;
  return own;
}

// The name a device gives as ibv_device.dev_name, and of the node vrnicd makes for it in
// /dev/infiniband (UCX uses a verbs device only if that node opens): vrnic_ and a hash of the
// device's socket path, so that every vrnicd's devices have names of their own that never
// meet a kernel device's (uverbsN).
inline std::string device_node_name(const std::string &device_socket) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : device_socket) h = (h ^ c) * 16777619u;
  char name[24];
  std::snprintf(name, sizeof(name), "vrnic_%08x", h);
  return name;
}

// Device `index` of a vrnicd listening on `base`: device 0 on base itself (where clients look
// first), device N on base.vrnicN.
inline std::string device_socket_path(const std::string &base, uint32_t index) {
  return index == 0 ? base : base + ".vrnic" + std::to_string(index);
}

}  // namespace vrnic
