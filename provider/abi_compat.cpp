// The parts of the libibverbs ABI that vrnic does not implement as a device: the pure helpers
// (enum-to-string and rate conversions), clean failures for verbs a software RoCE NIC does not
// offer, the pre-1.1 compatibility entry points, and the driver-private IBVERBS_PRIVATE_34
// interface that the distribution's provider libraries import.
//
// Symbol versions come from provider/libibverbs.map; the non-default (compat) versions are bound
// here with .symver. tests/abi_check.sh compares the exported set with the system libibverbs.

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "export.h"

namespace {

// Unsupported entry points report EOPNOTSUPP in errno and, in their return value, the way their
// signature reports errors.
std::nullptr_t FailNull() {
  errno = EOPNOTSUPP;
  return nullptr;
}

// int-returning verbs return a positive errno value (rdma-core convention).
int FailErrno() {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

// The few calls documented as "-1 and errno" (event readers, sysfs readers, query_gid/pkey).
int FailMinusOne() {
  errno = EOPNOTSUPP;
  return -1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Enum-to-string helpers. The texts are rdma-core 44's (programs print and sometimes compare
// them; tests/api_test.cpp checks them against the system library's). Switches without a
// default so that -Wswitch flags any enumerator that a newer verbs.h adds; values outside
// the enum fall through to "unknown".

extern "C" VRNIC_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_MW_BIND_ERR:
      return "memory management operation error";
    case IBV_WC_BAD_RESP_ERR:
      return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR:
      return "local access error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    case IBV_WC_LOC_RDD_VIOL_ERR:
      return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR:
      return "aborted error";
    case IBV_WC_INV_EECN_ERR:
      return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR:
      return "invalid EE context state";
    case IBV_WC_FATAL_ERR:
      return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "response timeout error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
    case IBV_WC_TM_ERR:
      return "TM error";
    case IBV_WC_TM_RNDV_INCOMPLETE:
      return "TM software rendezvous";
  }
  return "unknown";
}

extern "C" VRNIC_EXPORT const char *ibv_event_type_str(enum ibv_event_type event) {
  switch (event) {
    case IBV_EVENT_CQ_ERR:
      return "CQ error";
    case IBV_EVENT_QP_FATAL:
      return "local work queue catastrophic error";
    case IBV_EVENT_QP_REQ_ERR:
      return "invalid request local work queue error";
    case IBV_EVENT_QP_ACCESS_ERR:
      return "local access violation work queue error";
    case IBV_EVENT_COMM_EST:
      return "communication established";
    case IBV_EVENT_SQ_DRAINED:
      return "send queue drained";
    case IBV_EVENT_PATH_MIG:
      return "path migrated";
    case IBV_EVENT_PATH_MIG_ERR:
      return "path migration request error";
    case IBV_EVENT_DEVICE_FATAL:
      return "local catastrophic error";
    case IBV_EVENT_PORT_ACTIVE:
      return "port active";
    case IBV_EVENT_PORT_ERR:
      return "port error";
    case IBV_EVENT_LID_CHANGE:
      return "LID change";
    case IBV_EVENT_PKEY_CHANGE:
      return "P_Key change";
    case IBV_EVENT_SM_CHANGE:
      return "SM change";
    case IBV_EVENT_SRQ_ERR:
      return "SRQ catastrophic error";
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return "SRQ limit reached";
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return "last WQE reached";
    case IBV_EVENT_CLIENT_REREGISTER:
      return "client reregistration";
    case IBV_EVENT_GID_CHANGE:
      return "GID table change";
    case IBV_EVENT_WQ_FATAL:
      return "WQ fatal";
  }
  return "unknown";
}

extern "C" VRNIC_EXPORT const char *ibv_node_type_str(enum ibv_node_type node_type) {
  switch (node_type) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    case IBV_NODE_UNKNOWN:
      break;
  }
  return "unknown";
}

