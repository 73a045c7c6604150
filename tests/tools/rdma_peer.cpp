// rdma_peer: one end of an RC connection that checks every byte and every completion, for
// tests where the other end is a different RDMA stack (vrnic against the kernel's rdma_rxe in
// a VM). A plain verbs program: it links the system's libibverbs like perftest does, so it runs
// on vrnic through LD_LIBRARY_PATH and on any kernel device as it is.
//
// The client is the requester of every operation, the server its responder: for each message
// size it posts `depth` WRs at once of each kind -- RDMA WRITE, WRITE with immediate, RDMA
// READ, SEND, SEND with immediate -- then a chain of fetch-and-adds and compare-and-swaps on
// one word. Between operations the two talk over their TCP connection (one text line each
// way): the server poisons, fills and checks its memory when the client asks, posts receives
// and checks their completions. Every completion must be IBV_WC_SUCCESS with the opcode, wr_id
// order, length and immediate the operation implies; every byte at its destination must be
// the sender's pattern and the bytes after it the poison put there before (nothing written
// past the end); every atomic must return the value its place in the chain implies.
//
// usage: rdma_peer --dev NAME [--gid-index N] [--port TCP] [--connect HOST]
//                  [--max-size BYTES] [--depth N] [--timeout-s S]
// Prints one line per size and operation, "PASS: ..." at the end and exits 0 when every check
// held; "FAIL: ..." and exit 1 otherwise; 2 on bad usage.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr uint8_t kPoison = 0x5a;
constexpr size_t kGuardBytes = 64;
constexpr uint8_t kPort = 1;

[[noreturn]] void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::printf("FAIL: ");
  std::vprintf(fmt, ap);
  std::printf("\n");
  va_end(ap);
  std::fflush(stdout);
  std::exit(1);
}

uint8_t pattern_byte(uint32_t seed, size_t i) {
  uint32_t x = seed * 2654435761u + uint32_t(i) * 40503u + uint32_t(i >> 16);
  return uint8_t(x >> 13 ^ x);
}

struct Options {
  const char *dev = nullptr;
  int gid_index = 0;
  int port = 18515;
  const char *connect = nullptr;
  size_t max_size = 1 << 20;
  int depth = 4;
  int timeout_s = 60;
};

// ---- The TCP side channel: one text line at a time ----

class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  void send(const std::string &line) {
    std::string l = line + "\n";
    for (size_t off = 0; off < l.size();) {
      ssize_t n = ::write(fd_, l.data() + off, l.size() - off);
      if (n <= 0) die("side channel: write: %s", std::strerror(errno));
      off += size_t(n);
    }
  }
  std::string receive() {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      char tmp[4096];
      ssize_t n = ::read(fd_, tmp, sizeof(tmp));
      if (n <= 0)
        die("side channel: the peer closed it or failed (%s)", n ? std::strerror(errno) : "EOF");
      buf_.append(tmp, size_t(n));
    }
  }

 private:
  int fd_;
  std::string buf_;
};

int tcp_connect(const char *host, int port) {
  addrinfo hints{}, *res;
  hints.ai_socktype = SOCK_STREAM;
  std::string p = std::to_string(port);
  if (getaddrinfo(host, p.c_str(), &hints, &res) != 0) die("cannot resolve %s", host);
  for (int attempt = 0; attempt < 300; attempt++) {  // the server may not listen yet
    int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    if (fd >= 0) ::close(fd);
    usleep(100000);
  }
  die("cannot connect to %s:%d", host, port);
}

