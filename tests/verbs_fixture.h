// Test fixture for the verbs data-path tests: opens the device, builds two connected RC QPs
// (each with its own PD and send/receive CQs), registers guarded buffers, posts work requests
// and polls completions with deadlines so that no test can hang.
//
// Everything here is plain verbs code: it must behave the same on vrnic and on real RDMA
// hardware (RoCE or InfiniBand). The device, port and GID index come from the environment:
//   VRNIC_TEST_DEVICE     (default vrnic0)
//   VRNIC_TEST_PORT       (default 1)
//   VRNIC_TEST_GID_INDEX  (default 0)
//   VRNIC_TEST_WATCHDOG_S (default 60; seconds one test run may take before it is aborted)
//
// Functions named try_* never use Catch2 (they return an error string, empty on success) so
// that a forked child process can use them; the others REQUIRE/FAIL.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vt {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// Longest wait for any single completion; generous for 8 MiB on a slow software NIC.
inline constexpr Ms kCompletionTimeout{10000};
// Guard bytes placed before and after every payload (registered with it, must stay untouched).
inline constexpr size_t kGuard = 64;
inline constexpr size_t kPage = 4096;
inline constexpr unsigned kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// ---------------------------------------------------------------------------------------------
// Environment and names
struct TestEnv {
  std::string device = "vrnic0";
  uint8_t port = 1;
  int gid_index = 0;
};
const TestEnv &test_env();

const char *wc_status_name(int status);
const char *wc_opcode_name(int opcode);
const char *qp_state_name(int state);
std::string describe(const ibv_wc &wc);

// ---------------------------------------------------------------------------------------------
// Data patterns
uint64_t seed_for(std::string_view what, uint64_t a = 0, uint64_t b = 0);
// Deterministic pseudo-random bytes; the same (seed, n) always gives the same bytes.
void fill_pattern(void *dst, size_t n, uint64_t seed);
std::vector<uint8_t> make_pattern(size_t n, uint64_t seed);
// Empty when the ranges are equal, else the first differing offsets and the count.
std::string diff_bytes(const void *actual, const void *expected, size_t n);

