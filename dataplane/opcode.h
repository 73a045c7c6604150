// The one opcode table: for every BTH opcode, which extension headers follow the BTH (and at
// which offsets), whether it carries payload, and where it sits in a message. Both packet
// construction and parsing are driven by it.
#pragma once

#include <cstdint>

#include "vrnic/wire.h"

namespace vrnic {

enum OpFlags : uint32_t {
  kOpValid = 1u << 0,
  kOpReth = 1u << 1,
  kOpAtomicEth = 1u << 2,
  kOpAeth = 1u << 3,
  kOpAtomicAckEth = 1u << 4,
  kOpImm = 1u << 5,
  kOpIeth = 1u << 6,
  kOpDeth = 1u << 7,
  kOpPayload = 1u << 8,
  kOpFirst = 1u << 9,
  kOpMiddle = 1u << 10,
  kOpLast = 1u << 11,
  kOpSend = 1u << 12,
  kOpWrite = 1u << 13,
  kOpReadRequest = 1u << 14,
  kOpReadResponse = 1u << 15,
  kOpAtomic = 1u << 16,
  kOpAck = 1u << 17,      // ACK or ATOMIC ACK
  kOpRequest = 1u << 18,  // travels requester -> responder
  kOpAtomicWrite = 1u << 19,
  kOpXrceth = 1u << 20,  // an XRC request: the target SRQ's number follows the BTH
  kOpOnly = kOpFirst | kOpLast,
};

struct OpcodeInfo {
  uint32_t flags;
  uint8_t header_bytes;  // BTH and every extension header
  uint8_t reth_off, atomic_eth_off, aeth_off, atomic_ack_off, imm_off, ieth_off, deth_off,
      xrceth_off;
  const char *name;
};

const OpcodeInfo &opcode_info(uint8_t opcode);

}  // namespace vrnic
