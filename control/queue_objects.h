// The queue side of one device's verbs objects: completion channels and CQs, QPs (their
// creation, the checks on every modify before the dataplane's qp_modify, query, destroy),
// SRQs and address handles, each owned by a session. Handlers return 0 or a positive errno:
// the reply's status (command_table.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "dataplane/device.h"
#include "dataplane/slot_table.h"
#include "memory_objects.h"
#include "quota.h"
#include "session.h"
#include "worker_group.h"

namespace vrnic {

class QueueObjects {
 public:
  // The device's own QP capacity bounds everyone's QPs together (quotas bound each user's).
  QueueObjects(Device &dev, WorkerGroup &workers, UserQuotas &quotas, MemoryObjects &memory)
      : dev_(dev),
        workers_(workers),
        quotas_(quotas),
        memory_(memory) {}

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
  // Several ibv_modify_qp in turn, stopping at the first that fails (its errno); rdma_cm's
  // transitions (ctl::CmQpSteps) come this way.
  int modify_qp_steps(Session &s, uint32_t handle, const ctl::CmQpSteps::Step *steps, uint32_t n);
  int query_qp(Session &s, uint32_t handle, ctl::QueryQpResp &resp);
  int set_ece(Session &s, const ctl::SetEceReq &req, ctl::SetEceResp &resp);
  int destroy_qp(Session &s, uint32_t handle);
  int create_srq(Session &s, const ctl::CreateSrqReq &req, ctl::CreateSrqResp &resp,
                 std::vector<int> &fds);
  int modify_srq(Session &s, const ctl::ModifySrqReq &req);
  int query_srq(Session &s, uint32_t handle, ctl::QuerySrqResp &resp);
  int destroy_srq(Session &s, uint32_t handle);
  // XRC domains (xrc_domains.cpp) and target QPs (xrc_targets.cpp).
  int open_xrcd(Session &s, const ctl::Message &m, ctl::HandleResp &resp);
  int close_xrcd(Session &s, uint32_t handle);
  int open_qp(Session &s, const ctl::OpenQpReq &req, ctl::HandleResp &resp);
  // Multicast (multicast.cpp).
  int attach_mcast(Session &s, const ctl::McastReq &req);
  int detach_mcast(Session &s, const ctl::McastReq &req);
  int create_ah(Session &s, const ctl::CreateAhReq &req, ctl::HandleResp &resp);
  int destroy_ah(Session &s, uint32_t handle);

  size_t channel_count() const { return channels_.size(); }
  size_t ah_count() const { return ahs_.size(); }
  size_t mcast_group_count() const { return mcast_.size(); }
  uint32_t mcast_attached_count() const { return mcast_attached_; }
  // A closing session's QPs, SRQs and CQs, with no worker stopped (Server::close_session):
  // its QPs leave the table (take_out); after a grace period each worker forgets those it
  // runs (forget_taken); after another they are freed, and its SRQs and CQs with them
  // (free_taken).
  void take_out(Session &s);
  void forget_taken();
  void free_taken(Session &s);
  void release(Session &s);  // then its AHs and channels, and its XRC domain opens

