// srq_churn: RC connections on one shared receive queue, opened and torn down in quick
// succession, as a storage system's messenger makes them (issue 53, item 2: an accepting side
// got IBV_EVENT_QP_LAST_WQE_REACHED for a QP it had just moved to RTR). QP numbers go over
// TCP; the server takes each connection through INIT, RTR and RTS while others' traffic flows
// and others are torn down (moved to ERR and destroyed at once, or after their last WQE
// event); the clients send verified messages and then close, politely or not.
//
//   srq_churn server PORT SECONDS [GID_INDEX]   exits 0 when no QP that was not meant to
//                                      fail reported an error or an event, no transition
//                                      failed, and every byte arrived as sent
//   srq_churn client HOST PORT SECONDS [GID_INDEX]
//
// Both print key=value lines (connections, messages, the first failure if any); exit 1 on a
// failure, 2 on a setup error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "first_device.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kSlots = 256, kSlotBytes = 4096, kMessages = 16;

struct Hello {  // what each side tells the other over TCP
  uint32_t qpn, psn;
  uint8_t gid[16];
};

[[noreturn]] void setup_error(const char *what) {
  std::printf("setup_error=%s (%s)\n", what, std::strerror(errno));
  std::fflush(stdout);
  std::exit(2);
}

int failures = 0;
void fail(const std::string &why) {
  if (!failures++) std::printf("first_failure=%s\n", why.c_str());
  std::fflush(stdout);
}

bool full_io(int fd, void *buf, size_t len, bool write) {
  auto *p = static_cast<uint8_t *>(buf);
  while (len) {
    const ssize_t n = write ? ::send(fd, p, len, MSG_NOSIGNAL) : ::recv(fd, p, len, 0);
    if (n <= 0) return false;
    p += n;
    len -= size_t(n);
  }
  return true;
}

// The byte at `i` of message `seq` of connection `conn`: what the server checks.
uint8_t pattern(uint32_t conn, uint32_t seq, uint32_t i) { return uint8_t(conn * 31 + seq * 7 + i); }

struct Device {
  ibv_context *ctx;
  ibv_pd *pd;
  uint8_t gid[16];
  int gid_index;
};

Device open_device(int gid_index) {
  const char *why = nullptr;
  Device d{};
  d.ctx = open_first_device(&why);
  if (!d.ctx) setup_error(why);
  d.pd = ibv_alloc_pd(d.ctx);
  d.gid_index = gid_index;
  ibv_gid g;
  if (!d.pd || ibv_query_gid(d.ctx, 1, gid_index, &g)) setup_error("PD or GID");
  std::memcpy(d.gid, g.raw, 16);
  return d;
}

