// The extended verbs: ibv_create_qp_ex with send_ops_flags and the ibv_wr_* work request API,
// ibv_create_cq_ex and the ibv_start_poll/ibv_next_poll/ibv_end_poll iterator with the
// ibv_wc_read_* functions. Every supported opcode with every data setter, checked byte for
// byte and field by field; the documented failures (errno, nothing posted).
//
// Plain verbs code, linked against build/provider. Needs a running vrnicd (VRNIC_SOCKET):
// device vrnic0, port 1, GID index 0 (RoCEv2, ::ffff:127.0.0.1). Every wait has a deadline.
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;        // longest wait for any expected completion
constexpr auto kQuietWindow = 300ms;  // how long "nothing arrives" is watched
constexpr const char *kDeviceName = "vrnic0";
constexpr uint8_t kPort = 1;
constexpr int kGidIndex = 0;
constexpr uint32_t kPsn = 0x1234;
constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kGrhBytes = 40;

constexpr uint64_t kRcSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_WRITE;
constexpr uint64_t kUcSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
constexpr uint64_t kUdSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
constexpr uint64_t kAllWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS;
constexpr int kQpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr int kMrAccess = kQpAccess;

uint64_t send_ops_for(ibv_qp_type type) {
  return type == IBV_QPT_RC ? kRcSendOps : type == IBV_QPT_UC ? kUcSendOps : kUdSendOps;
}

// ---------------------------------------------------------------------------------------------
// Data patterns

void fill_pattern(uint8_t *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 0x9e3779b9u;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    p[i] = uint8_t(x >> 24);
  }
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

// Empty when equal, else where they differ.
std::string diff_bytes(const uint8_t *actual, const uint8_t *expected, size_t n) {
  size_t count = 0, first = 0, last = 0;
  for (size_t i = 0; i < n; i++) {
    if (actual[i] == expected[i]) continue;
    if (!count++) first = i;
    last = i;
  }
  if (!count) return {};
  std::ostringstream s;
  s << count << " of " << n << " bytes differ, offsets " << first << ".." << last << " (first: got "
    << int(actual[first]) << ", want " << int(expected[first]) << ")";
  return s.str();
}

#define REQUIRE_BYTES(what, actual, expected, n)                     \
  do {                                                               \
    const std::string diff_ = diff_bytes((actual), (expected), (n)); \
    INFO((what) << ": " << diff_);                                   \
    REQUIRE(diff_.empty());                                          \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Owning handles

struct CloseDevice {
  void operator()(ibv_context *c) const { CHECK(ibv_close_device(c) == 0); }
};
struct DeallocPd {
  void operator()(ibv_pd *p) const { CHECK(ibv_dealloc_pd(p) == 0); }
};
struct DestroyCqEx {
  void operator()(ibv_cq_ex *c) const { CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(c)) == 0); }
};
struct DestroyQp {
  void operator()(ibv_qp *q) const { CHECK(ibv_destroy_qp(q) == 0); }
};
struct DestroyAh {
  void operator()(ibv_ah *a) const { CHECK(ibv_destroy_ah(a) == 0); }
};
struct DestroyChannel {
  void operator()(ibv_comp_channel *c) const { CHECK(ibv_destroy_comp_channel(c) == 0); }
};
using ContextPtr = std::unique_ptr<ibv_context, CloseDevice>;
using PdPtr = std::unique_ptr<ibv_pd, DeallocPd>;
using CqExPtr = std::unique_ptr<ibv_cq_ex, DestroyCqEx>;
using QpPtr = std::unique_ptr<ibv_qp, DestroyQp>;
using AhPtr = std::unique_ptr<ibv_ah, DestroyAh>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, DestroyChannel>;

struct Device {
  ContextPtr ctx;
  PdPtr pd;
  ibv_gid gid{};
};

std::unique_ptr<Device> open_device() {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  REQUIRE(list);
  ibv_device *found = nullptr;
  for (int i = 0; i < n; i++)
    if (std::strcmp(ibv_get_device_name(list[i]), kDeviceName) == 0) found = list[i];
  auto d = std::make_unique<Device>();
  if (found) d->ctx.reset(ibv_open_device(found));
  ibv_free_device_list(list);
  INFO("device " << kDeviceName << " (is vrnicd running, VRNIC_SOCKET set?)");
  REQUIRE(d->ctx);
  REQUIRE(ibv_query_gid(d->ctx.get(), kPort, kGidIndex, &d->gid) == 0);
  d->pd.reset(ibv_alloc_pd(d->ctx.get()));
  REQUIRE(d->pd);
  return d;
}

// Registered memory, zero-filled, page-aligned.
class Mem {
 public:
  Mem(ibv_pd *pd, size_t n, int access = kMrAccess) : n_(n) {
    size_t alloc = (n + 4095) / 4096 * 4096;
    p_ = static_cast<uint8_t *>(std::aligned_alloc(4096, alloc));
    REQUIRE(p_);
    std::memset(p_, 0, alloc);
    mr_ = ibv_reg_mr(pd, p_, n, access);
    REQUIRE(mr_);
  }
  ~Mem() {
    if (mr_) CHECK(ibv_dereg_mr(mr_) == 0);
    std::free(p_);
  }
  Mem(const Mem &) = delete;
  Mem &operator=(const Mem &) = delete;
  uint8_t *at(size_t off = 0) const { return p_ + off; }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(p_ + off); }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  size_t size() const { return n_; }
  std::vector<uint8_t> copy() const { return {p_, p_ + n_}; }
  ibv_sge sge(size_t off, uint32_t len) const { return {addr(off), len, lkey()}; }

 private:
  uint8_t *p_ = nullptr;
  size_t n_ = 0;
  ibv_mr *mr_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Extended CQs and QPs

ibv_cq_init_attr_ex cq_attr(uint64_t wc_flags = kAllWcFlags) {
  ibv_cq_init_attr_ex a{};
  a.cqe = 256;
  a.wc_flags = wc_flags;
  return a;
}

CqExPtr make_cq(ibv_context *ctx, uint32_t flags = 0, ibv_comp_channel *channel = nullptr) {
  ibv_cq_init_attr_ex a = cq_attr();
  a.channel = channel;
  if (flags) {
    a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    a.flags = flags;
  }
  CqExPtr cq(ibv_create_cq_ex(ctx, &a));
  INFO("ibv_create_cq_ex: " << std::strerror(errno));
  REQUIRE(cq);
  return cq;
}

ibv_qp_init_attr_ex qp_attr(ibv_pd *pd, ibv_cq_ex *scq, ibv_cq_ex *rcq, ibv_qp_type type,
                            uint64_t send_ops) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = ibv_cq_ex_to_cq(scq);
  a.recv_cq = ibv_cq_ex_to_cq(rcq);
  a.qp_type = type;
  a.cap = {64, 64, 16, 16, 256};
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd;
  a.send_ops_flags = send_ops;
  return a;
}

struct EndpointOptions {
  uint32_t max_send_wr = 64;
  uint32_t cq_flags = 0;
  ibv_comp_channel *recv_channel = nullptr;
};

// One extended QP with its own extended send and receive CQs.
struct Endpoint {
  CqExPtr scq, rcq;
  QpPtr qp;
  ibv_qp_ex *x = nullptr;
  ibv_qp_cap cap{};
  uint32_t qpn() const { return qp->qp_num; }
};

void make_endpoint(Device &d, Endpoint &e, ibv_qp_type type, const EndpointOptions &o = {}) {
  e.scq = make_cq(d.ctx.get(), o.cq_flags);
  e.rcq = make_cq(d.ctx.get(), o.cq_flags, o.recv_channel);
  ibv_qp_init_attr_ex a = qp_attr(d.pd.get(), e.scq.get(), e.rcq.get(), type, send_ops_for(type));
  a.cap.max_send_wr = o.max_send_wr;
  e.qp.reset(ibv_create_qp_ex(d.ctx.get(), &a));
  INFO("ibv_create_qp_ex: " << std::strerror(errno));
  REQUIRE(e.qp);
  e.cap = a.cap;
  e.x = ibv_qp_to_qp_ex(e.qp.get());
  REQUIRE(e.x);
}

void modify(ibv_qp *qp, ibv_qp_attr &a, int mask, const char *what) {
  int rc = ibv_modify_qp(qp, &a, mask);
  INFO(what << ": " << std::strerror(rc));
  REQUIRE(rc == 0);
}

