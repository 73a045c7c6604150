// XRC target QPs (IB spec 9.8.2): made in an XRC domain (ibv_create_qp_ex with
// IBV_QPT_XRC_RECV) and opened by any other session that has the domain open (ibv_open_qp),
// as the kernel shares them: the QP lasts while any session holds it, each holder is charged
// one QP, and its async events go to the first holder still there. A target QP has no queue a
// client writes, so its memory is vrnicd's own, not a block of its creator's ring arena, and
// it outlives its creator's session.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "queue_objects.h"

namespace vrnic {

int QueueObjects::create_xrc_target(Session &s, const ctl::CreateQpReq &req,
                                    ctl::CreateQpResp &resp) {
  const uint32_t domain = xrcd_domain(s, req.xrcd);
  if (!domain) return EINVAL;
  if (s.qps.size() >= shm::kMaxQpsPerSession || dev_.qps.size() >= dev_.capacity.qps) return ENOMEM;
  QuotaCharge charge = s.pay(quotas_, Quota::kQps);
  if (charge.status()) return ENOMEM;
  // The smallest layout (a header, one send and one receive slot that nothing reads).
  constexpr size_t kPage = 4096;
  const size_t bytes = shm::qp_region_bytes(1, 1);
  std::unique_ptr<void, FreeRegion> region(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage));
  if (!region) return ENOMEM;
  std::memset(region.get(), 0, bytes);
  const uint32_t handle =
      publish_qp(s, req, region.get(), 1, 1, [&](QueuePair &q) { q.xrcd = domain; });
  if (!handle) return ENOMEM;
  charge.keep();
  hold_xrcd(req.xrcd, +1);
  s.qps.insert(handle);
  qp_owners_[handle] = {};  // (its holders pay for it: let_go_of_xrc_target refunds them)
  xrc_targets_[handle] = {{{s.id, s.async_fd, req.cookie, req.xrcd, s.payer()}},
                          std::move(region)};
  const QueuePair &qp = *dev_.qps.get(handle);
  resp.handle = handle;
  resp.qpn = qp.qpn;
  resp.worker = qp.worker;
  resp.caps = {};  // no queue, and nothing to map: sq_slots and rq_slots are 0
  return 0;
}

int QueueObjects::open_qp(Session &s, const ctl::OpenQpReq &req, ctl::HandleResp &resp) {
  const uint32_t domain = xrcd_domain(s, req.xrcd);
  QueuePair *qp = domain ? dev_.qp_by_qpn(req.qpn) : nullptr;
  if (!qp || qp->type != IBV_QPT_XRC_RECV || qp->xrcd != domain) return EINVAL;
  // One handle of a QP per session: the session's QPs are a set of handles.
  if (owns(s.qps, qp->handle)) return EEXIST;
  if (s.qps.size() >= shm::kMaxQpsPerSession) return ENOMEM;
  QuotaCharge charge = s.pay(quotas_, Quota::kQps);
  if (charge.status()) return ENOMEM;
  charge.keep();
  hold_xrcd(req.xrcd, +1);
  s.qps.insert(qp->handle);
  xrc_targets_.at(qp->handle).holders.push_back(
      {s.id, s.async_fd, req.cookie, req.xrcd, s.payer()});
  resp.handle = qp->handle;
  return 0;
}

bool QueueObjects::let_go_of_xrc_target(Session &s, uint32_t handle) {
  auto target = xrc_targets_.find(handle);
  if (target == xrc_targets_.end()) return false;
  std::vector<XrcTargetHolder> &holders = target->second.holders;
  auto mine = std::find_if(holders.begin(), holders.end(),
                           [&](const XrcTargetHolder &h) { return h.session == s.id; });
  if (mine == holders.end()) return false;
  hold_xrcd(mine->xrcd_open, -1);
  s.refund(quotas_, mine->payer, Quota::kQps);
  const bool events_were_mine = mine == holders.begin();
  holders.erase(mine);
  if (holders.empty()) return false;  // the last hold: the QP goes as any QP does
  if (events_were_mine) {
    // Its events go to the next holder from now on (the worker raises them: changed there).
    QueuePair &qp = *dev_.qps.get(handle);
    const XrcTargetHolder next = holders.front();
    workers_[qp.worker].run_between_bursts([&] {
      qp.session = next.session;
      qp.async_fd = next.async_fd;
      qp.cookie = next.cookie;
    });
  }
  return true;
}

}  // namespace vrnic
