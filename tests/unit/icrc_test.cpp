// The ICRC and the IP/UDP header builders: ROCE.md's test vector rebuilt byte for byte, the
// fields the ICRC must ignore and those it must not, iovec splits, and a one-call reference.
#include <catch2/catch.hpp>

#include <isa-l/crc.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dataplane/icrc.h"
#include "dataplane/ip_header.h"
#include "vrnic/wire.h"

using namespace vrnic;
using namespace vrnic::wire;

namespace {

using Bytes = std::vector<uint8_t>;

std::string hex(const Bytes &b) {
  std::string s;
  char h[3];
  for (uint8_t c : b) {
    std::snprintf(h, sizeof(h), "%02x", c);
    s += h;
  }
  return s;
}

Bytes gid_v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

Bytes gid_v6(uint8_t last) {
  return {0xfd, 0x00, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
}

// A RoCEv2 packet in the pieces roce_icrc takes.
struct RocePacket {
  Bytes ip, udp, transport;  // transport: BTH through pad, no ICRC

  uint32_t icrc() const {
    struct iovec t = {const_cast<uint8_t *>(transport.data()), transport.size()};
    return roce_icrc(ip.data(), ip.size(), udp.data(), &t, 1);
  }
  Bytes udp_payload_with_icrc() const {
    Bytes p = transport;
    p.resize(p.size() + kIcrcBytes);
    store_icrc(p.data() + transport.size(), icrc());
    return p;
  }
};

// BTH (+ RETH) + payload + pad for an RC WRITE only, as in ROCE.md's vector.
Bytes write_only_transport(size_t payload_len, uint32_t dest_qp, uint32_t psn) {
  uint8_t pad = uint8_t((4 - payload_len % 4) % 4);
  Bytes t(Bth::kSize + Reth::kSize + payload_len + pad);
  auto &bth = *reinterpret_cast<Bth *>(t.data());
  bth.set(make_opcode(kRc, kWriteOnly), false, pad, kDefaultPkey, dest_qp, true, psn);
  auto &reth = *reinterpret_cast<Reth *>(t.data() + Bth::kSize);
  reth.set(0x1000, 0x1234, uint32_t(payload_len));
  for (size_t i = 0; i < payload_len; i++) t[Bth::kSize + Reth::kSize + i] = uint8_t(i);
  return t;
}

RocePacket ipv4_packet(Bytes transport) {
  RocePacket p;
  p.transport = std::move(transport);
  uint16_t udp_len = uint16_t(kUdpHeaderBytes + p.transport.size() + kIcrcBytes);
  p.ip.resize(kIpv4HeaderBytes);
  p.udp.resize(kUdpHeaderBytes);
  Bytes src = gid_v4(10, 0, 0, 1), dst = gid_v4(10, 0, 0, 2);
  build_ipv4(p.ip.data(), src.data(), dst.data(), udp_len, 0x02, 64, 0x1234, true);
  build_udp(p.udp.data(), 0xc123, kRoceUdpPort, udp_len, 0);
  return p;
}

RocePacket ipv6_packet(Bytes transport) {
  RocePacket p;
  p.transport = std::move(transport);
  uint16_t udp_len = uint16_t(kUdpHeaderBytes + p.transport.size() + kIcrcBytes);
  p.ip.resize(kIpv6HeaderBytes);
  p.udp.resize(kUdpHeaderBytes);
  Bytes src = gid_v6(1), dst = gid_v6(2);
  build_ipv6(p.ip.data(), src.data(), dst.data(), udp_len, 0x0a, 0xabcde, 64);
  build_udp(p.udp.data(), 0xd00d, kRoceUdpPort, udp_len, 0x5a5a);
  return p;
}

// The ICRC as ROCE.md words it, the obvious way: mask a copy of everything, one CRC call.
uint32_t reference_icrc(const RocePacket &p) {
  Bytes masked(8, 0xff);
  size_t ip_at = masked.size();
  masked.insert(masked.end(), p.ip.begin(), p.ip.end());
  uint8_t *ip = masked.data() + ip_at;
  if (p.ip[0] >> 4 == 4) {
    ip[1] = 0xff;            // TOS
    ip[8] = 0xff;            // TTL
    ip[10] = ip[11] = 0xff;  // header checksum
  } else {
    uint32_t first = load_be32(ip);
    store_be32(ip, first | 0x0fffffff);  // traffic class and flow label
    ip[7] = 0xff;                        // hop limit
  }
  size_t udp_at = masked.size();
  masked.insert(masked.end(), p.udp.begin(), p.udp.end());
  masked[udp_at + 6] = masked[udp_at + 7] = 0xff;  // UDP checksum
  size_t bth_at = masked.size();
  masked.insert(masked.end(), p.transport.begin(), p.transport.end());
  masked[bth_at + 4] = 0xff;  // FECN, BECN, reserved
  return crc32_gzip_refl(0, masked.data(), masked.size());
}

// Splits bytes into random pieces (empty ones included) and returns the ICRC over them.
uint32_t icrc_split(const RocePacket &p, std::mt19937 &rng) {
  std::vector<struct iovec> iov;
  Bytes copy = p.transport;  // pieces point into it
  size_t at = 0;
  std::uniform_int_distribution<size_t> piece(0, 20);
  while (at < copy.size()) {
    size_t len = std::min(piece(rng), copy.size() - at);
    iov.push_back({copy.data() + at, len});
    at += len;
  }
  if (rng() % 2) iov.push_back({nullptr, 0});
  return roce_icrc(p.ip.data(), p.ip.size(), p.udp.data(), iov.data(), iov.size());
}

}  // namespace

TEST_CASE("the masked LRH is eight 0xFF bytes, CRC register 0xDEBB20E3", "[icrc]") {
  // ROCE.md's seed is the raw CRC register; zlib and ISA-L hand it out inverted.
  const uint8_t lrh[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK(~crc32_gzip_refl(0, lrh, sizeof(lrh)) == 0xdebb20e3);
  CHECK(crc32_gzip_refl(0, lrh, sizeof(lrh)) == 0x2144df1c);  // icrc.cpp's kMaskedLrhCrc
}

TEST_CASE("ROCE.md's test vector, rebuilt from its parts", "[icrc]") {
  const std::string expected =
      "02000000000202000000000108004500004c000100004011669e0a0000010a000002c12312b70038b370"
      "0a00ffff000000118000000500000000000010000000123400000010000102030405060708090a0b0c0d"
      "0e0f84d8fabc";
  Bytes transport = write_only_transport(16, 0x11, 5);
  transport[1] = 0x00;  // the vector's BTH has MigReq clear; Bth::set always sets it
  uint16_t udp_len = uint16_t(kUdpHeaderBytes + transport.size() + kIcrcBytes);
  RocePacket p;
  p.transport = transport;
  p.ip.resize(kIpv4HeaderBytes);
  p.udp.resize(kUdpHeaderBytes);
  Bytes src = gid_v4(10, 0, 0, 1), dst = gid_v4(10, 0, 0, 2);
  CHECK(gid_is_ipv4(src.data()));
  CHECK(build_ipv4(p.ip.data(), src.data(), dst.data(), udp_len, 0, 64, 1, false) == 20);
  build_udp(p.udp.data(), 0xc123, kRoceUdpPort, udp_len, 0xb370);

  Bytes wire = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00};  // Ethernet
  wire.insert(wire.end(), p.ip.begin(), p.ip.end());
  wire.insert(wire.end(), p.udp.begin(), p.udp.end());
  Bytes udp_payload = p.udp_payload_with_icrc();
  wire.insert(wire.end(), udp_payload.begin(), udp_payload.end());
  CHECK(wire.size() == 90);
  CHECK(hex(wire) == expected);
  CHECK(p.icrc() == 0xbcfad884);
  CHECK(reference_icrc(p) == p.icrc());
  CHECK(ipv4_header_checksum(p.ip.data(), p.ip.size()) == 0);  // the header is intact
}

TEST_CASE("gid_is_ipv4 recognises only ::ffff:a.b.c.d", "[icrc]") {
  CHECK(gid_is_ipv4(gid_v4(127, 0, 0, 1).data()));
  CHECK_FALSE(gid_is_ipv4(gid_v6(1).data()));
  Bytes compat = gid_v4(1, 2, 3, 4);
  compat[10] = compat[11] = 0;  // ::1.2.3.4, the deprecated IPv4-compatible form
  CHECK_FALSE(gid_is_ipv4(compat.data()));
}

TEST_CASE("build_ipv6 lays out the fixed header", "[icrc]") {
  Bytes src = gid_v6(1), dst = gid_v6(2);
  uint8_t ip[40];
  CHECK(build_ipv6(ip, src.data(), dst.data(), 0x1234, 0xb8, 0xfabcde, 17) == 40);
  CHECK(load_be32(ip) == (0x60000000u | 0xb8u << 20 | 0xabcde));  // flow label: 20 bits
  CHECK(load_be16(ip + 4) == 0x1234);
  CHECK(ip[6] == kIpProtocolUdp);
  CHECK(ip[7] == 17);
  CHECK(Bytes(ip + 8, ip + 24) == src);
  CHECK(Bytes(ip + 24, ip + 40) == dst);
}

TEST_CASE("roce_icrc_ok accepts an intact packet and rejects a damaged or short one", "[icrc]") {
  for (const RocePacket &p : {ipv4_packet(write_only_transport(16, 0x11, 5)),
                              ipv6_packet(write_only_transport(333, 0x77, 9))}) {
    Bytes payload = p.udp_payload_with_icrc();
    CHECK(roce_icrc_ok(p.ip.data(), p.ip.size(), p.udp.data(), payload.data(), payload.size()));
    for (size_t i : {size_t(0), size_t(30), payload.size() - 1}) {
      Bytes bad = payload;
      bad[i] ^= 0x01;
      CHECK_FALSE(roce_icrc_ok(p.ip.data(), p.ip.size(), p.udp.data(), bad.data(), bad.size()));
    }
    CHECK_FALSE(roce_icrc_ok(p.ip.data(), p.ip.size(), p.udp.data(), payload.data(), 15));
    CHECK_FALSE(roce_icrc_ok(p.ip.data(), p.ip.size(), p.udp.data(), payload.data(), 0));
  }
}

TEST_CASE("the ICRC ignores exactly the fields routers may change", "[icrc]") {
  struct Case {
    const char *name;
    RocePacket packet;
    std::vector<size_t> masked_ip;  // byte offsets; IPv6 byte 0 is masked in its low nibble
  };
  std::vector<Case> cases = {
      {"IPv4", ipv4_packet(write_only_transport(37, 0x11, 5)), {1, 8, 10, 11}},
      {"IPv6", ipv6_packet(write_only_transport(37, 0x11, 5)), {1, 2, 3, 7}},
  };
  for (const Case &c : cases) {
    SECTION(c.name) {
      const RocePacket &base = c.packet;
      const uint32_t icrc = base.icrc();
      auto is_masked_ip = [&](size_t i) {
        return std::find(c.masked_ip.begin(), c.masked_ip.end(), i) != c.masked_ip.end();
      };
      for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
        for (size_t i = 0; i < base.ip.size(); i++) {
          RocePacket p = base;
          p.ip[i] ^= flip;
          bool masked = is_masked_ip(i) || (i == 0 && base.ip.size() == 40 && flip == 0x01);
          INFO("IP byte " << i << " ^ " << int(flip));
          if (i == 0 && base.ip.size() == 40 && flip != 0x01) continue;  // version nibble: n/a
          if (masked) {
            CHECK(p.icrc() == icrc);
          } else {
            CHECK(p.icrc() != icrc);
          }
        }
        for (size_t i = 0; i < base.udp.size(); i++) {
          RocePacket p = base;
          p.udp[i] ^= flip;
          INFO("UDP byte " << i << " ^ " << int(flip));
          if (i >= 6) {
            CHECK(p.icrc() == icrc);  // checksum
          } else {
            CHECK(p.icrc() != icrc);
          }
        }
        for (size_t i = 0; i < base.transport.size(); i++) {
          RocePacket p = base;
          p.transport[i] ^= flip;
          INFO("transport byte " << i << " ^ " << int(flip));
          if (i == 4) {
            CHECK(p.icrc() == icrc);  // FECN, BECN, reserved
          } else {
            CHECK(p.icrc() != icrc);
          }
        }
      }
      // The named fields, set through the builders rather than by flipping bits.
      RocePacket p = base;
      auto &bth = *reinterpret_cast<Bth *>(p.transport.data());
      bth.b[4] |= 0xc0;  // FECN and BECN
      CHECK(bth.fecn());
      CHECK(bth.becn());
      CHECK(p.icrc() == icrc);
    }
  }
}

