// ARP and IPv6 neighbour-discovery frames, and the neighbour table the dpdk port resolves peers'
// Ethernet addresses with.
#include <arpa/inet.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "dataplane/ethernet.h"
#include "dataplane/ip_header.h"
#include "dataplane/neighbor_discovery.h"
#include "dataplane/neighbor_table.h"

using vrnic::ArpMessage;
using vrnic::IpKey;
using vrnic::MacAddress;
using vrnic::NeighborTable;

namespace {

constexpr uint64_t kMs = 1'000'000;
const MacAddress kMacA{{0x02, 0, 0, 0, 0, 0x0a}};
const MacAddress kMacB{{0x02, 0, 0, 0, 0, 0x0b}};

IpKey ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
  return vrnic::ip_key(gid);
}

}  // namespace

TEST_CASE("An ARP request is a broadcast 60-byte frame that parses back", "[arp]") {
  ArpMessage m{ArpMessage::kRequest, kMacA, {10, 0, 0, 1}, MacAddress{}, {10, 0, 0, 2}};
  uint8_t frame[64];
  REQUIRE(vrnic::build_arp_frame(frame, m) == vrnic::kEthMinFrame);
  CHECK(std::memcmp(frame, vrnic::kBroadcastMac.bytes, 6) == 0);
  CHECK(std::memcmp(frame + 6, kMacA.bytes, 6) == 0);
  CHECK(frame[12] == 0x08);
  CHECK(frame[13] == 0x06);
  // RFC 826 fixed fields: Ethernet (1), IPv4 (0x0800), lengths 6 and 4, opcode 1.
  const uint8_t fixed[8] = {0, 1, 8, 0, 6, 4, 0, 1};
  CHECK(std::memcmp(frame + 14, fixed, 8) == 0);
  ArpMessage back;
  REQUIRE(vrnic::parse_arp_frame(frame, vrnic::kEthMinFrame, &back));
  CHECK(back.op == ArpMessage::kRequest);
  CHECK(back.sender_mac == kMacA);
  CHECK(std::memcmp(back.target_ip, m.target_ip, 4) == 0);
}

TEST_CASE("An ARP reply goes to its target", "[arp]") {
  ArpMessage m{ArpMessage::kReply, kMacA, {10, 0, 0, 1}, kMacB, {10, 0, 0, 2}};
  uint8_t frame[64];
  vrnic::build_arp_frame(frame, m);
  CHECK(std::memcmp(frame, kMacB.bytes, 6) == 0);
  ArpMessage back;
  REQUIRE(vrnic::parse_arp_frame(frame, 60, &back));
  CHECK(back.op == ArpMessage::kReply);
  CHECK(back.target_mac == kMacB);
}

TEST_CASE("Frames that are not IPv4-over-Ethernet ARP are refused", "[arp]") {
  ArpMessage m{ArpMessage::kRequest, kMacA, {10, 0, 0, 1}, MacAddress{}, {10, 0, 0, 2}};
  uint8_t frame[64];
  vrnic::build_arp_frame(frame, m);
  ArpMessage out;
  CHECK_FALSE(vrnic::parse_arp_frame(frame, 41, &out));  // truncated
  uint8_t bad[64];
  std::memcpy(bad, frame, 64);
  bad[13] = 0x00;  // ethertype IPv4
  CHECK_FALSE(vrnic::parse_arp_frame(bad, 60, &out));
  std::memcpy(bad, frame, 64);
  bad[14 + 5] = 16;  // protocol address length of IPv6
  CHECK_FALSE(vrnic::parse_arp_frame(bad, 60, &out));
  std::memcpy(bad, frame, 64);
  bad[14 + 7] = 3;  // RARP request
  CHECK_FALSE(vrnic::parse_arp_frame(bad, 60, &out));
}

TEST_CASE("NeighborTable: unknown peer is resolving, asked once per retry interval", "[arp]") {
  NeighborTable t;
  NeighborTable::Answer a = t.lookup(ip(10, 0, 0, 2), 0);
  CHECK(a.state == NeighborTable::State::kResolving);
  CHECK(a.mac == nullptr);
  CHECK(a.send_request);
  CHECK_FALSE(t.lookup(ip(10, 0, 0, 2), 50 * kMs).send_request);
  CHECK(t.lookup(ip(10, 0, 0, 2), 100 * kMs).send_request);
}

