// Sealed memfds shared with clients (shared_region.h).
#include "shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "errno_status.h"

namespace vrnic {

absl::StatusOr<SharedRegion> make_shared_region(const char *name, size_t bytes,
                                                ClientAccess clients) {
  int fd = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno_status(errno, "memfd_create");
  int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if (clients == ClientAccess::kReadOnly) seals |= F_SEAL_FUTURE_WRITE;  // vrnicd's map stays
  void *p = MAP_FAILED;
  if (::ftruncate(fd, off_t(bytes)) < 0 ||
      (p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED ||
      ::fcntl(fd, F_ADD_SEALS, seals) < 0) {
    int err = errno;
    if (p != MAP_FAILED) ::munmap(p, bytes);
    ::close(fd);
    return errno_status(err, name);
  }
  return SharedRegion{fd, p, bytes};
}

void SharedRegion::release() {
  if (map) ::munmap(map, bytes);
  if (fd >= 0) ::close(fd);
  map = nullptr;
  fd = -1;
}

}  // namespace vrnic
