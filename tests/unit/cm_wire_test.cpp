// CM MADs byte for byte: each field lands where IBTA vol. 1 ch. 12 (tables 106-120, as
// ../shared/RDMACM.md transcribes them) puts it, and the rdma_cm IP header is Annex A11's.
#include <catch2/catch.hpp>
#include <vector>

#include "vrnic/cm_wire.h"

using namespace vrnic::cm;

namespace {

std::vector<uint8_t> span(const Mad &m, size_t from, size_t n) {
  return {m.bytes.begin() + long(from), m.bytes.begin() + long(from + n)};
}
std::vector<uint8_t> data_span(const Mad &m, size_t from, size_t n) {
  return span(m, kMadHeaderBytes + from, n);
}

// Every message's private data ends the 232 bytes of data.
static_assert(req::kPrivateData.byte + req::kPrivateData.len == kMadDataBytes);
static_assert(mra::kPrivateData.byte + mra::kPrivateData.len == kMadDataBytes);
static_assert(rej::kPrivateData.byte + rej::kPrivateData.len == kMadDataBytes);
static_assert(rep::kPrivateData.byte + rep::kPrivateData.len == kMadDataBytes);
static_assert(rtu::kPrivateData.byte + rtu::kPrivateData.len == kMadDataBytes);
static_assert(dreq::kPrivateData.byte + dreq::kPrivateData.len == kMadDataBytes);
static_assert(sidr_req::kPrivateData.byte + sidr_req::kPrivateData.len == kMadDataBytes);
static_assert(sidr_rep::kPrivateData.byte + sidr_rep::kPrivateData.len == kMadDataBytes);
// The private data sizes rdma_cm reports (RDMACM.md section 0, item 12 and 3.2).
static_assert(req::kPrivateData.len == 92 && rep::kPrivateData.len == 196);
static_assert(rej::kPrivateData.len == 148 && sidr_rep::kPrivateData.len == 136);

}  // namespace

TEST_CASE("CM MAD header: base 1, class 0x07 version 2, SEND, TID and attribute", "[cm]") {
  Mad m;
  m.init(Attr::kReq, 0x0102030405060708ull);
  CHECK(span(m, 0, 24) == std::vector<uint8_t>{0x01, 0x07, 0x02, 0x03, 0, 0,    0, 0, 1, 2, 3, 4,
                                               5,    6,    7,    8,    0, 0x10, 0, 0, 0, 0, 0, 0});
  CHECK(m.tid() == 0x0102030405060708ull);
  CHECK(m.attr() == Attr::kReq);
  CHECK(m.mgmt_class() == kMgmtClassCm);
  CHECK(m.class_version() == 2);
}