int tcp_accept(int port) {
  int ls = ::socket(AF_INET6, SOCK_STREAM, 0);
  int one = 1, zero = 0;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(uint16_t(port));
  if (::bind(ls, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) < 0 || ::listen(ls, 1) < 0)
    die("cannot listen on TCP port %d: %s", port, std::strerror(errno));
  std::printf("listening on TCP port %d\n", port);
  std::fflush(stdout);
  int fd = ::accept(ls, nullptr, nullptr);
  if (fd < 0) die("accept: %s", std::strerror(errno));
  ::close(ls);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// ---- The verbs side ----

struct Endpoint {
  uint32_t qpn, psn, rkey, mtu, rd_atomic;
  uint64_t addr;
  uint8_t gid[16];
};

std::string endpoint_line(const Endpoint &e) {
  char s[256];
  int n = std::snprintf(s, sizeof(s), "%u %u %u %u %u %" PRIu64 " ", e.qpn, e.psn, e.rkey, e.mtu,
                        e.rd_atomic, e.addr);
  for (uint8_t b : e.gid) n += std::snprintf(s + n, sizeof(s) - size_t(n), "%02x", b);
  return s;
}

Endpoint parse_endpoint(const std::string &line) {
  Endpoint e{};
  char gid[33] = {};
  if (std::sscanf(line.c_str(), "%u %u %u %u %u %" SCNu64 " %32s", &e.qpn, &e.psn, &e.rkey, &e.mtu,
                  &e.rd_atomic, &e.addr, gid) != 7 ||
      std::strlen(gid) != 32)
    die("bad endpoint line from the peer: '%s'", line.c_str());
  for (int i = 0; i < 16; i++)
    e.gid[i] = uint8_t(std::strtoul(std::string(gid + 2 * i, 2).c_str(), nullptr, 16));
  return e;
}

const char *opcode_name(ibv_wc_opcode op) {
  switch (op) {
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "RDMA_READ";
    case IBV_WC_COMP_SWAP:
      return "COMP_SWAP";
    case IBV_WC_FETCH_ADD:
      return "FETCH_ADD";
    case IBV_WC_RECV:
      return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
    default:
      return "other";
  }
}

class Peer {
 public:
  Peer(const Options &o, bool server) : opt_(o), server_(server) {
    slot_ = o.max_size + kGuardBytes;
    bytes_ = slot_ * size_t(o.depth) + 64;  // + the atomic word
    open();
  }

  Endpoint local() const { return local_; }

  void connect(const Endpoint &remote) {
    remote_ = remote;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = kPort;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("modify_qp INIT: %s", std::strerror(errno));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    const ibv_mtu mtu = ibv_mtu(std::min(local_.mtu, remote.mtu));
    a.path_mtu = mtu;
    a.dest_qp_num = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = uint8_t(local_.rd_atomic);
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
    a.ah_attr.grh.sgid_index = uint8_t(opt_.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = kPort;
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("modify_qp RTR: %s", std::strerror(errno));
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = local_.psn;
    a.max_rd_atomic = uint8_t(std::min(local_.rd_atomic, remote.rd_atomic));
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      die("modify_qp RTS: %s", std::strerror(errno));
    std::printf("connected: local QPN %u, remote QPN %u, path MTU %u\n", local_.qpn, remote.qpn,
                128u << mtu);
  }

  uint8_t *slot(int i) { return buf_ + size_t(i) * slot_; }
  uint64_t remote_slot(int i) const { return remote_.addr + uint64_t(i) * slot_; }
  uint64_t *atomic_word() {
    return reinterpret_cast<uint64_t *>(buf_ + slot_ * size_t(opt_.depth));
  }
  uint64_t remote_atomic_word() const { return remote_.addr + slot_ * uint64_t(opt_.depth); }
  size_t slot_bytes() const { return slot_; }

  void fill(int i, size_t len, uint32_t seed) {
    for (size_t k = 0; k < len; k++) slot(i)[k] = pattern_byte(seed, k);
    std::memset(slot(i) + len, kPoison, slot_ - len);
  }
  void poison(int i) { std::memset(slot(i), kPoison, slot_); }
  // Empty when the slot holds `len` bytes of seed's pattern and poison after them.
  std::string check(int i, size_t len, uint32_t seed) {
    for (size_t k = 0; k < len; k++)
      if (slot(i)[k] != pattern_byte(seed, k))
        return "slot " + std::to_string(i) + " byte " + std::to_string(k) + " of " +
               std::to_string(len) + ": " + std::to_string(slot(i)[k]) + ", want " +
               std::to_string(pattern_byte(seed, k));
    for (size_t k = len; k < len + kGuardBytes && k < slot_; k++)
      if (slot(i)[k] != kPoison)
        return "slot " + std::to_string(i) + ": written past its end at " + std::to_string(k);
    return "";
  }

  void post_send(ibv_wr_opcode op, uint64_t wr_id, int i, size_t len, uint64_t remote_addr,
                 uint32_t imm = 0, uint64_t compare_add = 0, uint64_t swap = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(slot(i)), uint32_t(len), mr_->lkey};
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) sge.length = 8;
    ibv_send_wr wr{}, *bad;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = sge.length ? 1 : 0;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = remote_addr;
      wr.wr.atomic.rkey = remote_.rkey;
      wr.wr.atomic.compare_add = compare_add;
      wr.wr.atomic.swap = swap;
    } else {
      wr.wr.rdma.remote_addr = remote_addr;
      wr.wr.rdma.rkey = remote_.rkey;
    }
    if (int rc = ibv_post_send(qp_, &wr, &bad)) die("ibv_post_send: %s", std::strerror(rc));
  }

  void post_recv(uint64_t wr_id, int i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(slot(i)), uint32_t(opt_.max_size), mr_->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (int rc = ibv_post_recv(qp_, &wr, &bad)) die("ibv_post_recv: %s", std::strerror(rc));
  }

  // The next completion of either queue, within the timeout.
  ibv_wc poll(const char *what) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt_.timeout_s);
    ibv_wc wc;
    for (;;) {
      int n = ibv_poll_cq(cq_, 1, &wc);
      if (n < 0) die("ibv_poll_cq failed");
      if (n == 1) return wc;
      if (std::chrono::steady_clock::now() > deadline)
        die("%s: no completion within %d s", what, opt_.timeout_s);
    }
  }

  // A completion with the status, opcode and wr_id wanted.
  ibv_wc expect(const char *what, ibv_wc_opcode op, uint64_t wr_id) {
    ibv_wc wc = poll(what);
    if (wc.status != IBV_WC_SUCCESS)
      die("%s: wr_id %" PRIu64 " completed with %s (vendor_err %u)", what, wc.wr_id,
          ibv_wc_status_str(wc.status), wc.vendor_err);
    if (wc.opcode != op)
      die("%s: opcode %s, want %s", what, opcode_name(wc.opcode), opcode_name(op));
    if (wc.wr_id != wr_id)
      die("%s: wr_id %" PRIu64 ", want %" PRIu64 " (out of order)", what, wc.wr_id, wr_id);
    return wc;
  }

 private:
  void open() {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    ibv_device *dev = nullptr;
    for (int i = 0; i < n; i++)
      if (!std::strcmp(ibv_get_device_name(list[i]), opt_.dev)) dev = list[i];
    if (!dev) die("no device %s", opt_.dev);
    ctx_ = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (!ctx_) die("ibv_open_device(%s): %s", opt_.dev, std::strerror(errno));
    ibv_device_attr da;
    ibv_port_attr pa;
    if (ibv_query_device(ctx_, &da) || ibv_query_port(ctx_, kPort, &pa)) die("query device/port");
    ibv_gid gid;
    if (ibv_query_gid(ctx_, kPort, opt_.gid_index, &gid)) die("ibv_query_gid %d", opt_.gid_index);
    pd_ = ibv_alloc_pd(ctx_);
    cq_ = ibv_create_cq(ctx_, 4 * opt_.depth + 16, nullptr, nullptr, 0);
    buf_ = static_cast<uint8_t *>(
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (!pd_ || !cq_ || buf_ == MAP_FAILED) die("PD, CQ or buffer");
    mr_ = ibv_reg_mr(pd_, buf_, bytes_,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr_) die("ibv_reg_mr: %s", std::strerror(errno));
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = uint32_t(2 * opt_.depth + 8);
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp_ = ibv_create_qp(pd_, &ia);
    if (!qp_) die("ibv_create_qp: %s", std::strerror(errno));
    local_.qpn = qp_->qp_num;
    local_.psn = uint32_t(getpid() * 7919u + (server_ ? 1 : 2) * 104729u) & 0xffffff;
    local_.rkey = mr_->rkey;
    local_.addr = reinterpret_cast<uint64_t>(buf_);
    local_.mtu = pa.active_mtu;
    local_.rd_atomic = uint32_t(std::min({da.max_qp_rd_atom, da.max_qp_init_rd_atom, int(16)}));
    if (local_.rd_atomic < uint32_t(opt_.depth))
      die("%s allows %u RDMA READs in flight, fewer than --depth %d", opt_.dev, local_.rd_atomic,
          opt_.depth);
    std::memcpy(local_.gid, gid.raw, 16);
  }

  Options opt_;
  bool server_;
  size_t slot_, bytes_;
  ibv_context *ctx_ = nullptr;
  ibv_pd *pd_ = nullptr;
  ibv_cq *cq_ = nullptr;
  ibv_mr *mr_ = nullptr;
  ibv_qp *qp_ = nullptr;
  uint8_t *buf_ = nullptr;
  Endpoint local_{}, remote_{};
};

