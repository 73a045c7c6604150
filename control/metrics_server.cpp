// The /metrics endpoint (metrics_server.h): a minimal HTTP/1.0 server, one request per
// connection, the connections served side by side (a scrape every few seconds is its load).
#include "metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "daemon_view.h"
#include "vrnic/clock.h"
#include "vrnic/ctl_io.h"

namespace vrnic {
namespace {

// "a.b.c.d:PORT" or "[v6]:PORT" into a socket address; false when it is neither.
bool parse_address(const std::string &text, sockaddr_storage *out, socklen_t *len) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = text.substr(0, colon), port_text = text.substr(colon + 1);
  char *end;
  const unsigned long port = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end || port > 65535) return false;
  *out = {};
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto *a = reinterpret_cast<sockaddr_in6 *>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(uint16_t(port));
    *len = sizeof(*a);
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a->sin6_addr) == 1;
  }
  auto *a = reinterpret_cast<sockaddr_in *>(out);
  a->sin_family = AF_INET;
  a->sin_port = htons(uint16_t(port));
  *len = sizeof(*a);
  return inet_pton(AF_INET, host.c_str(), &a->sin_addr) == 1;
}

bool is_loopback(const sockaddr_storage &a) {
  if (a.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in &>(a).sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6 &>(a).sin6_addr);
}

}  // namespace

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

absl::Status MetricsServer::check_address(const std::string &address, bool any_address) {
  sockaddr_storage addr;
  socklen_t len;
  if (!parse_address(address, &addr, &len))
    return absl::InvalidArgumentError("--metrics " + address +
                                      ": want IPv4:PORT or [IPv6]:PORT, e.g. 127.0.0.1:9464");
  if (!any_address && !is_loopback(addr))
    return absl::InvalidArgumentError("--metrics " + address +
                                      ": not a loopback address (--metrics-any-address allows it)");
  return absl::OkStatus();
}

absl::Status MetricsServer::start(const std::string &address, bool any_address, bool qps,
                                  std::vector<Device> devices) {
  if (absl::Status st = check_address(address, any_address); !st.ok()) return st;
  sockaddr_storage addr;
  socklen_t len;
  parse_address(address, &addr, &len);
  listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (listen_fd_ < 0 || ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      ::bind(listen_fd_, reinterpret_cast<sockaddr *>(&addr), len) < 0 ||
      ::listen(listen_fd_, 16) < 0)
    return absl::ErrnoToStatus(errno, "--metrics " + address);
  devices_ = std::move(devices);
  qps_ = qps;
  where_ = address;
  thread_ = std::thread([this] { serve(); });
  return absl::OkStatus();
}

// Connections are served side by side, each against a deadline of its own from its accept:
// one that sends its request a byte at a time, or never reads its answer, costs only its own
// time (issue 52, row 5: one such kept every scrape waiting). Past kMaxConnections the oldest
// still sending its request goes.
void MetricsServer::serve() {
  struct Connection {
    int fd;
    uint64_t deadline_ms;
    std::string in, out;  // the request head so far; the answer not yet sent
    size_t sent = 0;
  };
  std::vector<Connection> conns;
  auto drop = [&](size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + long(i));
  };
  std::vector<pollfd> pfds;
  uint64_t accept_paused_until_ms = 0;  // out of descriptors: the listening socket rests
  while (!stop_.load()) {
    const bool accepting = monotonic_ns() / 1'000'000 >= accept_paused_until_ms;
    pfds.assign(1, {accepting ? listen_fd_ : -1, POLLIN, 0});
    for (const Connection &c : conns)
      pfds.push_back({c.fd, short(c.out.empty() ? POLLIN : POLLOUT), 0});
    ::poll(pfds.data(), pfds.size(), 100);
    const uint64_t now = monotonic_ns() / 1'000'000;
    for (size_t i = conns.size(); i-- > 0;) {
      Connection &c = conns[i];
      const short ready = pfds[i + 1].revents;
      if (c.out.empty() && (ready & (POLLIN | POLLHUP | POLLERR))) {
        char buf[1024];
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && errno == EAGAIN)) {
          drop(i);
          continue;
        }
        if (n > 0) c.in.append(buf, size_t(n));
        if (c.in.find("\r\n\r\n") != std::string::npos || c.in.size() >= kMaxHead) c.out = answer(c.in);
      }
      if (!c.out.empty() && (ready & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent,
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) c.sent += size_t(n);
        if ((n < 0 && errno != EAGAIN) || c.sent == c.out.size()) {
          drop(i);
          continue;
        }
      }
      if (now >= c.deadline_ms) drop(i);
    }
    if (!(pfds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until_ms = now + 100;
      continue;
    }
    // Full: the oldest still sending its request goes (one being answered stays); if all are
    // being answered, the new one waits for none of them.
    if (conns.size() >= kMaxConnections) {
      auto idle = std::find_if(conns.begin(), conns.end(),
                               [](const Connection &c) { return c.out.empty(); });
      if (idle == conns.end()) {
        ::close(fd);
        continue;
      }
      drop(size_t(idle - conns.begin()));
    }
    conns.push_back({fd, now + kConnectionMs, {}, {}});
  }
  for (const Connection &c : conns) ::close(c.fd);
}

// The answer to a request head: GET /metrics; anything else is 404 or 405.
std::string MetricsServer::answer(const std::string &head) {
  const std::string line = head.substr(0, head.find("\r\n"));
  const bool get = line.rfind("GET ", 0) == 0, head_only = line.rfind("HEAD ", 0) == 0;
  const size_t path_at = line.find(' ') + 1;
  const std::string path = line.substr(path_at, line.find(' ', path_at) - path_at);
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (!get && !head_only) {
    status = "405 Method Not Allowed";
    type = "text/plain";
    body = "GET /metrics\n";
  } else if (path != "/metrics" && path.rfind("/metrics?", 0) != 0) {
    status = "404 Not Found";
    type = "text/plain";
    body = "vrnicd serves /metrics\n";
  } else {
    body = scrape();
  }
  return "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         (head_only ? "" : body);
}

std::string MetricsServer::scrape() {
  std::vector<view::DeviceSnapshot> snaps;
  for (const Device &d : devices_) {
    int sock = ctl::connect_daemon(d.socket.c_str());
    if (sock < 0) continue;
    view::DeviceSnapshot s{d.name, {}, {}};
    // Per QP only when the operator asked (--metrics-qps): whoever reaches the port is told,
    // and QPNs with their PSNs are what injecting into a connection takes.
    if (!view::ask_stats(sock, &s.stats) && (!qps_ || !view::ask_qps(sock, {}, &s.qps)))
      snaps.push_back(std::move(s));
    ::close(sock);
  }
  return view::prometheus_text(snaps);
}

}  // namespace vrnic