// INIT, then RTR towards `peer`, then (if rts) RTS; false on a failure (reported).
bool to_init(ibv_qp *qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  if (!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return true;
  fail("INIT: " + std::string(std::strerror(errno)));
  return false;
}
bool to_rtr(ibv_qp *qp, const Hello &peer, int gid_index) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.sgid_index = uint8_t(gid_index);
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  if (!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return true;
  fail("RTR: " + std::string(std::strerror(errno)));
  return false;
}
bool to_rts(ibv_qp *qp, uint32_t psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    return true;
  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ibv_query_qp(qp, &q, IBV_QP_STATE, &qi);
  fail("RTS: " + std::string(std::strerror(errno)) + " (the QP is in state " +
       std::to_string(q.qp_state) + ")");
  return false;
}

// ---- server ----

struct Conn {
  int sock;
  uint32_t id;
  ibv_qp *qp;
  bool torn = false;  // moved to ERR by us: its flushes and its last-WQE event are expected
  uint32_t next_seq = 0;
};

int server(int port, double seconds, int gid_index) {
  Device d = open_device(gid_index);
  ibv_cq *cq = ibv_create_cq(d.ctx, 4096, nullptr, nullptr, 0);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = kSlots;
  sa.attr.max_sge = 1;
  ibv_srq *srq = cq ? ibv_create_srq(d.pd, &sa) : nullptr;
  std::vector<uint8_t> buf(size_t(kSlots) * kSlotBytes);
  ibv_mr *mr = srq ? ibv_reg_mr(d.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (!mr) setup_error("CQ, SRQ or MR");
  auto post = [&](uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&buf[size_t(slot) * kSlotBytes]), kSlotBytes, mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_srq_recv(srq, &wr, &bad)) fail("ibv_post_srq_recv");
  };
  for (uint32_t i = 0; i < kSlots; i++) post(i);
  ::fcntl(d.ctx->async_fd, F_SETFL, ::fcntl(d.ctx->async_fd, F_GETFL) | O_NONBLOCK);
  const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(l, reinterpret_cast<sockaddr *>(&a), sizeof(a)) || ::listen(l, 64))
    setup_error("listen");
  std::printf("listening=%d\n", port);
  std::fflush(stdout);
  std::map<uint32_t, Conn> by_qpn;  // every QP we hold (torn ones until destroyed), by QPN
  std::map<int, uint32_t> by_sock;  // the connections still open, and their QPs' numbers
  std::set<const ibv_qp *> live;    // the same QPs, by address
  std::mt19937 rng(uint32_t(::getpid()));
  uint32_t next_id = 1;
  uint64_t conns = 0, messages = 0, events = 0, torn_waited = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  auto teardown = [&](Conn &c) {
    // Moved to ERR, then destroyed: at once (its last-WQE event may be on its way: it must
    // not be reported for a QP made after it), or once the event came, as the spec intends.
    c.torn = true;
    ibv_qp_attr e{};
    e.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(c.qp, &e, IBV_QP_STATE)) fail("to ERR");
    ::close(c.sock);
    if (rng() % 2 == 0) {
      ibv_qp *qp = c.qp;
      live.erase(qp);
      by_qpn.erase(qp->qp_num);  // (c goes with it)
      if (ibv_destroy_qp(qp)) fail("destroy");
    }
  };
  while (Clock::now() < end || !by_sock.empty()) {
    const bool accepting = Clock::now() < end;
    std::vector<pollfd> pfds{{l, short(accepting ? POLLIN : 0), 0}, {d.ctx->async_fd, POLLIN, 0}};
    for (auto &[fd, qpn] : by_sock) pfds.push_back({fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 1);
    // Async events: a QP's last WQE for one we tore down, communication established for one
    // we hold; nothing else, and nothing for a QP destroyed.
    ibv_async_event ev;
    while (ibv_get_async_event(d.ctx, &ev) == 0) {
      events++;
      const ibv_qp *qp = ev.element.qp;
      const bool ours = live.count(qp);
      auto found = ours ? by_qpn.find(qp->qp_num) : by_qpn.end();
      Conn *c = found != by_qpn.end() ? &found->second : nullptr;
      // A QP in RTR that receives is told communication is established (IB spec 11.6.3):
      // no error, for a live QP.
      if (ev.event_type == IBV_EVENT_COMM_EST && ours && c) {
        ibv_ack_async_event(&ev);
        continue;
      }
      if (ev.event_type != IBV_EVENT_QP_LAST_WQE_REACHED || !ours || !c || !c->torn) {
        char why[160];
        std::snprintf(why, sizeof(why), "event %s for %s QP %p", ibv_event_type_str(ev.event_type),
                      !ours ? "a destroyed" : c && !c->torn ? "a live" : "an unknown", (void *)qp);
        fail(why);
        ibv_ack_async_event(&ev);
        continue;
      }
      ibv_ack_async_event(&ev);
      ibv_qp *gone = c->qp;
      live.erase(gone);
      by_qpn.erase(gone->qp_num);
      if (ibv_destroy_qp(gone)) fail("destroy after its last WQE");
      torn_waited++;
    }
    // Completions: receives on live QPs, checked; flushes only on torn ones.
    ibv_wc wc[32];
    for (int n; (n = ibv_poll_cq(cq, 32, wc)) > 0;)
      for (int i = 0; i < n; i++) {
        auto found = by_qpn.find(wc[i].qp_num);
        Conn *c = found != by_qpn.end() ? &found->second : nullptr;
        if (wc[i].status != IBV_WC_SUCCESS) {
          if (!c || !c->torn)
            fail(std::string("completion ") + ibv_wc_status_str(wc[i].status) + " on a live QP");
        } else if (c) {
          const uint8_t *p = &buf[wc[i].wr_id * kSlotBytes];
          uint32_t id, seq;
          std::memcpy(&id, p, 4);
          std::memcpy(&seq, p + 4, 4);
          bool ok = id == c->id && seq == c->next_seq++ && wc[i].byte_len == kSlotBytes;
          for (uint32_t k = 8; ok && k < wc[i].byte_len; k++) ok = p[k] == pattern(id, seq, k);
          if (!ok) fail("a message arrived wrong");
          messages++;
        }
        post(uint32_t(wc[i].wr_id));
      }
    if (pfds[0].revents & POLLIN) {
      const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
      Hello peer;
      if (s >= 0 && full_io(s, &peer, sizeof(peer), false)) {
        ibv_qp_init_attr qa{};
        qa.send_cq = qa.recv_cq = cq;
        qa.srq = srq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap = {4, 0, 1, 0, 0};
        ibv_qp *qp = ibv_create_qp(d.pd, &qa);
        if (!qp) setup_error("create QP");
        live.insert(qp);
        Hello mine{qp->qp_num, uint32_t(rng() & 0xffffff), {}};
        std::memcpy(mine.gid, d.gid, 16);
        const uint32_t id = next_id++;
        by_qpn[qp->qp_num] = {s, id, qp};
        by_sock[s] = qp->qp_num;
        // RTR, the events of the moment, then RTS: what the messenger did.
        if (to_init(qp) && to_rtr(qp, peer, gid_index) && full_io(s, &mine, sizeof(mine), true) &&
            full_io(s, const_cast<uint32_t *>(&id), 4, true)) {
          ::poll(nullptr, 0, 0);
          to_rts(qp, mine.psn);
        }
        conns++;
      } else if (s >= 0) {
        ::close(s);
      }
    }
    for (size_t i = 2; i < pfds.size(); i++) {
      if (!pfds[i].revents) continue;
      auto it = by_sock.find(pfds[i].fd);
      char byte;
      if (it == by_sock.end() || ::recv(it->first, &byte, 1, MSG_DONTWAIT) > 0) continue;
      const uint32_t qpn = it->second;
      by_sock.erase(it);
      teardown(by_qpn.at(qpn));  // the client went: torn down, as a messenger resets a peer
    }
  }
  // (Torn QPs still waiting for their event are destroyed now.)
  for (const ibv_qp *qp : live) ibv_destroy_qp(const_cast<ibv_qp *>(qp));
  std::printf("connections=%lu messages=%lu events=%lu destroyed_after_event=%lu failures=%d\n",
              (unsigned long)conns, (unsigned long)messages, (unsigned long)events,
              (unsigned long)torn_waited, failures);
  return failures ? 1 : 0;
}

