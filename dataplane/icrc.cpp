// The RoCEv2 ICRC: computed over the masked IP/UDP/BTH fields and payload, checked on
// receive, and solved for an IPv4 ID the sender did not tell (icrc.h).
#include "icrc.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "ip_header.h"
#include "vrnic/wire.h"

namespace vrnic {
namespace {

// crc32 of eight 0xFF bytes, the masked LRH every ICRC starts with: continuing from it saves
// feeding them on every packet (the unit test checks the constant). This is zlib's and
// ISA-L's convention, the CRC register inverted; un-inverted it is ROCE.md's 0xDEBB20E3.
constexpr uint32_t kMaskedLrhCrc = 0x2144df1c;

constexpr size_t kMaxIpv4HeaderBytes = 60;
constexpr size_t kBthIcrcByte = 4;  // FECN, BECN and reserved bits: set by switches

// ISA-L's AVX-512 CRC returns with the upper halves of the vector registers dirty: it leaves
// vzeroupper to its callers (intel/isa-l#24). Until they are cleared, every legacy-SSE
// instruction (the compiler's memcpy and struct copies, here and in whatever runs next) pays
// a transition penalty: measured here, it made a 256-byte packet's ICRC ten times slower.
const bool kCpuHasAvx = [] {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return bool(__builtin_cpu_supports("avx"));
#else
  return false;
#endif
}();

void clear_upper_vector_state() {
#if defined(__x86_64__) || defined(__i386__)
  if (kCpuHasAvx) asm volatile("vzeroupper");
#endif
}

// ISA-L's path for pieces shorter than 16 bytes costs as much as a 100-byte one; a byte table
// is faster there (a pad, the rest of an extension header). Same convention as ISA-L: the
// CRC register is kept inverted between calls.
constexpr size_t kTablePieceBytes = 16;
constexpr auto kCrcTable = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; bit++) c = c & 1 ? (c >> 1) ^ 0xedb88320 : c >> 1;  // reflected
    t[i] = c;
  }
  return t;
}();

uint32_t crc32_piece(uint32_t crc, const uint8_t *p, size_t len) {
  if (len >= kTablePieceBytes) return crc32_gzip_refl(crc, p, len);
  uint32_t c = ~crc;
  for (size_t i = 0; i < len; i++) c = kCrcTable[(c ^ p[i]) & 0xff] ^ c >> 8;
  return ~c;
}

// ---- The fast path: IPv4 without options or IPv6, the BTH in the first iovec ----
//
// ISA-L reads its input 16 bytes at a time. Had the masked headers been assembled with byte
// stores, those loads would wait for the stores to drain (a failed store-to-load forward):
// measured here, that made a small packet's ICRC half again as slow. So the headers are
// assembled in 16-byte blocks, masked with OR, and stored whole, where ISA-L loads them.
//
// A short rest of the first iovec (the extension headers, when the payload is in an iovec of
// its own; or a whole small packet) joins the headers: a separate CRC call for a few bytes
// costs more than copying them.
constexpr size_t kSmallTailBytes = 64;

static_assert(std::endian::native == std::endian::little, "blocks are assembled little-endian");
using Block = uint64_t __attribute__((vector_size(16)));

uint64_t load64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint64_t load32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct HeadMask {
  alignas(16) uint8_t b[64];
};

// IPv4: 0xFF×8 · IPv4 header (20) · UDP (8) · BTH (12) = 48 bytes, starting the CRC afresh.
constexpr size_t kIpv4HeadBytes = 48;
constexpr HeadMask kIpv4HeadMask = [] {
  HeadMask m{};
  m.b[8 + 1] = 0xff;                 // TOS
  m.b[8 + 8] = 0xff;                 // TTL
  m.b[8 + 10] = m.b[8 + 11] = 0xff;  // header checksum
  m.b[28 + 6] = m.b[28 + 7] = 0xff;  // UDP checksum
  m.b[36 + kBthIcrcByte] = 0xff;
  return m;
}();

// IPv6: IPv6 header (40) · UDP (8) · BTH (12) · 4 more transport bytes = 64 bytes, continuing
// from the masked LRH's CRC.
constexpr size_t kIpv6HeadBytes = 64;
constexpr size_t kIpv6HeadTransportBytes = 16;

constexpr HeadMask kIpv6HeadMask = [] {
  HeadMask m{};
  m.b[0] = 0x0f;                     // traffic class, high nibble
  m.b[1] = m.b[2] = m.b[3] = 0xff;   // traffic class, low nibble; flow label
  m.b[7] = 0xff;                     // hop limit
  m.b[40 + 6] = m.b[40 + 7] = 0xff;  // UDP checksum
  m.b[48 + kBthIcrcByte] = 0xff;
  return m;
}();