TEST_CASE("NeighborTable: an answer makes the peer reachable; later stale, still used", "[arp]") {
  NeighborTable::Timing timing;
  NeighborTable t(timing);
  t.lookup(ip(10, 0, 0, 2), 0);
  t.learn(ip(10, 0, 0, 2), kMacB, 5 * kMs);
  NeighborTable::Answer a = t.lookup(ip(10, 0, 0, 2), 6 * kMs);
  CHECK(a.state == NeighborTable::State::kReachable);
  REQUIRE(a.mac != nullptr);
  CHECK(*a.mac == kMacB);
  CHECK_FALSE(a.send_request);
  a = t.lookup(ip(10, 0, 0, 2), 5 * kMs + timing.reachable_ns);
  CHECK(a.state == NeighborTable::State::kStale);
  REQUIRE(a.mac != nullptr);
  CHECK(a.send_request);  // re-confirmed in the background
}

TEST_CASE("NeighborTable: a peer that never answers fails, and recovers when it does", "[arp]") {
  NeighborTable::Timing timing;
  NeighborTable t(timing);
  uint64_t now = 0;
  for (; now < timing.fail_ns; now += timing.retry_ns)
    CHECK(t.lookup(ip(10, 0, 0, 9), now).state == NeighborTable::State::kResolving);
  NeighborTable::Answer a = t.lookup(ip(10, 0, 0, 9), now);
  CHECK(a.state == NeighborTable::State::kFailed);
  CHECK(a.mac == nullptr);
  t.learn(ip(10, 0, 0, 9), kMacA, now + 1);
  CHECK(t.lookup(ip(10, 0, 0, 9), now + 2).state == NeighborTable::State::kReachable);
}

TEST_CASE("NeighborTable: a stale peer that stops answering is forgotten", "[arp]") {
  NeighborTable::Timing timing;
  NeighborTable t(timing);
  t.learn(ip(10, 0, 0, 3), kMacA, 0);
  uint64_t now = timing.reachable_ns;
  CHECK(t.lookup(ip(10, 0, 0, 3), now).state == NeighborTable::State::kStale);
  now += timing.fail_ns;
  CHECK(t.lookup(ip(10, 0, 0, 3), now).state == NeighborTable::State::kFailed);
  CHECK(t.lookup(ip(10, 0, 0, 3), now + 1).mac == nullptr);
}

TEST_CASE(
    "NeighborTable: a peer primed ahead of traffic is asked once; its fail time starts with the "
    "traffic",
    "[arp]") {
  NeighborTable::Timing timing;
  NeighborTable t(timing);
  CHECK(t.prime(ip(10, 0, 0, 5), 0));
  CHECK_FALSE(t.prime(ip(10, 0, 0, 5), 50 * kMs));  // asked already
  // Traffic soon after: the request is out, nothing more to send; the packets wait.
  NeighborTable::Answer a = t.lookup(ip(10, 0, 0, 5), 60 * kMs);
  CHECK(a.state == NeighborTable::State::kResolving);
  CHECK_FALSE(a.send_request);
  // Primed long before traffic, unanswered: the traffic still gets the whole fail time.
  CHECK(t.prime(ip(10, 0, 0, 6), 0));
  uint64_t now = 5 * timing.fail_ns;
  a = t.lookup(ip(10, 0, 0, 6), now);
  CHECK(a.state == NeighborTable::State::kResolving);
  CHECK(a.send_request);
  CHECK(t.lookup(ip(10, 0, 0, 6), now + timing.fail_ns - 1).state ==
        NeighborTable::State::kResolving);
  CHECK(t.lookup(ip(10, 0, 0, 6), now + timing.fail_ns).state == NeighborTable::State::kFailed);
  // Answered: reachable, and priming it again asks nothing.
  t.learn(ip(10, 0, 0, 5), kMacA, 70 * kMs);
  CHECK(t.lookup(ip(10, 0, 0, 5), 71 * kMs).state == NeighborTable::State::kReachable);
  CHECK_FALSE(t.prime(ip(10, 0, 0, 5), 200 * kMs));
  CHECK(t.prime(ip(10, 0, 0, 5), 70 * kMs + timing.reachable_ns));  // stale: confirmed again
}