TEST_CASE("CM REQ: every field at its byte and bits (table 106)", "[cm]") {
  Mad m;
  m.init(Attr::kReq, 1);
  m.put(req::kLocalCommId, 0x11223344);
  m.put(req::kServiceId, service_id(0x0106, 4791));
  m.put(req::kLocalCaGuid, 0x0276726e69630001ull);
  m.put(req::kLocalQpn, 0xabcdef);
  m.put(req::kResponderResources, 0x10);
  m.put(req::kInitiatorDepth, 0x08);
  m.put(req::kRemoteCmResponseTimeout, 20);
  m.put(req::kTransportServiceType, 1);  // UC
  m.put(req::kStartingPsn, 0x123456);
  m.put(req::kLocalCmResponseTimeout, 20);
  m.put(req::kRetryCount, 7);
  m.put(req::kPartitionKey, 0xffff);
  m.put(req::kPathMtu, 3);  // IBV_MTU_1024
  m.put(req::kRnrRetryCount, 7);
  m.put(req::kMaxCmRetries, 15);
  m.put(req::kPrimaryLocalLid, 0xffff);
  m.put(req::kPrimaryRemoteLid, 0xffff);
  const uint8_t local[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  const uint8_t remote[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  m.put(req::kPrimaryLocalGid, local, 16);
  m.put(req::kPrimaryRemoteGid, remote, 16);
  m.put(req::kPrimaryFlowLabel, 0x12345);
  m.put(req::kPrimaryPacketRate, 0x3f);
  m.put(req::kPrimaryTrafficClass, 0x68);
  m.put(req::kPrimaryHopLimit, 64);
  m.put(req::kPrimarySl, 3);
  m.put(req::kPrimarySubnetLocal, 1);
  m.put(req::kPrimaryLocalAckTimeout, 18);
  using V = std::vector<uint8_t>;
  CHECK(data_span(m, 0, 4) == V{0x11, 0x22, 0x33, 0x44});
  CHECK(data_span(m, 8, 8) == V{0, 0, 0, 0, 0x01, 0x06, 0x12, 0xb7});
  CHECK(data_span(m, 16, 8) == V{0x02, 0x76, 0x72, 0x6e, 0x69, 0x63, 0x00, 0x01});
  CHECK(data_span(m, 32, 4) == V{0xab, 0xcd, 0xef, 0x10});
  CHECK(data_span(m, 36, 4) == V{0, 0, 0, 0x08});
  CHECK(data_span(m, 43, 1) == V{0xa2});                    // 10100 | 01 | 0
  CHECK(data_span(m, 44, 4) == V{0x12, 0x34, 0x56, 0xa7});  // PSN; 10100 | 111
  CHECK(data_span(m, 48, 4) == V{0xff, 0xff, 0x37, 0xf0});  // P_Key; 0011 0 111; 1111 0 000
  CHECK(data_span(m, 52, 4) == V{0xff, 0xff, 0xff, 0xff});
  CHECK(data_span(m, 56, 16) == V(local, local + 16));
  CHECK(data_span(m, 72, 16) == V(remote, remote + 16));
  CHECK(data_span(m, 88, 8) == V{0x12, 0x34, 0x50, 0x3f, 0x68, 0x40, 0x38, 0x90});
  CHECK(data_span(m, 96, 44) == V(44, 0));  // no alternate path
  // And back.
  CHECK(m[req::kLocalQpn] == 0xabcdef);
  CHECK(m[req::kStartingPsn] == 0x123456);
  CHECK(m[req::kRetryCount] == 7);
  CHECK(m[req::kPrimaryFlowLabel] == 0x12345);
  CHECK(m[req::kPrimaryLocalAckTimeout] == 18);
  CHECK(m[req::kTransportServiceType] == 1);
}

TEST_CASE("CM REP, REJ, MRA, DREQ, SIDR: fields at their bytes (tables 107-120)", "[cm]") {
  using V = std::vector<uint8_t>;
  Mad rep;
  rep.init(Attr::kRep, 2);
  rep.put(rep::kLocalCommId, 0xa1a2a3a4);
  rep.put(rep::kRemoteCommId, 0x11223344);
  rep.put(rep::kLocalQpn, 0x000123);
  rep.put(rep::kStartingPsn, 0xfedcba);
  rep.put(rep::kResponderResources, 4);
  rep.put(rep::kInitiatorDepth, 2);
  rep.put(rep::kTargetAckDelay, 15);
  rep.put(rep::kEndToEndFlowControl, 1);
  rep.put(rep::kRnrRetryCount, 7);
  rep.put(rep::kSrq, 1);
  rep.put(rep::kLocalCaGuid, 0x1122334455667788ull);
  CHECK(data_span(rep, 0, 8) == V{0xa1, 0xa2, 0xa3, 0xa4, 0x11, 0x22, 0x33, 0x44});
  CHECK(data_span(rep, 12, 4) == V{0x00, 0x01, 0x23, 0x00});
  CHECK(data_span(rep, 20, 8) == V{0xfe, 0xdc, 0xba, 0x00, 4, 2, 0x79, 0xf0});
  CHECK(data_span(rep, 28, 8) == V{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88});

  Mad rej;
  rej.init(Attr::kRej, 3);
  rej.put(rej::kMessageRejected, 0);  // the REQ
  rej.put(rej::kRejectedInfoLength, 0);
  rej.put(rej::kReason, kRejInvalidServiceId);
  CHECK(data_span(rej, 8, 4) == V{0x00, 0x00, 0x00, 0x08});
  rej.put(rej::kMessageRejected, 1);
  rej.put(rej::kRejectedInfoLength, 0x48);
  rej.put(rej::kReason, kRejConsumerDefined);
  CHECK(data_span(rej, 8, 4) == V{0x40, 0x90, 0x00, 0x1c});  // 01 000000; 1001000 0; 28

  Mad mra;
  mra.init(Attr::kMra, 4);
  mra.put(mra::kMessageMraed, 1);
  mra.put(mra::kServiceTimeout, 24);
  CHECK(data_span(mra, 8, 2) == V{0x40, 0xc0});

  Mad dreq;
  dreq.init(Attr::kDreq, 5);
  dreq.put(dreq::kRemoteQpn, 0xabcdef);
  CHECK(data_span(dreq, 8, 4) == V{0xab, 0xcd, 0xef, 0x00});

  Mad sreq;
  sreq.init(Attr::kSidrReq, 6);
  sreq.put(sidr_req::kRequestId, 0x01020304);
  sreq.put(sidr_req::kPartitionKey, 0xffff);
  sreq.put(sidr_req::kServiceId, service_id(0x0111, 7174));
  CHECK(data_span(sreq, 0, 16) ==
        V{1, 2, 3, 4, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06});

  Mad srep;
  srep.init(Attr::kSidrRep, 7);
  srep.put(sidr_rep::kRequestId, 0x01020304);
  srep.put(sidr_rep::kStatus, kSidrValid);
  srep.put(sidr_rep::kQpn, 0x00beef);
  srep.put(sidr_rep::kServiceId, service_id(0x0111, 7174));
  srep.put(sidr_rep::kQkey, 0x01234567);
  CHECK(data_span(srep, 0, 24) == V{1, 2, 3, 4, 0,    0,    0,    0,    0x00, 0xbe, 0xef, 0,
                                    0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x01, 0x23, 0x45, 0x67});
}

TEST_CASE("rdma_cm IP header: version 0, IP version nibble, port, addresses (Annex A11)", "[cm]") {
  IpServiceHeader h{};
  h.ip_version = 4;
  h.src_port = 0x1234;
  h.src[12] = 10, h.src[15] = 1;
  h.dst[12] = 10, h.dst[15] = 2;
  uint8_t out[kIpHeaderBytes];
  h.write(out);
  std::vector<uint8_t> expect(36, 0);
  expect[1] = 0x40;
  expect[2] = 0x12, expect[3] = 0x34;
  expect[16] = 10, expect[19] = 1;  // the last 4 of 16 bytes, the others zero (not ::ffff)
  expect[32] = 10, expect[35] = 2;
  CHECK(std::vector<uint8_t>(out, out + 36) == expect);
  IpServiceHeader back{};
  REQUIRE(back.read(out));
  CHECK(back.ip_version == 4);
  CHECK(back.src_port == 0x1234);
  out[0] = 1;  // another version
  CHECK_FALSE(back.read(out));
  out[0] = 0;
  out[1] = 0x50;  // neither IPv4 nor IPv6
  CHECK_FALSE(back.read(out));
}