// Port states are printed by tools such as ibv_devinfo; the customary spelling is the
// enumerator name without its IBV_ prefix.
extern "C" VRNIC_EXPORT const char *ibv_port_state_str(enum ibv_port_state port_state) {
  switch (port_state) {
    case IBV_PORT_NOP:
      return "no state change (NOP)";
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active defer";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// Rate conversions. Unknown inputs: -1 from the *_to_mult/_to_mbps direction, IBV_RATE_MAX
// (i.e. "no specific rate") from the *_to_ibv_rate direction. mbps_to_ibv_rate only accepts the
// exact values that ibv_rate_to_mbps produces.

namespace {

struct RateInfo {
  enum ibv_rate rate;
  int mult;  // multiple of 2.5 Gb/s, or -1 when the rate is not a whole multiple of it
  int mbps;
};

// Up to 120 Gb/s (SDR/DDR/QDR links) the names are exact. From FDR on, Mb/s is the link's
// signalling rate, lanes x lane rate, truncated: FDR 14.0625 Gb/s per lane (14/28/56/112/168 =
// 1x/2x/4x/8x/12x), EDR 25.78125 (25/100/200/300 = 1x/4x/8x/12x), HDR 53.125 (50/600 = 1x/12x),
// NDR 106.25 (400/800/1200 = 4x/8x/12x). mult is what rdma-core 44 answers: the nominal rate
// over 2.5 Gb/s where it has one (28 Gb/s is 11; the EDR rates have none).
constexpr RateInfo kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, -1, 14062},
    {IBV_RATE_56_GBPS, -1, 56250},      {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},    {IBV_RATE_25_GBPS, -1, 25781},
    {IBV_RATE_100_GBPS, -1, 103125},    {IBV_RATE_200_GBPS, -1, 206250},
    {IBV_RATE_300_GBPS, -1, 309375},    {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

const RateInfo *FindRate(enum ibv_rate rate) {
  for (const RateInfo &info : kRates) {
    if (info.rate == rate) return &info;
  }
  return nullptr;
}

}  // namespace

extern "C" VRNIC_EXPORT int ibv_rate_to_mult(enum ibv_rate rate) {
  const RateInfo *info = FindRate(rate);
  return info != nullptr ? info->mult : -1;
}

extern "C" VRNIC_EXPORT enum ibv_rate mult_to_ibv_rate(int mult) {
  if (mult <= 0) return IBV_RATE_MAX;
  for (const RateInfo &info : kRates) {
    if (info.mult == mult) return info.rate;
  }
  return IBV_RATE_MAX;
}

extern "C" VRNIC_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) {
  const RateInfo *info = FindRate(rate);
  return info != nullptr ? info->mbps : -1;
}

extern "C" VRNIC_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateInfo &info : kRates) {
    if (info.mbps == mbps) return info.rate;
  }
  return IBV_RATE_MAX;
}

// ---------------------------------------------------------------------------------------------
// Public verbs that vrnic does not provide (dma-buf needs hardware; the sysfs readers refer
// to kernel devices).
// Exact verbs.h signatures where verbs.h declares them.

extern "C" {

VRNIC_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *, uint64_t, size_t, uint64_t, int,
                                              int) {
  return FailNull();
}

VRNIC_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *, struct ibv_ah_attr *,
                                             uint8_t[ETHERNET_LL_SIZE], uint16_t *) {
  return FailErrno();
}

// Kernel-ABI struct converters (not in the installed headers; used by librdmacm).
// They are void, so they cannot fail visibly; they leave the destination untouched.
struct ib_uverbs_qp_attr;
struct ib_uverbs_ah_attr;
struct ib_user_path_rec;
struct ibv_sa_path_rec;

VRNIC_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *, struct ib_uverbs_qp_attr *) {}
VRNIC_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *, struct ib_uverbs_ah_attr *) {}
VRNIC_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *, struct ib_user_path_rec *) {
}
VRNIC_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *, struct ibv_sa_path_rec *) {}

// Sysfs access (not in the installed headers). There is no kernel device behind vrnic.
VRNIC_EXPORT const char *ibv_get_sysfs_path(void) {
  return FailNull();
}
VRNIC_EXPORT int ibv_read_sysfs_file(const char *, const char *, char *, size_t) {
  return FailMinusOne();
}
VRNIC_EXPORT int ibv_read_ibdev_sysfs_file(char *, size_t, const char *, const char *, ...) {
  return FailMinusOne();
}

}  // extern "C"

// ---------------------------------------------------------------------------------------------
// Non-default (compat) versions, bound with .symver: the definition is named
// vrnic_compat_<name> and the assembler directive
//   .symver vrnic_compat_<name>, <name>@<VERSION>
// gives it the versioned name <name>@<VERSION> (single '@' = not the default version). The map's
// `local: *;` then hides vrnic_compat_<name> itself. The default <name>@@<VERSION> is a different
// definition (the lead's core files, or above), bound by the map.
//
// The IBVERBS_1.0 entry points are the pre-2006 ABI, with struct layouts that no public header
// describes; only binaries linked against libibverbs 1.0 use them. Symbols carry no types, so
// the stubs take (...) and ignore their arguments.

