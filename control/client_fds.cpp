// Descriptors vrnicd takes from clients, checked for what they are (client_fds.h).
#include "client_fds.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
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

uint64_t socket_inode(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? uint64_t(st.st_ino) : 0;
}

// One question to sock_diag: "the AF_UNIX socket with this inode: who is its peer?" The
// answer comes from the kernel's own tables, so a client cannot name a session it does not
// hold a socket of: it must pass the fd itself, and fstat says which socket that is.
uint64_t unix_peer_inode(int fd) {
  const uint64_t ino = socket_inode(fd);
  if (!ino) return 0;
  int domain = 0;
  socklen_t len = sizeof(domain);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 || domain != AF_UNIX) return 0;
  int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return 0;
  struct {
    nlmsghdr hdr;
    unix_diag_req req;
  } ask{};
  ask.hdr.nlmsg_len = sizeof(ask);
  ask.hdr.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.hdr.nlmsg_flags = NLM_F_REQUEST;
  ask.req.sdiag_family = AF_UNIX;
  ask.req.udiag_states = ~0u;
  ask.req.udiag_ino = uint32_t(ino);
  ask.req.udiag_show = UDIAG_SHOW_PEER;
  ask.req.udiag_cookie[0] = ask.req.udiag_cookie[1] = ~0u;  // INET_DIAG_NOCOOKIE: any
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  uint64_t peer = 0;
  alignas(nlmsghdr) char buf[1024];
  ssize_t n = -1;
  if (::sendto(nl, &ask, sizeof(ask), 0, reinterpret_cast<sockaddr *>(&kernel),
               sizeof(kernel)) == ssize_t(sizeof(ask)))
    n = ::recv(nl, buf, sizeof(buf), 0);
  ::close(nl);
  auto *h = reinterpret_cast<nlmsghdr *>(buf);
  if (n <= 0 || !NLMSG_OK(h, size_t(n)) || h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
      h->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg)))
    return 0;
  auto *msg = static_cast<unix_diag_msg *>(NLMSG_DATA(h));
  if (msg->udiag_ino != uint32_t(ino)) return 0;
  int attrs_len = int(h->nlmsg_len - NLMSG_LENGTH(sizeof(*msg)));
  for (auto *a = reinterpret_cast<rtattr *>(msg + 1); RTA_OK(a, attrs_len);
       a = RTA_NEXT(a, attrs_len))
    if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(uint32_t))
      peer = *static_cast<uint32_t *>(RTA_DATA(a));
  return peer;
}

}  // namespace vrnic