template <size_t N>
void store_masked(uint8_t *out, const Block (&blocks)[N], const HeadMask &mask) {
  for (size_t i = 0; i < N; i++) {
    Block m;
    std::memcpy(&m, mask.b + 16 * i, 16);
    Block v = blocks[i] | m;
    std::memcpy(out + 16 * i, &v, 16);
  }
}

// ---- The general path: any IP header length, the BTH split anywhere ----

// Sets the IP fields routers rewrite to all ones, in a copy of the header.
void mask_ip(uint8_t *ip, size_t ip_len) {
  if (ip_len == 0) return;
  if (ip[0] >> 4 == 6) {
    if (ip_len < kIpv6HeaderBytes) return;
    ip[0] |= 0x0f;                 // traffic class, high nibble
    std::memset(ip + 1, 0xff, 3);  // traffic class, low nibble; flow label
    ip[7] = 0xff;                  // hop limit
  } else {
    if (ip_len < kIpv4HeaderBytes) return;
    ip[1] = 0xff;                   // TOS (DSCP, ECN)
    ip[8] = 0xff;                   // TTL
    std::memset(ip + 10, 0xff, 2);  // header checksum
  }
}

// The CRC of the masked headers, with the BTH gathered from however many iovecs hold it.
// Sets *iov and *offset to the first transport byte after the BTH.
uint32_t head_crc_gathered(const uint8_t *ip, size_t ip_len, const uint8_t *udp,
                           const struct iovec *transport, size_t n, size_t *iov, size_t *offset) {
  uint8_t head[kMaxIpv4HeaderBytes + kUdpHeaderBytes + wire::Bth::kSize];
  ip_len = std::min(ip_len, kMaxIpv4HeaderBytes);
  std::memcpy(head, ip, ip_len);
  mask_ip(head, ip_len);
  uint8_t *masked_udp = head + ip_len;
  std::memcpy(masked_udp, udp, kUdpHeaderBytes);
  std::memset(masked_udp + 6, 0xff, 2);  // UDP checksum
  uint8_t *bth = masked_udp + kUdpHeaderBytes;
  size_t bth_len = 0;
  *iov = *offset = 0;
  while (*iov < n && bth_len < wire::Bth::kSize) {
    size_t take = std::min(transport[*iov].iov_len, wire::Bth::kSize - bth_len);
    std::memcpy(bth + bth_len, transport[*iov].iov_base, take);
    bth_len += take;
    if (take == transport[*iov].iov_len) {
      ++*iov;
    } else {
      *offset = take;
    }
  }
  if (bth_len > kBthIcrcByte) bth[kBthIcrcByte] = 0xff;
  return crc32_gzip_refl(kMaskedLrhCrc, head, uint64_t(bth + bth_len - head));
}

// ---- Solving for the IPv4 ID (solve_ipv4_id) ----
//
// Polynomials mod the CRC-32 polynomial P in the reflected form zlib uses: bit 31 is x^0, bit
// 0 is x^31. The linear part of the CRC (no initial value, no final inversion) of a message m
// followed by n zero bytes is crc_lin(m) * x^(8n) mod P; that of a 4-byte word w (read
// little-endian) is w * x^32 mod P. P has a constant term, so x is invertible mod P and both
// steps can be undone.
constexpr uint32_t kPolyReflected = 0xedb88320;
constexpr uint32_t kOne = 0x80000000;  // x^0

// 32 dependent steps, about 45 ns: the whole cost of a solve (perf/icrc_bench).
constexpr uint32_t mul_mod_p(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (int i = 31; i >= 0; i--) {
    product ^= b & -((a >> i) & 1);
    b = (b >> 1) ^ (kPolyReflected & -(b & 1));  // b *= x
  }
  return product;
}

// x^-1 = (P - 1) / x: the terms of P of degree 1..32, each one degree down.
constexpr uint32_t kXInverse = (kPolyReflected << 1) | 1;
static_assert(mul_mod_p(kXInverse, kOne >> 1) == kOne, "x * x^-1 = 1");

constexpr uint32_t pow_mod_p(uint32_t base, uint64_t exp) {
  uint32_t r = kOne;
  for (; exp; exp >>= 1, base = mul_mod_p(base, base))
    if (exp & 1) r = mul_mod_p(r, base);
  return r;
}

