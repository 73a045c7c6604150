// Implementation of the verbs test fixture (see verbs_fixture.h) and a per-test watchdog.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "verbs_fixture.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

namespace vt {
namespace {

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (" + std::to_string(e) + ")";
}

long env_long(const char *name, long dflt) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char *end = nullptr;
  const long x = std::strtol(v, &end, 0);
  return (end != nullptr && *end == '\0') ? x : dflt;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint32_t next_psn() {
  static uint64_t counter = 0x5eed;
  return static_cast<uint32_t>(splitmix64(++counter)) & 0xFFFFFF;
}

// ---- watchdog: a test run that exceeds its time is aborted (Catch2 reports it as failed) ----
char g_current_test[256];
size_t g_current_test_len = 0;

extern "C" void on_watchdog(int) {
  static const char msg[] = "\nverbs test watchdog: test run exceeded VRNIC_TEST_WATCHDOG_S: ";
  ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  ignored = ::write(2, g_current_test, g_current_test_len);
  ignored = ::write(2, "\n", 1);
  (void)ignored;
  std::abort();
}

void arm_watchdog() {
  struct sigaction sa {};
  sa.sa_handler = on_watchdog;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  alarm(static_cast<unsigned>(std::max(1L, env_long("VRNIC_TEST_WATCHDOG_S", 60))));
}

struct WatchdogListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const &info) override {
    TestEventListenerBase::testCaseStarting(info);
    std::snprintf(g_current_test, sizeof g_current_test, "%s", info.name.c_str());
    g_current_test_len = std::strlen(g_current_test);
    arm_watchdog();
  }
  void sectionStarting(Catch::SectionInfo const &info) override {
    TestEventListenerBase::sectionStarting(info);
    arm_watchdog();  // every generator value / section run gets the full budget
  }
  void testCaseEnded(Catch::TestCaseStats const &stats) override {
    alarm(0);
    TestEventListenerBase::testCaseEnded(stats);
  }
};

}  // namespace
}  // namespace vt

using VtWatchdogListener = vt::WatchdogListener;  // the macro needs an unqualified name
CATCH_REGISTER_LISTENER(VtWatchdogListener)

namespace vt {

// ---------------------------------------------------------------------------------------------
const TestEnv &test_env() {
  static const TestEnv env = [] {
    TestEnv e;
    if (const char *d = std::getenv("VRNIC_TEST_DEVICE"); d != nullptr && *d != '\0') e.device = d;
    e.port = static_cast<uint8_t>(env_long("VRNIC_TEST_PORT", 1));
    e.gid_index = static_cast<int>(env_long("VRNIC_TEST_GID_INDEX", 0));
    return e;
  }();
  return env;
}

const char *wc_status_name(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR:
      return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR:
      return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
      return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR:
      return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR:
      return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR:
      return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR:
      return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR:
      return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR:
      return "IBV_WC_GENERAL_ERR";
    case IBV_WC_TM_ERR:
      return "IBV_WC_TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE:
      return "IBV_WC_TM_RNDV_INCOMPLETE";
    default:
      return "(unknown ibv_wc_status)";
  }
}

const char *wc_opcode_name(int opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE:
      return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP:
      return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD:
      return "IBV_WC_FETCH_ADD";
    case IBV_WC_BIND_MW:
      return "IBV_WC_BIND_MW";
    case IBV_WC_LOCAL_INV:
      return "IBV_WC_LOCAL_INV";
    case IBV_WC_TSO:
      return "IBV_WC_TSO";
    case IBV_WC_RECV:
      return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "IBV_WC_RECV_RDMA_WITH_IMM";
    default:
      return "(unknown ibv_wc_opcode)";
  }
}

const char *qp_state_name(int state) {
  switch (state) {
    case IBV_QPS_RESET:
      return "IBV_QPS_RESET";
    case IBV_QPS_INIT:
      return "IBV_QPS_INIT";
    case IBV_QPS_RTR:
      return "IBV_QPS_RTR";
    case IBV_QPS_RTS:
      return "IBV_QPS_RTS";
    case IBV_QPS_SQD:
      return "IBV_QPS_SQD";
    case IBV_QPS_SQE:
      return "IBV_QPS_SQE";
    case IBV_QPS_ERR:
      return "IBV_QPS_ERR";
    default:
      return "(unknown ibv_qp_state)";
  }
}

