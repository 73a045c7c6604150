// The work-request rules: for each send opcode (enum ibv_wr_opcode) the QP types that may post
// it, how the transport carries it, whether IBV_SEND_INLINE applies, the opcode of its
// completion and the ibv_qp_ex send_ops flag that names it. The provider (ibv_post_send and
// ibv_wr_* checks) and vrnicd (requester and completer) both read it: adding an opcode is one
// row here. Opcodes without a row are not implemented.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace vrnic::wr {

enum class Kind : uint8_t {
  kNone,    // not implemented
  kSend,    // SEND, SEND_WITH_IMM, SEND_WITH_INV: consumes a receive WQE at the responder
  kWrite,   // RDMA WRITE (with immediate: also a receive WQE)
  kRead,    // RDMA READ: the data comes back in read responses
  kAtomic,  // 8-byte atomics: one request, one atomic ACK
  // IBTA 1.5 ATOMIC WRITE: 8 bytes (in the WQE's compare_add, as given) written at once; one
  // request, answered as a zero-length read, and like reads and atomics it holds one of
  // max_rd_atomic until then.
  kAtomicWrite,
  kLocal,   // memory-window bind and local invalidate: never on the wire
};

// Bits of Rule::qp_types: an XRC initiator (IBV_QPT_XRC_SEND) posts what an RC QP posts; an
// XRC target posts nothing.
inline constexpr uint8_t kRc = 1 << 0, kUc = 1 << 1, kUd = 1 << 2, kXrc = 1 << 3;
inline constexpr uint8_t kReliable = kRc | kXrc;

struct Rule {
  Kind kind = Kind::kNone;
  uint8_t qp_types = 0;  // where it may be posted (IB spec 9.4: UD sends only; UC no reads,
                         // atomics or remote invalidation)
  bool may_inline = false;
  uint8_t wc_opcode = 0;       // enum ibv_wc_opcode
  uint64_t send_ops_flag = 0;  // enum ibv_qp_create_send_ops_flags
};

constexpr Rule rule(uint32_t op) {
  switch (op) {
    case IBV_WR_SEND:
      return {Kind::kSend, kReliable | kUc | kUd, true, IBV_WC_SEND, IBV_QP_EX_WITH_SEND};
    case IBV_WR_SEND_WITH_IMM:
      return {Kind::kSend, kReliable | kUc | kUd, true, IBV_WC_SEND, IBV_QP_EX_WITH_SEND_WITH_IMM};
    case IBV_WR_SEND_WITH_INV:
      return {Kind::kSend, kReliable, true, IBV_WC_SEND, IBV_QP_EX_WITH_SEND_WITH_INV};
    case IBV_WR_RDMA_WRITE:
      return {Kind::kWrite, kReliable | kUc, true, IBV_WC_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE};
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return {Kind::kWrite, kReliable | kUc, true, IBV_WC_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM};
    case IBV_WR_RDMA_READ:
      return {Kind::kRead, kReliable, false, IBV_WC_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ};
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return {Kind::kAtomic, kReliable, false, IBV_WC_COMP_SWAP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP};
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return {Kind::kAtomic, kReliable, false, IBV_WC_FETCH_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
    case IBV_WR_ATOMIC_WRITE:
      return {Kind::kAtomicWrite, kReliable, false, IBV_WC_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE};
    case IBV_WR_BIND_MW:
      return {Kind::kLocal, kReliable | kUc, false, IBV_WC_BIND_MW, IBV_QP_EX_WITH_BIND_MW};
    case IBV_WR_LOCAL_INV:
      return {Kind::kLocal, kReliable | kUc, false, IBV_WC_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV};
    default:
      return {};
  }
}

constexpr uint8_t qp_type_bit(uint32_t qp_type) {
  return qp_type == IBV_QPT_RC   ? kRc
         : qp_type == IBV_QPT_UC ? kUc
         : qp_type == IBV_QPT_UD ? kUd
         : qp_type == IBV_QPT_XRC_SEND ? kXrc
                                 : 0;
}

constexpr bool supported(uint32_t op) {
  return rule(op).kind != Kind::kNone;
}
// Implemented, and allowed on this QP type.
constexpr bool fits_qp(uint32_t qp_type, uint32_t op) {
  return (rule(op).qp_types & qp_type_bit(qp_type)) != 0;
}
constexpr bool is_read_or_atomic(uint32_t op) {
  return rule(op).kind == Kind::kRead || rule(op).kind == Kind::kAtomic ||
         rule(op).kind == Kind::kAtomicWrite;
}
constexpr bool is_local(uint32_t op) {
  return rule(op).kind == Kind::kLocal;
}

// Every send_ops flag of the opcodes a QP type may post (ibv_create_qp_ex's send_ops_flags).
constexpr uint64_t send_ops_for(uint32_t qp_type) {
  uint64_t ops = 0;
  for (uint32_t op = 0; op < 32; op++)
    if (fits_qp(qp_type, op)) ops |= rule(op).send_ops_flag;
  return ops;
}

static_assert(send_ops_for(IBV_QPT_UD) == (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM));
static_assert(!fits_qp(IBV_QPT_UC, IBV_WR_RDMA_READ) && fits_qp(IBV_QPT_UC, IBV_WR_BIND_MW));

}  // namespace vrnic::wr
