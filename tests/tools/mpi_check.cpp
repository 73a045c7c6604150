// mpi_check: an MPI program that checks every byte it moves, for Open MPI over UCX over vrnic
// (issue 18, tests/integration/68_mpi.sh). Any rank count >= 2. Each step fills buffers with a
// pattern that depends on the sender, the step and the offset, and the receiver compares
// what arrived; the first mismatch aborts the job (MPI_Abort, non-zero exit).
//
//   mpi_check            point-to-point 0 B to 16 MiB (MPI_Sendrecv round a ring),
//                        non-blocking many-to-many (MPI_Isend/Irecv, several tags),
//                        MPI_Allreduce, MPI_Alltoall, MPI_Bcast from every root, and one-sided
//                        MPI_Put / MPI_Get / MPI_Accumulate in a window (fence and
//                        passive-target lock epochs)
//   mpi_check --forever  after MPI_Init, allreduce in a loop until killed (the rank-kill test:
//                        killing one rank must end the job with an error, never a hang)
// The C API only: Open MPI's deprecated C++ bindings do not build with -Wextra -Werror.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_rank = 0, g_size = 0;
int g_checks = 0;

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "mpi_check: rank %d: FAIL: %s\n", g_rank, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  _exit(3);  // MPI_Abort does not return; this keeps the compiler sure of it
}

void mpi_ok(int rc, const char *call) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail(std::string(call) + ": " + msg);
  }
}
#define MPI_OK(call) mpi_ok((call), #call)

// The byte at offset i of what rank src sends in step `step`.
uint8_t pattern(int src, uint32_t step, size_t i) {
  uint64_t x = (uint64_t(src) + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t(step) << 40) ^ i;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return uint8_t(x >> 32);
}

void fill(std::vector<uint8_t> &b, int src, uint32_t step, size_t off = 0, size_t n = SIZE_MAX) {
  n = std::min(n, b.size() - off);
  for (size_t i = 0; i < n; i++) b[off + i] = pattern(src, step, i);
}

void expect(const uint8_t *got, size_t n, int src, uint32_t step, const std::string &what) {
  for (size_t i = 0; i < n; i++) {
    uint8_t want = pattern(src, step, i);
    if (got[i] != want) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: byte %zu of %zu is 0x%02x, want 0x%02x (from rank %d)",
                    what.c_str(), i, n, got[i], want, src);
      fail(buf);
    }
  }
  g_checks++;
}

// MPI_Sendrecv of every size round the ring: each rank sends to the next, receives from the
// previous.
void point_to_point() {
  const size_t sizes[] = {0, 1, 7, 64, 1000, 4096, 65536, 65537, 1 << 20, 16 << 20};
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  uint32_t step = 100;
  for (size_t n : sizes) {
    std::vector<uint8_t> out(n), in(n + 1, 0xee);
    fill(out, g_rank, step);
    MPI_Status st;
    MPI_OK(MPI_Sendrecv(out.data(), int(n), MPI_BYTE, next, int(step), in.data(), int(n + 1),
                        MPI_BYTE, prev, int(step), MPI_COMM_WORLD, &st));
    int count = -1;
    MPI_OK(MPI_Get_count(&st, MPI_BYTE, &count));
    if (size_t(count) != n)
      fail("Sendrecv of " + std::to_string(n) + " B received " + std::to_string(count));
    expect(in.data(), n, prev, step, "Sendrecv " + std::to_string(n) + " B");
    if (in[n] != 0xee) fail("Sendrecv wrote past the message");
    step++;
  }
}