TEST_CASE("TTL, TOS, IP and UDP checksums set through the builders leave the ICRC alone",
          "[icrc]") {
  Bytes transport = write_only_transport(64, 0x42, 0xfffffe);
  uint16_t udp_len = uint16_t(kUdpHeaderBytes + transport.size() + kIcrcBytes);
  Bytes src = gid_v4(192, 168, 1, 1), dst = gid_v4(192, 168, 1, 2);
  auto icrc = [&](uint8_t tos, uint8_t ttl, uint16_t udp_checksum) {
    uint8_t ip[20], udp[8];
    build_ipv4(ip, src.data(), dst.data(), udp_len, tos, ttl, 7, true);
    build_udp(udp, 0xc000, kRoceUdpPort, udp_len, udp_checksum);
    struct iovec t = {transport.data(), transport.size()};
    return roce_icrc(ip, sizeof(ip), udp, &t, 1);
  };
  const uint32_t base = icrc(0, 64, 0);
  CHECK(icrc(0x03, 64, 0) == base);  // ECN CE
  CHECK(icrc(0xb8, 1, 0) == base);   // DSCP EF, last hop
  CHECK(icrc(0, 255, 0xbeef) == base);
  Bytes v6src = gid_v6(1), v6dst = gid_v6(2);
  auto icrc6 = [&](uint8_t traffic_class, uint32_t flow_label, uint8_t hop_limit) {
    uint8_t ip[40], udp[8];
    build_ipv6(ip, v6src.data(), v6dst.data(), udp_len, traffic_class, flow_label, hop_limit);
    build_udp(udp, 0xc000, kRoceUdpPort, udp_len, 0x1111);
    struct iovec t = {transport.data(), transport.size()};
    return roce_icrc(ip, sizeof(ip), udp, &t, 1);
  };
  const uint32_t base6 = icrc6(0, 0, 64);
  CHECK(icrc6(0x03, 0xfffff, 1) == base6);
  CHECK(icrc6(0xff, 0x12345, 255) == base6);
}

