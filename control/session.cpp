// What a session and a channel hold that must be closed with them (session.h).
#include "session.h"

#include <sys/mman.h>
#include <unistd.h>

namespace vrnic {

CompletionChannel::~CompletionChannel() {
  if (fd >= 0) ::close(fd);
}

Session::~Session() {
  if (shm) ::munmap(shm, sizeof(shm::SessionShared));
  if (shm_fd >= 0) ::close(shm_fd);
  if (async_fd >= 0) ::close(async_fd);
  if (mem_fd >= 0) ::close(mem_fd);
  if (wake_fd >= 0) ::close(wake_fd);
  if (sock >= 0) ::close(sock);
}

}  // namespace vrnic