void to_init(ibv_qp *qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = kPort;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (qp->qp_type == IBV_QPT_UD) {
    a.qkey = kQkey;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags = kQpAccess;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  modify(qp, a, mask, "-> INIT");
}

void to_rtr(ibv_qp *qp, const Device &d, uint32_t dest_qpn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  int mask = IBV_QP_STATE;
  if (qp->qp_type != IBV_QPT_UD) {
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = kPsn;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = d.gid;
    a.ah_attr.grh.sgid_index = kGidIndex;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = kPort;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  }
  if (qp->qp_type == IBV_QPT_RC) {
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  modify(qp, a, mask, "-> RTR");
}

void to_rts(ibv_qp *qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = kPsn;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) {
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  modify(qp, a, mask, "-> RTS");
}

// Two QPs of one type in one process. RC and UC are connected to each other; UD QPs are
// brought to RTS (address them with an AH).
struct Pair {
  explicit Pair(ibv_qp_type type = IBV_QPT_RC, const EndpointOptions &o = {}) : dev(open_device()) {
    make_endpoint(*dev, a, type, o);
    make_endpoint(*dev, b, type, o);
    for (Endpoint *e : {&a, &b}) to_init(e->qp.get());
    to_rtr(a.qp.get(), *dev, b.qpn());
    to_rtr(b.qp.get(), *dev, a.qpn());
    for (Endpoint *e : {&a, &b}) to_rts(e->qp.get());
  }
  ibv_pd *pd() const { return dev->pd.get(); }
  std::unique_ptr<Device> dev;
  Endpoint a, b;  // a requests, b responds
};

void post_recv(ibv_qp *qp, uint64_t wr_id, std::vector<ibv_sge> sges) {
  ibv_recv_wr wr{};
  ibv_recv_wr *bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = sges.data();
  wr.num_sge = int(sges.size());
  REQUIRE(ibv_post_recv(qp, &wr, &bad) == 0);
}

// ---------------------------------------------------------------------------------------------
// Completions, read through the extended CQ interface

struct Wc {
  uint64_t wr_id;
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_be;
  uint32_t qp_num;
  uint32_t src_qp;
  unsigned wc_flags;
  uint32_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
};

std::string describe(const Wc &w) {
  std::ostringstream s;
  s << "wr_id=" << w.wr_id << " status=" << ibv_wc_status_str(w.status) << " opcode=" << w.opcode
    << " byte_len=" << w.byte_len << " imm=0x" << std::hex << ntohl(w.imm_be) << std::dec
    << " qp_num=" << w.qp_num << " src_qp=" << w.src_qp << " wc_flags=0x" << std::hex << w.wc_flags
    << std::dec << " slid=" << w.slid << " sl=" << int(w.sl)
    << " dlid_path_bits=" << int(w.dlid_path_bits) << " vendor_err=" << w.vendor_err;
  return s.str();
}

// The completion the iterator points at, every field through its ibv_wc_read_* function.
Wc read_current(ibv_cq_ex *cq) {
  return {cq->wr_id,
          cq->status,
          ibv_wc_read_opcode(cq),
          ibv_wc_read_vendor_err(cq),
          ibv_wc_read_byte_len(cq),
          ibv_wc_read_imm_data(cq),
          ibv_wc_read_qp_num(cq),
          ibv_wc_read_src_qp(cq),
          ibv_wc_read_wc_flags(cq),
          ibv_wc_read_slid(cq),
          ibv_wc_read_sl(cq),
          ibv_wc_read_dlid_path_bits(cq)};
}

// Collects exactly n completions with start_poll/next_poll/end_poll; FAILs at the deadline.
std::vector<Wc> poll_n(ibv_cq_ex *cq, size_t n, const char *what) {
  std::vector<Wc> out;
  const auto deadline = Clock::now() + kTimeout;
  ibv_poll_cq_attr attr{};
  while (out.size() < n) {
    if (Clock::now() > deadline)
      FAIL(what << ": " << out.size() << " of " << n << " completions before the deadline");
    int rc = ibv_start_poll(cq, &attr);
    if (rc == ENOENT) continue;
    REQUIRE(rc == 0);
    out.push_back(read_current(cq));
    while (out.size() < n && (rc = ibv_next_poll(cq)) == 0) out.push_back(read_current(cq));
    ibv_end_poll(cq);
    REQUIRE((rc == 0 || rc == ENOENT));
  }
  return out;
}

Wc poll_one(ibv_cq_ex *cq, const char *what) {
  return poll_n(cq, 1, what)[0];
}

// FAILs if any completion shows up within the window.
void require_quiet(ibv_cq_ex *cq, const char *what, Ms window = kQuietWindow) {
  const auto until = Clock::now() + window;
  ibv_poll_cq_attr attr{};
  do {
    int rc = ibv_start_poll(cq, &attr);
    if (rc == 0) {
      Wc w = read_current(cq);
      ibv_end_poll(cq);
      FAIL(what << ": unexpected completion " << describe(w));
    }
    REQUIRE(rc == ENOENT);
    std::this_thread::sleep_for(1ms);
  } while (Clock::now() < until);
}

struct Expect {
  uint64_t wr_id;
  ibv_wc_opcode opcode;
  uint32_t qp_num;
  std::optional<uint32_t> byte_len;  // receives, reads and atomics
  std::optional<uint32_t> src_qp;    // receives
  std::optional<uint32_t> imm_be;    // receives with immediate data
  unsigned wc_flags = 0;
};

void check(const Wc &w, const Expect &e, const char *what) {
  INFO(what << ": " << describe(w));
  REQUIRE(w.status == IBV_WC_SUCCESS);
  REQUIRE(w.vendor_err == 0);
  REQUIRE(w.wr_id == e.wr_id);
  REQUIRE(w.opcode == e.opcode);
  REQUIRE(w.qp_num == e.qp_num);
  REQUIRE(w.wc_flags == e.wc_flags);
  if (e.byte_len) REQUIRE(w.byte_len == *e.byte_len);
  if (e.src_qp) REQUIRE(w.src_qp == *e.src_qp);
  if (e.imm_be) REQUIRE(w.imm_be == *e.imm_be);
  // RoCE: no LIDs, and no SL on the wire. A UD receive's sl tells the packet's L3 header
  // as ConnectX NICs report it (bit 3: RoCEv2's UDP, bits 2-0: 2 IPv4), which UCX reads to
  // find the destination GID in the GRH; here every GID is IPv4-mapped.
  REQUIRE(w.slid == 0);
  REQUIRE(int(w.sl) == ((e.wc_flags & IBV_WC_GRH) ? 0x8 | 0x2 : 0));
  REQUIRE(w.dlid_path_bits == 0);
}

// A send-side completion of `ep`'s QP.
Expect sent(const Endpoint &ep, uint64_t wr_id, ibv_wc_opcode op,
            std::optional<uint32_t> byte_len = std::nullopt) {
  return {wr_id, op, ep.qpn(), byte_len, std::nullopt, std::nullopt, 0};
}

// A receive completion of `ep`'s QP from the QP numbered src.
Expect received(const Endpoint &ep, uint64_t wr_id, uint32_t src, uint32_t byte_len,
                std::optional<uint32_t> imm_be = std::nullopt, ibv_wc_opcode op = IBV_WC_RECV,
                unsigned extra_flags = 0) {
  return {wr_id,
          op,
          ep.qpn(),
          byte_len,
          src,
          imm_be,
          (imm_be ? unsigned(IBV_WC_WITH_IMM) : 0u) | extra_flags};
}

void check_all(const std::vector<Wc> &got, const std::vector<Expect> &want, const char *what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO("completion #" << i);
    check(got[i], want[i], what);
  }
}

// Posts one batch built by fn between ibv_wr_start and ibv_wr_complete; returns the latter.
template <typename Fn>
int batch(ibv_qp_ex *x, Fn fn) {
  ibv_wr_start(x);
  fn();
  return ibv_wr_complete(x);
}

uint32_t imm(uint32_t host) {
  return htonl(host);
}

// ---------------------------------------------------------------------------------------------
// Creation and conversion

TEST_CASE("ibv_create_qp_ex: send_ops_flags are validated per QP type", "[wr-api]") {
  auto d = open_device();
  CqExPtr cq = make_cq(d->ctx.get());
  struct Case {
    ibv_qp_type type;
    uint64_t ops;
    const char *what;
  };
  const Case rejected[] = {
      {IBV_QPT_RC, IBV_QP_EX_WITH_TSO, "RC TSO"},
      {IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE, "UC ATOMIC_WRITE"},
      {IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV, "UC SEND_WITH_INV"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_BIND_MW, "UD BIND_MW"},
      {IBV_QPT_RC, uint64_t(1) << 40, "RC unknown bit"},
      {IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, "UC RDMA_READ"},
      {IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, "UC CMP_AND_SWP"},
      {IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, "UC FETCH_AND_ADD"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, "UD RDMA_WRITE"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, "UD RDMA_WRITE_WITH_IMM"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_READ, "UD RDMA_READ"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, "UD FETCH_AND_ADD"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_TSO, "UD TSO"},
  };
  for (const Case &c : rejected) {
    INFO(c.what);
    ibv_qp_init_attr_ex a = qp_attr(d->pd.get(), cq.get(), cq.get(), c.type, c.ops);
    errno = 0;
    ibv_qp *qp = ibv_create_qp_ex(d->ctx.get(), &a);
    if (qp) ibv_destroy_qp(qp);
    REQUIRE(qp == nullptr);
    REQUIRE(errno == EOPNOTSUPP);
  }
  for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
    INFO("QP type " << type);
    ibv_qp_init_attr_ex a = qp_attr(d->pd.get(), cq.get(), cq.get(), type, send_ops_for(type));
    QpPtr qp(ibv_create_qp_ex(d->ctx.get(), &a));
    REQUIRE(qp);
    ibv_qp_ex *x = ibv_qp_to_qp_ex(qp.get());
    REQUIRE(x);
    REQUIRE(&x->qp_base == qp.get());
    REQUIRE(a.cap.max_inline_data >= 256);
    REQUIRE(a.cap.max_send_sge >= 4);
  }
}

