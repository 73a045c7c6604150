// The queue side of one device's verbs objects: completion channels and CQs, QPs (their
// creation, the checks on every modify before the dataplane's qp_modify, query, destroy),
// SRQs and address handles, each owned by a session. Handlers return 0 or a positive errno:
// the reply's status (command_table.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <vector>

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
  void release(Session &s);  // then its AHs and channels

 private:
  void free_qp(std::unique_ptr<QueuePair> qp);
  // QPs destroyed or closing: out of every multicast group; publish_mcast: the dataplane's
  // snapshot of mcast_ made anew.
  void leave_mcast(Session &s, const absl::flat_hash_set<uint32_t> &qps);
  void publish_mcast();
  // privileged: root's session, which may give a QP a controlled Q_Key.
  int modify_step(QueuePair &qp, const ctl::QpAttrWire &a, uint32_t mask, bool privileged,
                  bool *resolve);
  // Out of its table and unmapped; each returns what the control side still has to release
  // (the PD, the channel).
  uint32_t remove_srq(uint32_t handle);
  uint32_t remove_cq(uint32_t handle);

  Device &dev_;
  WorkerGroup &workers_;
  UserQuotas &quotas_;
  MemoryObjects &memory_;
  SlotTable<CompletionChannel> channels_{1u << 16};
  SlotTable<AddressHandle> ahs_{1u << 16};
  std::map<uint32_t, QpOwner> qp_owners_;
  // Multicast GID -> the attached QPs (handle -> QPN).
  std::map<std::array<uint8_t, 16>, std::map<uint32_t, uint32_t>> mcast_;
  uint32_t mcast_attached_ = 0;
  std::vector<std::unique_ptr<QueuePair>> closing_qps_;  // a closing session's, until freed
};

}  // namespace vrnic