// Every rank posts receives from and sends to every other, kMsgs each with its own tag and
// size, all in flight at once.
void many_to_many() {
  constexpr int kMsgs = 8;
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<MPI_Request> reqs;
  std::vector<int> from;
  std::vector<uint32_t> steps;
  for (int peer = 0; peer < g_size; peer++) {
    if (peer == g_rank) continue;
    for (int m = 0; m < kMsgs; m++) {
      size_t n = size_t(1) << (m * 2 + 3);  // 8 B to 256 KiB
      uint32_t step = 200 + uint32_t(m);
      in.emplace_back(n, 0);
      from.push_back(peer);
      steps.push_back(step);
      reqs.emplace_back();
      MPI_OK(MPI_Irecv(in.back().data(), int(n), MPI_BYTE, peer, m, MPI_COMM_WORLD,
                       &reqs.back()));
    }
  }
  for (int peer = 0; peer < g_size; peer++) {
    if (peer == g_rank) continue;
    for (int m = kMsgs - 1; m >= 0; m--) {  // the other order: matching is by tag
      size_t n = size_t(1) << (m * 2 + 3);
      out.emplace_back(n);
      fill(out.back(), g_rank, 200 + uint32_t(m));
      reqs.emplace_back();
      MPI_OK(MPI_Isend(out.back().data(), int(n), MPI_BYTE, peer, m, MPI_COMM_WORLD,
                       &reqs.back()));
    }
  }
  MPI_OK(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
  for (size_t i = 0; i < in.size(); i++)
    expect(in[i].data(), in[i].size(), from[i], steps[i], "Isend/Irecv many-to-many");
}

void collectives() {
  // Allreduce: sums of int64 and the max of doubles, against their closed forms.
  constexpr int kN = 100000;
  std::vector<int64_t> v(kN), sum(kN);
  for (int i = 0; i < kN; i++) v[size_t(i)] = int64_t(g_rank + 1) * i;
  MPI_OK(MPI_Allreduce(v.data(), sum.data(), kN, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  const int64_t ranks = int64_t(g_size) * (g_size + 1) / 2;
  for (int i = 0; i < kN; i++)
    if (sum[size_t(i)] != ranks * i) fail("Allreduce SUM at " + std::to_string(i));
  g_checks++;
  double mine = g_rank * 1.5, max = -1;
  MPI_OK(MPI_Allreduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  if (max != (g_size - 1) * 1.5) fail("Allreduce MAX");
  g_checks++;

  // Alltoall: block j of rank i's buffer goes to rank j.
  constexpr size_t kBlock = 40000;
  std::vector<uint8_t> out(kBlock * size_t(g_size)), in(out.size());
  for (int j = 0; j < g_size; j++) fill(out, g_rank, 300 + uint32_t(j), kBlock * size_t(j), kBlock);
  MPI_OK(MPI_Alltoall(out.data(), int(kBlock), MPI_BYTE, in.data(), int(kBlock), MPI_BYTE,
                      MPI_COMM_WORLD));
  for (int j = 0; j < g_size; j++)
    expect(in.data() + kBlock * size_t(j), kBlock, j, 300 + uint32_t(g_rank), "Alltoall block");

  // Bcast of 1 MiB from every root in turn.
  std::vector<uint8_t> b(1 << 20);
  for (int root = 0; root < g_size; root++) {
    if (g_rank == root)
      fill(b, root, 400);
    else
      std::memset(b.data(), 0, b.size());
    MPI_OK(MPI_Bcast(b.data(), int(b.size()), MPI_BYTE, root, MPI_COMM_WORLD));
    expect(b.data(), b.size(), root, 400, "Bcast from rank " + std::to_string(root));
  }
}

// One-sided: each rank's window has one slot per rank. Put fills our slot in the next rank's
// window; Get reads the previous rank's own slot; Accumulate sums into rank 0's counters.
void one_sided() {
  constexpr size_t kSlot = 256 * 1024;
  const size_t bytes = kSlot * size_t(g_size);
  uint8_t *base = nullptr;
  MPI_Win win;
  MPI_OK(MPI_Win_allocate(MPI_Aint(bytes), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
  std::memset(base, 0, bytes);
  int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;

  // Put, fence epoch.
  std::vector<uint8_t> mine(kSlot);
  fill(mine, g_rank, 500);
  MPI_OK(MPI_Win_fence(0, win));
  MPI_OK(MPI_Put(mine.data(), int(kSlot), MPI_BYTE, next, MPI_Aint(kSlot * size_t(g_rank)),
                 int(kSlot), MPI_BYTE, win));
  MPI_OK(MPI_Win_fence(0, win));
  expect(base + kSlot * size_t(prev), kSlot, prev, 500, "MPI_Put into our window");

  // Get, passive target: the previous rank's window holds, in the slot of the rank before
  // it, what that rank Put there.
  const int written_by = (prev + g_size - 1) % g_size;
  std::vector<uint8_t> got(kSlot, 0);
  MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, prev, 0, win));
  MPI_OK(MPI_Get(got.data(), int(kSlot), MPI_BYTE, prev, MPI_Aint(kSlot * size_t(written_by)),
                 int(kSlot), MPI_BYTE, win));
  MPI_OK(MPI_Win_unlock(prev, win));
  expect(got.data(), kSlot, written_by, 500, "MPI_Get from the previous rank's window");
  MPI_OK(MPI_Win_fence(0, win));

  // Accumulate: every rank adds (rank + 1) * i to rank 0's first kN int64 counters.
  constexpr int kN = 4096;
  auto *counters = reinterpret_cast<int64_t *>(base);
  if (g_rank == 0) std::memset(base, 0, kN * sizeof(int64_t));
  MPI_OK(MPI_Win_fence(0, win));
  std::vector<int64_t> add(kN);
  for (int i = 0; i < kN; i++) add[size_t(i)] = int64_t(g_rank + 1) * i;
  MPI_OK(MPI_Accumulate(add.data(), kN, MPI_INT64_T, 0, 0, kN, MPI_INT64_T, MPI_SUM, win));
  MPI_OK(MPI_Win_fence(0, win));
  if (g_rank == 0) {
    const int64_t ranks = int64_t(g_size) * (g_size + 1) / 2;
    for (int i = 0; i < kN; i++)
      if (counters[i] != ranks * i)
        fail("MPI_Accumulate SUM at " + std::to_string(i) + ": " + std::to_string(counters[i]));
    g_checks++;
  }
  MPI_OK(MPI_Win_free(&win));
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (g_size < 2) fail("needs at least 2 ranks");
  if (argc > 1 && std::strcmp(argv[1], "--forever") == 0) {
    for (uint64_t round = 0;; round++) {
      int64_t one = 1, total = 0;
      MPI_OK(MPI_Allreduce(&one, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
      if (total != g_size) fail("Allreduce in --forever");
      if (round == 100) {  // the ranks are connected and exchanging: the test may kill one
        std::printf("mpi_check: rank %d of %d (pid %d) running until killed\n", g_rank, g_size,
                    int(getpid()));
        std::fflush(stdout);
      }
      usleep(1000);
    }
  }
  point_to_point();
  many_to_many();
  collectives();
  one_sided();
  MPI_Barrier(MPI_COMM_WORLD);
  std::printf("mpi_check: rank %d of %d: all %d checks passed\n", g_rank, g_size, g_checks);
  MPI_Finalize();
  return 0;
}
