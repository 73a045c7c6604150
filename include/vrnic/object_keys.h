// How vrnicd's QPNs and memory keys are made from table indices: one definition for vrnicd,
// which makes them, and the provider, whose same-host direct path looks its own QPs and
// regions up by them (an array index, never a hash).
#pragma once

#include <cstdint>

namespace vrnic {

inline constexpr uint32_t kQpnBase = 0x10;  // QPN 0 and 1 are special in IB; keep clear
// A QPN is a random tag (bits 18-23) above the QP's table index (+ kQpnBase): looked up as an
// array index, but not guessed from the QPNs one has seen (issue 17, row 2). 18 bits of index:
// the device holds four users' default share of QPs (issue 52, row 8).
inline constexpr uint32_t kQpnIndexBits = 18;
inline constexpr uint32_t kQpnTagMask = (1u << (24 - kQpnIndexBits)) - 1;
inline constexpr uint32_t qpn_index(uint32_t qpn) { return qpn & ((1u << kQpnIndexBits) - 1); }

// A key is its object's table handle above a generation byte; window rkeys also have the top
// bit set, so they never collide with MR keys.
inline constexpr uint32_t kMwKeyBit = 0x80000000u;
inline constexpr uint32_t key_handle(uint32_t key) { return (key & ~kMwKeyBit) >> 8; }

}  // namespace vrnic