#define VRNIC_BIND_COMPAT(name, version) \
  __asm__(".symver vrnic_compat_" #name ", " #name "@" version)

// clang-format off
#define VRNIC_COMPAT_1_0_RETURNING_POINTER(X)                                                      \
  X(ibv_get_device_list) X(ibv_get_device_name) X(ibv_open_device) X(ibv_alloc_pd) X(ibv_reg_mr)   \
  X(ibv_create_cq) X(ibv_create_srq) X(ibv_create_qp) X(ibv_create_ah)

#define VRNIC_COMPAT_1_0_RETURNING_ERRNO(X)                                                        \
  X(ibv_close_device) X(ibv_query_device) X(ibv_query_port) X(ibv_dealloc_pd) X(ibv_dereg_mr)      \
  X(ibv_resize_cq) X(ibv_destroy_cq) X(ibv_modify_srq) X(ibv_query_srq) X(ibv_destroy_srq)         \
  X(ibv_modify_qp) X(ibv_query_qp) X(ibv_destroy_qp) X(ibv_destroy_ah) X(ibv_attach_mcast)         \
  X(ibv_detach_mcast)
// clang-format on

#define VRNIC_COMPAT_1_0_RETURNING_MINUS_ONE(X) \
  X(ibv_get_async_event) X(ibv_get_cq_event) X(ibv_query_gid) X(ibv_query_pkey)

#define VRNIC_COMPAT_1_0_RETURNING_NOTHING(X) \
  X(ibv_free_device_list) X(ibv_ack_async_event) X(ibv_ack_cq_events)

#define VRNIC_DEFINE_COMPAT_1_0(name, type, body)         \
  VRNIC_BIND_COMPAT(name, "IBVERBS_1.0");                 \
  extern "C" VRNIC_EXPORT type vrnic_compat_##name(...) { \
    body;                                                 \
  }

#define VRNIC_COMPAT_POINTER(name) VRNIC_DEFINE_COMPAT_1_0(name, void *, return FailNull())
#define VRNIC_COMPAT_ERRNO(name) VRNIC_DEFINE_COMPAT_1_0(name, int, return FailErrno())
#define VRNIC_COMPAT_MINUS_ONE(name) VRNIC_DEFINE_COMPAT_1_0(name, int, return FailMinusOne())
#define VRNIC_COMPAT_NOTHING(name) VRNIC_DEFINE_COMPAT_1_0(name, void, )

VRNIC_COMPAT_1_0_RETURNING_POINTER(VRNIC_COMPAT_POINTER)
VRNIC_COMPAT_1_0_RETURNING_ERRNO(VRNIC_COMPAT_ERRNO)
VRNIC_COMPAT_1_0_RETURNING_MINUS_ONE(VRNIC_COMPAT_MINUS_ONE)
VRNIC_COMPAT_1_0_RETURNING_NOTHING(VRNIC_COMPAT_NOTHING)

// The GUID (big-endian 64 bit) has no error value; 0 is never a valid GUID.
VRNIC_BIND_COMPAT(ibv_get_device_guid, "IBVERBS_1.0");
extern "C" VRNIC_EXPORT uint64_t vrnic_compat_ibv_get_device_guid(...) {
  errno = EOPNOTSUPP;
  return 0;
}

// libibverbs 1.1's way for a provider to register itself, superseded by the private
// verbs_register_driver_*; kept only as a compat version. vrnic is the sole device, so
// registrations are ignored.
VRNIC_BIND_COMPAT(ibv_register_driver, "IBVERBS_1.1");
extern "C" VRNIC_EXPORT void vrnic_compat_ibv_register_driver(const char *, void *) {}

// ---------------------------------------------------------------------------------------------
// IBVERBS_PRIVATE_34: the interface between libibverbs and its provider drivers. vrnic is its
// own (only) provider, so none of this is used internally; it exists because the distribution's
// provider libraries (libmlx5.so.1, libefa.so.1, which e.g. perftest links directly) import
// these symbols and are loaded with BIND_NOW: a missing one stops the program before main().
// Their constructors call verbs_register_driver_34, so that must succeed silently; after that
// no device ever reaches those drivers, and everything else only needs to fail cleanly.
// Prototypes live in rdma-core's uninstalled driver.h; the driver-side structs stay opaque.
// (ibv_query_gid_type is also in this node but is a real verb, implemented with the core.)

struct verbs_device_ops;
struct verbs_context_ops;
struct ibv_command_buffer;

