// ud_sink: a UD QP that takes datagrams from a sender that is not a verbs program (the wire
// group's raw_roce_sender.py, which builds RoCEv2 packets by hand, IPv4 ID and all) and checks
// each: status, length, and a payload of its sequence number (4 bytes, big-endian) followed
// by that sequence's pattern. Prints "qpn=N qkey=Q" once its receives are posted, then waits
// for --count datagrams (--timeout-s at most, and --idle-ms after the last one for any
// extra) and prints "received=N intact=N duplicates=N". Exits 0 when exactly --count distinct
// intact datagrams arrived and nothing else, 1 otherwise, 2 on bad usage.
//
// usage: ud_sink --dev NAME --count N --size BYTES [--qkey Q] [--timeout-s S] [--idle-ms MS]
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kGrhBytes = 40;

uint8_t pattern_byte(uint32_t seq, size_t i) {
  return uint8_t(seq * 131 + i * 7 + (i >> 8));
}

long number(const char *flag, const char *v, long lo, long hi) {
  char *end;
  long n = std::strtol(v, &end, 0);
  if (*v == '\0' || *end != '\0' || n < lo || n > hi) {
    std::fprintf(stderr, "ud_sink: bad %s '%s'\n", flag, v);
    std::exit(2);
  }
  return n;
}

int fail(const char *what) {
  std::printf("FAIL: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  const char *dev_name = nullptr;
  long count = 0, size = 0, qkey = 0x11111111, timeout_s = 30, idle_ms = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dev")
      dev_name = argv[i + 1];
    else if (a == "--count")
      count = number("--count", argv[i + 1], 1, 4096);
    else if (a == "--size")
      size = number("--size", argv[i + 1], 4, 4096);
    else if (a == "--qkey")
      qkey = number("--qkey", argv[i + 1], 0, 0x7fffffff);
    else if (a == "--timeout-s")
      timeout_s = number("--timeout-s", argv[i + 1], 1, 3600);
    else if (a == "--idle-ms")
      idle_ms = number("--idle-ms", argv[i + 1], 0, 60000);
    else
      count = -1;
  }
  if (!dev_name || count <= 0 || size <= 0 || argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: ud_sink --dev NAME --count N --size BYTES [--qkey Q] "
                 "[--timeout-s S] [--idle-ms MS]\n");
    return 2;
  }
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_context *ctx = nullptr;
  for (int i = 0; i < n && !ctx; i++)
    if (!std::strcmp(ibv_get_device_name(list[i]), dev_name)) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!ctx) return fail("no such device, or it does not open");
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_cq *cq = ibv_create_cq(ctx, int(2 * count) + 16, nullptr, nullptr, 0);
  const size_t slot = kGrhBytes + size_t(size);
  // Twice as many receives as datagrams wanted: one that should have been dropped finds a
  // receive to land in, and is seen.
  const long posted = 2 * count;
  std::vector<uint8_t> buf(slot * size_t(posted));
  ibv_mr *mr = pd ? ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (!pd || !cq || !mr) return fail("PD, CQ or MR");
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap.max_send_wr = 1;
  ia.cap.max_recv_wr = uint32_t(posted);
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ibv_qp *qp = ibv_create_qp(pd, &ia);
  if (!qp) return fail("ibv_create_qp");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = uint32_t(qkey);
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return fail("INIT");
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return fail("RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return fail("RTS");
  for (long i = 0; i < posted; i++) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data() + size_t(i) * slot), uint32_t(slot),
                mr->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = uint64_t(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp, &wr, &bad)) return fail("ibv_post_recv");
  }
  std::printf("qpn=%u qkey=%ld\n", qp->qp_num, qkey);
  std::fflush(stdout);

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  auto idle_until = Clock::time_point::max();
  long received = 0, intact = 0, duplicates = 0;
  std::vector<bool> seen(size_t(count), false);
  while (Clock::now() < deadline && Clock::now() < idle_until) {
    ibv_wc wc;
    int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) return fail("ibv_poll_cq");
    if (got == 0) continue;
    received++;
    const uint8_t *data = buf.data() + wc.wr_id * slot + kGrhBytes;
    uint32_t seq =
        uint32_t(data[0]) << 24 | uint32_t(data[1]) << 16 | uint32_t(data[2]) << 8 | data[3];
    bool ok = wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
              wc.byte_len == kGrhBytes + uint32_t(size) && seq < uint32_t(count);
    for (long k = 4; ok && k < size; k++) ok = data[k] == pattern_byte(seq, size_t(k));
    if (ok && seen[seq]) {
      duplicates++;
    } else if (ok) {
      seen[seq] = true;
      intact++;
    } else {
      std::printf("datagram %ld: status %s, byte_len %u, seq %u: not as sent\n", received,
                  ibv_wc_status_str(wc.status), wc.byte_len, seq);
    }
    if (intact == count) idle_until = Clock::now() + std::chrono::milliseconds(idle_ms);
  }
  std::printf("received=%ld intact=%ld duplicates=%ld\n", received, intact, duplicates);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return received == count && intact == count ? 0 : 1;
}