// ---- The server: does what the client asks, one line at a time ----
//   poison I | fill I LEN SEED | check I LEN SEED | recv I | word VALUE | word? | done
//   completion OPCODE LEN IMM   (the next receive completion: its opcode, byte_len, immediate)
void serve(Peer &p, Channel &ch) {
  uint64_t next_recv = 0, next_done = 0;
  for (;;) {
    std::string line = ch.receive();
    char cmd[32] = {};
    unsigned long long a = 0, b = 0, c = 0;
    std::sscanf(line.c_str(), "%31s %llu %llu %llu", cmd, &a, &b, &c);
    std::string reply = "ok";
    if (!std::strcmp(cmd, "poison")) {
      p.poison(int(a));
    } else if (!std::strcmp(cmd, "fill")) {
      p.fill(int(a), b, uint32_t(c));
    } else if (!std::strcmp(cmd, "check")) {
      std::string err = p.check(int(a), b, uint32_t(c));
      if (!err.empty()) reply = "FAIL " + err;
    } else if (!std::strcmp(cmd, "recv")) {
      p.poison(int(a));
      p.post_recv(next_recv++, int(a));
    } else if (!std::strcmp(cmd, "completion")) {
      ibv_wc wc = p.expect("receive", ibv_wc_opcode(a), next_done++);
      if (wc.byte_len != b)
        reply =
            "FAIL receive byte_len " + std::to_string(wc.byte_len) + ", want " + std::to_string(b);
      else if (a == IBV_WC_RECV_RDMA_WITH_IMM || (wc.wc_flags & IBV_WC_WITH_IMM) || c)
        if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != c)
          reply = "FAIL receive immediate " + std::to_string(ntohl(wc.imm_data)) + " (flags " +
                  std::to_string(wc.wc_flags) + "), want " + std::to_string(c);
    } else if (!std::strcmp(cmd, "word")) {
      *p.atomic_word() = a;
    } else if (!std::strcmp(cmd, "word?")) {
      reply = "ok " + std::to_string(*p.atomic_word());
    } else if (!std::strcmp(cmd, "done")) {
      ch.send("ok");
      return;
    } else {
      reply = "FAIL unknown command '" + line + "'";
    }
    ch.send(reply);
  }
}

