// Multicast attachments (ibv_attach_mcast, ibv_detach_mcast): which UD QPs each multicast GID
// reaches on this vrnicd. The control side keeps the membership; each change publishes a new
// dataplane snapshot (dataplane/multicast.h) and frees the old one after a grace period, with
// no worker stopped. A destroyed QP leaves every group it was in.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "queue_objects.h"

namespace vrnic {

int QueueObjects::attach_mcast(Session &s, const ctl::McastReq &req) {
  if (!owns(s.qps, req.qp) || !is_multicast_gid(req.gid)) return EINVAL;
  const QueuePair *qp = dev_.qps.get(req.qp);
  if (qp->type != IBV_QPT_UD) return EINVAL;  // as the kernel's ib_attach_mcast
  std::array<uint8_t, 16> gid;
  std::memcpy(gid.data(), req.gid, 16);
  auto group = mcast_.find(gid);
  if (group != mcast_.end() && group->second.contains(req.qp)) return 0;  // attached already
  if (group == mcast_.end() && mcast_.size() >= dev_.info.max_mcast_grp) return ENOMEM;
  if (group != mcast_.end() && group->second.size() >= dev_.info.max_mcast_qp_attach)
    return ENOMEM;
  if (mcast_attached_ >= dev_.info.max_total_mcast_qp_attach) return ENOMEM;
  // Charged to the user: the device's groups and attachments are every user's.
  QuotaCharge charge = s.pay(quotas_, Quota::kMcast);
  if (charge.status()) return charge.status();
  charge.keep();
  const bool new_group = group == mcast_.end();
  mcast_[gid][req.qp] = {qp->qpn, s.payer()};
  mcast_attached_++;
  publish_mcast(new_group);
  return 0;
}

int QueueObjects::detach_mcast(Session &s, const ctl::McastReq &req) {
  if (!owns(s.qps, req.qp)) return EINVAL;
  std::array<uint8_t, 16> gid;
  std::memcpy(gid.data(), req.gid, 16);
  auto group = mcast_.find(gid);
  if (group == mcast_.end()) return EINVAL;  // not attached
  auto member = group->second.find(req.qp);
  if (member == group->second.end()) return EINVAL;
  s.refund(quotas_, member->second.payer, Quota::kMcast);
  group->second.erase(member);
  const bool group_gone = group->second.empty();
  if (group_gone) mcast_.erase(group);
  mcast_attached_--;
  publish_mcast(group_gone);
  return 0;
}

void QueueObjects::leave_mcast(Session &s, const absl::flat_hash_set<uint32_t> &qps) {
  uint32_t left = 0;
  bool groups_gone = false;
  for (auto group = mcast_.begin(); group != mcast_.end();) {
    for (uint32_t h : qps)
      if (auto member = group->second.find(h); member != group->second.end()) {
        s.refund(quotas_, member->second.payer, Quota::kMcast);
        group->second.erase(member);
        left++;
      }
    groups_gone |= group->second.empty();
    group = group->second.empty() ? mcast_.erase(group) : std::next(group);
  }
  if (!left) return;
  mcast_attached_ -= left;
  publish_mcast(groups_gone);
}

void QueueObjects::publish_mcast(bool groups_changed) {
  // None at all: no snapshot (nothing left to free when vrnicd exits).
  auto *next = mcast_.empty() ? nullptr : new MulticastGroups;
  for (const auto &[gid, members] : mcast_) {
    MulticastGroups::Group &g = next->groups.emplace_back();
    g.gid = gid;
    for (const auto &[handle, member] : members) g.qpns.push_back(member.qpn);
  }
  std::unique_ptr<const MulticastGroups> old(dev_.multicast.exchange(next));
  workers_.synchronize();  // no worker still reads the old one
  // Other vrnicds' members are reached by IP multicast: worker 0's wire port joins the groups
  // with members here, and only it (one copy of each datagram per vrnicd). Told only when the
  // groups change, not at every member's attach (issue 52: a churn of attachments had worker 0
  // compare every group with every other between its bursts).
  Worker &first = *workers_.all()[0];
  if (Port *wire = first.wire_port(); wire && groups_changed) {
    std::vector<std::array<uint8_t, 16>> gids;
    for (const auto &[gid, members] : mcast_) gids.push_back(gid);
    first.run_between_bursts([&] { wire->set_multicast_groups(gids); });
  }
}

}  // namespace vrnic
