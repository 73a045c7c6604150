// fork_cost: what fork() costs a process that has registered memory, on any verbs device.
// A child of such a process gets its own copy of every registered page (as the kernel gives
// a child copies of pinned pages), so fork-to-exit grows with the registered size; the same
// size of ordinary memory, in the same run, is the baseline. Prints the median of ROUNDS
// fork-to-child-exit times for each (key=value), the child reading the last byte.
//
// Usage: fork_cost [MB] [ROUNDS]   (default 256 MB, 7 rounds)
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds from fork() to the child's exit; the child checks the last byte of buf.
double median_fork_s(const char *buf, size_t len, int rounds) {
  std::vector<double> s;
  for (int i = 0; i < rounds; i++) {
    const auto t = Clock::now();
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::exit(2);
    }
    if (pid == 0) _exit(buf[len - 1] == 1 ? 0 : 3);
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::fprintf(stderr, "fork_cost: the child saw wrong bytes (status %d)\n", st);
      std::exit(1);
    }
    s.push_back(std::chrono::duration<double>(Clock::now() - t).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const size_t mb = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  if (!mb || rounds < 1) {
    std::fprintf(stderr, "usage: fork_cost [MB] [ROUNDS]\n");
    return 2;
  }
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_context *ctx = n > 0 ? ibv_open_device(list[0]) : nullptr;
  ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  if (!pd) {
    std::fprintf(stderr, "fork_cost: no verbs device to open\n");
    return 2;
  }
  const size_t len = mb << 20;
  char *plain = static_cast<char *>(std::aligned_alloc(4096, len));
  char *registered = static_cast<char *>(std::aligned_alloc(4096, len));
  if (!plain || !registered) return 2;
  std::memset(plain, 1, len);
  std::memset(registered, 1, len);
  // The baseline before anything is registered: every fork after it copies the region, whatever
  // the child reads.
  const double base = median_fork_s(plain, len, rounds);
  ibv_mr *mr = ibv_reg_mr(pd, registered, len, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    std::perror("ibv_reg_mr");
    return 2;
  }
  const double reg = median_fork_s(registered, len, rounds);
  std::printf("mb=%zu rounds=%d plain_fork_ms=%.1f registered_fork_ms=%.1f ratio=%.1f\n", mb,
              rounds, base * 1e3, reg * 1e3, reg / base);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
