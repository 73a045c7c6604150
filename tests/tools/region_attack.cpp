// region_attack: what a client can do to the memory it shares with vrnicd, tried from inside
// a verbs program (issue 17, rows 4 and 12). It opens the first device, makes a CQ, a QP and
// an MR (whose pages the provider moves into a memfd of its own, which vrnicd maps),
// then finds vrnicd's regions among its mappings (memfds named vrnic-*) and tries, on each:
// shrinking and growing it (vrnicd would die of SIGBUS at its next access to a shrunk page),
// and on the daemon region, which every client shares read-only: mapping it writable, writing
// it, and making a read-only mapping writable. Every attempt must be refused (EPERM or
// EACCES) and the device must still answer afterwards. Prints one line per attempt; exits 0
// when all were refused, 1 otherwise.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "first_device.h"

namespace {

int failures = 0;

void expect_refused(const std::string &what, int rc) {
  bool refused = rc < 0 && (errno == EPERM || errno == EACCES);
  std::printf("%s: %s\n", what.c_str(),
              refused  ? "refused"
              : rc < 0 ? std::strerror(errno)
                       : "ALLOWED");
  if (!refused) failures++;
}

}  // namespace

int main() {
  const char *why = "";
  ibv_context *ctx = open_first_device(&why);
  if (!ctx) {
    std::printf("FAIL: %s\n", why);
    return 1;
  }
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_cq *cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ibv_qp *qp = pd && cq ? ibv_create_qp(pd, &ia) : nullptr;
  // Whole pages, so that the provider moves them into a memfd it shares with vrnicd.
  const size_t mr_len = 16 * 4096;
  void *buf = mmap(nullptr, mr_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ibv_mr *mr = qp && buf != MAP_FAILED
                   ? ibv_reg_mr(pd, buf, mr_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
                   : nullptr;
  if (!qp || !mr) {
    std::printf("FAIL: PD, CQ, QP or MR\n");
    return 1;
  }
  // The provider keeps the mappings, not the fds; a client speaking the control protocol
  // itself keeps the fds it is sent. The same files are reached here through
  // /proc/self/map_files (which needs CAP_SYS_ADMIN: the test runs as root).
  int regions = 0;
  FILE *maps = std::fopen("/proc/self/maps", "r");
  char line[512];
  std::string seen;
  while (maps && std::fgets(line, sizeof(line), maps)) {
    const char *at = std::strstr(line, "/memfd:vrnic-");
    if (!at) continue;
    std::string name(at + 7, std::strcspn(at + 7, " \n"));
    std::string range(line, std::strcspn(line, " "));
    if (seen.find(name + ";") != std::string::npos) continue;  // each kind of region once
    seen += name + ";";
    int fd = open(("/proc/self/map_files/" + range).c_str(), O_RDWR);
    if (fd < 0) fd = open(("/proc/self/map_files/" + range).c_str(), O_RDONLY);
    if (fd < 0) {
      std::printf("%s: cannot open it through map_files: %s\n", name.c_str(), std::strerror(errno));
      failures++;
      continue;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    regions++;
    expect_refused(name + " shrink", ftruncate(fd, 0));
    expect_refused(name + " grow", ftruncate(fd, size + 4096));
    if (name == "vrnic-daemon") {
      void *w = mmap(nullptr, size_t(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      expect_refused(name + " map writable", w == MAP_FAILED ? -1 : 0);
      char byte = 1;
      expect_refused(name + " write()", int(pwrite(fd, &byte, 1, 0)));
      void *r = mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
      if (r == MAP_FAILED) {
        std::printf("%s map read-only: %s (want allowed)\n", name.c_str(), std::strerror(errno));
        failures++;
      } else {
        expect_refused(name + " mprotect writable",
                       mprotect(r, size_t(size), PROT_READ | PROT_WRITE));
        munmap(r, size_t(size));
      }
    }
    close(fd);
  }
  if (maps) std::fclose(maps);
  ibv_device_attr attr;
  bool alive = ibv_query_device(ctx, &attr) == 0 && ibv_dereg_mr(mr) == 0 &&
               ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0;
  std::printf("regions tried: %d; device %s afterwards\n", regions, alive ? "answers" : "FAILED");
  ibv_close_device(ctx);
  if (regions < 5 || !alive) failures++;  // the session, daemon, CQ, QP and MR regions
  return failures ? 1 : 0;
}
