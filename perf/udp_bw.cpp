// udp_bw: the kernel's own UDP throughput on loopback, the baseline for vrnic's udp port.
// A receiver thread on 127.0.0.2 and a sender thread on 127.0.0.1 (each pinned to its own CPU
// when there are two) move datagrams of one size (default 4136 = 4096 of payload + 40, about
// one full RoCEv2 packet at path MTU 4096) for a fixed time; the received rate is measured.
//
// Usage: udp_bw [MODE...] [--size BYTES] [--seconds S] [--runs N] [--batch N] [--port PORT]
//   MODE       plain: one datagram per message; sendmmsg/recvmmsg, --batch messages per call
//                     (--batch 1: send/recvmsg, one syscall per datagram)
//              gso:   the sender sets UDP_SEGMENT to BYTES and sends as many segments as fit in
//                     one 64 KB UDP datagram (sendmmsg, --batch super-datagrams per call); the
//                     receiver sets UDP_GRO and splits what it receives at the gso_size the
//                     kernel reports in its UDP_GRO control message
//              default: plain gso
//   --size     UDP payload bytes of one datagram (default 4136)
//   --seconds  measured time of one run (default 3; a 0.3 s warm-up precedes it)
//   --runs     runs per mode, each with fresh sockets; the median is reported (default 3)
//   --batch    messages per sendmmsg/recvmmsg call (default 32 for plain, 4 for gso)
//   --port     receiver's UDP port (default 0: any free port)
//
// Per run one line "run ..." (dropped = datagrams sent but never received, in the whole run:
// the receiver drains its queue after the sender stops), then per mode a last line
//   mode=plain gbps=X mpps=Y size=... runs=... seconds=... batch=...
// with the medians over the runs: gbps = received UDP payload, 1e9 bytes/s; mpps = received
// datagrams (GSO segments counted one by one), 1e6/s. As root the socket buffers are forced to
// 64 MiB (SO_RCVBUFFORCE/SO_SNDBUFFORCE); otherwise they are capped by net.core.*mem_max.

#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace {

constexpr const char *kRxAddr = "127.0.0.2";
constexpr const char *kTxAddr = "127.0.0.1";
constexpr size_t kMaxUdpPayload = 65507;  // 65535 - IPv4 header (20) - UDP header (8)
constexpr size_t kMaxGsoSegments = 64;    // UDP_MAX_SEGMENTS of older kernels; 6.x allow more
constexpr int kSocketBuffer = 64 << 20;

struct Options {
  std::vector<std::string> modes;
  size_t size = 4096 + 40;
  double seconds = 3;
  int runs = 3;
  int batch = 0;  // 0: the mode's default
  uint16_t port = 0;
};

struct RunResult {
  double gbps = 0;
  double mpps = 0;
  double sent_mpps = 0;
  uint64_t sent = 0;          // datagrams sent in the whole run (warm-up included)
  uint64_t received = 0;      // datagrams received in the whole run
  uint64_t gro_messages = 0;  // messages that carried a UDP_GRO control message
};

[[noreturn]] void Usage(const std::string &msg) {
  std::fprintf(stderr, "udp_bw: %s\n", msg.c_str());
  std::fprintf(stderr,
               "usage: udp_bw [plain|gso ...] [--size BYTES] [--seconds S] [--runs N] "
               "[--batch N] [--port PORT]\n");
  std::exit(2);
}

[[noreturn]] void Die(const char *what) {
  std::fprintf(stderr, "udp_bw: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

double ParseNumber(const char *s, const char *what, double min, double max) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= min && v <= max))
    Usage(std::string("bad ") + what + ": '" + s + "'");
  return v;
}

// The CPUs this process may run on, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

void PinSelf(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (err != 0) std::fprintf(stderr, "udp_bw: cannot pin to CPU %d: %s\n", cpu, std::strerror(err));
}

// Large socket buffers: forced past net.core.{r,w}mem_max as root, else as large as allowed.
void BigBuffers(int fd, bool is_receiver) {
  const int force = is_receiver ? SO_RCVBUFFORCE : SO_SNDBUFFORCE;
  const int plain = is_receiver ? SO_RCVBUF : SO_SNDBUF;
  int v = kSocketBuffer;
  if (setsockopt(fd, SOL_SOCKET, force, &v, sizeof(v)) != 0)
    setsockopt(fd, SOL_SOCKET, plain, &v, sizeof(v));
}

int SocketBufferBytes(int fd, bool is_receiver) {
  int v = 0;
  socklen_t len = sizeof(v);
  getsockopt(fd, SOL_SOCKET, is_receiver ? SO_RCVBUF : SO_SNDBUF, &v, &len);
  return v;
}

sockaddr_in Addr(const char *ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) Usage(std::string("bad address ") + ip);
  return a;
}

// Counters the receiver publishes after each batch; the main thread samples them.
struct RxCounters {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> datagrams{0};
  std::atomic<uint64_t> gro_messages{0};
};