std::string describe(const ibv_wc &wc) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "wc{wr_id=0x%" PRIx64
                " status=%s opcode=%s byte_len=%u qp_num=0x%x wc_flags=0x%x "
                "imm_data(be)=0x%08x vendor_err=0x%x}",
                static_cast<uint64_t>(wc.wr_id), wc_status_name(wc.status),
                wc_opcode_name(wc.opcode), wc.byte_len, wc.qp_num, wc.wc_flags, wc.imm_data,
                wc.vendor_err);
  return buf;
}

// ---------------------------------------------------------------------------------------------
uint64_t seed_for(std::string_view what, uint64_t a, uint64_t b) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char c : what) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return splitmix64(h ^ splitmix64(a ^ splitmix64(b)));
}

void fill_pattern(void *dst, size_t n, uint64_t seed) {
  auto *p = static_cast<uint8_t *>(dst);
  uint64_t x = splitmix64(seed) | 1;
  auto next = [&x] {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545F4914F6CDD1Dull;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = next();
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    const uint64_t v = next();
    std::memcpy(p + i, &v, n - i);
  }
}

std::vector<uint8_t> make_pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

std::string diff_bytes(const void *actual, const void *expected, size_t n) {
  if (n == 0 || std::memcmp(actual, expected, n) == 0) return {};
  const auto *a = static_cast<const uint8_t *>(actual);
  const auto *e = static_cast<const uint8_t *>(expected);
  size_t count = 0, first = n, last = 0;
  std::ostringstream shown;
  for (size_t i = 0; i < n; ++i) {
    if (a[i] == e[i]) continue;
    if (count < 8) {
      char b[64];
      std::snprintf(b, sizeof b, " [%zu] got 0x%02x want 0x%02x;", i, a[i], e[i]);
      shown << b;
    }
    ++count;
    first = std::min(first, i);
    last = i;
  }
  std::ostringstream os;
  os << count << " of " << n << " bytes differ, offsets " << first << ".." << last << ":"
     << shown.str();
  return os.str();
}

// ---------------------------------------------------------------------------------------------
const char *verbs_object_name(ibv_context *) {
  return "ibv_close_device";
}
const char *verbs_object_name(ibv_pd *) {
  return "ibv_dealloc_pd";
}
const char *verbs_object_name(ibv_cq *) {
  return "ibv_destroy_cq";
}
const char *verbs_object_name(ibv_qp *) {
  return "ibv_destroy_qp";
}
const char *verbs_object_name(ibv_mr *) {
  return "ibv_dereg_mr";
}
const char *verbs_object_name(ibv_comp_channel *) {
  return "ibv_destroy_comp_channel";
}
const char *verbs_object_name(ibv_srq *) {
  return "ibv_destroy_srq";
}

void report_destroy_failure(const char *what, int rc) {
  std::fprintf(stderr, "verbs test: %s failed: %s\n", what, errno_text(rc).c_str());
}

AlignedBuf::AlignedBuf(size_t n, size_t align) : n_(n) {
  void *p = nullptr;
  const int rc = posix_memalign(&p, align, std::max<size_t>(n, 1));
  REQUIRE(rc == 0);
  std::memset(p, 0, std::max<size_t>(n, 1));
  p_.reset(static_cast<uint8_t *>(p));
}

void AlignedBuf::Free::operator()(uint8_t *p) const {
  std::free(p);
}

MmapBuf::MmapBuf(size_t n, int flags) : n_(n) {
  void *p = mmap(nullptr, n, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS, -1, 0);
  INFO("mmap of " << n << " bytes: " << errno_text(errno));
  REQUIRE(p != MAP_FAILED);
  p_ = static_cast<uint8_t *>(p);
}

MmapBuf::~MmapBuf() {
  if (p_ != nullptr && munmap(p_, n_) != 0) report_destroy_failure("munmap", errno);
}

// ---------------------------------------------------------------------------------------------
std::string try_open_device(Device &d) {
  return try_open_device(d, test_env().device);
}

