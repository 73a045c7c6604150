// vrnicd's control plane: the command interface of the NIC. Accepts client connections on a
// Unix socket, runs their verbs commands against the dataplane, and reclaims everything a
// client owned when its connection closes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "dataplane/device.h"
#include "dataplane/slot_table.h"
#include "dataplane/dpdk_port.h"
#include "dataplane/udp_port.h"
#include "dataplane/worker.h"
#include "quota.h"
#include "server_config.h"
#include "worker_group.h"
#include "vrnic/ctl_io.h"

namespace vrnic {

struct ProtectionDomain {
  uint32_t session;
  uint32_t refs = 0;  // MRs, QPs and AHs in it
};

struct CompletionChannel {
  uint32_t session;
  int fd;  // write end of the client's pipe
  uint32_t refs = 0;
  ~CompletionChannel();
};

struct AddressHandle {
  uint32_t session;
  uint32_t pd;
  ctl::AddressVector av;
};

struct QpOwner {
  uint32_t pd, send_cq, recv_cq, srq;
};

struct Session {
  uint32_t id = 0;
  int sock = -1;
  pid_t pid = 0;
  uid_t uid = 0;
  bool admin = false;    // vrnicd's own user or root: management and fault injection
  bool refused = false;  // over its user's session quota: answered ENOMEM, then closed
  int async_fd = -1;
  int mem_fd = -1;  // the client's /proc/self/mem, or -1 (it sent none)
  int shm_fd = -1;
  shm::SessionShared *shm = nullptr;
  // What it owns, by handle: sets, so that each check and each removal costs the same
  // whatever a session holds (a million MRs, then exit: teardown is linear, issue 17 row 10).
  absl::flat_hash_set<uint32_t> pds, mrs, cqs, qps, ahs, channels, srqs, mws;
  ~Session();
};

// One device (virtual NIC) of vrnicd: a Server each, with a socket, workers, a port and
// tables of its own (ServerConfig: control/server_config.h).
class Server {
 public:
  explicit Server(ServerConfig cfg);
  ~Server();
  absl::Status start();
  // This device as kListDevices reports it, and the whole vrnicd's list to answer with
  // (before serve(); without one a Server reports itself alone).
  ctl::DeviceListEntry entry() const;
  void set_device_list(std::vector<ctl::DeviceListEntry> all) { device_list_ = std::move(all); }
  // Serves until *stop becomes true (checked at least every 100 ms).
  void serve(const std::atomic<bool> &stop);

  // What a command's method gives back besides its status (control/command_table.cpp).
  struct Reply {
    std::unique_ptr<uint8_t[]> body_bytes;
    size_t body_len = 0;
    std::vector<int> fds;  // passed with the reply
    template <typename Resp>
    Resp &body() {
      body_bytes = std::make_unique<uint8_t[]>(sizeof(Resp));  // zeroed
      body_len = sizeof(Resp);
      return *new (body_bytes.get()) Resp{};
    }
  };

 private:
  // Who may send a command.
  enum class Who : uint8_t {
    kNewClient,  // Hello, on a connection without a session; if it fails the connection closes
    kClient,     // a session's verbs commands, after Hello
    kAnyone,     // vrnicctl's queries: no session needed (each answers for the asker's user)
    kAdmin,      // changes the device for everyone: vrnicd's own user and root (issue 17)
  };
  struct Command {
    ctl::Op op;
    Who who;
    bool lends_fds;  // the reply's fds stay open (the method's own), else they are closed
    int (*serve)(Server &, Session &, const ctl::Message &, Reply &);
  };
  // The row for op, or nullptr (EOPNOTSUPP).
  static const Command *command(ctl::Op op);

  void accept_client();
  // Returns false when the session must close.
  bool handle(Session &s);
  void close_session(uint32_t id);

