// vrnicd's control plane for one device: the command interface of the NIC. The server keeps
// the socket loop and the sessions (hello, close), and the glue: each command goes through the
// command table (command_table.cpp) to its handler -- the verbs objects' (memory_objects.h,
// queue_objects.h), the workers' (worker_group.h) or the server's own queries -- and
// everything a client owned is reclaimed when its connection closes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/device.h"
#include "dataplane/slot_table.h"
#include "dataplane/dpdk_port.h"
#include "dataplane/udp_port.h"
#include "dataplane/worker.h"
#include "cm_service.h"
#include "direct_directories.h"
#include "memory_objects.h"
#include "queue_objects.h"
#include "quota.h"
#include "session.h"
#include "shared_region.h"
#include "server_config.h"
#include "worker_group.h"
#include "vrnic/ctl_io.h"

namespace vrnic {

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
  // Serves until *stop becomes true (checked at least every 100 ms), or until no client has
  // been connected for exit_idle_seconds (if set).
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
    kNewClient,   // Hello, on a connection without a session; if it fails the connection closes
    kClient,      // a session's verbs commands, after Hello
    kAnyone,      // vrnicctl's queries: no session needed (each answers for the asker's user)
    kAdmin,       // changes the device for everyone: vrnicd's own user and root (issue 17)
    kConnection,  // rdma_cm: any connection, no Hello; the ids and channels it makes are its own
  };
  struct Command {
    ctl::Op op;
    Who who;
    bool lends_fds;  // the reply's fds stay open (the method's own), else they are closed
    int (*serve)(Server &, Session &, const ctl::Message &, Reply &);
  };
  // The object a handler of class C belongs to, for the command table.
  Server &handler_object(const Server *) { return *this; }
  MemoryObjects &handler_object(const MemoryObjects *) { return memory_; }
  QueueObjects &handler_object(const QueueObjects *) { return queues_; }
  CmService &handler_object(const CmService *) { return cm_; }
  template <typename C, typename... P>
  friend int invoke_handler(Server &, int (C::*)(Session &, P...), Session &, const ctl::Message &,
                            Reply &);
  // The row for op, or nullptr (EOPNOTSUPP).
  static const Command *command(ctl::Op op);

  absl::Status start_engines();  // workers, CM, link: once the socket listens
  void accept_client();
  // Closes the connections past their user's session quota that had their second to hear so.
  void close_refused(uint64_t now);
  int poll_timeout_ms(uint64_t now) const;
  // Returns false when the session must close.
  bool handle(Session &s);
  void close_session(uint32_t id);

  int hello(Session &s, const ctl::Message &m, ctl::HelloResp &resp, std::vector<int> &fds);
  int import_device(Session &s, const ctl::Message &m, ctl::HelloResp &resp,
                    std::vector<int> &fds);
  // What Hello and an import answer: the session's pages, the workers' eventfds and the
  // user's direct-path directory (taken for `holder`, released when it closes).
  void describe_session(Session &s, Session &holder, ctl::HelloResp &resp, std::vector<int> &fds);
  int make_wake(Session &s);  // its wake eventfd, made and watched; 0 or an errno
  int stats(Session &s, ctl::StatsResp &resp);
  int list_devices(Session &s, ctl::DeviceListResp &resp);
  int set_faults(Session &s, const ctl::SetFaultsReq &req);
  // vrnicctl capture (capture_control.cpp).
  int start_capture(Session &s, const ctl::CaptureReq &req, ctl::CaptureResp &resp,
                    std::vector<int> &fds);
  int stop_capture(Session &s);
  // Every QP for an admin, a user's own otherwise.
  int list_qps(Session &s, const ctl::ListQpsReq &req, ctl::ListQpsResp &resp);
  int move_qp(Session &s, const ctl::MoveQpReq &req);
  absl::Status prepare_socket_dir();
  void make_device_node();
  std::string node_path_;  // the /dev/infiniband node we made, removed at exit
  // Link up or down on the wire port: port state and an async event to every client.
  void watch_link();
  // The session of the caller's process that holds QP qpn, or nullptr (none, the GSI QP,
  // another process's).
  Session *process_qp_owner(Session &caller, uint32_t qpn);
  // CmService's QpStepper: rdma_cm's QP transitions on a QP of the caller's process.
  int step_cm_qp(Session &caller, const ctl::CmQpSteps &steps);

  ServerConfig cfg_;
  DirectDirectories directories_;  // one per user with a session (the direct path)
  std::vector<ctl::DeviceListEntry> device_list_;
  std::string path_;
  int listen_fd_ = -1;
  uint64_t accept_paused_until_ = 0;  // accept4 ran out of descriptors: not before then
  bool bound_ = false;
  // The clients' direct path is on unless --no-direct-path, faults or a capture (which must
  // see every packet) say otherwise.
  void update_direct_path();
  bool faults_on_ = false;
  // The running capture: its rings, its tap (Device::capture) and whose it is.
  SharedRegion capture_region_;
  std::unique_ptr<CaptureTap> capture_tap_;
  uint32_t capture_session_ = 0;
  void end_capture();
  int daemon_shm_fd_ = -1;
  shm::DaemonShared *daemon_shm_ = nullptr;
  Device dev_;
  WorkerGroup workers_{dev_, cfg_};  // after dev_ and cfg_, which it uses
  std::map<uint32_t, std::unique_ptr<Session>> sessions_;
  uint32_t next_session_ = 1;
  UserQuotas quotas_;
  // Connections past their user's session quota, waiting to be answered ENOMEM: (deadline,
  // session), oldest first; at most kMaxRefusedWaiting of them per user.
  std::deque<std::pair<uint64_t, uint32_t>> refused_;
  std::map<uid_t, uint32_t> refused_per_user_;
  // After dev_, workers_ and quotas_, which they use (and before the constructor sets the
  // per-user limits in dev_.info: they keep the device's own).
  MemoryObjects memory_{dev_, workers_, quotas_};
  QueueObjects queues_{dev_, workers_, quotas_, memory_};
  CmService cm_{dev_, workers_, quotas_};
};

}  // namespace vrnic
