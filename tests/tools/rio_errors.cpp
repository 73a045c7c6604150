// rio_errors PORT: riomap, riowrite and riounmap on a pair of rsockets of this process (a
// listener on 127.0.0.1:PORT, a client, the accepted socket): their errors as rdma-core's
// library gives them, and riowrite's bytes arriving in the peer's mapped memory with no call
// of the peer's. Prints PASS or FAIL lines; exit 0 when all pass. A plain rsockets program:
// it links the system's librdmacm and runs on vrnic's through LD_LIBRARY_PATH.
#include <rdma/rsocket.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cm_tool.h"

using namespace cm_tool;

namespace {

// The call failed with -1 (or (size_t)-1) and this errno.
bool failed_with(long long rc, int err) {
  return rc == -1 && errno == err;
}

}  // namespace

int main(int argc, char **argv) {
  sockaddr_in addr = loopback_port(argc, argv, "rio_errors");
  const size_t len = 256 * 1024;  // four of the library's 64 KiB send buffers
  std::vector<uint8_t> mine(len, 0), src(len);
  for (size_t i = 0; i < len; i++) src[i] = uint8_t(i * 7 + 3);

  const int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  const int client = rsocket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0 || client < 0 || rbind(listener, (sockaddr *)&addr, sizeof(addr)) ||
      rlisten(listener, 1)) {
    std::perror("listen");
    return 2;
  }
  expect(failed_with(riomap(client, mine.data(), len, PROT_WRITE, 0, 0), EINVAL),
         "riomap on a socket not connected: EINVAL");
  int server = -1;
  std::thread acceptor([&] { server = raccept(listener, nullptr, nullptr); });
  const int connected = rconnect(client, (sockaddr *)&addr, sizeof(addr));
  acceptor.join();
  if (connected || server < 0) {
    std::perror("connect");
    return 2;
  }

  expect(failed_with(riomap(server, mine.data(), len, PROT_READ, 0, 0), EINVAL),
         "riomap with PROT_READ: EINVAL");
  expect(failed_with(riomap(server, mine.data(), len, PROT_WRITE, 1, 0), EINVAL),
         "riomap with flags: EINVAL");
  expect(failed_with(riomap(12345, mine.data(), len, PROT_WRITE, 0, 0), ENOTSOCK),
         "riomap on a descriptor that is no rsocket: ENOTSOCK");
  expect(failed_with((long long)riowrite(client, src.data(), 16, 0, 0), EINVAL),
         "riowrite before the peer mapped anything: EINVAL");

  const off_t at = riomap(server, mine.data(), len, PROT_WRITE, 0, 4096);
  expect(at == 4096, "riomap at offset 4096 returns it");
  const off_t chosen = riomap(server, src.data(), 64, PROT_WRITE, 0, -1);
  expect(chosen == off_t(reinterpret_cast<uintptr_t>(src.data())),
         "riomap with offset -1: the library picks the buffer's address");
  // A message behind the mappings: once the client has it, it has them too (one RC QP).
  char ping = 'p';
  expect(rsend(server, &ping, 1, 0) == 1 && rrecv(client, &ping, 1, 0) == 1,
         "a message after the mappings arrives");

  // All of the mapping, written in pieces larger than a send buffer; the last byte last.
  size_t wrote = riowrite(client, src.data(), len - 1, at, 0);
  wrote += riowrite(client, src.data() + len - 1, 1, at + off_t(len) - 1, 0) == 1;
  expect(wrote == len, "riowrite of 256 KiB into the peer's mapping: every byte written");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  volatile uint8_t *last = &mine[len - 1];
  while (*last != src[len - 1] && std::chrono::steady_clock::now() < deadline) {
  }
  expect(std::memcmp(mine.data(), src.data(), len) == 0,
         "the peer's memory holds the bytes, the server calling nothing meanwhile");
  expect(failed_with((long long)riowrite(client, src.data(), 16, at + off_t(len), 0), EINVAL),
         "riowrite past the end of the peer's mapping: EINVAL");
  expect(riowrite(client, src.data(), 2 * len, at, 0) == len,
         "riowrite running past the end: only the bytes that fit");

  expect(failed_with(riounmap(server, mine.data(), len - 1), EINVAL),
         "riounmap of a range never mapped: EINVAL");
  expect(riounmap(server, mine.data(), len) == 0 && riounmap(server, src.data(), 64) == 0,
         "riounmap of the mappings");
  expect(failed_with(riounmap(server, mine.data(), len), EINVAL), "riounmap twice: EINVAL");
  rclose(client);
  rclose(server);
  rclose(listener);
  return failures ? 1 : 0;
}
