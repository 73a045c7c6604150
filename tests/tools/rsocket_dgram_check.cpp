// rsocket_dgram_check PORT: datagram rsockets (rsocket(..., SOCK_DGRAM, 0)) as a UDP program
// uses them (the rdmacm group, issue 32 item 8). Datagrams between sockets bound to
// 127.0.0.1:PORT and an ephemeral port, byte for byte, with the sender's address; a reply to
// that address; a connected socket (rsend, rrecv, rgetpeername, only its peer's datagrams);
// rrecvmsg's MSG_TRUNC and MSG_PEEK; rpoll; AF_INET6; two sockets of one thread (their
// addressing answered by the library's thread, not by a call of the receiver's). Errors: a port nobody bound
// (ECONNREFUSED), too long (EMSGSIZE), no destination (EDESTADDRREQ), not connected
// (ENOTCONN), non-blocking with nothing there (EAGAIN), rlisten (EOPNOTSUPP). The receive
// buffer: SO_RCVBUF as the kernel's, and what it keeps of a burst nobody reads.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cm_tool.h"

using cm_tool::expect;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = uint8_t(seed + i * 7 + (i >> 8));
  return v;
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  return a;
}

int dgram(int domain = AF_INET) {
  return rsocket(domain, SOCK_DGRAM, 0);
}

const sockaddr *sa(const void *p) {
  return static_cast<const sockaddr *>(p);
}

uint16_t bound_port(int s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (rgetsockname(s, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return 0;
  return ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port);
}

// One datagram into buf (blocking), its length; `from` filled.
ssize_t receive(int s, std::vector<uint8_t> &buf, sockaddr_storage *from) {
  socklen_t len = sizeof(*from);
  return rrecvfrom(s, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr *>(from), &len);
}

}  // namespace

