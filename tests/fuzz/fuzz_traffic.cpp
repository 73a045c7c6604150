// fuzz_traffic: the valid traffic that runs through vrnic while packet_fuzz attacks the
// server's vrnicd (tests/integration/70_fuzz.sh). One RC connection between a server and a
// client, each on its own vrnicd ($VRNIC_SOCKET), set up over TCP; every byte checked:
//
//   client, per iteration: RDMA WRITE of a seeded pattern (1 B .. 256 KiB, so up to 256
//   packets at MTU 1024) into the server's memory, RDMA READ of it back, compared byte for
//   byte; a SEND (16 B .. 64 KiB) whose bytes the server checks; FETCH_AND_ADD and
//   CMP_AND_SWP on a counter whose every original value is predicted; every fourth
//   iteration a WRITE WITH IMMEDIATE whose immediates the server checks arrive in order.
//   Every completion must be IBV_WC_SUCCESS (within 30 s: retransmissions are fine).
//
//   server: prints "qpn=N" (the fuzzer is told to spare it: wrong ICRCs only), serves until
//   the client's final SEND, then reports over TCP whether every message was intact.
//
// The client runs until --stop-file exists (the fuzzer is done) or --max-seconds pass, then
// prints key=value lines (iterations=..., bytes_verified=...). Exit 0 only if everything
// was right on both sides.
//
//   fuzz_traffic server --port TCP_PORT
//   fuzz_traffic client --server 127.0.0.1 --port TCP_PORT [--stop-file F] [--max-seconds N]
//                       [--seed N]
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kArea = 2 << 20;  // the server's WRITE/READ target
constexpr size_t kMaxWrite = 256 << 10;
constexpr size_t kMaxSend = 64 << 10;
constexpr uint32_t kRecvs = 64;           // server receive WQEs kept posted
constexpr uint32_t kMagic = 0x7a66757aU;  // "zfuz"
constexpr int kCompletionTimeoutS = 30;

[[noreturn]] void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "fuzz_traffic: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::exit(1);
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill_pattern(uint8_t *p, size_t n, uint64_t seed) {
  uint64_t s = mix(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s = mix(s);
    std::memcpy(p + i, &s, 8);
  }
  s = mix(s);
  for (; i < n; i++) p[i] = uint8_t(s >> (8 * (i & 7)));
}

// The first differing offset, or -1.
long first_diff(const uint8_t *a, const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return long(i);
  return -1;
}

struct Info {
  uint32_t qpn, psn, rkey, pad;
  uint64_t addr;
  uint8_t gid[16];
};

struct SendHeader {  // at the start of every SEND
  uint32_t magic;
  uint32_t kind;  // 1 data, 2 done
  uint64_t seq;
  uint64_t len;   // data: bytes of the message; done: SENDs before this one
  uint64_t imms;  // done: WRITE WITH IMMEDIATEs sent
};

struct Result {  // server -> client at the end, over TCP
  uint64_t errors, sends, imms;
};