std::string try_open_device(Device &d, const std::string &device) {
  int num = 0;
  errno = 0;
  ibv_device **list = ibv_get_device_list(&num);
  if (list == nullptr) {
    return "ibv_get_device_list failed: " + errno_text(errno) +
           " (is vrnicd running and VRNIC_SOCKET pointing at it?)";
  }
  ibv_device *found = nullptr;
  std::string names;
  for (int i = 0; i < num && list[i] != nullptr; ++i) {
    const char *name = ibv_get_device_name(list[i]);
    names += std::string(names.empty() ? "" : ", ") + (name ? name : "?");
    if (name != nullptr && device == name) found = list[i];
  }
  if (found == nullptr) {
    ibv_free_device_list(list);
    return "RDMA device '" + device +
           "' not found (devices: " + (names.empty() ? std::string("none") : names) +
           "); start vrnicd and point VRNIC_SOCKET at it, or set VRNIC_TEST_DEVICE";
  }
  errno = 0;
  d.ctx.reset(ibv_open_device(found));
  const int open_errno = errno;
  ibv_free_device_list(list);
  if (!d.ctx) return "ibv_open_device(" + device + ") failed: " + errno_text(open_errno);
  return try_describe_device(d);
}

std::string try_describe_device(Device &d) {
  const TestEnv &env = test_env();
  d.port_num = env.port;
  d.gid_index = env.gid_index;
  if (int rc = ibv_query_device(d.ctx.get(), &d.attr); rc != 0)
    return "ibv_query_device failed: " + errno_text(rc);
  if (int rc = ibv_query_port(d.ctx.get(), d.port_num, &d.port); rc != 0)
    return "ibv_query_port(" + std::to_string(d.port_num) + ") failed: " + errno_text(rc);
  if (d.port.state != IBV_PORT_ACTIVE)
    return "port " + std::to_string(d.port_num) + " is not ACTIVE (state " +
           std::to_string(d.port.state) + ")";
  if (int rc = ibv_query_gid(d.ctx.get(), d.port_num, d.gid_index, &d.gid); rc != 0)
    return "ibv_query_gid(index " + std::to_string(d.gid_index) + ") failed: " + errno_text(rc);
  static const ibv_gid zero{};
  if (std::memcmp(&d.gid, &zero, sizeof zero) == 0)
    return "GID index " + std::to_string(d.gid_index) + " is empty";
  return {};
}

std::unique_ptr<Device> open_device() {
  auto d = std::make_unique<Device>();
  const std::string err = try_open_device(*d);
  if (!err.empty()) FAIL(err);
  return d;
}

uint32_t resolve_sge(const Device &d, uint32_t requested) {
  if (requested != kAutoSge) return requested;
  return static_cast<uint32_t>(std::clamp(d.attr.max_sge, 1, 16));
}

std::string try_create_endpoint(Device &d, const QpConfig &c, Endpoint &e, ibv_pd *pd) {
  ibv_context *ctx = d.ctx.get();
  if (pd) {
    e.borrowed_pd_ = pd;
  } else {
    e.pd_.reset(ibv_alloc_pd(ctx));
    if (!e.pd_) return "ibv_alloc_pd failed: " + errno_text(errno);
  }
  const int depth = d.attr.max_cqe > 0 ? std::min(c.cq_depth, d.attr.max_cqe) : c.cq_depth;
  if (c.cq_channel) {
    e.channel_.reset(ibv_create_comp_channel(ctx));
    if (!e.channel_) return "ibv_create_comp_channel failed: " + errno_text(errno);
  }
  for (CqPtr *cq : {&e.send_cq_, &e.recv_cq_}) {
    if (c.cq_wc_flags) {
      ibv_cq_init_attr_ex ca{};
      ca.cqe = uint32_t(depth);
      ca.channel = e.channel_.get();
      ca.wc_flags = c.cq_wc_flags;
      ibv_cq_ex *ex = ibv_create_cq_ex(ctx, &ca);
      cq->reset(ex ? ibv_cq_ex_to_cq(ex) : nullptr);
    } else {
      cq->reset(ibv_create_cq(ctx, depth, nullptr, e.channel_.get(), 0));
    }
    if (!*cq) return "ibv_create_cq failed: " + errno_text(errno);
  }

  ibv_qp_init_attr ia{};
  ia.send_cq = e.send_cq_.get();
  ia.recv_cq = e.recv_cq_.get();
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = c.sq_sig_all ? 1 : 0;
  ia.cap.max_send_wr = c.max_send_wr;
  ia.cap.max_recv_wr = c.max_recv_wr;
  ia.cap.max_send_sge = resolve_sge(d, c.max_send_sge);
  ia.cap.max_recv_sge = resolve_sge(d, c.max_recv_sge);
  ia.cap.max_inline_data = c.max_inline_data;
  errno = 0;
  e.qp_.reset(ibv_create_qp(e.pd(), &ia));
  if (!e.qp_) {
    return "ibv_create_qp(RC, send_wr " + std::to_string(ia.cap.max_send_wr) + ", recv_wr " +
           std::to_string(ia.cap.max_recv_wr) + ", send_sge " +
           std::to_string(ia.cap.max_send_sge) + ", recv_sge " +
           std::to_string(ia.cap.max_recv_sge) + ", inline " +
           std::to_string(ia.cap.max_inline_data) + ") failed: " + errno_text(errno);
  }
  e.cap = ia.cap;
  e.psn = next_psn();
  return {};
}