// ---- The client: every operation at every size ----

class Driver {
 public:
  Driver(Peer &p, Channel &ch, const Options &o) : p_(p), ch_(ch), opt_(o) {}

  void ask(const std::string &line) {
    ch_.send(line);
    std::string r = ch_.receive();
    if (r.rfind("ok", 0) != 0) die("server, on '%s': %s", line.c_str(), r.c_str());
    last_reply_ = r;
  }

  void writes(size_t len, bool with_imm) {
    const char *what = with_imm ? "RDMA WRITE with immediate" : "RDMA WRITE";
    for (int i = 0; i < opt_.depth; i++) {
      if (with_imm) {
        ask("recv " + std::to_string(i));
      } else {
        ask("poison " + std::to_string(i));
      }
      p_.fill(i, len, seed(i));
    }
    for (int i = 0; i < opt_.depth; i++)
      p_.post_send(with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, wr_id_ + uint64_t(i),
                   i, len, p_.remote_slot(i), seed(i));
    for (int i = 0; i < opt_.depth; i++) p_.expect(what, IBV_WC_RDMA_WRITE, wr_id_ + uint64_t(i));
    for (int i = 0; i < opt_.depth; i++) {
      if (with_imm)
        ask("completion " + std::to_string(IBV_WC_RECV_RDMA_WITH_IMM) + " " + std::to_string(len) +
            " " + std::to_string(seed(i)));
      ask("check " + std::to_string(i) + " " + std::to_string(len) + " " + std::to_string(seed(i)));
    }
    finish(what, len);
  }

