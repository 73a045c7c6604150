// The direct path to other processes of the same user (issue 30): the user's directory that
// vrnicd keeps (vrnic/direct_directory.h), this thread's poster cell in it, and the regions
// of other processes this one has mapped -- each once, from the owner's own memfd, opened
// through /proc/<pid>/fd with this process's rights (a process of another user, or one this
// one may not trace, cannot be opened: its regions stay on the worker path).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>

#include "index_table.h"
#include "vrnic/direct_directory.h"

namespace vrnic::provider {

// Another process's region as mapped here, for one version of its directory entry; base
// nullptr when it could not be mapped (the worker path serves it until the entry changes).
struct PeerMr {
  uint32_t key = 0;
  uint64_t version = 0;
  uint8_t *base = nullptr;  // the byte at the entry's iova
  void *map = nullptr;
  size_t map_len = 0;
};

// A region a section found in the directory that this process has not mapped (yet).
struct PeerMrWanted {
  uint32_t handle = 0;
  uint64_t version = 0;
  shm::DirectoryMr entry{};
};

class DirectPeers {
 public:
  // From the two memfds of Hello's reply (closed here); nullptr when they cannot be mapped.
  static std::unique_ptr<DirectPeers> open(int entries_fd, int cells_fd, uint32_t session);
  ~DirectPeers();
  DirectPeers(const DirectPeers &) = delete;
  DirectPeers &operator=(const DirectPeers &) = delete;

  const shm::Directory &directory() const { return *dir_; }
  // The calling thread's poster cell, claimed at its first use; nullptr when all are taken
  // (that thread then reaches no other process directly).
  shm::PosterCell *my_cell();
  // Waits for every poster's section in flight, in any process of the user: after vrnicd
  // took a region of ours out of the directory, no access to it can land once this returns.
  void synchronize();
  // This process's mapping of a region of another, if it matches `version` of its entry.
  const PeerMr *mapped(uint32_t handle, uint32_t key, uint64_t version) const {
    const PeerMr *m = mrs_.get(handle);
    return m && m->key == key && m->version == version ? m : nullptr;
  }
  // Maps what a section wanted, outside any section (a few system calls, once per region
  // and version); the mapping it replaces is unmapped once no section of this process can
  // use it.
  void map(const PeerMrWanted &want);

 private:
  DirectPeers() = default;
  const shm::Directory *dir_ = nullptr;
  shm::PosterCells *cells_ = nullptr;
  uint32_t session_ = 0;
  uint64_t id_ = 0;  // unique in the process (a thread's claim names it)
  IndexTable<PeerMr, 21> mrs_;  // by key handle
  std::mutex map_mu_;
};

}  // namespace vrnic::provider
