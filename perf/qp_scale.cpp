// qp_scale: throughput and set-up cost against the number of RC QPs (issue 29), on any verbs
// device, as perftest runs. N QPs connected in pairs on one device (each pair's two ends in
// this process: on vrnic, a loopback through one vrnicd), each with a slice of its own in a
// source and a destination buffer; K WRs kept outstanding per active QP, M of the N active, in
// round-robin or random order; WRITE, SEND or READ. At the end every destination slice is
// compared byte for byte with what its peer sent, and every completion has been counted.
//
// Across two devices (two vrnicd, say), two processes: `qp_scale -L PORT` on one and
// `qp_scale -C HOST:PORT` on the other, the same options on both, exchange their QPs, GIDs and
// buffers over TCP (HOST a loopback address in the tests). Each makes half of the N QPs, QP i
// of one paired with QP i of the other; both ends are active, each moving its slices into the
// other's (or reading the other's), and each compares what landed in its own buffer.
//
// It reports (one CSV line, after a header, on stdout; progress on stderr): the time to create
// the QPs, to connect them to RTS and to destroy them; messages/s and GB/s; this process's
// RSS per QP; and, in the same run, memcpy over the same working set (N slices), the baseline
// once the slices leave the caches.
#include <arpa/inet.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void die(const char *what, int err = errno) {
  std::fprintf(stderr, "qp_scale: %s: %s\n", what, std::strerror(err));
  std::exit(2);
}

struct Options {
  uint32_t qps = 2;
  uint32_t active = 0;  // 0: all
  uint32_t outstanding = 1;
  uint32_t size = 4096;
  double seconds = 2;
  ibv_wr_opcode op = IBV_WR_RDMA_WRITE;
  const char *op_name = "write";
  bool random_order = false;
  const char *device = nullptr;
  bool header = true;
  bool exit_holding = false;  // exit with every object still made (vrnicd reclaims them)
  // Two processes: the listener's port, or the address (HOST:PORT) the other one connects to.
  int listen_port = 0;
  const char *connect_to = nullptr;
  bool two_processes() const { return listen_port || connect_to; }
};

void usage() {
  std::fprintf(stderr,
               "usage: qp_scale [-q QPS] [-a ACTIVE] [-k OUTSTANDING] [-s SIZE] [-t SECONDS]\n"
               "                [-o write|send|read] [-r] [-d DEVICE] [-H] [-X]\n"
               "  -q  RC QPs, connected in pairs (even, 2..65536; default 2)\n"
               "  -a  of them active (default: all)   -k  WRs outstanding per active QP (1)\n"
               "  -s  bytes per WR (4096)              -t  seconds of traffic (2)\n"
               "  -r  random order instead of round robin   -H  no CSV header\n"
               "  -X  exit after the traffic without destroying anything\n"
               "  -L PORT / -C HOST:PORT  two processes, half the QPs each: listen, or connect\n");
}

Options parse(int argc, char **argv) {
  Options o;
  const option longs[] = {{"help", no_argument, nullptr, 'h'}, {}};
  for (int c; (c = getopt_long(argc, argv, "q:a:k:s:t:o:rd:HXL:C:h", longs, nullptr)) != -1;) {
    switch (c) {
      case 'q': o.qps = uint32_t(std::strtoul(optarg, nullptr, 0)); break;
      case 'a': o.active = uint32_t(std::strtoul(optarg, nullptr, 0)); break;
      case 'k': o.outstanding = uint32_t(std::strtoul(optarg, nullptr, 0)); break;
      case 's': o.size = uint32_t(std::strtoul(optarg, nullptr, 0)); break;
      case 't': o.seconds = std::strtod(optarg, nullptr); break;
      case 'r': o.random_order = true; break;
      case 'd': o.device = optarg; break;
      case 'H': o.header = false; break;
      case 'X': o.exit_holding = true; break;
      case 'L': o.listen_port = std::atoi(optarg); break;
      case 'C': o.connect_to = optarg; break;
      case 'o':
        o.op_name = optarg;
        if (!std::strcmp(optarg, "write")) o.op = IBV_WR_RDMA_WRITE;
        else if (!std::strcmp(optarg, "send")) o.op = IBV_WR_SEND;
        else if (!std::strcmp(optarg, "read")) o.op = IBV_WR_RDMA_READ;
        else { usage(); std::exit(2); }
        break;
      case 'h': usage(); std::exit(0);
      default: usage(); std::exit(2);
    }
  }
  if (o.qps < 2 || o.qps % 2 || o.qps > 65536 || o.outstanding < 1 || o.size < 1) {
    usage();
    std::exit(2);
  }
  if (o.listen_port && o.connect_to) {
    usage();
    std::exit(2);
  }
  // Two processes: each runs half the QPs, and counts its own active ones.
  const uint32_t here = o.two_processes() ? o.qps / 2 : o.qps;
  if (!o.active || o.active > here) o.active = here;
  return o;
}