 private:
  void free_qp(std::unique_ptr<QueuePair> qp);
  // QPs destroyed or closing: out of every multicast group; publish_mcast: the dataplane's
  // snapshot of mcast_ made anew.
  void leave_mcast(Session &s, const absl::flat_hash_set<uint32_t> &qps);
  void publish_mcast(bool groups_changed);
  // privileged: root's session, which may give a QP a controlled Q_Key.
  int modify_step(QueuePair &qp, const ctl::QpAttrWire &a, uint32_t mask, bool privileged,
                  bool *resolve);
  // Out of its table and unmapped; each returns what the control side still has to release
  // (the PD, the channel).
  uint32_t remove_srq(uint32_t handle);
  uint32_t remove_cq(uint32_t handle);
  // The memory of an SRQ out of its table (after a grace period, for an XRC SRQ: the target
  // QPs of every session find it by number), and its CQ's count of it.
  static void free_srq(std::unique_ptr<ReceiveQueue> srq);
  void forget_xrc_srq(uint32_t handle);  // its XRC domain open no longer holds it
  // A new QP laid out in `region` on the least loaded worker, in the device's table; `attach`
  // finishes it (its queues) before any worker can see it. Its handle, 0 when the table is full.
  uint32_t publish_qp(Session &s, const ctl::CreateQpReq &req, void *region, uint32_t sq_slots,
                      uint32_t rq_slots, absl::FunctionRef<void(QueuePair &)> attach);
  int create_xrc_target(Session &s, const ctl::CreateQpReq &req, ctl::CreateQpResp &resp);
  // The session lets go of its hold on the QP if it is an XRC target QP: true when other
  // sessions still hold it (it stays, its events now theirs), false when it goes as any QP
  // does (or is no target).
  bool let_go_of_xrc_target(Session &s, uint32_t handle);
  // XRC domains: the domain a session's open handle names (0: not one of its opens); what is
  // made through an open holds it (delta +1) until it goes (-1).
  uint32_t xrcd_domain(const Session &s, uint32_t handle) const;
  void hold_xrcd(uint32_t handle, int delta);
  void drop_xrcd_open(uint32_t handle);
  void release_xrcds(Session &s);

  Device &dev_;
  WorkerGroup &workers_;
  UserQuotas &quotas_;
  MemoryObjects &memory_;
  SlotTable<CompletionChannel> channels_{1u << 16};
  SlotTable<AddressHandle> ahs_{1u << 18};
  std::map<uint32_t, QpOwner> qp_owners_;
  // Multicast GID -> the attached QPs (by handle: its QPN, who pays for the attachment).
  struct McastMember {
    uint32_t qpn;
    uid_t payer;
  };
  std::map<std::array<uint8_t, 16>, std::map<uint32_t, McastMember>> mcast_;
  uint32_t mcast_attached_ = 0;
  std::vector<std::unique_ptr<QueuePair>> closing_qps_;  // a closing session's, until freed
  std::vector<std::unique_ptr<ReceiveQueue>> closing_srqs_;  // its XRC SRQs, likewise
  // XRC domains by vrnicd's number for them (never 0), those opened with a file by the file,
  // and every open (a session's handle) with the domain it names and what it holds.
  struct XrcFile {
    uint64_t dev, ino;
    bool operator<(const XrcFile &o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
  };
  struct XrcDomain {
    XrcFile file;
    bool has_file;
    uint32_t opens;
  };
  struct XrcdOpen {
    uint32_t session, domain;
    uint32_t objects;  // its SRQs and target QPs
  };
  std::map<uint32_t, XrcDomain> xrc_domains_;
  std::map<XrcFile, uint32_t> xrc_domain_by_file_;
  std::map<uint32_t, XrcdOpen> xrcd_opens_;
  std::map<uint32_t, uint32_t> xrc_srq_opens_;  // XRC SRQ handle -> the open it was made through
  // XRC target QPs by handle: the sessions holding each (its creator, and those that opened it
  // with ibv_open_qp; each is charged a QP), the first of which its events go to, and its
  // memory, vrnicd's own (it has no queues a client writes).
  struct XrcTargetHolder {
    uint32_t session;
    int async_fd;
    uint64_t cookie;     // that session's ibv_qp
    uint32_t xrcd_open;  // the open of the domain it holds the QP through
    uid_t payer;         // charged one QP for the hold
  };
  struct FreeRegion {
    void operator()(void *p) const { std::free(p); }
  };
  struct XrcTarget {
    std::vector<XrcTargetHolder> holders;
    std::unique_ptr<void, FreeRegion> region;
  };
  std::map<uint32_t, XrcTarget> xrc_targets_;
  uint32_t next_xrc_domain_ = 0, next_xrcd_open_ = 0;
};

}  // namespace vrnic