TEST_CASE("NeighborTable: a flood of peers it never asked about stays bounded", "[arp]") {
  NeighborTable t;
  // Two peers the device sends to, then 100,000 made-up senders of ARP requests to us.
  t.learn(ip(10, 0, 0, 1), kMacA, 0);
  CHECK(t.lookup(ip(10, 0, 0, 1), 1).state == NeighborTable::State::kReachable);
  t.prime(ip(10, 0, 0, 2), 1);
  for (uint32_t i = 0; i < 100'000; i++)
    t.learn(ip(172, uint8_t(16 + (i >> 16)), uint8_t(i >> 8), uint8_t(i)), kMacB, 2 + i);
  CHECK(t.size() == NeighborTable::kMaxUnasked + 2);
  // The peers the device wanted are still there; of the others, the newest.
  NeighborTable::Answer a = t.lookup(ip(10, 0, 0, 1), 200'000);
  CHECK(a.state == NeighborTable::State::kReachable);
  CHECK(*a.mac == kMacA);
  CHECK(t.lookup(ip(172, 17, 0x86, 0x9f), 200'000).state == NeighborTable::State::kReachable);
  CHECK(t.size() == NeighborTable::kMaxUnasked + 2);
  // One the device then asks about is no longer the flood's to push out.
  t.lookup(ip(172, 17, 0x86, 0x9e), 200'001);
  for (uint32_t i = 0; i < 5'000; i++) t.learn(ip(192, 168, uint8_t(i >> 8), uint8_t(i)), kMacB, 300'000);
  CHECK(t.lookup(ip(172, 17, 0x86, 0x9e), 400'000).state == NeighborTable::State::kReachable);
  CHECK(t.size() == NeighborTable::kMaxUnasked + 4);
}

TEST_CASE("NeighborTable: past its size the least recently used quarter goes", "[arp]") {
  NeighborTable t;
  const uint64_t version = t.version();
  for (uint32_t i = 0; i < NeighborTable::kMaxEntries; i++)
    t.prime(ip(10, 1, uint8_t(i >> 8), uint8_t(i)), i);
  CHECK(t.size() == NeighborTable::kMaxEntries);
  t.lookup(ip(10, 1, 0, 0), NeighborTable::kMaxEntries);  // the oldest, used again
  t.prime(ip(10, 2, 0, 0), NeighborTable::kMaxEntries + 1);
  CHECK(t.size() == NeighborTable::kMaxEntries - NeighborTable::kMaxEntries / 4);
  CHECK(t.version() != version);  // senders' copies of what went are no longer trusted
  CHECK_FALSE(t.prime(ip(10, 1, 0, 0), NeighborTable::kMaxEntries + 2));  // kept: asked already
  CHECK(t.prime(ip(10, 1, 0, 1), NeighborTable::kMaxEntries + 2));  // gone: asked anew
}

TEST_CASE("NeighborTable: refresh updates a known peer's address, ignores unknown ones", "[arp]") {
  NeighborTable t;
  CHECK_FALSE(t.refresh(ip(10, 0, 0, 4), kMacA, 1));
  CHECK(t.size() == 0);  // a stranger's broadcast does not fill the table
  t.learn(ip(10, 0, 0, 4), kMacA, 1);
  CHECK(t.refresh(ip(10, 0, 0, 4), kMacB, 2));  // a gratuitous ARP: new MAC
  NeighborTable::Answer a = t.lookup(ip(10, 0, 0, 4), 3);
  REQUIRE(a.mac != nullptr);
  CHECK(*a.mac == kMacB);
}

// ---- IPv6 neighbour discovery (RFC 4861) ----
// Reference frames and checksums from scapy (python3-scapy), built independently of vrnic.
namespace {

std::vector<uint8_t> from_hex(const std::string &hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(uint8_t(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

void v6(const char *text, uint8_t out[16]) {
  REQUIRE(inet_pton(AF_INET6, text, out) == 1);
}

const char *kScapyNs =
    "3333ff00000202000000000a86dd6000000000203afffd000000000000000000000000000001ff02000000000000"
    "00000001ff00000287007d8e00000000fd000000000000000000000000000002010102000000000a";
const char *kScapyNa =
    "02000000000a02000000000b86dd6000000000203afffd000000000000000000000000000002fd00000000000000"
    "000000000000000188001c9160000000fd000000000000000000000000000002020102000000000b";

}  // namespace

TEST_CASE("neighbour discovery: a solicitation and an advertisement as scapy builds them", "[nd]") {
  vrnic::NdMessage ns{};
  ns.type = vrnic::NdMessage::kSolicitation;
  ns.src_mac = kMacA;
  ns.link_address = kMacA;
  ns.has_link_address = true;
  v6("fd00::1", ns.src_ip);
  v6("fd00::2", ns.target);
  vrnic::solicited_node(ns.target, ns.dst_ip);
  uint8_t frame[vrnic::kNdFrameBytes];
  REQUIRE(vrnic::build_nd_frame(frame, ns, vrnic::ipv6_multicast_mac(ns.dst_ip)) ==
          vrnic::kNdFrameBytes);
  CHECK(std::vector<uint8_t>(frame, frame + sizeof(frame)) == from_hex(kScapyNs));

  vrnic::NdMessage na{};
  na.type = vrnic::NdMessage::kAdvertisement;
  na.src_mac = kMacB;
  na.link_address = kMacB;
  na.has_link_address = true;
  na.solicited = na.override_ = true;
  v6("fd00::2", na.src_ip);
  v6("fd00::1", na.dst_ip);
  v6("fd00::2", na.target);
  vrnic::build_nd_frame(frame, na, kMacA);
  CHECK(std::vector<uint8_t>(frame, frame + sizeof(frame)) == from_hex(kScapyNa));

  vrnic::NdMessage got{};
  std::vector<uint8_t> bytes = from_hex(kScapyNa);
  REQUIRE(vrnic::parse_nd_frame(bytes.data(), bytes.size(), &got));
  CHECK(got.type == vrnic::NdMessage::kAdvertisement);
  CHECK(got.solicited);
  CHECK(got.override_);
  CHECK(got.has_link_address);
  CHECK(got.link_address == kMacB);
  CHECK(std::memcmp(got.target, na.target, 16) == 0);
}

TEST_CASE("neighbour discovery: what RFC 4861 7.1 says to drop is dropped", "[nd]") {
  const std::vector<uint8_t> good = from_hex(kScapyNs);
  vrnic::NdMessage m;
  REQUIRE(vrnic::parse_nd_frame(good.data(), good.size(), &m));
  CHECK(m.type == vrnic::NdMessage::kSolicitation);
  auto broken = [&](size_t at, uint8_t value) {
    std::vector<uint8_t> b = good;
    b[at] = value;
    return !vrnic::parse_nd_frame(b.data(), b.size(), &m);
  };
  CHECK(broken(14 + 7, 64));      // hop limit not 255: not from the link
  CHECK(broken(54 + 1, 1));       // ICMPv6 code not 0
  CHECK(broken(54 + 3, 0x8f));    // checksum
  CHECK(broken(54 + 8, 0xff));    // a multicast target (checksum fails first, or this)
  CHECK(broken(54 + 24 + 1, 0));  // an option of length 0
  CHECK(broken(54, 128));         // an echo request, not neighbour discovery
  CHECK_FALSE(vrnic::parse_nd_frame(good.data(), 60, &m));  // cut short
}

TEST_CASE("IPv6 upper-layer checksum: parts of odd length, as scapy computes it", "[nd]") {
  uint8_t src[16], dst[16];
  v6("fd00::1", src);
  v6("fd00::2", dst);
  uint8_t udp[8] = {0xc0, 0x00, 0x12, 0xb7, 0x00, 45, 0, 0};  // 49152 -> 4791, length 45
  uint8_t payload[37];
  for (int i = 0; i < 37; i++) payload[i] = uint8_t(i + 1);
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(20), size_t(37)}) {
    INFO("payload split at " << cut);
    iovec parts[3] = {{udp, 8}, {payload, cut}, {payload + cut, 37 - cut}};
    CHECK(vrnic::ipv6_upper_checksum(src, dst, vrnic::kIpProtocolUdp, parts, 3) == 0xc880);
  }
  udp[6] = 0xc8;
  udp[7] = 0x80;
  iovec whole[2] = {{udp, 8}, {payload, 37}};
  CHECK(vrnic::ipv6_upper_checksum(src, dst, vrnic::kIpProtocolUdp, whole, 2) == 0);
}

TEST_CASE("NeighborCache: answers as the table would, without it, while nothing changed",
          "[arp]") {
  NeighborTable::Timing timing;
  NeighborTable t(timing);
  vrnic::NeighborCache cache;
  const IpKey peer = ip(10, 0, 0, 2);
  // Only a reachable answer is kept.
  cache.keep(peer, t.lookup(peer, 0), t.version());
  CHECK(cache.find(peer, 0, t.version()) == nullptr);
  t.learn(peer, kMacB, 5 * kMs);
  NeighborTable::Answer a = t.lookup(peer, 6 * kMs);
  CHECK(a.fresh_until == 5 * kMs + timing.reachable_ns);
  cache.keep(peer, a, t.version());
  const MacAddress *mac = cache.find(peer, 7 * kMs, t.version());
  REQUIRE(mac != nullptr);
  CHECK(*mac == kMacB);
  // Once the answer is stale the table must be asked (it sends a request then).
  CHECK(cache.find(peer, a.fresh_until, t.version()) == nullptr);
  CHECK(cache.size() == 0);
  // Anything the table learns (a peer that moved to another MAC) voids what was copied.
  cache.keep(peer, t.lookup(peer, 8 * kMs), t.version());
  t.refresh(peer, kMacA, 9 * kMs);
  CHECK(cache.find(peer, 10 * kMs, t.version()) == nullptr);
  cache.keep(peer, t.lookup(peer, 10 * kMs), t.version());
  mac = cache.find(peer, 11 * kMs, t.version());
  REQUIRE(mac != nullptr);
  CHECK(*mac == kMacA);
}
