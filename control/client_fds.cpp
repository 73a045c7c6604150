// Descriptors vrnicd takes from clients, checked for what they are (client_fds.h).
#include "client_fds.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <string_view>

namespace vrnic {

// A client's /proc/<pid>/mem, and nothing else: vrnicd's workers read and write it in place
// of process_vm_readv/writev, so it must be a file that answers at once (not a pipe, a
// socket or a FUSE file the client serves). Whose memory it is does not matter: the client
// opened it with its own rights. A procfs file named mem in a directory named by a number
// is one (no one can make files in procfs). Where that procfs is mounted does not matter: a
// client in a mount namespace or chroot of its own (a container, `ip netns exec`) has a proc
// mount vrnicd's root does not contain, and the link then reads ".../root/proc/<pid>/mem".
bool is_proc_mem(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) < 0 || fs.f_type != PROC_SUPER_MAGIC) return false;
  char link[64], target[PATH_MAX];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = 0;
  std::string_view path(target, size_t(n));
  if (!path.ends_with("/mem")) return false;
  path.remove_suffix(4);
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash + 1 == path.size()) return false;
  for (char c : path.substr(slash + 1))
    if (c < '0' || c > '9') return false;
  return true;
}


int take_event_channel(int fd, uid_t uid) {
  struct stat st;
  if (::fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode)) return -EINVAL;
  int domain = 0, type = 0;
  socklen_t len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 || domain != AF_UNIX) return -EINVAL;
  len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET) return -EINVAL;
  // A socketpair carries its maker's credentials on both ends; an unconnected socket has
  // none (pid 0), a connection to a service has the service's.
  ucred cred{};
  len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid == 0 ||
      cred.uid != uid)
    return -EINVAL;
  int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  return copy < 0 ? -errno : copy;
}

}  // namespace vrnic
