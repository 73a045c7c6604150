// IB CM MADs (IBTA vol. 1 ch. 12) as RoCEv2 carries them to and from QP1: the 24-byte MAD
// header; each CM message's fields as the spec's tables 106-120 place them (a byte, a bit
// counted from that byte's most significant, a width; big-endian); the REJ reasons; and the
// RDMA IP CM service header (Annex A11) that opens the private data of a REQ or SIDR_REQ from
// rdma_cm. One definition for vrnicd's CM, its tests and the fuzz group.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vrnic::cm {

using Gid = std::array<uint8_t, 16>;  // a port's address: where a MAD comes from or goes

inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;  // QP1's Q_Key (IB_QP1_QKEY)
inline constexpr size_t kMadBytes = 256;
inline constexpr size_t kMadHeaderBytes = 24;
inline constexpr size_t kMadDataBytes = kMadBytes - kMadHeaderBytes;  // 232
inline constexpr size_t kMadTidOffset = 8;    // in the header: the transaction ID (8 bytes)
inline constexpr size_t kMadAttrOffset = 16;  // ... the attribute ID (2 bytes)
inline constexpr size_t kMadAttrModOffset = 20;  // ... the attribute modifier (4 bytes)

inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kClassVersion = 2;  // the only one Linux's ib_cm registers
inline constexpr uint8_t kMethodSend = 0x03;

enum class Attr : uint16_t {
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001a,
};

// A field of a message: `width` bits (1..64) from bit `bit` of byte `byte` of the MAD's data
// (the 232 bytes after the header), bit 0 being a byte's most significant.
struct Field {
  uint16_t byte;
  uint8_t bit;
  uint8_t width;
};
// A run of whole bytes of the data: GIDs, ARI, private data.
struct Bytes {
  uint16_t byte;
  uint16_t len;
};

inline uint64_t get(const uint8_t *data, Field f) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < f.width; i++) {
    const uint32_t at = f.byte * 8u + f.bit + i;
    v = v << 1 | ((data[at / 8] >> (7 - at % 8)) & 1);
  }
  return v;
}

inline void set(uint8_t *data, Field f, uint64_t value) {
  for (uint32_t i = 0; i < f.width; i++) {
    const uint32_t at = f.byte * 8u + f.bit + i;
    const uint8_t mask = uint8_t(1u << (7 - at % 8));
    const bool one = (value >> (f.width - 1 - i)) & 1;
    data[at / 8] = uint8_t(one ? data[at / 8] | mask : data[at / 8] & ~mask);
  }
}

// Table 106.
namespace req {
inline constexpr Field kLocalCommId{0, 0, 32};
inline constexpr Field kVendorId{5, 0, 24};  // ECE
inline constexpr Field kServiceId{8, 0, 64};
inline constexpr Field kLocalCaGuid{16, 0, 64};
inline constexpr Field kLocalQkey{28, 0, 32};
inline constexpr Field kLocalQpn{32, 0, 24};
inline constexpr Field kResponderResources{35, 0, 8};
inline constexpr Field kLocalEecn{36, 0, 24};
inline constexpr Field kInitiatorDepth{39, 0, 8};
inline constexpr Field kRemoteEecn{40, 0, 24};
inline constexpr Field kRemoteCmResponseTimeout{43, 0, 5};
inline constexpr Field kTransportServiceType{43, 5, 2};  // 0 RC, 1 UC, 3 XRC
inline constexpr Field kEndToEndFlowControl{43, 7, 1};
inline constexpr Field kStartingPsn{44, 0, 24};
inline constexpr Field kLocalCmResponseTimeout{47, 0, 5};
inline constexpr Field kRetryCount{47, 5, 3};
inline constexpr Field kPartitionKey{48, 0, 16};
inline constexpr Field kPathMtu{50, 0, 4};
inline constexpr Field kRdcExists{50, 4, 1};
inline constexpr Field kRnrRetryCount{50, 5, 3};
inline constexpr Field kMaxCmRetries{51, 0, 4};
inline constexpr Field kSrq{51, 4, 1};
inline constexpr Field kExtendedTransportType{51, 5, 3};
inline constexpr Field kPrimaryLocalLid{52, 0, 16};
inline constexpr Field kPrimaryRemoteLid{54, 0, 16};
inline constexpr Bytes kPrimaryLocalGid{56, 16};
inline constexpr Bytes kPrimaryRemoteGid{72, 16};
inline constexpr Field kPrimaryFlowLabel{88, 0, 20};
inline constexpr Field kPrimaryPacketRate{91, 2, 6};
inline constexpr Field kPrimaryTrafficClass{92, 0, 8};
inline constexpr Field kPrimaryHopLimit{93, 0, 8};
inline constexpr Field kPrimarySl{94, 0, 4};
inline constexpr Field kPrimarySubnetLocal{94, 4, 1};
inline constexpr Field kPrimaryLocalAckTimeout{95, 0, 5};
inline constexpr Bytes kAlternatePath{96, 44};  // RoCE has none: zero
inline constexpr Bytes kPrivateData{140, 92};
}  // namespace req