TEST_CASE("the ICRC does not depend on how the transport bytes are split", "[icrc]") {
  std::mt19937 rng(4791);
  for (size_t payload : {0, 1, 3, 16, 61, 256, 1024}) {
    for (const RocePacket &p : {ipv4_packet(write_only_transport(payload, 0x11, 5)),
                                ipv6_packet(write_only_transport(payload, 0x11, 5))}) {
      const uint32_t whole = p.icrc();
      for (int i = 0; i < 200; i++) {
        INFO("payload " << payload << ", split " << i);
        REQUIRE(icrc_split(p, rng) == whole);
      }
      // One byte per iovec: the BTH spread over twelve of them.
      std::vector<struct iovec> bytes;
      Bytes copy = p.transport;
      for (uint8_t &b : copy) bytes.push_back({&b, 1});
      CHECK(roce_icrc(p.ip.data(), p.ip.size(), p.udp.data(), bytes.data(), bytes.size()) == whole);
    }
  }
}

TEST_CASE("an IPv4 header with options is covered whole", "[icrc]") {
  RocePacket p = ipv4_packet(write_only_transport(100, 0x11, 5));
  p.ip[0] = 0x46;                                     // five words and one of options
  p.ip.insert(p.ip.end(), {0x94, 0x04, 0x00, 0x00});  // router alert
  const uint32_t with_options = p.icrc();
  CHECK(with_options == reference_icrc(p));
  p.ip[21] ^= 0x01;
  CHECK(p.icrc() != with_options);
  CHECK(p.icrc() == reference_icrc(p));
}

