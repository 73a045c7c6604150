// Integrity across the wire under fault injection. The test starts two vrnicd itself ($VRNICD),
// each with a udp port (127.0.0.1 and 127.0.0.2, on a UDP port free for this run) and a private
// socket in a temporary directory; one process opens a context on each daemon and connects QPs
// across them, so every packet crosses kernel UDP, the ICRC check and the fault injector on
// the receiving daemon's port.
//
// RC, once per fault setting (none, loss=1, loss=10, reorder=5, dup=1, corrupt=1, and with 1/64
// of the volume each, hold_op=0 to 20: every frame of one opcode overtaken; the same setting
// on both daemons, each with its own fixed seed): two QP pairs, path MTU 1024 and
// 4096, each carrying traffic both ways (four flows at once), each flow with 64 WRs in flight:
// RDMA WRITE (with and without immediate), RDMA READ, SEND (with and without immediate),
// fetch-and-add and compare-and-swap, messages of 1 B to 256 KiB (many not multiples of the
// MTU). Every byte is checked at its destination against a deterministic pattern (and the
// guard bytes after it against the poison put there before the WR was posted); every WR must
// complete exactly once, in order, with IBV_WC_SUCCESS; receives must match the sends that
// consumed them in order (wr_id, length, immediate); every atomic must return the value its
// position in the sequence implies, and the counters must end at the expected sums. Afterwards
// the daemons' counters must show that the faults happened and were recovered from.
//
// UC and UD, under loss=1: messages (datagrams) that arrive must be whole and intact, in order;
// lost ones are simply missing; every send completion is a success. The sender writes a send
// buffer again as soon as its completion allows.
//
// Counters and fault injection go through vrnicctl (next to $VRNICD, or $VRNICCTL).
//
// Knobs (environment):
//   VRNICD              vrnicd to start (required; tests/integration/50_catch2.sh exports it)
//   VRNIC_WIRE_BYTES    bytes each RC setting moves, all flows together (suffix K, M or G;
//                       default 64M)
//   VRNIC_WIRE_TIMEOUT  the RC QPs' `timeout` attribute (default 12: 4.096 us * 2^12 ~ 17 ms)
//   VRNIC_WIRE_STALL_S  seconds without any completion before a run fails (default 15)
//   VRNIC_WIRE_OPS, VRNIC_WIRE_FLOWS, VRNIC_WIRE_INFLIGHT, VRNIC_WIRE_MAX_MSG narrow the RC
//                       traffic down to reproduce a failure (see struct Mix below).
// Unless VRNIC_TEST_WATCHDOG_S is set, the fixture's per-test watchdog is scaled to the volume.
// Progress (bytes, seconds, MB/s, counters) goes to stderr, one line per setting; a failure
// prints every flow's state, the error completions still queued and both daemons' counters.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "verbs_fixture.h"
#include "vrnic/ctl_io.h"
#include "vrnic/ece.h"

using namespace vt;

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;
constexpr uint64_t kDefaultWireBytes = 64 * MiB;
constexpr uint8_t kPoison = 0x5A;

// ---------------------------------------------------------------------------------------------
// Knobs

uint64_t parse_size(const char *text, uint64_t dflt) {
  if (text == nullptr || *text == '\0') return dflt;
  char *end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 0);
  uint64_t mult = 1;
  switch (std::toupper(static_cast<unsigned char>(*end))) {
    case 'K':
      mult = KiB;
      break;
    case 'M':
      mult = MiB;
      break;
    case 'G':
      mult = 1024 * MiB;
      break;
  }
  if (mult != 1) ++end;
  if (end == text || *end != '\0' || v == 0) {
    std::fprintf(stderr, "wire test: ignoring bad size '%s'\n", text);
    return dflt;
  }
  return v * mult;
}

long env_num(const char *name, long dflt, long lo, long hi) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char *end = nullptr;
  const long x = std::strtol(v, &end, 0);
  return (*end == '\0' && x >= lo && x <= hi) ? x : dflt;
}

uint64_t wire_bytes() {
  static const uint64_t v = parse_size(std::getenv("VRNIC_WIRE_BYTES"), kDefaultWireBytes);
  return v;
}
uint8_t rc_timeout() {
  return static_cast<uint8_t>(env_num("VRNIC_WIRE_TIMEOUT", 12, 1, 31));
}
Ms stall_limit() {
  return Ms(1000 * env_num("VRNIC_WIRE_STALL_S", 15, 1, 3600));
}
// Seconds one test case may take: generous for the volume, at least the fixture's default.
unsigned test_budget_s() {
  return static_cast<unsigned>(60 + wire_bytes() / MiB);
}

// The fixture's watchdog reads VRNIC_TEST_WATCHDOG_S each time it arms: scale it to the volume
// before any test starts, unless the user chose a value.
const bool g_watchdog_scaled = [] {
  if (std::getenv("VRNIC_TEST_WATCHDOG_S") == nullptr)
    setenv("VRNIC_TEST_WATCHDOG_S", std::to_string(test_budget_s()).c_str(), 1);
  return true;
}();

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string mib(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / double(MiB));
  return b;
}

// ---------------------------------------------------------------------------------------------
// Checking memory

// "" when p[0, n) is the pattern of `seed` (vt::fill_pattern), else what differs.
std::string check_pattern(const uint8_t *p, size_t n, uint64_t seed) {
  static std::vector<uint8_t> want;
  if (want.size() < n) want.resize(n);
  fill_pattern(want.data(), n, seed);
  if (std::memcmp(p, want.data(), n) == 0) return {};
  return diff_bytes(p, want.data(), n);
}

