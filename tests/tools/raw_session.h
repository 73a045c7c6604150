// The control protocol spoken directly, for the test tools that play a hostile or broken
// client (hostile, quota_fill): a connection to vrnicd, its Hello and a PD, rdma_cm channels.
// die() reports a setup failure as those tools do (setup_error=..., exit status 2).
// connect_to_nobody() is a CM connect vrnicd's CM rejects at once (daemon_test, ctl_fuzz).
#pragma once

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "vrnic/ctl_io.h"

[[noreturn]] inline void die(const char *what) {
  std::printf("setup_error=%s (%s)\n", what, std::strerror(errno));
  std::exit(2);
}

struct RawSession {
  int sock = -1;
  uint32_t pd = 0;
  int call(vrnic::ctl::Op op, const void *req, size_t len, void *resp, size_t resp_len,
           const int *fds = nullptr, size_t nfds = 0) {
    int err = vrnic::ctl::send_message(sock, op, 0, req, len, fds, nfds);
    auto m = std::make_unique<vrnic::ctl::Message>();
    if (!err) err = vrnic::ctl::recv_message(sock, m.get());
    if (!err) err = m->header.status;
    if (!err && resp_len) std::memcpy(resp, m->body, std::min<size_t>(resp_len, m->header.length));
    m->close_fds();
    return err;
  }
  // Hello and a PD: what registering memory needs.
  int open(const char *path) {
    sock = vrnic::ctl::connect_daemon(path);
    if (sock < 0) return -sock;
    int event_fds[2];
    if (int err = vrnic::ctl::make_event_channel(event_fds)) return err;
    vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
    auto resp = std::make_unique<vrnic::ctl::HelloResp>();
    int err = call(vrnic::ctl::Op::kHello, &hello, sizeof(hello), resp.get(), sizeof(*resp),
                   &event_fds[1], 1);
    ::close(event_fds[1]);
    if (err) return err;
    vrnic::ctl::HandleResp pdr{};
    err = call(vrnic::ctl::Op::kAllocPd, nullptr, 0, &pdr, sizeof(pdr));
    pd = pdr.handle;
    return err;
  }
  // A raw session on `path` with an rdma_cm event channel; the channel's handle (dies on error).
  uint32_t open_with_cm_channel(const char *path) {
    if (int err = open(path)) {
      errno = err;
      die("raw session");
    }
    int event_fds[2];
    if (vrnic::ctl::make_event_channel(event_fds)) die("event channel");
    vrnic::ctl::CreateChannelReq req{};
    vrnic::ctl::HandleResp ch{};
    if (int err = call(vrnic::ctl::Op::kCmCreateChannel, &req, sizeof(req), &ch, sizeof(ch),
                       &event_fds[1], 1)) {
      errno = err;
      die("CM channel");
    }
    ::close(event_fds[1]);
    return ch.handle;
  }
};

// An rdma_cm connect (of id, bound) to a loopback port nobody listens on: vrnicd's CM gets
// the REJ at once and posts REJECTED to the id's channel.
inline vrnic::ctl::CmConnectReq connect_to_nobody(uint32_t id) {
  vrnic::ctl::CmConnectReq conn{};
  conn.id = id;
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  std::memcpy(conn.dst.gid, loopback, 16);
  std::memcpy(conn.src.gid, loopback, 16);
  conn.dst.port = htons(1);
  conn.p.qp_num = 0x123;
  conn.p.retry_count = 1;
  return conn;
}
