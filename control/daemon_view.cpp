// Naming what vrnicd answers (daemon_view.h): one list of values per answer, for vrnicctl's
// text and JSON and for Prometheus.
#include "daemon_view.h"

#include <cstdio>
#include <map>
#include <memory>

#include "vrnic/counters.h"
#include "vrnic/ctl_io.h"
#include "vrnic/quotas.h"

namespace vrnic::view {

std::vector<Value> stats_values(const ctl::StatsResp &r) {
  const Kind G = Kind::kGauge, C = Kind::kCounter;
  std::vector<Value> v = {
      {"sessions", r.sessions, G}, {"pds", r.pds, G},   {"mrs", r.mrs, G},
      {"cqs", r.cqs, G},           {"qps", r.qps, G},   {"ahs", r.ahs, G},
      {"channels", r.channels, G}, {"srqs", r.srqs, G}, {"mws", r.mws, G},
  };
  for (uint32_t i = 0; i < kTransportCounterCount; i++)
    v.push_back({kTransportCounterNames[i], r.transport[i], C});
  for (uint32_t i = 0; i < kPortCounterCount; i++) v.push_back({kPortCounterNames[i], r.port[i], C});
  const std::vector<Value> others = {
      {"faults_dropped", r.faults_dropped, C},
      {"faults_duplicated", r.faults_duplicated, C},
      {"faults_reordered", r.faults_reordered, C},
      {"faults_corrupted", r.faults_corrupted, C},
      {"faults_delayed", r.faults_delayed, C},
      {"wire_link_up", r.wire_link_up, G},
      {"workers", r.workers, G},
      {"direct_path", r.direct_path, G},
      {"selective_repeat", r.selective_repeat, G},
      {"doorbell_user_look_max", r.doorbell_user_look_max, G},
      {"qp_moves", r.qp_moves, C},
      {"worker_stops", r.worker_stops, C},
      {"grace_periods", r.grace_periods, C},
      {"cm_ids", r.cm_ids, G},
      {"cm_listeners", r.cm_listeners, G},
      {"cm_connections", r.cm_connections, G},
      {"cm_mads_sent", r.cm_mads_sent, C},
      {"cm_mads_received", r.cm_mads_received, C},
      {"cm_mads_dropped", r.cm_mads_dropped, C},
      {"cm_mads_resent", r.cm_mads_resent, C},
      {"mcast_groups", r.mcast_groups, G},
      {"mcast_attached", r.mcast_attached, G},
      // The asking user's quota account (vrnicd --limits).
      {"user_uid", r.user_uid, G},
  };
  v.insert(v.end(), others.begin(), others.end());
  for (uint32_t i = 0; i < kQuotaCount; i++)
    v.push_back({std::string("user_") + kQuotaKinds[i].name, r.user_used[i], G, kQuotaKinds[i].name});
  for (uint32_t i = 0; i < kQuotaCount; i++)
    v.push_back(
        {std::string("limit_") + kQuotaKinds[i].name, r.user_limit[i], G, kQuotaKinds[i].name});
  v.push_back({"user_quota_refusals", r.user_quota_refusals, C});
  return v;
}

const char *qp_type_name(uint32_t type) {
  return type < std::size(kQpTypeNames) ? kQpTypeNames[type] : "?";
}
const char *qp_state_name(uint32_t state) {
  return state < std::size(kQpStateNames) ? kQpStateNames[state] : "?";
}

std::vector<Value> qp_values(const ctl::QpEntry &e) {
  const ctl::QpTransportState &t = e.transport;
  const Kind G = Kind::kGauge;
  std::vector<Value> v = {
      {"sq_psn", t.sq_psn, G},
      {"acked_psn", t.acked_psn, G},
      {"rq_psn", t.rq_psn, G},
      {"window", t.window, G},
      {"wqes_started", t.wqes_started, G},
      {"wqes_unsent", t.wqes_unsent, G},
      {"rd_atomic", t.rd_atomic, G},
      {"responses", t.responses, G},
      {"ack_timer_us", t.ack_timer_us, G},
      {"rnr_timer_us", t.rnr_timer_us, G},
      {"retry_left", t.retry_left, G},
      {"rnr_left", t.rnr_left, G},
      {"nak_sent", t.nak_sent, G},
      {"peer_window", t.peer_window, G},
      {"peer_in_flight", t.peer_in_flight, G},
      {"srtt_us", t.srtt_us, G},
      {"probe_timer_us", t.probe_timer_us, G},
      {"probes", t.probes, G},
      {"selective_repeat", t.selective_repeat, G},
      {"ece_set", t.ece_set, G},
  };
  for (uint32_t c = 0; c < kTransportCounterCount; c++)
    v.push_back({kTransportCounterNames[c], e.counters[c], Kind::kCounter});
  return v;
}

int ask_stats(int sock, ctl::StatsResp *out) {
  int err = ctl::send_message(sock, ctl::Op::kStats, 0, nullptr, 0);
  auto m = std::make_unique<ctl::Message>();
  if (!err) err = ctl::recv_message(sock, m.get());
  if (!err) err = m->header.status;
  const auto *r = m->as<ctl::StatsResp>();
  if (!err && !r) err = EPROTO;
  if (!err) *out = *r;
  return err;
}

int ask_qps(int sock, const QpFilter &filter, std::vector<ctl::QpEntry> *out) {
  uint32_t start = 0;
  auto resp = std::make_unique<ctl::Message>();
  do {
    ctl::ListQpsReq req{start, filter.session, filter.state, 0};
    int err = ctl::send_message(sock, ctl::Op::kListQps, 0, &req, sizeof(req));
    if (!err) err = ctl::recv_message(sock, resp.get());
    if (!err) err = resp->header.status;
    const auto *r = resp->as<ctl::ListQpsResp>();
    if (!err && !r) err = EPROTO;
    if (err) return err;
    for (uint32_t i = 0; i < r->count && out->size() < filter.limit; i++)
      out->push_back(r->entries[i]);
    start = r->next;
  } while (start && out->size() < filter.limit);
  return 0;
}

namespace {

// A Prometheus metric family: its samples are written together, after one HELP and TYPE.
struct Family {
  std::string help;
  Kind kind;
  std::vector<std::string> samples;  // "{labels} value"
};

// Families keep the order they were first seen in (the text stays in vrnicctl's order).
class Exposition {
 public:
  void add(const std::string &name, const std::string &help, Kind kind,
           const std::string &labels, uint64_t value) {
    add(name, help, kind, labels, std::to_string(value));
  }
  void add(const std::string &name, const std::string &help, Kind kind,
           const std::string &labels, const std::string &value) {
    const std::string full = "vrnic_" + name + (kind == Kind::kCounter ? "_total" : "");
    auto [it, fresh] = families_.try_emplace(full, Family{help, kind, {}});
    if (fresh) order_.push_back(full);
    it->second.samples.push_back("{" + labels + "} " + value);
  }
  std::string text() const {
    std::string out;
    for (const std::string &name : order_) {
      const Family &f = families_.at(name);
      out += "# HELP " + name + " " + f.help + "\n# TYPE " + name +
             (f.kind == Kind::kCounter ? " counter\n" : " gauge\n");
      for (const std::string &s : f.samples) out += name + s + "\n";
    }
    return out;
  }

