// The packet opcode table: per BTH opcode, its extension headers and their offsets, payload
// and position in a message (opcode.h).
#include "opcode.h"

#include <array>

namespace vrnic {
namespace {

using namespace wire;

struct OperationSpec {
  uint8_t operation;
  uint32_t flags;
  const char *name;
};

// The operations of IB spec table 38, without the transport bits.
constexpr OperationSpec kOperations[] = {
    {kSendFirst, kOpSend | kOpFirst | kOpPayload | kOpRequest, "SEND_FIRST"},
    {kSendMiddle, kOpSend | kOpMiddle | kOpPayload | kOpRequest, "SEND_MIDDLE"},
    {kSendLast, kOpSend | kOpLast | kOpPayload | kOpRequest, "SEND_LAST"},
    {kSendLastImm, kOpSend | kOpLast | kOpImm | kOpPayload | kOpRequest, "SEND_LAST_IMM"},
    {kSendOnly, kOpSend | kOpOnly | kOpPayload | kOpRequest, "SEND_ONLY"},
    {kSendOnlyImm, kOpSend | kOpOnly | kOpImm | kOpPayload | kOpRequest, "SEND_ONLY_IMM"},
    {kWriteFirst, kOpWrite | kOpFirst | kOpReth | kOpPayload | kOpRequest, "WRITE_FIRST"},
    {kWriteMiddle, kOpWrite | kOpMiddle | kOpPayload | kOpRequest, "WRITE_MIDDLE"},
    {kWriteLast, kOpWrite | kOpLast | kOpPayload | kOpRequest, "WRITE_LAST"},
    {kWriteLastImm, kOpWrite | kOpLast | kOpImm | kOpPayload | kOpRequest, "WRITE_LAST_IMM"},
    {kWriteOnly, kOpWrite | kOpOnly | kOpReth | kOpPayload | kOpRequest, "WRITE_ONLY"},
    {kWriteOnlyImm, kOpWrite | kOpOnly | kOpReth | kOpImm | kOpPayload | kOpRequest,
     "WRITE_ONLY_IMM"},
    {kReadRequest, kOpReadRequest | kOpOnly | kOpReth | kOpRequest, "READ_REQUEST"},
    {kReadResponseFirst, kOpReadResponse | kOpFirst | kOpAeth | kOpPayload, "READ_RESP_FIRST"},
    {kReadResponseMiddle, kOpReadResponse | kOpMiddle | kOpPayload, "READ_RESP_MIDDLE"},
    {kReadResponseLast, kOpReadResponse | kOpLast | kOpAeth | kOpPayload, "READ_RESP_LAST"},
    {kReadResponseOnly, kOpReadResponse | kOpOnly | kOpAeth | kOpPayload, "READ_RESP_ONLY"},
    {kAcknowledge, kOpAck | kOpOnly | kOpAeth, "ACK"},
    {kAtomicAcknowledge, kOpAck | kOpOnly | kOpAeth | kOpAtomicAckEth, "ATOMIC_ACK"},
    {kCompareSwap, kOpAtomic | kOpOnly | kOpAtomicEth | kOpRequest, "CMP_SWAP"},
    {kFetchAdd, kOpAtomic | kOpOnly | kOpAtomicEth | kOpRequest, "FETCH_ADD"},
    {kSendLastInv, kOpSend | kOpLast | kOpIeth | kOpPayload | kOpRequest, "SEND_LAST_INV"},
    {kSendOnlyInv, kOpSend | kOpOnly | kOpIeth | kOpPayload | kOpRequest, "SEND_ONLY_INV"},
    {kAtomicWrite, kOpAtomicWrite | kOpOnly | kOpReth | kOpPayload | kOpRequest, "ATOMIC_WRITE"},
};

// Which operations each transport allows (IB spec 9.4): RC and XRC all of them; UC no reads,
// atomics or ACKs; UD only SEND ONLY (with immediate).
constexpr bool transport_allows(uint8_t transport, uint32_t flags, uint8_t operation) {
  switch (transport) {
    case kRc:
    case kXrc:
      return true;
    case kUc:
      return (flags & (kOpSend | kOpWrite)) && !(flags & kOpIeth);
    case kUd:
      return operation == kSendOnly || operation == kSendOnlyImm;
    default:
      return false;
  }
}

// Extension headers in the order the spec places them after the BTH.
constexpr OpcodeInfo make_info(uint8_t transport, const OperationSpec &op) {
  OpcodeInfo info{};
  info.flags = op.flags | kOpValid | (transport == kUd ? uint32_t(kOpDeth) : 0u) |
               (transport == kXrc && (op.flags & kOpRequest) ? uint32_t(kOpXrceth) : 0u);
  info.name = op.name;
  uint8_t off = Bth::kSize;
  auto place = [&](uint32_t flag, uint8_t size, uint8_t &field) {
    if (info.flags & flag) {
      field = off;
      off = uint8_t(off + size);
    }
  };
  place(kOpDeth, Deth::kSize, info.deth_off);
  place(kOpXrceth, Xrceth::kSize, info.xrceth_off);
  place(kOpReth, Reth::kSize, info.reth_off);
  place(kOpAtomicEth, AtomicEth::kSize, info.atomic_eth_off);
  place(kOpAeth, Aeth::kSize, info.aeth_off);
  place(kOpAtomicAckEth, AtomicAckEth::kSize, info.atomic_ack_off);
  place(kOpImm, ImmDt::kSize, info.imm_off);
  place(kOpIeth, Ieth::kSize, info.ieth_off);
  info.header_bytes = off;
  return info;
}

constexpr std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> table{};
  for (uint8_t transport : {uint8_t(kRc), uint8_t(kUc), uint8_t(kUd), uint8_t(kXrc)}) {
    for (const OperationSpec &op : kOperations) {
      if (transport_allows(transport, op.flags, op.operation))
        table[transport | op.operation] = make_info(transport, op);
    }
  }
  return table;
}

constexpr std::array<OpcodeInfo, 256> kTable = build_table();

}  // namespace

const OpcodeInfo &opcode_info(uint8_t opcode) {
  return kTable[opcode];
}

}  // namespace vrnic
