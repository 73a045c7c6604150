// quota_fill: what one user can make a shared vrnicd hold, kind by kind (issue 28, rows 5, 6,
// 7 and 9), for the hostile group (tests/integration/72_hostile.sh). Prints key=value lines;
// exits 0 when vrnicd held (the quota refused with ENOMEM, and gave back what was released),
// 1 when it did not, 2 on a usage or setup error.
//
//   fill KIND SOCKET     makes KIND until vrnicd refuses one, prints made=N and refused_errno,
//                        then "full" and waits for a line on stdin (meanwhile others show they
//                        are unaffected); then frees everything and makes one more
//                        (after_release=ok). KIND: pds cqs srqs ahs mws (verbs), cm-channels
//                        cm-ids (rdma_cm, on a connection without Hello), sessions
//                        (connections, each with a Hello and a PD), mappings (MRs of 128
//                        one-byte memfd pieces on pages of their own: 128 mappings in vrnicd
//                        for 128 bytes of mr_bytes)
//   one-of-each SOCKET   (the victim) one object of every kind, each made and freed: ok for
//                        each, exit 0 when all were made
//   limits [KIND...]     (issue 29) as many of each verbs kind (pds cqs srqs ahs mws mrs qps)
//                        as ibv_query_device reports, then one more: ENOMEM; exit 0 if so
//   idle SOCKET N        N connections to vrnicd that never send a byte; "full" once made;
//                        on a line on stdin, counts how many vrnicd has closed (closed=M)
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "first_device.h"
#include "raw_session.h"