void Receiver(int fd, bool gso, int batch, size_t size, int cpu, const std::atomic<bool> &stop,
              RxCounters &out) {
  PinSelf(cpu);
  const size_t buf_size = gso ? 65536 : size;
  std::vector<char> bufs(buf_size * batch);
  std::vector<iovec> iov(batch);
  std::vector<mmsghdr> msgs(batch);
  constexpr size_t kCtlSize = CMSG_SPACE(sizeof(int));
  std::vector<char> ctl(kCtlSize * batch);
  uint64_t bytes = 0, datagrams = 0, gro = 0;
  // Runs until told to stop and the queue is empty (a receive timed out), so that the totals
  // cover everything the sender sent that the kernel did not drop.
  for (;;) {
    for (int i = 0; i < batch; ++i) {
      iov[i] = {bufs.data() + i * buf_size, buf_size};
      msgs[i].msg_hdr = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      if (gso) {
        msgs[i].msg_hdr.msg_control = ctl.data() + i * kCtlSize;
        msgs[i].msg_hdr.msg_controllen = kCtlSize;
      }
    }
    int n;
    if (batch == 1) {
      ssize_t r = recvmsg(fd, &msgs[0].msg_hdr, 0);
      n = r < 0 ? -1 : 1;
      if (n == 1) msgs[0].msg_len = static_cast<unsigned>(r);
    } else {
      n = recvmmsg(fd, msgs.data(), batch, MSG_WAITFORONE, nullptr);
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (stop.load(std::memory_order_relaxed)) break;
        continue;
      }
      if (errno == EINTR) continue;
      Die("recv");
    }
    for (int i = 0; i < n; ++i) {
      const size_t len = msgs[i].msg_len;
      size_t seg = len;
      if (gso) {
        for (cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c != nullptr;
             c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
          if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int g;
            std::memcpy(&g, CMSG_DATA(c), sizeof(g));
            if (g > 0) seg = static_cast<size_t>(g);
            ++gro;
          }
        }
      }
      // Split at the segment size: every segment is one datagram as the sender wrote it (the
      // last one may be shorter). Touch each segment's first byte, as a parser of the
      // packet's header would.
      const char *p = static_cast<const char *>(iov[i].iov_base);
      for (size_t off = 0; off < len; off += seg) {
        asm volatile("" : : "r"(p[off]) : "memory");
        ++datagrams;
      }
      bytes += len;
    }
    out.bytes.store(bytes, std::memory_order_relaxed);
    out.datagrams.store(datagrams, std::memory_order_relaxed);
    out.gro_messages.store(gro, std::memory_order_relaxed);
  }
}

void Sender(int fd, bool gso, int batch, size_t size, int cpu, const std::atomic<bool> &stop,
            std::atomic<uint64_t> &sent) {
  PinSelf(cpu);
  size_t segs = 1;
  if (gso) {
    segs = std::min(kMaxGsoSegments, kMaxUdpPayload / size);
    int g = static_cast<int>(size);
    if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &g, sizeof(g)) != 0) Die("setsockopt UDP_SEGMENT");
  }
  const size_t msg_size = size * segs;
  std::vector<char> buf(msg_size);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 7);
  std::vector<iovec> iov(batch, iovec{buf.data(), msg_size});
  std::vector<mmsghdr> msgs(batch);
  for (int i = 0; i < batch; ++i) {
    msgs[i].msg_hdr = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  uint64_t datagrams = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    int n;
    if (batch == 1) {
      n = send(fd, buf.data(), msg_size, 0) < 0 ? -1 : 1;
    } else {
      n = sendmmsg(fd, msgs.data(), batch, 0);
    }
    if (n < 0) {
      // A full receive queue drops silently; these can still show up transiently.
      if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR || errno == ECONNREFUSED) continue;
      Die("send");
    }
    datagrams += static_cast<uint64_t>(n) * segs;
    sent.store(datagrams, std::memory_order_relaxed);
  }
}

