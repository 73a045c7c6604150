// vrnicctl: asks vrnicd about its state over the control protocol.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

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
  };
  for (const auto &c : counters) std::printf("%s=%llu\n", c.name, u(c.value));
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  std::string path = vrnic::default_socket_path();
  std::string cmd;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--socket") && i + 1 < argc) {
      path = argv[++i];
    } else if (cmd.empty()) {
      cmd = argv[i];
    } else {
      cmd = "?";
    }
  }
  if (cmd != "stats") {
    std::fprintf(stderr, "usage: vrnicctl [--socket PATH] stats\n");
    return 2;
  }
  int sock = vrnic::ctl::connect_daemon(path.c_str());
  if (sock < 0) {
    std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s (start it with: vrnicd)\n",
                 path.c_str(), std::strerror(-sock));
    return 1;
  }
  int rc = stats(sock);
  ::close(sock);
  return rc;
}