bool write_full(int fd, const void *p, size_t n) {
  auto *b = static_cast<const uint8_t *>(p);
  while (n) {
    ssize_t r = ::write(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}

bool read_full(int fd, void *p, size_t n, int timeout_ms) {
  auto *b = static_cast<uint8_t *>(p);
  while (n) {
    pollfd pfd{fd, POLLIN, 0};
    int pr = ::poll(&pfd, 1, timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    ssize_t r = ::read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}

struct Rdma {
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  ibv_gid gid{};
};

void open_rdma(Rdma &r) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device (VRNIC_SOCKET=%s)", std::getenv("VRNIC_SOCKET") ?: "");
  r.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!r.ctx) die("ibv_open_device failed");
  if (ibv_query_gid(r.ctx, 1, 0, &r.gid)) die("ibv_query_gid failed");
  r.pd = ibv_alloc_pd(r.ctx);
  r.cq = ibv_create_cq(r.ctx, 1024, nullptr, nullptr, 0);
  if (!r.pd || !r.cq) die("ibv_alloc_pd/ibv_create_cq failed");
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = r.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 64;
  ia.cap.max_recv_wr = kRecvs;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  r.qp = ibv_create_qp(r.pd, &ia);
  if (!r.qp) die("ibv_create_qp failed");
}

void connect_qp(Rdma &r, const Info &peer, uint32_t my_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(r.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify to INIT failed");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(r.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify to RTR failed");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = my_psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  if (ibv_modify_qp(r.qp, &a,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify to RTS failed");
}

// One completion, polled gently (the machine has two cores shared by everything).
bool poll_one(ibv_cq *cq, ibv_wc *wc, double deadline) {
  unsigned idle = 0;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) die("ibv_poll_cq failed");
    if (n == 1) return true;
    if (++idle < 64) continue;
    if (now_s() > deadline) return false;
    if (idle < 2000) {
      sched_yield();
    } else {
      usleep(50);
    }
  }
}

void destroy(Rdma &r, std::vector<ibv_mr *> mrs) {
  if (r.qp) ibv_destroy_qp(r.qp);
  for (ibv_mr *mr : mrs)
    if (mr) ibv_dereg_mr(mr);
  if (r.cq) ibv_destroy_cq(r.cq);
  if (r.pd) ibv_dealloc_pd(r.pd);
  if (r.ctx) ibv_close_device(r.ctx);
}

ibv_mr *reg(Rdma &r, void *p, size_t n) {
  ibv_mr *mr = ibv_reg_mr(r.pd, p, n,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  if (!mr) die("ibv_reg_mr failed");
  return mr;
}

uint8_t *alloc(size_t n) {
  void *p = std::aligned_alloc(4096, n);
  if (!p) die("out of memory");
  std::memset(p, 0, n);
  return static_cast<uint8_t *>(p);
}

// ---------------------------------------------------------------------------------------------
int server(uint16_t tcp_port) {
  Rdma r;
  open_rdma(r);
  uint8_t *area = alloc(kArea + 4096);  // counter word at 0, WRITE/READ area after 4096
  uint8_t *recv_buf = alloc(kRecvs * kMaxSend);
  ibv_mr *area_mr = reg(r, area, kArea + 4096);
  ibv_mr *recv_mr = reg(r, recv_buf, kRecvs * kMaxSend);
  std::printf("qpn=%u\n", r.qp->qp_num);
  std::fflush(stdout);

  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(tcp_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(ls, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) < 0 || ::listen(ls, 1) < 0)
    die("listen on TCP port %u: %s", tcp_port, std::strerror(errno));
  pollfd pfd{ls, POLLIN, 0};
  if (::poll(&pfd, 1, 60000) != 1) die("no client within 60 s");
  int fd = ::accept(ls, nullptr, nullptr);
  if (fd < 0) die("accept: %s", std::strerror(errno));
  ::close(ls);

  Info mine{r.qp->qp_num, 0x123456, area_mr->rkey, 0, reinterpret_cast<uintptr_t>(area), {}};
  std::memcpy(mine.gid, r.gid.raw, 16);
  Info peer{};
  if (!write_full(fd, &mine, sizeof(mine)) || !read_full(fd, &peer, sizeof(peer), 30000))
    die("exchanging connection data failed");
  connect_qp(r, peer, mine.psn);
  auto post = [&](uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_buf + size_t(slot) * kMaxSend), uint32_t(kMaxSend),
                recv_mr->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(r.qp, &wr, &bad)) die("ibv_post_recv failed");
  };
  for (uint32_t i = 0; i < kRecvs; i++) post(i);
  if (!write_full(fd, "R", 1)) die("telling the client we are ready failed");

  uint64_t errors = 0, sends = 0, imms = 0, expect_seq = 0;
  std::vector<uint8_t> expect(kMaxSend);
  bool done = false;
  double last_heard = now_s();
  while (!done) {
    ibv_wc wc;
    if (!poll_one(r.cq, &wc, now_s() + 1)) {
      // Nothing for a while: is the client still there?
      pollfd cp{fd, POLLIN, 0};
      if (::poll(&cp, 1, 0) == 1) die("the client went away before its final SEND");
      if (now_s() - last_heard > 600) die("nothing from the client for 600 s");
      continue;
    }
    last_heard = now_s();
    if (wc.status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "fuzz_traffic server: completion failed: %s (wr_id %" PRIu64 ")\n",
                   ibv_wc_status_str(wc.status), uint64_t(wc.wr_id));
      errors++;
      break;
    }
    uint32_t slot = uint32_t(wc.wr_id);
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      uint32_t imm = ntohl(wc.imm_data);
      if (imm != uint32_t(imms)) {
        std::fprintf(stderr, "fuzz_traffic server: immediate %u, expected %" PRIu64 "\n", imm,
                     imms);
        errors++;
      }
      imms++;
    } else if (wc.opcode == IBV_WC_RECV) {
      const uint8_t *m = recv_buf + size_t(slot) * kMaxSend;
      SendHeader h;
      std::memcpy(&h, m, sizeof(h));
      if (wc.byte_len < sizeof(h) || h.magic != kMagic) {
        std::fprintf(stderr,
                     "fuzz_traffic server: SEND %" PRIu64 " without our header (%u bytes)\n", sends,
                     wc.byte_len);
        errors++;
      } else if (h.kind == 2) {
        if (h.len != sends || h.imms != imms) {
          std::fprintf(stderr,
                       "fuzz_traffic server: client sent %" PRIu64 " SENDs and %" PRIu64
                       " immediates, %" PRIu64 " and %" PRIu64 " arrived\n",
                       h.len, h.imms, sends, imms);
          errors++;
        }
        done = true;
      } else if (h.seq != expect_seq || h.len != wc.byte_len) {
        std::fprintf(stderr,
                     "fuzz_traffic server: SEND seq %" PRIu64 " len %" PRIu64
                     " (expected seq %" PRIu64 ", %u bytes arrived)\n",
                     h.seq, h.len, expect_seq, wc.byte_len);
        errors++;
      } else {
        size_t body = wc.byte_len - sizeof(h);
        fill_pattern(expect.data(), body, h.seq * 7919 + 1);
        long d = first_diff(m + sizeof(h), expect.data(), body);
        if (d >= 0) {
          std::fprintf(stderr,
                       "fuzz_traffic server: SEND seq %" PRIu64 ": byte %ld of %zu differs\n",
                       h.seq, d, body);
          errors++;
        }
      }
      expect_seq++;
      sends++;
    } else {
      std::fprintf(stderr, "fuzz_traffic server: unexpected completion opcode %d\n",
                   int(wc.opcode));
      errors++;
    }
    if (!done) post(slot);
  }
  // The final SEND itself is counted in sends; report the data SENDs only.
  Result res{errors, sends ? sends - 1 : 0, imms};
  write_full(fd, &res, sizeof(res));
  char c;
  read_full(fd, &c, 1, 10000);  // the client's goodbye (or EOF)
  ::close(fd);
  std::printf("server_sends=%" PRIu64 "\nserver_imms=%" PRIu64 "\nserver_errors=%" PRIu64 "\n",
              res.sends, imms, errors);
  destroy(r, {area_mr, recv_mr});
  std::free(area);
  std::free(recv_buf);
  return errors ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