namespace {

namespace ctl = vrnic::ctl;

constexpr uint16_t kPsTcp = 0x0106;  // RDMA_PS_TCP

void wait_for_line() {
  std::printf("full\n");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
}

// One kind of object: make one (nullptr-free handle, or errno), free one.
struct Kind {
  std::function<int(void **out)> make;
  std::function<void(void *)> free;
};

// What the verbs kinds are made in: a device and a PD, opened once.
struct Verbs {
  ibv_context *ctx = nullptr;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;  // the QPs', made with the first of them
  void *page = nullptr;  // what the MRs register, each its own MR of it
  Verbs() {
    const char *why = "";
    ctx = open_first_device(&why);
    if (!ctx) die(why);
    pd = ibv_alloc_pd(ctx);
    if (!pd) die("pd");
  }
};
Verbs *verbs() {
  static Verbs v;
  return &v;
}

int made_or_errno(void *p, void **out) {
  *out = p;
  return p ? 0 : errno;
}

// The raw kinds: an rdma_cm channel on a connection with no Hello, and what it names.
uint32_t cm_channel(RawSession &rs, int *err) {
  int fds[2];
  if (ctl::make_event_channel(fds)) die("socketpair");
  ctl::CreateChannelReq req{};
  ctl::HandleResp resp{};
  *err = rs.call(ctl::Op::kCmCreateChannel, &req, sizeof(req), &resp, sizeof(resp), &fds[1], 1);
  ::close(fds[1]);
  if (*err) ::close(fds[0]);  // the client's end is kept while the channel lives
  return resp.handle;
}

// An MR of 128 pieces, one byte each on a page of its own of one sealed memfd.
int sparse_mr(RawSession &rs, uint32_t *handle) {
  static int memfd = -1;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  if (memfd < 0) {
    memfd = ::memfd_create("pieces", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0 || ::ftruncate(memfd, off_t(page * ctl::kMaxMrPieces)) < 0 ||
        ::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
      die("memfd");
  }
  static uint64_t next_va = 0x200000000000ull;
  auto req = std::make_unique<ctl::RegMrReq>();
  req->pd = rs.pd;
  req->access = IBV_ACCESS_LOCAL_WRITE;
  req->addr = req->iova = next_va;
  req->length = ctl::kMaxMrPieces;
  req->npieces = ctl::kMaxMrPieces;
  for (uint32_t i = 0; i < ctl::kMaxMrPieces; i++)
    req->pieces[i] = {next_va + i, 1, i * page, uint32_t(ctl::PieceKind::kMemfd), 0, -1, 0};
  next_va += 1 << 20;
  ctl::RegMrResp resp{};
  int err = rs.call(ctl::Op::kRegMr, req.get(), sizeof(*req), &resp, sizeof(resp), &memfd, 1);
  *handle = resp.handle;
  return err;
}

// A handle as the void * a Kind deals in (raw kinds: a vrnicd handle, never 0).
void *as_ptr(uint32_t h) {
  return reinterpret_cast<void *>(uintptr_t(h));
}
uint32_t as_handle(void *p) {
  return uint32_t(reinterpret_cast<uintptr_t>(p));
}

// Frees a raw kind's object: the destroy op with its handle.
std::function<void(void *)> destroyer(RawSession *rs, ctl::Op op) {
  return [rs, op](void *p) {
    ctl::HandleReq req{as_handle(p), 0};
    rs->call(op, &req, sizeof(req), nullptr, 0);
  };
}

// A raw session after Hello (for MRs), and a connection with no Hello (for rdma_cm), each
// made once.
RawSession *session(const char *sock) {
  static RawSession rs;
  if (rs.sock < 0) {
    if (int err = rs.open(sock)) {
      errno = err;
      die("hello");
    }
  }
  return &rs;
}
RawSession *connection(const char *sock) {
  static RawSession rs;
  if (rs.sock < 0) rs.sock = ctl::connect_daemon(sock);
  if (rs.sock < 0) die("connect");
  return &rs;
}

bool kind_of(const std::string &name, const char *sock, Kind *k) {
  if (name == "sessions") {  // each a connection, a Hello and a PD
    k->make = [sock](void **out) {
      auto *rs = new RawSession;
      const int err = rs->open(sock);
      if (err) {
        if (rs->sock >= 0) ::close(rs->sock);
        delete rs;
        return err;
      }
      *out = rs;
      return 0;
    };
    k->free = [](void *p) {
      ::close(static_cast<RawSession *>(p)->sock);
      delete static_cast<RawSession *>(p);
    };
    return true;
  }
  if (name == "cm-channels" || name == "cm-ids" || name == "mappings") {
    if (name == "mappings") {
      RawSession *rs = session(sock);
      k->make = [rs](void **out) {
        uint32_t h = 0;
        int err = sparse_mr(*rs, &h);
        *out = as_ptr(h);
        return err;
      };
      k->free = destroyer(rs, ctl::Op::kDeregMr);
      return true;
    }
    RawSession *rs = connection(sock);
    if (name == "cm-channels") {
      k->make = [rs](void **out) {
        int err;
        *out = as_ptr(cm_channel(*rs, &err));
        return err;
      };
      k->free = destroyer(rs, ctl::Op::kCmDestroyChannel);
      return true;
    }
    int err;
    const uint32_t channel = cm_channel(*rs, &err);
    if (err) {
      errno = err;
      die("CM channel");
    }
    k->make = [rs, channel](void **out) {
      ctl::CmCreateIdReq req{channel, kPsTcp, IBV_QPT_RC, 0, 0};
      ctl::HandleResp resp{};
      int e = rs->call(ctl::Op::kCmCreateId, &req, sizeof(req), &resp, sizeof(resp));
      *out = as_ptr(resp.handle);
      return e;
    };
    k->free = destroyer(rs, ctl::Op::kCmDestroyId);
    return true;
  }
  Verbs *v = verbs();
  if (name == "pds") {
    k->make = [v](void **out) { return made_or_errno(ibv_alloc_pd(v->ctx), out); };
    k->free = [](void *p) { ibv_dealloc_pd(static_cast<ibv_pd *>(p)); };
  } else if (name == "cqs") {
    k->make = [v](void **out) {
      return made_or_errno(ibv_create_cq(v->ctx, 1, nullptr, nullptr, 0), out);
    };
    k->free = [](void *p) { ibv_destroy_cq(static_cast<ibv_cq *>(p)); };
  } else if (name == "srqs") {
    k->make = [v](void **out) {
      ibv_srq_init_attr a{};
      a.attr.max_wr = 1;
      a.attr.max_sge = 1;
      return made_or_errno(ibv_create_srq(v->pd, &a), out);
    };
    k->free = [](void *p) { ibv_destroy_srq(static_cast<ibv_srq *>(p)); };
  } else if (name == "ahs") {
    k->make = [v](void **out) {
      ibv_ah_attr a{};
      a.is_global = 1;
      a.port_num = 1;
      a.grh.hop_limit = 64;
      const uint8_t peer[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
      std::memcpy(a.grh.dgid.raw, peer, sizeof(peer));
      return made_or_errno(ibv_create_ah(v->pd, &a), out);
    };
    k->free = [](void *p) { ibv_destroy_ah(static_cast<ibv_ah *>(p)); };
  } else if (name == "qps") {
    k->make = [v](void **out) {
      if (!v->cq && !(v->cq = ibv_create_cq(v->ctx, 1, nullptr, nullptr, 0))) return errno;
      ibv_qp_init_attr a{};
      a.send_cq = a.recv_cq = v->cq;
      a.qp_type = IBV_QPT_RC;
      a.cap.max_send_wr = a.cap.max_recv_wr = a.cap.max_send_sge = a.cap.max_recv_sge = 1;
      return made_or_errno(ibv_create_qp(v->pd, &a), out);
    };
    k->free = [](void *p) { ibv_destroy_qp(static_cast<ibv_qp *>(p)); };
  } else if (name == "mrs") {
    k->make = [v](void **out) {
      if (!v->page) {
        v->page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (v->page == MAP_FAILED) die("mmap");
      }
      return made_or_errno(ibv_reg_mr(v->pd, v->page, 4096, IBV_ACCESS_LOCAL_WRITE), out);
    };
    k->free = [](void *p) { ibv_dereg_mr(static_cast<ibv_mr *>(p)); };
  } else if (name == "mws") {
    k->make = [v](void **out) { return made_or_errno(ibv_alloc_mw(v->pd, IBV_MW_TYPE_2), out); };
    k->free = [](void *p) { ibv_dealloc_mw(static_cast<ibv_mw *>(p)); };
  } else {
    return false;
  }
  return true;
}

int fill(const std::string &name, const char *sock) {
  Kind k;
  if (!kind_of(name, sock, &k)) {
    std::fprintf(stderr, "quota_fill: unknown kind %s\n", name.c_str());
    return 2;
  }
  std::vector<void *> made;
  int err = 0;
  for (int i = 0; i < 10'000'000 && !err; i++) {
    void *p = nullptr;
    err = k.make(&p);
    if (!err) made.push_back(p);
  }
  std::printf("made=%zu\nrefused_errno=%s\n", made.size(), strerrorname_np(err));
  wait_for_line();
  for (void *p : made) k.free(p);
  void *again = nullptr;
  int again_err = k.make(&again);
  // A closed connection is given back once vrnicd sees it close (sessions): moments later.
  for (int i = 0; i < 200 && again_err == ENOMEM && name == "sessions"; i++) {
    ::usleep(10000);
    again_err = k.make(&again);
  }
  std::printf("after_release=%s\n", again_err ? std::strerror(again_err) : "ok");
  return err == ENOMEM && !again_err ? 0 : 1;
}

// Issue 29: each limit ibv_query_device reports is one the caller can reach: as many of each
// kind as reported are made (the PD this tool holds counts), and one more is refused with
// ENOMEM. Kinds made in this order (the QPs' CQ is made last, with them).
int limits(const std::vector<std::string> &only) {
  Verbs *v = verbs();
  ibv_device_attr a{};
  if (ibv_query_device(v->ctx, &a)) die("ibv_query_device");
  const struct {
    const char *name;
    int limit;
    int held;  // of that kind, held by this tool meanwhile
  } kinds[] = {{"pds", a.max_pd, 1}, {"cqs", a.max_cq, 0}, {"srqs", a.max_srq, 0},
               {"ahs", a.max_ah, 0}, {"mws", a.max_mw, 0}, {"mrs", a.max_mr, 0},
               {"qps", a.max_qp, 0}};
  int failed = 0;
  for (const auto &kind : kinds) {
    if (!only.empty() && std::find(only.begin(), only.end(), kind.name) == only.end()) continue;
    Kind k;
    kind_of(kind.name, nullptr, &k);
    std::vector<void *> made;
    int err = 0;
    while (!err && int(made.size()) < kind.limit - kind.held + 1) {
      void *p = nullptr;
      err = k.make(&p);
      if (!err) made.push_back(p);
    }
    const bool ok = int(made.size()) == kind.limit - kind.held && err == ENOMEM;
    std::printf("%s limit=%d made=%zu refused=%s %s\n", kind.name, kind.limit,
                made.size() + size_t(kind.held), err ? strerrorname_np(err) : "none",
                ok ? "ok" : "FAIL");
    failed += !ok;
    for (void *p : made) k.free(p);
  }
  return failed ? 1 : 0;
}

int one_of_each(const char *sock) {
  int failed = 0;
  for (const char *name : {"pds", "cqs", "srqs", "ahs", "mws", "cm-channels", "cm-ids", "mappings"}) {
    Kind k;
    kind_of(name, sock, &k);
    void *p = nullptr;
    int err = k.make(&p);
    std::printf("%s=%s\n", name, err ? strerrorname_np(err) : "ok");
    if (err) {
      failed++;
    } else {
      k.free(p);
    }
  }
  return failed ? 1 : 0;
}

int idle(const char *sock, long n) {
  std::vector<int> conns;
  for (long i = 0; i < n; i++) {
    int s = ctl::connect_daemon(sock);
    if (s >= 0) conns.push_back(s);
  }
  std::printf("connected=%zu\n", conns.size());
  wait_for_line();
  long closed = 0;
  for (int s : conns) {
    pollfd p{s, POLLIN, 0};
    char c;
    // vrnicd closed it (end of file), or answered it and closed it (a reply, then the end).
    if (::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP || ::recv(s, &c, 1, MSG_PEEK) == 0))
      closed++;
  }
  std::printf("closed=%ld\nopen=%ld\n", closed, long(conns.size()) - closed);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "fill" && argc == 4) return fill(argv[2], argv[3]);
  if (cmd == "one-of-each" && argc == 3) return one_of_each(argv[2]);
  if (cmd == "limits") return limits(std::vector<std::string>(argv + 2, argv + argc));
  if (cmd == "idle" && argc == 4) return idle(argv[2], std::strtol(argv[3], nullptr, 0));
  std::fprintf(stderr,
               "usage: quota_fill fill KIND SOCKET | one-of-each SOCKET | idle SOCKET N |\n"
               "       limits [KIND...]\n"
               "  KIND: pds cqs srqs ahs mws cm-channels cm-ids mappings\n");
  return 2;
}