// Compares n bytes; on mismatch fails the test naming `what` and the differing offsets.
#define VT_REQUIRE_BYTES(what, actual, expected, n)                     \
  do {                                                                  \
    const std::string vt_diff_ = ::vt::diff_bytes(actual, expected, n); \
    INFO((what) << ": " << vt_diff_);                                   \
    REQUIRE(vt_diff_.empty());                                          \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Owning handles. Destruction errors are reported on stderr (destructors must not throw).
const char *verbs_object_name(ibv_context *);
const char *verbs_object_name(ibv_pd *);
const char *verbs_object_name(ibv_cq *);
const char *verbs_object_name(ibv_qp *);
const char *verbs_object_name(ibv_mr *);
const char *verbs_object_name(ibv_comp_channel *);
const char *verbs_object_name(ibv_srq *);
void report_destroy_failure(const char *what, int rc);

template <class T, int (*Destroy)(T *)>
struct VerbsDeleter {
  void operator()(T *p) const {
    if (p == nullptr) return;
    const int rc = Destroy(p);
    if (rc != 0) report_destroy_failure(verbs_object_name(p), rc);
  }
};
using ContextPtr = std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, VerbsDeleter<ibv_pd, ibv_dealloc_pd>>;
using CqPtr = std::unique_ptr<ibv_cq, VerbsDeleter<ibv_cq, ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, VerbsDeleter<ibv_qp, ibv_destroy_qp>>;
using MrPtr = std::unique_ptr<ibv_mr, VerbsDeleter<ibv_mr, ibv_dereg_mr>>;
using SrqPtr = std::unique_ptr<ibv_srq, VerbsDeleter<ibv_srq, ibv_destroy_srq>>;
using ChannelPtr =
    std::unique_ptr<ibv_comp_channel, VerbsDeleter<ibv_comp_channel, ibv_destroy_comp_channel>>;

// Page-aligned heap memory (posix_memalign), zero-filled.
class AlignedBuf {
 public:
  AlignedBuf() = default;
  explicit AlignedBuf(size_t n, size_t align = kPage);
  uint8_t *data() const { return p_.get(); }
  size_t size() const { return n_; }

 private:
  struct Free {
    void operator()(uint8_t *p) const;
  };
  std::unique_ptr<uint8_t, Free> p_;
  size_t n_ = 0;
};

// Anonymous mmap (MAP_PRIVATE or MAP_SHARED), unmapped on destruction.
class MmapBuf {
 public:
  MmapBuf(size_t n, int flags);
  ~MmapBuf();
  MmapBuf(const MmapBuf &) = delete;
  MmapBuf &operator=(const MmapBuf &) = delete;
  uint8_t *data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t *p_ = nullptr;
  size_t n_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Device, endpoints, pairs
struct Device {
  ContextPtr ctx;
  ibv_device_attr attr{};
  ibv_port_attr port{};
  ibv_gid gid{};
  uint8_t port_num = 1;
  int gid_index = 0;
};
std::string try_open_device(Device &d);
std::string try_open_device(Device &d, const std::string &device);  // another device
// The attributes, port and GID of d.ctx, a context opened otherwise (ibv_import_device).
std::string try_describe_device(Device &d);
std::unique_ptr<Device> open_device();  // FAILs (cleanly) when the device is missing

// Sentinel for QpConfig SGE counts: min(16, device max_sge).
inline constexpr uint32_t kAutoSge = ~0u;

struct QpConfig {
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
  int cq_depth = 1024;
  unsigned qp_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t max_rd_atomic = 16;  // both max_rd_atomic and max_dest_rd_atomic (capped by device)
  uint8_t min_rnr_timer = 12;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  bool sq_sig_all = false;
  bool cq_channel = false;  // both CQs on a completion channel of the endpoint's own
  uint64_t cq_wc_flags = 0;  // non-zero: both CQs made by ibv_create_cq_ex with these wc_flags
};

struct PeerInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
};

// One RC QP with its own PD and its own send and receive CQs. Members are destroyed in
// reverse order: QP, CQs, PD.
struct Endpoint {
  ChannelPtr channel_;  // (QpConfig::cq_channel)
  PdPtr pd_;
  ibv_pd *borrowed_pd_ = nullptr;  // a PD the endpoint uses but does not own (or nullptr)
  CqPtr send_cq_;
  CqPtr recv_cq_;
  QpPtr qp_;
  ibv_qp_cap cap{};  // as returned by ibv_create_qp
  uint32_t psn = 0;

  ibv_pd *pd() const { return pd_ ? pd_.get() : borrowed_pd_; }
  ibv_cq *scq() const { return send_cq_.get(); }
  ibv_cq *rcq() const { return recv_cq_.get(); }
  ibv_qp *qp() const { return qp_.get(); }
  ibv_comp_channel *channel() const { return channel_.get(); }
  uint32_t qpn() const { return qp_->qp_num; }
};

uint32_t resolve_sge(const Device &d, uint32_t requested);
// The endpoint's PD is its own, or `pd` if given (which it does not deallocate).
std::string try_create_endpoint(Device &d, const QpConfig &c, Endpoint &e, ibv_pd *pd = nullptr);
PeerInfo local_info(const Device &d, const Endpoint &e);
std::string try_modify_init(const Device &d, Endpoint &e, const QpConfig &c);
std::string try_modify_rtr(const Device &d, Endpoint &e, const QpConfig &c, const PeerInfo &peer);
std::string try_modify_rts(const Device &d, Endpoint &e, const QpConfig &c);
// RESET -> INIT -> RTR -> RTS against `peer`.
std::string try_connect(const Device &d, Endpoint &e, const QpConfig &c, const PeerInfo &peer);

// Two RC QPs in one process, connected to each other over the port's GID.
struct Pair {
  explicit Pair(const QpConfig &cfg = QpConfig{});
  QpConfig cfg;
  std::unique_ptr<Device> dev;
  Endpoint a;  // usually the requester
  Endpoint b;  // usually the responder
};

// ---------------------------------------------------------------------------------------------
// Memory
MrPtr reg_mr(ibv_pd *pd, void *addr, size_t len, unsigned access = kAllAccess);

// A registered buffer laid out as [guard | misalign | payload | guard]; the MR covers all of
// it so that a NIC writing outside the payload is caught by the guard bytes. The constructor
// fills the whole buffer with `seed`'s pattern BEFORE registering and checks that
// registration did not alter it.
struct Region {
  Region(ibv_pd *pd, size_t len, uint64_t seed, size_t misalign = 0, unsigned access = kAllAccess);
  AlignedBuf buf;
  size_t off = 0;
  size_t len = 0;
  MrPtr mr;

  uint8_t *payload() const { return buf.data() + off; }
  uint64_t addr() const { return reinterpret_cast<uintptr_t>(payload()); }
  uint32_t lkey() const { return mr->lkey; }
  uint32_t rkey() const { return mr->rkey; }
  std::vector<uint8_t> snapshot() const { return {buf.data(), buf.data() + buf.size()}; }
};

// ---------------------------------------------------------------------------------------------
// Work requests and completions
ibv_sge make_sge(const void *addr, size_t len, uint32_t lkey);
ibv_send_wr make_send_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge *sg, int num_sge,
                         unsigned flags = IBV_SEND_SIGNALED);
