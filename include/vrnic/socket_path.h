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
// owner cannot be faked), made with mkdtemp if there is none. Every process of the user --
// vrnicd, auto-start, clients -- chooses the same: of the user's own directories (the first
// choice, then the siblings by name), the first with vrnicd's socket in it, else the first.
inline std::string first_private_socket_dir() {
  return "/tmp/vrnicd-" + std::to_string(::geteuid());
}
// Whether `dir` is one of the names private_socket_dir() chooses among.
inline bool is_private_socket_dir_name(const std::string &dir) {
  const std::string first = first_private_socket_dir();
  return dir == first || (dir.size() == first.size() + 7 &&
                          dir.compare(0, first.size(), first) == 0 && dir[first.size()] == '.');
}
inline std::string private_socket_dir() {
  const std::string primary = first_private_socket_dir();
  // Ours, in order: the first choice, then its private siblings by name.
  auto own_dirs = [&] {
    std::vector<std::string> own;
    if (is_private_dir(primary)) own.push_back(primary);
    std::vector<std::string> siblings;
    if (DIR *d = ::opendir("/tmp")) {
      while (const dirent *e = ::readdir(d)) {
        const std::string path = std::string("/tmp/") + e->d_name;
        if (path != primary && is_private_socket_dir_name(path) && is_private_dir(path))
          siblings.push_back(path);
      }
      ::closedir(d);
    }
    std::sort(siblings.begin(), siblings.end());
    own.insert(own.end(), siblings.begin(), siblings.end());
    return own;
  };
  // The one whose vrnicd is there, if any: the first choice may come back (its squatter
  // removed it) while the user's vrnicd still listens in a sibling.
  auto with_socket = [](const std::vector<std::string> &dirs) {
    for (const std::string &d : dirs) {
      struct stat st;
      if (::lstat((d + "/vrnicd.sock").c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return d;
    }
    return std::string();
  };
  std::vector<std::string> own = own_dirs();
  if (std::string d = with_socket(own); !d.empty()) return d;
  if (!own.empty()) return own.front();
  if (::mkdir(primary.c_str(), 0700) == 0 || is_private_dir(primary)) return primary;
  std::string made = primary + ".XXXXXX";
  if (!::mkdtemp(made.data())) return primary;  // (vrnicd refuses it, naming its owner)
  own = own_dirs();  // another process of the user may have made one at the same time
  const std::string chosen = own.empty() ? primary : own.front();
  if (chosen != made) ::rmdir(made.c_str());
  return chosen;
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