  void reads(size_t len) {
    for (int i = 0; i < opt_.depth; i++) {
      ask("fill " + std::to_string(i) + " " + std::to_string(len) + " " + std::to_string(seed(i)));
      p_.poison(i);
    }
    for (int i = 0; i < opt_.depth; i++)
      p_.post_send(IBV_WR_RDMA_READ, wr_id_ + uint64_t(i), i, len, p_.remote_slot(i));
    for (int i = 0; i < opt_.depth; i++) {
      p_.expect("RDMA READ", IBV_WC_RDMA_READ, wr_id_ + uint64_t(i));
      std::string err = p_.check(i, len, seed(i));
      if (!err.empty()) die("RDMA READ of %zu bytes: %s", len, err.c_str());
    }
    finish("RDMA READ", len);
  }

  void sends(size_t len, bool with_imm) {
    const char *what = with_imm ? "SEND with immediate" : "SEND";
    for (int i = 0; i < opt_.depth; i++) {
      ask("recv " + std::to_string(i));
      p_.fill(i, len, seed(i));
    }
    for (int i = 0; i < opt_.depth; i++)
      p_.post_send(with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, wr_id_ + uint64_t(i), i, len, 0,
                   seed(i));
    for (int i = 0; i < opt_.depth; i++) p_.expect(what, IBV_WC_SEND, wr_id_ + uint64_t(i));
    for (int i = 0; i < opt_.depth; i++) {
      ask("completion " + std::to_string(IBV_WC_RECV) + " " + std::to_string(len) + " " +
          std::to_string(with_imm ? seed(i) : 0));
      ask("check " + std::to_string(i) + " " + std::to_string(len) + " " + std::to_string(seed(i)));
    }
    finish(what, len);
  }

