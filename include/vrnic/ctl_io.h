// Sending and receiving control messages (header, body, descriptors) on a SOCK_SEQPACKET
// socket. Used by the provider, vrnicd and vrnicctl alike.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vrnic/ctl_protocol.h"

namespace vrnic::ctl {

struct Message {
  MsgHeader header{};
  uint8_t body[kMaxMessageBytes];
  std::vector<int> fds;  // received descriptors; the receiver owns them
  // Who sent it, as the kernel says (SCM_CREDENTIALS: a receiver with SO_PASSCRED gets the
  // sending process's own, whoever holds the socket), when it came with them.
  bool has_sender = false;
  ucred sender{};

  template <typename T>
  const T *as() const {
    return header.length >= sizeof(T) ? reinterpret_cast<const T *>(body) : nullptr;
  }
  void close_fds();
};

// Returns 0 or an errno. Retries EINTR.
int send_message(int sock, Op op, int32_t status, const void *body, size_t len,
                 const int *fds = nullptr, size_t nfds = 0);
// Returns 0, ECONNRESET when the peer closed, EPROTO on a malformed message, or an errno.
int recv_message(int sock, Message *msg);

// Event channels (a completion channel, the async event channel, an rdma_cm event channel)
// are a SOCK_SEQPACKET socketpair the client makes: it reads records from fds[0] and hands
// fds[1] to vrnicd, which writes each record with a per-call non-blocking send. A pipe's
// O_NONBLOCK lives in the file description the client shares, so a client could clear it and
// make vrnicd's write wait for ever (issue 28, rows 2 and 3); a send with MSG_DONTWAIT never
// waits, whatever the client sets. 0 or an errno.
int make_event_channel(int fds[2]);
// Writes one record without waiting; false when the channel is full (its reader is behind:
// the record is lost, as on a full queue) or gone.
inline bool send_event(int fd, const void *record, size_t len) {
  return ::send(fd, record, len, MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(len);
}

// Connects to vrnicd's socket; returns the socket or -errno.
int connect_daemon(const char *path);

// Asks the vrnicd listening on `path` for its devices; returns 0 or an errno (ENOENT,
// ECONNREFUSED: no vrnicd there).
int list_devices(const char *path, DeviceListResp *out);

}  // namespace vrnic::ctl