// The byte QP q sends at offset i of its slice: every slice different, every offset checked.
uint8_t pattern(uint32_t q, uint64_t i) { return uint8_t((q * 2654435761u) >> 13 ^ i * 31 ^ i >> 8); }

long rss_kib() {
  long pages = 0, resident = 0;
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (f && std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  if (f) std::fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void write_all(int fd, const void *p, size_t n) {
  for (auto *b = static_cast<const uint8_t *>(p); n;) {
    const ssize_t k = ::write(fd, b, n);
    if (k <= 0) die("writing to the other process", k < 0 ? errno : EPIPE);
    b += k, n -= size_t(k);
  }
}
void read_all(int fd, void *p, size_t n) {
  for (auto *b = static_cast<uint8_t *>(p); n;) {
    const ssize_t k = ::read(fd, b, n);
    if (k <= 0) die("reading from the other process", k < 0 ? errno : EPIPE);
    b += k, n -= size_t(k);
  }
}

// The TCP connection between the two processes (-L / -C).
int join_other_process(const Options &o) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (o.listen_port) {
    const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    a.sin_port = htons(uint16_t(o.listen_port));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (l < 0 || ::bind(l, reinterpret_cast<sockaddr *>(&a), sizeof(a)) || ::listen(l, 1))
      die("listening for the other process");
    std::fprintf(stderr, "qp_scale: waiting on port %d\n", o.listen_port);
    const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) die("accept");
    ::close(l);
    return s;
  }
  std::string host(o.connect_to);
  const size_t colon = host.rfind(':');
  if (colon == std::string::npos) die("-C wants HOST:PORT", EINVAL);
  a.sin_port = htons(uint16_t(std::atoi(host.c_str() + colon + 1)));
  if (::inet_pton(AF_INET, host.substr(0, colon).c_str(), &a.sin_addr) != 1)
    die("-C wants an IPv4 HOST", EINVAL);
  // The listener may not be up yet: try for a while, as perftest's client does not.
  for (int tries = 0;; tries++) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && ::connect(s, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0) return s;
    if (s >= 0) ::close(s);
    if (tries == 200) die("connecting to the other process");
    ::usleep(50'000);
  }
}

// What one process tells the other: where its QPs and buffers are.
struct Endpoint {
  ibv_gid gid;
  uint64_t src, dst;
  uint32_t src_rkey, dst_rkey, count, pad;
};

struct Run {
  Options o;
  // Two processes: this one's side (0 listens, 1 connects), the connection, the other's
  // endpoint and QPNs.
  uint32_t side = 0;
  int sock = -1;
  Endpoint other{};
  std::vector<uint32_t> other_qpns;
  uint32_t count() const { return o.two_processes() ? o.qps / 2 : o.qps; }
  // QP q's number among all N: in two processes, the listener's are the even ones.
  uint32_t global(uint32_t q) const { return o.two_processes() ? 2 * q + side : q; }
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  std::vector<ibv_cq *> cqs;  // one per group of QPs (a CQ holds max_cqe)
  uint32_t qps_per_cq = 0;
  std::vector<ibv_qp *> qps;
  // Page-aligned anonymous mappings, as perftest's buffers are (a verbs device may treat
  // memory that shares pages with the heap differently: vrnic cannot share such pages).
  uint8_t *src = nullptr, *dst = nullptr;
  ibv_mr *src_mr = nullptr, *dst_mr = nullptr;
  ibv_port_attr port{};
  ibv_gid gid{};
  int gid_index = 0;

