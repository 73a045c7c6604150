// open_close: N cycles of ibv_get_device_list / ibv_open_device / ibv_close_device /
// ibv_free_device_list on the first device, as N short-lived programs (ibv_devinfo, say) would
// do them. Prints "cycles=N" and exits 0 when every open succeeded, 1 otherwise, 2 on bad usage.
//
// usage: open_close N
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>

#include "first_device.h"

int main(int argc, char **argv) {
  long n = argc == 2 ? std::strtol(argv[1], nullptr, 10) : 0;
  if (n <= 0) {
    std::fprintf(stderr, "usage: open_close N\n");
    return 2;
  }
  for (long i = 0; i < n; i++) {
    const char *why = "";
    ibv_context *ctx = open_first_device(&why);
    if (!ctx) {
      std::printf("FAIL: cycle %ld: %s\n", i, why);
      return 1;
    }
    if (ibv_close_device(ctx)) {
      std::printf("FAIL: cycle %ld: ibv_close_device\n", i);
      return 1;
    }
  }
  std::printf("cycles=%ld\n", n);
  return 0;
}
