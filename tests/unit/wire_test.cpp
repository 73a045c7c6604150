// The opcode table and header encoders against the IB spec's layouts and ROCE.md's vector.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "dataplane/opcode.h"
#include "vrnic/wire.h"

using namespace vrnic;
using namespace vrnic::wire;

namespace {
std::string hex(const uint8_t *p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; i++) {
    std::snprintf(b, sizeof(b), "%02x", p[i]);
    s += b;
  }
  return s;
}
}  // namespace

TEST_CASE("opcode table places extension headers as the spec orders them", "[wire]") {
  const OpcodeInfo &write_only = opcode_info(make_opcode(kRc, kWriteOnly));
  CHECK(write_only.flags & kOpValid);
  CHECK(write_only.reth_off == 12);
  CHECK(write_only.header_bytes == 28);
  const OpcodeInfo &write_imm = opcode_info(make_opcode(kRc, kWriteOnlyImm));
  CHECK(write_imm.reth_off == 12);
  CHECK(write_imm.imm_off == 28);
  CHECK(write_imm.header_bytes == 32);
  const OpcodeInfo &atomic_ack = opcode_info(make_opcode(kRc, kAtomicAcknowledge));
  CHECK(atomic_ack.aeth_off == 12);
  CHECK(atomic_ack.atomic_ack_off == 16);
  CHECK(atomic_ack.header_bytes == 24);
  const OpcodeInfo &cas = opcode_info(make_opcode(kRc, kCompareSwap));
  CHECK(cas.atomic_eth_off == 12);
  CHECK(cas.header_bytes == 40);
  const OpcodeInfo &ud_send = opcode_info(make_opcode(kUd, kSendOnlyImm));
  CHECK(ud_send.deth_off == 12);
  CHECK(ud_send.imm_off == 20);
  CHECK(ud_send.header_bytes == 24);
  const OpcodeInfo &read_first = opcode_info(make_opcode(kRc, kReadResponseFirst));
  CHECK((read_first.flags & (kOpAeth | kOpFirst | kOpPayload)) ==
        (kOpAeth | kOpFirst | kOpPayload));
  CHECK((opcode_info(make_opcode(kRc, kReadResponseMiddle)).flags & kOpAeth) == 0);
}

TEST_CASE("opcodes a transport does not have are invalid", "[wire]") {
  CHECK_FALSE(opcode_info(make_opcode(kUc, kReadRequest)).flags & kOpValid);
  CHECK_FALSE(opcode_info(make_opcode(kUc, kAcknowledge)).flags & kOpValid);
  CHECK_FALSE(opcode_info(make_opcode(kUd, kWriteOnly)).flags & kOpValid);
  CHECK_FALSE(opcode_info(make_opcode(kUd, kSendFirst)).flags & kOpValid);
  CHECK_FALSE(opcode_info(kRc | 0x15).flags & kOpValid);
  CHECK_FALSE(opcode_info(0xff).flags & kOpValid);
  CHECK(opcode_info(make_opcode(kUc, kWriteFirst)).flags & kOpValid);
}

TEST_CASE("BTH and RETH encode ROCE.md's RDMA WRITE only vector", "[wire]") {
  uint8_t hdr[28];
  reinterpret_cast<Bth *>(hdr)->set(make_opcode(kRc, kWriteOnly), false, 0, kDefaultPkey, 0x11,
                                    true, 5);
  hdr[1] = 0;  // the vector's packet has MigReq clear
  reinterpret_cast<Reth *>(hdr + 12)->set(0x1000, 0x1234, 16);
  CHECK(hex(hdr, 28) == "0a00ffff000000118000000500000000000010000000123400000010");
  const Bth &bth = *reinterpret_cast<const Bth *>(hdr);
  CHECK(bth.dest_qp() == 0x11);
  CHECK(bth.psn() == 5);
  CHECK(bth.ack_req());
  CHECK(bth.pkey() == 0xffff);
  const Reth &reth = *reinterpret_cast<const Reth *>(hdr + 12);
  CHECK(reth.va() == 0x1000);
  CHECK(reth.rkey() == 0x1234);
  CHECK(reth.dma_len() == 16);
}

TEST_CASE("AtomicETH and AETH round-trip", "[wire]") {
  uint8_t b[28];
  reinterpret_cast<AtomicEth *>(b)->set(0x1122334455667788ull, 0xabcdef01u, 7, 9);
  const AtomicEth &a = *reinterpret_cast<const AtomicEth *>(b);
  CHECK(a.va() == 0x1122334455667788ull);
  CHECK(a.rkey() == 0xabcdef01u);
  CHECK(a.swap_add() == 7);
  CHECK(a.compare() == 9);
  Aeth aeth;
  aeth.set(kAethRnrNak | 12, 0xabcdef);
  CHECK(aeth_kind(aeth.syndrome()) == kAethRnrNak);
  CHECK((aeth.syndrome() & 0x1f) == 12);
  CHECK(aeth.msn() == 0xabcdef);
}

TEST_CASE("PSN arithmetic wraps at 2^24", "[wire]") {
  CHECK(psn_add(0xffffff, 1) == 0);
  CHECK(psn_add(0xfffffe, 5) == 3);
  CHECK(psn_diff(3, 0xfffffe) == 5);
  CHECK(psn_diff(0xfffffe, 3) == -5);
  CHECK(psn_diff(100, 100) == 0);
  CHECK(psn_diff(0x7fffff, 0) == 0x7fffff);
  CHECK(psn_diff(0x800000, 0) < 0);
}