RunResult RunOnce(const Options &o, bool gso, int batch, const std::vector<int> &cpus, int run) {
  int rx = socket(AF_INET, SOCK_DGRAM, 0);
  int tx = socket(AF_INET, SOCK_DGRAM, 0);
  if (rx < 0 || tx < 0) Die("socket");
  BigBuffers(rx, true);
  BigBuffers(tx, false);
  sockaddr_in ra = Addr(kRxAddr, o.port);
  if (bind(rx, reinterpret_cast<sockaddr *>(&ra), sizeof(ra)) != 0) Die("bind 127.0.0.2");
  socklen_t len = sizeof(ra);
  getsockname(rx, reinterpret_cast<sockaddr *>(&ra), &len);
  timeval tv{0, 100000};  // the receiver checks the stop flag at least every 100 ms
  setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (gso) {
    int one = 1;
    if (setsockopt(rx, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) Die("setsockopt UDP_GRO");
  }
  sockaddr_in ta = Addr(kTxAddr, 0);
  if (bind(tx, reinterpret_cast<sockaddr *>(&ta), sizeof(ta)) != 0) Die("bind 127.0.0.1");
  if (connect(tx, reinterpret_cast<sockaddr *>(&ra), sizeof(ra)) != 0) Die("connect");
  if (run == 1)
    std::printf("buffers: receive %d B, send %d B (as reported by getsockopt)\n",
                SocketBufferBytes(rx, true), SocketBufferBytes(tx, false));

  const int tx_cpu = cpus.size() >= 2 ? cpus[0] : -1;
  const int rx_cpu = cpus.size() >= 2 ? cpus[1] : -1;
  std::atomic<bool> stop_tx{false}, stop_rx{false};
  std::atomic<uint64_t> sent{0};
  RxCounters rc;
  std::thread rt(Receiver, rx, gso, batch, o.size, rx_cpu, std::cref(stop_rx), std::ref(rc));
  std::thread st(Sender, tx, gso, batch, o.size, tx_cpu, std::cref(stop_tx), std::ref(sent));

  using Clock = std::chrono::steady_clock;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t b0 = rc.bytes.load(), d0 = rc.datagrams.load(), s0 = sent.load();
  const uint64_t g0 = rc.gro_messages.load();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  const uint64_t b1 = rc.bytes.load(), d1 = rc.datagrams.load(), s1 = sent.load();
  const uint64_t g1 = rc.gro_messages.load();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  stop_tx = true;
  st.join();
  stop_rx = true;
  rt.join();
  close(tx);
  close(rx);

  RunResult r;
  r.gbps = static_cast<double>(b1 - b0) / secs / 1e9;
  r.mpps = static_cast<double>(d1 - d0) / secs / 1e6;
  r.sent_mpps = static_cast<double>(s1 - s0) / secs / 1e6;
  r.gro_messages = g1 - g0;
  r.sent = sent.load();
  r.received = rc.datagrams.load();
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char *what) -> const char * {
      if (i + 1 >= argc) Usage(std::string("missing value for ") + what);
      return argv[++i];
    };
    if (a == "plain" || a == "gso") {
      o.modes.push_back(a);
    } else if (a == "--size") {
      o.size = static_cast<size_t>(ParseNumber(next("--size"), "--size", 1, kMaxUdpPayload));
    } else if (a == "--seconds") {
      o.seconds = ParseNumber(next("--seconds"), "--seconds", 0.1, 3600);
    } else if (a == "--runs") {
      o.runs = static_cast<int>(ParseNumber(next("--runs"), "--runs", 1, 1000));
    } else if (a == "--batch") {
      o.batch = static_cast<int>(ParseNumber(next("--batch"), "--batch", 1, 1024));
    } else if (a == "--port") {
      o.port = static_cast<uint16_t>(ParseNumber(next("--port"), "--port", 0, 65535));
    } else if (a == "-h" || a == "--help") {
      Usage("measures kernel UDP throughput from 127.0.0.1 to 127.0.0.2");
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  if (o.modes.empty()) o.modes = {"plain", "gso"};

  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() >= 2)
    std::printf("cpus: sender on CPU %d, receiver on CPU %d\n", cpus[0], cpus[1]);
  else
    std::printf("cpus: fewer than 2 CPUs allowed; threads not pinned\n");

  for (const std::string &mode : o.modes) {
    const bool gso = mode == "gso";
    const int batch = o.batch ? o.batch : (gso ? 4 : 32);
    const size_t segs = gso ? std::min(kMaxGsoSegments, kMaxUdpPayload / o.size) : 1;
    std::printf("mode %s: %zu-byte datagrams, %zu per send, %s, %d run(s) of %.1f s\n",
                mode.c_str(), o.size, segs,
                batch == 1 ? "send/recvmsg (one call per message)"
                           : (std::to_string(batch) + " messages per sendmmsg/recvmmsg").c_str(),
                o.runs, o.seconds);
    std::fflush(stdout);
    std::vector<double> gbps, mpps;
    for (int r = 1; r <= o.runs; ++r) {
      RunResult res = RunOnce(o, gso, batch, cpus, r);
      const uint64_t dropped = res.sent > res.received ? res.sent - res.received : 0;
      std::printf("run %d mode=%s gbps=%.3f mpps=%.4f sent_mpps=%.4f dropped=%llu/%llu", r,
                  mode.c_str(), res.gbps, res.mpps, res.sent_mpps,
                  static_cast<unsigned long long>(dropped),
                  static_cast<unsigned long long>(res.sent));
      if (gso) std::printf(" gro_msgs=%llu", static_cast<unsigned long long>(res.gro_messages));
      std::printf("\n");
      std::fflush(stdout);
      gbps.push_back(res.gbps);
      mpps.push_back(res.mpps);
    }
    std::printf("mode=%s gbps=%.3f mpps=%.4f size=%zu runs=%d seconds=%g batch=%d\n",
                mode.c_str(), Median(gbps), Median(mpps), o.size, o.runs, o.seconds, batch);
    std::fflush(stdout);
  }
  return 0;
}
