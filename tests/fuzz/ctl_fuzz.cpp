// ctl_fuzz: hostile control-protocol messages for vrnicd's socket (the fuzz group runs it at a
// vrnicd built with ASan+UBSan, while verified RC traffic goes through that vrnicd; issue 17).
//
// Several connections at once, each for a random number of messages, then closed (sometimes
// in the middle of things, with objects left behind for vrnicd to reclaim). Each message is
// one of:
//   - random bytes: any length up to the protocol's maximum, a header or not, magic or not;
//   - a well-formed request of a random op whose body is mutated (bytes flipped, fields set to
//     edge values, lengths cut short or padded), after a Hello or without one;
//   - a truthful request sequence: Hello, PD, CQ, QP, MR over a memfd, with random values;
// with descriptors of every kind attached at random: pipe ends, a regular file, a socket,
// an eventfd, /dev/null, memfds of wrong sizes (empty, one byte, sparse and huge), sealed
// or not. Never SetFaults (an admin's right to break the device is by design). And event
// channels played against vrnicd (issue 28, rows 2 and 3): the fuzzer keeps the end it handed
// over (the very file description vrnicd writes), changes its file status flags (O_NONBLOCK
// off, O_APPEND, O_ASYNC), its send buffer and its shutdown state, fills it, and makes vrnicd
// post to it (a connect rejected at once).
//
// Every message must get its reply, or the connection closed, within a second: a hang fails
// the run. Prints key=value lines (messages, replies by status, connections closed by
// vrnicd); exit 0 when vrnicd answered everything, 1 otherwise.
//
//   ctl_fuzz --socket PATH --seconds N [--seed S]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../tools/raw_session.h"
#include "vrnic/ctl_io.h"

namespace {

using vrnic::ctl::Op;
using Clock = std::chrono::steady_clock;

std::mt19937_64 rng;
uint64_t rnd(uint64_t n) {
  return n ? rng() % n : 0;
}

// A descriptor of some kind; the caller closes it after sending.
int random_fd() {
  int fds[2];
  switch (rnd(9)) {
    case 0:
    case 1: {  // either end of a pipe
      if (::pipe2(fds, O_CLOEXEC) < 0) return -1;
      const int keep = int(rnd(2));
      ::close(fds[1 - keep]);
      return fds[keep];
    }
    case 2: {
      char path[] = "/tmp/ctl_fuzz.XXXXXX";
      int fd = ::mkstemp(path);
      if (fd >= 0) {
        ::unlink(path);
        [[maybe_unused]] int r = ::ftruncate(fd, off_t(rnd(1 << 20)));
      }
      return fd;
    }
    case 3:
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) return -1;
      ::close(fds[1]);
      return fds[0];
    case 4:
      return ::eventfd(0, EFD_CLOEXEC);
    case 5:
      return ::open("/dev/null", O_RDWR | O_CLOEXEC);
    default: {  // memfds of every wrong (and some right) size
      int fd = ::memfd_create("ctl_fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (fd < 0) return -1;
      static const uint64_t sizes[] = {0, 1, 4095, 4096, 65536, 1ull << 20, 1ull << 34};
      [[maybe_unused]] int r = ::ftruncate(fd, off_t(sizes[rnd(std::size(sizes))]));
      if (rnd(2))
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | (rnd(2) ? F_SEAL_SEAL : 0));
      return fd;
    }
  }
}

uint64_t edge_value() {
  static const uint64_t v[] = {
      0,         1,       2,          7,          8,          0xff,           0x100,
      0xffff,    0x10000, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull, ~0ull,
      ~0ull >> 1};
  return v[rnd(std::size(v))];
}

struct Stats {
  uint64_t messages = 0, replies = 0, ok = 0, errors = 0, closed_by_vrnicd = 0, hangs = 0;
  uint64_t channel_steps = 0, events_provoked = 0;  // channel_step: steps, connects made
  std::map<int, uint64_t> by_status;
};

