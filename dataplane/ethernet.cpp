// Ethernet and ARP frames for ports that build their own (ethernet.h).
#include "ethernet.h"

#include <cstring>

namespace vrnic {
namespace {

void put16(uint8_t *p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
uint16_t get16(const uint8_t *p) {
  return uint16_t(p[0] << 8 | p[1]);
}

// The fixed part of an IPv4-over-Ethernet ARP message: hardware type 1 (Ethernet), protocol
// 0x0800, address lengths 6 and 4.
constexpr uint8_t kArpFixed[6] = {0, 1, 8, 0, 6, 4};

}  // namespace

size_t build_eth(uint8_t *out, const MacAddress &dst, const MacAddress &src, uint16_t ether_type) {
  std::memcpy(out, dst.bytes, 6);
  std::memcpy(out + 6, src.bytes, 6);
  put16(out + 12, ether_type);
  return kEthHeaderBytes;
}

size_t build_arp_frame(uint8_t *out, const ArpMessage &m) {
  std::memset(out, 0, kEthMinFrame);
  build_eth(out, m.op == ArpMessage::kRequest ? kBroadcastMac : m.target_mac, m.sender_mac,
            kEtherTypeArp);
  uint8_t *a = out + kEthHeaderBytes;
  std::memcpy(a, kArpFixed, sizeof(kArpFixed));
  put16(a + 6, m.op);
  std::memcpy(a + 8, m.sender_mac.bytes, 6);
  std::memcpy(a + 14, m.sender_ip, 4);
  std::memcpy(a + 18, m.target_mac.bytes, 6);
  std::memcpy(a + 24, m.target_ip, 4);
  return kEthMinFrame;
}

bool parse_arp_frame(const uint8_t *frame, size_t len, ArpMessage *out) {
  if (len < kArpFrameBytes || get16(frame + 12) != kEtherTypeArp) return false;
  const uint8_t *a = frame + kEthHeaderBytes;
  if (std::memcmp(a, kArpFixed, sizeof(kArpFixed)) != 0) return false;
  uint16_t op = get16(a + 6);
  if (op != ArpMessage::kRequest && op != ArpMessage::kReply) return false;
  out->op = ArpMessage::Op(op);
  std::memcpy(out->sender_mac.bytes, a + 8, 6);
  std::memcpy(out->sender_ip, a + 14, 4);
  std::memcpy(out->target_mac.bytes, a + 18, 6);
  std::memcpy(out->target_ip, a + 24, 4);
  return true;
}

}  // namespace vrnic
