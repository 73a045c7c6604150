// rdma_cm's side in vrnicd, for one device: the ids and event channels of librdmacm.so.1's
// clients, the port numbers they bind (one space per port space, shared by every client of
// the device), listeners, and the connection manager (cm_engine.h) on the device's QP1
// (gsi_qp.h). It turns rdma_cm calls into CM messages and CM events into rdma_cm events,
// written as ctl::CmEventRecord into the channel's pipe. A connection to a GID of this very
// device goes through QP1 on the loop port: the same MADs as to a kernel peer.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "cm_engine.h"
#include "dataplane/device.h"
#include "gsi_qp.h"
#include "quota.h"
#include "session.h"
#include "worker_group.h"

namespace vrnic {

class CmService {
 public:
  CmService(Device &dev, WorkerGroup &workers, UserQuotas &quotas)
      : dev_(dev), quotas_(quotas), gsi_(dev, workers) {}
  absl::Status start();
  // Before the workers stop: QP1 off the device.
  void stop() { gsi_.stop(); }

  // Command handlers: 0 or a positive errno (command_table.cpp).
  int create_channel(Session &s, const ctl::Message &m, ctl::HandleResp &resp);
  int destroy_channel(Session &s, uint32_t handle);
  int create_id(Session &s, const ctl::CmCreateIdReq &req, ctl::HandleResp &resp);
  int destroy_id(Session &s, uint32_t handle);
  int bind(Session &s, const ctl::CmBindReq &req, ctl::CmBindResp &resp);
  int listen(Session &s, const ctl::CmListenReq &req);
  int connect(Session &s, const ctl::CmConnectReq &req);
  int accept(Session &s, const ctl::CmAcceptReq &req);
  int reject(Session &s, const ctl::CmRejectReq &req);
  int establish(Session &s, const ctl::CmIdStepsReq &req);
  int disconnect(Session &s, const ctl::CmIdStepsReq &req);

  // How the QP transitions that come with a CM call (ctl::CmQpSteps) reach the caller's QP,
  // which lives in another of its sessions: set by the server, which knows them all. Returns
  // 0 or a positive errno (EINVAL: not a QP of the caller's process).
  using QpStepper = std::function<int(Session &caller, const ctl::CmQpSteps &steps)>;
  // Whether a QPN is one of a QP of another process than the caller's (or the GSI QP's): a
  // REQ, REP or SIDR_REP may not name it, for a peer would take it for that QP's (issue 28,
  // row 8: a REQ naming a local victim's QPN was a stale connection, and tore it down). A
  // QPN of no QP at all may be named, as the kernel's rdma_cm allows.
  using ForeignQp = std::function<bool(Session &caller, uint32_t qpn)>;
  void set_qp_hooks(QpStepper step, ForeignQp foreign) {
    step_qp_ = std::move(step);
    foreign_qp_ = std::move(foreign);
  }
  int migrate(Session &s, const ctl::CmMigrateReq &req);

  void stats(ctl::StatsResp &resp) const;
  // A closing session: its connections abandoned (the peer told), ids and channels freed.
  void release(Session &s);

  // The control thread's loop: poll_fd() readable means MADs; run() takes them, runs the CM's
  // timers and writes pending events; poll_timeout_ms() is how long the loop may sleep.
  int poll_fd() const { return gsi_.poll_fd(); }
  void run(uint64_t now);
  // The MADs the commands just handled made go out (once per turn of the loop).
  void flush() { gsi_.flush(); }
  int poll_timeout_ms(uint64_t now) const;

 private:
  struct Channel {
    uint32_t session;
    uid_t uid;  // whose channels quota it counts in
    int fd;                                  // the pipe's write end (ours)
    std::deque<ctl::CmEventRecord> backlog;  // written when the pipe has room
    ~Channel();
  };
  struct Id {
    uint32_t session;
    uid_t uid;  // whose cm_ids quota it counts in (a listener's, for an id a REQ made)
    uint32_t channel;
    uint64_t cookie;
    uint16_t port_space;
    uint8_t qp_type;
    ctl::CmAddress local{}, peer{};
    bool bound = false;
    bool listening = false;
    bool afonly = false;  // RDMA_OPTION_ID_AFONLY: its wildcard is of its own family only
    uint32_t conn = 0;       // the engine's connection (or SIDR request), 0 for none
    uint32_t listen_id = 0;  // an id made for a REQ: its listener
    // A listener's backlog, as ucma's: how many of its requests may wait with their
    // CONNECT_REQUEST not yet fetched by the application (unfetched counts them; the
    // library's kCmMigrate, made as it hands the event out, is the fetch).
    uint32_t backlog = 0, unfetched = 0;
    bool fetched = true;  // an id made for a REQ: its event was handed out
  };

  Id *owned(Session &s, uint32_t handle);
  // nullptr when the user's cm_ids quota is used up.
  Id *new_id(uint32_t session, uid_t uid, uint32_t *handle);
  void post(uint32_t channel, const ctl::CmEventRecord &rec);
  void flush(Channel &ch);
  void on_event(const cm::Event &e);
  void on_request(Id &listener, uint32_t listen_handle, const cm::Event &e);
  ctl::CmEventRecord record(uint32_t event, uint32_t handle, const Id &id) const;
  void unbind(Id &id, uint32_t handle);
  // Ports (cm_ports.cpp): whether `addr` may be bound at the port beside the ids bound there
  // (0, EADDRINUSE or EADDRNOTAVAIL, as the kernel's cma_check_port answers); the engine's one
  // listener per service ID, for every id listening at the port; and which of those ids a
  // request to address `dst` is for (nullptr: none).
  int port_conflict(uint32_t key, const ctl::CmAddress &addr, bool afonly) const;
  absl::Status listen_port(Id &id, uint32_t handle);
  void unlisten_port(Id &id, uint32_t handle);
  Id *listener_for(uint16_t port_space, uint16_t port, const uint8_t dst[16], uint32_t *handle);
  // The request id's CONNECT_REQUEST was handed out (or will never be): its listener's
  // backlog gets the place back.
  void mark_fetched(Id &id);
  void drop_id(uint32_t handle);
  int step_qp(Session &s, const ctl::CmQpSteps &steps);
  // The QP of steps to ERR: the CM message after its transitions could not go (as rdma-core's
  // library does when its accept fails).
  void fail_qp(Session &s, const ctl::CmQpSteps &steps);
  QpStepper step_qp_;
  ForeignQp foreign_qp_;
  uint64_t now_ = 0;
  bool trace_ = false;

  Device &dev_;
  UserQuotas &quotas_;
  GsiQp gsi_;
  std::unique_ptr<cm::Engine> engine_;
  std::map<uint32_t, std::unique_ptr<Channel>> channels_;
  std::map<uint32_t, Id> ids_;
  absl::flat_hash_map<uint32_t, uint32_t> conn_ids_;  // engine connection -> id
  std::map<uint32_t, std::vector<uint32_t>> ports_;  // port space << 16 | port -> its ids
  uint32_t next_handle_ = 1;
  uint16_t next_port_ = 0;
};

}  // namespace vrnic