struct Client {
  Rdma r;
  Info peer{};
  uint64_t next_wr = 1;

  ibv_wc run(ibv_send_wr &wr, const char *what, uint64_t iter) {
    wr.wr_id = next_wr++;
    wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr *bad;
    if (int e = ibv_post_send(r.qp, &wr, &bad))
      die("iteration %" PRIu64 ": posting %s: %s", iter, what, std::strerror(e));
    ibv_wc wc;
    if (!poll_one(r.cq, &wc, now_s() + kCompletionTimeoutS))
      die("iteration %" PRIu64 ": no completion for %s within %d s", iter, what,
          kCompletionTimeoutS);
    if (wc.status != IBV_WC_SUCCESS)
      die("iteration %" PRIu64 ": %s completed with %s (vendor_err %u)", iter, what,
          ibv_wc_status_str(wc.status), wc.vendor_err);
    if (wc.wr_id != wr.wr_id)
      die("iteration %" PRIu64 ": completion for wr %" PRIu64 ", expected %" PRIu64, iter,
          uint64_t(wc.wr_id), uint64_t(wr.wr_id));
    return wc;
  }
};

bool file_exists(const std::string &p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0;
}

int client(const std::string &host, uint16_t tcp_port, const std::string &stop_file,
           double max_seconds, uint64_t seed) {
  Client c;
  open_rdma(c.r);
  uint8_t *src = alloc(kMaxWrite), *dst = alloc(kMaxWrite), *msg = alloc(kMaxSend),
          *word = alloc(4096);
  ibv_mr *src_mr = reg(c.r, src, kMaxWrite), *dst_mr = reg(c.r, dst, kMaxWrite),
         *msg_mr = reg(c.r, msg, kMaxSend), *word_mr = reg(c.r, word, 4096);

  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(tcp_port);
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) die("--server: not an IPv4 address");
  bool connected = false;
  for (int i = 0; i < 200 && !connected; i++) {
    connected = ::connect(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) == 0;
    if (!connected) usleep(50000);
  }
  if (!connected) die("cannot connect to %s:%u", host.c_str(), tcp_port);
  Info mine{c.r.qp->qp_num, 0xabcdef, 0, 0, 0, {}};
  std::memcpy(mine.gid, c.r.gid.raw, 16);
  if (!write_full(fd, &mine, sizeof(mine)) || !read_full(fd, &c.peer, sizeof(c.peer), 30000))
    die("exchanging connection data failed");
  connect_qp(c.r, c.peer, mine.psn);
  char ready;
  if (!read_full(fd, &ready, 1, 30000)) die("the server did not get ready");

  uint64_t iter = 0, written = 0, verified = 0, sends = 0, imms = 0, atomics = 0;
  uint64_t counter = 0;  // the server's counter word, as it must be
  double start = now_s();
  uint64_t rng = mix(seed);
  auto rand_below = [&](uint64_t n) {
    rng = mix(rng);
    return n ? rng % n : 0;
  };
  const uint64_t area = c.peer.addr + 4096;
  while (!file_exists(stop_file) && now_s() - start < max_seconds) {
    // WRITE a pattern, READ it back, compare.
    size_t len = 1 + rand_below(rand_below(4) == 0 ? kMaxWrite : 8192);
    uint64_t off = rand_below(kArea - len + 1);
    uint64_t pat = seed * 1000003 + iter;
    fill_pattern(src, len, pat);
    ibv_sge sge{reinterpret_cast<uintptr_t>(src), uint32_t(len), src_mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = area + off;
    wr.wr.rdma.rkey = c.peer.rkey;
    c.run(wr, "RDMA WRITE", iter);
    written += len;
    std::memset(dst, 0, len);
    sge = {reinterpret_cast<uintptr_t>(dst), uint32_t(len), dst_mr->lkey};
    wr = {};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.wr.rdma.remote_addr = area + off;
    wr.wr.rdma.rkey = c.peer.rkey;
    ibv_wc wc = c.run(wr, "RDMA READ", iter);
    if (wc.byte_len != len)
      die("iteration %" PRIu64 ": READ of %zu bytes completed with byte_len %u", iter, len,
          wc.byte_len);
    if (long d = first_diff(dst, src, len); d >= 0)
      die("iteration %" PRIu64 ": READ back %zu bytes at offset %" PRIu64
          ": byte %ld differs (0x%02x, wrote 0x%02x)",
          iter, len, off, d, dst[d], src[d]);
    verified += len;

    // SEND: header and pattern, checked by the server.
    size_t mlen =
        sizeof(SendHeader) + rand_below(rand_below(4) == 0 ? kMaxSend - sizeof(SendHeader) : 4096);
    SendHeader h{kMagic, 1, sends, mlen, 0};
    std::memcpy(msg, &h, sizeof(h));
    fill_pattern(msg + sizeof(h), mlen - sizeof(h), sends * 7919 + 1);
    sge = {reinterpret_cast<uintptr_t>(msg), uint32_t(mlen), msg_mr->lkey};
    wr = {};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    c.run(wr, "SEND", iter);
    sends++;

    // Atomics on the counter word: every original value is known.
    uint64_t add = iter + 1;
    sge = {reinterpret_cast<uintptr_t>(word), 8, word_mr->lkey};
    wr = {};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = c.peer.addr;
    wr.wr.atomic.rkey = c.peer.rkey;
    wr.wr.atomic.compare_add = add;
    c.run(wr, "FETCH_AND_ADD", iter);
    uint64_t orig;
    std::memcpy(&orig, word, 8);
    if (orig != counter)
      die("iteration %" PRIu64 ": FETCH_AND_ADD returned %" PRIu64 ", expected %" PRIu64, iter,
          orig, counter);
    counter += add;
    uint64_t swap = counter ^ 0xa5a5a5a5a5a5a5a5ull;
    wr = {};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.remote_addr = c.peer.addr;
    wr.wr.atomic.rkey = c.peer.rkey;
    wr.wr.atomic.compare_add = counter;
    wr.wr.atomic.swap = swap;
    c.run(wr, "CMP_AND_SWP", iter);
    std::memcpy(&orig, word, 8);
    if (orig != counter)
      die("iteration %" PRIu64 ": CMP_AND_SWP returned %" PRIu64 ", expected %" PRIu64, iter, orig,
          counter);
    counter = swap;
    atomics += 2;

    if (iter % 4 == 3) {  // WRITE WITH IMMEDIATE: the server checks the order of immediates
      size_t ilen = 1 + rand_below(4096);
      sge = {reinterpret_cast<uintptr_t>(src), uint32_t(ilen), src_mr->lkey};
      wr = {};
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(uint32_t(imms));
      wr.wr.rdma.remote_addr = area + rand_below(kArea - ilen + 1);
      wr.wr.rdma.rkey = c.peer.rkey;
      c.run(wr, "RDMA WRITE WITH IMM", iter);
      imms++;
    }
    iter++;
  }
  double secs = now_s() - start;
  bool stopped = file_exists(stop_file);
  // The final SEND: how many the server should have seen.
  SendHeader h{kMagic, 2, sends, sends, imms};
  std::memcpy(msg, &h, sizeof(h));
  ibv_sge sge{reinterpret_cast<uintptr_t>(msg), uint32_t(sizeof(h)), msg_mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  c.run(wr, "the final SEND", iter);
  Result res{};
  if (!read_full(fd, &res, sizeof(res), 30000)) die("no result from the server");
  write_full(fd, "B", 1);
  ::close(fd);
  std::printf("iterations=%" PRIu64 "\nbytes_written=%" PRIu64 "\nbytes_read_verified=%" PRIu64
              "\nsends=%" PRIu64 "\nwrite_imms=%" PRIu64 "\natomics=%" PRIu64
              "\nseconds=%.1f\n"
              "stopped_by=%s\nserver_errors=%" PRIu64 "\n",
              iter, written, verified, sends, imms, atomics, secs,
              stopped ? "stop-file" : "max-seconds", res.errors);
  destroy(c.r, {src_mr, dst_mr, msg_mr, word_mr});
  std::free(src);
  std::free(dst);
  std::free(msg);
  std::free(word);
  if (res.errors || res.sends != sends || res.imms != imms) {
    std::fprintf(stderr,
                 "fuzz_traffic: the server found %" PRIu64 " errors (%" PRIu64 "/%" PRIu64
                 " SENDs, %" PRIu64 "/%" PRIu64 " immediates)\n",
                 res.errors, res.sends, sends, res.imms, imms);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: fuzz_traffic server --port P | client --server ADDR --port P "
                 "[--stop-file F] [--max-seconds N] [--seed N]\n");
    return 2;
  }
  std::string mode = argv[1], host = "127.0.0.1", stop_file;
  unsigned long port = 0;
  double max_seconds = 120;
  uint64_t seed = 1;
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 >= argc) die("%s needs a value", a.c_str());
    const char *v = argv[++i];
    if (a == "--port")
      port = std::strtoul(v, nullptr, 10);
    else if (a == "--server")
      host = v;
    else if (a == "--stop-file")
      stop_file = v;
    else if (a == "--max-seconds")
      max_seconds = std::strtod(v, nullptr);
    else if (a == "--seed")
      seed = std::strtoull(v, nullptr, 0);
    else
      die("unknown argument %s", a.c_str());
  }
  if (port == 0 || port > 65535) die("--port is required");
  if (mode == "server") return server(uint16_t(port));
  if (mode == "client") return client(host, uint16_t(port), stop_file, max_seconds, seed);
  die("mode must be server or client");
}
