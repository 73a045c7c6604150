// vrnicd --metrics ADDR:PORT: Prometheus' text exposition over HTTP (GET /metrics), on a
// thread of its own that asks each device what vrnicctl asks (kStats, kListQps) through the
// device's own control socket, so that it shares no state with the control threads.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace vrnic {

class MetricsServer {
 public:
  struct Device {
    std::string name;    // vrnic0, ...
    std::string socket;  // its control socket
  };
  ~MetricsServer();
  // Whether `address` is one start() takes: IPv4:PORT or [IPv6]:PORT, loopback unless
  // any_address.
  static absl::Status check_address(const std::string &address, bool any_address);
  // Listens on `address` (IPv4 a.b.c.d:PORT or IPv6 [x::y]:PORT; loopback only unless
  // any_address) and serves from a thread until destroyed; per-QP series only with `qps`
  // (anyone who reaches the port reads them).
  absl::Status start(const std::string &address, bool any_address, bool qps,
                     std::vector<Device> devices);
  std::string where() const { return where_; }

 private:
  static constexpr size_t kMaxHead = 8192;         // bytes of request head read
  static constexpr size_t kMaxConnections = 16;    // at once; the oldest goes past it
  static constexpr uint64_t kConnectionMs = 5000;  // a connection's whole life
  void serve();
  std::string answer(const std::string &head);
  std::string scrape();

  std::vector<Device> devices_;
  bool qps_ = false;
  int listen_fd_ = -1;
  std::string where_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace vrnic
