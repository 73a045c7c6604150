// vrnicctl: asks vrnicd about its state over the control protocol.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "dataplane/fault_injector.h"
#include "vrnic/ctl_io.h"
#include "vrnic/socket_path.h"

namespace {

int stats(int sock) {
  int err = vrnic::ctl::send_message(sock, vrnic::ctl::Op::kStats, 0, nullptr, 0);
  vrnic::ctl::Message m;
  if (!err) err = vrnic::ctl::recv_message(sock, &m);
  if (!err) err = m.header.status;
  const auto *r = m.as<vrnic::ctl::StatsResp>();
  if (err || !r) {
    std::fprintf(stderr, "vrnicctl: stats failed: %s\n", std::strerror(err ? err : EPROTO));
    return 1;
  }
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("sessions=%u\npds=%u\nmrs=%u\ncqs=%u\nqps=%u\nahs=%u\nchannels=%u\nsrqs=%u\nmws=%u\n",
              r->sessions, r->pds, r->mrs, r->cqs, r->qps, r->ahs, r->channels, r->srqs, r->mws);
  for (uint32_t i = 0; i < vrnic::kTransportCounterCount; i++)
    std::printf("%s=%llu\n", vrnic::kTransportCounterNames[i], u(r->transport[i]));
  for (uint32_t i = 0; i < vrnic::kPortCounterCount; i++)
    std::printf("%s=%llu\n", vrnic::kPortCounterNames[i], u(r->port[i]));
  const struct {
    const char *name;
    uint64_t value;
  } others[] = {
      {"faults_dropped", r->faults_dropped},
      {"faults_duplicated", r->faults_duplicated},
      {"faults_reordered", r->faults_reordered},
      {"faults_corrupted", r->faults_corrupted},
      {"faults_delayed", r->faults_delayed},
      {"wire_link_up", r->wire_link_up},
      {"workers", r->workers},
      {"direct_path", r->direct_path},
      {"selective_repeat", r->selective_repeat},
      {"doorbell_user_look_max", r->doorbell_user_look_max},
      {"qp_moves", r->qp_moves},
      {"worker_stops", r->worker_stops},
      {"grace_periods", r->grace_periods},
      {"cm_ids", r->cm_ids},
      {"cm_listeners", r->cm_listeners},
      {"cm_connections", r->cm_connections},
      {"cm_mads_sent", r->cm_mads_sent},
      {"cm_mads_received", r->cm_mads_received},
      {"cm_mads_dropped", r->cm_mads_dropped},
      {"cm_mads_resent", r->cm_mads_resent},
      {"mcast_groups", r->mcast_groups},
      {"mcast_attached", r->mcast_attached},
  };
  for (const auto &c : others) std::printf("%s=%llu\n", c.name, u(c.value));
  // The asking user's quota account (vrnicd --limits).
  std::printf("user_uid=%llu\n", u(r->user_uid));
  for (uint32_t i = 0; i < vrnic::kQuotaCount; i++)
    std::printf("user_%s=%llu\n", vrnic::kQuotaKinds[i].name, u(r->user_used[i]));
  for (uint32_t i = 0; i < vrnic::kQuotaCount; i++)
    std::printf("limit_%s=%llu\n", vrnic::kQuotaKinds[i].name, u(r->user_limit[i]));
  std::printf("user_quota_refusals=%llu\n", u(r->user_quota_refusals));
  return 0;
}

}  // namespace

int set_faults(int sock, const std::string &spec) {
  vrnic::ctl::SetFaultsReq req{};
  if (spec.size() >= sizeof(req.spec)) {
    std::fprintf(stderr, "vrnicctl: fault spec too long\n");
    return 2;
  }
  std::memcpy(req.spec, spec.data(), spec.size());
  int err = vrnic::ctl::send_message(sock, vrnic::ctl::Op::kSetFaults, 0, &req, sizeof(req));
  vrnic::ctl::Message m;
  if (!err) err = vrnic::ctl::recv_message(sock, &m);
  if (!err) err = m.header.status;
  if (err) {
    std::fprintf(stderr, "vrnicctl: faults '%s': %s\n", spec.c_str(),
                 err == ENODEV  ? "vrnicd has no wire port (start it with --udp)"
                 : err == EPERM ? "only vrnicd's own user and root may set faults"
                                : std::strerror(err));
    return 1;
  }
  return 0;
}