TEST_CASE("the ICRC matches a one-call reference over the masked bytes", "[icrc]") {
  std::mt19937 rng(17);
  for (size_t payload : {0, 4, 13, 100, 1024, 4096}) {
    RocePacket v6 = ipv6_packet(write_only_transport(payload, rng() & kQpnMask, rng()));
    // Random values in the masked fields too: the reference masks them its own way.
    uint32_t tc_fl = rng();
    v6.ip[0] = uint8_t(0x60 | (tc_fl & 0x0f));
    v6.ip[1] = uint8_t(tc_fl >> 8);
    v6.ip[7] = uint8_t(rng());
    v6.transport[4] = uint8_t(rng());
    INFO("IPv6, payload " << payload);
    CHECK(v6.icrc() == reference_icrc(v6));
    RocePacket v4 = ipv4_packet(write_only_transport(payload, rng() & kQpnMask, rng()));
    INFO("IPv4, payload " << payload);
    CHECK(v4.icrc() == reference_icrc(v4));
  }
}

// ---- The IPv4 ID solved for from the ICRC (what the udp port does: it sees no IP header) ----

namespace {

// Every opcode class's packet shape at a payload size: RC WRITE only (BTH, RETH), UC SEND only
// with immediate (BTH, ImmDt), UD SEND only (BTH, DETH).
Bytes class_transport(int kind, size_t payload_len, uint32_t seed) {
  std::mt19937 rng(seed);
  if (kind == 0) return write_only_transport(payload_len, rng() & kQpnMask, rng());
  uint8_t pad = uint8_t((4 - payload_len % 4) % 4);
  size_t ext = kind == 1 ? ImmDt::kSize : Deth::kSize;
  Bytes t(Bth::kSize + ext + payload_len + pad);
  auto &bth = *reinterpret_cast<Bth *>(t.data());
  uint8_t op = kind == 1 ? make_opcode(kUc, kSendOnlyImm) : make_opcode(kUd, kSendOnly);
  bth.set(op, false, pad, kDefaultPkey, rng() & kQpnMask, false, rng());
  for (size_t i = Bth::kSize; i < t.size() - pad; i++) t[i] = uint8_t(rng());
  return t;
}

// The udp port's view: the IPv4 header it builds itself with ID 0, the ICRC the sender
// computed with its real ID.
struct UnseenIdCheck {
  RocePacket guess;  // ID 0
  Bytes received;    // BTH through ICRC, as it arrived

