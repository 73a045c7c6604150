// The memory side of one device's verbs objects: protection domains, memory regions (in the
// key table the dataplane reads) and memory windows, each owned by a session and charged to
// its user. Handlers return 0 or a positive errno: the reply's status (command_table.cpp).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/device.h"
#include "dataplane/slot_table.h"
#include "quota.h"
#include "session.h"
#include "worker_group.h"

namespace vrnic {

class MemoryObjects {
 public:
  MemoryObjects(Device &dev, WorkerGroup &workers, UserQuotas &quotas)
      : dev_(dev), workers_(workers), quotas_(quotas) {}

  int alloc_pd(Session &s, ctl::HandleResp &resp);
  int dealloc_pd(Session &s, uint32_t handle);
  int reg_mr(Session &s, const ctl::Message &m, ctl::RegMrResp &resp);
  int dereg_mr(Session &s, uint32_t handle);
  int alloc_null_mr(Session &s, uint32_t pd, ctl::RegMrResp &resp);
  // ibv_import_pd, ibv_import_mr: what a handle of the session is, as the kernel's query
  // methods answer an imported context (ENOENT: no such object of this session).
  int import_pd(Session &s, uint32_t handle);
  int import_mr(Session &s, uint32_t handle, ctl::ImportMrResp &resp);
  // Device memory (device_memory.cpp).
  int alloc_dm(Session &s, const ctl::AllocDmReq &req, ctl::AllocDmResp &resp,
               std::vector<int> &fds);
  int free_dm(Session &s, uint32_t handle);
  int import_dm(Session &s, uint32_t handle, ctl::ImportDmResp &resp, std::vector<int> &fds);
  int reg_dm_mr(Session &s, const ctl::RegDmMrReq &req, ctl::RegMrResp &resp);
  int alloc_mw(Session &s, const ctl::AllocMwReq &req, ctl::AllocMwResp &resp);
  int dealloc_mw(Session &s, uint32_t handle);

  // PDs, which QPs, SRQs and AHs (queue_objects.h) are created in and count in refs.
  SlotTable<ProtectionDomain> &pds() { return pds_; }
  // A closing session's MWs and MRs leave the tables (take_out); after a grace period its
  // windows are freed (free_taken) and its regions are left to reap(), a batch at a time.
  void take_out(Session &s);
  void free_taken();
  void release(Session &s);  // then its PDs
  // Unmaps and frees up to `max` MRs of closed sessions, out of the key table and past a
  // grace period; whether some are left. The control loop calls it between requests: a
  // client that exits holding a million MRs no longer keeps every other client's call
  // waiting for all of them (about 0.6 s under ASan).
  bool reap(size_t max);

 private:
  static int map_memfd(int fd, uint64_t fd_offset, uint64_t length, MemoryRegion &mr,
                       MrPieceMap &piece, struct stat *file);
  void release_dms(Session &s);  // a closing session's device memory
  // Puts an MR in the key table (on the worker); 0 or ENOMEM (table or quota full).
  int insert_mr(Session &s, std::unique_ptr<MemoryRegion> mr, ctl::RegMrResp &resp);
  int replace_mr(Session &s, uint32_t handle, std::unique_ptr<MemoryRegion> mr,
                 ctl::RegMrResp &resp);
  // Out of the key table, its quotas released; freed by the caller after a grace period.
  std::unique_ptr<MemoryRegion> remove_mr(Session &s, uint32_t handle);
  // Whether a region the caller registers now may enter the session's directory: only its
  // own user's memory is there (an importer of another user's session reaches its regions
  // through the workers).
  static bool publishes_direct(const Session &s);
  void publish_direct(Session &s, MemoryRegion &mr, bool clear = false);
  // A window out of its table and past a grace period: its region counts it no more.
  void unbind_removed(const MemoryWindow &mw);

  Device &dev_;
  WorkerGroup &workers_;
  UserQuotas &quotas_;
  SlotTable<ProtectionDomain> pds_{1u << 18};
  SlotTable<DeviceMemoryBlock> dms_{1u << 16};
  // Out of the key table, with no worker holding them: only their memory is left to free.
  std::vector<std::unique_ptr<MemoryRegion>> retired_;
  std::vector<std::unique_ptr<MemoryWindow>> closing_mws_;  // a closing session's, until freed
};

}  // namespace vrnic