int move_qp(int sock, const std::string &qpn_text, const std::string &worker_text) {
  char *end1, *end2;
  unsigned long qpn = std::strtoul(qpn_text.c_str(), &end1, 0);
  unsigned long worker = std::strtoul(worker_text.c_str(), &end2, 0);
  if (qpn_text.empty() || *end1 || worker_text.empty() || *end2 || qpn > 0xffffff) {
    std::fprintf(stderr, "vrnicctl: move QPN WORKER: numbers, e.g. move 0x11 1\n");
    return 2;
  }
  vrnic::ctl::MoveQpReq req{uint32_t(qpn), uint32_t(worker)};
  int err = vrnic::ctl::send_message(sock, vrnic::ctl::Op::kMoveQp, 0, &req, sizeof(req));
  vrnic::ctl::Message m;
  if (!err) err = vrnic::ctl::recv_message(sock, &m);
  if (!err) err = m.header.status;
  if (err) {
    std::fprintf(stderr, "vrnicctl: move QP %s to worker %s: %s\n", qpn_text.c_str(),
                 worker_text.c_str(), err == EINVAL ? "no such QP or worker" : std::strerror(err));
    return 1;
  }
  return 0;
}

const char *const kQpStates[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

// What `vrnicctl qps` lists: vrnicd filters by session and state; the limit stops the paging.
struct QpFilter {
  uint32_t session = 0;  // 0: any
  uint32_t state = 0;    // enum ibv_qp_state + 1; 0: any
  uint64_t limit = UINT64_MAX;
};

// qps [--session N] [--state NAME] [--limit N]: false (and a message) when it does not parse.
bool parse_qp_filter(const std::vector<std::string> &args, QpFilter *f) {
  for (size_t i = 1; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) return false;
    const std::string &opt = args[i], &value = args[i + 1];
    char *end = nullptr;
    if (opt == "--session" || opt == "--limit") {
      const unsigned long long v = std::strtoull(value.c_str(), &end, 0);
      if (value.empty() || *end) return false;
      if (opt == "--session") f->session = uint32_t(v);
      else f->limit = v;
    } else if (opt == "--state") {
      uint32_t s = 0;
      while (s < 7 && value != kQpStates[s]) s++;
      if (s == 7) {
        std::fprintf(stderr, "vrnicctl: --state takes RESET, INIT, RTR, RTS, SQD, SQE or ERR\n");
        return false;
      }
      f->state = s + 1;
    } else {
      return false;
    }
  }
  return true;
}

// One line per QP: qpn=... type=... state=... then its counters, key=value.
int list_qps(int sock, const QpFilter &filter) {
  uint32_t start = 0;
  uint64_t listed = 0;
  auto resp = std::make_unique<vrnic::ctl::Message>();
  do {
    vrnic::ctl::ListQpsReq req{start, filter.session, filter.state, 0};
    int err = vrnic::ctl::send_message(sock, vrnic::ctl::Op::kListQps, 0, &req, sizeof(req));
    if (!err) err = vrnic::ctl::recv_message(sock, resp.get());
    if (!err) err = resp->header.status;
    const auto *r = resp->as<vrnic::ctl::ListQpsResp>();
    if (err || !r) {
      std::fprintf(stderr, "vrnicctl: qps failed: %s\n", std::strerror(err ? err : EPROTO));
      return 1;
    }
    for (uint32_t i = 0; i < r->count && listed < filter.limit; i++, listed++) {
      const vrnic::ctl::QpEntry &e = r->entries[i];
      static const char *kTypes[] = {"?", "?", "RC", "UC", "UD"};
      std::printf("qpn=0x%x type=%s state=%s session=%u worker=%u", e.qpn,
                  e.type < 5 ? kTypes[e.type] : "?", e.state < 7 ? kQpStates[e.state] : "?",
                  e.session, e.worker);
      const vrnic::ctl::QpTransportState &t = e.transport;
      std::printf(
          " sq_psn=%u acked_psn=%u rq_psn=%u window=%u wqes_started=%u wqes_unsent=%u"
          " rd_atomic=%u responses=%u ack_timer_us=%u rnr_timer_us=%u retry_left=%u"
          " rnr_left=%u nak_sent=%u peer_window=%u peer_in_flight=%u srtt_us=%u"
          " probe_timer_us=%u probes=%u selective_repeat=%u ece_set=%u",
          t.sq_psn, t.acked_psn, t.rq_psn, t.window, t.wqes_started, t.wqes_unsent, t.rd_atomic,
          t.responses, t.ack_timer_us, t.rnr_timer_us, t.retry_left, t.rnr_left, t.nak_sent,
          t.peer_window, t.peer_in_flight, t.srtt_us, t.probe_timer_us, t.probes,
          t.selective_repeat, t.ece_set);
      for (uint32_t c = 0; c < vrnic::kTransportCounterCount; c++)
        std::printf(" %s=%llu", vrnic::kTransportCounterNames[c],
                    static_cast<unsigned long long>(e.counters[c]));
      std::printf("\n");
    }
    start = r->next;
  } while (start && listed < filter.limit);
  return 0;
}

