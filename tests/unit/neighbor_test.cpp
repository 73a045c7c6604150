// ARP frames and the neighbour table the dpdk port resolves peers' Ethernet addresses with.
#include <catch2/catch.hpp>
#include <cstring>

#include "dataplane/ethernet.h"
#include "dataplane/neighbor_table.h"

using vrnic::ArpMessage;
using vrnic::MacAddress;
using vrnic::NeighborTable;

namespace {

constexpr uint64_t kMs = 1'000'000;
const MacAddress kMacA{{0x02, 0, 0, 0, 0, 0x0a}};
const MacAddress kMacB{{0x02, 0, 0, 0, 0, 0x0b}};

uint32_t ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  const uint8_t bytes[4] = {a, b, c, d};
  uint32_t v;
  std::memcpy(&v, bytes, 4);
  return v;
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