TEST_CASE("ibv_qp_to_qp_ex: NULL for a QP created without send_ops_flags", "[wr-api]") {
  auto d = open_device();
  CqExPtr cq = make_cq(d->ctx.get());
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(cq.get());
  a.qp_type = IBV_QPT_RC;
  a.cap = {16, 16, 1, 1, 0};
  QpPtr plain(ibv_create_qp(d->pd.get(), &a));
  REQUIRE(plain);
  REQUIRE(ibv_qp_to_qp_ex(plain.get()) == nullptr);
  // ibv_create_qp_ex without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: no ibv_wr_* interface either.
  ibv_qp_init_attr_ex ax = qp_attr(d->pd.get(), cq.get(), cq.get(), IBV_QPT_RC, kRcSendOps);
  ax.comp_mask = IBV_QP_INIT_ATTR_PD;
  QpPtr plain_ex(ibv_create_qp_ex(d->ctx.get(), &ax));
  REQUIRE(plain_ex);
  REQUIRE(ibv_qp_to_qp_ex(plain_ex.get()) == nullptr);
}

TEST_CASE("ibv_create_cq_ex: comp_mask, flags and wc_flags are validated", "[wr-api]") {
  auto d = open_device();
  ibv_context *ctx = d->ctx.get();
  auto rejected = [&](ibv_cq_init_attr_ex a, int want_errno, const char *what) {
    INFO(what);
    errno = 0;
    ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
    if (cq) ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
    REQUIRE(cq == nullptr);
    REQUIRE(errno == want_errno);
  };
  // (Completion timestamps are supported: cq_timestamp_test.)
  const std::pair<uint64_t, const char *> bad_wc[] = {
      {IBV_WC_EX_WITH_CVLAN, "CVLAN"},
      {IBV_WC_EX_WITH_FLOW_TAG, "FLOW_TAG"},
      {IBV_WC_EX_WITH_TM_INFO, "TM_INFO"},
  };
  for (auto [flag, name] : bad_wc) rejected(cq_attr(kAllWcFlags | flag), EOPNOTSUPP, name);
  ibv_cq_init_attr_ex a = cq_attr();
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  rejected(a, EOPNOTSUPP, "IGNORE_OVERRUN");
  a = cq_attr();
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  a.parent_domain = d->pd.get();
  rejected(a, EINVAL, "a protection domain as the parent domain");
  a = cq_attr();
  a.cqe = 0;
  rejected(a, EINVAL, "cqe 0");
  a = cq_attr();
  a.comp_vector = uint32_t(ctx->num_comp_vectors);
  rejected(a, EINVAL, "comp_vector out of range");

  // Accepted: no wc_flags, every supported one, single-threaded.
  for (uint64_t flags : {uint64_t(0), kAllWcFlags}) {
    CqExPtr cq(ibv_create_cq_ex(ctx, &(a = cq_attr(flags))));
    REQUIRE(cq);
    REQUIRE(cq->cqe >= 256);
    REQUIRE(cq->context == ctx);
    REQUIRE(cq->read_opcode);
    REQUIRE(cq->read_wc_flags);
    REQUIRE(cq->read_vendor_err);
    REQUIRE((cq->read_byte_len != nullptr) == (flags != 0));
    REQUIRE((cq->read_imm_data != nullptr) == (flags != 0));
    REQUIRE((cq->read_qp_num != nullptr) == (flags != 0));
    REQUIRE((cq->read_src_qp != nullptr) == (flags != 0));
    REQUIRE((cq->read_slid != nullptr) == (flags != 0));
    REQUIRE((cq->read_sl != nullptr) == (flags != 0));
    REQUIRE((cq->read_dlid_path_bits != nullptr) == (flags != 0));
  }
  CqExPtr single = make_cq(ctx, IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
}

TEST_CASE("ibv_cq_ex: start_poll on an empty CQ is ENOENT; the CQ is an ordinary ibv_cq too",
          "[wr-api]") {
  auto d = open_device();
  for (uint32_t flags : {0u, uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)}) {
    INFO("create flags " << flags);
    CqExPtr cq = make_cq(d->ctx.get(), flags);
    ibv_poll_cq_attr attr{};
    for (int i = 0; i < 3; i++) REQUIRE(ibv_start_poll(cq.get(), &attr) == ENOENT);
    ibv_cq *plain = ibv_cq_ex_to_cq(cq.get());
    ibv_wc wc;
    REQUIRE(ibv_poll_cq(plain, 1, &wc) == 0);
    REQUIRE(ibv_req_notify_cq(plain, 0) == 0);
    REQUIRE(ibv_req_notify_cq(plain, 1) == 0);
  }
}

// ---------------------------------------------------------------------------------------------
// RC data transfers, one opcode family at a time

TEST_CASE("RC: wr_send and wr_send_imm with wr_set_sge and wr_set_sge_list", "[wr-api]") {
  Pair p;
  const size_t kSlot = 16384;
  Mem src(p.pd(), 32768), dst(p.pd(), 4 * kSlot);
  fill_pattern(src.at(), src.size(), 1);
  fill_pattern(dst.at(), dst.size(), 2);
  std::vector<uint8_t> want = dst.copy();
  for (uint64_t i = 0; i < 4; i++) post_recv(p.b.qp.get(), 100 + i, {dst.sge(i * kSlot, kSlot)});

  // 1: one SGE; 2: four SGEs (10000 bytes: three packets at MTU 4096); 3: zero-length;
  // 4: send_imm from three SGEs.
  const ibv_sge list4[] = {src.sge(0, 1), src.sge(100, 4095), src.sge(8192, 4096),
                           src.sge(20000, 1808)};
  const ibv_sge list3[] = {src.sge(30000, 7), src.sge(1, 300), src.sge(5000, 64)};
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 1;
            ibv_wr_send(x);
            ibv_wr_set_sge(x, src.lkey(), src.addr(333), 2000);
            x->wr_id = 2;
            ibv_wr_send(x);
            ibv_wr_set_sge_list(x, 4, list4);
            x->wr_id = 3;
            ibv_wr_send(x);
            ibv_wr_set_sge_list(x, 0, nullptr);
            x->wr_id = 4;
            ibv_wr_send_imm(x, imm(0xdeadbeef));
            ibv_wr_set_sge_list(x, 3, list3);
          }) == 0);

  check_all(poll_n(p.a.scq.get(), 4, "sender"),
            {sent(p.a, 1, IBV_WC_SEND), sent(p.a, 2, IBV_WC_SEND), sent(p.a, 3, IBV_WC_SEND),
             sent(p.a, 4, IBV_WC_SEND)},
            "sender");
  check_all(poll_n(p.b.rcq.get(), 4, "receiver"),
            {received(p.b, 100, p.a.qpn(), 2000), received(p.b, 101, p.a.qpn(), 10000),
             received(p.b, 102, p.a.qpn(), 0), received(p.b, 103, p.a.qpn(), 371, imm(0xdeadbeef))},
            "receiver");
  auto put = [&](size_t slot_off, std::initializer_list<ibv_sge> sges) {
    for (const ibv_sge &s : sges) {
      std::memcpy(want.data() + slot_off, reinterpret_cast<void *>(s.addr), s.length);
      slot_off += s.length;
    }
  };
  put(0, {src.sge(333, 2000)});
  put(kSlot, {list4[0], list4[1], list4[2], list4[3]});
  put(3 * kSlot, {list3[0], list3[1], list3[2]});
  REQUIRE_BYTES("receive buffers", dst.at(), want.data(), dst.size());
  require_quiet(p.a.scq.get(), "sender after the batch", 50ms);
  require_quiet(p.b.rcq.get(), "receiver after the batch", 50ms);
}

