// Sending and receiving control messages (header, body, descriptors) on a SOCK_SEQPACKET
// socket. Used by the provider, vrnicd and vrnicctl alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vrnic/ctl_protocol.h"

namespace vrnic::ctl {

struct Message {
  MsgHeader header{};
  uint8_t body[kMaxMessageBytes];
  std::vector<int> fds;  // received descriptors; the receiver owns them

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

// Connects to vrnicd's socket; returns the socket or -errno.
int connect_daemon(const char *path);

// Asks the vrnicd listening on `path` for its devices; returns 0 or an errno (ENOENT,
// ECONNREFUSED: no vrnicd there).
int list_devices(const char *path, DeviceListResp *out);

}  // namespace vrnic::ctl
