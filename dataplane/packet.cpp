// The packet pool and the parsing of a received RoCE packet (packet.h).
#include "packet.h"

#include <cstring>

namespace vrnic {

PacketPool::PacketPool(size_t count, uint8_t home)
    : packets_(new Packet[count]), bounce_(new uint8_t[count * kPacketBufferBytes]) {
  free_.reserve(count);
  for (size_t i = 0; i < count; i++) {
    packets_[i].bounce = bounce_.get() + i * kPacketBufferBytes;
    packets_[i].home = home;
    free_.push_back(&packets_[count - 1 - i]);
  }
}

bool Packet::parse(const uint8_t *frame, uint32_t len) {
  if (len < wire::Bth::kSize + wire::kIcrcBytes) return false;
  const OpcodeInfo &op = opcode_info(frame[0]);
  uint8_t pad = (frame[1] >> 4) & 3;
  if (!(op.flags & kOpValid) || (frame[1] & 0x0f) != 0 /* TVer */ ||
      len < uint32_t(op.header_bytes + pad + wire::kIcrcBytes))
    return false;
  header_len = op.header_bytes;
  // A fixed-size copy is a few vector moves; a variable one is a slow string instruction.
  if (len >= kMaxTransportHeader) {
    std::memcpy(header, frame, kMaxTransportHeader);
  } else {
    std::memcpy(header, frame, op.header_bytes);
  }
  payload = frame + op.header_bytes;
  payload_len = len - op.header_bytes - pad - wire::kIcrcBytes;
  return true;
}

}  // namespace vrnic