  std::optional<uint16_t> solve() const {
    size_t covered = received.size() - kIcrcBytes;
    struct iovec t = {const_cast<uint8_t *>(received.data()), covered};
    uint32_t with_guess = roce_icrc(guess.ip.data(), guess.ip.size(), guess.udp.data(), &t, 1);
    return solve_ipv4_id(with_guess, 0, load_icrc(received.data() + covered),
                         ipv4_bytes_after_id(received.size()));
  }
};

UnseenIdCheck sent_with_id(Bytes transport, uint16_t id) {
  RocePacket sent = ipv4_packet(std::move(transport));
  store_be16(sent.ip.data() + 4, id);
  UnseenIdCheck c{sent, sent.udp_payload_with_icrc()};
  store_be16(c.guess.ip.data() + 4, 0);
  return c;
}

}  // namespace

TEST_CASE("solve_ipv4_id finds every one of the 65,536 IDs", "[icrc]") {
  for (size_t payload : {0, 1024, 4096}) {
    for (int kind = 0; kind < 3; kind++) {
      Bytes transport = class_transport(kind, payload, uint32_t(payload + kind));
      for (uint32_t id = 0; id <= 0xffff; id++) {
        INFO("class " << kind << ", payload " << payload << ", ID " << id);
        REQUIRE(sent_with_id(transport, uint16_t(id)).solve() == std::optional<uint16_t>(id));
      }
    }
  }
}

