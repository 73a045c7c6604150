// What vrnicd says about itself, as vrnicctl and the /metrics endpoint show it: asking a device
// (kStats, kListQps) and naming each value, once, for the text, JSON and Prometheus forms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vrnic/ctl_protocol.h"

namespace vrnic::view {

enum class Kind { kGauge, kCounter };  // a counter only grows (Prometheus' "counter")

struct Value {
  std::string name;  // as vrnicctl prints it: name=value
  uint64_t value;
  Kind kind;
  // A quota row (user_NAME, limit_NAME): its kind's name, else nullptr.
  const char *quota = nullptr;
};

// vrnicctl stats, in its order.
std::vector<Value> stats_values(const ctl::StatsResp &r);

inline constexpr const char *kQpTypeNames[] = {"?", "?", "RC", "UC", "UD"};
inline constexpr const char *kQpStateNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
const char *qp_type_name(uint32_t type);
const char *qp_state_name(uint32_t state);

// One QP's values after qpn, type, state, session and worker: its transport state (gauges),
// then its counters, in vrnicctl qps' order.
std::vector<Value> qp_values(const ctl::QpEntry &e);

// Which QPs to list: vrnicd filters by session and state; the limit stops the paging.
struct QpFilter {
  uint32_t session = 0;  // 0: any
  uint32_t state = 0;    // enum ibv_qp_state + 1; 0: any
  uint64_t limit = UINT64_MAX;
};

// Asking a device on a connected control socket: 0 or an errno.
int ask_stats(int sock, ctl::StatsResp *out);
int ask_qps(int sock, const QpFilter &filter, std::vector<ctl::QpEntry> *out);

// Prometheus text exposition (format 0.0.4) of one or more devices' answers.
struct DeviceSnapshot {
  std::string device;  // vrnic0, ...
  ctl::StatsResp stats;
  std::vector<ctl::QpEntry> qps;
};
std::string prometheus_text(const std::vector<DeviceSnapshot> &devices);

}  // namespace vrnic::view