// Table 107.
namespace mra {
inline constexpr Field kLocalCommId{0, 0, 32};
inline constexpr Field kRemoteCommId{4, 0, 32};
inline constexpr Field kMessageMraed{8, 0, 2};  // 0 REQ, 1 REP, 2 LAP
inline constexpr Field kServiceTimeout{9, 0, 5};
inline constexpr Bytes kPrivateData{10, 222};
}  // namespace mra

// Table 108.
namespace rej {
inline constexpr Field kLocalCommId{0, 0, 32};
inline constexpr Field kRemoteCommId{4, 0, 32};
inline constexpr Field kMessageRejected{8, 0, 2};  // 0 REQ, 1 REP, 2 other
inline constexpr Field kRejectedInfoLength{9, 0, 7};
inline constexpr Field kReason{10, 0, 16};
inline constexpr Bytes kAri{12, 72};
inline constexpr Bytes kPrivateData{84, 148};
}  // namespace rej

// Table 110.
namespace rep {
inline constexpr Field kLocalCommId{0, 0, 32};
inline constexpr Field kRemoteCommId{4, 0, 32};
inline constexpr Field kLocalQkey{8, 0, 32};
inline constexpr Field kLocalQpn{12, 0, 24};
inline constexpr Field kVendorIdHigh{15, 0, 8};
inline constexpr Field kLocalEecn{16, 0, 24};
inline constexpr Field kVendorIdMiddle{19, 0, 8};
inline constexpr Field kStartingPsn{20, 0, 24};
inline constexpr Field kVendorIdLow{23, 0, 8};
inline constexpr Field kResponderResources{24, 0, 8};
inline constexpr Field kInitiatorDepth{25, 0, 8};
inline constexpr Field kTargetAckDelay{26, 0, 5};
inline constexpr Field kFailoverAccepted{26, 5, 2};
inline constexpr Field kEndToEndFlowControl{26, 7, 1};
inline constexpr Field kRnrRetryCount{27, 0, 3};
inline constexpr Field kSrq{27, 3, 1};
inline constexpr Field kLocalCaGuid{28, 0, 64};
inline constexpr Bytes kPrivateData{36, 196};
}  // namespace rep

// Tables 111 (RTU) and 113 (DREP): the two communication IDs and private data.
namespace rtu {
inline constexpr Field kLocalCommId{0, 0, 32};
inline constexpr Field kRemoteCommId{4, 0, 32};
inline constexpr Bytes kPrivateData{8, 224};
}  // namespace rtu
namespace drep = rtu;

// Table 112.
namespace dreq {
inline constexpr Field kLocalCommId{0, 0, 32};
inline constexpr Field kRemoteCommId{4, 0, 32};
inline constexpr Field kRemoteQpn{8, 0, 24};
inline constexpr Bytes kPrivateData{12, 220};
}  // namespace dreq

// Table 119.
namespace sidr_req {
inline constexpr Field kRequestId{0, 0, 32};
inline constexpr Field kPartitionKey{4, 0, 16};
inline constexpr Field kServiceId{8, 0, 64};
inline constexpr Bytes kPrivateData{16, 216};
}  // namespace sidr_req

// Table 120.
namespace sidr_rep {
inline constexpr Field kRequestId{0, 0, 32};
inline constexpr Field kStatus{4, 0, 8};  // 0: the QP is valid
inline constexpr Field kAdditionalInfoLength{5, 0, 8};
inline constexpr Field kQpn{8, 0, 24};
inline constexpr Field kServiceId{12, 0, 64};
inline constexpr Field kQkey{20, 0, 32};
inline constexpr Bytes kAdditionalInfo{24, 72};
inline constexpr Bytes kPrivateData{96, 136};
}  // namespace sidr_rep

// REJ reasons (table 109) vrnic sends or tells apart.
enum RejReason : uint16_t {
  kRejNoQp = 1,
  kRejNoResources = 3,
  kRejTimeout = 4,
  kRejUnsupported = 5,
  kRejInvalidCommId = 6,
  kRejInvalidServiceId = 8,  // no listener: the application sees ECONNREFUSED
  kRejInvalidTransportType = 9,
  kRejStaleConnection = 10,
  kRejInvalidMtu = 26,
  kRejConsumerDefined = 28,  // rdma_reject
  kRejInvalidClassVersion = 31,
  kRejVendorOptionNotSupported = 35,  // rdma_reject_ece
};

