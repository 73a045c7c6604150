// reg_race: ibv_reg_mr while other threads write the buffer (issue 53, item 1). Registration
// turns a buffer's private pages into shared ones at the same address; a write another
// thread makes meanwhile must land, whatever the timing. Each round takes fresh buffers of
// several kinds -- heap with unaligned ends, an anonymous mapping, transparent huge pages, a
// small mapping -- and while two writer threads rewrite one word each in every page of every
// buffer, over and over, keeping the last value they wrote in memory of their own, the main
// thread registers each buffer, re-registers it and deregisters it, and registers it once
// more. Each writer checks, whenever it comes back to a word, that the word still holds what
// it wrote there last (a lost write shows as an older value); when the writers stop, every
// word must hold its writer's last value, in the program's view and in the NIC's (an RDMA
// READ of the registered buffer through vrnic).
// With --fork a third thread forks children (which exit at once) all along.
//
//   reg_race [--rounds N] [--fork]
//
// Prints per kind the words checked and lost, and a total; exits 0 when nothing was lost, 1
// when something was, 2 on a setup error.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "first_device.h"
#include "loopback_qp.h"

namespace {

constexpr size_t kPage = 4096;
constexpr int kWriters = 2;

[[noreturn]] void setup_error(const char *what) {
  std::printf("setup_error=%s (%s)\n", what, std::strerror(errno));
  std::exit(2);
}

struct Buffer {
  const char *kind;
  uint8_t *base = nullptr;  // what to free
  size_t base_len = 0;
  bool heap = false;
  uint8_t *addr = nullptr;  // what is registered
  size_t len = 0;
  // The pages whose word each writer owns: every whole page in [addr, addr+len), and the
  // partial ones too (a word of theirs inside the range).
  std::vector<uint64_t *> words[kWriters];
  std::vector<uint64_t> last[kWriters];
};

void add_words(Buffer &b) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(b.addr), end = start + b.len;
  for (uintptr_t page = start & ~(kPage - 1); page < end; page += kPage)
    for (int w = 0; w < kWriters; w++) {
      const uintptr_t at = page + 64 * uintptr_t(w + 1);  // a word of its own on each page
      if (at < start || at + 8 > end) continue;
      b.words[w].push_back(reinterpret_cast<uint64_t *>(at));
      b.last[w].push_back(0);
    }
}

Buffer make_buffer(const char *kind) {
  Buffer b;
  b.kind = kind;
  if (!std::strcmp(kind, "heap")) {
    b.heap = true;
    b.base_len = (8u << 20) + 4096;
    b.base = static_cast<uint8_t *>(std::malloc(b.base_len));
    b.addr = b.base + 1000;  // unaligned ends: partial first and last pages
    b.len = (8u << 20) + 100;
  } else {
    const bool huge = !std::strcmp(kind, "thp");
    const size_t len = !std::strcmp(kind, "small") ? 65536 : huge ? 8u << 20 : 16u << 20;
    b.base_len = len + (huge ? 2u << 20 : 0);
    b.base = static_cast<uint8_t *>(::mmap(nullptr, b.base_len, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (b.base == MAP_FAILED) setup_error("mmap");
    b.addr = huge ? reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(b.base) + (2u << 20) - 1) &
                                                ~uintptr_t((2u << 20) - 1))
                  : b.base;
    b.len = len;
    if (huge) ::madvise(b.addr, len, MADV_HUGEPAGE);
  }
  if (!b.base) setup_error("malloc");
  std::memset(b.addr, 0, b.len);  // touched: the pages exist (and are huge, where asked)
  add_words(b);
  return b;
}

void free_buffer(Buffer &b) {
  if (b.heap)
    std::free(b.base);
  else
    ::munmap(b.base, b.base_len);
}

// An RC QP connected to itself over the device's GID 0: RDMA READs of our own regions.
struct Loopback {
  ibv_context *ctx;
  ibv_pd *pd;
  ibv_cq *cq;
  ibv_qp *qp;
};

Loopback make_loopback() {
  const char *why = nullptr;
  Loopback l{};
  l.ctx = open_first_device(&why);
  if (!l.ctx) setup_error(why);
  l.pd = ibv_alloc_pd(l.ctx);
  l.cq = l.pd ? ibv_create_cq(l.ctx, 16, nullptr, nullptr, 0) : nullptr;
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = l.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {16, 16, 1, 1, 0};
  l.qp = l.cq ? ibv_create_qp(l.pd, &ia) : nullptr;
  if (!l.qp) setup_error("loopback QP");
  if (!connect_qp_to_itself(l.ctx, l.qp, IBV_ACCESS_REMOTE_READ)) setup_error("connecting it");
  return l;
}