TEST_CASE("RC: wr_rdma_write, wr_rdma_write_imm and wr_rdma_read with SGE lists", "[wr-api]") {
  Pair p;
  Mem local(p.pd(), 65536), remote(p.pd(), 65536), rbuf(p.pd(), 4096);
  fill_pattern(local.at(), local.size(), 11);
  fill_pattern(remote.at(), remote.size(), 12);
  fill_pattern(rbuf.at(), rbuf.size(), 13);
  std::vector<uint8_t> want_remote = remote.copy(), want_local = local.copy();
  const std::vector<uint8_t> want_rbuf = rbuf.copy();  // write_imm places nothing there
  post_recv(p.b.qp.get(), 500, {rbuf.sge(0, 4096)});

  // WRITE of 9000 bytes from two SGEs to remote+100; WRITE_IMM of 5000 bytes (one SGE) to
  // remote+20000; READ of 12000 bytes from remote+40000 into three local SGEs.
  const ibv_sge wlist[] = {local.sge(0, 4000), local.sge(10000, 5000)};
  const ibv_sge rlist[] = {local.sge(30000, 1), local.sge(31000, 8191), local.sge(50000, 3808)};
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 11;
            ibv_wr_rdma_write(x, remote.rkey(), remote.addr(100));
            ibv_wr_set_sge_list(x, 2, wlist);
            x->wr_id = 12;
            ibv_wr_rdma_write_imm(x, remote.rkey(), remote.addr(20000), imm(0x01020304));
            ibv_wr_set_sge(x, local.lkey(), local.addr(60000), 5000);
            x->wr_id = 13;
            ibv_wr_rdma_read(x, remote.rkey(), remote.addr(40000));
            ibv_wr_set_sge_list(x, 3, rlist);
          }) == 0);

  check_all(poll_n(p.a.scq.get(), 3, "requester"),
            {sent(p.a, 11, IBV_WC_RDMA_WRITE), sent(p.a, 12, IBV_WC_RDMA_WRITE),
             sent(p.a, 13, IBV_WC_RDMA_READ, 12000)},
            "requester");
  check(poll_one(p.b.rcq.get(), "responder"),
        received(p.b, 500, p.a.qpn(), 5000, imm(0x01020304), IBV_WC_RECV_RDMA_WITH_IMM),
        "responder");

  std::memcpy(want_remote.data() + 100, local.at(0), 4000);
  std::memcpy(want_remote.data() + 4100, local.at(10000), 5000);
  std::memcpy(want_remote.data() + 20000, local.at(60000), 5000);
  // The READ ran after both writes (RC executes in order), none of which touched its range.
  const uint8_t *from = want_remote.data() + 40000;
  for (const ibv_sge &s : rlist) {
    std::memcpy(want_local.data() + (s.addr - local.addr()), from, s.length);
    from += s.length;
  }
  REQUIRE_BYTES("remote (written)", remote.at(), want_remote.data(), remote.size());
  REQUIRE_BYTES("local (read into)", local.at(), want_local.data(), local.size());
  REQUIRE_BYTES("receive buffer of write_imm", rbuf.at(), want_rbuf.data(), rbuf.size());
}

TEST_CASE("RC: wr_atomic_write (IBTA 1.5) writes its 8 bytes; misaligned, or no REMOTE_WRITE, "
          "fails",
          "[wr-api]") {
  Pair p;
  Mem target(p.pd(), 64);
  fill_pattern(target.at(), target.size(), 31);
  std::vector<uint8_t> want = target.copy();
  ibv_qp_ex *x = p.a.x;
  const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8}, more[8] = {9, 9, 9, 9, 0, 0, 0, 1};
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 31;
            ibv_wr_atomic_write(x, target.rkey(), target.addr(8), bytes);
            x->wr_id = 32;
            ibv_wr_atomic_write(x, target.rkey(), target.addr(40), more);
          }) == 0);
  check_all(poll_n(p.a.scq.get(), 2, "requester"),
            {sent(p.a, 31, IBV_WC_ATOMIC_WRITE, 8), sent(p.a, 32, IBV_WC_ATOMIC_WRITE, 8)},
            "requester");
  std::memcpy(want.data() + 8, bytes, 8);
  std::memcpy(want.data() + 40, more, 8);
  REQUIRE_BYTES("target after two atomic writes", target.at(), want.data(), target.size());
  // Through ibv_post_send: the 8 bytes at the one SGE's address, as rxe takes them.
  uint8_t third[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  ibv_sge sge{reinterpret_cast<uint64_t>(third), 8, 0};
  ibv_send_wr wr{};
  wr.wr_id = 33;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = target.addr(16);
  wr.wr.rdma.rkey = target.rkey();
  ibv_send_wr *bad = nullptr;
  REQUIRE(ibv_post_send(p.a.qp.get(), &wr, &bad) == 0);
  check(poll_one(p.a.scq.get(), "requester"), sent(p.a, 33, IBV_WC_ATOMIC_WRITE, 8), "requester");
  std::memcpy(want.data() + 16, third, 8);
  REQUIRE_BYTES("target after ibv_post_send", target.at(), want.data(), target.size());
  // An address not 8-byte aligned: the WR fails at the requester, nothing is written.
  REQUIRE(batch(x, [&] {
            x->wr_id = 34;
            ibv_wr_atomic_write(x, target.rkey(), target.addr(4), bytes);
          }) == 0);
  const auto wc = poll_one(p.a.scq.get(), "misaligned");
  CHECK(wc.status == IBV_WC_LOC_QP_OP_ERR);
  REQUIRE_BYTES("target after the misaligned one", target.at(), want.data(), target.size());
}

TEST_CASE("RC: wr_atomic_write to a region without REMOTE_WRITE: REM_ACCESS_ERR", "[wr-api]") {
  Pair p;
  Mem target(p.pd(), 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  fill_pattern(target.at(), target.size(), 35);
  std::vector<uint8_t> want = target.copy();
  const uint64_t v = 0x1234;
  REQUIRE(batch(p.a.x, [&] {
            p.a.x->wr_flags = IBV_SEND_SIGNALED;
            p.a.x->wr_id = 35;
            ibv_wr_atomic_write(p.a.x, target.rkey(), target.addr(0), &v);
          }) == 0);
  const auto wc = poll_one(p.a.scq.get(), "no remote write");
  CHECK(wc.status == IBV_WC_REM_ACCESS_ERR);
  REQUIRE_BYTES("target untouched", target.at(), want.data(), target.size());
}

TEST_CASE("RC: wr_atomic_cmp_swp (hit and miss) and wr_atomic_fetch_add", "[wr-api]") {
  Pair p;
  Mem target(p.pd(), 64), results(p.pd(), 64);
  uint64_t init[4] = {0x1111222233334444ull, 0x5555666677778888ull, 0xfffffffffffffff0ull, 7};
  std::memcpy(target.at(), init, sizeof(init));
  fill_pattern(results.at(), results.size(), 21);
  const std::vector<uint8_t> results_before = results.copy();
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 21;  // hit: swaps
            ibv_wr_atomic_cmp_swp(x, target.rkey(), target.addr(0), init[0], 0xabcdef);
            ibv_wr_set_sge(x, results.lkey(), results.addr(0), 8);
            x->wr_id = 22;  // miss: leaves the value
            ibv_wr_atomic_cmp_swp(x, target.rkey(), target.addr(8), 1, 2);
            ibv_wr_set_sge(x, results.lkey(), results.addr(8), 8);
            x->wr_id = 23;  // wraps around
            ibv_wr_atomic_fetch_add(x, target.rkey(), target.addr(16), 0x20);
            ibv_wr_set_sge(x, results.lkey(), results.addr(16), 8);
            x->wr_id = 24;  // through a one-element SGE list
            ibv_wr_atomic_fetch_add(x, target.rkey(), target.addr(24), 5);
            const ibv_sge one = results.sge(32, 8);
            ibv_wr_set_sge_list(x, 1, &one);
          }) == 0);
  check_all(poll_n(p.a.scq.get(), 4, "requester"),
            {sent(p.a, 21, IBV_WC_COMP_SWAP, 8), sent(p.a, 22, IBV_WC_COMP_SWAP, 8),
             sent(p.a, 23, IBV_WC_FETCH_ADD, 8), sent(p.a, 24, IBV_WC_FETCH_ADD, 8)},
            "requester");
  uint64_t now[4], orig[5];
  std::memcpy(now, target.at(), sizeof(now));
  std::memcpy(orig, results.at(), sizeof(orig));
  CHECK(now[0] == 0xabcdef);
  CHECK(now[1] == init[1]);
  CHECK(now[2] == 0x10);
  CHECK(now[3] == 12);
  CHECK(orig[0] == init[0]);
  CHECK(orig[1] == init[1]);
  CHECK(orig[2] == init[2]);
  CHECK(orig[4] == init[3]);
  // Nothing but the four 8-byte result slots (0, 8, 16, 32) changed.
  std::vector<uint8_t> want = results_before;
  std::memcpy(want.data() + 0, &init[0], 8);
  std::memcpy(want.data() + 8, &init[1], 8);
  std::memcpy(want.data() + 16, &init[2], 8);
  std::memcpy(want.data() + 32, &init[3], 8);
  REQUIRE_BYTES("atomic result buffer", results.at(), want.data(), results.size());
  require_quiet(p.b.rcq.get(), "responder (atomics consume no receive)", 50ms);
}