struct Conn {
  int sock = -1;
  bool hello = false;
  std::vector<uint32_t> handles{1, 2, 3};  // handles seen in replies, for later requests
  // Event channel ends handed to vrnicd and kept (closed with the connection), and the
  // rdma_cm channels among them.
  std::vector<int> shared_ends;
  std::vector<uint32_t> cm_channels;
};

// Sends one message; waits for its reply or the close. False when the connection is over.
// fds: sent (and closed); random ones of every kind are added now and then.
// got: the handle a successful reply carries, if any (else 0).
bool exchange(Conn &c, Stats &st, uint16_t op, const void *body, size_t len, bool raw_header,
              std::vector<int> fds = {}, uint32_t *got = nullptr) {
  if (got) *got = 0;
  size_t nfds = rnd(4) == 0 ? rnd(5) : 0;
  for (size_t i = 0; i < nfds; i++)
    if (int fd = random_fd(); fd >= 0) fds.push_back(fd);
  int err;
  if (raw_header) {  // bytes that may not even be a header
    err = ::send(c.sock, body, len, MSG_NOSIGNAL) < 0 ? errno : 0;
  } else {
    err = vrnic::ctl::send_message(c.sock, Op(op), int32_t(rnd(8) ? 0 : rng()), body, len,
                                   fds.data(), fds.size());
  }
  for (int fd : fds) ::close(fd);
  st.messages++;
  if (err) {
    st.closed_by_vrnicd++;
    return false;
  }
  pollfd p{c.sock, POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) {
    st.hangs++;
    std::fprintf(stderr, "ctl_fuzz: no reply within 1 s to op %u (%zu bytes)\n", op, len);
    return false;
  }
  auto m = std::make_unique<vrnic::ctl::Message>();
  err = vrnic::ctl::recv_message(c.sock, m.get());
  if (err) {
    st.closed_by_vrnicd++;
    return false;
  }
  st.replies++;
  st.by_status[m->header.status]++;
  if (m->header.status == 0) {
    st.ok++;
    if (m->header.length >= 4) {
      uint32_t h;
      std::memcpy(&h, m->body, 4);
      if (h && c.handles.size() < 64) c.handles.push_back(h);
      if (got) *got = h;
    }
    if (op == uint16_t(Op::kHello)) c.hello = true;
  } else {
    st.errors++;
  }
  m->close_fds();
  return true;
}

uint32_t some_handle(const Conn &c) {
  return rnd(4) ? c.handles[rnd(c.handles.size())] : uint32_t(edge_value());
}

// A request body for op with plausible fields, then mutated.
size_t plausible_body(const Conn &c, uint16_t op, uint8_t *body) {
  size_t len = 8 + rnd(512);
  for (size_t i = 0; i < len; i++) body[i] = uint8_t(rnd(4) ? 0 : rng());
  auto put32 = [&](size_t off, uint32_t v) { std::memcpy(body + off, &v, 4); };
  switch (Op(op)) {
    case Op::kHello:
      put32(0, rnd(4) ? vrnic::ctl::kProtocolVersion : uint32_t(edge_value()));
      len = 8;
      break;
    case Op::kRegMr: {
      len = 48 + rnd(3) * 32;
      put32(0, some_handle(c));
      put32(4, uint32_t(rnd(2) ? 1 : edge_value()));
      uint64_t addr = rnd(2) ? 0x7f0000000000ull : edge_value();
      uint64_t length = rnd(2) ? 4096 : edge_value();
      std::memcpy(body + 8, &addr, 8);
      std::memcpy(body + 16, &length, 8);
      std::memcpy(body + 24, &addr, 8);
      put32(32, uint32_t(rnd(3) ? 1 : edge_value()));
      // one piece at 40: va, length, fd_offset, kind, fd_index
      std::memcpy(body + 40, &addr, 8);
      if (len >= 48 + 32) {
        std::memcpy(body + 48, &length, 8);
        uint64_t off = rnd(2) ? 0 : edge_value();
        std::memcpy(body + 56, &off, 8);
        put32(64, uint32_t(1 + rnd(3)));
        put32(68, uint32_t(rnd(3)));
      }
      break;
    }
    default:
      for (size_t off = 0; off + 4 <= len && off < 64; off += 4)
        if (rnd(2)) put32(off, rnd(2) ? some_handle(c) : uint32_t(edge_value()));
  }
  // Mutations.
  size_t flips = rnd(4);
  for (size_t i = 0; i < flips && len; i++) body[rnd(len)] ^= uint8_t(1u << rnd(8));
  if (rnd(5) == 0) len = rnd(len + 1);  // cut short
  return len;
}

