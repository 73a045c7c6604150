// The QP state machine of the IB spec (ch. 10.3): which transitions are legal for each QP
// type, with which attributes required and allowed (qp_state_machine.h).
#include "qp_state_machine.h"

#include <infiniband/verbs.h>

#include <cerrno>

namespace vrnic {
namespace {

struct Masks {
  bool valid;
  uint32_t required;
  uint32_t optional;
};

// XRC's initiator and target (the kernel's XRC_INI and XRC_TGT rows of qp_state_table).
enum TypeIndex { kRc, kUc, kUd, kXrcIni, kXrcTgt, kTypes };

int type_index(uint32_t qp_type) {
  switch (qp_type) {
    case IBV_QPT_RC:
      return kRc;
    case IBV_QPT_UC:
      return kUc;
    case IBV_QPT_UD:
      return kUd;
    case IBV_QPT_XRC_SEND:
      return kXrcIni;
    case IBV_QPT_XRC_RECV:
      return kXrcTgt;
    default:
      return -1;
  }
}

constexpr uint32_t S = IBV_QP_STATE, CUR = IBV_QP_CUR_STATE, PKEY = IBV_QP_PKEY_INDEX,
                   PORT = IBV_QP_PORT, ACC = IBV_QP_ACCESS_FLAGS, QKEY = IBV_QP_QKEY,
                   AV = IBV_QP_AV, MTU = IBV_QP_PATH_MTU, DQPN = IBV_QP_DEST_QPN,
                   RQPSN = IBV_QP_RQ_PSN, SQPSN = IBV_QP_SQ_PSN, DRD = IBV_QP_MAX_DEST_RD_ATOMIC,
                   RD = IBV_QP_MAX_QP_RD_ATOMIC, RNRT = IBV_QP_MIN_RNR_TIMER, TMO = IBV_QP_TIMEOUT,
                   RETRY = IBV_QP_RETRY_CNT, RNR = IBV_QP_RNR_RETRY, ALT = IBV_QP_ALT_PATH,
                   MIG = IBV_QP_PATH_MIG_STATE, SQD_NOTIFY = IBV_QP_EN_SQD_ASYNC_NOTIFY;

Masks lookup(int t, uint32_t cur, uint32_t next) {
  const bool ini = t == kXrcIni, tgt = t == kXrcTgt;
  const bool rc = t == kRc, uc = t == kUc, ud = t == kUd;
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return {true, S, 0};  // from any state
  switch (cur) {
    case IBV_QPS_RESET:
      if (next == IBV_QPS_INIT) return {true, S | PKEY | PORT | (ud ? QKEY : ACC), 0};
      break;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) return {true, 0, PKEY | PORT | (ud ? QKEY : ACC)};
      if (next == IBV_QPS_RTR) {
        if (rc || tgt) return {true, S | AV | MTU | DQPN | RQPSN | DRD | RNRT, ALT | ACC | PKEY};
        if (uc || ini) return {true, S | AV | MTU | DQPN | RQPSN, ALT | ACC | PKEY};
        return {true, S, PKEY | QKEY};
      }
      break;
    case IBV_QPS_RTR:
      if (next == IBV_QPS_RTS) {
        if (rc) return {true, S | SQPSN | TMO | RETRY | RNR | RD, CUR | ALT | ACC | RNRT | MIG};
        if (ini) return {true, S | SQPSN | TMO | RETRY | RNR | RD, CUR | ALT | ACC | MIG};
        if (tgt) return {true, S | SQPSN | TMO, CUR | ALT | ACC | RNRT | MIG};
        if (uc) return {true, S | SQPSN, CUR | ALT | ACC | MIG};
        return {true, S | SQPSN, CUR | QKEY};
      }
      break;
    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS) {
        if (rc || tgt) return {true, 0, CUR | ACC | ALT | MIG | RNRT};
        if (uc || ini) return {true, 0, CUR | ACC | ALT | MIG};
        return {true, 0, CUR | QKEY};
      }
      if (next == IBV_QPS_SQD) return {true, S, SQD_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (next == IBV_QPS_RTS) {
        if (rc || tgt) return {true, S, CUR | ACC | ALT | MIG | RNRT};
        if (uc || ini) return {true, S, CUR | ACC | ALT | MIG};
        return {true, S, CUR | QKEY};
      }
      if (next == IBV_QPS_SQD) {
        if (rc)
          return {true, 0,
                  PKEY | PORT | ACC | AV | RD | DRD | RNRT | TMO | RETRY | RNR | ALT | MIG};
        if (ini) return {true, 0, PKEY | PORT | ACC | AV | RD | TMO | RETRY | RNR | ALT | MIG};
        if (tgt) return {true, 0, PKEY | PORT | ACC | AV | DRD | RNRT | TMO | ALT | MIG};
        if (uc) return {true, 0, PKEY | ACC | AV | ALT | MIG};
        return {true, 0, PKEY | QKEY};
      }
      break;
    case IBV_QPS_SQE:
      if (next == IBV_QPS_RTS && (uc || ud)) return {true, S, CUR | (uc ? ACC : QKEY)};
      break;
    default:
      break;
  }
  return {false, 0, 0};
}

}  // namespace

int check_qp_transition(uint32_t qp_type, uint32_t cur_state, uint32_t next_state,
                        uint32_t attr_mask) {
  int t = type_index(qp_type);
  if (t < 0 || cur_state > IBV_QPS_ERR || next_state > IBV_QPS_ERR) return EINVAL;
  Masks m = lookup(t, cur_state, next_state);
  if (!m.valid) return EINVAL;
  // The state bit is implied when the state changes; the tables list it as required.
  uint32_t mask = attr_mask | (cur_state != next_state ? S : 0);
  if ((mask & m.required) != m.required) return EINVAL;
  if (mask & ~(m.required | m.optional | S)) return EINVAL;
  return 0;
}

}  // namespace vrnic
