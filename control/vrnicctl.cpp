// vrnicctl: asks vrnicd about its state, and changes the little of it an operator may, over
// the control protocol. Subcommands with CLI11; --json gives what a script parses (the shape
// is in the README: the same names and values as the text).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capture_client.h"
#include "daemon_view.h"
#include "dataplane/fault_injector.h"
#include "vrnic/ctl_io.h"
#include "vrnic/socket_path.h"

namespace {

using nlohmann::ordered_json;
namespace view = vrnic::view;

int failed(const char *what, int err) {
  std::fprintf(stderr, "vrnicctl: %s failed: %s\n", what, std::strerror(err));
  return 1;
}

void print_json(const ordered_json &j) {
  std::printf("%s\n", j.dump(2).c_str());
}

int stats(int sock, bool json) {
  vrnic::ctl::StatsResp r;
  if (int err = view::ask_stats(sock, &r)) return failed("stats", err);
  ordered_json j = ordered_json::object();
  for (const view::Value &v : view::stats_values(r)) {
    if (json) j[v.name] = v.value;
    else std::printf("%s=%llu\n", v.name.c_str(), static_cast<unsigned long long>(v.value));
  }
  if (json) print_json(j);
  return 0;
}

// One line per QP: qpn=... type=... state=... session=... worker=... then its values.
int list_qps(int sock, const view::QpFilter &filter, bool json) {
  std::vector<vrnic::ctl::QpEntry> qps;
  if (int err = view::ask_qps(sock, filter, &qps)) return failed("qps", err);
  ordered_json all = ordered_json::array();
  for (const vrnic::ctl::QpEntry &e : qps) {
    if (json) {
      ordered_json q = {{"qpn", e.qpn},         {"type", view::qp_type_name(e.type)},
                        {"state", view::qp_state_name(e.state)},
                        {"session", e.session}, {"worker", e.worker}};
      for (const view::Value &v : view::qp_values(e)) q[v.name] = v.value;
      all.push_back(std::move(q));
      continue;
    }
    std::printf("qpn=0x%x type=%s state=%s session=%u worker=%u", e.qpn,
                view::qp_type_name(e.type), view::qp_state_name(e.state), e.session, e.worker);
    for (const view::Value &v : view::qp_values(e))
      std::printf(" %s=%llu", v.name.c_str(), static_cast<unsigned long long>(v.value));
    std::printf("\n");
  }
  if (json) print_json({{"qps", all}});
  return 0;
}

// One line per device of the vrnicd: name, socket, node GUID, the daemon's pid and how it
// was started.
int list_devices(const std::string &path, bool json) {
  vrnic::ctl::DeviceListResp r;
  if (int err = vrnic::ctl::list_devices(path.c_str(), &r)) {
    std::fprintf(stderr, "vrnicctl: cannot list the devices of vrnicd at %s: %s\n", path.c_str(),
                 std::strerror(err));
    return 1;
  }
  const bool autostarted = r.flags & vrnic::ctl::kDaemonAutostarted;
  const bool activated = r.flags & vrnic::ctl::kDaemonSocketActivated;
  ordered_json all = ordered_json::array();
  for (uint32_t i = 0; i < r.count; i++) {
    const vrnic::ctl::DeviceListEntry &d = r.devices[i];
    char guid[20];
    std::snprintf(guid, sizeof(guid), "%016llx", static_cast<unsigned long long>(d.node_guid));
    if (json) {
      all.push_back({{"name", d.name}, {"socket", d.socket}, {"node_guid", guid}});
    } else {
      std::printf("%s socket=%s node_guid=%s daemon_pid=%u%s%s\n", d.name, d.socket, guid,
                  d.daemon_pid, autostarted ? " autostarted" : "",
                  activated ? " socket_activated" : "");
    }
  }
  if (json)
    print_json({{"daemon",
                 {{"pid", r.count ? r.devices[0].daemon_pid : 0},
                  {"autostarted", autostarted},
                  {"socket_activated", activated}}},
                {"devices", all}});
  return 0;
}

int set_faults(int sock, const std::string &spec) {
  // vrnicd checks the spec too, but can answer only EINVAL: say here what is wrong with it.
  if (absl::StatusOr<vrnic::FaultConfig> f = vrnic::FaultConfig::parse(spec); !f.ok()) {
    std::fprintf(stderr, "vrnicctl: faults '%s': %s\n", spec.c_str(),
                 std::string(f.status().message()).c_str());
    return 2;
  }
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

int move_qp(int sock, uint32_t qpn, uint32_t worker) {
  vrnic::ctl::MoveQpReq req{qpn, worker};
  int err = vrnic::ctl::send_message(sock, vrnic::ctl::Op::kMoveQp, 0, &req, sizeof(req));
  vrnic::ctl::Message m;
  if (!err) err = vrnic::ctl::recv_message(sock, &m);
  if (!err) err = m.header.status;
  if (err) {
    std::fprintf(stderr, "vrnicctl: move QP 0x%x to worker %u: %s\n", qpn, worker,
                 err == EINVAL ? "no such QP or worker" : std::strerror(err));
    return 1;
  }
  return 0;
}

// The socket of device `device` of the vrnicd at `path` ("" : path itself), or "" after
// saying why not.
std::string device_socket(const std::string &path, const std::string &device) {
  if (device.empty()) return path;
  vrnic::ctl::DeviceListResp r;
  if (int err = vrnic::ctl::list_devices(path.c_str(), &r)) {
    std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s (start it with: vrnicd)\n",
                 path.c_str(), std::strerror(err));
    return "";
  }
  for (uint32_t i = 0; i < r.count; i++)
    if (device == r.devices[i].name) return r.devices[i].socket;
  std::fprintf(stderr, "vrnicctl: vrnicd at %s has no device %s (vrnicctl devices lists them)\n",
               path.c_str(), device.c_str());
  return "";
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app("vrnicctl: asks vrnicd about its devices, objects, QPs and counters; sets "
               "fault\ninjection, moves QPs, captures packets.",
               "vrnicctl");
  app.get_formatter()->column_width(30);
  app.set_help_flag("-h,--help", "print this help and exit");
  app.require_subcommand(1);
  app.fallthrough();  // the options below also after the subcommand
  std::string path = vrnic::client_socket_path(), device;
  bool json = false;
  app.add_option("--socket", path,
                 "vrnicd's socket (default: $VRNIC_SOCKET, else\n"
                 "$XDG_RUNTIME_DIR/vrnicd.sock, else /tmp/vrnicd-<uid>/vrnicd.sock;\n"
                 "where none is, the host's: /run/vrnic/vrnicd.sock)")
      ->type_name("PATH");
  app.add_option("--device", device, "one of the vrnicd's devices (default: PATH's, vrnic0)")
      ->type_name("NAME");
  app.add_flag("--json", json, "JSON instead of text (devices, stats, qps)");

  CLI::App *devices = app.add_subcommand("devices", "the vrnicd's devices and their sockets");
  CLI::App *stats_cmd =
      app.add_subcommand("stats", "objects, device, port, fault, CM and quota counters");
  CLI::App *qps = app.add_subcommand("qps", "per-QP transport state, peer window, counters");
  view::QpFilter filter;
  qps->add_option("--session", filter.session, "only this session's QPs")->type_name("N");
  std::string state;
  qps->add_option("--state", state, "only QPs in this state")
      ->type_name("STATE")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(view::kQpStateNames),
                                                     std::end(view::kQpStateNames))));
  qps->add_option("--limit", filter.limit, "at most N QPs")->type_name("N");
  CLI::App *faults = app.add_subcommand("faults", "change fault injection on the wire port");
  std::string spec;
  faults->add_option("SPEC", spec, "e.g. loss=1,reorder=5 (\"\" clears)")->required();
  vrnic::capture::Options capture_opts;
  CLI::App *capture = vrnic::capture::add_subcommand(app, capture_opts);
  CLI::App *move = app.add_subcommand("move", "run a QP on another worker from now on");
  uint32_t qpn = 0, worker = 0;
  move->add_option("QPN", qpn, "the QP, e.g. 0x11")->required()->check(CLI::Range(0u, 0xffffffu));
  move->add_option("WORKER", worker, "the worker, from 0")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError &e) {
    const std::vector<std::string> left = app.remaining();
    std::fprintf(stderr, "vrnicctl: %s\nvrnicctl --help lists the commands and options.\n",
                 left.empty() ? e.what() : ("unknown command or argument '" + left[0] + "'").c_str());
    return 2;
  }
  if (devices->parsed()) {
    if (!device.empty()) {
      std::fprintf(stderr, "vrnicctl: devices lists every device: --device is not for it\n");
      return 2;
    }
    return list_devices(path, json);
  }
  for (uint32_t s = 0; s < 7; s++)
    if (state == view::kQpStateNames[s]) filter.state = s + 1;
  path = device_socket(path, device);
  if (path.empty()) return 1;
  if (capture->parsed()) return vrnic::capture::run(path, capture_opts);
  int sock = vrnic::ctl::connect_daemon(path.c_str());
  if (sock < 0) {
    std::fprintf(stderr, "vrnicctl: cannot reach vrnicd at %s: %s (start it with: vrnicd)\n",
                 path.c_str(), std::strerror(-sock));
    return 1;
  }
  int rc = stats_cmd->parsed() ? stats(sock, json)
           : qps->parsed()     ? list_qps(sock, filter, json)
           : move->parsed()    ? move_qp(sock, qpn, worker)
                               : set_faults(sock, spec);
  ::close(sock);
  return rc;
}
