// The users' directories for the same-host direct path between processes
// (vrnic/direct_directory.h): one per user with a session, made at its first and dropped
// with its last. A session of that user is given both memfds at Hello; its QPs and regions
// are entered by vrnicd as they change, and its poster cells reset when it closes.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "shared_region.h"
#include "vrnic/direct_directory.h"

namespace vrnic {

class DirectDirectories {
 public:
  DirectDirectories() = default;
  DirectDirectories(const DirectDirectories &) = delete;
  DirectDirectories &operator=(const DirectDirectories &) = delete;
  ~DirectDirectories();

  struct Shared {
    shm::Directory *entries = nullptr;
    int entries_fd = -1;  // read-only to clients
    int cells_fd = -1;    // the poster cells: read-write
  };
  // The user's directory, made if it has none; entries == nullptr when it cannot be (the
  // session then just never takes the direct path to another process).
  Shared acquire(uid_t uid);
  // A closing session of the user: its poster cells are reset (a killed poster was perhaps
  // in a section), and the directory goes with the user's last session.
  void release(uid_t uid, uint32_t session);

 private:
  struct User {
    SharedRegion entries, cells;
    uint32_t sessions = 0;
  };
  absl::flat_hash_map<uid_t, User> users_;
};

}  // namespace vrnic
