// The control protocol's I/O, shared by vrnicd, vrnicctl and the provider: messages with
// their descriptors over the Unix socket, and connecting to a vrnicd (vrnic/ctl_io.h).
#include "vrnic/ctl_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace vrnic::ctl {

void Message::close_fds() {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

int send_message(int sock, Op op, int32_t status, const void *body, size_t len, const int *fds,
                 size_t nfds) {
  if (len > kMaxMessageBytes || nfds > kMaxFdsPerMessage) return EMSGSIZE;
  MsgHeader hdr{kMagic, uint16_t(op), uint16_t(nfds), uint32_t(len), status};
  iovec iov[2] = {{&hdr, sizeof(hdr)}, {const_cast<void *>(body), len}};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = len ? 2 : 1;
  if (nfds) {
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n >= 0) return size_t(n) == sizeof(hdr) + len ? 0 : EPROTO;
    if (errno != EINTR) return errno;
  }
}

int recv_message(int sock, Message *msg) {
  msg->fds.clear();
  msg->has_sender = false;
  iovec iov[2] = {{&msg->header, sizeof(msg->header)}, {msg->body, sizeof(msg->body)}};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage) + CMSG_SPACE(sizeof(ucred))];
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = 2;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof(cbuf);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno == ECONNRESET ? ECONNRESET : errno;
  if (n == 0) return ECONNRESET;
  for (cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
        c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      std::memcpy(&msg->sender, CMSG_DATA(c), sizeof(ucred));
      msg->has_sender = true;
      continue;
    }
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      msg->fds.push_back(fd);
    }
  }
  if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || size_t(n) < sizeof(MsgHeader) ||
      msg->header.magic != kMagic || msg->header.length != size_t(n) - sizeof(MsgHeader) ||
      msg->header.nfds != msg->fds.size()) {
    msg->close_fds();
    return EPROTO;
  }
  return 0;
}

int connect_daemon(const char *path) {
  sockaddr_un addr{};
  if (std::strlen(path) >= sizeof(addr.sun_path)) return -ENAMETOOLONG;
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path);
  if (::connect(s, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    ::close(s);
    return -err;
  }
  // Only a daemon of our own user or root may see the memory we register: anyone could have
  // bound a socket at the path first (issue 17, row 13).
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
      (cred.uid != ::geteuid() && cred.uid != 0)) {
    std::fprintf(stderr,
                 "vrnic: %s is served by uid %u, neither you (uid %u) nor root: not using it\n",
                 path, unsigned(cred.uid), unsigned(::geteuid()));
    ::close(s);
    return -EACCES;
  }
  return s;
}

int list_devices(const char *path, DeviceListResp *out) {
  int sock = connect_daemon(path);
  if (sock < 0) return -sock;
  auto m = std::make_unique<Message>();
  int err = send_message(sock, Op::kListDevices, 0, nullptr, 0);
  if (!err) err = recv_message(sock, m.get());
  ::close(sock);
  if (!err) err = m->header.status;
  m->close_fds();
  if (err) return err;
  const auto *r = m->as<DeviceListResp>();
  if (!r || r->count == 0 || r->count > kMaxDevices) return EPROTO;
  *out = *r;
  for (uint32_t i = 0; i < out->count; i++) {
    out->devices[i].name[sizeof(out->devices[i].name) - 1] = 0;
    out->devices[i].socket[sizeof(out->devices[i].socket) - 1] = 0;
  }
  return 0;
}

int make_event_channel(int fds[2]) {
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return errno;
  // Room for as many records as a pipe held (the default send buffer takes ~280): a burst of
  // events from many CQs on one channel must not be lost while the reader wakes. Capped by
  // net.core.wmem_max; a smaller buffer only loses records sooner.
  int bytes = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  return 0;
}

}  // namespace vrnic::ctl
