// Memory vrnicd shares with its clients -- rings, CQs, the session page, the daemon page -- as
// a memfd mapped read-write here and sealed so that no client can change its size (a shrink
// would have vrnicd's next access die of SIGBUS: issue 17, row 4) nor, read-only, map it
// writable or write() it (row 12); the seals themselves are sealed.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace vrnic {

// Whether the clients a region is shared with may write it (rings, CQs) or only read it (the
// daemon region, every client's).
enum class ClientAccess { kReadWrite, kReadOnly };

struct SharedRegion {
  int fd = -1;  // what the client maps (passed with the reply)
  void *map = nullptr;
  size_t bytes = 0;
  void release();  // unmaps and closes
};

absl::StatusOr<SharedRegion> make_shared_region(const char *name, size_t bytes,
                                                ClientAccess clients = ClientAccess::kReadWrite);

}  // namespace vrnic
