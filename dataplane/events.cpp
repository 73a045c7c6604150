// Async and completion events to a client's event channel (events.h).
#include "events.h"

#include "vrnic/ctl_io.h"

namespace vrnic {

void raise_event(int fd, uint32_t type, uint64_t cookie) {
  if (fd < 0) return;
  ctl::EventRecord rec{type, 0, cookie};
  // A full channel means the client is not reading its events: the record is lost, never
  // vrnicd's time (ctl::send_event does not wait, whatever the client did to the socket).
  ctl::send_event(fd, &rec, sizeof(rec));
}

}  // namespace vrnic