// ---- client ----

int client(const char *host, int port, double seconds, int gid_index) {
  Device d = open_device(gid_index);
  ibv_cq *cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
  std::vector<uint8_t> buf(size_t(kMessages) * kSlotBytes);
  ibv_mr *mr = cq ? ibv_reg_mr(d.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (!mr) setup_error("CQ or MR");
  std::mt19937 rng(uint32_t(::getpid()));
  uint64_t conns = 0, messages = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end && !failures) {
    const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    ::inet_pton(AF_INET, host, &a.sin_addr);
    if (::connect(s, reinterpret_cast<sockaddr *>(&a), sizeof(a))) setup_error("connect");
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {kMessages, 1, 1, 1, 0};
    ibv_qp *qp = ibv_create_qp(d.pd, &qa);
    if (!qp) setup_error("create QP");
    Hello mine{qp->qp_num, uint32_t(rng() & 0xffffff), {}}, peer;
    std::memcpy(mine.gid, d.gid, 16);
    uint32_t id = 0;
    bool ok = full_io(s, &mine, sizeof(mine), true) && full_io(s, &peer, sizeof(peer), false) &&
              full_io(s, &id, 4, false) && to_init(qp) && to_rtr(qp, peer, gid_index) &&
              to_rts(qp, mine.psn);
    if (!ok && !failures) fail("the handshake");
    const uint32_t n = ok ? 1 + rng() % kMessages : 0;
    for (uint32_t seq = 0; seq < n; seq++) {
      uint8_t *p = &buf[seq * kSlotBytes];
      std::memcpy(p, &id, 4);
      std::memcpy(p + 4, &seq, 4);
      for (uint32_t k = 8; k < kSlotBytes; k++) p[k] = pattern(id, seq, k);
      ibv_sge sge{reinterpret_cast<uintptr_t>(p), kSlotBytes, mr->lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      if (ibv_post_send(qp, &wr, &bad)) fail("post");
    }
    for (uint32_t got = 0; got < n && !failures;) {
      ibv_wc wc;
      const int r = ibv_poll_cq(cq, 1, &wc);
      if (r < 0 || (r && wc.status != IBV_WC_SUCCESS))
        fail(std::string("send completion ") + ibv_wc_status_str(wc.status));
      got += uint32_t(r > 0);
    }
    messages += n;
    conns++;
    // Gone: the QP first, or the connection first with a reset, as clients do.
    if (rng() % 2) {
      const linger reset{1, 0};
      ::setsockopt(s, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      ::close(s);
      ibv_destroy_qp(qp);
    } else {
      ibv_destroy_qp(qp);
      ::close(s);
    }
  }
  std::printf("connections=%lu messages=%lu failures=%d\n", (unsigned long)conns,
              (unsigned long)messages, failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "server" && (argc == 4 || argc == 5))
    return server(std::atoi(argv[2]), std::atof(argv[3]), argc == 5 ? std::atoi(argv[4]) : 0);
  if (cmd == "client" && (argc == 5 || argc == 6))
    return client(argv[2], std::atoi(argv[3]), std::atof(argv[4]), argc == 6 ? std::atoi(argv[5]) : 0);
  std::fprintf(stderr, "usage: srq_churn server PORT SECONDS [GID_INDEX] | "
                       "client HOST PORT SECONDS [GID_INDEX]\n");
  return 2;
}