TEST_CASE("RC: wr_set_inline_data and wr_set_inline_data_list (send, send_imm, write, write_imm)",
          "[wr-api]") {
  Pair p;
  const size_t kSlot = 1024;
  Mem dst(p.pd(), 4 * kSlot), remote(p.pd(), 4096);
  fill_pattern(dst.at(), dst.size(), 31);
  fill_pattern(remote.at(), remote.size(), 32);
  std::vector<uint8_t> want_dst = dst.copy(), want_remote = remote.copy();
  for (uint64_t i = 0; i < 4; i++) post_recv(p.b.qp.get(), 300 + i, {dst.sge(i * kSlot, kSlot)});

  // Unregistered memory that is scribbled over as soon as ibv_wr_complete returns: inline
  // data must have been copied by then.
  const uint32_t max_inline = p.a.cap.max_inline_data;
  REQUIRE(max_inline >= 256);
  std::vector<uint8_t> a = pattern(max_inline, 33), b = pattern(200, 34), c = pattern(300, 35);
  const std::vector<uint8_t> a0 = a, b0 = b, c0 = c;
  const ibv_data_buf list3[] = {{a.data(), 10}, {b.data(), 0}, {c.data() + 5, 90}};
  const ibv_data_buf list2[] = {{b.data() + 100, 100}, {a.data(), 56}};
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 31;  // exactly max_inline_data bytes
            ibv_wr_send(x);
            ibv_wr_set_inline_data(x, a.data(), max_inline);
            x->wr_id = 32;
            ibv_wr_send_imm(x, imm(0xcafe));
            ibv_wr_set_inline_data_list(x, 3, list3);
            x->wr_id = 33;
            ibv_wr_rdma_write(x, remote.rkey(), remote.addr(1000));
            ibv_wr_set_inline_data_list(x, 2, list2);
            x->wr_id = 34;
            ibv_wr_rdma_write_imm(x, remote.rkey(), remote.addr(3000), imm(7));
            ibv_wr_set_inline_data(x, c.data(), 33);
          }) == 0);
  std::fill(a.begin(), a.end(), 0xee);
  std::fill(b.begin(), b.end(), 0xee);
  std::fill(c.begin(), c.end(), 0xee);

  check_all(poll_n(p.a.scq.get(), 4, "sender"),
            {sent(p.a, 31, IBV_WC_SEND), sent(p.a, 32, IBV_WC_SEND),
             sent(p.a, 33, IBV_WC_RDMA_WRITE), sent(p.a, 34, IBV_WC_RDMA_WRITE)},
            "sender");
  check_all(
      poll_n(p.b.rcq.get(), 3, "receiver"),
      {received(p.b, 300, p.a.qpn(), max_inline), received(p.b, 301, p.a.qpn(), 100, imm(0xcafe)),
       received(p.b, 302, p.a.qpn(), 33, imm(7), IBV_WC_RECV_RDMA_WITH_IMM)},
      "receiver");
  std::memcpy(want_dst.data(), a0.data(), max_inline);
  std::memcpy(want_dst.data() + kSlot, a0.data(), 10);
  std::memcpy(want_dst.data() + kSlot + 10, c0.data() + 5, 90);
  std::memcpy(want_remote.data() + 1000, b0.data() + 100, 100);
  std::memcpy(want_remote.data() + 1100, a0.data(), 56);
  std::memcpy(want_remote.data() + 3000, c0.data(), 33);
  REQUIRE_BYTES("receive buffers", dst.at(), want_dst.data(), dst.size());
  REQUIRE_BYTES("remote (written)", remote.at(), want_remote.data(), remote.size());
}

// ---------------------------------------------------------------------------------------------
// Everything at once

TEST_CASE("RC: every opcode and every data setter in one batch", "[wr-api]") {
  Pair p;
  const size_t kSlot = 16384;
  Mem src(p.pd(), 65536), recv(p.pd(), 6 * kSlot), remote(p.pd(), 65536), rd(p.pd(), 16384),
      atom(p.pd(), 64), res(p.pd(), 64);
  fill_pattern(src.at(), src.size(), 41);
  fill_pattern(recv.at(), recv.size(), 42);
  fill_pattern(remote.at(), remote.size(), 43);
  fill_pattern(rd.at(), rd.size(), 44);
  fill_pattern(res.at(), res.size(), 45);
  const uint64_t cmp = 0x0123456789abcdefull, add_base = 1000;
  std::memcpy(atom.at(0), &cmp, 8);
  std::memcpy(atom.at(8), &add_base, 8);
  std::vector<uint8_t> want_recv = recv.copy(), want_remote = remote.copy(), want_rd = rd.copy();
  for (uint64_t i = 0; i < 6; i++) post_recv(p.b.qp.get(), 600 + i, {recv.sge(i * kSlot, kSlot)});

  uint8_t inl[160];
  fill_pattern(inl, sizeof(inl), 46);
  const ibv_data_buf inl_list[] = {{inl, 60}, {inl + 100, 60}};
  const ibv_sge send_list[] = {src.sge(0, 5000), src.sge(9000, 3000)};
  const ibv_sge write_list[] = {src.sge(20000, 100), src.sge(21000, 200), src.sge(22000, 300),
                                src.sge(23000, 8000)};
  const ibv_sge read_list[] = {rd.sge(0, 6000), rd.sge(8000, 4000)};
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 1;
            ibv_wr_send(x);
            ibv_wr_set_sge(x, src.lkey(), src.addr(40000), 4096);
            x->wr_id = 2;
            ibv_wr_send_imm(x, imm(2));
            ibv_wr_set_sge_list(x, 2, send_list);
            x->wr_id = 3;
            ibv_wr_rdma_write(x, remote.rkey(), remote.addr(0));
            ibv_wr_set_sge_list(x, 4, write_list);
            x->wr_id = 4;
            ibv_wr_rdma_write_imm(x, remote.rkey(), remote.addr(30000), imm(4));
            ibv_wr_set_sge(x, src.lkey(), src.addr(50000), 10000);
            x->wr_id = 5;
            ibv_wr_rdma_read(x, remote.rkey(), remote.addr(50000));
            ibv_wr_set_sge_list(x, 2, read_list);
            x->wr_id = 6;
            ibv_wr_atomic_cmp_swp(x, atom.rkey(), atom.addr(0), cmp, ~cmp);
            ibv_wr_set_sge(x, res.lkey(), res.addr(0), 8);
            x->wr_id = 7;
            ibv_wr_atomic_fetch_add(x, atom.rkey(), atom.addr(8), 24);
            ibv_wr_set_sge(x, res.lkey(), res.addr(8), 8);
            x->wr_id = 8;
            ibv_wr_send(x);
            ibv_wr_set_inline_data(x, inl, 160);
            x->wr_id = 9;
            ibv_wr_send_imm(x, imm(9));
            ibv_wr_set_inline_data_list(x, 2, inl_list);
            x->wr_id = 10;
            ibv_wr_rdma_write(x, remote.rkey(), remote.addr(62000));
            ibv_wr_set_inline_data_list(x, 2, inl_list);
            x->wr_id = 11;
            ibv_wr_rdma_write_imm(x, remote.rkey(), remote.addr(63000), imm(11));
            ibv_wr_set_inline_data(x, inl + 7, 77);
          }) == 0);

  check_all(poll_n(p.a.scq.get(), 11, "requester"),
            {sent(p.a, 1, IBV_WC_SEND), sent(p.a, 2, IBV_WC_SEND), sent(p.a, 3, IBV_WC_RDMA_WRITE),
             sent(p.a, 4, IBV_WC_RDMA_WRITE), sent(p.a, 5, IBV_WC_RDMA_READ, 10000),
             sent(p.a, 6, IBV_WC_COMP_SWAP, 8), sent(p.a, 7, IBV_WC_FETCH_ADD, 8),
             sent(p.a, 8, IBV_WC_SEND), sent(p.a, 9, IBV_WC_SEND), sent(p.a, 10, IBV_WC_RDMA_WRITE),
             sent(p.a, 11, IBV_WC_RDMA_WRITE)},
            "requester");
  const uint32_t src_qp = p.a.qpn();
  check_all(poll_n(p.b.rcq.get(), 6, "responder"),
            {received(p.b, 600, src_qp, 4096), received(p.b, 601, src_qp, 8000, imm(2)),
             received(p.b, 602, src_qp, 10000, imm(4), IBV_WC_RECV_RDMA_WITH_IMM),
             received(p.b, 603, src_qp, 160), received(p.b, 604, src_qp, 120, imm(9)),
             received(p.b, 605, src_qp, 77, imm(11), IBV_WC_RECV_RDMA_WITH_IMM)},
            "responder");

  std::memcpy(want_recv.data(), src.at(40000), 4096);
  std::memcpy(want_recv.data() + kSlot, src.at(0), 5000);
  std::memcpy(want_recv.data() + kSlot + 5000, src.at(9000), 3000);
  std::memcpy(want_recv.data() + 3 * kSlot, inl, 160);
  std::memcpy(want_recv.data() + 4 * kSlot, inl, 60);
  std::memcpy(want_recv.data() + 4 * kSlot + 60, inl + 100, 60);
  size_t off = 0;
  for (const ibv_sge &s : write_list) {
    std::memcpy(want_remote.data() + off, reinterpret_cast<void *>(s.addr), s.length);
    off += s.length;
  }
  std::memcpy(want_remote.data() + 30000, src.at(50000), 10000);
  std::memcpy(want_remote.data() + 62000, inl, 60);
  std::memcpy(want_remote.data() + 62060, inl + 100, 60);
  std::memcpy(want_remote.data() + 63000, inl + 7, 77);
  std::memcpy(want_rd.data(), want_remote.data() + 50000, 6000);
  std::memcpy(want_rd.data() + 8000, want_remote.data() + 56000, 4000);
  REQUIRE_BYTES("receive buffers", recv.at(), want_recv.data(), recv.size());
  REQUIRE_BYTES("remote memory", remote.at(), want_remote.data(), remote.size());
  REQUIRE_BYTES("read buffer", rd.at(), want_rd.data(), rd.size());
  uint64_t atom_now[2], orig[2];
  std::memcpy(atom_now, atom.at(), 16);
  std::memcpy(orig, res.at(), 16);
  CHECK(atom_now[0] == ~cmp);
  CHECK(atom_now[1] == add_base + 24);
  CHECK(orig[0] == cmp);
  CHECK(orig[1] == add_base);
}

