// vrnicctl capture (capture_client.h). The rings are drained in turn, a worker's frames in
// their order; frames of different workers may interleave a little out of time order, as in
// a capture of a multi-queue NIC.
#include "capture_client.h"

#include <pcap/pcap.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "vrnic/capture_ring.h"
#include "vrnic/ctl_io.h"

namespace vrnic::capture {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

struct Writer {
  pcap_t *pcap = nullptr;
  pcap_dumper_t *dump = nullptr;
  ~Writer() {
    if (dump) pcap_dump_close(dump);
    if (pcap) pcap_close(pcap);
  }
};

// Writes what ring `w` holds; returns the frames written (at most `left`).
uint64_t drain(void *region, uint32_t w, pcap_dumper_t *dump, uint64_t left) {
  RingHeader &ring = *ring_header(region, w);
  const uint8_t *data = ring_data(region, w);
  uint64_t tail = ring.tail.load(std::memory_order_relaxed), n = 0;
  const uint64_t head = ring.head.load(std::memory_order_acquire);
  while (tail != head && n < left) {
    const uint32_t at = uint32_t(tail % kRingBytes);
    const auto *rh = reinterpret_cast<const RecordHeader *>(data + at);
    if (rh->frame_len == kWrapMarker) {
      tail += kRingBytes - at;
      continue;
    }
    pcap_pkthdr ph{};
    ph.ts.tv_sec = time_t(rh->time_ns / 1'000'000'000);
    ph.ts.tv_usec = suseconds_t(rh->time_ns % 1'000'000'000 / 1000);
    ph.caplen = ph.len = rh->frame_len;
    pcap_dump(reinterpret_cast<u_char *>(dump), &ph,
              reinterpret_cast<const u_char *>(rh + 1));
    tail += record_bytes(rh->frame_len);
    n++;
  }
  ring.tail.store(tail, std::memory_order_release);
  return n;
}

int request(int sock, ctl::Op op, const void *body, size_t len, ctl::Message *m) {
  int err = ctl::send_message(sock, op, 0, body, len);
  if (!err) err = ctl::recv_message(sock, m);
  if (!err) err = m->header.status;
  return err;
}

}  // namespace

CLI::App *add_subcommand(CLI::App &app, Options &o) {
  CLI::App *c = app.add_subcommand(
      "capture",
      "write the packets the device sends and receives (any port, loop\n"
      "included) to a pcap file, as RoCEv2 in UDP/IP/Ethernet, until -c or\n"
      "SIGINT; vrnicd's own user and root only");
  c->add_option("--qp", o.qp, "only the packets this QP sends or is sent, e.g. 0x11")
      ->type_name("QPN");
  c->add_option("-c,--count", o.count, "stop after this many packets")->type_name("COUNT");
  c->add_option("-w,--write", o.file, "the pcap file; - for standard output (tshark -r -)")
      ->type_name("FILE")
      ->required();
  return c;
}

int run(const std::string &socket, const Options &o) {
  ctl::CaptureReq req{ctl::kCaptureAnyQp, 0};
  if (!o.qp.empty()) {
    char *end;
    unsigned long qpn = std::strtoul(o.qp.c_str(), &end, 0);
    if (*end || qpn > 0xffffff) {
      std::fprintf(stderr, "vrnicctl: capture --qp: '%s' is not a QP number\n", o.qp.c_str());
      return 2;
    }
    req.qpn = uint32_t(qpn);
  }
  Writer out;
  out.pcap = pcap_open_dead(DLT_EN10MB, 65535);
  if (out.pcap) out.dump = pcap_dump_open(out.pcap, o.file.c_str());
  if (!out.dump) {
    std::fprintf(stderr, "vrnicctl: capture: %s: %s\n", o.file.c_str(),
                 out.pcap ? pcap_geterr(out.pcap) : "pcap_open_dead failed");
    return 1;
  }
  int sock = ctl::connect_daemon(socket.c_str());
  if (sock < 0) {
    std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s\n", socket.c_str(),
                 std::strerror(-sock));
    return 1;
  }
  auto m = std::make_unique<ctl::Message>();
  int err = request(sock, ctl::Op::kCaptureStart, &req, sizeof(req), m.get());
  const auto *resp = m->as<ctl::CaptureResp>();
  if (!err && (!resp || m->fds.size() != 1 || resp->ring_bytes != kRingBytes ||
               resp->region_bytes != region_bytes(resp->workers)))
    err = EPROTO;
  if (err) {
    m->close_fds();
    ::close(sock);
    std::fprintf(stderr, "vrnicctl: capture: %s\n",
                 err == EBUSY   ? "another capture runs on this device"
                 : err == EPERM ? "only vrnicd's own user and root may capture"
                                : std::strerror(err));
    return 1;
  }
  const uint32_t workers = resp->workers;
  void *region = ::mmap(nullptr, resp->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                        m->fds[0], 0);
  ::close(m->fds[0]);
  if (region == MAP_FAILED) {
    std::fprintf(stderr, "vrnicctl: capture: mmap: %s\n", std::strerror(errno));
    ::close(sock);
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::fprintf(stderr, "vrnicctl: capturing on %s%s%s\n", socket.c_str(),
               o.qp.empty() ? "" : ", QP ", o.qp.c_str());
  const uint64_t limit = o.count ? o.count : UINT64_MAX;
  uint64_t written = 0;
  bool daemon_gone = false;
  while (!g_stop && written < limit) {
    uint64_t n = 0;
    for (uint32_t w = 0; w < workers && written + n < limit; w++)
      n += drain(region, w, out.dump, limit - written - n);
    written += n;
    if (n) {
      pcap_dump_flush(out.dump);
      continue;
    }
    pollfd p{sock, POLLIN, 0};  // vrnicd says nothing unless it goes away
    if (::poll(&p, 1, 1) > 0) {
      daemon_gone = true;
      break;
    }
  }
  // Stopped first (after a grace period no worker writes), then what is left is written.
  if (!daemon_gone) request(sock, ctl::Op::kCaptureStop, nullptr, 0, m.get());
  for (uint32_t w = 0; w < workers && written < limit; w++)
    written += drain(region, w, out.dump, limit - written);
  uint64_t dropped = 0;
  for (uint32_t w = 0; w < workers; w++)
    dropped += ring_header(region, w)->dropped.load(std::memory_order_relaxed);
  pcap_dump_flush(out.dump);
  ::munmap(region, resp->region_bytes);
  ::close(sock);
  std::fprintf(stderr, "vrnicctl: %llu packets captured, %llu dropped%s%s\n",
               static_cast<unsigned long long>(written), static_cast<unsigned long long>(dropped),
               dropped ? " (the capture fell behind: its rings were full)" : "",
               daemon_gone ? "; vrnicd went away" : "");
  return daemon_gone ? 1 : 0;
}

}  // namespace vrnic::capture
