// The control protocol between the provider (and vrnicctl) and vrnicd: the NIC's command
// interface. One request, one response, each a SOCK_SEQPACKET message made of a MsgHeader and
// a fixed body; file descriptors (shared memory, event pipes) ride along as SCM_RIGHTS.
// Versioned: a client and a daemon of different kProtocolVersion refuse each other at Hello.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vrnic/counters.h"
#include "vrnic/quotas.h"

namespace vrnic::ctl {

inline constexpr uint32_t kMagic = 0x76726e63;  // "vrnc"
inline constexpr uint32_t kProtocolVersion = 21;
inline constexpr size_t kMaxMessageBytes = 8192;
inline constexpr uint32_t kMaxFdsPerMessage = 64;

enum class Op : uint16_t {
  kHello = 1,
  kAllocPd,
  kDeallocPd,
  kRegMr,
  kDeregMr,
  kCreateChannel,
  kDestroyChannel,
  kCreateCq,
  kDestroyCq,
  kCreateQp,
  kModifyQp,
  kQueryQp,
  kDestroyQp,
  kCreateAh,
  kDestroyAh,
  kStats,
  kCreateSrq,
  kModifySrq,
  kQuerySrq,
  kDestroySrq,
  kAllocNullMr,
  kAllocMw,
  kDeallocMw,
  kResizeCq,
  kSetFaults,
  kListQps,
  kMoveQp,
  kListDevices,
  // rdma_cm (librdmacm.so.1 <-> vrnicd's connection manager, control/cm_service.h). Any
  // connection may send them (no Hello): the ids and channels it makes are its own.
  kCmCreateChannel,
  kCmDestroyChannel,
  kCmCreateId,
  kCmDestroyId,
  kCmBind,
  kCmListen,
  kCmConnect,
  kCmAccept,
  kCmReject,
  kCmEstablish,
  kCmDisconnect,
  kCmMigrate,
  kSetEce,
  // Device memory (ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr).
  kAllocDm,
  kFreeDm,
  kRegDmMr,
  // ibv_attach_mcast, ibv_detach_mcast.
  kAttachMcast,
  kDetachMcast,
  // ibv_open_xrcd, ibv_close_xrcd.
  kOpenXrcd,
  kCloseXrcd,
  kOpenQp,  // ibv_open_qp
  // ibv_import_device (a new connection speaking for the session whose socket it is given),
  // ibv_import_pd, ibv_import_mr.
  kImportDevice,
  kImportPd,
  kImportMr,
  kImportDm,  // ibv_import_dm: a HandleReq, answered with an ImportDmResp and the DM's memfd
  // vrnicctl capture: a CaptureReq, answered with a CaptureResp and the rings' memfd
  // (vrnic/capture_ring.h); the capture runs until kCaptureStop or the connection closes.
  kCaptureStart,
  kCaptureStop,
};
// The last op (tests/fuzz/ctl_fuzz.cpp sends every op up to it).
inline constexpr Op kLastOp = Op::kCaptureStop;

struct MsgHeader {
  uint32_t magic;
  uint16_t op;      // Op
  uint16_t nfds;    // descriptors attached
  uint32_t length;  // body bytes after this header
  int32_t status;   // responses: 0 or a positive errno
};

inline constexpr uint32_t kGidTableLen = 16;

struct GidEntry {
  uint8_t gid[16];
  uint32_t type;  // enum ibv_gid_type_sysfs values: 0 IB/RoCEv1, 1 RoCEv2; 0xff = empty slot
  // The kernel interface that holds the GID's address (ibv_query_gid_ex's ndev_ifindex),
  // 0 if none does (a dpdk port's address, or one no interface's prefix covers).
  uint32_t ndev_ifindex;
};
inline constexpr uint32_t kGidEmpty = 0xff;

// What the provider needs to answer ibv_query_device/_port/_gid locally.
struct DeviceInfo {
  char name[64];
  uint64_t node_guid;
  uint64_t sys_image_guid;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  uint32_t max_qp;
  uint32_t max_qp_wr;
  uint32_t max_sge;
  uint32_t max_cq;
  uint32_t max_cqe;
  uint32_t max_mr;
  uint32_t max_pd;
  uint32_t max_qp_rd_atom;
  uint32_t max_ah;
  uint32_t max_inline;
  uint32_t max_srq;
  uint32_t max_srq_wr;
  uint32_t max_mw;
  uint64_t max_mr_size;
  uint64_t max_dm_size;  // the largest ibv_alloc_dm
  uint32_t max_mcast_grp;
  uint32_t max_mcast_qp_attach;
  uint32_t max_total_mcast_qp_attach;
  uint32_t reserved_mcast;
  char fw_ver[64];
  // port 1
  uint32_t port_state;       // enum ibv_port_state
  uint32_t port_max_mtu;     // enum ibv_mtu
  uint32_t port_active_mtu;  // enum ibv_mtu
  uint32_t active_speed;
  uint32_t active_width;
  uint32_t num_workers;
  GidEntry gids[kGidTableLen];
};

struct HelloReq {
  uint32_t version;
  uint32_t reserved;
};  // fds: [0] write end of the async-event pipe, [1] (optional) the client's /proc/self/mem
struct HelloResp {
  uint32_t version;
  uint32_t session_id;
  DeviceInfo device;
  uint32_t directory;  // 1: the user's direct-path directory follows the eventfd
  uint32_t reserved;
};  // fds: [0] session memfd, [1] daemon memfd, [2] the session's wake eventfd (written when
    // a worker sleeps), then, with `directory`, the caller's user's directory entries
    // (read-only) and poster cells (vrnic/direct_directory.h)

struct HandleReq {
  uint32_t handle;
  uint32_t reserved;
};

// kImportDevice: the request is a HelloReq and the response a HelloResp (its fds as Hello's);
// fds: [0] write end of the importer's async-event pipe, [1] the exported context's cmd_fd
// (the client end of its session's socket). kImportMr: a HandleReq, answered with this.
struct ImportMrResp {
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
  uint32_t reserved;
  uint64_t length;
};
struct HandleResp {
  uint32_t handle;
  uint32_t reserved;
};

// How vrnicd reaches one piece of a registered range: through a memfd the provider shares
// (zero copy) or, where pages could not be shared safely, through process_vm_readv/writev.
enum class PieceKind : uint32_t { kMemfd = 1, kProcessVm = 2 };
struct MrPiece {
  uint64_t va;  // start of the piece in the client's address space
  uint64_t length;
  uint64_t fd_offset;  // kMemfd: offset of va within the memfd
  uint32_t kind;       // PieceKind
  uint32_t fd_index;   // kMemfd: index into the attached descriptors
  int32_t client_fd;   // kMemfd: the memfd's number in the client, for the direct path's
                       // directory (checked against the inode vrnicd was given), or -1
  uint32_t reserved;
};
inline constexpr uint32_t kMaxMrPieces = 128;

struct RegMrReq {
  uint32_t pd;
  uint32_t access;  // enum ibv_access_flags
  uint64_t addr;
  uint64_t length;
  uint64_t iova;
  uint32_t npieces;
  // ibv_rereg_mr: the handle of the region this registration replaces in place (same
  // handle and keys, as rxe and mlx5 keep them); 0 for a new region.
  uint32_t replaces;
  // 1: the last descriptor is the registering process's /proc/self/mem, for its pieces not
  // in a memfd -- a child of fork() using its parent's context registers its own memory,
  // not the parent's; 0: the session's (its Hello's) serves.
  uint32_t own_mem;
  uint32_t reserved;
  MrPiece pieces[kMaxMrPieces];
};
struct RegMrResp {
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
  uint32_t reserved;
};

// Device memory: vrnicd's own memory, a sealed memfd both sides map. The response carries it.
struct AllocDmReq {
  uint64_t length;
  uint32_t log_align_req;
  uint32_t comp_mask;
};
struct AllocDmResp {
  uint32_t handle;
  uint32_t reserved;
  uint64_t map_length;  // the memfd's size: length rounded up to pages
};  // fds: [0] the memfd
struct ImportDmResp {
  uint32_t handle;
  uint32_t reserved;
  uint64_t length;      // as allocated
  uint64_t map_length;  // the memfd's size
};  // fds: [0] the memfd
// ibv_reg_dm_mr: [offset, offset + length) of a DM, zero based (the MR's IOVA 0 is offset).
struct RegDmMrReq {
  uint32_t pd;
  uint32_t dm;
  uint64_t offset;
  uint64_t length;
  uint32_t access;
  // The DM's memfd in the client (its fd number, kept open), for the direct path's peers;
  // -1 if it is not kept.
  int32_t client_fd;
};

struct McastReq {
  uint32_t qp;  // a UD QP's handle
  uint16_t lid;  // (RoCE has no LIDs: not used)
  uint16_t reserved;
  uint8_t gid[16];  // a multicast GID (dataplane/multicast.h)
};

struct AllocMwReq {
  uint32_t pd;
  uint32_t type;  // enum ibv_mw_type
};
struct AllocMwResp {
  uint32_t handle;
  uint32_t rkey;
};

struct CreateChannelReq {
  uint32_t reserved[2];
};  // fds: [0] the end vrnicd writes of the event channel (ctl::make_event_channel)

struct CreateCqReq {
  uint32_t cqe;
  uint32_t channel;  // 0: none
  uint64_t cookie;   // echoed in completion events
  uint32_t flags;    // kCqStamped: each completion's time (shm::cq_stamps), kept by a resize
  uint32_t reserved;
};
inline constexpr uint32_t kCqStamped = 1;
struct ResizeCqReq {
  uint32_t handle;
  uint32_t cqe;
};
struct CreateCqResp {
  uint32_t handle;
  uint32_t slots;
};  // fds: [0] CQ memfd (also the response to kResizeCq: the new ring)

struct QpCaps {
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
  uint32_t reserved;
};

struct CreateQpReq {
  uint32_t pd;       // (an XRC target QP has none)
  uint32_t send_cq;  // (an XRC target QP has none; an initiator no receive CQ)
  uint32_t recv_cq;
  uint32_t qp_type;  // enum ibv_qp_type
  uint32_t sq_sig_all;
  uint32_t srq;     // 0: the QP has its own receive queue
  uint64_t cookie;  // echoed in async events
  QpCaps caps;
  uint32_t xrcd;  // an XRC target QP: the handle of the XRC domain it is in (kOpenXrcd's)
  uint32_t reserved;
};
struct CreateQpResp {
  uint32_t handle;
  uint32_t qpn;
  uint32_t sq_slots;
  uint32_t rq_slots;
  uint32_t worker;
  uint32_t ring_chunk;  // the QP's memory: this chunk of the session's ring arena ...
  QpCaps caps;
  uint64_t ring_offset;       // ... from here (qp_region_bytes(sq_slots, rq_slots) of it)
  uint64_t ring_chunk_bytes;  // the chunk's size, to map it the first time
};  // fds: [0] the chunk's memfd (mapped once per chunk)

struct AddressVector {
  uint8_t dgid[16];
  uint32_t flow_label;
  uint16_t dlid;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
  uint8_t sl;
  uint8_t port_num;
  uint8_t is_global;
  uint8_t static_rate;
  uint8_t src_path_bits;
  uint8_t reserved[2];
};

// The ibv_qp_attr fields vrnic keeps, in a layout of its own.
struct QpAttrWire {
  uint32_t qp_state;
  uint32_t cur_qp_state;
  uint32_t path_mtu;
  uint32_t qkey;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t dest_qp_num;
  uint32_t qp_access_flags;
  uint16_t pkey_index;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t sq_draining;
  uint8_t en_sqd_async_notify;
  uint8_t reserved;
  AddressVector ah;
  QpCaps cap;
};

struct ModifyQpReq {
  uint32_t handle;
  uint32_t attr_mask;  // enum ibv_qp_attr_mask
  QpAttrWire attr;
};
struct QueryQpResp {
  QpAttrWire attr;
};
// ibv_set_ece: the ECE options (vrnic/ece.h) the QP is to run with from now on; the reply says
// which of them it took (those vrnic knows).
struct SetEceReq {
  uint32_t handle;
  uint32_t options;
};
struct SetEceResp {
  uint32_t options;
};

struct SrqAttrWire {
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit;
  uint32_t reserved;
};
struct CreateSrqReq {
  uint32_t pd;
  uint32_t srq_type;  // enum ibv_srq_type: IBV_SRQT_BASIC or IBV_SRQT_XRC
  uint64_t cookie;    // echoed in SRQ limit events
  SrqAttrWire attr;
  uint32_t xrcd;  // XRC: the handle of its XRC domain (kOpenXrcd's)
  uint32_t cq;    // XRC: the CQ its receive completions go to
};
// ibv_open_qp: a handle of this session's for an XRC target QP of a domain it has open (the
// QP another session made). Answered with a HandleResp.
struct OpenQpReq {
  uint32_t xrcd;  // kOpenXrcd's handle
  uint32_t qpn;
  uint64_t cookie;  // this session's ibv_qp, echoed in its events
};
// ibv_open_xrcd. With one descriptor attached, the XRC domain of that file (its inode), shared
// by everyone who opens it (O_CREAT makes it if none is open, O_EXCL refuses one that is);
// with none, a domain of its own. Answered with a HandleResp.
struct OpenXrcdReq {
  uint32_t oflags;
  uint32_t reserved;
};
struct CreateSrqResp {
  uint32_t handle;
  uint32_t slots;
  SrqAttrWire attr;  // what was granted
};                   // fds: [0] SRQ memfd
struct ModifySrqReq {
  uint32_t handle;
  uint32_t attr_mask;  // enum ibv_srq_attr_mask
  SrqAttrWire attr;
};
struct QuerySrqResp {
  SrqAttrWire attr;
};

struct CreateAhReq {
  uint32_t pd;
  uint32_t reserved;
  AddressVector av;
};

// Fault injection on the wire port's receive path, as vrnicd's --faults takes it:
// "loss=1,dup=0.5,reorder=5,corrupt=1,delay_us=100,seed=7" (rates in percent); "" clears.
struct SetFaultsReq {
  char spec[200];
};

// vrnicctl move: QP qpn to worker (EINVAL: no such QP or worker).
struct MoveQpReq {
  uint32_t qpn;
  uint32_t worker;
};

// The devices (virtual NICs) of a vrnicd, as any of its sockets answers kListDevices (no
// Hello needed): each has its own socket, port, addresses and GID table. Device 0 listens on
// the socket clients find by default.
inline constexpr uint32_t kMaxDevices = 8;
inline constexpr size_t kSocketPathBytes = 108;  // sockaddr_un's sun_path
struct DeviceListEntry {
  char name[64];
  char socket[kSocketPathBytes];
  uint32_t daemon_pid;
  uint64_t node_guid;
};
// DeviceListResp::flags
inline constexpr uint32_t kDaemonAutostarted = 1;      // a client library started it
inline constexpr uint32_t kDaemonSocketActivated = 2;  // systemd passed it its socket
struct DeviceListResp {
  uint32_t count;
  uint32_t flags;
  DeviceListEntry devices[kMaxDevices];
};

struct StatsResp {
  uint32_t sessions;
  uint32_t pds;
  uint32_t mrs;
  uint32_t cqs;
  uint32_t qps;
  uint32_t ahs;
  uint32_t channels;
  uint32_t srqs;
  uint32_t mws;
  uint32_t reserved;
  uint64_t transport[kTransportCounterCount];  // the device's (TransportCounter)
  uint64_t port[kPortCounterCount];            // the wire ports' (PortCounter; zero without one)
  uint64_t faults_dropped;
  uint64_t faults_duplicated;
  uint64_t faults_reordered;
  uint64_t faults_corrupted;
  uint64_t faults_delayed;
  uint64_t wire_link_up;  // 1 up, 0 down (1 without a wire port)
  uint64_t qp_moves;      // QPs moved between workers (rebalancing and vrnicctl move)
  uint64_t worker_stops;   // every worker stopped for the control thread (execute_all)
  uint64_t grace_periods;  // waited for with no worker stopped (freeing what left a table)
  uint64_t workers;
  uint64_t direct_path;  // 1: clients may run WRs between their own QPs (not --no-direct-path)
  uint64_t selective_repeat;  // 1: sequence NAKs say what is held (--selective-repeat)
  // The most doorbell cells one user's sessions took in one look of a worker, of all the
  // workers (dataplane/doorbell_budget.h): never past its budget per user per look.
  uint64_t doorbell_user_look_max;
  // The asking user's account (control/quota.h), by vrnic/quotas.h's kinds: what it holds,
  // what it may hold, and how many of its requests a quota refused.
  uint64_t user_uid;
  uint64_t user_used[kQuotaCount];
  uint64_t user_limit[kQuotaCount];
  uint64_t user_quota_refusals;
  // rdma_cm (control/cm_service.h): ids, listening ids, CM connections (and SIDR requests)
  // open, and QP1's MADs.
  uint64_t cm_ids;
  uint64_t cm_listeners;
  uint64_t cm_connections;
  uint64_t cm_mads_sent;
  uint64_t cm_mads_received;
  uint64_t cm_mads_dropped;  // malformed, unsolicited, or no MAD at all
  uint64_t cm_mads_resent;   // CM retries after a response timeout
  // Multicast (control/multicast.cpp): groups with a QP attached, and attachments.
  uint64_t mcast_groups;
  uint64_t mcast_attached;
};

// vrnicctl capture (kCaptureStart): one at a time per device (EBUSY), vrnicd's own user and
// root only (it shows everyone's data).
inline constexpr uint32_t kCaptureAnyQp = ~0u;
struct CaptureReq {
  uint32_t qpn;  // only this QP's packets, sent or received (kCaptureAnyQp: all)
  uint32_t reserved;
};
struct CaptureResp {
  uint32_t workers;     // rings in the region, one per worker
  uint32_t ring_bytes;  // capture::kRingBytes, as vrnicd has it
  uint64_t region_bytes;
};

// Per-QP state and counters, a page at a time (vrnicctl qps).
struct ListQpsReq {
  uint32_t start;  // QP handle to start from (0: the first)
  uint32_t session;  // only this session's QPs (0: any)
  uint32_t state;    // only QPs in this state, enum ibv_qp_state + 1 (0: any)
  uint32_t reserved;
};
// Where a QP's transport stands: enough to tell from outside why it is not moving.
struct QpTransportState {
  uint32_t sq_psn;        // next PSN the requester sends
  uint32_t acked_psn;     // last PSN the peer acknowledged
  uint32_t rq_psn;        // next PSN the responder expects
  uint32_t window;        // unacknowledged PSNs the requester may have out
  uint32_t wqes_started;  // send WQEs started and not yet retired
  uint32_t wqes_unsent;   // send WQEs posted and not yet (re)sent
  uint32_t rd_atomic;     // reads/atomics awaiting their answer
  uint32_t responses;     // reads/atomics the responder still has to answer
  uint32_t ack_timer_us;  // until the local ACK timeout; 0: not armed
  uint32_t rnr_timer_us;  // until the RNR pause ends; 0: not paused
  uint8_t retry_left;
  uint8_t rnr_left;
  uint8_t nak_sent;  // the responder waits for the PSN it NAKed
  uint8_t probes;    // probes in a row without progress
  // The window the QP shares with its worker's other RC QPs to the same peer
  // (dataplane/peer_window.h); all 0 when it has none (not RC, not in RTS, a local peer).
  uint32_t peer_window;     // packets it allows out
  uint32_t peer_in_flight;  // packets out, all those QPs together
  uint32_t srtt_us;         // smoothed round trip to the peer; 0: not measured yet
  uint32_t probe_timer_us;  // until this QP's probe; 0: not armed
  uint8_t selective_repeat;  // its NAKs carry a Sack (ECE, or the device's default)
  uint8_t ece_set;           // ibv_set_ece (rdma_cm) chose; else the device's default holds
  uint8_t reserved[2];
};
struct QpEntry {
  uint32_t qpn;
  uint32_t type;   // enum ibv_qp_type
  uint32_t state;  // enum ibv_qp_state
  uint32_t session;
  uint64_t counters[kTransportCounterCount];
  QpTransportState transport;
  uint32_t worker;  // the worker thread that runs it
  uint32_t reserved;
};
struct ListQpsResp {
  static constexpr uint32_t kMaxEntries = 32;
  uint32_t count;
  uint32_t next;  // handle to ask for next, 0 when done
  QpEntry entries[kMaxEntries];
};
static_assert(sizeof(ListQpsResp) <= kMaxMessageBytes);

// ---- rdma_cm ----
// An rdma_cm address as vrnicd keeps it: the IP address GID-shaped (IPv4 mapped, ::ffff:a.b.c.d)
// and the port (host order).
struct CmAddress {
  uint8_t gid[16];
  uint16_t port;
  uint16_t reserved[3];
};
// What an address is, as the kernel's CM tells them apart (cma_zero_addr, cma_loopback_addr).
inline bool cm_ipv4_mapped(const uint8_t gid[16]) {
  for (int i = 0; i < 10; i++)
    if (gid[i]) return false;
  return gid[10] == 0xff && gid[11] == 0xff;
}
inline bool cm_wildcard(const uint8_t gid[16]) {  // :: or 0.0.0.0
  uint8_t any = 0;
  for (int i = cm_ipv4_mapped(gid) ? 12 : 0; i < 16; i++) any |= gid[i];
  return any == 0;
}
inline bool cm_loopback(const uint8_t gid[16]) {  // ::1 or 127.0.0.0/8
  if (cm_ipv4_mapped(gid)) return gid[12] == 127;
  for (int i = 0; i < 15; i++)
    if (gid[i]) return false;
  return gid[15] == 1;
}
// enum rdma_cm_event_type, as <rdma/rdma_cma.h> numbers it (checked there by the library).
enum CmEvent : uint32_t {
  kCmAddrResolved = 0,
  kCmAddrError = 1,
  kCmRouteResolved = 2,
  kCmRouteError = 3,
  kCmConnectRequest = 4,
  kCmConnectResponse = 5,
  kCmConnectError = 6,
  kCmUnreachable = 7,
  kCmRejected = 8,
  kCmEstablished = 9,
  kCmDisconnected = 10,
  kCmTimewaitExit = 15,
};
// One side's parameters of a connection (rdma_conn_param, rdma_ud_param) and the private data.
struct CmConnParams {
  uint32_t qp_num;
  uint32_t starting_psn;  // the PSN this side receives from (the peer's sq_psn)
  uint32_t qkey;          // UD
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t flow_control;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t srq;
  uint8_t path_mtu;  // enum ibv_mtu
  uint8_t reserved;
  // ECE (vrnic/ece.h): the REQ's or REP's vendor ID (0: none) and options (the MAD's
  // attribute modifier).
  uint32_t ece_vendor_id;
  uint32_t ece_options;
  uint32_t private_data_len;
  uint8_t private_data[256];
};
struct CmCreateIdReq {
  uint32_t channel;
  uint16_t port_space;  // enum rdma_port_space
  uint8_t qp_type;      // enum ibv_qp_type
  uint8_t reserved;
  uint64_t cookie;  // the library's rdma_cm_id, echoed in its events
};
struct CmBindReq {
  uint32_t id;
  uint32_t flags;  // kCmBindAfOnly
  CmAddress addr;  // port 0: vrnicd picks one
};
// RDMA_OPTION_ID_AFONLY: a wildcard of the address's family only, so that an IPv4 and an
// IPv6 wildcard id may both be at one port (each taking its family's requests).
inline constexpr uint32_t kCmBindAfOnly = 1;
struct CmBindResp {
  CmAddress addr;
};
struct CmListenReq {
  uint32_t id;
  uint32_t backlog;
};
struct CmConnectReq {
  uint32_t id;
  uint32_t reserved;
  CmAddress dst;
  // The source rdma_resolve_addr chose, for an id bound to a wildcard (one of the device's
  // GIDs); an id bound to an address has its own.
  CmAddress src;
  CmConnParams p;  // ours; private_data is the application's (vrnicd adds the IP header)
};
// QP transitions vrnicd makes for the library in the same call as a CM message, just before
// it: rdma_accept's RTR and RTS before the REP, a CONNECT_RESPONSE's RTR and RTS before the
// RTU, rdma_disconnect's ERR before the DREQ. rdma-core's library makes each of them with an
// ibv_modify_qp of its own just before; here one control call does what took three. The QP
// is named by its QPN and must belong to the calling process (a session of the same pid and
// uid): it was made through the provider's connection to vrnicd, not the library's.
inline constexpr uint32_t kMaxCmQpSteps = 2;
struct CmQpSteps {
  uint32_t qpn;
  uint32_t count;  // 0 (nothing to do) .. kMaxCmQpSteps, made in order
  struct Step {
    uint32_t attr_mask;  // enum ibv_qp_attr_mask, as for kModifyQp
    uint32_t reserved;
    QpAttrWire attr;
  } steps[kMaxCmQpSteps];
};
struct CmAcceptReq {
  uint32_t id;
  uint32_t reserved;
  CmConnParams p;
  CmQpSteps qp;
};
// kCmEstablish and kCmDisconnect.
struct CmIdStepsReq {
  uint32_t id;
  uint32_t reserved;
  CmQpSteps qp;
};
struct CmRejectReq {
  uint32_t id;
  uint32_t private_data_len;
  uint8_t private_data[256];
  // 0: consumer defined (rdma_reject); cm::kRejVendorOptionNotSupported (rdma_reject_ece).
  uint32_t reason;
};
// rdma_migrate_id; also how the library names the id vrnicd made for a CONNECT_REQUEST.
struct CmMigrateReq {
  uint32_t id;
  uint32_t channel;
  uint64_t cookie;  // 0: unchanged
};
// kCmCreateChannel: a CreateChannelReq with the end vrnicd writes of the event channel
// (ctl::make_event_channel); HandleResp.
// kCmDestroyChannel, kCmDestroyId: a HandleReq.

// What vrnicd (and the library, for address and route resolution) writes into a channel's
// pipe: one record per event, read whole by rdma_get_cm_event.
struct CmEventRecord {
  uint32_t event;  // CmEvent
  int32_t status;  // 0, a REJ reason (kCmRejected), a SIDR_REP status or a negative errno
  uint32_t id;     // the id it is for (kCmConnectRequest: the new one)
  uint32_t listen_id;
  uint64_t cookie;  // the library's rdma_cm_id of `id` (kCmConnectRequest: the listener's)
  CmAddress local, peer;
  CmConnParams p;  // the peer's side, seen from ours (its QPN, its PSN, ...)
};
static_assert(sizeof(CmEventRecord) <= 512);  // well under PIPE_BUF: written whole

// Records written by vrnicd into a completion channel's pipe or the async-event pipe.
struct EventRecord {
  uint32_t type;  // kCompletion, or enum ibv_event_type for async events
  uint32_t reserved;
  uint64_t cookie;  // the provider's object (CQ for completions; QP/CQ for async events)
};
inline constexpr uint32_t kEventCompletion = 0xffffffffu;

}  // namespace vrnic::ctl
