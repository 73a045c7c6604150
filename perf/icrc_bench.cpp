// icrc_bench: throughput of roce_icrc (dataplane/icrc.cpp) on one core, next to one plain
// crc32_gzip_refl call over the same bytes, so that what the ICRC's masking and chunking cost
// on top of the CRC itself is visible. Packets are RC WRITE only over IPv4 (20 B IP, 8 B UDP,
// 28 B BTH+RETH) with the payload sizes asked for.
//
// Usage: icrc_bench [SIZE...] [--runs N] [--ms MS]
//   SIZE    payload bytes per packet (default: 64 4096)
//   --runs  number of timed runs of each column, taken in turns; the median is reported
//           (default 9)
//   --ms    duration of one run in milliseconds (default 100)
//
// Columns: "plain" is crc32_gzip_refl over 8 + 56 + SIZE + pad contiguous bytes (what the ICRC
// covers); "1 iov" is roce_icrc with the transport bytes in one iovec (the receive side);
// "2 iov" with the BTH+RETH and the payload in separate iovecs (the send side: headers in the
// packet, payload in registered memory). GB/s counts the bytes of the packet from the IP
// header to the pad (1 GB = 1e9 bytes); ns is per packet.
//
// The receive check of the udp port, which sees no IP header, for a packet whose sender gave
// it an IPv4 ID other than the one guessed (a kernel RoCE sender's, 25570 here): "solve" is
// what it does now (the ICRC with the guess, then solve_ipv4_id); "trial 64" what it did
// before, the ICRC with each of the IDs 0..63 in turn (a loopback GSO segment's number; any
// other ID it could not check at all, and dropped the packet).
// Last lines, for scripts: "SIZE_GBps plain=X iov1=Y iov2=Z" and
// "SIZE_rx_ns id0=A solve=B trial64=C".

#include <isa-l/crc.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dataplane/icrc.h"
#include "dataplane/ip_header.h"
#include "vrnic/wire.h"

namespace {

using namespace vrnic;

[[noreturn]] void Usage(const char *msg) {
  std::fprintf(stderr, "icrc_bench: %s\n", msg);
  std::fprintf(stderr, "usage: icrc_bench [SIZE...] [--runs N] [--ms MS]\n");
  std::exit(2);
}

uint64_t ParseCount(const char *s, const char *what, bool zero_ok) {
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || (v == 0 && !zero_ok)) {
    std::string m = std::string("bad ") + what + ": '" + s + "'";
    Usage(m.c_str());
  }
  return v;
}

// Keeps the compiler from dropping a CRC whose value nobody reads.
inline void Use(uint32_t v) {
  asm volatile("" : : "r"(v) : "memory");
}

struct Measurement {
  double median_gbps, ns_per_packet;
};

// Times each of fns (one packet per call) for `runs` runs of run_ms; the runs of the
// different fns alternate, so that a noisy neighbour slows all of them alike. Returns the
// median over the runs of each.
template <typename Fn, size_t N>
std::array<Measurement, N> Measure(const std::array<Fn, N> &fns, size_t packet_bytes, uint64_t runs,
                                   uint64_t run_ms) {
  using Clock = std::chrono::steady_clock;
  const auto run_for = std::chrono::milliseconds(run_ms);
  auto timed_run = [&](const Fn &fn) {
    uint64_t packets = 0;
    const auto t0 = Clock::now();
    auto t1 = t0;
    do {
      for (int k = 0; k < 64; k++) Use(fn());
      packets += 64;
      t1 = Clock::now();
    } while (t1 - t0 < run_for);
    return double(packets) * double(packet_bytes) / std::chrono::duration<double>(t1 - t0).count() /
           1e9;
  };
  for (const Fn &fn : fns) timed_run(fn);  // warm-up, not counted
  std::array<std::vector<double>, N> gbps;
  for (uint64_t r = 0; r < runs; r++) {
    for (size_t i = 0; i < N; i++) gbps[i].push_back(timed_run(fns[i]));
  }
  std::array<Measurement, N> result;
  for (size_t i = 0; i < N; i++) {
    std::vector<double> &g = gbps[i];
    std::sort(g.begin(), g.end());
    const size_t n = g.size();
    const double median = n % 2 ? g[n / 2] : (g[n / 2 - 1] + g[n / 2]) / 2;
    result[i] = {median, double(packet_bytes) / median};
  }
  return result;
}

}  // namespace

