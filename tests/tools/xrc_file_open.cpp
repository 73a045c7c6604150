// xrc_file_open: ibv_open_xrcd on a file, opened O_PATH or O_RDONLY (issue 52, row 6). The
// kernel takes the domain's fd with fdget(), which refuses an O_PATH descriptor (EBADF): one
// can be had for a file the caller cannot open (another user's 0600 file), and with it the
// caller would join that user's domain. Prints open_xrcd=0 or the errno's name; exits 0
// unless the device does not open (2).
//
//   xrc_file_open FILE opath|read
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "first_device.h"

int main(int argc, char **argv) {
  if (argc != 3 || (std::strcmp(argv[2], "opath") != 0 && std::strcmp(argv[2], "read") != 0)) {
    std::fprintf(stderr, "usage: xrc_file_open FILE opath|read\n");
    return 2;
  }
  const char *why = nullptr;
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) {
    std::printf("setup_error=%s\n", why);
    return 2;
  }
  const int fd = ::open(argv[1], (std::strcmp(argv[2], "opath") == 0 ? O_PATH : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    std::printf("open=%s\n", strerrorname_np(errno));
    return 0;
  }
  ibv_xrcd_init_attr attr{};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = fd;
  attr.oflags = O_CREAT;
  ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &attr);
  std::printf("open_xrcd=%s\n", xrcd ? "0" : strerrorname_np(errno));
  if (xrcd) ibv_close_xrcd(xrcd);
  ::close(fd);
  ibv_close_device(ctx);
  return 0;
}
