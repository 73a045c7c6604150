#include "packet.h"

namespace vrnic {

PacketPool::PacketPool(size_t count)
    : packets_(new Packet[count]), bounce_(new uint8_t[count * kPacketBufferBytes]) {
  free_.reserve(count);
  for (size_t i = 0; i < count; i++) {
    packets_[i].bounce = bounce_.get() + i * kPacketBufferBytes;
    free_.push_back(&packets_[count - 1 - i]);
  }
}

}  // namespace vrnic
