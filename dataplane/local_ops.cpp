// Send-queue operations that never reach the wire: binding memory windows (type 1 through
// ibv_bind_mw, type 2 through IBV_WR_BIND_MW) and invalidating them (IBV_WR_LOCAL_INV, or a
// peer's SEND with invalidate).
#include <infiniband/verbs.h>

#include "transport.h"

namespace vrnic {
namespace {

void unbind(Device &dev, MemoryWindow &mw) {
  if (!mw.bound) return;
  if (MemoryRegion *mr = dev.mr_by_key(mw.mr_key)) mr->bound_windows--;
  mw.bound = false;
}

// A bind WQE carries: rkey = the window's new rkey, remote_addr/compare_add = the range,
// swap = rights << 32 | the MR's lkey (see the provider's encoding).
int bind_window(Device &dev, QueuePair &qp, const shm::SendWqe &wqe) {
  uint32_t new_key = wqe.rkey;
  MemoryWindow *mw = dev.mws.get((new_key & ~kMwKeyBit) >> 8);
  if (!(new_key & kMwKeyBit) || !mw || mw->pd != qp.pd || mw->session != qp.session)
    return IBV_WC_MW_BIND_ERR;
  uint64_t addr = wqe.remote_addr, length = wqe.compare_add;
  uint32_t rights = uint32_t(wqe.swap >> 32), lkey = uint32_t(wqe.swap);
  if (mw->type == IBV_MW_TYPE_2 && mw->bound) return IBV_WC_MW_BIND_ERR;  // invalidate first
  if (length == 0 && mw->type == IBV_MW_TYPE_1) {                         // unbind
    unbind(dev, *mw);
    mw->key = new_key;
    return IBV_WC_SUCCESS;
  }
  MemoryRegion *mr = dev.mr_by_key(lkey);
  if (!mr || mr->null_mr || mr->pd != qp.pd || !(mr->access & IBV_ACCESS_MW_BIND) ||
      !mr->contains(addr, length))
    return IBV_WC_MW_BIND_ERR;
  constexpr uint32_t kRemote =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  // A window grants remote access only; IBV_ACCESS_LOCAL_WRITE in its rights means nothing
  // and is ignored, as rxe and mlx5 do (rdma-core's own tests pass it). Zero-based windows
  // are not supported.
  if ((rights & ~(kRemote | IBV_ACCESS_LOCAL_WRITE)) ||
      ((rights & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
    return IBV_WC_MW_BIND_ERR;
  rights &= kRemote;
  unbind(dev, *mw);
  mw->key = new_key;
  mw->bound = true;
  mw->mr_key = mr->key;
  mw->va = addr;
  mw->length = length;
  mw->access = rights;
  mw->qpn = qp.qpn;
  mr->bound_windows++;
  return IBV_WC_SUCCESS;
}

}  // namespace

bool invalidate_window(Device &dev, const QueuePair &qp, uint32_t rkey) {
  SharedGuard guard(dev.mw_lock, dev.shared_windows());
  MemoryWindow *mw = dev.mw_by_key(rkey);
  if (!mw || mw->type != IBV_MW_TYPE_2 || !mw->bound || mw->pd != qp.pd || mw->qpn != qp.qpn)
    return false;
  unbind(dev, *mw);
  return true;
}

int execute_local_op(Device &dev, QueuePair &qp, const shm::SendWqe &wqe) {
  SharedGuard guard(dev.mw_lock, dev.shared_windows());
  if (wqe.opcode == IBV_WR_BIND_MW) return bind_window(dev, qp, wqe);
  MemoryWindow *mw = dev.mw_by_key(wqe.imm_or_rkey);
  if (!mw || mw->type != IBV_MW_TYPE_2 || mw->pd != qp.pd) return IBV_WC_LOC_PROT_ERR;
  unbind(dev, *mw);
  return IBV_WC_SUCCESS;
}

}  // namespace vrnic