PeerInfo local_info(const Device &d, const Endpoint &e) {
  PeerInfo p;
  p.qpn = e.qpn();
  p.psn = e.psn;
  p.lid = d.port.lid;
  p.gid = d.gid;
  return p;
}

std::string try_modify_init(const Device &d, Endpoint &e, const QpConfig &c) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = d.port_num;
  at.qp_access_flags = c.qp_access;
  const int rc = ibv_modify_qp(
      e.qp(), &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  return rc == 0 ? std::string() : "ibv_modify_qp(RESET->INIT) failed: " + errno_text(rc);
}

std::string try_modify_rtr(const Device &d, Endpoint &e, const QpConfig &c, const PeerInfo &peer) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = d.port.active_mtu;
  at.dest_qp_num = peer.qpn;
  at.rq_psn = peer.psn;
  at.max_dest_rd_atomic =
      static_cast<uint8_t>(std::min<int>(c.max_rd_atomic, std::max(d.attr.max_qp_rd_atom, 0)));
  at.min_rnr_timer = c.min_rnr_timer;
  at.ah_attr.is_global = 1;
  at.ah_attr.grh.dgid = peer.gid;
  at.ah_attr.grh.sgid_index = static_cast<uint8_t>(d.gid_index);
  at.ah_attr.grh.hop_limit = 64;
  at.ah_attr.dlid = peer.lid;
  at.ah_attr.sl = 0;
  at.ah_attr.port_num = d.port_num;
  const int rc =
      ibv_modify_qp(e.qp(), &at,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  return rc == 0 ? std::string() : "ibv_modify_qp(INIT->RTR) failed: " + errno_text(rc);
}

std::string try_modify_rts(const Device &d, Endpoint &e, const QpConfig &c) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = e.psn;
  at.timeout = c.timeout;
  at.retry_cnt = c.retry_cnt;
  at.rnr_retry = c.rnr_retry;
  at.max_rd_atomic =
      static_cast<uint8_t>(std::min<int>(c.max_rd_atomic, std::max(d.attr.max_qp_init_rd_atom, 0)));
  const int rc = ibv_modify_qp(e.qp(), &at,
                               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  return rc == 0 ? std::string() : "ibv_modify_qp(RTR->RTS) failed: " + errno_text(rc);
}

std::string try_connect(const Device &d, Endpoint &e, const QpConfig &c, const PeerInfo &peer) {
  std::string err = try_modify_init(d, e, c);
  if (err.empty()) err = try_modify_rtr(d, e, c, peer);
  if (err.empty()) err = try_modify_rts(d, e, c);
  return err;
}

Pair::Pair(const QpConfig &c) : cfg(c), dev(open_device()) {
  std::string err = try_create_endpoint(*dev, cfg, a);
  if (!err.empty()) FAIL("QP a: " << err);
  err = try_create_endpoint(*dev, cfg, b);
  if (!err.empty()) FAIL("QP b: " << err);
  // Start one side just below the 24-bit PSN wrap so multi-packet messages cross it.
  a.psn = 0xFFFFFF - (a.psn % 251);
  err = try_connect(*dev, a, cfg, local_info(*dev, b));
  if (!err.empty()) FAIL("connecting QP a: " << err);
  err = try_connect(*dev, b, cfg, local_info(*dev, a));
  if (!err.empty()) FAIL("connecting QP b: " << err);
}