 private:
  std::map<std::string, Family> families_;
  std::vector<std::string> order_;
};

}  // namespace

std::string prometheus_text(const std::vector<DeviceSnapshot> &devices) {
  Exposition x;
  for (const DeviceSnapshot &d : devices) {
    const std::string dev = "device=\"" + d.device + "\"";
    for (const Value &v : stats_values(d.stats)) {
      if (v.quota) {
        const bool limit = v.name.rfind("limit_", 0) == 0;
        x.add(limit ? "quota_limit" : "quota_used",
              limit ? "What one user may hold on the device (vrnicd --limits)"
                    : "What vrnicd's own user holds on the device, by quota kind",
              Kind::kGauge, dev + ",kind=\"" + v.quota + "\"", v.value);
      } else if (v.name != "user_uid") {
        x.add(v.name, "vrnicctl stats: " + v.name, v.kind, dev, v.value);
      }
    }
    for (const ctl::QpEntry &e : d.qps) {
      char qpn[16];
      std::snprintf(qpn, sizeof(qpn), "0x%x", e.qpn);
      const std::string labels = dev + ",qpn=\"" + qpn + "\",type=\"" + qp_type_name(e.type) +
                                 "\",session=\"" + std::to_string(e.session) + "\"";
      x.add("qp_state", "The QP's state (1 for the one it is in)", Kind::kGauge,
            labels + ",state=\"" + qp_state_name(e.state) + "\"", 1);
      x.add("qp_worker", "The worker thread that runs the QP", Kind::kGauge, labels, e.worker);
      for (const Value &v : qp_values(e)) {
        // Prometheus wants base units: NAME_us as NAME_seconds.
        const size_t n = v.name.size();
        if (n > 3 && v.name.compare(n - 3, 3, "_us") == 0) {
          char seconds[32];
          std::snprintf(seconds, sizeof(seconds), "%.6f", double(v.value) / 1e6);
          x.add("qp_" + v.name.substr(0, n - 3) + "_seconds", "vrnicctl qps: " + v.name + ", in s",
                v.kind, labels, seconds);
        } else {
          x.add("qp_" + v.name, "vrnicctl qps: " + v.name, v.kind, labels, v.value);
        }
      }
    }
  }
  return x.text();
}

}  // namespace vrnic::view