  int hello(Session &s, const ctl::Message &m, ctl::HelloResp &resp, std::vector<int> &fds);
  int alloc_pd(Session &s, ctl::HandleResp &resp);
  int dealloc_pd(Session &s, uint32_t handle);
  int reg_mr(Session &s, const ctl::Message &m, ctl::RegMrResp &resp);
  int dereg_mr(Session &s, uint32_t handle);
  int alloc_null_mr(Session &s, uint32_t pd, ctl::RegMrResp &resp);
  int alloc_mw(Session &s, const ctl::AllocMwReq &req, ctl::AllocMwResp &resp);
  int dealloc_mw(Session &s, uint32_t handle);
  // Puts an MR in the key table (on the worker); 0 or ENOMEM (table or quota full).
  int insert_mr(Session &s, std::unique_ptr<MemoryRegion> mr, ctl::RegMrResp &resp);
  int replace_mr(Session &s, uint32_t handle, std::unique_ptr<MemoryRegion> mr,
                 ctl::RegMrResp &resp);
  // The dataplane side of destroying one object, inside execute_all; each returns what the
  // control side still has to release (the PD, the channel).
  void remove_qp(Session &s, uint32_t handle);
  uint32_t remove_mw(uint32_t handle);
  uint32_t remove_mr(Session &s, uint32_t handle);
  uint32_t remove_srq(uint32_t handle);
  uint32_t remove_cq(uint32_t handle);
  int create_channel(Session &s, const ctl::Message &m, ctl::HandleResp &resp);
  int destroy_channel(Session &s, uint32_t handle);
  int create_cq(Session &s, const ctl::CreateCqReq &req, ctl::CreateCqResp &resp,
                std::vector<int> &fds);
  int destroy_cq(Session &s, uint32_t handle);
  int resize_cq(Session &s, const ctl::ResizeCqReq &req, ctl::CreateCqResp &resp,
                std::vector<int> &fds);
  int create_qp(Session &s, const ctl::CreateQpReq &req, ctl::CreateQpResp &resp,
                std::vector<int> &fds);
  int modify_qp(Session &s, const ctl::ModifyQpReq &req);
  int query_qp(Session &s, uint32_t handle, ctl::QueryQpResp &resp);
  int destroy_qp(Session &s, uint32_t handle);
  int create_srq(Session &s, const ctl::CreateSrqReq &req, ctl::CreateSrqResp &resp,
                 std::vector<int> &fds);
  int modify_srq(Session &s, const ctl::ModifySrqReq &req);
  int query_srq(Session &s, uint32_t handle, ctl::QuerySrqResp &resp);
  int destroy_srq(Session &s, uint32_t handle);
  int create_ah(Session &s, const ctl::CreateAhReq &req, ctl::HandleResp &resp);
  int destroy_ah(Session &s, uint32_t handle);
  int stats(Session &s, ctl::StatsResp &resp);
  int list_devices(Session &s, ctl::DeviceListResp &resp);
  int set_faults(Session &s, const ctl::SetFaultsReq &req);
  // Every QP for an admin, a user's own otherwise.
  int list_qps(Session &s, const ctl::ListQpsReq &req, ctl::ListQpsResp &resp);
  int move_qp(Session &s, const ctl::MoveQpReq &req);
  absl::Status prepare_socket_dir();
  void make_device_node();
  std::string node_path_;  // the /dev/infiniband node we made, removed at exit
  // Link up or down on the wire port: port state and an async event to every client.
  void watch_link();

  ServerConfig cfg_;
  std::vector<ctl::DeviceListEntry> device_list_;
  std::string path_;
  int listen_fd_ = -1;
  bool bound_ = false;
  int daemon_shm_fd_ = -1;
  shm::DaemonShared *daemon_shm_ = nullptr;
  Device dev_;
  WorkerGroup workers_{dev_, cfg_};  // after dev_ and cfg_, which it uses
  std::map<uint32_t, std::unique_ptr<Session>> sessions_;
  uint32_t next_session_ = 1;
  SlotTable<ProtectionDomain> pds_{1u << 16};
  SlotTable<CompletionChannel> channels_{1u << 16};
  SlotTable<AddressHandle> ahs_{1u << 16};
  std::map<uint32_t, QpOwner> qp_owners_;
  UserQuotas quotas_;
  uint32_t device_max_mr_ = 0, device_max_qp_ = 0;  // before the per-user limits
};

}  // namespace vrnic