// ---------------------------------------------------------------------------------------------
MrPtr reg_mr(ibv_pd *pd, void *addr, size_t len, unsigned access) {
  errno = 0;
  MrPtr mr(ibv_reg_mr(pd, addr, len, static_cast<int>(access)));
  INFO("ibv_reg_mr(addr " << addr << ", len " << len << ", access 0x" << std::hex << access
                          << std::dec << "): " << errno_text(errno));
  REQUIRE(mr != nullptr);
  return mr;
}

Region::Region(ibv_pd *pd, size_t n, uint64_t seed, size_t misalign, unsigned access)
    : buf(kGuard + misalign + n + kGuard), off(kGuard + misalign), len(n) {
  fill_pattern(buf.data(), buf.size(), seed);
  const std::vector<uint8_t> before = snapshot();
  mr = reg_mr(pd, buf.data(), buf.size(), access);
  VT_REQUIRE_BYTES("buffer contents after ibv_reg_mr", buf.data(), before.data(), buf.size());
}

// ---------------------------------------------------------------------------------------------
ibv_sge make_sge(const void *addr, size_t len, uint32_t lkey) {
  ibv_sge s{};
  s.addr = reinterpret_cast<uintptr_t>(addr);
  s.length = static_cast<uint32_t>(len);
  s.lkey = lkey;
  return s;
}

ibv_send_wr make_send_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge *sg, int num_sge,
                         unsigned flags) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sg;
  wr.num_sge = num_sge;
  wr.send_flags = flags;
  return wr;
}

ibv_recv_wr make_recv_wr(uint64_t wr_id, ibv_sge *sg, int num_sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sg;
  wr.num_sge = num_sge;
  return wr;
}

void post_send(ibv_qp *qp, ibv_send_wr *wr) {
  ibv_send_wr *bad = nullptr;
  const int rc = ibv_post_send(qp, wr, &bad);
  INFO("ibv_post_send: " << (rc ? errno_text(rc) : std::string("ok")));
  REQUIRE(rc == 0);
}

void post_recv(ibv_qp *qp, ibv_recv_wr *wr) {
  ibv_recv_wr *bad = nullptr;
  const int rc = ibv_post_recv(qp, wr, &bad);
  INFO("ibv_post_recv: " << (rc ? errno_text(rc) : std::string("ok")));
  REQUIRE(rc == 0);
}