// x^-(8 (n + 4)) for the n bytes after the ID, by n, for packets up to a jumbo frame; longer
// ones (no RoCE packet is) are computed on the spot.
constexpr size_t kShiftTableBytes = 9216;
const std::array<uint32_t, kShiftTableBytes> &id_shift_table() {
  static const auto table = [] {
    std::array<uint32_t, kShiftTableBytes> t{};
    const uint32_t byte_back = pow_mod_p(kXInverse, 8);
    t[0] = pow_mod_p(kXInverse, 32);
    for (size_t n = 1; n < t.size(); n++) t[n] = mul_mod_p(t[n - 1], byte_back);
    return t;
  }();
  return table;
}

}  // namespace

std::optional<uint16_t> solve_ipv4_id(uint32_t icrc_with_guess, uint16_t guess, uint32_t received,
                                      size_t bytes_after_id) {
  uint32_t diff = icrc_with_guess ^ received;  // crc_lin of the ID's change, shifted to the end
  if (!diff) return guess;
  uint32_t back = bytes_after_id < kShiftTableBytes
                      ? id_shift_table()[bytes_after_id]
                      : pow_mod_p(kXInverse, 8 * (bytes_after_id + 4));
  // The 4-byte word that ends with the ID's two bytes: its first two must be zero.
  uint32_t word = mul_mod_p(back, diff);
  if (word & 0xffff) return std::nullopt;
  uint16_t change = uint16_t((word >> 16 & 0xff) << 8 | word >> 24);  // the ID is big-endian
  return uint16_t(guess ^ change);
}

uint32_t roce_icrc(const uint8_t *ip, size_t ip_len, const uint8_t *udp,
                   const struct iovec *transport, size_t n) {
  uint32_t crc;
  size_t iov = 0, offset = 0;  // where the transport bytes not yet covered start
  const size_t first_len = n ? transport[0].iov_len : 0;
  const auto *first = n ? static_cast<const uint8_t *>(transport[0].iov_base) : nullptr;
  alignas(16) uint8_t head[kIpv6HeadBytes + kSmallTailBytes];
  size_t head_len = 0;
  if (ip_len == kIpv4HeaderBytes && ip[0] >> 4 == 4 && first_len >= wire::Bth::kSize) {
    const Block blocks[3] = {
        {~uint64_t(0), load64(ip)},
        {load64(ip + 8), load32(ip + 16) | load32(udp) << 32},
        {load32(udp + 4) | load32(first) << 32, load64(first + 4)},
    };
    store_masked(head, blocks, kIpv4HeadMask);
    head_len = kIpv4HeadBytes;
    offset = wire::Bth::kSize;
  } else if (ip_len == kIpv6HeaderBytes && ip[0] >> 4 == 6 &&
             first_len >= kIpv6HeadTransportBytes) {
    const Block blocks[4] = {
        {load64(ip), load64(ip + 8)},
        {load64(ip + 16), load64(ip + 24)},
        {load64(ip + 32), load64(udp)},
        {load64(first), load64(first + 8)},
    };
    store_masked(head, blocks, kIpv6HeadMask);
    head_len = kIpv6HeadBytes;
    offset = kIpv6HeadTransportBytes;
  }
  if (head_len) {
    if (first_len - offset <= kSmallTailBytes) {
      std::memcpy(head + head_len, first + offset, first_len - offset);
      head_len += first_len - offset;
      iov = 1;
      offset = 0;
    }
    crc = crc32_gzip_refl(ip_len == kIpv4HeaderBytes ? 0 : kMaskedLrhCrc, head, head_len);
  } else {
    crc = head_crc_gathered(ip, ip_len, udp, transport, n, &iov, &offset);
  }
  for (; iov < n; iov++, offset = 0) {
    const auto *base = static_cast<const uint8_t *>(transport[iov].iov_base);
    crc = crc32_piece(crc, base + offset, transport[iov].iov_len - offset);
  }
  clear_upper_vector_state();
  return crc;
}

bool roce_icrc_ok(const uint8_t *ip, size_t ip_len, const uint8_t *udp, const uint8_t *udp_payload,
                  size_t udp_payload_len) {
  if (udp_payload_len < wire::Bth::kSize + wire::kIcrcBytes) return false;
  size_t covered = udp_payload_len - wire::kIcrcBytes;
  struct iovec transport = {const_cast<uint8_t *>(udp_payload), covered};
  return roce_icrc(ip, ip_len, udp, &transport, 1) == load_icrc(udp_payload + covered);
}

}  // namespace vrnic