extern "C" {

VRNIC_EXPORT void verbs_register_driver_34(const struct verbs_device_ops *) {}
VRNIC_EXPORT void verbs_set_ops(struct verbs_context *, const struct verbs_context_ops *) {}
VRNIC_EXPORT void verbs_uninit_context(struct verbs_context *) {}
VRNIC_EXPORT void verbs_init_cq(struct ibv_cq *, struct ibv_context *, struct ibv_comp_channel *,
                                void *) {}
VRNIC_EXPORT void __verbs_log(struct verbs_context *, uint32_t, const char *, ...) {}

VRNIC_EXPORT void *_verbs_init_and_alloc_context(struct ibv_device *, int, size_t,
                                                 struct verbs_context *, uint32_t) {
  return FailNull();
}
VRNIC_EXPORT struct ibv_context *verbs_open_device(struct ibv_device *, void *) {
  return FailNull();
}

VRNIC_EXPORT int execute_ioctl(struct ibv_context *, struct ibv_command_buffer *) {
  return FailErrno();
}
// Sizes an ioctl command buffer; answering "no extra attributes" keeps any caller consistent.
VRNIC_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
                                                  struct ibv_command_buffer *) {
  return num_attrs;
}

// A data object, not a function: drivers read it as a flag (via a GOT data relocation).
VRNIC_EXPORT bool verbs_allow_disassociate_destroy = false;

}  // extern "C"

// The uverbs command wrappers drivers build their verbs from. All return an errno value.
// clang-format off
#define VRNIC_PRIVATE_CMD_VERBS(X)                                                                 \
  X(ibv_cmd_advise_mr) X(ibv_cmd_alloc_dm) X(ibv_cmd_alloc_mw) X(ibv_cmd_alloc_pd)                 \
  X(ibv_cmd_attach_mcast) X(ibv_cmd_close_xrcd) X(ibv_cmd_create_ah) X(ibv_cmd_create_counters)    \
  X(ibv_cmd_create_cq) X(ibv_cmd_create_cq_ex) X(ibv_cmd_create_flow)                              \
  X(ibv_cmd_create_flow_action_esp) X(ibv_cmd_create_qp) X(ibv_cmd_create_qp_ex)                   \
  X(ibv_cmd_create_qp_ex2) X(ibv_cmd_create_rwq_ind_table) X(ibv_cmd_create_srq)                   \
  X(ibv_cmd_create_srq_ex) X(ibv_cmd_create_wq) X(ibv_cmd_dealloc_mw) X(ibv_cmd_dealloc_pd)        \
  X(ibv_cmd_dereg_mr) X(ibv_cmd_destroy_ah) X(ibv_cmd_destroy_counters) X(ibv_cmd_destroy_cq)      \
  X(ibv_cmd_destroy_flow) X(ibv_cmd_destroy_flow_action) X(ibv_cmd_destroy_qp)                     \
  X(ibv_cmd_destroy_rwq_ind_table) X(ibv_cmd_destroy_srq) X(ibv_cmd_destroy_wq)                    \
  X(ibv_cmd_detach_mcast) X(ibv_cmd_free_dm) X(ibv_cmd_get_context) X(ibv_cmd_modify_cq)           \
  X(ibv_cmd_modify_flow_action_esp) X(ibv_cmd_modify_qp) X(ibv_cmd_modify_qp_ex)                   \
  X(ibv_cmd_modify_srq) X(ibv_cmd_modify_wq) X(ibv_cmd_open_qp) X(ibv_cmd_open_xrcd)               \
  X(ibv_cmd_poll_cq) X(ibv_cmd_post_recv) X(ibv_cmd_post_send) X(ibv_cmd_post_srq_recv)            \
  X(ibv_cmd_query_context) X(ibv_cmd_query_device_any) X(ibv_cmd_query_mr) X(ibv_cmd_query_port)   \
  X(ibv_cmd_query_qp) X(ibv_cmd_query_srq) X(ibv_cmd_read_counters) X(ibv_cmd_reg_dm_mr)           \
  X(ibv_cmd_reg_dmabuf_mr) X(ibv_cmd_reg_mr) X(ibv_cmd_req_notify_cq) X(ibv_cmd_rereg_mr)          \
  X(ibv_cmd_resize_cq)
// clang-format on

#define VRNIC_DEFINE_CMD_STUB(name)       \
  extern "C" VRNIC_EXPORT int name(...) { \
    return FailErrno();                   \
  }

VRNIC_PRIVATE_CMD_VERBS(VRNIC_DEFINE_CMD_STUB)