int poll_until(ibv_cq *cq, ibv_wc *wc, Clock::time_point deadline) {
  for (unsigned spins = 0;; ++spins) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n;
    if ((spins & 63) == 63 && Clock::now() >= deadline) return ibv_poll_cq(cq, 1, wc);
    if (spins < 256) continue;  // busy poll first
    if (spins < 20000) {
      sched_yield();  // let the NIC's worker run on a small machine
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

ibv_wc poll_one(ibv_cq *cq, const char *what, Ms timeout) {
  ibv_wc wc{};
  const int n = poll_until(cq, &wc, Clock::now() + timeout);
  if (n < 0) FAIL("ibv_poll_cq on " << what << " returned " << n);
  if (n == 0) FAIL("no completion on " << what << " within " << timeout.count() << " ms");
  return wc;
}

std::vector<ibv_wc> poll_n(ibv_cq *cq, size_t n, const char *what, Ms timeout) {
  std::vector<ibv_wc> out;
  out.reserve(n);
  const auto deadline = Clock::now() + timeout;
  while (out.size() < n) {
    ibv_wc wc{};
    const int r = poll_until(cq, &wc, deadline);
    if (r < 0) FAIL("ibv_poll_cq on " << what << " returned " << r);
    if (r == 0) {
      FAIL("only " << out.size() << " of " << n << " completions on " << what << " within "
                   << timeout.count() << " ms");
    }
    out.push_back(wc);
  }
  return out;
}

void require_no_completion(ibv_cq *cq, Ms window, const char *what) {
  ibv_wc wc{};
  const int n = poll_until(cq, &wc, Clock::now() + window);
  if (n < 0) FAIL("ibv_poll_cq on " << what << " returned " << n);
  if (n > 0) FAIL("unexpected completion on " << what << ": " << describe(wc));
}

WcExpect want(const char *what, uint64_t wr_id, uint32_t qp_num, ibv_wc_status status,
              int opcode, int64_t byte_len, bool recv) {
  WcExpect e;
  e.what = what;
  e.wr_id = wr_id;
  e.qp_num = qp_num;
  e.status = status;
  e.opcode = opcode;
  e.byte_len = byte_len;
  e.recv = recv;
  return e;
}

void check_wc(const ibv_wc &wc, const WcExpect &e) {
  INFO(e.what << ": " << describe(wc));
  CHECK(wc.wr_id == e.wr_id);
  CHECK(wc.qp_num == e.qp_num);
  REQUIRE(std::string(wc_status_name(wc.status)) == wc_status_name(e.status));
  if (e.status != IBV_WC_SUCCESS) return;  // other fields are undefined for errors
  if (e.opcode >= 0) CHECK(std::string(wc_opcode_name(wc.opcode)) == wc_opcode_name(e.opcode));
  if (e.byte_len >= 0) CHECK(static_cast<int64_t>(wc.byte_len) == e.byte_len);
  if (e.recv) {
    if (e.imm_be) {
      CHECK((wc.wc_flags & IBV_WC_WITH_IMM) != 0);
      CHECK(wc.imm_data == *e.imm_be);
    } else {
      CHECK((wc.wc_flags & IBV_WC_WITH_IMM) == 0);
    }
  }
}

std::optional<ibv_qp_state> try_query_state(ibv_qp *qp) {
  ibv_qp_attr at{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(qp, &at, IBV_QP_STATE, &ia) != 0) return std::nullopt;
  return at.qp_state;
}

ibv_qp_state query_state(ibv_qp *qp) {
  const auto s = try_query_state(qp);
  REQUIRE(s.has_value());
  return *s;
}

void require_qp_state(ibv_qp *qp, ibv_qp_state want, const char *what, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  std::optional<ibv_qp_state> s;
  for (;;) {
    s = try_query_state(qp);
    if (!s) FAIL("ibv_query_qp on " << what << " failed");
    if (*s == want || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(Ms(1));
  }
  INFO(what << " state after up to " << timeout.count() << " ms");
  CHECK(std::string(qp_state_name(*s)) == qp_state_name(want));
}

// ---------------------------------------------------------------------------------------------
std::optional<std::map<std::string, long long>> read_vrnic_stats(std::string *err) {
  const char *ctl = std::getenv("VRNICCTL");
  if (ctl == nullptr || *ctl == '\0') {
    if (err) *err = "VRNICCTL is not set";
    return std::nullopt;
  }
  std::string cmd = "'";
  for (const char *p = ctl; *p; ++p)
    cmd += (*p == '\'') ? std::string("'\\''") : std::string(1, *p);
  cmd += "' stats";
  FILE *f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    if (err) *err = "popen(" + cmd + ") failed: " + errno_text(errno);
    return std::nullopt;
  }
  std::string out;
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  if (status != 0) {
    if (err) *err = cmd + " failed (status " + std::to_string(status) + "), output: " + out;
    return std::nullopt;
  }
  std::map<std::string, long long> m;
  std::istringstream is(out);
  std::string line;
  while (std::getline(is, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    long long v = 0;
    const char *b = line.data() + eq + 1, *e = line.data() + line.size();
    while (e > b && (e[-1] == ' ' || e[-1] == '\r' || e[-1] == '\t')) --e;
    auto [ptr, ec] = std::from_chars(b, e, v);
    if (ec == std::errc() && ptr == e) m[line.substr(0, eq)] = v;
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
void child_prepare(unsigned max_seconds) {
  for (const int sig :
       {SIGALRM, SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTERM, SIGINT, SIGPIPE}) {
    signal(sig, SIG_DFL);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  alarm(max_seconds);
}

int run_program(const std::vector<std::string> &argv, unsigned max_seconds) {
  std::vector<char *> args;
  for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  const auto deadline = Clock::now() + std::chrono::seconds(max_seconds);
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return st;
    }
    std::this_thread::sleep_for(Ms{2});
  }
}

bool read_full(int fd, void *buf, size_t n, Ms timeout) {
  auto *p = static_cast<uint8_t *>(buf);
  const auto deadline = Clock::now() + timeout;
  while (n > 0) {
    const auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_full(int fd, const void *buf, size_t n) {
  const auto *p = static_cast<const uint8_t *>(buf);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace vt
