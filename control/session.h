// A client's connection to vrnicd (a session) and the control plane's records of the verbs
// objects it owns that the dataplane does not hold: PDs, completion channels, AHs, and which
// PD and queues each QP was created with.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "quota.h"
#include "ring_arena.h"
#include "vrnic/ctl_io.h"
#include "vrnic/ctl_protocol.h"
#include "vrnic/direct_directory.h"
#include "vrnic/shm_layout.h"

namespace vrnic {

// Each object below keeps `payer`: the user whose account it is charged to (Session::pay).
struct ProtectionDomain {
  uint32_t session;
  uid_t payer;
  uint32_t refs = 0;  // MRs, QPs and AHs in it
};

// ibv_alloc_dm: memory of vrnicd's own, a sealed memfd the client maps too.
struct DeviceMemoryBlock {
  uint32_t session;
  uid_t payer = 0;
  int fd = -1;            // kept, for the MRs registered on it (each maps it anew)
  uint64_t length = 0;    // as allocated
  uint64_t map_length = 0;  // the memfd's size, whole pages
  uint32_t refs = 0;      // MRs on it: ibv_free_dm is EBUSY while any is
  ~DeviceMemoryBlock();
};

struct CompletionChannel {
  uint32_t session;
  uid_t payer;
  int fd;  // the event channel's end vrnicd writes
  uint32_t refs = 0;
  ~CompletionChannel();
};

struct AddressHandle {
  uint32_t session;
  uid_t payer;
  uint32_t pd;
  ctl::AddressVector av;
};

struct QpOwner {
  uint32_t pd, send_cq, recv_cq, srq;
  uid_t payer;
  RingBlock ring;  // its memory, in its session's ring arena
};

// Who sent a command (issue 52): a process and its user, as the kernel says (SO_PEERCRED at
// connect, SCM_CREDENTIALS on each message: whoever holds the socket cannot say otherwise),
// whether it may manage the device, and the memory it handed vrnicd (its /proc/<pid>/mem:
// the connection's Hello's, for the process that made the connection only).
struct Caller {
  pid_t pid = 0;
  uid_t uid = 0;
  bool admin = false;
  int mem_fd = -1;
};

struct Session {
  Session() = default;
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  uint32_t id = 0;
  int sock = -1;
  uint64_t sock_inode = 0;  // of vrnicd's end of sock: an importer names the session by it
  // An imported context's connection (ibv_import_device) speaks for another session: every
  // command it sends acts on that one; it holds nothing of its own. 0 for any other.
  uint32_t speaks_for = 0;
  absl::flat_hash_set<uint32_t> importers;  // the connections that speak for this one
  // Who acts (issue 52): the sender of the command being served, which Server::handle puts
  // here for the length of one command -- this connection's own process, an importer (on a
  // connection of its own, or writing on the exported socket itself), a forked child.
  // What it names and makes are this session's objects; its identity is the caller's: its
  // user pays for them (pay) and decides what is allowed (admin, a controlled Q_Key), and
  // the memory it registers is its own process's (mem_fd, pid), never the exporter's.
  Caller caller;
  Caller own() const { return {pid, uid, admin, mem_fd}; }
  pid_t pid = 0;
  uid_t uid = 0;
  bool admin = false;    // vrnicd's own user or root: management and fault injection
  bool refused = false;  // over its user's session quota: answered ENOMEM, then closed
  uint32_t fds = 0;      // descriptors of the connection's own charged to its user (kFds)
  int async_fd = -1;
  int mem_fd = -1;  // the client's /proc/self/mem, or -1 (it sent none)
  int shm_fd = -1;
  // The eventfd its clients wake the workers with (Worker::watch_session_wake): its own, so
  // that what one client does to it stays in its session.
  int wake_fd = -1;
  shm::SessionShared *shm = nullptr;
  // Its user's direct-path directory (direct_directories.h), or nullptr: its RC QPs and its
  // one-memfd regions are entered there.
  shm::Directory *directory = nullptr;
  // What it owns, by handle: sets, so that each check and each removal costs the same
  // whatever a session holds (a million MRs, then exit: teardown is linear, issue 17 row 10).
  absl::flat_hash_set<uint32_t> pds, mrs, cqs, qps, ahs, channels, srqs, mws, dms;
  absl::flat_hash_set<uint32_t> xrcds;  // its opens of XRC domains (control/xrc_domains.cpp)
  // What its objects hold of their payers' quotas, given back in one call per payer when it
  // closes (not one per MR: a million of them); and those of its MRs in its user's directory.
  QuotaLedger ledger;
  absl::flat_hash_set<uint32_t> direct_mrs;
  RingArena rings;  // its QPs' memory
  ~Session();

  // A charge to the caller's account for an object of this session, entered in the ledger
  // once kept; and its release, to the object's payer.
  uid_t payer() const { return caller.uid; }
  QuotaCharge pay(UserQuotas &quotas, Quota what, uint64_t amount = 1) {
    return {quotas, ledger, caller.uid, what, amount};
  }
  void refund(UserQuotas &quotas, uid_t payer, Quota what, uint64_t amount = 1) {
    quotas.release(ledger, payer, what, amount);
  }
};

inline bool owns(const absl::flat_hash_set<uint32_t> &handles, uint32_t h) {
  return handles.contains(h);
}

}  // namespace vrnic