int main(int argc, char **argv) {
  std::vector<uint64_t> sizes;
  uint64_t runs = 9, run_ms = 100;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto next = [&](const char *what) -> const char * {
      if (i + 1 >= argc) Usage((std::string("missing value for ") + what).c_str());
      return argv[++i];
    };
    if (a == "--runs") {
      runs = ParseCount(next("--runs"), "--runs", false);
    } else if (a == "--ms") {
      run_ms = ParseCount(next("--ms"), "--ms", false);
    } else if (a == "-h" || a == "--help") {
      Usage("measures ICRC throughput");
    } else if (!a.empty() && a[0] != '-') {
      sizes.push_back(ParseCount(argv[i], "SIZE", true));
      if (sizes.back() > 65000) Usage("SIZE above 65000");
    } else {
      Usage((std::string("unexpected argument '") + a + "'").c_str());
    }
  }
  if (sizes.empty()) sizes = {64, 4096};

  std::printf("icrc_bench: RC WRITE only over IPv4, median of %llu runs of %llu ms, one core\n",
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(run_ms));
  std::printf("%8s %8s | %14s | %14s | %14s | %13s | %9s %9s\n", "payload", "packet",
              "plain GB/s ns", "1 iov GB/s ns", "2 iov GB/s ns", "2 iov / plain", "solve ns",
              "trial 64");
  std::vector<std::string> script_lines;
  for (uint64_t payload_len : sizes) {
    const size_t header_len = wire::Bth::kSize + wire::Reth::kSize;
    const uint8_t pad = uint8_t((4 - payload_len % 4) % 4);
    const size_t transport_len = header_len + payload_len + pad;
    const size_t packet_len = kIpv4HeaderBytes + kUdpHeaderBytes + transport_len;
    const uint16_t udp_len = uint16_t(kUdpHeaderBytes + transport_len + wire::kIcrcBytes);

    const uint8_t src[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    const uint8_t dst[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    uint8_t ip[kIpv4HeaderBytes], udp[kUdpHeaderBytes];
    build_ipv4(ip, src, dst, udp_len, 0, 64, 0, true);
    build_udp(udp, 0xc123, wire::kRoceUdpPort, udp_len, 0);
    // Transport bytes contiguous (as received) and, separately, the payload on its own (as in
    // registered memory), both 64-byte aligned like packet buffers and MRs usually are.
    std::vector<uint8_t> storage(2 * (transport_len + 128));
    uint8_t *transport = storage.data() + (64 - uintptr_t(storage.data()) % 64) % 64;
    uint8_t *payload = transport + (transport_len + 64) / 64 * 64;
    auto &bth = *reinterpret_cast<wire::Bth *>(transport);
    bth.set(wire::make_opcode(wire::kRc, wire::kWriteOnly), false, pad, wire::kDefaultPkey, 0x11,
            true, 5);
    reinterpret_cast<wire::Reth *>(transport + wire::Bth::kSize)
        ->set(0x1000, 0x1234, uint32_t(payload_len));
    for (size_t i = 0; i < payload_len + pad; i++) {
      payload[i] = transport[header_len + i] = uint8_t(i < payload_len ? i * 131 + 7 : 0);
    }
    // The plain CRC's input: the ICRC's bytes, already masked, in one buffer.
    std::vector<uint8_t> plain(8, 0xff);
    plain.insert(plain.end(), ip, ip + sizeof(ip));
    plain.insert(plain.end(), udp, udp + sizeof(udp));
    plain.insert(plain.end(), transport, transport + transport_len);
    plain[8 + 1] = plain[8 + 8] = plain[8 + 10] = plain[8 + 11] = 0xff;
    plain[8 + 20 + 6] = plain[8 + 20 + 7] = 0xff;
    plain[8 + 28 + 4] = 0xff;

    const struct iovec one[1] = {{transport, transport_len}};
    const struct iovec two[2] = {{transport, header_len}, {payload, payload_len + pad}};
    const uint32_t expected = crc32_gzip_refl(0, plain.data(), plain.size());
    if (roce_icrc(ip, sizeof(ip), udp, one, 1) != expected ||
        roce_icrc(ip, sizeof(ip), udp, two, 2) != expected) {
      std::fprintf(stderr, "icrc_bench: roce_icrc disagrees with the plain CRC at %llu B\n",
                   static_cast<unsigned long long>(payload_len));
      return 1;
    }

    // What a kernel sender's ICRC is: computed with its own ID.
    constexpr uint16_t kSenderId = 25570;
    uint8_t sender_ip[kIpv4HeaderBytes];
    build_ipv4(sender_ip, src, dst, udp_len, 0, 64, kSenderId, true);
    const uint32_t received = roce_icrc(sender_ip, sizeof(sender_ip), udp, one, 1);
    const size_t after_id = ipv4_bytes_after_id(transport_len + wire::kIcrcBytes);
    if (solve_ipv4_id(roce_icrc(ip, sizeof(ip), udp, one, 1), 0, received, after_id) != kSenderId) {
      std::fprintf(stderr, "icrc_bench: solve_ipv4_id did not find the sender's ID\n");
      return 1;
    }

    const std::array<std::function<uint32_t()>, 5> fns = {
        [&] { return crc32_gzip_refl(0, plain.data(), plain.size()); },
        [&] { return roce_icrc(ip, sizeof(ip), udp, one, 1); },
        [&] { return roce_icrc(ip, sizeof(ip), udp, two, 2); },
        [&] {
          uint32_t with_guess = roce_icrc(ip, sizeof(ip), udp, one, 1);
          return with_guess ^ solve_ipv4_id(with_guess, 0, received, after_id).value_or(0);
        },
        [&] {
          uint32_t found = 0;
          for (uint16_t id = 0; id < 64; id++) {
            uint8_t guess[kIpv4HeaderBytes];
            build_ipv4(guess, src, dst, udp_len, 0, 64, id, true);
            found |= roce_icrc(guess, sizeof(guess), udp, one, 1) == received;
          }
          return found;
        },
    };
    const auto [m_plain, m_one, m_two, m_solve, m_trial] = Measure(fns, packet_len, runs, run_ms);
    std::printf("%8llu %8zu | %6.2f %7.1f | %6.2f %7.1f | %6.2f %7.1f | %13.2f | %9.1f %9.1f\n",
                static_cast<unsigned long long>(payload_len), packet_len, m_plain.median_gbps,
                m_plain.ns_per_packet, m_one.median_gbps, m_one.ns_per_packet, m_two.median_gbps,
                m_two.ns_per_packet, m_two.median_gbps / m_plain.median_gbps, m_solve.ns_per_packet,
                m_trial.ns_per_packet);
    char line[160];
    std::snprintf(line, sizeof(line), "%llu_GBps plain=%.2f iov1=%.2f iov2=%.2f",
                  static_cast<unsigned long long>(payload_len), m_plain.median_gbps,
                  m_one.median_gbps, m_two.median_gbps);
    script_lines.push_back(line);
    std::snprintf(line, sizeof(line), "%llu_rx_ns id0=%.1f solve=%.1f trial64=%.1f",
                  static_cast<unsigned long long>(payload_len), m_one.ns_per_packet,
                  m_solve.ns_per_packet, m_trial.ns_per_packet);
    script_lines.push_back(line);
  }
  for (const std::string &l : script_lines) std::printf("%s\n", l.c_str());
  return 0;
}
