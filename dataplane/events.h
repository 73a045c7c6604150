// Events vrnicd raises towards a client: completion-channel and async-event records written
// to the event channels the provider gave us (ctl::make_event_channel). Non-blocking: a
// client that never reads loses events, vrnicd never stalls.
#pragma once

#include <cstdint>

namespace vrnic {

void raise_event(int fd, uint32_t type, uint64_t cookie);

}  // namespace vrnic