// What a client can do to a channel end it shares with vrnicd: the file status flags, the
// socket's send buffer and shutdown state are those of vrnicd's end too.
void mess_with(int fd) {
  switch (rnd(5)) {
    case 0: {
      int flags = (rnd(2) ? O_NONBLOCK : 0) | (rnd(2) ? O_APPEND : 0) | (rnd(2) ? O_ASYNC : 0);
      ::fcntl(fd, F_SETOWN, ::getpid());  // SIGIO, if any, is ours (ignored)
      ::fcntl(fd, F_SETFL, flags);
      break;
    }
    case 1: {
      int bytes = rnd(2) ? 1 : 1 << 22;
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
      break;
    }
    case 2:
      ::shutdown(fd, int(rnd(3)));  // SHUT_RD, SHUT_WR, SHUT_RDWR
      break;
    default: {  // full, then blocking: the trap a pipe was
      ::fcntl(fd, F_SETFL, O_NONBLOCK);
      vrnic::ctl::CmEventRecord filler{};
      filler.event = 0xffff;
      for (int i = 0; i < 100000 && vrnic::ctl::send_event(fd, &filler, sizeof(filler)); i++) {
      }
      ::fcntl(fd, F_SETFL, 0);
    }
  }
}

// One event channel step: a new channel (completion or rdma_cm) whose end we keep, or a
// change to one we kept; then an event vrnicd must post at once, to a channel of ours: a
// connect to a loopback port nobody listens on is rejected.
void channel_step(Conn &c, Stats &st) {
  st.channel_steps++;
  if (c.shared_ends.empty() || rnd(4) == 0) {
    int ev[2];
    if (vrnic::ctl::make_event_channel(ev) != 0) return;
    const int keep = ::dup(ev[1]);
    const bool cm = !c.hello || rnd(2);
    vrnic::ctl::CreateChannelReq req{};
    uint32_t handle;
    if (!exchange(c, st, uint16_t(cm ? Op::kCmCreateChannel : Op::kCreateChannel), &req,
                  sizeof(req), false, {ev[1]}, &handle)) {
      ::close(ev[0]);
      ::close(keep);
      return;
    }
    ::close(ev[0]);  // nobody reads: vrnicd's records have nowhere to go but a full buffer
    c.shared_ends.push_back(keep);
    if (cm && handle) c.cm_channels.push_back(handle);
  } else {
    mess_with(c.shared_ends[rnd(c.shared_ends.size())]);
  }
  if (c.cm_channels.empty()) return;
  const uint32_t channel = c.cm_channels[rnd(c.cm_channels.size())];
  vrnic::ctl::CmCreateIdReq idreq{channel, 0x0106 /* RDMA_PS_TCP */, 2 /* IBV_QPT_RC */, 0, 0};
  uint32_t id;
  if (!exchange(c, st, uint16_t(Op::kCmCreateId), &idreq, sizeof(idreq), false, {}, &id) || !id)
    return;
  vrnic::ctl::CmBindReq bind{id, 0, {}};
  if (!exchange(c, st, uint16_t(Op::kCmBind), &bind, sizeof(bind), false)) return;
  const vrnic::ctl::CmConnectReq conn = connect_to_nobody(id);
  const uint64_t ok = st.ok;
  if (exchange(c, st, uint16_t(Op::kCmConnect), &conn, sizeof(conn), false) && st.ok > ok)
    st.events_provoked++;
}