  // depth fetch-and-adds, then depth compare-and-swaps that succeed and one that must not.
  void atomics(uint32_t round) {
    uint64_t value = 0x0123456789abcdefull + round;
    ask("word " + std::to_string(value));
    for (int i = 0; i < opt_.depth; i++)
      p_.post_send(IBV_WR_ATOMIC_FETCH_AND_ADD, wr_id_ + uint64_t(i), i, 8, p_.remote_atomic_word(),
                   0, uint64_t(i + 1) << 32 | 1);
    for (int i = 0; i < opt_.depth; i++) {
      p_.expect("FETCH_AND_ADD", IBV_WC_FETCH_ADD, wr_id_ + uint64_t(i));
      uint64_t got;
      std::memcpy(&got, p_.slot(i), 8);
      if (got != value)
        die("FETCH_AND_ADD %d returned %#" PRIx64 ", want %#" PRIx64, i, got, value);
      value += uint64_t(i + 1) << 32 | 1;
    }
    wr_id_ += uint64_t(opt_.depth);
    for (int i = 0; i <= opt_.depth; i++) {
      bool must_fail = i == opt_.depth;
      uint64_t compare = must_fail ? value + 1 : value, swap = value * 3 + uint64_t(i);
      p_.post_send(IBV_WR_ATOMIC_CMP_AND_SWP, wr_id_, 0, 8, p_.remote_atomic_word(), 0, compare,
                   swap);
      p_.expect("COMPARE_AND_SWAP", IBV_WC_COMP_SWAP, wr_id_++);
      uint64_t got;
      std::memcpy(&got, p_.slot(0), 8);
      if (got != value)
        die("COMPARE_AND_SWAP %d returned %#" PRIx64 ", want %#" PRIx64, i, got, value);
      if (!must_fail) value = swap;
    }
    ask("word?");
    if (last_reply_ != "ok " + std::to_string(value))
      die("the word after the atomics: server says '%s', want %" PRIu64, last_reply_.c_str(),
          value);
    std::printf("atomics (%d fetch-and-add, %d compare-and-swap): ok\n", opt_.depth,
                opt_.depth + 1);
  }

 private:
  uint32_t seed(int i) const { return uint32_t(wr_id_ * 31 + uint64_t(i)); }
  void finish(const char *what, size_t len) {
    wr_id_ += uint64_t(opt_.depth);
    std::printf("%-26s %8zu bytes x %d: ok\n", what, len, opt_.depth);
    std::fflush(stdout);
  }

  Peer &p_;
  Channel &ch_;
  Options opt_;
  uint64_t wr_id_ = 1;
  std::string last_reply_;
};

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rdma_peer: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](long lo, long hi) {
      const char *v = value();
      char *end;
      long n = std::strtol(v, &end, 0);
      if (*v == '\0' || *end != '\0' || n < lo || n > hi) {
        std::fprintf(stderr, "rdma_peer: bad %s '%s' (%ld..%ld)\n", a.c_str(), v, lo, hi);
        std::exit(2);
      }
      return n;
    };
    if (a == "--dev")
      o.dev = value();
    else if (a == "--gid-index")
      o.gid_index = int(number(0, 255));
    else if (a == "--port")
      o.port = int(number(1, 65535));
    else if (a == "--connect")
      o.connect = value();
    else if (a == "--max-size")
      o.max_size = size_t(number(0, 1 << 30));
    else if (a == "--depth")
      o.depth = int(number(1, 16));
    else if (a == "--timeout-s")
      o.timeout_s = int(number(1, 3600));
    else {
      std::fprintf(stderr,
                   "usage: rdma_peer --dev NAME [--gid-index N] [--port TCP] [--connect HOST]\n"
                   "                 [--max-size BYTES] [--depth N] [--timeout-s S]\n");
      std::exit(2);
    }
  }
  if (!o.dev) {
    std::fprintf(stderr, "rdma_peer: --dev is required\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Options opt = parse(argc, argv);
  bool server = !opt.connect;
  Peer peer(opt, server);
  Channel ch(server ? tcp_accept(opt.port) : tcp_connect(opt.connect, opt.port));
  ch.send(endpoint_line(peer.local()));
  peer.connect(parse_endpoint(ch.receive()));
  if (server) {
    serve(peer, ch);
    std::printf("PASS: served every operation\n");
    return 0;
  }
  Driver d(peer, ch, opt);
  std::vector<size_t> sizes = {0,    1,    7,     64,        1023,   1024,   1025,
                               4096, 4097, 65536, 65536 + 3, 262147, 1 << 20};
  uint32_t round = 0;
  for (size_t len : sizes) {
    if (len > opt.max_size) continue;
    d.writes(len, false);
    d.writes(len, true);
    d.reads(len);
    d.sends(len, false);
    d.sends(len, true);
    d.atomics(round++);
  }
  d.ask("done");
  std::printf(
      "PASS: every operation at every size up to %zu bytes, every byte and completion checked\n",
      opt.max_size);
  return 0;
}