// Reads [addr, addr+len) of region `mr` through the NIC into `out` (registered as `out_mr`).
bool rdma_read(Loopback &l, ibv_mr *mr, ibv_mr *out_mr) {
  const size_t chunk = 1u << 20;
  for (size_t done = 0; done < mr->length; done += chunk) {
    const uint32_t n = uint32_t(std::min(chunk, mr->length - done));
    ibv_sge sge{reinterpret_cast<uintptr_t>(out_mr->addr) + done, n, out_mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mr->addr) + done;
    wr.wr.rdma.rkey = mr->rkey;
    if (ibv_post_send(l.qp, &wr, &bad)) return false;
    ibv_wc wc{};
    int got;
    while ((got = ibv_poll_cq(l.cq, 1, &wc)) == 0) {
    }
    if (got < 0 || wc.status != IBV_WC_SUCCESS) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  int rounds = 4;
  bool forks = false;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--fork")) {
      forks = true;
    } else {
      std::fprintf(stderr, "usage: reg_race [--rounds N] [--fork]\n");
      return 2;
    }
  }
  Loopback l = make_loopback();
  const char *kinds[] = {"heap", "mmap", "thp", "small"};
  uint64_t total_checked = 0, total_lost = 0, nic_lost = 0, forked = 0;
  for (int r = 0; r < rounds; r++) {
    std::vector<Buffer> bufs;
    for (const char *k : kinds) bufs.push_back(make_buffer(k));
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    std::vector<uint64_t> reverted(kWriters);
    for (int w = 0; w < kWriters; w++)
      writers.emplace_back([&, w] {
        // Every write is checked when the writer comes back to its word: only it writes
        // there, so a word that no longer holds its last value lost a write.
        uint64_t value = uint64_t(w + 1) << 56;
        while (!stop.load(std::memory_order_relaxed))
          for (Buffer &b : bufs)
            for (size_t i = 0; i < b.words[w].size(); i++) {
              volatile uint64_t *word = b.words[w][i];
              if (*word != b.last[w][i]) reverted[w]++;
              *word = ++value;
              b.last[w][i] = value;
            }
      });
    std::thread forker;
    if (forks)
      forker = std::thread([&] {
        while (!stop.load()) {
          const pid_t child = ::fork();
          if (child == 0) ::_exit(0);
          if (child > 0) {
            ::waitpid(child, nullptr, 0);
            forked++;
          }
        }
      });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the writers are going
    std::vector<ibv_mr *> mrs;
    for (Buffer &b : bufs) {
      const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
      ibv_mr *mr = ibv_reg_mr(l.pd, b.addr, b.len, access);
      if (!mr) setup_error("ibv_reg_mr");
      if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE))
        setup_error("ibv_rereg_mr");
      if (ibv_dereg_mr(mr)) setup_error("ibv_dereg_mr");
      mr = ibv_reg_mr(l.pd, b.addr, b.len, access);
      if (!mr) setup_error("ibv_reg_mr again");
      mrs.push_back(mr);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
    for (std::thread &t : writers) t.join();
    if (forker.joinable()) forker.join();
    for (uint64_t r : reverted) total_lost += r;
    std::printf("round=%d writes_lost_while_writing=%lu\n", r,
                (unsigned long)(reverted[0] + reverted[1]));
    for (size_t k = 0; k < bufs.size(); k++) {
      Buffer &b = bufs[k];
      // What the NIC sees, read back through it, next to what the program sees.
      std::vector<uint8_t> seen(b.len);
      ibv_mr *out = ibv_reg_mr(l.pd, seen.data(), seen.size(), IBV_ACCESS_LOCAL_WRITE);
      if (!out || !rdma_read(l, mrs[k], out)) setup_error("RDMA READ back");
      uint64_t checked = 0, lost = 0, nic = 0;
      for (int w = 0; w < kWriters; w++)
        for (size_t i = 0; i < b.words[w].size(); i++) {
          checked++;
          if (*b.words[w][i] != b.last[w][i]) lost++;
          uint64_t v;
          std::memcpy(&v, seen.data() + (reinterpret_cast<uint8_t *>(b.words[w][i]) - b.addr), 8);
          if (v != b.last[w][i]) nic++;
        }
      std::printf("round=%d kind=%s words=%lu lost=%lu nic_differs=%lu\n", r, b.kind,
                  (unsigned long)checked, (unsigned long)lost, (unsigned long)nic);
      total_checked += checked;
      total_lost += lost;
      nic_lost += nic;
      ibv_dereg_mr(out);
      ibv_dereg_mr(mrs[k]);
      free_buffer(b);
    }
  }
  std::printf("words_checked=%lu lost=%lu nic_differs=%lu forks=%lu\n",
              (unsigned long)total_checked, (unsigned long)total_lost, (unsigned long)nic_lost,
              (unsigned long)forked);
  return total_lost || nic_lost ? 1 : 0;
}