// SIDR_REP status (table 121).
enum SidrStatus : uint8_t {
  kSidrValid = 0,
  kSidrServiceIdNotSupported = 1,
  kSidrRejected = 2,
  kSidrNoQp = 3,
  kSidrRedirect = 4,
  kSidrUnsupportedClassVersion = 5,
};

// A whole MAD: the header's fields by name, the data by Field.
struct Mad {
  std::array<uint8_t, kMadBytes> bytes{};

  uint8_t *data() { return bytes.data() + kMadHeaderBytes; }
  const uint8_t *data() const { return bytes.data() + kMadHeaderBytes; }
  uint8_t base_version() const { return bytes[0]; }
  uint8_t mgmt_class() const { return bytes[1]; }
  uint8_t class_version() const { return bytes[2]; }
  uint8_t method() const { return bytes[3]; }
  uint16_t status() const { return uint16_t(bytes[4] << 8 | bytes[5]); }
  uint64_t tid() const { return load(kMadTidOffset, 8); }
  Attr attr() const { return Attr(load(kMadAttrOffset, 2)); }
  uint32_t attr_mod() const { return uint32_t(load(kMadAttrModOffset, 4)); }
  // REQ and REP carry the ECE options there (Linux's cm_format_mad_ece_hdr).
  void set_attr_mod(uint32_t v) { store(kMadAttrModOffset, 4, v); }

  // A CM SEND of `attr` with transaction ID `tid`; the data zeroed.
  void init(Attr attr, uint64_t tid) {
    bytes.fill(0);
    bytes[0] = kBaseVersion;
    bytes[1] = kMgmtClassCm;
    bytes[2] = kClassVersion;
    bytes[3] = kMethodSend;
    store(kMadTidOffset, 8, tid);
    store(kMadAttrOffset, 2, uint16_t(attr));
  }
  uint64_t operator[](Field f) const { return get(data(), f); }
  void put(Field f, uint64_t v) { set(data(), f, v); }
  void put(Bytes b, const void *src, size_t len) {
    std::memcpy(data() + b.byte, src, len < b.len ? len : b.len);
  }
  const uint8_t *at(Bytes b) const { return data() + b.byte; }

 private:
  uint64_t load(size_t off, size_t n) const {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v << 8 | bytes[off + i];
    return v;
  }
  void store(size_t off, size_t n, uint64_t v) {
    for (size_t i = 0; i < n; i++) bytes[off + n - 1 - i] = uint8_t(v >> (8 * i));
  }
};

// The RDMA IP CM service header, the first 36 bytes of a REQ's or SIDR_REQ's private data
// (Annex A11): version 0, the IP version in the high nibble of byte 1, the active side's port,
// then source and destination addresses (an IPv4 address in the last 4 of 16 bytes, the other
// 12 zero, not ::ffff).
inline constexpr size_t kIpHeaderBytes = 36;
struct IpServiceHeader {
  uint8_t ip_version;  // 4 or 6
  uint16_t src_port;
  uint8_t src[16];  // as the header carries them
  uint8_t dst[16];

  void write(uint8_t out[kIpHeaderBytes]) const {
    std::memset(out, 0, kIpHeaderBytes);
    out[1] = uint8_t(ip_version << 4);
    out[2] = uint8_t(src_port >> 8);
    out[3] = uint8_t(src_port);
    std::memcpy(out + 4, src, 16);
    std::memcpy(out + 20, dst, 16);
  }
  // False when it is not one (version, IP version).
  bool read(const uint8_t in[kIpHeaderBytes]) {
    if (in[0] != 0 || ((in[1] >> 4) != 4 && (in[1] >> 4) != 6)) return false;
    ip_version = uint8_t(in[1] >> 4);
    src_port = uint16_t(in[2] << 8 | in[3]);
    std::memcpy(src, in + 4, 16);
    std::memcpy(dst, in + 20, 16);
    return true;
  }
};

// ECE's vendor ID in a REP: three bytes apart (table 110's reserved bytes, as Linux puts it).
inline uint32_t rep_vendor_id(const Mad &m) {
  return uint32_t(m[rep::kVendorIdHigh] << 16 | m[rep::kVendorIdMiddle] << 8 |
                  m[rep::kVendorIdLow]);
}
inline void put_rep_vendor_id(Mad &m, uint32_t vendor_id) {
  m.put(rep::kVendorIdHigh, vendor_id >> 16 & 0xff);
  m.put(rep::kVendorIdMiddle, vendor_id >> 8 & 0xff);
  m.put(rep::kVendorIdLow, vendor_id & 0xff);
}

// The service ID of an rdma_cm port: the port space above the port (RDMA_PS_TCP 0x0106 gives
// 0x0000000001060000 | port).
inline constexpr uint64_t service_id(uint16_t port_space, uint16_t port) {
  return uint64_t(port_space) << 16 | port;
}

}  // namespace vrnic::cm