// "" when p[0, n) still holds the poison byte.
std::string check_poison(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != kPoison) {
      char b[96];
      std::snprintf(b, sizeof b, "byte %zu of %zu is 0x%02x, not the poison 0x%02x", i, n, p[i],
                    kPoison);
      return b;
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// The daemons

std::string errno_str(int e) {
  return std::string(std::strerror(e)) + " (" + std::to_string(e) + ")";
}

// A control-protocol request to vrnicd (what vrnicctl does), bounded by socket timeouts.
std::string ctl_request(const std::string &socket, vrnic::ctl::Op op, const void *body, size_t len,
                        vrnic::ctl::Message *out) {
  const int s = vrnic::ctl::connect_daemon(socket.c_str());
  if (s < 0) return "cannot connect to " + socket + ": " + errno_str(-s);
  const timeval tv{5, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int err = vrnic::ctl::send_message(s, op, 0, body, len);
  if (err == 0) err = vrnic::ctl::recv_message(s, out);
  ::close(s);
  if (err != 0) return "control request to " + socket + " failed: " + errno_str(err);
  out->close_fds();
  if (out->header.status != 0)
    return "vrnicd at " + socket + " refused the request: " + errno_str(out->header.status);
  return {};
}

// vrnicctl (next to $VRNICD unless $VRNICCTL says otherwise): its key=value output and its
// `faults` command are the interface to the daemons' counters and fault injection.
std::string vrnicctl_path() {
  if (const char *c = std::getenv("VRNICCTL"); c != nullptr && *c != '\0') return c;
  std::string d = std::getenv("VRNICD") ? std::getenv("VRNICD") : "";
  const auto slash = d.rfind('/');
  return (slash == std::string::npos ? std::string(".") : d.substr(0, slash)) + "/vrnicctl";
}

// One daemon's `vrnicctl stats`.
struct Stats {
  std::map<std::string, long long> values;
  // FAILs when vrnicctl does not report `name`.
  long long operator[](const std::string &name) const {
    const auto it = values.find(name);
    if (it == values.end()) FAIL("vrnicctl stats reports no '" << name << "'");
    return it->second;
  }
};

// The counters shown in progress lines and failure reports (those vrnicctl has).
const char *const kShownCounters[] = {
    "wire_tx_packets",     "wire_rx_packets",    "retransmits",     "timeouts",
    "naks_sent",          "naks_received",     "duplicates",      "out_of_sequence",
    "rnr_naks_sent",      "rnr_naks_received", "packets_dropped", "wire_tx_errors",
    "wire_rx_icrc_errors", "wire_rx_malformed",  "faults_dropped",  "faults_duplicated",
    "faults_reordered",   "faults_corrupted", "read_gaps",       "packets_held",
    "selective_resends",
};

Stats stats_delta(const Stats &after, const Stats &before) {
  Stats d;
  for (const auto &[k, v] : after.values) {
    const auto it = before.values.find(k);
    d.values[k] = v - (it == before.values.end() ? 0 : it->second);
  }
  return d;
}

std::string format_counters(const Stats &s) {
  std::ostringstream os;
  for (const char *name : kShownCounters) {
    const auto it = s.values.find(name);
    if (it != s.values.end() && it->second != 0) os << ' ' << name << '=' << it->second;
  }
  return os.str();
}

// A private directory for the daemons' sockets and logs; removed with its files.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/vrnic-wire-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) FAIL("mkdtemp: " << errno_str(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    if (DIR *d = opendir(path_.c_str())) {
      while (dirent *e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
      }
      closedir(d);
    }
    ::rmdir(path_.c_str());
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// One vrnicd with a udp port, started and stopped by the test.
class WireDaemon {
 public:
  WireDaemon(const std::string &dir, const std::string &name)
      : socket_(dir + "/" + name + ".sock"), log_(dir + "/" + name + ".log") {}
  ~WireDaemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  WireDaemon(const WireDaemon &) = delete;
  WireDaemon &operator=(const WireDaemon &) = delete;

  // Starts vrnicd on addr:port and waits until it answers; "" on success, else why not (the
  // daemon is gone then: a UDP port already taken ends it at once).
  // With `selective`, vrnicd --selective-repeat.
  std::string start(const std::string &addr, uint16_t port, bool selective = false) {
    const char *bin = std::getenv("VRNICD");
    if (bin == nullptr || *bin == '\0') return "VRNICD (the vrnicd to start) is not set";
    addr_ = addr;
    const std::string port_text = std::to_string(port);
    const unsigned max_life = test_budget_s() + 120;
    const pid_t pid = fork();
    if (pid < 0) return "fork: " + errno_str(errno);
    if (pid == 0) {
      child_prepare(max_life);  // dies with the test, and never outlives its budget
      const int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (log >= 0) dup2(log, 1), dup2(log, 2);
      if (null >= 0) dup2(null, 0);
      execl(bin, bin, "--socket", socket_.c_str(), "--udp", addr.c_str(), "--udp-port",
            port_text.c_str(), selective ? "--selective-repeat" : static_cast<char *>(nullptr),
            static_cast<char *>(nullptr));
      _exit(127);
    }
    pid_ = pid;
    const auto deadline = Clock::now() + Ms(10000);
    while (Clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return "vrnicd --udp " + addr + " --udp-port " + port_text + " exited (status " +
               std::to_string(st) + "): " + log_text();
      }
      auto m = std::make_unique<vrnic::ctl::Message>();
      if (ctl_request(socket_, vrnic::ctl::Op::kStats, nullptr, 0, m.get()).empty()) return {};
      std::this_thread::sleep_for(Ms(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return "vrnicd --udp " + addr + " did not answer within 10 s: " + log_text();
  }

  // SIGTERM, then the exit status (128 + signal when killed by one); -1 after waiting 10 s
  // in vain (it is SIGKILLed then).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + Ms(10000);
    int st = 0;
    for (;;) {
      const pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(Ms(5));
    }
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  // `vrnicctl stats` for this daemon (through vt::read_vrnic_stats, which uses $VRNICCTL
  // and $VRNIC_SOCKET).
  std::string stats(Stats *out) const {
    setenv("VRNIC_SOCKET", socket_.c_str(), 1);
    setenv("VRNICCTL", vrnicctl_path().c_str(), 1);
    std::string err;
    auto m = read_vrnic_stats(&err);
    if (!m) return err;
    out->values = std::move(*m);
    return {};
  }
  Stats require_stats() const {
    Stats s;
    const std::string err = stats(&s);
    if (!err.empty()) FAIL(err);
    return s;
  }

  // `vrnicctl --socket S faults SPEC`; FAILs unless it exits 0 within 10 s.
  void set_faults(const std::string &spec) const {
    const int st = run_program({vrnicctl_path(), "--socket", socket_, "faults", spec}, 10);
    INFO(vrnicctl_path() << " --socket " << socket_ << " faults '" << spec << "' (vrnicd on "
                         << addr_ << "): wait status " << st);
    REQUIRE(st >= 0);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
  }

  std::string log_text() const {
    std::string out;
    if (FILE *f = std::fopen(log_.c_str(), "r")) {
      char b[4096];
      size_t n;
      while ((n = std::fread(b, 1, sizeof b, f)) > 0) out.append(b, n);
      std::fclose(f);
    }
    if (out.size() > 2000) out = "..." + out.substr(out.size() - 2000);
    return out.empty() ? "(no output)" : out;
  }

  // A vrnicd device someone else started (VRNIC_WIRE_DAEMONS: SOCKET@ADDR[@DEVICE]): used,
  // never stopped here. False when `spec` is not of that form.
  bool attach(const std::string &spec) {
    const size_t at = spec.find('@'), at2 = spec.find('@', at + 1);
    if (at == std::string::npos || at == 0 || at + 1 >= spec.size() || at2 == at + 1) return false;
    socket_ = spec.substr(0, at);
    addr_ = spec.substr(at + 1, at2 == std::string::npos ? std::string::npos : at2 - at - 1);
    if (at2 != std::string::npos) device_ = spec.substr(at2 + 1);
    return !device_.empty();
  }

  const std::string &socket() const { return socket_; }
  const std::string &address() const { return addr_; }
  const std::string &device() const { return device_; }

 private:
  std::string socket_, log_, addr_, device_ = test_env().device;
  pid_t pid_ = -1;
};

// Two daemons on 127.0.0.1 and 127.0.0.2 sharing one free UDP port, and a context on each.
struct Wire {
  TempDir dir;
  WireDaemon d1{dir.path(), "d1"};
  WireDaemon d2{dir.path(), "d2"};
  std::unique_ptr<Device> dev1, dev2;
  uint16_t port = 0;
  bool attached = false;

  // Both daemons with --selective-repeat when `selective` (started here, not attached).
  explicit Wire(bool selective = false) {
    // The RoCE port is shared by both daemons (one address each). Start from a random port
    // below the ephemeral range and the daemons' source ports (0xC000 up); a port another
    // run holds makes vrnicd exit at once, and the next one is tried.
    // VRNIC_WIRE_DAEMONS=SOCKET1@ADDR1[@DEVICE1],SOCKET2@ADDR2[@DEVICE2]: two running vrnicd
    // devices (any wire port, e.g. dpdk in two network namespaces, or two devices of one
    // vrnicd) instead of two udp vrnicd started here. DEVICE defaults to $VRNIC_TEST_DEVICE.
    if (const char *given = std::getenv("VRNIC_WIRE_DAEMONS"); given != nullptr && *given) {
      const std::string list = given;
      const size_t comma = list.find(',');
      if (comma == std::string::npos || !d1.attach(list.substr(0, comma)) ||
          !d2.attach(list.substr(comma + 1)))
        FAIL("VRNIC_WIRE_DAEMONS: want SOCKET1@ADDR1[@DEVICE1],SOCKET2@ADDR2[@DEVICE2], got '"
             << list << "'");
      attached = true;
      dev1 = open_on(d1, true);
      dev2 = open_on(d2, true);
      return;
    }
    std::mt19937 rng(static_cast<unsigned>(getpid()) ^
                     static_cast<unsigned>(Clock::now().time_since_epoch().count()));
    const char *bin = std::getenv("VRNICD");
    if (bin == nullptr || *bin == '\0') FAIL("VRNICD (the vrnicd this test starts) is not set");
    std::string why;
    for (int attempt = 0; attempt < 20 && port == 0; ++attempt) {
      const auto p = static_cast<uint16_t>(20000 + rng() % 12000);
      why = d1.start("127.0.0.1", p, selective);
      if (!why.empty()) continue;
      why = d2.start("127.0.0.2", p, selective);
      if (!why.empty()) {
        d1.stop();
        continue;
      }
      port = p;
    }
    if (port == 0) FAIL("could not start two vrnicd on a free UDP port: " << why);
    dev1 = open_on(d1, false);
    dev2 = open_on(d2, false);
  }

  // The larger path MTU the test uses: the ports' (4096 for udp ports on loopback).
  ibv_mtu big_mtu() const { return std::min(dev1->port.active_mtu, dev2->port.active_mtu); }

  static std::unique_ptr<Device> open_on(const WireDaemon &d, bool attached) {
    // The provider reads $VRNIC_SOCKET at each ibv_open_device.
    setenv("VRNIC_SOCKET", d.socket().c_str(), 1);
    auto dev = std::make_unique<Device>();
    const std::string err = try_open_device(*dev, d.device());
    if (!err.empty())
      FAIL("opening " << d.device() << " on the daemon at " << d.address() << ": " << err);
    char want[INET6_ADDRSTRLEN], got[INET6_ADDRSTRLEN];
    in6_addr mapped{};  // an IPv6 address as is, an IPv4 one mapped
    const bool v6 = d.address().find(':') != std::string::npos;
    inet_pton(AF_INET6, ((v6 ? "" : "::ffff:") + d.address()).c_str(), &mapped);
    inet_ntop(AF_INET6, &mapped, want, sizeof want);
    inet_ntop(AF_INET6, dev->gid.raw, got, sizeof got);
    INFO("GID index " << dev->gid_index << " of the daemon on " << d.address());
    REQUIRE(std::string(got) == want);
    INFO("active MTU of the daemon on " << d.address());
    if (!attached) REQUIRE(dev->port.active_mtu == IBV_MTU_4096);
    REQUIRE(dev->port.active_mtu >= IBV_MTU_1024);
    return dev;
  }

  void set_faults(const std::string &spec) const {
    // Each daemon its own fixed seed: reproducible, and not the same losses both ways.
    d1.set_faults(spec.empty() ? spec : spec + ",seed=7");
    d2.set_faults(spec.empty() ? spec : spec + ",seed=8");
  }

  std::string stats_report() const {
    std::ostringstream os;
    for (const WireDaemon *d : {&d1, &d2}) {
      Stats s;
      const std::string err = d->stats(&s);
      os << "\n  vrnicd " << d->address() << ":" << (err.empty() ? format_counters(s) : err);
    }
    return os.str();
  }

  // `vrnicctl qps` of one daemon, one key=value map per QP.
  static std::vector<std::map<std::string, std::string>> list_qps(const WireDaemon &d) {
    std::vector<std::map<std::string, std::string>> qps;
    const std::string cmd = vrnicctl_path() + " --socket " + d.socket() + " qps";
    if (FILE *p = popen(cmd.c_str(), "r")) {
      char line[2048];
      while (std::fgets(line, sizeof line, p)) {
        std::map<std::string, std::string> qp;
        std::istringstream words(line);
        for (std::string kv; words >> kv;) {
          const auto eq = kv.find('=');
          if (eq != std::string::npos) qp[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
        qps.push_back(std::move(qp));
      }
      pclose(p);
    }
    return qps;
  }

  // After a run every RC QP must be quiet and say so in `vrnicctl qps`: nothing unsent or
  // unanswered, everything sent acknowledged.
  void require_quiet_qps() const {
    for (const WireDaemon *d : {&d1, &d2}) {
      int rc = 0;
      for (auto &qp : list_qps(*d)) {
        if (qp["type"] != "RC") continue;
        rc++;
        std::ostringstream all;
        for (const auto &[k, v] : qp) all << ' ' << k << '=' << v;
        INFO("vrnicctl qps, vrnicd " << d->address() << ":" << all.str());
        CHECK(qp["state"] == "RTS");
        CHECK(qp["wqes_started"] == "0");
        CHECK(qp["wqes_unsent"] == "0");
        CHECK(qp["rd_atomic"] == "0");
        CHECK(qp["responses"] == "0");
        CHECK(((std::stoul(qp["acked_psn"]) + 1) & 0xffffff) == std::stoul(qp["sq_psn"]));
      }
      INFO("RC QPs listed by vrnicctl qps on " << d->address());
      CHECK(rc == 2);
    }
  }

  // Each QP's transport state and counters (`vrnicctl qps`), for failure reports.
  std::string qps_report() const {
    std::ostringstream os;
    for (const WireDaemon *d : {&d1, &d2}) {
      os << "\n  vrnicctl qps, vrnicd " << d->address() << ":";
      const std::string cmd = vrnicctl_path() + " --socket " + d->socket() + " qps 2>&1";
      if (FILE *p = popen(cmd.c_str(), "r")) {
        char line[2048];
        while (std::fgets(line, sizeof line, p)) os << "\n    " << line;
        pclose(p);
      }
    }
    return os.str();
  }

  // Closes both contexts, then stops both daemons (unless attached): each must exit 0 on
  // SIGTERM.
  void shutdown() {
    dev1.reset();
    dev2.reset();
    if (attached) return;
    const std::string log1 = d1.log_text(), log2 = d2.log_text();
    const int st1 = d1.stop(), st2 = d2.stop();
    INFO("vrnicd 127.0.0.1 log: " << log1);
    CHECK(st1 == 0);
    INFO("vrnicd 127.0.0.2 log: " << log2);
    CHECK(st2 == 0);
  }
};

// ---------------------------------------------------------------------------------------------
// QPs

QpConfig wire_rc_config() {
  QpConfig c;
  c.max_send_wr = 128;
  c.max_recv_wr = 128;
  c.cq_depth = 512;
  c.timeout = rc_timeout();
  c.retry_cnt = 7;
  c.rnr_retry = 7;
  c.min_rnr_timer = 1;  // 0.01 ms: receives are kept posted, an RNR NAK should be rare
  c.max_rd_atomic = 16;
  return c;
}

// PSNs just below the 24-bit wrap, so that every run crosses it.
void psn_near_wrap(Endpoint &e) {
  e.psn = 0xFFFFFF - (e.psn % 997);
}

ibv_mtu query_path_mtu(ibv_qp *qp) {
  ibv_qp_attr at{};
  ibv_qp_init_attr ia{};
  REQUIRE(ibv_query_qp(qp, &at, IBV_QP_PATH_MTU, &ia) == 0);
  return at.path_mtu;
}

// An RC QP on each device, connected across the wire with the given path MTU.
void connect_rc_pair(Device &da, Endpoint &a, Device &db, Endpoint &b, const QpConfig &cfg,
                     ibv_mtu mtu) {
  std::string err = try_create_endpoint(da, cfg, a);
  if (err.empty()) err = try_create_endpoint(db, cfg, b);
  if (!err.empty()) FAIL("creating the RC QPs: " << err);
  psn_near_wrap(a);
  psn_near_wrap(b);
  // try_modify_rtr takes the path MTU from the port's active MTU: lower it for this pair.
  const ibv_mtu saved_a = da.port.active_mtu, saved_b = db.port.active_mtu;
  da.port.active_mtu = db.port.active_mtu = mtu;
  err = try_connect(da, a, cfg, local_info(db, b));
  if (err.empty()) err = try_connect(db, b, cfg, local_info(da, a));
  da.port.active_mtu = saved_a;
  db.port.active_mtu = saved_b;
  if (!err.empty()) FAIL("connecting the RC QPs: " << err);
  REQUIRE(query_path_mtu(a.qp()) == mtu);
  REQUIRE(query_path_mtu(b.qp()) == mtu);
}

// Like vt::try_create_endpoint, for a UC or UD QP.
void create_qp_of_type(Device &d, ibv_qp_type type, const QpConfig &c, Endpoint &e) {
  ibv_context *ctx = d.ctx.get();
  e.pd_.reset(ibv_alloc_pd(ctx));
  REQUIRE(e.pd_ != nullptr);
  e.send_cq_.reset(ibv_create_cq(ctx, c.cq_depth, nullptr, nullptr, 0));
  REQUIRE(e.send_cq_ != nullptr);
  e.recv_cq_.reset(ibv_create_cq(ctx, c.cq_depth, nullptr, nullptr, 0));
  REQUIRE(e.recv_cq_ != nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = e.scq();
  ia.recv_cq = e.rcq();
  ia.qp_type = type;
  ia.cap.max_send_wr = c.max_send_wr;
  ia.cap.max_recv_wr = c.max_recv_wr;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  e.qp_.reset(ibv_create_qp(e.pd(), &ia));
  INFO("ibv_create_qp(type " << type << "): " << errno_str(errno));
  REQUIRE(e.qp_ != nullptr);
  e.cap = ia.cap;
  e.psn = static_cast<uint32_t>(seed_for("wire psn", e.qpn())) & 0xFFFFFF;
}

void modify(ibv_qp *qp, ibv_qp_attr &at, int mask, const char *what) {
  const int rc = ibv_modify_qp(qp, &at, mask);
  INFO("ibv_modify_qp(" << what << "): " << (rc ? errno_str(rc) : std::string("ok")));
  REQUIRE(rc == 0);
}

void connect_uc(Device &d, Endpoint &e, const PeerInfo &peer, ibv_mtu mtu) {
  QpConfig c;
  c.qp_access = IBV_ACCESS_REMOTE_WRITE;
  const std::string err = try_modify_init(d, e, c);
  if (!err.empty()) FAIL("UC: " << err);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = mtu;
  at.dest_qp_num = peer.qpn;
  at.rq_psn = peer.psn;
  at.ah_attr.is_global = 1;
  at.ah_attr.grh.dgid = peer.gid;
  at.ah_attr.grh.sgid_index = static_cast<uint8_t>(d.gid_index);
  at.ah_attr.grh.hop_limit = 64;
  at.ah_attr.port_num = d.port_num;
  modify(e.qp(), at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
         "UC INIT->RTR");
  at = {};
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = e.psn;
  modify(e.qp(), at, IBV_QP_STATE | IBV_QP_SQ_PSN, "UC RTR->RTS");
}

constexpr uint32_t kUdQkey = 0x1ee7c0de;

void connect_ud(Device &d, Endpoint &e) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = d.port_num;
  at.qkey = kUdQkey;
  modify(e.qp(), at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
         "UD RESET->INIT");
  at = {};
  at.qp_state = IBV_QPS_RTR;
  modify(e.qp(), at, IBV_QP_STATE, "UD INIT->RTR");
  at = {};
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = e.psn;
  modify(e.qp(), at, IBV_QP_STATE | IBV_QP_SQ_PSN, "UD RTR->RTS");
}

// ---------------------------------------------------------------------------------------------
// Registered memory: n slots of `cap` bytes, each followed by kGuard bytes, all poisoned.
struct Slots {
  Slots(ibv_pd *pd, size_t count, size_t cap_bytes)
      : n(count),
        cap(cap_bytes),
        stride((cap_bytes + kGuard + 63) & ~size_t(63)),
        buf(count * stride) {
    std::memset(buf.data(), kPoison, buf.size());
    mr = reg_mr(pd, buf.data(), buf.size());
  }
  uint8_t *at(size_t slot) const { return buf.data() + (slot % n) * stride; }
  uint64_t addr(size_t slot) const { return reinterpret_cast<uintptr_t>(at(slot)); }
  void poison(size_t slot, size_t len) const { std::memset(at(slot), kPoison, len + kGuard); }

  size_t n, cap, stride;
  AlignedBuf buf;
  MrPtr mr;
};

// ---------------------------------------------------------------------------------------------
// RC traffic: one flow = one direction of one QP pair.

enum class Op : uint8_t { Write, WriteImm, Read, Send, SendImm, FetchAdd, CmpSwap };
constexpr int kOps = 7;

const char *op_name(Op op) {
  static const char *const names[kOps] = {"WRITE",    "WRITE_IMM", "READ",    "SEND",
                                          "SEND_IMM", "FETCH_ADD", "CMP_SWAP"};
  return names[static_cast<int>(op)];
}
bool is_write(Op op) {
  return op == Op::Write || op == Op::WriteImm;
}
bool is_send(Op op) {
  return op == Op::Send || op == Op::SendImm;
}
bool has_imm(Op op) {
  return op == Op::WriteImm || op == Op::SendImm;
}
bool consumes_recv(Op op) {
  return is_send(op) || op == Op::WriteImm;
}
bool is_atomic(Op op) {
  return op == Op::FetchAdd || op == Op::CmpSwap;
}

ibv_wr_opcode wr_opcode(Op op) {
  static const ibv_wr_opcode ops[kOps] = {
      IBV_WR_RDMA_WRITE,    IBV_WR_RDMA_WRITE_WITH_IMM,  IBV_WR_RDMA_READ,         IBV_WR_SEND,
      IBV_WR_SEND_WITH_IMM, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP};
  return ops[static_cast<int>(op)];
}
int wc_opcode(Op op) {
  static const int ops[kOps] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_SEND,
                                IBV_WC_SEND,       IBV_WC_FETCH_ADD,  IBV_WC_COMP_SWAP};
  return ops[static_cast<int>(op)];
}

uint32_t imm_for(int flow, uint64_t seq) {
  return htonl(static_cast<uint32_t>(seed_for("wire imm", static_cast<uint64_t>(flow), seq)));
}

// The traffic mix; the defaults are the test, the knobs narrow it down to reproduce a failure:
//   VRNIC_WIRE_OPS       ops to use, e.g. "READ,WRITE" (names as op_name; default all)
//   VRNIC_WIRE_FLOWS     flows to run, e.g. "02" (0: 1->2 MTU 1024, 1: 2->1 MTU 1024,
//                        2: 1->2 MTU 4096, 3: 2->1 MTU 4096; default "0123")
//   VRNIC_WIRE_INFLIGHT  send WRs in flight per flow (default 64)
//   VRNIC_WIRE_MAX_MSG   largest message (default 256K)
struct Mix {
  // WRITE 22, WRITE_IMM 10, READ 22, SEND 16, SEND_IMM 10, FETCH_ADD 12, CMP_SWAP 8.
  uint32_t weight[kOps] = {22, 10, 22, 16, 10, 12, 8};
  uint32_t weight_sum = 100;
  std::string flows = "0123";
  size_t in_flight = 64;
  uint32_t max_msg = 256 * KiB;
};

const Mix &mix() {
  static const Mix m = [] {
    Mix m;
    if (const char *ops = std::getenv("VRNIC_WIRE_OPS"); ops != nullptr && *ops != '\0') {
      std::string list = std::string(",") + ops + ",";
      for (char &c : list) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      m.weight_sum = 0;
      for (int i = 0; i < kOps; ++i) {
        if (list.find(std::string(",") + op_name(static_cast<Op>(i)) + ",") == std::string::npos)
          m.weight[i] = 0;
        m.weight_sum += m.weight[i];
      }
      if (m.weight_sum == 0) {
        std::fprintf(stderr, "wire test: VRNIC_WIRE_OPS names no op; using all\n");
        m = Mix{};
      }
    }
    if (const char *f = std::getenv("VRNIC_WIRE_FLOWS"); f != nullptr && *f != '\0') m.flows = f;
    m.in_flight = static_cast<size_t>(env_num("VRNIC_WIRE_INFLIGHT", 64, 1, 64));
    m.max_msg = static_cast<uint32_t>(std::clamp<uint64_t>(
        parse_size(std::getenv("VRNIC_WIRE_MAX_MSG"), 256 * KiB), 1, 256 * KiB));
    return m;
  }();
  return m;
}

constexpr size_t kInFlight = 64;       // send WRs outstanding per flow (at most)
constexpr size_t kRecvSlots = 64;      // receives kept posted per flow
constexpr size_t kMaxMsg = 256 * KiB;  // largest message
constexpr size_t kReadSrcBytes = 1 * MiB + kMaxMsg;
constexpr size_t kCounters = 8;  // fetch-and-add targets; one more word for CMP_SWAP
constexpr uint64_t kRecvTag = 1ull << 47;

class Flow {
 public:
  // Traffic from `req` (requester) to `resp` (responder), moving about `target` bytes.
  Flow(int id, std::string name, Endpoint &req, Endpoint &resp, uint32_t mtu, uint64_t target,
       uint64_t seed)
      : id_(id),
        name_(std::move(name)),
        req_(req),
        resp_(resp),
        mtu_(mtu),
        target_(target),
        rng_(seed),
        src_(req.pd(), kInFlight, kMaxMsg),
        read_dst_(req.pd(), kInFlight, kMaxMsg),
        atomic_res_(req.pd(), kInFlight, 8),
        write_dst_(resp.pd(), kInFlight, kMaxMsg),
        recv_(resp.pd(), kRecvSlots, kMaxMsg),
        read_src_(resp.pd(), 1, kReadSrcBytes),
        counters_(resp.pd(), 1, 8 * (kCounters + 1)) {
    fill_pattern(read_src_.at(0), kReadSrcBytes, seed_for("wire read source", seed));
    for (size_t c = 0; c <= kCounters; ++c) {
      model_[c] = seed_for("wire counter", seed, c);
      std::memcpy(counters_.at(0) + 8 * c, &model_[c], 8);
    }
  }

  void start() {
    for (size_t j = 0; j < kRecvSlots; ++j) post_recv(j);
  }

  // Polls both CQs and posts what the window allows; true if anything happened.
  bool step() {
    bool any = poll(req_.scq(), false);
    any |= poll(resp_.rcq(), true);
    while (outstanding_.size() < mix().in_flight && posted_bytes_ < target_) {
      const uint64_t before = next_seq_;
      post_one();
      if (next_seq_ == before) break;
      any = true;
    }
    return any;
  }

  bool done() const {
    return posted_bytes_ >= target_ && outstanding_.empty() && expected_recvs_.empty();
  }

  // After the run: the counters hold what the atomics' order implies, the QPs are still RTS.
  void final_checks() const {
    for (size_t c = 0; c <= kCounters; ++c) {
      uint64_t v;
      std::memcpy(&v, counters_.at(0) + 8 * c, 8);
      INFO(name_ << ": counter " << c << (c == kCounters ? " (CMP_SWAP)" : " (FETCH_ADD)"));
      CHECK(v == model_[c]);
    }
    INFO(name_);
    CHECK(query_state(req_.qp()) == IBV_QPS_RTS);
    CHECK(query_state(resp_.qp()) == IBV_QPS_RTS);
  }

  std::string state() const {
    std::ostringstream os;
    os << name_ << ": posted " << next_seq_ << " WRs (" << mib(posted_bytes_) << "), " << completed_
       << " completed; " << outstanding_.size() << " outstanding";
    if (!outstanding_.empty()) {
      const Pending &p = outstanding_.front();
      os << ", oldest #" << p.seq << " " << op_name(p.op) << " " << p.len << " B";
    }
    os << "; " << expected_recvs_.size() << " receives expected";
    if (!expected_recvs_.empty()) {
      const ExpectedRecv &e = expected_recvs_.front();
      os << ", oldest recv #" << e.rseq << " for #" << e.seq << " " << op_name(e.op) << " " << e.len
         << " B";
    }
    const auto rs = try_query_state(req_.qp()), ps = try_query_state(resp_.qp());
    os << "; QPs " << (rs ? qp_state_name(*rs) : "?") << " / " << (ps ? qp_state_name(*ps) : "?");
    return os.str();
  }

  uint64_t bytes_moved() const { return moved_; }
  uint64_t wrs() const { return completed_; }
  const uint64_t *op_counts() const { return count_; }
  const uint64_t *op_bytes() const { return bytes_; }
  const std::string &name() const { return name_; }

  // For failure reports: the completions still queued that are not flush errors (the cause).
  std::string drain_errors() const {
    std::ostringstream os;
    for (ibv_cq *cq : {req_.scq(), resp_.rcq()}) {
      ibv_wc wc{};
      while (ibv_poll_cq(cq, 1, &wc) == 1) {
        if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR)
          os << "\n    " << (cq == req_.scq() ? "send " : "recv ") << describe(wc);
      }
    }
    return os.str();
  }

  // Fails on any completion: after the run both CQs must stay empty.
  void require_no_more_completions() const {
    for (ibv_cq *cq : {req_.scq(), resp_.rcq()}) {
      ibv_wc wc{};
      const int n = ibv_poll_cq(cq, 1, &wc);
      if (n != 0) FAIL(name_ << ": completion after the run (duplicate?): " << describe(wc));
    }
  }

 private:
  struct Pending {
    uint64_t seq;
    Op op;
    uint32_t len;
    uint64_t seed;      // WRITE, SEND: the data's pattern
    uint64_t read_off;  // READ: offset in read_src_
    uint64_t orig;      // atomics: the value the responder must return
  };
  struct ExpectedRecv {
    uint64_t rseq;  // receive WR number
    uint64_t seq;   // the send WR that consumes it
    Op op;
    uint32_t len;
    uint64_t seed;
    uint32_t imm;
  };

  uint64_t send_wr_id(uint64_t seq) const { return (uint64_t(id_ + 1) << 48) | seq; }
  uint64_t recv_wr_id(uint64_t rseq) const { return (uint64_t(id_ + 1) << 48) | kRecvTag | rseq; }

  void post_recv(uint64_t rseq) {
    ibv_sge sge = make_sge(recv_.at(rseq), kMaxMsg, recv_.mr->lkey);
    ibv_recv_wr wr = make_recv_wr(recv_wr_id(rseq), &sge, 1);
    ibv_recv_wr *bad = nullptr;
    const int rc = ibv_post_recv(resp_.qp(), &wr, &bad);
    if (rc != 0) FAIL(name_ << ": ibv_post_recv #" << rseq << ": " << errno_str(rc));
  }

  // The first 2 x kOps messages of a flow are each op in turn, once of one packet and once of
  // three (first, middle, last): whatever the byte count, every packet opcode occurs, so a
  // fault aimed at one kind (hold_op) always has something to hit.
  bool in_preamble(uint64_t seq) const {
    return seq < static_cast<uint64_t>(2 * kOps) && mix().weight[seq % kOps] != 0;
  }

  uint32_t pick_len(uint64_t seq) {
    if (in_preamble(seq))
      return std::clamp<uint32_t>(seq < kOps ? 1 + rng_() % 64 : 3 * mtu_ - 1, 1, mix().max_msg);
    const uint32_t r = rng_() % 100;
    uint32_t len;
    if (r < 15) {
      len = 1 + rng_() % 64;  // tiny, one packet
    } else if (r < 30) {
      const uint32_t k = 1 + rng_() % 4;  // around a multiple of the MTU
      len = k * mtu_ + (rng_() % 3) - 1;
    } else if (r < 65) {
      len = 65 + rng_() % (16 * KiB);
    } else if (r < 70) {
      len = kMaxMsg;
    } else {
      len = 16 * KiB + rng_() % (kMaxMsg - 16 * KiB);
    }
    return std::clamp<uint32_t>(len, 1, mix().max_msg);
  }

  Op pick_op() {
    if (in_preamble(next_seq_)) return static_cast<Op>(next_seq_ % kOps);
    const Mix &m = mix();
    const uint32_t r = static_cast<uint32_t>(rng_() % m.weight_sum);
    uint32_t acc = 0;
    int i = 0;
    while (r >= (acc += m.weight[i])) ++i;
    return static_cast<Op>(i);
  }

  void post_one() {
    Op op = pick_op();
    // Only into receives already posted (none is missing, so no RNR NAK is needed).
    if (consumes_recv(op) && next_rseq_ >= recv_done_ + kRecvSlots) {
      if (mix().weight[static_cast<int>(Op::Write)] == 0) return;  // wait for receives
      op = Op::Write;
    }
    const uint64_t seq = next_seq_++;
    Pending p{seq, op, 0, 0, 0, 0};
    ibv_sge sge{};
    ibv_send_wr wr{};
    if (is_write(op) || is_send(op)) {
      p.len = pick_len(seq);
      p.seed = seed_for("wire data", static_cast<uint64_t>(id_), seq);
      fill_pattern(src_.at(seq), p.len, p.seed);
      sge = make_sge(src_.at(seq), p.len, src_.mr->lkey);
      wr = make_send_wr(send_wr_id(seq), wr_opcode(op), &sge, 1);
      if (is_write(op)) {
        write_dst_.poison(seq, p.len);
        wr.wr.rdma.remote_addr = write_dst_.addr(seq);
        wr.wr.rdma.rkey = write_dst_.mr->rkey;
      }
      if (has_imm(op)) wr.imm_data = imm_for(id_, seq);
      if (consumes_recv(op))
        expected_recvs_.push_back({next_rseq_++, seq, op, p.len, p.seed, wr.imm_data});
    } else if (op == Op::Read) {
      p.len = pick_len(seq);
      p.read_off = rng_() % (kReadSrcBytes - p.len + 1);
      read_dst_.poison(seq, p.len);
      sge = make_sge(read_dst_.at(seq), p.len, read_dst_.mr->lkey);
      wr = make_send_wr(send_wr_id(seq), IBV_WR_RDMA_READ, &sge, 1);
      wr.wr.rdma.remote_addr = read_src_.addr(0) + p.read_off;
      wr.wr.rdma.rkey = read_src_.mr->rkey;
    } else {
      p.len = 8;
      const size_t c = op == Op::FetchAdd ? rng_() % kCounters : kCounters;
      atomic_res_.poison(seq, 8);
      sge = make_sge(atomic_res_.at(seq), 8, atomic_res_.mr->lkey);
      wr = make_send_wr(send_wr_id(seq), wr_opcode(op), &sge, 1);
      wr.wr.atomic.remote_addr = counters_.addr(0) + 8 * c;
      wr.wr.atomic.rkey = counters_.mr->rkey;
      p.orig = model_[c];
      if (op == Op::FetchAdd) {
        // Mostly small, sometimes huge (the sum wraps at 2^64).
        const uint64_t add = (rng_() % 8 == 0) ? rng_() : 1 + rng_() % 1000;
        wr.wr.atomic.compare_add = add;
        model_[c] += add;
      } else {
        const bool match = rng_() % 4 != 0;  // a quarter of them must not swap
        const uint64_t swap = rng_();
        wr.wr.atomic.compare_add = match ? model_[c] : model_[c] ^ (rng_() | 1);
        wr.wr.atomic.swap = swap;
        if (match) model_[c] = swap;
      }
    }
    ibv_send_wr *bad = nullptr;
    const int rc = ibv_post_send(req_.qp(), &wr, &bad);
    if (rc != 0)
      FAIL(name_ << ": ibv_post_send #" << seq << " " << op_name(op) << ": " << errno_str(rc));
    posted_bytes_ += p.len;
    outstanding_.push_back(p);
  }

  bool poll(ibv_cq *cq, bool recv) {
    ibv_wc wcs[32];
    const int n = ibv_poll_cq(cq, 32, wcs);
    if (n < 0) FAIL(name_ << ": ibv_poll_cq returned " << n);
    for (int i = 0; i < n; ++i) recv ? complete_recv(wcs[i]) : complete_send(wcs[i]);
    return n > 0;
  }

  void complete_send(const ibv_wc &wc) {
    if (outstanding_.empty()) {
      FAIL(name_ << ": send completion with no WR outstanding ("
                 << (wc.status == IBV_WC_SUCCESS ? "a duplicate" : "the QP failed")
                 << "): " << describe(wc));
    }
    const Pending &p = outstanding_.front();
    const std::string what = name_ + ": send WR #" + std::to_string(p.seq) + " " + op_name(p.op) +
                             " of " + std::to_string(p.len) + " B";
    if (wc.wr_id != send_wr_id(p.seq)) {
      FAIL(what << " expected next (completions in posting order, each once), got " << describe(wc)
                << " (wr_id 0x" << std::hex << send_wr_id(p.seq) << " wanted)");
    }
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != wc_opcode(p.op) || wc.qp_num != req_.qpn())
      FAIL(what << ": " << describe(wc));
    std::string bad;
    if (is_write(p.op)) {
      bad = check_pattern(write_dst_.at(p.seq), p.len, p.seed);
      if (bad.empty()) bad = check_poison(write_dst_.at(p.seq) + p.len, kGuard);
    } else if (p.op == Op::Read) {
      const uint8_t *got = read_dst_.at(p.seq), *want = read_src_.at(0) + p.read_off;
      if (std::memcmp(got, want, p.len) != 0) bad = diff_bytes(got, want, p.len);
      if (bad.empty()) bad = check_poison(got + p.len, kGuard);
    } else if (is_atomic(p.op)) {
      uint64_t orig;
      std::memcpy(&orig, atomic_res_.at(p.seq), 8);
      if (orig != p.orig) {
        std::ostringstream os;
        os << "returned 0x" << std::hex << orig << ", the sequence implies 0x" << p.orig;
        bad = os.str();
      }
    }
    if (!bad.empty())
      FAIL(what << " (" << (is_write(p.op) ? "remote" : "local") << " destination): " << bad);
    const int o = static_cast<int>(p.op);
    ++count_[o];
    bytes_[o] += p.len;
    moved_ += p.len;
    ++completed_;
    outstanding_.pop_front();
  }

  void complete_recv(const ibv_wc &wc) {
    if (expected_recvs_.empty()) {
      FAIL(name_ << ": receive completion with no message outstanding ("
                 << (wc.status == IBV_WC_SUCCESS ? "a duplicate" : "the QP failed")
                 << "): " << describe(wc));
    }
    const ExpectedRecv &e = expected_recvs_.front();
    const std::string what = name_ + ": receive #" + std::to_string(e.rseq) + " for WR #" +
                             std::to_string(e.seq) + " " + op_name(e.op) + " of " +
                             std::to_string(e.len) + " B";
    if (wc.wr_id != recv_wr_id(e.rseq))
      FAIL(what << " expected next (receives in order, each once), got " << describe(wc));
    const int want_op = is_send(e.op) ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM;
    const bool imm_ok = has_imm(e.op) ? ((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == e.imm)
                                      : !(wc.wc_flags & IBV_WC_WITH_IMM);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != want_op || wc.byte_len != e.len || !imm_ok ||
        wc.qp_num != resp_.qpn() || wc.src_qp != req_.qpn()) {
      FAIL(what << ": " << describe(wc) << " (src_qp 0x" << std::hex << wc.src_qp << ")");
    }
    uint8_t *buf = recv_.at(e.rseq);
    std::string bad;
    if (is_send(e.op)) {
      bad = check_pattern(buf, e.len, e.seed);
      if (bad.empty()) bad = check_poison(buf + e.len, kGuard);
    } else {
      bad = check_poison(buf, kGuard);  // WRITE_WITH_IMM leaves the receive buffer alone
    }
    if (!bad.empty()) FAIL(what << " (receive buffer): " << bad);
    recv_.poison(e.rseq, is_send(e.op) ? e.len : 0);
    const uint64_t rseq = e.rseq;
    expected_recvs_.pop_front();
    ++recv_done_;
    post_recv(rseq + kRecvSlots);  // the same slot, for the receive kRecvSlots later
  }

  const int id_;
  const std::string name_;
  Endpoint &req_;
  Endpoint &resp_;
  const uint32_t mtu_;
  const uint64_t target_;
  std::mt19937_64 rng_;
  Slots src_, read_dst_, atomic_res_;             // the requester's memory
  Slots write_dst_, recv_, read_src_, counters_;  // the responder's memory
  uint64_t model_[kCounters + 1] = {};            // what the counters must hold
  std::deque<Pending> outstanding_;
  std::deque<ExpectedRecv> expected_recvs_;
  uint64_t next_seq_ = 0, next_rseq_ = 0, recv_done_ = 0;
  uint64_t posted_bytes_ = 0, moved_ = 0, completed_ = 0;
  uint64_t count_[kOps] = {}, bytes_[kOps] = {};
};

// Runs the flows until all are done; FAILs after stall_limit() without any completion.
double run_flows(const std::vector<Flow *> &flows, const Wire &w, const std::string &label) {
  const auto t0 = Clock::now();
  auto last_progress = t0, last_report = t0;
  for (Flow *f : flows) f->start();
  unsigned idle = 0;
  for (;;) {
    bool progress = false, all_done = true;
    try {
      for (Flow *f : flows) {
        progress |= f->step();
        all_done &= f->done();
      }
    } catch (...) {
      // A failed check: show where every flow and both daemons stood.
      std::fprintf(stderr, "wire [%s]: failed after %.2f s; state:\n", label.c_str(),
                   seconds_since(t0));
      for (Flow *f : flows)
        std::fprintf(stderr, "  %s%s\n", f->state().c_str(), f->drain_errors().c_str());
      // Each QP's transport state and counters too: a QP that ran out of retries shows what
      // its timeouts, NAKs and read gaps were (the peer QP what it still had to answer).
      std::fprintf(stderr, "%s%s\n", w.stats_report().c_str() + 1, w.qps_report().c_str());
      throw;
    }
    if (all_done) break;
    if (progress) {
      idle = 0;
      last_progress = Clock::now();
      if (last_progress - last_report > Ms(10000)) {
        last_report = last_progress;
        uint64_t moved = 0;
        for (Flow *f : flows) moved += f->bytes_moved();
        std::fprintf(stderr, "wire [%s]: %s after %.0f s\n", label.c_str(), mib(moved).c_str(),
                     seconds_since(t0));
      }
      continue;
    }
    if (++idle > 32) sched_yield();  // two daemons and this process share a small machine
    if ((idle & 1023) == 0 && Clock::now() - last_progress > stall_limit()) {
      std::ostringstream os;
      for (Flow *f : flows) os << "\n  " << f->state();
      FAIL("[" << label << "] no completion for " << stall_limit().count() << " ms:" << os.str()
               << w.stats_report() << w.qps_report());
    }
  }
  const double secs = seconds_since(t0);
  // Nothing more may complete: no duplicate of any WR or receive.
  std::this_thread::sleep_for(Ms(50));
  for (Flow *f : flows) f->require_no_more_completions();
  return secs;
}

struct FaultSetting {
  const char *label;
  const char *spec;  // for vrnicctl faults (the seed is added per daemon)
  bool selective = false;  // both daemons with --selective-repeat
  // Selective repeat agreed per QP through ECE (ibv_set_ece on every QP, as rdma_cm does from
  // the REQ and REP), the daemons as by default.
  bool ece = false;
};

// ECE on a QP: vrnic's vendor and `options`, which vrnicd must take (they are all it knows).
void set_ece(const Endpoint &e, uint32_t options) {
  ibv_ece ece{vrnic::kVrnicVendorId, options, 0};
  REQUIRE(ibv_set_ece(e.qp(), &ece) == 0);
  CHECK(ece.options == options);
  ibv_ece now{};
  REQUIRE(ibv_query_ece(e.qp(), &now) == 0);
  CHECK(now.vendor_id == vrnic::kVrnicVendorId);
  CHECK(now.options == options);
}

// One fault setting on the two daemons of `w`: RC traffic of `total` bytes, then the checks.
void run_rc_setting(Wire &w, const FaultSetting &s, uint64_t total) {
  Stats before1, before2, after1, after2;
  double secs = 0;
  uint64_t moved = 0, wrs = 0;
  std::string summary;
  {
    const QpConfig cfg = wire_rc_config();
    Endpoint a1, b1, a4, b4;  // pair 1: path MTU 1024; pair 4: the ports' MTU (4096 on lo)
    connect_rc_pair(*w.dev1, a1, *w.dev2, b1, cfg, IBV_MTU_1024);
    connect_rc_pair(*w.dev1, a4, *w.dev2, b4, cfg, w.big_mtu());
    if (s.ece)
      for (const Endpoint *e : {&a1, &b1, &a4, &b4}) set_ece(*e, vrnic::kEceSelectiveRepeat);
    const uint32_t big = 128u << w.big_mtu();
    const std::string big_name = "mtu " + std::to_string(big);
    const uint64_t seed = seed_for(s.label);
    const std::string &which = mix().flows;
    const auto nflows = static_cast<uint64_t>(
        std::count_if(which.begin(), which.end(), [](char c) { return c >= '0' && c <= '3'; }));
    REQUIRE(nflows > 0);
    const uint64_t share = (total + nflows - 1) / nflows;
    Flow f0(0, "1->2 mtu 1024", a1, b1, 1024, share, seed_for("flow", seed, 0));
    Flow f1(1, "2->1 mtu 1024", b1, a1, 1024, share, seed_for("flow", seed, 1));
    Flow f2(2, "1->2 " + big_name, a4, b4, big, share, seed_for("flow", seed, 2));
    Flow f3(3, "2->1 " + big_name, b4, a4, big, share, seed_for("flow", seed, 3));
    Flow *const all[] = {&f0, &f1, &f2, &f3};
    std::vector<Flow *> flows;
    for (int i = 0; i < 4; ++i) {
      if (which.find(static_cast<char>('0' + i)) != std::string::npos) flows.push_back(all[i]);
    }

    before1 = w.d1.require_stats();
    before2 = w.d2.require_stats();
    w.set_faults(s.spec);
    secs = run_flows(flows, w, s.label);
    // Read before clearing: clearing the faults resets vrnicd's faults_* counters.
    after1 = w.d1.require_stats();
    after2 = w.d2.require_stats();
    w.set_faults("");
    w.require_quiet_qps();
    for (Flow *f : flows) {
      f->final_checks();
      moved += f->bytes_moved();
      wrs += f->wrs();
    }
    uint64_t count[kOps] = {}, bytes[kOps] = {};
    for (Flow *f : flows) {
      for (int i = 0; i < kOps; ++i) count[i] += f->op_counts()[i], bytes[i] += f->op_bytes()[i];
    }
    std::ostringstream os;
    for (int i = 0; i < kOps; ++i) {
      os << ' ' << op_name(static_cast<Op>(i)) << ' ' << count[i];
      if (!is_atomic(static_cast<Op>(i))) os << '/' << mib(bytes[i]);
    }
    summary = os.str();
  }
  const Stats d1 = stats_delta(after1, before1), d2 = stats_delta(after2, before2);
  std::fprintf(stderr,
               "wire [%s]: %s in %.2f s = %.1f MB/s, %" PRIu64
               " WRs (%s)\n"
               "  vrnicd %s:%s\n  vrnicd %s:%s\n",
               s.label, mib(moved).c_str(), secs, double(moved) / secs / 1e6, wrs,
               summary.c_str() + 1, w.d1.address().c_str(), format_counters(d1).c_str(),
               w.d2.address().c_str(), format_counters(d2).c_str());

  // The counters must prove that the faults happened and were recovered from.
  const std::string spec = s.spec;
  const auto has = [&](const char *what) { return spec.find(what) != std::string::npos; };
  for (const Stats *d : {&d1, &d2}) {
    const Stats &c = *d;
    INFO("[" << s.label << "] counters of vrnicd " << (d == &d1 ? "127.0.0.1" : "127.0.0.2") << ":"
             << format_counters(c));
    CHECK(c["wire_rx_packets"] > 0);
    if (spec.empty()) {
      CHECK(c["faults_dropped"] + c["faults_duplicated"] + c["faults_reordered"] +
                c["faults_corrupted"] ==
            0);
    }
    if (!has("corrupt")) {
      CHECK(c["wire_rx_icrc_errors"] == 0);
      CHECK(c["wire_rx_malformed"] == 0);
    }
    // What was sent again: gone back N for, or (selective repeat) sent again alone.
    const long long resent = c["retransmits"] + c["selective_resends"];
    if (has("loss")) {
      CHECK(c["faults_dropped"] > 0);
      CHECK(resent > 0);
    }
    if (has("reorder")) {
      CHECK(c["faults_reordered"] > 0);
      CHECK(c["naks_sent"] > 0);
      CHECK(resent > 0);
      CHECK(c["packets_held"] > 0);  // what came early was kept, not dropped
    }
    const bool selective = s.selective || s.ece;
    if (selective && (has("loss") || has("reorder"))) CHECK(c["selective_resends"] > 0);
    if (!selective) CHECK(c["selective_resends"] == 0);
    if (has("dup")) CHECK(c["faults_duplicated"] > 0);
    if (has("hold_op")) CHECK(c["faults_reordered"] > 0);
    if (has("corrupt")) {
      CHECK(c["faults_corrupted"] > 0);
      CHECK(c["wire_rx_icrc_errors"] > 0);
      // Each flipped bit is caught by the ICRC or the header checks, except in the one BTH
      // byte the ICRC masks (reserved, ignored).
      CHECK(c["wire_rx_icrc_errors"] + c["wire_rx_malformed"] <= c["faults_corrupted"]);
      CHECK(c["retransmits"] > 0);
    }
  }
  CHECK(moved >= total);
}

void run_rc_setting(const FaultSetting &s) {
  Wire w(s.selective);
  run_rc_setting(w, s, wire_bytes());
  w.shutdown();
}

// ---------------------------------------------------------------------------------------------
// UC and UD: unreliable, so messages may be missing; those that arrive must be intact.

struct AhDeleter {
  void operator()(ibv_ah *ah) const {
    if (ah != nullptr && ibv_destroy_ah(ah) != 0) report_destroy_failure("ibv_destroy_ah", errno);
  }
};

struct Message {
  Op op;
  uint32_t len;
  uint64_t seed;
  size_t write_off;  // UC WRITE_WITH_IMM: where in the target region
};

// Sender and receiver for one unreliable QP pair; `sender` on daemon 1, `receiver` on daemon 2.
class Unreliable {
 public:
  static constexpr size_t kWindow = 64;      // messages ahead of the last one received
  static constexpr size_t kRecvDepth = 256;  // receives kept posted
  // Send buffers: as many as sends outstanding, so that a buffer is written again as soon as
  // its completion says it may be (for UC and UD that is when the message has been sent).
  static constexpr size_t kSendSlots = 2;

  Unreliable(const char *what, Endpoint &sender, Endpoint &receiver, std::vector<Message> plan,
             size_t slot_bytes, size_t recv_offset)
      : what_(what),
        s_(sender),
        r_(receiver),
        plan_(std::move(plan)),
        recv_offset_(recv_offset),
        src_(sender.pd(), kSendSlots, slot_bytes),
        recv_(receiver.pd(), kRecvDepth, slot_bytes + recv_offset) {
    size_t write_bytes = kGuard;
    for (const Message &m : plan_) write_bytes = std::max(write_bytes, m.write_off + m.len);
    write_dst_ = std::make_unique<Slots>(receiver.pd(), 1, write_bytes);
    for (size_t j = 0; j < kRecvDepth; ++j) post_recv(j);
  }

  // Sends every message (the sender waits when kWindow ahead of the receiver) and receives
  // what arrives; FAILs on any damaged, duplicated, misordered or failed completion.
  void run(const std::function<void(ibv_send_wr &)> &address) {
    const auto t0 = Clock::now();
    auto last_progress = t0;
    unsigned idle = 0;
    for (;;) {
      bool progress = false;
      while (posted_ < plan_.size() && posted_ - send_done_ < kSendSlots &&
             static_cast<int64_t>(posted_) <= last_seq_ + static_cast<int64_t>(kWindow)) {
        post_send(address);
        progress = true;
      }
      ibv_wc wcs[32];
      int n = ibv_poll_cq(s_.scq(), 32, wcs);
      if (n < 0) FAIL(what_ << ": ibv_poll_cq returned " << n);
      for (int i = 0; i < n; ++i) complete_send(wcs[i]);
      progress |= n > 0;
      n = ibv_poll_cq(r_.rcq(), 32, wcs);
      if (n < 0) FAIL(what_ << ": ibv_poll_cq returned " << n);
      for (int i = 0; i < n; ++i) complete_recv(wcs[i]);
      progress |= n > 0;
      const bool sent_all = send_done_ == plan_.size();
      if (sent_all && last_seq_ + 1 == static_cast<int64_t>(plan_.size())) break;
      if (progress) {
        idle = 0;
        last_progress = Clock::now();
        continue;
      }
      if (++idle > 32) sched_yield();
      if ((idle & 1023) != 0) continue;
      // The last messages may be lost: once all are sent, 500 ms of quiet ends the run.
      const auto quiet = Clock::now() - last_progress;
      if (sent_all && quiet > Ms(500)) break;
      if (quiet > stall_limit()) {
        FAIL(what_ << ": nothing happened for " << stall_limit().count() << " ms: posted "
                   << posted_ << " of " << plan_.size() << ", " << send_done_
                   << " send completions, " << received_ << " received (last #" << last_seq_
                   << ")");
      }
    }
    secs_ = seconds_since(t0);
    std::this_thread::sleep_for(Ms(50));
    ibv_wc wc{};
    if (ibv_poll_cq(s_.scq(), 1, &wc) != 0)
      FAIL(what_ << ": extra send completion: " << describe(wc));
    if (ibv_poll_cq(r_.rcq(), 1, &wc) != 0) {
      // Only a message not yet seen may still arrive; it is checked like the others.
      complete_recv(wc);
    }
  }

  size_t received() const { return received_; }
  uint64_t received_bytes() const { return received_bytes_; }
  double seconds() const { return secs_; }
  size_t messages() const { return plan_.size(); }

 private:
  void post_recv(uint64_t j) {
    ibv_sge sge = make_sge(recv_.at(j), recv_.cap, recv_.mr->lkey);
    ibv_recv_wr wr = make_recv_wr(kRecvTag | j, &sge, 1);
    ibv_recv_wr *bad = nullptr;
    const int rc = ibv_post_recv(r_.qp(), &wr, &bad);
    if (rc != 0) FAIL(what_ << ": ibv_post_recv: " << errno_str(rc));
  }

  void post_send(const std::function<void(ibv_send_wr &)> &address) {
    const uint64_t k = posted_++;
    const Message &m = plan_[k];
    fill_pattern(src_.at(k), m.len, m.seed);
    ibv_sge sge = make_sge(src_.at(k), m.len, src_.mr->lkey);
    ibv_send_wr wr = make_send_wr(k, wr_opcode(m.op), &sge, 1);
    wr.imm_data = htonl(static_cast<uint32_t>(k));
    if (m.op == Op::WriteImm) {
      wr.wr.rdma.remote_addr = write_dst_->addr(0) + m.write_off;
      wr.wr.rdma.rkey = write_dst_->mr->rkey;
    }
    address(wr);
    ibv_send_wr *bad = nullptr;
    const int rc = ibv_post_send(s_.qp(), &wr, &bad);
    if (rc != 0) FAIL(what_ << ": ibv_post_send #" << k << ": " << errno_str(rc));
  }

  void complete_send(const ibv_wc &wc) {
    if (wc.wr_id != send_done_ || wc.status != IBV_WC_SUCCESS || wc.qp_num != s_.qpn() ||
        wc.opcode != wc_opcode(plan_.at(std::min<size_t>(wc.wr_id, plan_.size() - 1)).op)) {
      FAIL(what_ << ": send completion for #" << send_done_ << " (each once, in order, "
                 << "successful) expected, got " << describe(wc));
    }
    ++send_done_;
  }

  void complete_recv(const ibv_wc &wc) {
    const uint64_t j = recv_done_;
    if (wc.wr_id != (kRecvTag | j) || wc.status != IBV_WC_SUCCESS || wc.qp_num != r_.qpn() ||
        !(wc.wc_flags & IBV_WC_WITH_IMM)) {
      FAIL(what_ << ": receive #" << j << " (in order, successful, with immediate) expected, got "
                 << describe(wc));
    }
    const int64_t seq = ntohl(wc.imm_data);
    if (seq <= last_seq_ || seq >= static_cast<int64_t>(plan_.size())) {
      FAIL(what_ << ": receive #" << j << " carries message #" << seq << " after #" << last_seq_
                 << " (duplicated or out of order): " << describe(wc));
    }
    const Message &m = plan_[static_cast<size_t>(seq)];
    const std::string msg = what_ + ": message #" + std::to_string(seq) + " " + op_name(m.op) +
                            " of " + std::to_string(m.len) + " B";
    const int want_op = m.op == Op::WriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    if (wc.opcode != want_op || wc.byte_len != m.len + recv_offset_ || wc.src_qp != s_.qpn())
      FAIL(msg << ": " << describe(wc) << " (src_qp 0x" << std::hex << wc.src_qp << ")");
    uint8_t *buf = recv_.at(j);
    std::string bad;
    if (m.op == Op::WriteImm) {
      bad = check_pattern(write_dst_->at(0) + m.write_off, m.len, m.seed);
    } else {
      bad = check_pattern(buf + recv_offset_, m.len, m.seed);
      if (recv_offset_ != 0 && bad.empty()) bad = check_grh(buf);
    }
    if (!bad.empty()) FAIL(msg << " arrived damaged: " << bad);
    // A UC receive buffer may hold the start of a message lost later: poison it all again.
    recv_.poison(j, recv_.cap);
    last_seq_ = seq;
    ++received_;
    received_bytes_ += m.len;
    ++recv_done_;
    post_recv(j + kRecvDepth);
  }

  // UD: the GRH holds the IPv4 header (in its last 20 bytes) the datagram came with.
  std::string check_grh(const uint8_t *grh) const {
    const uint8_t *ip = grh + 20;
    const uint8_t src[4] = {127, 0, 0, 1}, dst[4] = {127, 0, 0, 2};
    if ((ip[0] >> 4) != 4 || std::memcmp(ip + 12, src, 4) != 0 || std::memcmp(ip + 16, dst, 4) != 0)
      return "the GRH does not hold the IPv4 header 127.0.0.1 -> 127.0.0.2";
    return {};
  }

  std::string what_;
  Endpoint &s_, &r_;
  std::vector<Message> plan_;
  size_t recv_offset_;
  Slots src_, recv_;
  std::unique_ptr<Slots> write_dst_;
  size_t posted_ = 0, send_done_ = 0, recv_done_ = 0, received_ = 0;
  uint64_t received_bytes_ = 0;
  int64_t last_seq_ = -1;
  double secs_ = 0;
};

void report_unreliable(const char *label, const Unreliable &u, const Stats &rx_delta) {
  std::fprintf(stderr,
               "wire [%s]: %zu of %zu messages received (%zu lost), %s in %.2f s = %.1f MB/s\n"
               "  receiving vrnicd 127.0.0.2:%s\n",
               label, u.received(), u.messages(), u.messages() - u.received(),
               mib(u.received_bytes()).c_str(), u.seconds(),
               double(u.received_bytes()) / u.seconds() / 1e6, format_counters(rx_delta).c_str());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST_CASE("RC across the wire with no faults: every byte and completion verified", "[wire][rc]") {
  run_rc_setting({"none", ""});
}

TEST_CASE("RC across the wire under loss=1: every byte and completion verified", "[wire][rc]") {
  run_rc_setting({"loss=1", "loss=1"});
}

TEST_CASE("RC across the wire under loss=10: every byte and completion verified", "[wire][rc]") {
  run_rc_setting({"loss=10", "loss=10"});
}

TEST_CASE("RC across the wire under reorder=5: every byte and completion verified", "[wire][rc]") {
  run_rc_setting({"reorder=5", "reorder=5"});
}

TEST_CASE("RC across the wire under dup=1: every byte and completion verified", "[wire][rc]") {
  run_rc_setting({"dup=1", "dup=1"});
}

TEST_CASE("RC across the wire under corrupt=1: every byte and completion verified", "[wire][rc]") {
  run_rc_setting({"corrupt=1", "corrupt=1"});
}

// Selective repeat (vrnicd --selective-repeat on both): the same traffic, only the missing
// packets sent again.
TEST_CASE("RC across the wire under loss=1 with selective repeat: every byte and completion verified",
          "[wire][rc]") {
  run_rc_setting({"loss=1 selective", "loss=1", true});
}

TEST_CASE("RC across the wire under loss=10 with selective repeat: every byte and completion verified",
          "[wire][rc]") {
  run_rc_setting({"loss=10 selective", "loss=10", true});
}

TEST_CASE(
    "RC across the wire under loss=1 with selective repeat agreed per QP (ECE, ibv_set_ece), "
    "the daemons as by default: every byte and completion verified",
    "[wire][rc][selective][ece]") {
  FaultSetting s{"loss=1 ece", "loss=1"};
  s.ece = true;
  run_rc_setting(s);
}

TEST_CASE(
    "RC across the wire under loss=1, dup=1, reorder=5 and corrupt=1 at once with selective "
    "repeat: every byte and completion verified",
    "[wire][rc]") {
  run_rc_setting({"all four selective", "loss=1,dup=1,reorder=5,corrupt=1", true});
}

TEST_CASE(
    "RC across the wire under loss=1, dup=1, reorder=5 and corrupt=1 at once: every byte and "
    "completion verified",
    "[wire][rc]") {
  run_rc_setting({"all four", "loss=1,dup=1,reorder=5,corrupt=1"});
}

// An answer overtaken on the way by a later one: the responder answers in PSN order, so the
// later answer (an ACK, a read response, an atomic acknowledge) tells the requester that the
// earlier one went missing, and it asks again at once (the spec's implied NAK) rather than
// waiting for its ACK timer. The requester's daemon holds back every frame of one BTH opcode
// behind the frame after it (`hold_op`); each round posts two WRs whose answers then arrive
// swapped. The timer is set long (timeout 18, ~1 s) so that it cannot be what recovers:
// every round must complete with no timeout, its data and atomic results right.
TEST_CASE("RC across the wire: an answer overtaken by a later one is asked for again at once",
          "[wire][rc]") {
  constexpr uint8_t kReadResponseOnly = 16, kAtomicAcknowledge = 18;
  struct Case {
    const char *what;
    ibv_wr_opcode first, second;
    uint8_t held;
  };
  const Case cases[] = {
      {"read, then fetch-and-add; read response held", IBV_WR_RDMA_READ,
       IBV_WR_ATOMIC_FETCH_AND_ADD, kReadResponseOnly},
      {"fetch-and-add, then read; atomic acknowledge held", IBV_WR_ATOMIC_FETCH_AND_ADD,
       IBV_WR_RDMA_READ, kAtomicAcknowledge},
      {"read, then write; read response held", IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
       kReadResponseOnly},
  };
  constexpr int kRounds = 8;
  constexpr uint32_t kLen = 1000;  // one packet at path MTU 1024
  constexpr uint64_t kCounterStart = 1000;
  Wire w;
  for (const Case &c : cases) {
    INFO(c.what);
    QpConfig cfg = wire_rc_config();
    cfg.timeout = 18;
    Endpoint a, b;  // a (on the first daemon) asks, b answers
    connect_rc_pair(*w.dev1, a, *w.dev2, b, cfg, IBV_MTU_1024);
    Region src(a.pd(), kLen, 1), dst(a.pd(), kLen, 2), orig(a.pd(), 8, 3);
    Region remote(b.pd(), kLen, 4), remote_dst(b.pd(), kLen, 5), counter(b.pd(), 8, 6);
    uint64_t count = kCounterStart;
    std::memcpy(counter.payload(), &count, 8);
    const Stats before = w.d1.require_stats();
    w.d1.set_faults("hold_op=" + std::to_string(c.held));
    for (int k = 0; k < kRounds; ++k) {
      INFO("round " << k);
      const uint64_t seed = seed_for(c.what, k);
      fill_pattern(remote.payload(), kLen, seed);
      fill_pattern(src.payload(), kLen, seed + 1);
      std::memset(dst.payload(), 0, kLen);
      std::memset(orig.payload(), 0, 8);
      ibv_sge read_sge = make_sge(dst.payload(), kLen, dst.lkey());
      ibv_sge write_sge = make_sge(src.payload(), kLen, src.lkey());
      ibv_sge atomic_sge = make_sge(orig.payload(), 8, orig.lkey());
      auto wr_for = [&](ibv_wr_opcode op, uint64_t id) {
        ibv_send_wr wr{};
        if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
          wr = make_send_wr(id, op, &atomic_sge, 1);
          wr.wr.atomic.remote_addr = counter.addr();
          wr.wr.atomic.rkey = counter.rkey();
          wr.wr.atomic.compare_add = 1;
        } else {
          const bool read = op == IBV_WR_RDMA_READ;
          wr = make_send_wr(id, op, read ? &read_sge : &write_sge, 1);
          wr.wr.rdma.remote_addr = read ? remote.addr() : remote_dst.addr();
          wr.wr.rdma.rkey = read ? remote.rkey() : remote_dst.rkey();
        }
        return wr;
      };
      ibv_send_wr first = wr_for(c.first, 2 * k), second = wr_for(c.second, 2 * k + 1);
      first.next = &second;
      post_send(a.qp(), &first);
      const std::vector<ibv_wc> wcs = poll_n(a.scq(), 2, "the round's two completions");
      for (int i = 0; i < 2; ++i) {
        const ibv_wr_opcode op = i == 0 ? c.first : c.second;
        WcExpect e;
        e.what = "completion";
        e.wr_id = uint64_t(2 * k + i);
        e.qp_num = a.qpn();
        e.opcode = op == IBV_WR_RDMA_READ    ? IBV_WC_RDMA_READ
                   : op == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE
                                             : IBV_WC_FETCH_ADD;
        check_wc(wcs[i], e);
      }
      const std::string read_bad = check_pattern(dst.payload(), kLen, seed);
      INFO("read: " << read_bad);
      REQUIRE(read_bad.empty());  // every case has a read
      if (c.second == IBV_WR_RDMA_WRITE) {
        const std::string write_bad = check_pattern(remote_dst.payload(), kLen, seed + 1);
        INFO("write: " << write_bad);
        REQUIRE(write_bad.empty());
      }
      if (c.first == IBV_WR_ATOMIC_FETCH_AND_ADD || c.second == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        uint64_t got;
        std::memcpy(&got, orig.payload(), 8);
        REQUIRE(got == kCounterStart + uint64_t(k));  // executed once, however often asked
      }
      // The answer to the request asked again is of the held opcode too, and waits in the
      // port for a frame to follow it: a WRITE's ACK lets it out (a duplicate, dropped), so
      // the next round's answers are swapped in turn.
      ibv_send_wr flush = wr_for(IBV_WR_RDMA_WRITE, 1000 + uint64_t(k));
      write_sge.length = 8;
      post_send(a.qp(), &flush);
      write_sge.length = kLen;
      poll_n(a.scq(), 1, "the round's closing write");
    }
    const Stats d = stats_delta(w.d1.require_stats(), before);
    w.d1.set_faults("");
    INFO("requester's vrnicd:" << format_counters(d));
    CHECK(d["faults_reordered"] >= kRounds);
    CHECK(d["retransmits"] >= kRounds);  // each round asked again ...
    CHECK(d["retransmits"] <= kRounds + 1);  // ... for the overtaken answer alone
    CHECK(d["timeouts"] == 0);           // ... at once, not when the timer ran out
    if (c.first == IBV_WR_ATOMIC_FETCH_AND_ADD || c.second == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      std::memcpy(&count, counter.payload(), 8);
      CHECK(count == kCounterStart + kRounds);
    }
  }
  w.shutdown();
}

// Each RC opcode in turn (SEND FIRST, 0, to FETCH ADD, 20) held back behind the frame after it,
// every time (hold_op): where reorder=5 picks frames at random, this overtakes every frame of
// one kind -- every first packet of a read response, every ACK, ... -- on both daemons.
TEST_CASE(
    "RC across the wire with each opcode in turn overtaken: every byte and completion "
    "verified",
    "[wire][rc]") {
  const uint64_t each = std::max<uint64_t>(wire_bytes() / 64, 4 * MiB);
  Wire w;
  for (int op = 0; op <= 20; ++op) {
    const std::string spec = "hold_op=" + std::to_string(op);
    run_rc_setting(w, {spec.c_str(), spec.c_str()}, each);
  }
  w.shutdown();
}

TEST_CASE("UC across the wire under loss=1: messages arrive whole and intact or not at all",
          "[wire][uc]") {
  Wire w;
  Stats before, after;
  {
    QpConfig cfg;
    cfg.max_send_wr = 256;
    cfg.max_recv_wr = Unreliable::kRecvDepth * 2;
    cfg.cq_depth = 1024;
    Endpoint s, r;
    create_qp_of_type(*w.dev1, IBV_QPT_UC, cfg, s);
    create_qp_of_type(*w.dev2, IBV_QPT_UC, cfg, r);
    connect_uc(*w.dev1, s, local_info(*w.dev2, r), IBV_MTU_1024);
    connect_uc(*w.dev2, r, local_info(*w.dev1, s), IBV_MTU_1024);
    // SEND_WITH_IMM into receive buffers, WRITE_WITH_IMM into a region where each message
    // has its own place; 1 B to 16 KiB (up to 16 packets of 1024 B).
    constexpr size_t kMessages = 4000, kMax = 16 * KiB;
    std::mt19937_64 rng(seed_for("wire uc"));
    std::vector<Message> plan;
    size_t write_off = 0;
    for (size_t k = 0; k < kMessages; ++k) {
      Message m{rng() % 5 < 3 ? Op::SendImm : Op::WriteImm, 0, seed_for("wire uc data", k), 0};
      m.len = static_cast<uint32_t>(rng() % 5 == 0 ? 1 + rng() % 64 : 1 + rng() % kMax);
      if (m.op == Op::WriteImm) {
        m.write_off = write_off;
        write_off += (m.len + 63) & ~size_t(63);
      }
      plan.push_back(m);
    }
    Unreliable u("UC", s, r, std::move(plan), kMax, 0);
    before = w.d2.require_stats();
    w.set_faults("loss=1");
    u.run([](ibv_send_wr &) {});
    after = w.d2.require_stats();  // before clearing, which resets the faults_* counters
    w.set_faults("");
    const Stats d = stats_delta(after, before);
    report_unreliable("UC loss=1", u, d);
    CHECK(d["faults_dropped"] > 0);
    // At 1% packet loss a message of up to 16 packets is lost at most ~15% of the time.
    CHECK(u.received() >= u.messages() * 7 / 10);
    CHECK(query_state(s.qp()) == IBV_QPS_RTS);
    CHECK(query_state(r.qp()) == IBV_QPS_RTS);
  }
  w.shutdown();
}

TEST_CASE("UD across the wire under loss=1: datagrams arrive intact or not at all", "[wire][ud]") {
  Wire w;
  {
    QpConfig cfg;
    cfg.max_send_wr = 256;
    cfg.max_recv_wr = Unreliable::kRecvDepth * 2;
    cfg.cq_depth = 1024;
    Endpoint s, r;
    create_qp_of_type(*w.dev1, IBV_QPT_UD, cfg, s);
    create_qp_of_type(*w.dev2, IBV_QPT_UD, cfg, r);
    connect_ud(*w.dev1, s);
    connect_ud(*w.dev2, r);
    ibv_ah_attr aa{};
    aa.is_global = 1;
    aa.grh.dgid = w.dev2->gid;
    aa.grh.sgid_index = static_cast<uint8_t>(w.dev1->gid_index);
    aa.grh.hop_limit = 64;
    aa.port_num = w.dev1->port_num;
    std::unique_ptr<ibv_ah, AhDeleter> ah(ibv_create_ah(s.pd(), &aa));
    REQUIRE(ah != nullptr);
    // Datagrams of 1 B to the MTU (4096), each with its number as the immediate.
    constexpr size_t kDatagrams = 8000, kMax = 4096;
    std::mt19937_64 rng(seed_for("wire ud"));
    std::vector<Message> plan;
    for (size_t k = 0; k < kDatagrams; ++k) {
      const uint32_t r8 = rng() % 8;
      const uint32_t len = r8 == 0 ? kMax : r8 == 1 ? 1 + rng() % 64 : 1 + rng() % kMax;
      plan.push_back({Op::SendImm, len, seed_for("wire ud data", k), 0});
    }
    Unreliable u("UD", s, r, std::move(plan), kMax, 40);
    const uint32_t dest_qpn = r.qpn();
    ibv_ah *ah_raw = ah.get();
    const Stats before = w.d2.require_stats();
    w.set_faults("loss=1");
    u.run([&](ibv_send_wr &wr) {
      wr.wr.ud.ah = ah_raw;
      wr.wr.ud.remote_qpn = dest_qpn;
      wr.wr.ud.remote_qkey = kUdQkey;
    });
    const Stats d = stats_delta(w.d2.require_stats(), before);  // before clearing, as above
    w.set_faults("");
    report_unreliable("UD loss=1", u, d);
    CHECK(d["faults_dropped"] > 0);
    CHECK(u.received() >= u.messages() * 95 / 100);  // 1% of single-packet datagrams lost
    CHECK(u.received() < u.messages());              // ... and some were
  }
  w.shutdown();
}
