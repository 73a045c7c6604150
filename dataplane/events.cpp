// Async and completion events to a client's event pipe (events.h).
#include "events.h"

#include <unistd.h>

#include "vrnic/ctl_protocol.h"

namespace vrnic {

void raise_event(int fd, uint32_t type, uint64_t cookie) {
  if (fd < 0) return;
  ctl::EventRecord rec{type, 0, cookie};
  // A full pipe means the client is not reading its events; dropping is all we can do.
  [[maybe_unused]] ssize_t n = ::write(fd, &rec, sizeof(rec));
}

}  // namespace vrnic