int main(int argc, char **argv) {
  const sockaddr_in server_addr = cm_tool::loopback_port(argc, argv, "rsocket_dgram_check");
  const uint16_t port = ntohs(server_addr.sin_port);

  const int server = dgram();
  expect(server >= 0, "rsocket(AF_INET, SOCK_DGRAM, 0)");
  int type = 0;
  socklen_t tlen = sizeof(type);
  expect(rgetsockopt(server, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_DGRAM,
         "SO_TYPE is SOCK_DGRAM");
  expect(rbind(server, sa(&server_addr), sizeof(server_addr)) == 0, "rbind 127.0.0.1:PORT");
  expect(bound_port(server) == port, "rgetsockname gives the port bound");
  errno = 0;
  expect(rlisten(server, 1) == -1 && errno == EOPNOTSUPP, "rlisten on a datagram socket: EOPNOTSUPP");

  // A client that never bound: it sends first, bound then to a port of the library's.
  const int client = dgram();
  const std::vector<uint8_t> hello = pattern(1000, 1);
  expect(rsendto(client, hello.data(), hello.size(), 0, sa(&server_addr), sizeof(server_addr)) ==
             ssize_t(hello.size()),
         "rsendto 1000 bytes from an unbound socket");
  const uint16_t client_port = bound_port(client);
  expect(client_port != 0 && client_port != port, "the sender was bound to a port of its own");
  std::vector<uint8_t> buf(4096);
  sockaddr_storage from{};
  ssize_t n = receive(server, buf, &from);
  auto *from4 = reinterpret_cast<sockaddr_in *>(&from);
  char text[64] = "?";
  inet_ntop(AF_INET, &from4->sin_addr, text, sizeof(text));
  expect(n == ssize_t(hello.size()) && std::memcmp(buf.data(), hello.data(), hello.size()) == 0,
         "rrecvfrom: the datagram, byte for byte");
  expect(from.ss_family == AF_INET && ntohs(from4->sin_port) == client_port &&
             std::string(text) == "127.0.0.1",
         "rrecvfrom: the sender's address and port");

  // The reply goes to the address the datagram came from, with no resolution of its own.
  const std::vector<uint8_t> reply = pattern(3000, 2);
  expect(rsendto(server, reply.data(), reply.size(), 0, sa(&from), sizeof(sockaddr_in)) ==
             ssize_t(reply.size()),
         "a reply of 3000 bytes to that address");
  sockaddr_storage back{};
  n = receive(client, buf, &back);
  expect(n == ssize_t(reply.size()) && std::memcmp(buf.data(), reply.data(), reply.size()) == 0 &&
             ntohs(reinterpret_cast<sockaddr_in *>(&back)->sin_port) == port,
         "the reply arrives from the server's port, byte for byte");

  // rrecvmsg: a short buffer keeps the first bytes and says MSG_TRUNC; MSG_PEEK leaves it there.
  const std::vector<uint8_t> big = pattern(2000, 3);
  rsendto(client, big.data(), big.size(), 0, sa(&server_addr), sizeof(server_addr));
  std::vector<uint8_t> small(100);
  iovec iov{small.data(), small.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  n = rrecvmsg(server, &msg, MSG_PEEK);
  expect(n == 100 && (msg.msg_flags & MSG_TRUNC) && std::memcmp(small.data(), big.data(), 100) == 0,
         "MSG_PEEK with a 100-byte buffer: its first 100 bytes, MSG_TRUNC");
  n = rrecv(server, buf.data(), 100, MSG_TRUNC);
  expect(n == 2000 && std::memcmp(buf.data(), big.data(), 100) == 0,
         "then MSG_TRUNC in flags: the whole length (2000), the datagram taken");
  errno = 0;
  expect(rrecv(server, buf.data(), buf.size(), MSG_DONTWAIT) == -1 && errno == EAGAIN,
         "nothing left: MSG_DONTWAIT gives EAGAIN");

  // rpoll: not readable while empty, readable once a datagram is there.
  pollfd p{server, POLLIN, 0};
  expect(rpoll(&p, 1, 0) == 0, "rpoll, nothing there: 0");
  rsendto(client, hello.data(), 64, 0, sa(&server_addr), sizeof(server_addr));
  expect(rpoll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "rpoll: POLLIN once a datagram came");
  receive(server, buf, &from);
  p.events = POLLOUT;
  expect(rpoll(&p, 1, 0) == 1 && (p.revents & POLLOUT), "rpoll: POLLOUT");

  // Errors.
  errno = 0;
  std::vector<uint8_t> huge(8192);
  expect(rsendto(client, huge.data(), huge.size(), 0, sa(&server_addr), sizeof(server_addr)) == -1 &&
             errno == EMSGSIZE,
         "8192 bytes, more than the path MTU: EMSGSIZE");
  errno = 0;
  expect(rsend(client, hello.data(), 10, 0) == -1 && errno == EDESTADDRREQ,
         "rsend unconnected: EDESTADDRREQ");
  sockaddr_storage peer{};
  socklen_t plen = sizeof(peer);
  errno = 0;
  expect(rgetpeername(client, reinterpret_cast<sockaddr *>(&peer), &plen) == -1 && errno == ENOTCONN,
         "rgetpeername unconnected: ENOTCONN");
  const sockaddr_in nobody = loopback(uint16_t(port + 1));
  errno = 0;
  expect(rsendto(client, hello.data(), 10, 0, sa(&nobody), sizeof(nobody)) == -1 &&
             errno == ECONNREFUSED,
         "to a port nobody bound: ECONNREFUSED");

  // rconnect sends nothing, as UDP's: a port nobody bound is found at the first rsend.
  const int to_nobody = dgram();
  expect(rconnect(to_nobody, sa(&nobody), sizeof(nobody)) == 0, "rconnect to a port nobody bound");
  errno = 0;
  expect(rsend(to_nobody, hello.data(), 10, 0) == -1 && errno == ECONNREFUSED,
         "then rsend: ECONNREFUSED");
  socklen_t only_len = 0;
  expect(rgetsockname(to_nobody, nullptr, &only_len) == 0 && only_len == sizeof(sockaddr_in),
         "rgetsockname with no buffer: the length alone");
  rclose(to_nobody);

  // Connected: rsend and rrecv with the peer, and nobody else's datagrams.
  const int connected = dgram();
  expect(rconnect(connected, sa(&server_addr), sizeof(server_addr)) == 0, "rconnect");
  plen = sizeof(peer);
  expect(rgetpeername(connected, reinterpret_cast<sockaddr *>(&peer), &plen) == 0 &&
             ntohs(reinterpret_cast<sockaddr_in *>(&peer)->sin_port) == port,
         "rgetpeername: the server");
  expect(rsend(connected, hello.data(), 500, 0) == 500, "rsend 500 bytes");
  n = receive(server, buf, &from);
  expect(n == 500 && std::memcmp(buf.data(), hello.data(), 500) == 0, "the server has them");
  const sockaddr_in connected_addr = loopback(bound_port(connected));
  rsendto(client, hello.data(), 33, 0, sa(&connected_addr), sizeof(connected_addr));  // not its peer
  rsendto(server, reply.data(), 44, 0, sa(&connected_addr), sizeof(connected_addr));
  n = rrecv(connected, buf.data(), buf.size(), 0);
  expect(n == 44 && std::memcmp(buf.data(), reply.data(), 44) == 0,
         "a connected socket takes its peer's datagram, not another's");
  int fl = rfcntl(connected, F_GETFL);
  expect(rfcntl(connected, F_SETFL, fl | O_NONBLOCK) == 0 &&
             (rfcntl(connected, F_GETFL) & O_NONBLOCK),
         "rfcntl O_NONBLOCK");
  errno = 0;
  expect(rrecv(connected, buf.data(), buf.size(), 0) == -1 && errno == EAGAIN,
         "the other's datagram was dropped: EAGAIN");

  // IPv6: a socket bound to the IPv6 wildcard, reached at the loop port's address.
  const int six = dgram(AF_INET6);
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_port = htons(uint16_t(port + 2));
  expect(six >= 0 && rbind(six, sa(&any6), sizeof(any6)) == 0, "AF_INET6: rbind [::]:PORT+2");
  const int six_client = dgram(AF_INET6);
  sockaddr_in6 to6 = any6;
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &to6.sin6_addr);  // GID 0, in IPv6's form
  expect(rsendto(six_client, reply.data(), 1234, 0, sa(&to6), sizeof(to6)) == 1234,
         "AF_INET6: rsendto [::ffff:127.0.0.1]:PORT+2");
  n = receive(six, buf, &from);
  expect(n == 1234 && std::memcmp(buf.data(), reply.data(), 1234) == 0 && from.ss_family == AF_INET6,
         "AF_INET6: the datagram, from an IPv6 address");

  // The receive buffer, as a UDP socket's (issue 53): SO_RCVBUF as the kernel has it, and
  // what comes while nobody reads kept up to it -- 256 datagrams of 64 bytes in the default
  // 212,992 bytes, as a kernel UDP socket keeps on loopback -- the rest dropped.
  const int slow = dgram(), fast = dgram();
  int rcvbuf = 0;
  socklen_t rlen = sizeof(rcvbuf);
  expect(rgetsockopt(slow, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rlen) == 0 && rcvbuf == 212992,
         "SO_RCVBUF: 212992 by default (net.core.rmem_default)");
  sockaddr_in slow_addr = loopback(uint16_t(port + 3));
  expect(rbind(slow, sa(&slow_addr), sizeof(slow_addr)) == 0, "rbind 127.0.0.1:PORT+3");
  const std::vector<uint8_t> tiny = pattern(64, 9);
  int sent = 0;
  for (int i = 0; i < 600; i++)
    sent += rsendto(fast, tiny.data(), tiny.size(), 0, sa(&slow_addr), sizeof(slow_addr)) == 64;
  expect(sent == 600, "600 datagrams of 64 bytes sent to a socket that does not read");
  ::usleep(300000);  // (delivered or dropped by now)
  rfcntl(slow, F_SETFL, O_NONBLOCK);
  int kept = 0;
  while (rrecv(slow, buf.data(), buf.size(), 0) == 64) kept++;
  std::printf("kept %d of 600 datagrams of 64 bytes\n", kept);
  expect(kept == 256, "256 kept, as a UDP socket's 212992 bytes keep on loopback");
  int asked = 1 << 19, rmem_max = 212992;
  if (FILE *f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
    if (std::fscanf(f, "%d", &rmem_max) != 1) rmem_max = 212992;
    std::fclose(f);
  }
  rlen = sizeof(rcvbuf);
  expect(rsetsockopt(fast, SOL_SOCKET, SO_RCVBUF, &asked, sizeof(asked)) == 0 &&
             rgetsockopt(fast, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rlen) == 0 &&
             rcvbuf == 2 * std::min(asked, rmem_max),
         "SO_RCVBUF 524288 set: doubled, bounded by net.core.rmem_max, as the kernel keeps it");

  for (int s : {server, client, connected, six, six_client, slow, fast})
    expect(rclose(s) == 0, "rclose");
  std::printf("%d failed\n", cm_tool::failures);
  return cm_tool::failures ? 1 : 0;
}