  // What QP q moves: from its source slice into its peer's destination slice (WRITE, SEND),
  // or from its peer's source slice into its own destination slice (READ).
  uint8_t *slice(uint8_t *b, uint32_t q) { return b + uint64_t(q) * o.size; }
  static uint8_t *buffer(uint64_t bytes) {
    void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap");
    return static_cast<uint8_t *>(p);
  }
  uint32_t peer(uint32_t q) const { return q ^ 1; }
  // Where QP q's WRs go: its peer QP's destination slice (WRITE) or source slice (READ), in
  // this process or the other.
  uint64_t remote_slice(uint32_t q, bool source) {
    if (!o.two_processes()) return uintptr_t(slice(source ? src : dst, peer(q)));
    return (source ? other.src : other.dst) + uint64_t(q) * o.size;
  }
  uint32_t remote_rkey(bool source) const {
    if (!o.two_processes()) return source ? src_mr->rkey : dst_mr->rkey;
    return source ? other.src_rkey : other.dst_rkey;
  }

  // Two processes: each sends its endpoint and QPNs and takes the other's.
  void exchange() {
    sock = join_other_process(o);
    Endpoint mine{gid, uintptr_t(src), uintptr_t(dst), src_mr->rkey, dst_mr->rkey, count(), 0};
    std::vector<uint32_t> qpns;
    for (ibv_qp *qp : qps) qpns.push_back(qp->qp_num);
    write_all(sock, &mine, sizeof(mine));
    write_all(sock, qpns.data(), qpns.size() * sizeof(uint32_t));
    read_all(sock, &other, sizeof(other));
    if (other.count != count()) die("the other process has another QP count", EINVAL);
    other_qpns.resize(other.count);
    read_all(sock, other_qpns.data(), other_qpns.size() * sizeof(uint32_t));
  }
  // Both processes wait here for each other (a no-op in one process).
  void barrier() {
    if (sock < 0) return;
    char c = 1;
    write_all(sock, &c, 1);
    read_all(sock, &c, 1);
  }