TEST_CASE("solve_ipv4_id at payload sizes 0..4096 with random IDs", "[icrc]") {
  std::mt19937 rng(25570);
  for (size_t payload = 0; payload <= 4096; payload += 1 + payload / 3) {
    for (int kind = 0; kind < 3; kind++) {
      uint16_t id = uint16_t(rng());
      INFO("class " << kind << ", payload " << payload << ", ID " << id);
      CHECK(sent_with_id(class_transport(kind, payload, rng()), id).solve() == id);
    }
  }
  // A guess that is right keeps the full check; one that is wrong is corrected.
  RocePacket sent = ipv4_packet(write_only_transport(100, 0x11, 5));
  store_be16(sent.ip.data() + 4, 0x1234);
  struct iovec t = {sent.transport.data(), sent.transport.size()};
  uint32_t icrc = roce_icrc(sent.ip.data(), sent.ip.size(), sent.udp.data(), &t, 1);
  size_t after = ipv4_bytes_after_id(sent.transport.size() + kIcrcBytes);
  CHECK(solve_ipv4_id(icrc, 0x1234, icrc, after) == 0x1234);
  CHECK(solve_ipv4_id(icrc, 0x1234, icrc ^ 1, after) == std::nullopt);
  // A length past the table's (no RoCE packet is that long) is solved the slow way.
  CHECK(sent_with_id(write_only_transport(12000, 0x11, 5), 0xbeef).solve() == 0xbeef);
}

// A flip at distance j bits after the ID passes only if x^-j mod P has degree below 16: the
// first such j is 214,135 (26 KiB), far past any RoCE packet. Flipping every bit of the
// largest packet covers every distance a smaller one has.
TEST_CASE("solve_ipv4_id drops every packet with a single bit flipped", "[icrc]") {
  for (size_t payload : {0, 1, 61, 1024, 4096}) {
    for (int kind = 0; kind < 3; kind++) {
      if (payload == 4096 && kind) continue;  // the largest once: distances are what matter
      UnseenIdCheck c = sent_with_id(class_transport(kind, payload, 7), 25570);
      REQUIRE(c.solve() == 25570);
      size_t passed = 0;
      for (size_t bit = 0; bit < 8 * c.received.size(); bit++) {
        if (bit / 8 == 4) continue;  // BTH byte 4 (FECN, BECN): not covered, by the rules
        UnseenIdCheck bad = c;
        bad.received[bit / 8] ^= uint8_t(1 << (bit % 8));
        if (bad.solve()) {
          passed++;
          UNSCOPED_INFO("class " << kind << ", payload " << payload << ": bit " << bit);
        }
      }
      CHECK(passed == 0);
    }
  }
}

// The headers the receiver rebuilds must be the sender's: a bit of the IPv4 or UDP header
// that differs (an address, a port, a length, the flags) is not taken for an ID change. The
// fields the ICRC masks (TOS, TTL, checksums) may differ; the ID is what is solved for.
TEST_CASE("solve_ipv4_id drops a packet whose IPv4 or UDP header differs in any bit", "[icrc]") {
  for (size_t payload : {0, 100, 4096}) {
    const UnseenIdCheck good = sent_with_id(write_only_transport(payload, 0x11, 5), 4242);
    REQUIRE(good.solve() == 4242);
    const std::vector<size_t> masked_or_id = {1, 4, 5, 8, 10, 11};
    for (size_t bit = 0; bit < 8 * (kIpv4HeaderBytes + kUdpHeaderBytes); bit++) {
      const size_t byte = bit / 8;
      if (byte < kIpv4HeaderBytes) {
        if (std::find(masked_or_id.begin(), masked_or_id.end(), byte) != masked_or_id.end())
          continue;
      } else if (byte >= kIpv4HeaderBytes + 6) {
        continue;  // UDP checksum: masked
      }
      UnseenIdCheck bad = good;  // the receiver's view differs from what was sent in one bit
      Bytes &header = byte < kIpv4HeaderBytes ? bad.guess.ip : bad.guess.udp;
      header[byte < kIpv4HeaderBytes ? byte : byte - kIpv4HeaderBytes] ^= uint8_t(1 << (bit % 8));
      INFO("payload " << payload << ", header bit " << bit);
      CHECK(bad.solve() == std::nullopt);
    }
  }
}