ibv_recv_wr make_recv_wr(uint64_t wr_id, ibv_sge *sg, int num_sge);
void post_send(ibv_qp *qp, ibv_send_wr *wr);  // REQUIREs success
void post_recv(ibv_qp *qp, ibv_recv_wr *wr);  // REQUIREs success

// Polls one completion until `deadline`. Returns 1 (got one), 0 (deadline passed) or the
// negative ibv_poll_cq result.
int poll_until(ibv_cq *cq, ibv_wc *wc, Clock::time_point deadline);
ibv_wc poll_one(ibv_cq *cq, const char *what, Ms timeout = kCompletionTimeout);
std::vector<ibv_wc> poll_n(ibv_cq *cq, size_t n, const char *what, Ms timeout = kCompletionTimeout);
// Fails if a completion shows up within `window` (a zero window polls once).
void require_no_completion(ibv_cq *cq, Ms window, const char *what);

struct WcExpect {
  const char *what = "";
  uint64_t wr_id = 0;
  uint32_t qp_num = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  int opcode = -1;                 // checked when >= 0 (and status is success)
  int64_t byte_len = -1;           // checked when >= 0 (and status is success)
  bool recv = false;               // receive completion: IBV_WC_WITH_IMM must match imm_be
  std::optional<uint32_t> imm_be;  // expected immediate (network order), if any
};
void check_wc(const ibv_wc &wc, const WcExpect &e);
// A completion's expected fields, the others as WcExpect leaves them.
WcExpect want(const char *what, uint64_t wr_id, uint32_t qp_num,
              ibv_wc_status status = IBV_WC_SUCCESS, int opcode = -1, int64_t byte_len = -1,
              bool recv = false);

std::optional<ibv_qp_state> try_query_state(ibv_qp *qp);
ibv_qp_state query_state(ibv_qp *qp);
// Polls ibv_query_qp until the QP reaches `want` (fails after `timeout`).
void require_qp_state(ibv_qp *qp, ibv_qp_state want, const char *what, Ms timeout = Ms{2000});

// ---------------------------------------------------------------------------------------------
// vrnicd object counts through `$VRNICCTL stats` (key=value lines).
std::optional<std::map<std::string, long long>> read_vrnic_stats(std::string *err);

// ---------------------------------------------------------------------------------------------
// Fork helpers
// For a freshly forked child: default signal dispositions, die with the parent, hard limit.
void child_prepare(unsigned max_seconds);
// Runs a program (argv[0] a path) to its end and returns its wait status, or -1 if it could not
// start; killed (SIGKILL) after max_seconds. Spawned, not forked: a fork of a test process
// with registered memory gives the child copies of all of it (as the kernel gives of pinned
// pages), which for a program exec'd at once is time thrown away (0.6 s per 256 MB here).
int run_program(const std::vector<std::string> &argv, unsigned max_seconds);
// Reads/writes exactly n bytes, waiting at most `timeout`; false on EOF, error or timeout.
bool read_full(int fd, void *buf, size_t n, Ms timeout);
bool write_full(int fd, const void *buf, size_t n);

}  // namespace vt
