// The NIC's resources as the data path sees them: MRs by key, QPs by QPN, CQs by handle.
// Owned by the dataplane and changed only on the worker thread (see Worker::execute).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "capture_tap.h"
#include "completion_queue.h"
#include "memory_region.h"
#include "memory_window.h"
#include "multicast.h"
#include "queue_pair.h"
#include "slot_table.h"
#include "spin_lock.h"
#include "vrnic/counters.h"
#include "vrnic/ctl_protocol.h"
#include "vrnic/ece.h"
#include "vrnic/object_keys.h"

namespace vrnic {

// The kernel interface whose address prefix covers the GID's address (IPv4-mapped GIDs against
// IPv4 addresses, others against IPv6), as the kernel ties a RoCE GID to its netdev; 0 if none.
uint32_t kernel_interface_of(const uint8_t gid[16]);

class Device {
 public:
  // Device `index` of its vrnicd: vrnic<index>, with a node GUID of its own.
  explicit Device(uint32_t index = 0);

  // What ibv_query_device reports: what one context of one user may make (the server lowers
  // it to the user's quotas and to what a context can hold).
  ctl::DeviceInfo info{};
  // What the device holds for all its users together: the bound every create checks besides
  // the caller's quota.
  struct Capacity {
    uint32_t qps, cqs, mrs, pds, ahs, srqs, mws;
  };
  Capacity capacity{};
  SlotTable<MemoryRegion> mrs{1u << 22};
  SlotTable<QueuePair> qps{1u << 20};
  SlotTable<CompletionQueue> cqs{1u << 20};
  SlotTable<ReceiveQueue> srqs{1u << 18};
  SlotTable<MemoryWindow> mws{1u << 18};
  // QP1, vrnicd's own (control/gsi_qp.h): the connection manager's MADs. Not in `qps`.
  static constexpr uint32_t kGsiQpn = 1;
  QueuePair *gsi = nullptr;
  // Its receive buffers, under a key no table entry has (a table key is >= 256). Its PD is 0,
  // which no client's is (handles start at 1), so no client SGE or rkey reaches it.
  static constexpr uint32_t kGsiMrKey = 1;
  MemoryRegion *gsi_mr = nullptr;
  // Windows are bound by the worker of the binding QP and checked by the worker of whichever
  // QP a remote access arrives on: with several workers both take this lock.
  mutable SpinLock mw_lock;
  bool shared_windows() const { return info.num_workers > 1; }
  // Selective repeat with every RC peer whose QP was not told otherwise through ECE (vrnicd
  // --selective-repeat: for connections made without rdma_cm, perftest's TCP exchange): the
  // responder's sequence NAKs say which later PSNs it holds (wire::Sack), which only a vrnic
  // requester reads. Off by default, so that rxe, hardware and any peer that does not know it
  // get plain NAKs (every responder holds what arrives early either way; a requester always
  // acts on a Sack it gets). rdma_cm agrees on it per connection (ECE, QueuePair::ece_set).
  bool selective_repeat = false;
  // Who is attached to which multicast GID (multicast.h): replaced whole by the control side,
  // the old one freed after a grace period.
  std::atomic<const MulticastGroups *> multicast{nullptr};
  // The running packet capture (vrnicctl capture), or nullptr: replaced by the control
  // thread, freed after a grace period.
  std::atomic<const CaptureTap *> capture{nullptr};

  MemoryRegion *mr_by_key(uint32_t key) const {
    if (key == kGsiMrKey) return gsi_mr;
    MemoryRegion *mr = mrs.get(key >> 8);
    return mr && mr->key == key ? mr : nullptr;
  }
  MemoryWindow *mw_by_key(uint32_t key) const {
    if (!(key & kMwKeyBit)) return nullptr;
    MemoryWindow *mw = mws.get((key & ~kMwKeyBit) >> 8);
    return mw && mw->key == key ? mw : nullptr;
  }
  // The region an rkey gives `qp` access to for [va, va+len) with `right`: an MR's own rkey
  // or a bound window's; nullptr when the key does not allow it.
  const MemoryRegion *resolve_rkey(const QueuePair &qp, uint32_t rkey, uint64_t va, uint64_t len,
                                   uint32_t right) const;
  QueuePair *qp_by_qpn(uint32_t qpn) const {
    if (qpn == kGsiQpn) return gsi;
    const uint32_t index = qpn_index(qpn);
    QueuePair *qp = index >= kQpnBase ? qps.get(index - kQpnBase + 1) : nullptr;
    return qp && qp->qpn == qpn ? qp : nullptr;
  }
  static uint32_t qpn_of_handle(uint32_t handle, uint32_t tag) {
    return (tag & kQpnTagMask) << kQpnIndexBits | (handle - 1 + kQpnBase);
  }

  // Writes GID table entry `index` (info.gids is written only through here).
  // ndev_ifindex: the kernel interface the GID's address is on, 0 for none (ibv_gid_entry).
  void set_gid(uint32_t index, const uint8_t gid[16], uint32_t type, uint32_t ndev_ifindex);
  // A loop-only device's GIDs after 127.0.0.1: the addresses of the host's interfaces that
  // are up and not loopback (IPv4, and IPv6 but link-local), as RoCEv2 GIDs on their
  // interfaces, as far as the table has room; how many. As rxe on an Ethernet interface has
  // that interface's: a program on this host finds the device by an address of its own
  // (libfabric's verbs provider looks at no loopback interface), and reaching one of them
  // is reaching a local process, on the loop port.
  uint32_t add_host_addresses();
  bool is_local_gid(const uint8_t gid[16]) const {
    for (uint32_t i = 0; i < nlocal_gids_; i++)
      if (std::memcmp(local_gids_[i].data(), gid, 16) == 0) return true;
    return false;
  }

 private:
  // The table's non-empty GIDs, packed: is_local_gid runs for every packet sent, and the
  // table is mostly empty.
  std::array<std::array<uint8_t, 16>, ctl::kGidTableLen> local_gids_{};
  uint32_t nlocal_gids_ = 0;
};

}  // namespace vrnic