  void open() {
    side = o.connect_to ? 1 : 0;
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list || !n) die("no verbs device", ENODEV);
    ibv_device *dev = list[0];
    for (int i = 0; o.device && i < n; i++)
      if (!std::strcmp(ibv_get_device_name(list[i]), o.device)) dev = list[i];
    if (!(ctx = ibv_open_device(dev))) die("ibv_open_device");
    ibv_free_device_list(list);
    if (!(pd = ibv_alloc_pd(ctx))) die("ibv_alloc_pd");
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) || ibv_query_port(ctx, 1, &port)) die("ibv_query_device");
    if (ibv_query_gid(ctx, 1, gid_index, &gid)) die("ibv_query_gid");
    // Each QP's WRs (and its SEND peer's receives) fit its CQ.
    const uint32_t per_qp = 2 * o.outstanding;
    qps_per_cq = std::max<uint32_t>(1, std::min<uint32_t>(count(), uint32_t(attr.max_cqe) / per_qp));
    // Whole pages, as perftest registers them: vrnicd reaches a page an MR covers only in
    // part through process_vm_readv/writev (a system call per access), not shared memory.
    const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
    const uint64_t bytes = (uint64_t(count()) * o.size + page - 1) / page * page;
    src = buffer(bytes);
    dst = buffer(bytes);
    for (uint32_t q = 0; q < count(); q++)
      for (uint32_t i = 0; i < o.size; i++) slice(src, q)[i] = pattern(global(q), i);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (!(src_mr = ibv_reg_mr(pd, src, bytes, access))) die("ibv_reg_mr");
    if (!(dst_mr = ibv_reg_mr(pd, dst, bytes, access))) die("ibv_reg_mr");
  }

  void create() {
    for (uint32_t q = 0; q < count(); q++) {
      if (q % qps_per_cq == 0) {
        ibv_cq *cq = ibv_create_cq(ctx, int(qps_per_cq * 2 * o.outstanding), nullptr, nullptr, 0);
        if (!cq) die("ibv_create_cq");
        cqs.push_back(cq);
      }
      ibv_qp_init_attr ia{};
      ia.send_cq = ia.recv_cq = cqs.back();
      ia.qp_type = IBV_QPT_RC;
      ia.cap.max_send_wr = o.outstanding;
      ia.cap.max_recv_wr = o.op == IBV_WR_SEND ? o.outstanding : 1;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      ibv_qp *qp = ibv_create_qp(pd, &ia);
      if (!qp) die("ibv_create_qp");
      qps.push_back(qp);
      if ((q + 1) % 4096 == 0) std::fprintf(stderr, "qp_scale: %u QPs created\n", q + 1);
    }
  }

  void connect() {
    if (o.two_processes()) exchange();
    for (uint32_t q = 0; q < count(); q++) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
      if (ibv_modify_qp(qps[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                         IBV_QP_ACCESS_FLAGS))
        die("modify to INIT");
      a = {};
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = port.active_mtu;
      a.dest_qp_num = o.two_processes() ? other_qpns[q] : qps[peer(q)]->qp_num;
      a.rq_psn = 0;
      a.max_dest_rd_atomic = 16;
      a.min_rnr_timer = 1;
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = o.two_processes() ? other.gid : gid;
      a.ah_attr.grh.sgid_index = uint8_t(gid_index);
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.port_num = 1;
      if (ibv_modify_qp(qps[q], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("modify to RTR");
      a = {};
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = 0;
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 16;
      if (ibv_modify_qp(qps[q], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_MAX_QP_RD_ATOMIC))
        die("modify to RTS");
      if ((q + 1) % 4096 == 0) std::fprintf(stderr, "qp_scale: %u QPs at RTS\n", q + 1);
    }
    barrier();  // the other's QPs are at RTR before anything is sent to them
  }

  void post_recv(uint32_t q) {
    ibv_sge sge{uintptr_t(slice(dst, q)), o.size, dst_mr->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = q;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (int e = ibv_post_recv(qps[q], &wr, &bad)) die("ibv_post_recv", e);
  }

  void post_send(uint32_t q) {
    const bool read = o.op == IBV_WR_RDMA_READ;
    ibv_sge sge{uintptr_t(read ? slice(dst, q) : slice(src, q)), o.size,
                read ? dst_mr->lkey : src_mr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.wr_id = q;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = o.op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_slice(q, read);
    wr.wr.rdma.rkey = remote_rkey(read);
    if (int e = ibv_post_send(qps[q], &wr, &bad)) die("ibv_post_send", e);
  }

  // K WRs out on each active QP, each completion answered by the next WR on its QP, until the
  // time is up; then what is out drains. Returns the WRs completed; the longest wait for a
  // completion, in microseconds, in *max_gap_us (what a stall of the NIC shows as).
  uint64_t traffic(double *elapsed, double *max_gap_us) {
    std::vector<uint32_t> order(o.active);
    for (uint32_t i = 0; i < o.active; i++) order[i] = i;
    if (o.random_order) std::shuffle(order.begin(), order.end(), std::mt19937(7));
    const bool send = o.op == IBV_WR_SEND;
    // The peers of active QPs receive: in two processes, each of ours (the other's QP i sends
    // to our QP i).
    if (send)
      for (uint32_t q : order)
        for (uint32_t k = 0; k < o.outstanding; k++) post_recv(o.two_processes() ? q : peer(q));
    barrier();  // the receives are posted on both sides
    for (uint32_t k = 0; k < o.outstanding; k++)
      for (uint32_t q : order) post_send(q);
    uint64_t out = uint64_t(o.active) * o.outstanding, done = 0;
    const auto t = Clock::now();
    bool stopping = false;
    ibv_wc wc[64];
    auto last = t;
    *max_gap_us = 0;
    while (out) {
      const auto now = Clock::now();
      if (!stopping && now - t >= std::chrono::duration<double>(o.seconds)) stopping = true;
      for (ibv_cq *cq : cqs) {
        const int n = ibv_poll_cq(cq, 64, wc);
        if (n < 0) die("ibv_poll_cq", EIO);
        if (n > 0) {
          *max_gap_us = std::max(*max_gap_us,
                                 std::chrono::duration<double, std::micro>(now - last).count());
          last = now;
        }
        for (int i = 0; i < n; i++) {
          const uint32_t q = uint32_t(wc[i].wr_id);
          if (wc[i].status != IBV_WC_SUCCESS) {
            std::fprintf(stderr, "qp_scale: QP %u: %s\n", q, ibv_wc_status_str(wc[i].status));
            std::exit(1);
          }
          if (wc[i].opcode == IBV_WC_RECV) {
            post_recv(q);  // always: a SEND still out must find one (rnr_retry 7 waits)
            continue;
          }
          done++;
          if (stopping) {
            out--;
          } else {
            post_send(q);
          }
        }
      }
    }
    *elapsed = since(t);
    // A SEND's peer may still have receives posted; their completions are flushed at destroy.
    return done;
  }

  // Each active QP's last WR has landed whole: the slice it moved equals its source.
  uint64_t verify() {
    uint64_t bad = 0;
    barrier();  // the other's WRs have completed: what they moved here has landed
    if (o.two_processes()) {
      // Our slice q holds what the other's QP q (number 2q + 1 - side) wrote or sent here, or
      // what our QP q read from it.
      for (uint32_t q = 0; q < o.active; q++)
        for (uint32_t i = 0; i < o.size; i++) bad += slice(dst, q)[i] != pattern(2 * q + 1 - side, i);
      return bad;
    }
    for (uint32_t q = 0; q < o.active; q++) {
      const bool read = o.op == IBV_WR_RDMA_READ;
      const uint8_t *got = read ? slice(dst, q) : slice(dst, peer(q));
      for (uint32_t i = 0; i < o.size; i++) bad += got[i] != pattern(read ? peer(q) : q, i);
    }
    return bad;
  }

  void destroy() {
    barrier();  // the other has verified: nothing of ours is still needed
    for (ibv_qp *qp : qps)
      if (ibv_destroy_qp(qp)) die("ibv_destroy_qp");
    for (ibv_cq *cq : cqs)
      if (ibv_destroy_cq(cq)) die("ibv_destroy_cq");
  }
};

// memcpy over the same working set as the traffic (the active slices), in GB/s.
double memcpy_gbps(Run &r, double seconds) {
  const uint64_t bytes = uint64_t(r.o.active) * r.o.size;  // (the buffers hold count() slices)
  uint64_t copied = 0;
  const auto t = Clock::now();
  do {
    std::memcpy(r.dst, r.src, bytes);
    copied += bytes;
  } while (since(t) < seconds);
  return double(copied) / since(t) / 1e9;
}

}  // namespace

int main(int argc, char **argv) {
  Run r;
  r.o = parse(argc, argv);
  r.open();
  const long rss0 = rss_kib();
  auto t = Clock::now();
  r.create();
  const double create_s = since(t);
  t = Clock::now();
  r.connect();
  const double connect_s = since(t);
  const long rss_per_qp_b = (rss_kib() - rss0) * 1024 / long(r.count());
  double elapsed = 0, max_gap_us = 0;
  const uint64_t done = r.traffic(&elapsed, &max_gap_us);
  const uint64_t bad = r.verify();
  const double copy_gbps = memcpy_gbps(r, std::min(1.0, r.o.seconds));
  if (r.o.exit_holding) {
    std::printf("exiting_with_qps=%u bad_bytes=%llu\n", r.o.qps, (unsigned long long)bad);
    return bad || !done ? 1 : 0;
  }
  t = Clock::now();
  r.destroy();
  const double destroy_s = since(t);
  const double msgs = double(done) / elapsed;
  if (r.o.header)
    std::printf("op,qps,active,outstanding,size,order,create_s,connect_s,destroy_s,"
                "msgs_per_s,gbps,memcpy_gbps,ratio_to_memcpy,rss_bytes_per_qp,completions,bad_bytes,max_gap_us\n");
  std::printf("%s,%u,%u,%u,%u,%s,%.3f,%.3f,%.3f,%.0f,%.3f,%.3f,%.4f,%ld,%llu,%llu,%.0f\n", r.o.op_name,
              r.o.qps, r.o.active, r.o.outstanding, r.o.size, r.o.random_order ? "random" : "rr",
              create_s, connect_s, destroy_s, msgs, msgs * r.o.size / 1e9, copy_gbps,
              msgs * r.o.size / 1e9 / copy_gbps, rss_per_qp_b, (unsigned long long)done,
              (unsigned long long)bad, max_gap_us);
  if (bad) std::fprintf(stderr, "qp_scale: %llu bytes differ from what was sent\n",
                        (unsigned long long)bad);
  return bad || !done ? 1 : 0;
}