TEST_CASE("RC: wr_flags: unsignaled WRs complete silently; IBV_SEND_INLINE copies set_sge data",
          "[wr-api]") {
  Pair p;
  Mem dst(p.pd(), 4096);
  for (uint64_t i = 0; i < 3; i++) post_recv(p.b.qp.get(), 700 + i, {dst.sge(i * 1024, 1024)});
  // Unregistered memory: only an inline send can carry it (lkey 0 names no MR).
  std::vector<uint8_t> unreg = pattern(200, 51);
  const std::vector<uint8_t> unreg0 = unreg;
  Mem src(p.pd(), 4096);
  fill_pattern(src.at(), src.size(), 52);
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_id = 71;
            x->wr_flags = 0;  // unsignaled
            ibv_wr_send(x);
            ibv_wr_set_sge(x, src.lkey(), src.addr(0), 100);
            x->wr_id = 72;
            x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_SOLICITED;
            ibv_wr_send(x);
            ibv_wr_set_sge(x, 0, reinterpret_cast<uintptr_t>(unreg.data()), 200);
            x->wr_id = 73;
            x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
            ibv_wr_send_imm(x, imm(73));
            ibv_wr_set_sge(x, src.lkey(), src.addr(1000), 10);
          }) == 0);
  std::fill(unreg.begin(), unreg.end(), 0);
  check_all(poll_n(p.a.scq.get(), 2, "sender"),
            {sent(p.a, 72, IBV_WC_SEND), sent(p.a, 73, IBV_WC_SEND)}, "sender");
  check_all(poll_n(p.b.rcq.get(), 3, "receiver"),
            {received(p.b, 700, p.a.qpn(), 100), received(p.b, 701, p.a.qpn(), 200),
             received(p.b, 702, p.a.qpn(), 10, imm(73))},
            "receiver");
  REQUIRE_BYTES("unsignaled send", dst.at(0), src.at(0), 100);
  REQUIRE_BYTES("inline send from set_sge", dst.at(1024), unreg0.data(), 200);
  REQUIRE_BYTES("fenced send_imm", dst.at(2048), src.at(1000), 10);
  require_quiet(p.a.scq.get(), "sender (the unsignaled WR)", 50ms);
}

// ---------------------------------------------------------------------------------------------
// UD and UC

TEST_CASE("UD: wr_send/wr_send_imm with wr_set_ud_addr; the GRH heads the receive buffer",
          "[wr-api]") {
  Pair p(IBV_QPT_UD);
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.grh.dgid = p.dev->gid;
  ah_attr.grh.sgid_index = kGidIndex;
  ah_attr.grh.hop_limit = 64;
  ah_attr.port_num = kPort;
  AhPtr ah(ibv_create_ah(p.pd(), &ah_attr));
  REQUIRE(ah);

  const size_t kSlot = 8192;
  Mem src(p.pd(), 8192), dst(p.pd(), 4 * kSlot);
  fill_pattern(src.at(), src.size(), 61);
  fill_pattern(dst.at(), dst.size(), 62);
  std::vector<uint8_t> want = dst.copy();
  for (uint64_t i = 0; i < 4; i++) post_recv(p.b.qp.get(), 800 + i, {dst.sge(i * kSlot, kSlot)});
  uint8_t inl[64];
  fill_pattern(inl, sizeof(inl), 63);
  const ibv_sge two[] = {src.sge(0, 1000), src.sge(2000, 3096)};  // a full 4096-byte MTU
  const ibv_data_buf inl_list[] = {{inl, 10}, {inl + 20, 20}};
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 81;
            ibv_wr_send(x);
            ibv_wr_set_ud_addr(x, ah.get(), p.b.qpn(), kQkey);
            ibv_wr_set_sge(x, src.lkey(), src.addr(5000), 1500);
            x->wr_id = 82;
            ibv_wr_send_imm(x, imm(0x82828282));
            ibv_wr_set_ud_addr(x, ah.get(), p.b.qpn(), 0x80000000);  // MSB: the QP's own Q_Key
            ibv_wr_set_sge_list(x, 2, two);
            x->wr_id = 83;
            ibv_wr_send(x);
            ibv_wr_set_ud_addr(x, ah.get(), p.b.qpn(), kQkey);
            ibv_wr_set_inline_data(x, inl, sizeof(inl));
            x->wr_id = 84;
            ibv_wr_send_imm(x, imm(84));
            ibv_wr_set_ud_addr(x, ah.get(), p.b.qpn(), kQkey);
            ibv_wr_set_inline_data_list(x, 2, inl_list);
          }) == 0);
  ah.reset();  // the address was copied into the WQEs

  check_all(poll_n(p.a.scq.get(), 4, "sender"),
            {sent(p.a, 81, IBV_WC_SEND), sent(p.a, 82, IBV_WC_SEND), sent(p.a, 83, IBV_WC_SEND),
             sent(p.a, 84, IBV_WC_SEND)},
            "sender");
  const uint32_t src_qp = p.a.qpn();
  const uint32_t lens[] = {1500, 4096, 64, 30};
  check_all(
      poll_n(p.b.rcq.get(), 4, "receiver"),
      {received(p.b, 800, src_qp, kGrhBytes + lens[0], std::nullopt, IBV_WC_RECV, IBV_WC_GRH),
       received(p.b, 801, src_qp, kGrhBytes + lens[1], imm(0x82828282), IBV_WC_RECV, IBV_WC_GRH),
       received(p.b, 802, src_qp, kGrhBytes + lens[2], std::nullopt, IBV_WC_RECV, IBV_WC_GRH),
       received(p.b, 803, src_qp, kGrhBytes + lens[3], imm(84), IBV_WC_RECV, IBV_WC_GRH)},
      "receiver");

  // GRH of RoCEv2 over IPv4: 20 unused bytes, then the IPv4 header, GID 0 -> GID 0.
  const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  REQUIRE(std::memcmp(p.dev->gid.raw, v4_prefix, 12) == 0);
  const uint8_t *v4 = p.dev->gid.raw + 12;
  for (size_t i = 0; i < 4; i++) {
    INFO("datagram " << i);
    const uint8_t *grh = dst.at(i * kSlot);
    const uint8_t zero[20] = {};
    REQUIRE(std::memcmp(grh, zero, 20) == 0);
    const uint8_t *ip = grh + 20;
    REQUIRE(ip[0] == 0x45);
    REQUIRE(ip[9] == 17);  // UDP
    REQUIRE(std::memcmp(ip + 12, v4, 4) == 0);
    REQUIRE(std::memcmp(ip + 16, v4, 4) == 0);
    std::memcpy(want.data() + i * kSlot, grh, kGrhBytes);  // GRH checked; compare payloads
  }
  std::memcpy(want.data() + kGrhBytes, src.at(5000), 1500);
  std::memcpy(want.data() + kSlot + kGrhBytes, src.at(0), 1000);
  std::memcpy(want.data() + kSlot + kGrhBytes + 1000, src.at(2000), 3096);
  std::memcpy(want.data() + 2 * kSlot + kGrhBytes, inl, 64);
  std::memcpy(want.data() + 3 * kSlot + kGrhBytes, inl, 10);
  std::memcpy(want.data() + 3 * kSlot + kGrhBytes + 10, inl + 20, 20);
  REQUIRE_BYTES("receive buffers", dst.at(), want.data(), dst.size());

  // An AH of another PD, and RDMA on a UD QP: EINVAL, nothing sent.
  PdPtr other_pd(ibv_alloc_pd(p.dev->ctx.get()));
  REQUIRE(other_pd);
  AhPtr foreign(ibv_create_ah(other_pd.get(), &ah_attr));
  REQUIRE(foreign);
  REQUIRE(batch(x, [&] {
            x->wr_id = 85;
            ibv_wr_send(x);
            ibv_wr_set_ud_addr(x, foreign.get(), p.b.qpn(), kQkey);
            ibv_wr_set_sge(x, src.lkey(), src.addr(), 8);
          }) == EINVAL);
  REQUIRE(batch(x, [&] {
            x->wr_id = 86;
            ibv_wr_rdma_write(x, src.rkey(), src.addr());
            ibv_wr_set_sge(x, src.lkey(), src.addr(), 8);
          }) == EINVAL);
  foreign.reset();
  require_quiet(p.a.scq.get(), "sender after the failed batches");
}