void run_connection(const char *path, Stats &st) {
  Conn c;
  c.sock = vrnic::ctl::connect_daemon(path);
  if (c.sock < 0) {
    std::fprintf(stderr, "ctl_fuzz: connect: %s\n", std::strerror(-c.sock));
    st.hangs++;  // refusing a fresh connection counts as not serving
    return;
  }
  static uint8_t body[vrnic::ctl::kMaxMessageBytes + 64];
  if (rnd(5)) {  // most connections start as the library does, to get past Hello
    int event_fds[2];
    if (vrnic::ctl::make_event_channel(event_fds) == 0) {
      ::close(event_fds[0]);
      std::vector<int> fds{event_fds[1]};
      if (rnd(2)) fds.push_back(::open("/proc/self/mem", O_RDWR | O_CLOEXEC));
      vrnic::ctl::HelloReq hello{vrnic::ctl::kProtocolVersion, 0};
      if (!exchange(c, st, uint16_t(Op::kHello), &hello, sizeof(hello), false, fds)) {
        ::close(c.sock);
        return;
      }
    }
  }
  const uint64_t n = 1 + rnd(200);
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t kind = rnd(10);
    if (kind == 1) {
      channel_step(c, st);
      continue;
    }
    if (kind == 0) {  // raw bytes, maybe not even a header
      size_t len = rnd(sizeof(body));
      for (size_t j = 0; j < len; j++) body[j] = uint8_t(rng());
      if (len >= 4 && rnd(2)) std::memcpy(body, &vrnic::ctl::kMagic, 4);
      if (!exchange(c, st, 0, body, len, true)) break;
      continue;
    }
    uint16_t op;
    if (!c.hello && rnd(3) == 0) {
      op = uint16_t(Op::kHello);
    } else {
      do {
        op = uint16_t(rnd(uint64_t(vrnic::ctl::kLastOp) + 4));  // every op, and a few past the last
      } while (op == uint16_t(Op::kSetFaults));
    }
    size_t len = plausible_body(c, op, body);
    if (!exchange(c, st, op, body, len, false)) break;
  }
  ::close(c.sock);  // objects left behind are vrnicd's to reclaim
  for (int fd : c.shared_ends) ::close(fd);
}

}  // namespace

int main(int argc, char **argv) {
  std::string path;
  double seconds = 10;
  uint64_t seed = std::random_device{}();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--socket")
      path = argv[i + 1];
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (a == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 0);
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: ctl_fuzz --socket PATH --seconds N [--seed S]\n");
    return 2;
  }
  rng.seed(seed);
  ::signal(SIGIO, SIG_IGN);  // channel ends we set O_ASYNC on signal us
  Stats st;
  uint64_t connections = 0;
  auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds && !st.hangs) {
    run_connection(path.c_str(), st);
    connections++;
  }
  std::printf("seed=%" PRIu64 "\nconnections=%" PRIu64 "\nmessages=%" PRIu64 "\nreplies=%" PRIu64
              "\nreplies_ok=%" PRIu64 "\nreplies_error=%" PRIu64 "\nclosed_by_vrnicd=%" PRIu64
              "\nhangs=%" PRIu64 "\nchannel_steps=%" PRIu64 "\nevents_provoked=%" PRIu64 "\n",
              seed, connections, st.messages, st.replies, st.ok, st.errors, st.closed_by_vrnicd,
              st.hangs, st.channel_steps, st.events_provoked);
  for (auto &[status, n] : st.by_status)
    std::printf("status_%s=%" PRIu64 "\n", status ? strerrorname_np(status) ?: "?" : "0", n);
  return st.hangs ? 1 : 0;
}
