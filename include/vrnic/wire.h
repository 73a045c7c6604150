// RoCEv2 transport headers as they are on the wire (InfiniBand spec vol. 1, ch. 9; RoCEv2
// annex A17). All multi-byte fields are big-endian. These structs are byte arrays with
// accessors so that they can sit at any offset in a packet buffer without alignment or
// strict-aliasing trouble. This is the only definition of the wire headers in vrnic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vrnic::wire {

inline constexpr uint16_t kRoceUdpPort = 4791;
inline constexpr uint16_t kDefaultPkey = 0xffff;
inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr uint32_t kQpnMask = 0xffffff;
inline constexpr size_t kIcrcBytes = 4;

// Whole-word loads and stores (memcpy and a byte swap): a header built with byte stores and
// read back at once in wider words (a checksum, the ICRC) makes each read wait for the stores
// to drain instead of taking its value from them.
inline uint16_t load_be16(const uint8_t *p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return __builtin_bswap16(v);
}
inline uint32_t load_be24(const uint8_t *p) {
  return uint32_t(p[0]) << 16 | p[1] << 8 | p[2];
}
inline uint32_t load_be32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
inline uint64_t load_be64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}
inline void store_be16(uint8_t *p, uint16_t v) {
  v = __builtin_bswap16(v);
  std::memcpy(p, &v, 2);
}
inline void store_be24(uint8_t *p, uint32_t v) {
  p[0] = uint8_t(v >> 16);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v);
}
inline void store_be32(uint8_t *p, uint32_t v) {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline void store_be64(uint8_t *p, uint64_t v) {
  v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}

// PSNs are 24-bit sequence numbers compared in a window of 2^23 (IB spec 9.7.2).
inline uint32_t psn_add(uint32_t psn, uint32_t n) {
  return (psn + n) & kPsnMask;
}
inline int32_t psn_diff(uint32_t a, uint32_t b) {
  return int32_t((a - b) << 8) >> 8;  // sign-extend the 24-bit difference
}

// Base Transport Header, 12 bytes.
struct Bth {
  uint8_t b[12];
  static constexpr size_t kSize = 12;

  uint8_t opcode() const { return b[0]; }
  bool solicited() const { return b[1] & 0x80; }
  bool mig_req() const { return b[1] & 0x40; }
  uint8_t pad_count() const { return (b[1] >> 4) & 3; }
  uint8_t tver() const { return b[1] & 0xf; }
  uint16_t pkey() const { return load_be16(b + 2); }
  bool fecn() const { return b[4] & 0x80; }
  bool becn() const { return b[4] & 0x40; }
  uint32_t dest_qp() const { return load_be24(b + 5); }
  bool ack_req() const { return b[8] & 0x80; }
  uint32_t psn() const { return load_be24(b + 9); }

  void set_dest_qp(uint32_t qpn) { store_be24(b + 5, qpn & kQpnMask); }
  void set(uint8_t opcode, bool solicited, uint8_t pad, uint16_t pkey, uint32_t dest_qp,
           bool ack_req, uint32_t psn) {
    b[0] = opcode;
    b[1] = uint8_t((solicited ? 0x80 : 0) | 0x40 /* MigReq: no APM, always 1 */ | (pad & 3) << 4);
    store_be16(b + 2, pkey);
    b[4] = 0;
    store_be24(b + 5, dest_qp & kQpnMask);
    b[8] = ack_req ? 0x80 : 0;
    store_be24(b + 9, psn & kPsnMask);
  }
};

// RDMA Extended Transport Header, 16 bytes.
struct Reth {
  uint8_t b[16];
  static constexpr size_t kSize = 16;
  uint64_t va() const { return load_be64(b); }
  uint32_t rkey() const { return load_be32(b + 8); }
  uint32_t dma_len() const { return load_be32(b + 12); }
  void set(uint64_t va, uint32_t rkey, uint32_t len) {
    store_be64(b, va);
    store_be32(b + 8, rkey);
    store_be32(b + 12, len);
  }
};

// Atomic Extended Transport Header, 28 bytes.
struct AtomicEth {
  uint8_t b[28];
  static constexpr size_t kSize = 28;
  uint64_t va() const { return load_be64(b); }
  uint32_t rkey() const { return load_be32(b + 8); }
  uint64_t swap_add() const { return load_be64(b + 12); }
  uint64_t compare() const { return load_be64(b + 20); }
  void set(uint64_t va, uint32_t rkey, uint64_t swap_add, uint64_t compare) {
    store_be64(b, va);
    store_be32(b + 8, rkey);
    store_be64(b + 12, swap_add);
    store_be64(b + 20, compare);
  }
};

// ACK Extended Transport Header, 4 bytes.
struct Aeth {
  uint8_t b[4];
  static constexpr size_t kSize = 4;
  uint8_t syndrome() const { return b[0]; }
  uint32_t msn() const { return load_be24(b + 1); }
  void set(uint8_t syndrome, uint32_t msn) {
    b[0] = syndrome;
    store_be24(b + 1, msn);
  }
};

// What a vrnic responder that holds out-of-order packets says with a sequence NAK, as its
// payload, to a requester it has agreed selective repeat with (vrnicd --selective-repeat):
// which PSNs after the NAK's it already holds, so that the requester sends again only the
// missing ones. Not a RoCE header: peers that did not agree never get one, and a packet whose
// payload does not start with the magic word is an ordinary NAK (go back N).
struct Sack {
  static constexpr uint32_t kMagic = 0x56525352;  // "VRSR"
  static constexpr uint32_t kMaxSpan = 511;       // PSNs after the NAK's, one bit each
  static constexpr size_t kSize = 8 + (kMaxSpan + 1) / 8;
  uint8_t b[kSize];
  bool valid() const {
    return load_be32(b) == kMagic && span() <= kMaxSpan && lost_below() <= span();
  }
  // How many PSNs after the NAK's the bitmap covers (the highest held is the last).
  uint32_t span() const { return load_be16(b + 4); }
  // 0, or: a packet this many PSNs after the NAK's just filled a gap while the NAK's PSN was
  // still missing. Resends go out in PSN order, so what is missing below it was sent again and
  // lost again: the requester sends it once more now rather than wait for its repair timer.
  uint32_t lost_below() const { return load_be16(b + 6); }
  // Whether the responder holds the PSN `i` + 1 after the NAK's (i < span()).
  bool held(uint32_t i) const { return b[8 + i / 8] >> (i % 8) & 1; }
  void start(uint32_t span, uint32_t lost_below = 0) {
    std::memset(b, 0, kSize);
    store_be32(b, kMagic);
    store_be16(b + 4, uint16_t(span));
    store_be16(b + 6, uint16_t(lost_below));
  }
  void set_held(uint32_t i) { b[8 + i / 8] |= uint8_t(1u << (i % 8)); }
};

struct AtomicAckEth {
  uint8_t b[8];
  static constexpr size_t kSize = 8;
  uint64_t orig() const { return load_be64(b); }
  void set(uint64_t v) { store_be64(b, v); }
};

struct ImmDt {
  uint8_t b[4];
  static constexpr size_t kSize = 4;
  // Immediate data is opaque: it travels in the byte order the application wrote it, as
  // ibv_send_wr.imm_data is already big-endian (__be32).
  uint32_t raw() const {
    uint32_t v;
    std::memcpy(&v, b, 4);
    return v;
  }
  void set_raw(uint32_t v) { std::memcpy(b, &v, 4); }
};

struct Ieth {
  uint8_t b[4];
  static constexpr size_t kSize = 4;
  uint32_t rkey() const { return load_be32(b); }
  void set(uint32_t rkey) { store_be32(b, rkey); }
};

struct Deth {
  uint8_t b[8];
  static constexpr size_t kSize = 8;
  uint32_t qkey() const { return load_be32(b); }
  uint32_t src_qp() const { return load_be24(b + 5); }
  void set(uint32_t qkey, uint32_t src_qp) {
    store_be32(b, qkey);
    b[4] = 0;
    store_be24(b + 5, src_qp);
  }
};

// XRC Extended Transport Header (IB spec 14.6.3.1): the shared receive queue of the target's
// XRC domain a request is for. In every XRC request packet, right after the BTH.
struct Xrceth {
  uint8_t b[4];
  static constexpr size_t kSize = 4;
  uint32_t srqn() const { return load_be24(b + 1); }
  void set(uint32_t srqn) {
    b[0] = 0;
    store_be24(b + 1, srqn);
  }
};

// Opcodes: transport base | operation (IB spec table 38).
enum Transport : uint8_t {
  kRc = 0x00,
  kUc = 0x20,
  kRd = 0x40,
  kUd = 0x60,
  kCnp = 0x80,
  kXrc = 0xa0,
};

enum Opcode : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0a,
  kWriteOnlyImm = 0x0b,
  kReadRequest = 0x0c,
  kReadResponseFirst = 0x0d,
  kReadResponseMiddle = 0x0e,
  kReadResponseLast = 0x0f,
  kReadResponseOnly = 0x10,
  kAcknowledge = 0x11,
  kAtomicAcknowledge = 0x12,
  kCompareSwap = 0x13,
  kFetchAdd = 0x14,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
  kAtomicWrite = 0x1d,  // IBTA 1.5: RETH and 8 bytes, answered by an empty READ RESPONSE ONLY
};

inline constexpr uint8_t make_opcode(Transport t, Opcode op) {
  return uint8_t(uint8_t(t) | uint8_t(op));
}
inline constexpr uint8_t op_transport(uint8_t opcode) {
  return opcode & 0xe0;
}
inline constexpr uint8_t op_operation(uint8_t opcode) {
  return opcode & 0x1f;
}

// AETH syndromes (IB spec 9.7.5.1).
enum AethKind : uint8_t { kAethAck = 0x00, kAethRnrNak = 0x20, kAethNak = 0x60 };
enum NakCode : uint8_t {
  kNakPsnSeqError = 0x60,
  kNakInvalidRequest = 0x61,
  kNakRemoteAccess = 0x62,
  kNakRemoteOperational = 0x63,
  kNakInvalidRdRequest = 0x64,
};
inline constexpr uint8_t kAethCreditsInvalid = 0x1f;
inline constexpr uint8_t aeth_kind(uint8_t syndrome) {
  return syndrome & 0x60;
}

}  // namespace vrnic::wire