// One line per device of the vrnicd: name, socket, node GUID.
int list_devices(const std::string &path) {
  vrnic::ctl::DeviceListResp r;
  if (int err = vrnic::ctl::list_devices(path.c_str(), &r)) {
    std::fprintf(stderr, "vrnicctl: cannot list the devices of vrnicd at %s: %s\n", path.c_str(),
                 std::strerror(err));
    return 1;
  }
  for (uint32_t i = 0; i < r.count; i++)
    std::printf("%s socket=%s node_guid=%016llx\n", r.devices[i].name, r.devices[i].socket,
                static_cast<unsigned long long>(r.devices[i].node_guid));
  return 0;
}

void usage() {
  std::fprintf(
      stderr,
      "usage: vrnicctl [--socket PATH] [--device NAME] stats\n"
      "       vrnicctl [--socket PATH] [--device NAME] qps [--session N] [--state STATE]\n"
      "                [--limit N]   (per-QP state and counters; STATE: RESET INIT RTR RTS SQD\n"
      "                              SQE ERR; at most N lines)\n"
      "       vrnicctl [--socket PATH] [--device NAME] faults SPEC   (e.g. loss=1,reorder=5;\n"
      "                                                               \"\" clears)\n"
      "       vrnicctl [--socket PATH] [--device NAME] move QPN WORKER   (run a QP on another\n"
      "                                                                   worker)\n"
      "       vrnicctl [--socket PATH] devices   (the vrnicd's devices)\n"
      "  --device NAME    one of the vrnicd's devices (default: the one on PATH, vrnic0)\n");
}

int main(int argc, char **argv) {
  std::string path = vrnic::default_socket_path();
  std::string device;
  std::vector<std::string> args;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--socket") && i + 1 < argc) {
      path = argv[++i];
    } else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  if (args.size() == 1 && args[0] == "devices" && device.empty()) return list_devices(path);
  QpFilter filter;
  bool ok = (args.size() == 1 && args[0] == "stats") ||
            (!args.empty() && args[0] == "qps" && parse_qp_filter(args, &filter)) ||
            (args.size() == 2 && args[0] == "faults") || (args.size() == 3 && args[0] == "move");
  if (!ok) {
    usage();
    return 2;
  }
  // vrnicd checks the spec too, but can answer only EINVAL: say here what is wrong with it.
  if (args[0] == "faults") {
    if (absl::StatusOr<vrnic::FaultConfig> f = vrnic::FaultConfig::parse(args[1]); !f.ok()) {
      std::fprintf(stderr, "vrnicctl: faults '%s': %s\n", args[1].c_str(),
                   std::string(f.status().message()).c_str());
      return 2;
    }
  }
  if (!device.empty()) {
    vrnic::ctl::DeviceListResp r;
    if (int err = vrnic::ctl::list_devices(path.c_str(), &r)) {
      std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s (start it with: vrnicd)\n",
                   path.c_str(), std::strerror(err));
      return 1;
    }
    uint32_t i = 0;
    while (i < r.count && device != r.devices[i].name) i++;
    if (i == r.count) {
      std::fprintf(stderr,
                   "vrnicctl: vrnicd at %s has no device %s (vrnicctl devices lists them)\n",
                   path.c_str(), device.c_str());
      return 1;
    }
    path = r.devices[i].socket;
  }
  int sock = vrnic::ctl::connect_daemon(path.c_str());
  if (sock < 0) {
    std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s (start it with: vrnicd)\n",
                 path.c_str(), std::strerror(-sock));
    return 1;
  }
  int rc = args[0] == "stats"  ? stats(sock)
           : args[0] == "qps"  ? list_qps(sock, filter)
           : args[0] == "move" ? move_qp(sock, args[1], args[2])
                               : set_faults(sock, args[1]);
  ::close(sock);
  return rc;
}
