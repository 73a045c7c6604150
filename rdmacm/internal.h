// The drop-in librdmacm.so.1's own state: the vrnicd connections (one per device socket, shared
// by the process), the devices rdma_get_devices gives out (opened once, with one PD each),
// event channels (a pipe vrnicd and the library both write CmEventRecords into) and ids.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "vrnic/ctl_protocol.h"

#define RDMACM_EXPORT __attribute__((visibility("default")))

namespace vrnic::rdmacm {

// One vrnicd device's control socket, for its CM commands.
struct Daemon {
  std::string socket;
  int sock = -1;
  std::mutex mu;
  // 0 or a positive errno (the reply's status, or the socket's).
  int call(ctl::Op op, const void *req, size_t len, void *resp, size_t resp_len, int pass_fd = -1);
};

struct Device {
  ibv_context *verbs = nullptr;
  ibv_pd *pd = nullptr;  // shared by every id on the device
  Daemon *daemon = nullptr;
  uint8_t active_mtu = IBV_MTU_1024;
  uint8_t max_rd_atomic = 16;
};

// The devices, opened on first use; nullptr-terminated list for rdma_get_devices.
std::vector<Device *> &devices();
// The device whose GID table holds gid (index in *gid_index), or nullptr.
Device *device_of_gid(const uint8_t gid[16], uint8_t *gid_index);

struct Channel {
  rdma_event_channel ch{};      // first: the application's pointer is ours
  int write_fd = -1;            // our own end, for the events the library raises itself
  std::atomic<int> readers{0};  // threads inside rdma_get_cm_event on it
  std::mutex mu;
  std::vector<std::pair<Daemon *, uint32_t>> handles;  // vrnicd's handle, per daemon
  // vrnicd's handle for this channel (made there on first use); 0 and errno on failure.
  uint32_t handle_on(Daemon *d);
};

struct Id {
  rdma_cm_id id{};    // first
  bool sync = false;  // made without a channel: calls wait for their own events
  Device *dev = nullptr;
  uint32_t handle = 0;  // vrnicd's, once the id is on a device
  // Bound to a wildcard address with several devices: the id's twins on the other devices
  // (vrnicd's handle there, bound to the same port), so that a listen covers every device, as
  // the kernel's does; resolving an address then keeps the source device's one alone.
  std::vector<std::pair<Device *, uint32_t>> twins;
  uint8_t gid_index = 0;
  uint8_t tos = 0;
  uint8_t ack_timeout = 14;  // the QP's local ACK timeout (RDMA_OPTION_ID_ACK_TIMEOUT)
  bool ack_timeout_set = false;
  bool afonly = false;  // RDMA_OPTION_ID_AFONLY
  uint32_t psn = 0;            // the PSN our QP receives from (sent in the REQ or REP)
  ctl::CmConnParams remote{};  // the peer's, from CONNECT_REQUEST or CONNECT_RESPONSE
  bool passive = false;        // made for a CONNECT_REQUEST
  ibv_ece local_ece{};         // what our REQ or REP says (rdma_create_qp, rdma_set_local_ece)
  uint8_t responder_resources = 0, initiator_depth = 0, retry_count = 7, rnr_retry = 7;
  ibv_qp_init_attr *ep_qp_attr = nullptr;  // rdma_create_ep on a listener: for get_request
  int unacked = 0;                         // events reported and not yet acked (under mu)
  // Multicast groups joined (multicast.cpp).
  struct Group {
    sockaddr_storage addr;
    ibv_gid gid;
    void *context;
    uint32_t flags;  // enum rdma_cm_mc_join_flags
    bool attached;   // the id's QP is attached to it
  };
  std::vector<Group> groups;
  std::mutex mu;
  std::condition_variable all_acked;  // rdma_destroy_id waits on it for unacked == 0
};

struct Event {
  rdma_cm_event event;  // first
  ctl::CmEventRecord rec;
  uint64_t counted_on = 0;  // the Id (as a cookie) whose unacked count includes it
  uint8_t private_data[256];
};

// The library's id behind the application's pointer (rdma_cm_id is its first member).
inline Id *of(rdma_cm_id *id) {
  return reinterpret_cast<Id *>(id);
}
inline Channel *of(rdma_event_channel *ch) {
  return reinterpret_cast<Channel *>(ch);
}

// Creates vrnicd's side of an id on `dev` (bind or resolve_addr); 0 or errno.
int attach(Id *id, Device *dev, uint8_t gid_index);
// vrnicd's handle for an id of `channel`'s on `dev`, its events for `cookie`; 0 and errno.
uint32_t create_on(Device *dev, rdma_event_channel *channel, int ps, int qp_type, uint64_t cookie);
// Writes an event the library raises itself (address and route resolution, multicast joins)
// to the id's channel; `peer`, if given, goes in the record's peer address.
void raise(Id *id, uint32_t event, int status, const ctl::CmAddress *peer = nullptr);
// A MULTICAST_JOIN's UD parameters (the group's address, QPN, Q_Key, the join's context).
void fill_multicast_join(const Id *id, const ctl::CmEventRecord &rec, rdma_cm_event *event);
// Waits for a sync id's next event of one of `want` (ucma_complete); 0 or errno.
int complete(Id *id, std::initializer_list<uint32_t> want);
// The id behind a cookie, if it is still alive; the id with vrnicd's handle on a channel.
Id *live_id(uint64_t cookie);
Id *by_handle(rdma_event_channel *channel, uint32_t handle);

// librdmacm's failure: -1 and errno.
inline int fail(int err) {
  errno = err;
  return -1;
}

inline uint32_t random_psn() {
  return ::arc4random() & 0xffffff;
}

// sockaddr (AF_INET, AF_INET6, AF_IB) <-> GID-shaped address. An AF_IB address is a GID and a
// service ID, whose low 16 bits are the port and the bits above them the port space (`ps`).
bool to_cm_address(const sockaddr *sa, ctl::CmAddress *out);
void to_sockaddr(const ctl::CmAddress &a, int family, sockaddr_storage *out, int ps = RDMA_PS_TCP);
socklen_t sockaddr_length(const sockaddr *sa);
void set_port(sockaddr_storage *ss, uint16_t port);
uint16_t port_of(const sockaddr *sa);  // host order
// An AF_IB address as the IP address its GID is (IPv4-mapped: AF_INET), port kept; any other
// as it is. What the kernel's routing table is asked about.
sockaddr_storage ip_form(const sockaddr *sa);

}  // namespace vrnic::rdmacm
