// A packet capture's rings (vrnicctl capture): memory vrnicd shares with the capturing
// vrnicctl, one ring per worker, each written by its worker alone and read by vrnicctl alone.
// A record is a whole Ethernet frame as the packet would be on a wire (RoCEv2 in UDP in IP in
// Ethernet, ICRC included), so that the reader only timestamps and writes it out.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vrnic::capture {

inline constexpr uint32_t kRingBytes = 32u << 20;  // per worker: a power of two
inline constexpr uint32_t kRecordAlign = 8;
// Past the end of a record that would not fit before the ring's end: the rest is skipped.
inline constexpr uint32_t kWrapMarker = 0xffffffffu;

struct RingHeader {
  // Bytes written and bytes read, since the start (never wrapped: offsets are taken modulo
  // kRingBytes). The worker writes head; the reader writes tail, which the worker trusts no
  // further than to bound what it overwrites.
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
  // Frames the worker could not write because the ring was full (the reader is behind): a
  // capture that cannot keep up loses frames, never slows the traffic.
  alignas(64) std::atomic<uint64_t> dropped;
  std::atomic<uint64_t> written;  // frames
};

struct RecordHeader {
  uint32_t frame_len;  // bytes of frame after this header (kWrapMarker: go to the start)
  uint8_t received;    // 1: received from the wire, 0: sent
  uint8_t reserved[3];
  uint64_t time_ns;  // CLOCK_REALTIME
};

inline constexpr size_t kRingStride = sizeof(RingHeader) + kRingBytes;
inline constexpr size_t region_bytes(uint32_t workers) { return kRingStride * workers; }
inline RingHeader *ring_header(void *region, uint32_t worker) {
  return reinterpret_cast<RingHeader *>(static_cast<uint8_t *>(region) + kRingStride * worker);
}
inline uint8_t *ring_data(void *region, uint32_t worker) {
  return reinterpret_cast<uint8_t *>(ring_header(region, worker) + 1);
}
inline uint32_t record_bytes(uint32_t frame_len) {
  return uint32_t((sizeof(RecordHeader) + frame_len + kRecordAlign - 1) & ~size_t(kRecordAlign - 1));
}

}  // namespace vrnic::capture