TEST_CASE("UC: wr_rdma_write, wr_rdma_write_imm and wr_send; no reads or atomics", "[wr-api]") {
  Pair p(IBV_QPT_UC);
  Mem src(p.pd(), 16384), remote(p.pd(), 16384), dst(p.pd(), 8192);
  fill_pattern(src.at(), src.size(), 71);
  fill_pattern(remote.at(), remote.size(), 72);
  fill_pattern(dst.at(), dst.size(), 73);
  std::vector<uint8_t> want_remote = remote.copy(), want_dst = dst.copy();
  post_recv(p.b.qp.get(), 900, {dst.sge(0, 4096)});
  post_recv(p.b.qp.get(), 901, {dst.sge(4096, 4096)});
  ibv_qp_ex *x = p.a.x;
  REQUIRE(batch(x, [&] {
            x->wr_flags = IBV_SEND_SIGNALED;
            x->wr_id = 91;
            ibv_wr_rdma_write(x, remote.rkey(), remote.addr(10));
            ibv_wr_set_sge(x, src.lkey(), src.addr(0), 6000);
            x->wr_id = 92;
            ibv_wr_rdma_write_imm(x, remote.rkey(), remote.addr(8000), imm(92));
            ibv_wr_set_inline_data(x, src.at(7000), 100);
            x->wr_id = 93;
            ibv_wr_send(x);
            const ibv_sge two[] = {src.sge(9000, 1), src.sge(12000, 2000)};
            ibv_wr_set_sge_list(x, 2, two);
          }) == 0);
  check_all(poll_n(p.a.scq.get(), 3, "sender"),
            {sent(p.a, 91, IBV_WC_RDMA_WRITE), sent(p.a, 92, IBV_WC_RDMA_WRITE),
             sent(p.a, 93, IBV_WC_SEND)},
            "sender");
  check_all(poll_n(p.b.rcq.get(), 2, "receiver"),
            {received(p.b, 900, p.a.qpn(), 100, imm(92), IBV_WC_RECV_RDMA_WITH_IMM),
             received(p.b, 901, p.a.qpn(), 2001)},
            "receiver");
  std::memcpy(want_remote.data() + 10, src.at(0), 6000);
  std::memcpy(want_remote.data() + 8000, src.at(7000), 100);
  std::memcpy(want_dst.data() + 4096, src.at(9000), 1);
  std::memcpy(want_dst.data() + 4097, src.at(12000), 2000);
  REQUIRE_BYTES("remote", remote.at(), want_remote.data(), remote.size());
  REQUIRE_BYTES("receive buffers", dst.at(), want_dst.data(), dst.size());

  // Reads and atomics do not exist on UC: the batch fails, nothing is sent.
  Mem res(p.pd(), 8);
  for (int op = 0; op < 3; op++) {
    INFO("operation " << op);
    REQUIRE(batch(x, [&] {
              x->wr_id = 94;
              ibv_wr_send(x);
              ibv_wr_set_sge(x, src.lkey(), src.addr(0), 8);
              if (op == 0) ibv_wr_rdma_read(x, remote.rkey(), remote.addr(0));
              if (op == 1) ibv_wr_atomic_cmp_swp(x, remote.rkey(), remote.addr(0), 1, 2);
              if (op == 2) ibv_wr_atomic_fetch_add(x, remote.rkey(), remote.addr(0), 1);
              ibv_wr_set_sge(x, res.lkey(), res.addr(), 8);
            }) == EINVAL);
  }
  require_quiet(p.a.scq.get(), "sender after the failed batches");
}

// ---------------------------------------------------------------------------------------------
// Failed and aborted batches

// A pair whose responder has one receive posted; `check_nothing_sent` proves no WR of a
// failed batch ran: nothing completes, then a new send lands in that first receive.
struct ErrorFixture {
  explicit ErrorFixture(const EndpointOptions &o = {}) : p(IBV_QPT_RC, o) {
    fill_pattern(src.at(), src.size(), 81);
    fill_pattern(dst.at(), dst.size(), 82);
    post_recv(p.b.qp.get(), 1000, {dst.sge(0, 4096)});
  }
  void check_nothing_sent() {
    require_quiet(p.a.scq.get(), "requester after the failed batch");
    require_quiet(p.b.rcq.get(), "responder after the failed batch", 0ms);
    ibv_qp_ex *x = p.a.x;
    REQUIRE(batch(x, [&] {
              x->wr_id = 1001;
              x->wr_flags = IBV_SEND_SIGNALED;
              ibv_wr_send(x);
              ibv_wr_set_sge(x, src.lkey(), src.addr(3000), 64);
            }) == 0);
    check(poll_one(p.a.scq.get(), "requester"), sent(p.a, 1001, IBV_WC_SEND), "requester");
    check(poll_one(p.b.rcq.get(), "responder"), received(p.b, 1000, p.a.qpn(), 64), "responder");
    REQUIRE_BYTES("first receive", dst.at(), src.at(3000), 64);
  }
  Pair p;
  Mem src{p.pd(), 8192};
  Mem dst{p.pd(), 4096};
};

TEST_CASE("errors: too much inline data fails ibv_wr_complete with EINVAL, nothing is sent",
          "[wr-api]") {
  ErrorFixture f;
  ibv_qp_ex *x = f.p.a.x;
  const uint32_t max_inline = f.p.a.cap.max_inline_data;
  std::vector<uint8_t> big(max_inline + 1, 0x5a);
  const ibv_data_buf over[] = {{big.data(), max_inline}, {big.data(), 1}};
  SECTION("wr_set_inline_data") {
    REQUIRE(batch(x, [&] {
              x->wr_flags = IBV_SEND_SIGNALED;
              x->wr_id = 1;  // a valid WR first: it must not be sent either
              ibv_wr_send(x);
              ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 16);
              x->wr_id = 2;
              ibv_wr_send(x);
              ibv_wr_set_inline_data(x, big.data(), max_inline + 1);
            }) == EINVAL);
  }
  SECTION("wr_set_inline_data_list") {
    REQUIRE(batch(x, [&] {
              x->wr_flags = IBV_SEND_SIGNALED;
              x->wr_id = 1;
              ibv_wr_send(x);
              ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 16);
              x->wr_id = 2;
              ibv_wr_rdma_write(x, f.src.rkey(), f.src.addr());
              ibv_wr_set_inline_data_list(x, 2, over);
            }) == EINVAL);
  }
  SECTION("IBV_SEND_INLINE with wr_set_sge") {
    REQUIRE(batch(x, [&] {
              x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
              x->wr_id = 2;
              ibv_wr_send(x);
              ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), max_inline + 1);
            }) == EINVAL);
  }
  f.check_nothing_sent();
}

TEST_CASE("errors: ibv_wr_abort discards the batch", "[wr-api]") {
  ErrorFixture f;
  ibv_qp_ex *x = f.p.a.x;
  ibv_wr_start(x);
  for (uint64_t i = 0; i < 3; i++) {
    x->wr_id = 1 + i;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 32);
  }
  ibv_wr_abort(x);
  f.check_nothing_sent();
  // An aborted empty batch and an empty complete are harmless.
  ibv_wr_start(x);
  ibv_wr_abort(x);
  REQUIRE(batch(x, [] {}) == 0);
  require_quiet(f.p.a.scq.get(), "requester after empty batches", 50ms);
}

