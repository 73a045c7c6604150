// vrnicctl: asks vrnicd about its state over the control protocol.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
  const struct {
    const char *name;
    uint64_t value;
  } counters[] = {
      {"packets_sent", r->packets_sent},
      {"packets_received", r->packets_received},
      {"packets_dropped", r->packets_dropped},
      {"retransmits", r->retransmits},
      {"rnr_naks_sent", r->rnr_naks_sent},
      {"naks_sent", r->naks_sent},
      {"udp_tx_packets", r->wire_tx_packets},
      {"udp_tx_bytes", r->wire_tx_bytes},
      {"udp_tx_errors", r->wire_tx_errors},
      {"udp_rx_packets", r->wire_rx_packets},
      {"udp_rx_bytes", r->wire_rx_bytes},
      {"udp_rx_icrc_errors", r->wire_rx_icrc_errors},
      {"udp_rx_malformed", r->wire_rx_malformed},
      {"faults_dropped", r->faults_dropped},
      {"faults_duplicated", r->faults_duplicated},
      {"faults_reordered", r->faults_reordered},
      {"faults_corrupted", r->faults_corrupted},
      {"faults_delayed", r->faults_delayed},
  };
  for (const auto &c : counters) std::printf("%s=%llu\n", c.name, u(c.value));
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
                 err == ENODEV ? "vrnicd has no wire port (start it with --udp)"
                               : std::strerror(err));
    return 1;
  }
  return 0;
}

void usage() {
  std::fprintf(stderr,
               "usage: vrnicctl [--socket PATH] stats\n"
               "       vrnicctl [--socket PATH] faults SPEC   (e.g. loss=1,reorder=5; \"\" clears)\n");
}

int main(int argc, char **argv) {
  std::string path = vrnic::default_socket_path();
  std::vector<std::string> args;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--socket") && i + 1 < argc) {
      path = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  bool ok = (args.size() == 1 && args[0] == "stats") || (args.size() == 2 && args[0] == "faults");
  if (!ok) {
    usage();
    return 2;
  }
  int sock = vrnic::ctl::connect_daemon(path.c_str());
  if (sock < 0) {
    std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s (start it with: vrnicd)\n",
                 path.c_str(), std::strerror(-sock));
    return 1;
  }
  int rc = args[0] == "stats" ? stats(sock) : set_faults(sock, args[1]);
  ::close(sock);
  return rc;
}
