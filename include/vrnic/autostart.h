// Finding vrnicd from a client library, and starting a private one on first use: with no
// daemon on the user's own socket (nor the host's) and neither VRNIC_SOCKET nor
// VRNIC_AUTOSTART=0 set, the library starts `vrnicd --exit-idle N --autostarted` on the
// user's default socket, waits until it answers, and goes on; that vrnicd exits N seconds
// (VRNIC_AUTOSTART_IDLE, default 60) after its last client left. A lock file beside the
// socket makes programs starting at once share one daemon.
#pragma once

#include <string>

#include "vrnic/ctl_protocol.h"

namespace vrnic::ctl {

// The devices of the vrnicd a client should use (client_socket_path()), auto-started if need
// be. Returns 0 or an errno; *path is the socket it asked (for messages).
int find_devices(std::string *path, DeviceListResp *out);

}  // namespace vrnic::ctl