TEST_CASE("errors: invalid batches fail ibv_wr_complete with the documented errno", "[wr-api]") {
  ErrorFixture f(EndpointOptions{.max_send_wr = 8});
  ibv_qp_ex *x = f.p.a.x;
  const uint32_t max_sge = f.p.a.cap.max_send_sge;
  std::vector<ibv_sge> sges(max_sge + 1, f.src.sge(0, 1));
  auto valid_first = [&] {
    x->wr_id = 1;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 8);
  };
  SECTION("more SGEs than max_send_sge: EINVAL") {
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_rdma_write(x, f.src.rkey(), f.src.addr());
              ibv_wr_set_sge_list(x, sges.size(), sges.data());
            }) == EINVAL);
  }
  SECTION("a setter before any builder: EINVAL") {
    REQUIRE(batch(x, [&] { ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 8); }) == EINVAL);
  }
  SECTION("inline data for RDMA READ: EINVAL") {
    uint64_t v = 0;
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_rdma_read(x, f.src.rkey(), f.src.addr());
              ibv_wr_set_inline_data(x, &v, sizeof(v));
            }) == EINVAL);
  }
  SECTION("a UD address on an RC QP: EINVAL") {
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_set_ud_addr(x, nullptr, 1, 1);
            }) == EINVAL);
  }
  SECTION("more WRs than max_send_wr: ENOMEM") {
    const uint32_t depth = f.p.a.cap.max_send_wr;
    REQUIRE(depth >= 8);
    REQUIRE(depth < 64);
    REQUIRE(batch(x, [&] {
              for (uint32_t i = 0; i <= depth; i++) valid_first();
            }) == ENOMEM);
  }
  SECTION("an operation vrnic does not implement (TSO): EOPNOTSUPP") {
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_send_tso(x, nullptr, 0, 0);
              ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 8);
            }) == EOPNOTSUPP);
  }
  SECTION("an XRC SRQ number on a QP that is not an XRC initiator: EINVAL") {
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_set_xrc_srqn(x, 1);
            }) == EINVAL);
  }
  SECTION("an atomic write carries its 8 bytes, no SGE and no null pointer: EINVAL") {
    const uint64_t v = 1;
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_atomic_write(x, f.src.rkey(), f.src.addr(), &v);
              ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 8);
            }) == EINVAL);
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_atomic_write(x, f.src.rkey(), f.src.addr(), nullptr);
            }) == EINVAL);
  }
  SECTION("window operations with bad arguments: EINVAL") {
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_bind_mw(x, nullptr, 0x1234, nullptr);  // no window
            }) == EINVAL);
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_local_inv(x, 0x1234);
              ibv_wr_set_sge(x, f.src.lkey(), f.src.addr(), 8);  // carries no data
            }) == EINVAL);
  }
  SECTION("the first error wins") {
    REQUIRE(batch(x, [&] {
              valid_first();
              ibv_wr_send_tso(x, nullptr, 0, 0);  // EOPNOTSUPP
              ibv_wr_send(x);
              ibv_wr_set_sge_list(x, sges.size(), sges.data());  // would be EINVAL
            }) == EOPNOTSUPP);
  }
  f.check_nothing_sent();
}

TEST_CASE("errors: ibv_wr_complete on a QP not yet in RTS is EINVAL", "[wr-api]") {
  auto d = open_device();
  Endpoint e;
  make_endpoint(*d, e, IBV_QPT_RC);
  Mem src(d->pd.get(), 64);
  auto one_send = [&] {
    return batch(e.x, [&] {
      e.x->wr_id = 1;
      e.x->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_send(e.x);
      ibv_wr_set_sge(e.x, src.lkey(), src.addr(), 8);
    });
  };
  REQUIRE(one_send() == EINVAL);  // RESET
  to_init(e.qp.get());
  REQUIRE(one_send() == EINVAL);  // INIT
  require_quiet(e.scq.get(), "send CQ", 50ms);
}

// ---------------------------------------------------------------------------------------------
// The completion iterator

TEST_CASE("ibv_cq_ex: end_poll consumes what was iterated; mixes with ibv_poll_cq and events",
          "[wr-api]") {
  for (uint32_t cq_flags : {0u, uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)}) {
    INFO("CQ create flags " << cq_flags);
    auto dev = open_device();
    ChannelPtr channel(ibv_create_comp_channel(dev->ctx.get()));
    REQUIRE(channel);
    // A pair whose receiver's CQ reports to the channel.
    Endpoint a, b;
    make_endpoint(*dev, a, IBV_QPT_RC, {.cq_flags = cq_flags});
    make_endpoint(*dev, b, IBV_QPT_RC, {.cq_flags = cq_flags, .recv_channel = channel.get()});
    to_init(a.qp.get());
    to_init(b.qp.get());
    to_rtr(a.qp.get(), *dev, b.qpn());
    to_rtr(b.qp.get(), *dev, a.qpn());
    to_rts(a.qp.get());
    to_rts(b.qp.get());
    Mem src(dev->pd.get(), 4096), dst(dev->pd.get(), 4096);
    fill_pattern(src.at(), src.size(), 91);
    for (uint64_t i = 0; i < 4; i++) post_recv(b.qp.get(), 1100 + i, {dst.sge(i * 1024, 1024)});
    ibv_cq *rcq = ibv_cq_ex_to_cq(b.rcq.get());
    REQUIRE(ibv_req_notify_cq(rcq, 0) == 0);

    // One send: the event arrives, start_poll sees it, next_poll finds no more (ENOENT), and
    // after end_poll the CQ is empty again.
    auto send = [&](uint64_t wr_id, size_t off, uint32_t len) {
      REQUIRE(batch(a.x, [&] {
                a.x->wr_id = wr_id;
                a.x->wr_flags = IBV_SEND_SIGNALED;
                ibv_wr_send(a.x);
                ibv_wr_set_sge(a.x, src.lkey(), src.addr(off), len);
              }) == 0);
    };
    send(1, 0, 11);
    pollfd pfd{channel->fd, POLLIN, 0};
    REQUIRE(::poll(&pfd, 1, int(std::chrono::duration_cast<Ms>(kTimeout).count())) == 1);
    ibv_cq *ev_cq = nullptr;
    void *ev_ctx = nullptr;
    REQUIRE(ibv_get_cq_event(channel.get(), &ev_cq, &ev_ctx) == 0);
    REQUIRE(ev_cq == rcq);
    ibv_ack_cq_events(ev_cq, 1);
    ibv_poll_cq_attr attr{};
    REQUIRE(ibv_start_poll(b.rcq.get(), &attr) == 0);
    check(read_current(b.rcq.get()), received(b, 1100, a.qpn(), 11), "first receive");
    REQUIRE(ibv_next_poll(b.rcq.get()) == ENOENT);
    REQUIRE(ibv_next_poll(b.rcq.get()) == ENOENT);
    ibv_end_poll(b.rcq.get());
    REQUIRE(ibv_start_poll(b.rcq.get(), &attr) == ENOENT);

    // Three sends: iterate only the first, end_poll; ibv_poll_cq then returns the second,
    // and the iterator the third.
    send(2, 100, 22);
    send(3, 200, 33);
    send(4, 300, 44);
    check_all(poll_n(a.scq.get(), 4, "sender"),
              {sent(a, 1, IBV_WC_SEND), sent(a, 2, IBV_WC_SEND), sent(a, 3, IBV_WC_SEND),
               sent(a, 4, IBV_WC_SEND)},
              "sender");
    check(poll_one(b.rcq.get(), "second receive"), received(b, 1101, a.qpn(), 22), "second");
    ibv_wc wc{};
    int n = 0;
    for (auto deadline = Clock::now() + kTimeout; n == 0 && Clock::now() < deadline;)
      n = ibv_poll_cq(rcq, 1, &wc);
    REQUIRE(n == 1);
    CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(wc.wr_id == 1102);
    CHECK(wc.opcode == IBV_WC_RECV);
    CHECK(wc.byte_len == 33);
    CHECK(wc.qp_num == b.qpn());
    CHECK(wc.src_qp == a.qpn());
    check(poll_one(b.rcq.get(), "fourth receive"), received(b, 1103, a.qpn(), 44), "fourth");
    REQUIRE(ibv_start_poll(b.rcq.get(), &attr) == ENOENT);
    REQUIRE(ibv_poll_cq(rcq, 1, &wc) == 0);
    REQUIRE_BYTES("receives", dst.at(0), src.at(0), 11);
    REQUIRE_BYTES("receives", dst.at(1024), src.at(100), 22);
    REQUIRE_BYTES("receives", dst.at(2048), src.at(200), 33);
    REQUIRE_BYTES("receives", dst.at(3072), src.at(300), 44);
  }
}

}  // namespace
