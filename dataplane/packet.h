// A RoCE packet inside vrnicd: transport headers built in place, payload referenced where it
// lies (registered memory) or, when it cannot be referenced, copied into the packet's own
// bounce buffer. Packets come from a fixed pool: nothing is allocated on the fast path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "opcode.h"
#include "vrnic/wire.h"

namespace vrnic {

inline constexpr size_t kMaxTransportHeader = 64;  // BTH + the largest extension set (48)
inline constexpr size_t kMaxPayload = 4096;        // the largest path MTU
// A packet's own buffer holds a whole UDP payload as received from a wire port (headers,
// payload, pad, ICRC) or a copied payload to send.
inline constexpr size_t kPacketBufferBytes = kMaxPayload + 256;

// What a wire port needs per packet while the kernel or a NIC owns it (a send in flight,
// a receive posted): kept in the packet so that nothing is allocated per packet.
struct WireScratch {
  alignas(8) uint8_t storage[192];
};

struct Packet {
  // Addressing: source and destination GIDs (RoCEv2: IPv4-mapped or IPv6 addresses).
  uint8_t src_gid[16];
  uint8_t dst_gid[16];
  uint16_t udp_sport;

  uint8_t header_len;
  alignas(8) uint8_t header[kMaxTransportHeader];
  const uint8_t *payload;  // header_len bytes of header, then payload_len bytes here
  uint32_t payload_len;    // without pad
  uint8_t *bounce;         // kPacketBufferBytes owned by this packet
  WireScratch wire;        // the port's, while it owns the packet
  // A received packet whose bytes stay in a port's buffer (a DPDK mbuf) until it is freed:
  // the pool calls release first. nullptr for packets that hold nothing.
  void (*release)(Packet *) = nullptr;
  void *release_arg = nullptr;
  uint8_t home = 0;  // the worker whose pool it belongs to (packets may visit another)
  // 1 + the pool's epoch parity when the transport built it (it may reference client memory
  // or a WQE until freed), 0 for a packet a port received into its own buffer.
  uint8_t epoch = 0;
  // The QP that sent it, when vrnicd knows (kUnknownSource from a wire): on the loop port
  // every local session shares one source address, so isolation between users rests on this
  // (issue 17, row 2).
  static constexpr uint32_t kUnknownSource = ~0u;
  uint32_t src_qpn = kUnknownSource;

  // Takes a received UDP payload (BTH through ICRC, len bytes): copies the transport headers
  // and points payload at the bytes after them. False, with nothing changed, when it is not
  // shaped like a RoCE packet (unknown opcode, transport version, too short for its headers,
  // pad and ICRC). The ICRC itself is the port's to check.
  bool parse(const uint8_t *udp_payload, uint32_t len);
  // For a wire port about to send: the pad to a 4-byte multiple, written into the BTH's pad
  // count (the transport leaves it to the port); returns it (0..3).
  uint8_t set_pad() {
    uint8_t pad = uint8_t(-payload_len & 3);
    header[1] = uint8_t((header[1] & ~0x30) | pad << 4);
    return pad;
  }

  const wire::Bth &bth() const { return *reinterpret_cast<const wire::Bth *>(header); }
  wire::Bth &bth() { return *reinterpret_cast<wire::Bth *>(header); }
  const OpcodeInfo &info() const { return opcode_info(header[0]); }
  template <typename H>
  H &ext(uint8_t offset) {
    return *reinterpret_cast<H *>(header + offset);
  }
  template <typename H>
  const H &ext(uint8_t offset) const {
    return *reinterpret_cast<const H *>(header + offset);
  }
};

// One thread's packets (its worker's): taken and given back on that thread only.
//
// The packets the transport builds are counted by epoch, so that the control plane can know
// when none built before a given moment is still in flight (a grace period, Worker::
// pass_quiescent_point): such a packet may point into a registered region or a send queue's
// inline data, which must not be unmapped under it. Two epochs suffice: a new one starts only
// once the one before it has no packet left.
class PacketPool {
 public:
  explicit PacketPool(size_t count, uint8_t home = 0);
  Packet *alloc() {
    if (free_.empty()) return nullptr;
    Packet *p = free_.back();
    free_.pop_back();
    p->src_qpn = Packet::kUnknownSource;
    return p;
  }
  // A packet of the transport's, counted in the current epoch until freed.
  Packet *alloc_counted() {
    Packet *p = alloc();
    if (p) {
      p->epoch = uint8_t(1 + epoch_);
      counted_[epoch_]++;
    }
    return p;
  }
  void free(Packet *p) {
    if (p->release) {
      void (*release)(Packet *) = p->release;
      p->release = nullptr;
      release(p);
    }
    settled(p);
    free_.push_back(p);
  }
  // The packet now holds nothing outside itself (its payload copied into its own buffer): it
  // no longer holds up a grace period, however long a port keeps it (waiting for a peer's
  // address, say).
  void settled(Packet *p) {
    if (p->epoch) {
      counted_[p->epoch - 1]--;
      p->epoch = 0;
    }
  }
  size_t available() const { return free_.size(); }
  // Packets built from now on count in a new epoch.
  void new_epoch() { epoch_ ^= 1; }
  // Whether every packet built before the last new_epoch() is back.
  bool previous_epoch_done() const { return counted_[epoch_ ^ 1] == 0; }

 private:
  uint8_t epoch_ = 0;
  uint32_t counted_[2] = {0, 0};
  std::unique_ptr<Packet[]> packets_;
  std::unique_ptr<uint8_t[]> bounce_;
  std::vector<Packet *> free_;
};

}  // namespace vrnic
