// shared_fds: every descriptor vrnicd hands a client, turned against it (issue 52, row 4). A
// descriptor passed over a socket shares its file description -- flags, offset, counter,
// seals -- with vrnicd, so vrnicd must never let one decide how it waits. This client takes
// a session and one of each object that comes with a descriptor (CQ, QP ring chunk, SRQ, DM),
// then on each: clears O_NONBLOCK (and sets O_APPEND), and by kind -- an eventfd: threads
// reading it in a loop (blocking), then its counter filled; a memfd: writes, a hole punched,
// seals added, a truncation -- and holds that for SECONDS. vrnicd must serve everyone else
// meanwhile (the hostile group probes it and runs other users' traffic).
//
//   shared_fds SOCKET SECONDS
//
// Prints what it did to which kinds (fds=N eventfds=N memfds=N threads=N) and exits 0 unless
// setup failed (2): whether vrnicd held is for the probes to say.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "raw_session.h"
#include "vrnic/ctl_io.h"

namespace {

namespace ctl = vrnic::ctl;

// What a descriptor is, by its /proc/self/fd link: "anon_inode:[eventfd]", "/memfd:vrnic-cq
// (deleted)", ...
std::string kind_of(int fd) {
  char link[64], target[256];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, size_t(n)) : "";
}

// A request whose reply's descriptors are kept in *fds.
int call_keep(RawSession &s, ctl::Op op, const void *req, size_t len, void *resp,
              size_t resp_len, std::vector<int> *fds, const int *send_fds = nullptr,
              size_t nsend = 0) {
  int err = ctl::send_message(s.sock, op, 0, req, len, send_fds, nsend);
  auto m = std::make_unique<ctl::Message>();
  if (!err) err = ctl::recv_message(s.sock, m.get());
  if (!err) err = m->header.status;
  if (!err && resp_len) std::memcpy(resp, m->body, std::min<size_t>(resp_len, m->header.length));
  fds->insert(fds->end(), m->fds.begin(), m->fds.end());
  m->fds.clear();
  return err;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: shared_fds SOCKET SECONDS\n");
    return 2;
  }
  const char *path = argv[1];
  const double seconds = std::atof(argv[2]);
  RawSession s;
  s.sock = ctl::connect_daemon(path);
  if (s.sock < 0) die("connect");
  std::vector<int> fds;
  int event_fds[2];
  if (ctl::make_event_channel(event_fds)) die("event channel");
  const int mem = ::open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  const int hello_fds[2] = {event_fds[1], mem};
  ctl::HelloReq hello{ctl::kProtocolVersion, 0};
  auto hr = std::make_unique<ctl::HelloResp>();
  if (int err = call_keep(s, ctl::Op::kHello, &hello, sizeof(hello), hr.get(), sizeof(*hr), &fds,
                          hello_fds, 2)) {
    errno = err;
    die("hello");
  }
  ctl::HandleResp pd{};
  std::vector<int> none;
  if (call_keep(s, ctl::Op::kAllocPd, nullptr, 0, &pd, sizeof(pd), &none)) die("pd");
  ctl::CreateCqReq cq{};
  cq.cqe = 64;
  ctl::CreateCqResp cqr{};
  if (call_keep(s, ctl::Op::kCreateCq, &cq, sizeof(cq), &cqr, sizeof(cqr), &fds)) die("cq");
  ctl::CreateQpReq qp{};
  qp.pd = pd.handle;
  qp.send_cq = qp.recv_cq = cqr.handle;
  qp.qp_type = IBV_QPT_RC;
  qp.caps.max_send_wr = qp.caps.max_recv_wr = 16;
  qp.caps.max_send_sge = qp.caps.max_recv_sge = 1;
  ctl::CreateQpResp qpr{};
  if (call_keep(s, ctl::Op::kCreateQp, &qp, sizeof(qp), &qpr, sizeof(qpr), &fds)) die("qp");
  ctl::CreateSrqReq srq{};
  srq.pd = pd.handle;
  srq.srq_type = IBV_SRQT_BASIC;
  srq.attr.max_wr = 16;
  srq.attr.max_sge = 1;
  ctl::CreateSrqResp srqr{};
  if (call_keep(s, ctl::Op::kCreateSrq, &srq, sizeof(srq), &srqr, sizeof(srqr), &fds)) die("srq");
  ctl::AllocDmReq dm{};
  dm.length = 4096;
  ctl::AllocDmResp dmr{};
  if (call_keep(s, ctl::Op::kAllocDm, &dm, sizeof(dm), &dmr, sizeof(dmr), &fds)) die("dm");

  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  int eventfds = 0, memfds = 0;
  for (int fd : fds) {
    // The description's flags, shared with vrnicd.
    ::fcntl(fd, F_SETFL, (::fcntl(fd, F_GETFL) & ~O_NONBLOCK) | O_APPEND);
    const std::string kind = kind_of(fd);
    if (kind.find("eventfd") != std::string::npos) {
      eventfds++;
      for (int t = 0; t < 4; t++)
        readers.emplace_back([fd, &stop] {
          uint64_t v;
          while (!stop.load() && ::read(fd, &v, sizeof(v)) == sizeof(v)) {
          }
        });
      ::usleep(100000);
      const uint64_t full = 0xfffffffffffffffeull;  // the counter at its top: writes block
      [[maybe_unused]] ssize_t n = ::write(fd, &full, sizeof(full));
    } else if (kind.find("memfd:") != std::string::npos) {
      memfds++;
      char junk[64];
      std::memset(junk, 0xee, sizeof(junk));
      [[maybe_unused]] ssize_t n = ::pwrite(fd, junk, sizeof(junk), 4096);
      n = ::pread(fd, junk, sizeof(junk), 0);
      ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 4096);
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
      [[maybe_unused]] int t = ::ftruncate(fd, 0);
    }
  }
  std::printf("fds=%zu eventfds=%d memfds=%d threads=%zu\n", fds.size(), eventfds, memfds,
              readers.size());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  // The readers block in read(): the process exits with them (vrnicd cleans up the session).
  std::_Exit(0);
}
