// memcpy_bw: memcpy bandwidth on one core for one message size, the yardstick for vrnic's
// loopback RDMA WRITE (one vrnicd copies each message once, from the source MR to the
// destination MR).
//
// Usage: memcpy_bw [SIZE] [--working-set BYTES] [--runs N] [--ms MS]
//   SIZE           bytes per memcpy (default 65536)
//   --working-set  bytes of source plus destination buffers (default 4 x SIZE: source and
//                  destination of 2 x SIZE each, as perftest's ib_write_bw allocates them, the
//                  copies alternating between the two halves). Give e.g. 268435456 to measure
//                  a working set far larger than the caches instead.
//   --runs         number of timed runs; the median is reported (default 9)
//   --ms           duration of one run in milliseconds (default 200)
//
// Prints whether the working set fits in L2, the median and range over the runs, and a last
// line "median_GBps=X" (GB = 1e9 bytes) for scripts.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

[[noreturn]] void Usage(const char *msg) {
  std::fprintf(stderr, "memcpy_bw: %s\n", msg);
  std::fprintf(stderr, "usage: memcpy_bw [SIZE] [--working-set BYTES] [--runs N] [--ms MS]\n");
  std::exit(2);
}

uint64_t ParseCount(const char *s, const char *what) {
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || v == 0) {
    std::string m = std::string("bad ") + what + ": '" + s + "'";
    Usage(m.c_str());
  }
  return v;
}

void *PageAlignedAlloc(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + page - 1) / page * page;
  void *p = std::aligned_alloc(page, rounded);
  if (p == nullptr) {
    std::fprintf(stderr, "memcpy_bw: cannot allocate %zu bytes\n", rounded);
    std::exit(1);
  }
  return p;
}

// Tells the compiler that the copy's result is used, so the memcpy is not optimized away.
inline void Escape(void *p) {
  asm volatile("" : : "r"(p) : "memory");
}

}  // namespace

int main(int argc, char **argv) {
  uint64_t size = 65536;
  uint64_t working_set = 0;
  uint64_t runs = 9;
  uint64_t run_ms = 200;
  bool have_size = false;

  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char *what) -> const char * {
      if (i + 1 >= argc) Usage((std::string("missing value for ") + what).c_str());
      return argv[++i];
    };
    if (a == "--working-set") {
      working_set = ParseCount(next("--working-set"), "--working-set");
    } else if (a == "--runs") {
      runs = ParseCount(next("--runs"), "--runs");
    } else if (a == "--ms") {
      run_ms = ParseCount(next("--ms"), "--ms");
    } else if (a == "-h" || a == "--help") {
      Usage("measures memcpy bandwidth");
    } else if (!have_size && !a.empty() && a[0] != '-') {
      size = ParseCount(argv[i], "SIZE");
      have_size = true;
    } else {
      Usage((std::string("unexpected argument '") + a + "'").c_str());
    }
  }
  if (working_set == 0) working_set = 4 * size;
  // Source and destination each get half the working set, in whole messages (at least one).
  const uint64_t slots = std::max<uint64_t>(1, working_set / 2 / size);
  const uint64_t buf_bytes = slots * size;
  auto *src = static_cast<unsigned char *>(PageAlignedAlloc(buf_bytes));
  auto *dst = static_cast<unsigned char *>(PageAlignedAlloc(buf_bytes));
  for (uint64_t i = 0; i < buf_bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memset(dst, 0, buf_bytes);  // fault every page in before timing

  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const uint64_t total = 2 * buf_bytes;
  std::printf(
      "memcpy_bw: %llu B per copy; source and destination %llu B each (%llu slot%s), "
      "working set %llu B\n",
      static_cast<unsigned long long>(size), static_cast<unsigned long long>(buf_bytes),
      static_cast<unsigned long long>(slots), slots == 1 ? "" : "s",
      static_cast<unsigned long long>(total));
  if (l2 > 0) {
    std::printf("memcpy_bw: L2 cache %ld B: the working set %s L2\n", l2,
                total <= static_cast<uint64_t>(l2) ? "fits in" : "is larger than");
  } else {
    std::printf("memcpy_bw: L2 cache size unknown\n");
  }

  using Clock = std::chrono::steady_clock;
  const auto run_for = std::chrono::milliseconds(run_ms);
  uint64_t slot = 0;
  auto copy_batch = [&](int n) {
    for (int k = 0; k < n; ++k) {
      unsigned char *d = dst + slot * size;
      std::memcpy(d, src + slot * size, size);
      Escape(d);
      slot = slot + 1 == slots ? 0 : slot + 1;
    }
  };

  // Warm-up: one short run, not counted.
  {
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < run_for / 4) copy_batch(16);
  }

  std::vector<double> gbps;
  for (uint64_t r = 0; r < runs; ++r) {
    uint64_t copies = 0;
    const auto t0 = Clock::now();
    auto t1 = t0;
    do {
      copy_batch(16);
      copies += 16;
      t1 = Clock::now();
    } while (t1 - t0 < run_for);
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    gbps.push_back(static_cast<double>(copies) * static_cast<double>(size) / secs / 1e9);
  }

  // Checks a few bytes so a broken copy cannot pass unnoticed.
  for (uint64_t s = 0; s < slots; ++s) {
    const uint64_t off = s * size + (size - 1);
    if (dst[off] != src[off]) {
      std::fprintf(stderr, "memcpy_bw: destination differs from source at byte %llu\n",
                   static_cast<unsigned long long>(off));
      return 1;
    }
  }

  std::vector<double> sorted = gbps;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::printf(
      "memcpy_bw: median %.2f GB/s over %zu runs of %llu ms (min %.2f, max %.2f); "
      "1 GB = 1e9 bytes, one core\n",
      median, n, static_cast<unsigned long long>(run_ms), sorted.front(), sorted.back());
  std::printf("median_GBps=%.2f\n", median);

  std::free(src);
  std::free(dst);
  return 0;
}
