// The dpdk port (see ../dpdk_port.h): one ethdev, one RX and one TX queue, driven from the
// worker thread. Everything here runs on that thread except open() (the control thread,
// before the worker starts) and link_up() (any thread: an atomic).
#include <arpa/inet.h>
#include <net/if.h>
#include <poll.h>
#include <rte_alarm.h>
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "dataplane/dpdk_port.h"
#include "dataplane/ethernet.h"
#include "dataplane/icrc.h"
#include "dataplane/ip_header.h"
#include "dataplane/neighbor_discovery.h"
#include "dataplane/neighbor_table.h"
#include "dataplane/rx_fault_stage.h"

namespace vrnic {
namespace {

constexpr uint16_t kQueueDescriptors = 1024;
constexpr unsigned kMbufs = 16383;        // a power of two minus one suits rte_mempool
constexpr unsigned kRxJumboMbufs = 4095;  // of up to 9 KiB each
constexpr unsigned kMbufCache = 256;
constexpr uint16_t kBurst = 32;
constexpr uint32_t kZeroCopyMin = 256;  // smaller payloads cost less to copy than to attach
constexpr uint32_t kMaxPendingPerPeer = 256;
constexpr uint64_t kHousekeepingNs = 50'000'000;  // link state, ARP retries
constexpr uint64_t kPollNs = 200'000;             // no RX interrupt: look this often when idle
constexpr uint64_t kMemifRetryNs = 1'000'000'000;
constexpr uint8_t kTtl = 64;
// Frames a full TX queue had no room for wait here (a slow memif peer, a busy kernel behind
// af_packet), as a NIC's send engine waits for descriptors, rather than being dropped for
// go-back-N to resend. At most two frame mbufs each: half the pool, the rest left to receive
// into (two daemons, each holding mbufs until the other drains its ring, must not starve).
constexpr uint32_t kTxBacklog = 4096;
// A backlog this long stops the worker making new packets (tx_full): what is made meanwhile
// (the rest of a QP's turn, ACKs and read responses to what arrives) still finds room.
constexpr uint32_t kTxBacklogFull = kTxBacklog / 2;
// A queue that has taken nothing for this long has a peer that stopped reading (a stopped
// process on the other end of memif, a wedged device): its backlog is dropped, so that a
// worker waiting for its port to empty (before a QP is destroyed, at exit) is not stuck; and
// so is whatever it is offered after, until it takes a frame again. (A stall timed from each new
// backlog instead held every control operation 200 ms while a stopped peer's QPs resent.)
constexpr uint64_t kTxStallNs = 200'000'000;
constexpr uint16_t kMaxQueues = 8;  // one RX/TX pair per worker

// Whether a packet's payload is in its own bounce buffer (copied out of registered memory).
bool bounced(const Packet *pkt) {
  return pkt->payload >= pkt->bounce && pkt->payload < pkt->bounce + kPacketBufferBytes;
}

// Nanoseconds from the TSC: a clock_gettime per burst showed in profiles.
uint64_t now_ns() {
  static const double ns_per_cycle = 1e9 / double(rte_get_tsc_hz());
  return uint64_t(double(rte_get_tsc_cycles()) * ns_per_cycle);
}

// Runs fn on EAL's interrupt thread and waits for it. memif's control channel lives on that
// thread and tears a connection down there (freeing it); stopping or starting the device from
// another thread at the same moment raced it (a use-after-free when the peer went away just as
// a restart began). Every stop, start and close goes through here, so they take turns with
// the PMD's own handlers. Falls back to the calling thread if no alarm can be set.
template <class Fn>
void on_interrupt_thread(Fn fn) {
  struct Call {
    Fn *fn;
    std::atomic<bool> done{false};
  } call{&fn};
  auto run = [](void *arg) {
    auto *c = static_cast<Call *>(arg);
    (*c->fn)();
    c->done.store(true, std::memory_order_release);
  };
  if (rte_eal_alarm_set(1, run, &call) != 0) return fn();
  while (!call.done.load(std::memory_order_acquire)) std::this_thread::yield();
}

void key_to_gid(IpKey key, uint8_t gid[16]) {
  const uint64_t hi = absl::Uint128High64(key), lo = absl::Uint128Low64(key);
  std::memcpy(gid, &hi, 8);
  std::memcpy(gid + 8, &lo, 8);
}

// Per-packet state while DPDK owns a packet's payload (zero-copy transmit), or while a
// received packet holds its mbuf, kept in Packet::wire.
struct TxScratch {
  rte_mbuf_ext_shared_info shinfo;
  class DpdkPort *port;
};
struct RxScratch {
  uint8_t ip[60];  // the IPv4 or IPv6 header as received (the ICRC covers it)
  uint8_t udp[8];
  uint8_t ip_len;
};
static_assert(sizeof(TxScratch) <= sizeof(WireScratch::storage));
static_assert(sizeof(RxScratch) <= sizeof(WireScratch::storage));

template <typename T>
T &scratch(Packet *pkt) {
  return *reinterpret_cast<T *>(pkt->wire.storage);
}

// The value of KEY= in the --vdev arguments of a DRIVER device ("net_memif0,bsize=8192"),
// "" when not given.
std::string vdev_arg(const std::vector<std::string> &eal_args, const char *driver,
                     const std::string &key) {
  for (const std::string &arg : eal_args) {
    if (arg.rfind(driver, 0) != 0) continue;
    for (size_t at = arg.find(','); at != std::string::npos; at = arg.find(',', at + 1)) {
      if (arg.compare(at + 1, key.size() + 1, key + "=") != 0) continue;
      const size_t from = at + key.size() + 2, end = arg.find(',', from);
      return arg.substr(from, end == std::string::npos ? std::string::npos : end - from);
    }
  }
  return {};
}

// The interface an af_packet or af_xdp vdev runs on ("iface=veth0"), whose kernel link state
// is the port's; "" for other devices.
std::string kernel_interface(const std::vector<std::string> &eal_args) {
  std::string iface = vdev_arg(eal_args, "net_af_packet", "iface");
  return iface.empty() ? vdev_arg(eal_args, "net_af_xdp", "iface") : iface;
}

// memif carries a frame in one of its buffers (bsize=, 2048 bytes unless given; both ends must
// give the same) or, larger, in a chain of them -- which DPDK 22.11's memif corrupts when its
// ring is nearly full (it fills a slot it does not own with a chained frame's second buffer,
// then backs out): its link MTU is what one buffer holds, not the 1500 it reports.
uint16_t memif_mtu(const std::vector<std::string> &eal_args) {
  const std::string bsize = vdev_arg(eal_args, "net_memif", "bsize");
  const unsigned long bytes = bsize.empty() ? 2048 : std::strtoul(bsize.c_str(), nullptr, 0);
  return uint16_t(std::clamp<unsigned long>(bytes, 1280 + kEthHeaderBytes, 9216) - kEthHeaderBytes);
}

bool kernel_link_running(const std::string &iface) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  ifreq req{};
  std::strncpy(req.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  bool running = ioctl(fd, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_RUNNING);
  ::close(fd);
  return running;
}

bool has_arg(const std::vector<std::string> &args, const char *prefix) {
  for (const std::string &a : args)
    if (a.rfind(prefix, 0) == 0) return true;
  return false;
}

// A device's EAL arguments, split into the devices they name (--vdev SPEC, -a SPEC, --allow
// SPEC: a vdev's name and options, or a PCI address and options) and the rest.
struct EalArgs {
  std::vector<std::string> devices;
  std::vector<std::string> rest;
};

EalArgs split_eal_args(const std::vector<std::string> &args) {
  EalArgs out;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string &a = args[i];
    if ((a == "--vdev" || a == "-a" || a == "--allow") && i + 1 < args.size()) {
      out.devices.push_back(args[++i]);
    } else if (a.rfind("--vdev=", 0) == 0 || a.rfind("--allow=", 0) == 0) {
      out.devices.push_back(a.substr(a.find('=') + 1));
    } else if (a.size() > 2 && a.rfind("-a", 0) == 0) {
      out.devices.push_back(a.substr(2));
    } else {
      out.rest.push_back(a);
    }
  }
  return out;
}

// The EAL is set up once per process, by the first dpdk device's arguments: DPDK cannot be set
// up twice. A later device hot-plugs the devices its arguments name; its other arguments are
// the first's or none (memory, cores and prefix are the process's, not a device's).
std::mutex g_eal_mu;
bool g_eal_done = false;
std::vector<std::string> g_eal_rest;  // the first device's arguments other than devices

bool init_eal(const std::vector<std::string> &user_args, std::string *error) {
  std::lock_guard<std::mutex> lock(g_eal_mu);
  EalArgs split = split_eal_args(user_args);
  if (g_eal_done) {
    if (!split.rest.empty() && split.rest != g_eal_rest) {
      *error =
          "EAL arguments other than --vdev and -a must be the first dpdk device's, or none "
          "(DPDK's EAL is set up once per process, by that device's --eal)";
      return false;
    }
    for (const std::string &spec : split.devices) {
      // -EEXIST: the first device's arguments had it (which device takes it is checked next).
      if (int rc = rte_dev_probe(spec.c_str()); rc != 0 && rc != -EEXIST) {
        *error = "cannot add device " + spec + " (rte_dev_probe: " + rte_strerror(-rc) + ")";
        return false;
      }
    }
    return true;
  }
  std::vector<std::string> args{"vrnicd"};
  // Several vrnicd on one host must not share DPDK's runtime files: unless the user names a
  // prefix, keep none (in-memory mode; without hugepages, which it does not combine with, no
  // shared configuration).
  if (!has_arg(user_args, "--file-prefix") && !has_arg(user_args, "--in-memory") &&
      !has_arg(user_args, "--no-shconf"))
    args.push_back(has_arg(user_args, "--no-huge") ? "--no-shconf" : "--in-memory");
  if (!has_arg(user_args, "--iova-mode")) args.push_back("--iova-mode=va");
  if (!has_arg(user_args, "--no-telemetry") && !has_arg(user_args, "--telemetry"))
    args.push_back("--no-telemetry");
  if (!has_arg(user_args, "--log-level")) args.push_back("--log-level=warning");
  if (!has_arg(user_args, "-l") && !has_arg(user_args, "-c") && !has_arg(user_args, "--lcores")) {
    // One lcore: the worker is vrnic's own thread, registered with DPDK when it first polls.
    args.push_back("-l");
    args.push_back(std::to_string(sched_getcpu() < 0 ? 0 : sched_getcpu()));
  }
  args.insert(args.end(), user_args.begin(), user_args.end());
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // rte_eal_init pins the calling thread to its main lcore; vrnicd's threads (created after
  // this, inheriting it) must keep running on any CPU.
  cpu_set_t cpus;
  bool have_cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0;
  int rc = rte_eal_init(int(argv.size() - 1), argv.data());
  if (have_cpus) sched_setaffinity(0, sizeof(cpus), &cpus);
  if (rc < 0) {
    *error = std::string("rte_eal_init: ") + rte_strerror(rte_errno);
    return false;
  }
  g_eal_done = true;
  g_eal_rest = std::move(split.rest);
  return true;
}

// What the workers' ports share: one ethdev (an RX and a TX queue per worker), its mempools
// and link, and the neighbour table (an ARP reply arrives on whichever queue the device
// picks; every worker looks addresses up).
struct SharedDevice {
  bool configured = false;
  uint16_t port_id = 0;
  uint16_t queues = 1;  // TX queues, one per worker
  bool started = false;
  std::atomic<bool> running{false};
  rte_mempool *mbufs = nullptr;
  rte_mempool *ext_mbufs = nullptr;
  rte_mempool *rx_mbufs = nullptr;  // received into: mbufs, or larger ones for jumbo memif
  bool zero_copy = false;
  bool memif = false;
  bool announced = false;
  uint64_t next_restart = 0;
  MacAddress mac{};
  bool ipv6 = false;  // the port's one address is IPv6 (neighbour discovery), else IPv4 (ARP)
  uint8_t ip[4] = {};
  uint8_t gid[16] = {};        // the address as a GID (IPv4 mapped)
  MacAddress solicited_mac{};  // IPv6: the group solicitations for our address are sent to
  uint16_t udp_port = 4791;
  uint32_t mtu = 1024;
  std::string iface;
  std::atomic<bool> link_up{true};
  bool rx_interrupts = false;  // started with RX interrupts asked for (intr_conf.rxq)
  // A restart of the device (a memif client reconnecting) while other workers use their
  // queues: the restarter sets `pausing`, then waits until no other worker is inside the
  // device; a worker marks itself inside, then enters only if no restart is pausing it. Both
  // sides store, then load (seq_cst): one of them always sees the other.
  std::atomic<bool> pausing{false};
  std::atomic<bool> in_device[kMaxQueues] = {};
  std::mutex neighbors_mu;
  NeighborTable neighbors;  // under neighbors_mu
};

// One per vrnicd device (vrnicd has at most kMaxDevices).
constexpr uint32_t kMaxDevices = 8;
std::array<SharedDevice, kMaxDevices> g_devices;

// The ethdev a device's EAL arguments name (the first of them), else the first one no other
// device has.
bool find_ethdev(const std::vector<std::string> &eal_args, uint32_t device, uint16_t *port_id,
                 std::string *error) {
  auto taken_by = [&](uint16_t pid) {
    for (uint32_t d = 0; d < kMaxDevices; d++)
      if (d != device && g_devices[d].configured && g_devices[d].port_id == pid) return int(d);
    return -1;
  };
  const std::vector<std::string> named = split_eal_args(eal_args).devices;
  if (named.empty()) {
    uint16_t pid;
    RTE_ETH_FOREACH_DEV(pid) {
      if (taken_by(pid) >= 0) continue;
      *port_id = pid;
      return true;
    }
    *error = "no Ethernet device (give one with --vdev or a PCI address in the EAL arguments)";
    return false;
  }
  const std::string name = named.front().substr(0, named.front().find(','));
  bool found = rte_eth_dev_get_port_by_name(name.c_str(), port_id) == 0;
  if (!found) {  // a PCI address as the user wrote it ("03:00.0"), matched by its bus
    rte_dev_iterator it;
    uint16_t pid;
    RTE_ETH_FOREACH_MATCHING_DEV(pid, name.c_str(), &it) {
      *port_id = pid;
      found = true;
      rte_eth_iterator_cleanup(&it);
      break;
    }
  }
  if (!found) {
    *error = "no Ethernet device " + name;
    return false;
  }
  if (int other = taken_by(*port_id); other >= 0) {
    *error = name + " is vrnic" + std::to_string(other) + "'s device";
    return false;
  }
  return true;
}

class DpdkPort final : public Port {
 public:
  DpdkPort(PacketPool &pool, SharedDevice &dev) : pool_(pool), dev_(dev) {}
  ~DpdkPort() override;
  bool open(const DpdkPortConfig &cfg, std::string *error);

  uint16_t tx_burst(Packet **pkts, uint16_t n) override;
  uint16_t rx_burst(Packet **pkts, uint16_t n) override;
  // Packets waiting for a peer's address are not counted: they hold their payloads themselves
  // (bounced), and a peer that never answers would hold every control operation of the
  // device for its whole fail time.
  uint32_t in_flight() const override { return tx_in_flight_ + backlog_count_; }
  bool tx_full() const override { return backlog_count_ >= kTxBacklogFull; }
  uint32_t mtu_bytes() const override { return mtu_; }
  const PortCounters &counters() const override { return counters_; }
  const uint8_t *gid() const override { return gid_; }
  bool link_up() const override { return link_up_.load(std::memory_order_relaxed); }
  uint64_t max_sleep_ns() const override { return rx_armed_ ? kHousekeepingNs : kPollNs; }
  int arm_rx_interrupt() override;
  void rx_interrupt_done() override;
  void resolve(const uint8_t *peer_gid) override;
  void set_faults(const FaultConfig &cfg) override { faults_.configure(cfg); }
  const FaultCounters *fault_counters() const override { return faults_.counters(); }

 private:
  void on_thread();
  rte_mbuf *build_frame(Packet *pkt, const MacAddress &dst);
  void send_frames(rte_mbuf **frames, uint16_t n);
  uint16_t send_now(rte_mbuf **frames, uint16_t n);
  bool drain_backlog();
  void drop_backlog();
  void transmit_resolved(Packet **pkts, uint16_t n, uint64_t now);
  // Neighbour resolution, ARP or IPv6 neighbour discovery by the port's address family.
  enum class Neighbor { kAsk, kAnswer, kAnnounce };
  void send_neighbor(Neighbor what, const uint8_t *peer_gid, const MacAddress &peer_mac);
  void send_control_frame(const uint8_t *frame, size_t len);
  void on_arp(const uint8_t *frame, uint32_t len, uint64_t now);
  void on_nd(const uint8_t *frame, uint32_t len, uint64_t now);
  void heard_from(const uint8_t *peer_gid, const MacAddress &mac, bool for_us, uint64_t now);
  enum class Check { kOk, kIgnore, kMalformed, kNeighborDiscovery };
  Check check_ipv4(const uint8_t *ip, uint32_t room, uint32_t *ip_len);
  Check check_ipv6(const uint8_t *ip, uint32_t room);
  void receive_frame(rte_mbuf *m, uint64_t now);
  void on_received(RxFrame f);
  static void deliver(void *port, RxFrame f) { static_cast<DpdkPort *>(port)->on_received(f); }
  static void release_mbuf(Packet *pkt) {
    rte_pktmbuf_free(static_cast<rte_mbuf *>(pkt->release_arg));
  }
  static void payload_done(void *, void *opaque);
  void housekeeping(uint64_t now);
  void watch_device(uint64_t now);
  // The worker's use of the device, bracketed (see SharedDevice::pausing): false while the
  // device is being restarted, not to be touched then.
  bool enter_device() {
    dev_.in_device[queue_].store(true, std::memory_order_seq_cst);
    if (!dev_.pausing.load(std::memory_order_seq_cst)) return true;
    leave_device();
    return false;
  }
  void leave_device() { dev_.in_device[queue_].store(false, std::memory_order_release); }
  void restart_device();
  void drop_pending(IpKey ip);

  PacketPool &pool_;
  SharedDevice &dev_;
  uint16_t queue_ = 0;  // this worker's RX and TX queue (queue 0's port watches the link)
  // The shared device's fields, by their old names.
  uint16_t &port_id_ = dev_.port_id;
  bool &started_ = dev_.started;  // configured and started: stopped and closed at the end
  std::atomic<bool> &running_ = dev_.running;  // started now: its queues may be used
  rte_mempool *&mbufs_ = dev_.mbufs;           // frames built or received here
  rte_mempool *&ext_mbufs_ = dev_.ext_mbufs;   // no data room: payloads from registered memory
  rte_mempool *&rx_mbufs_ = dev_.rx_mbufs;
  bool &zero_copy_ = dev_.zero_copy;  // the device takes chained mbufs
  bool &memif_ = dev_.memif;          // see housekeeping()
  bool &announced_ = dev_.announced;  // gratuitous ARP sent since the link came up
  uint64_t &next_restart_ = dev_.next_restart;
  MacAddress &mac_ = dev_.mac;
  bool &ipv6_ = dev_.ipv6;
  uint32_t ip_header_len_ = kIpv4HeaderBytes;
  uint8_t (&ip_)[4] = dev_.ip;
  uint8_t (&gid_)[16] = dev_.gid;
  uint16_t &udp_port_ = dev_.udp_port;
  uint32_t &mtu_ = dev_.mtu;
  std::string &iface_ = dev_.iface;
  std::atomic<bool> &link_up_ = dev_.link_up;
  bool registered_thread_ = false;
  // This queue's RX interrupt: a descriptor that turns readable when a frame comes (tap: the
  // queue's own file; a NIC under VFIO: an eventfd, read to re-arm), looked up once.
  bool rx_intr_looked_up_ = false;
  int rx_intr_fd_ = -1;
  bool rx_intr_eventfd_ = false;
  bool rx_intr_enabled_ = false;  // rte_eth_dev_rx_intr_enable() took (not every PMD has it)
  bool rx_armed_ = false;         // the worker sleeps on rx_intr_fd_
  uint64_t next_housekeeping_ = 0;
  uint32_t tx_in_flight_ = 0;    // zero-copy payloads the device still holds
  uint64_t imissed_seen_ = 0;    // the device's count of missed frames, last read
  uint64_t imissed_before_ = 0;  // ... and what it had counted before a restart
  // Frames waiting for room in the TX queue, oldest first (a ring): sent before newer ones.
  std::array<rte_mbuf *, kTxBacklog> backlog_{};
  uint32_t backlog_head_ = 0;
  uint32_t backlog_count_ = 0;
  uint64_t stalled_since_ns_ = 0;  // the queue refused a frame then and took none since; 0: not
  // Packets waiting for a peer's ARP (or ND) answer, by peer, each payload in its own bounce
  // buffer: nothing of a client's memory is held while the peer is resolved. (A QP moved to
  // another worker meanwhile may have its packets reordered, at worst: go-back-N recovers.)
  absl::flat_hash_map<IpKey, std::vector<Packet *>> pending_;
  uint32_t pending_packets_ = 0;
  RxFaultStage faults_{pool_, &DpdkPort::deliver, this};
  std::vector<Packet *> ready_;
  size_t ready_head_ = 0;
  PortCounters counters_;
};

bool DpdkPort::open(const DpdkPortConfig &cfg, std::string *error) {
  queue_ = cfg.queue;
  ip_header_len_ = ipv6_ ? kIpv6HeaderBytes : kIpv4HeaderBytes;
  if (dev_.configured) {  // another worker's port set the device up
    if (queue_ >= dev_.queues) {
      *error = "the device was set up with " + std::to_string(dev_.queues) + " TX queues";
      return false;
    }
    return true;
  }
  if (queue_ != 0) {
    *error = "the first dpdk port opened must be queue 0";
    return false;
  }
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, cfg.address.c_str(), &v4) == 1) {
    std::memcpy(ip_, &v4, 4);
    gid_[10] = gid_[11] = 0xff;
    std::memcpy(gid_ + 12, ip_, 4);
  } else if (inet_pton(AF_INET6, cfg.address.c_str(), &v6) == 1 && !IN6_IS_ADDR_MULTICAST(&v6) &&
             !IN6_IS_ADDR_UNSPECIFIED(&v6) && !IN6_IS_ADDR_V4MAPPED(&v6)) {
    ipv6_ = true;
    ip_header_len_ = kIpv6HeaderBytes;
    std::memcpy(gid_, &v6, 16);
    uint8_t group[16];
    solicited_node(gid_, group);
    dev_.solicited_mac = ipv6_multicast_mac(group);
  } else {
    *error = "'" + cfg.address + "' is not a unicast IPv4 or IPv6 address";
    return false;
  }
  udp_port_ = cfg.udp_port;
  iface_ = kernel_interface(cfg.eal_args);
  if (!init_eal(cfg.eal_args, error) || !find_ethdev(cfg.eal_args, cfg.device, &port_id_, error))
    return false;
  int socket = rte_eth_dev_socket_id(port_id_);
  if (socket < 0) socket = int(rte_socket_id());
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(port_id_, &info); rc != 0) {
    *error = std::string("rte_eth_dev_info_get: ") + rte_strerror(-rc);
    return false;
  }
  memif_ = info.driver_name && std::strcmp(info.driver_name, "net_memif") == 0;
  // Pool names are per process: each device's carry its number.
  const std::string n = std::to_string(cfg.device);
  mbufs_ = rte_pktmbuf_pool_create(("vrnic_frames" + n).c_str(), kMbufs, kMbufCache, 0,
                                   RTE_MBUF_DEFAULT_BUF_SIZE, socket);
  ext_mbufs_ =
      rte_pktmbuf_pool_create(("vrnic_payloads" + n).c_str(), kMbufs, kMbufCache, 0, 0, socket);
  // memif copies a received frame into as many mbufs as it takes: a jumbo one gets mbufs that
  // hold it whole, read in place like any other rather than gathered into a packet first.
  const uint32_t rx_room = memif_ ? memif_mtu(cfg.eal_args) + kEthHeaderBytes : 0;
  rx_mbufs_ =
      rx_room <= RTE_MBUF_DEFAULT_DATAROOM
          ? mbufs_
          : rte_pktmbuf_pool_create(("vrnic_rx_frames" + n).c_str(), kRxJumboMbufs, kMbufCache, 0,
                                    uint16_t(RTE_PKTMBUF_HEADROOM + rx_room), socket);
  if (!mbufs_ || !ext_mbufs_ || !rx_mbufs_) {
    *error = std::string("rte_pktmbuf_pool_create: ") + rte_strerror(rte_errno);
    return false;
  }
  rte_eth_conf conf{};
  // Zero-copy needs chained mbufs, and a device that reads registered memory with the CPU: a
  // software device (the vdev bus: memif, af_packet, af_xdp, tap) does. A NIC on a bus (PCI)
  // would DMA from it through an IOMMU, or its own memory table (mlx5), that was never told of
  // memory DPDK did not allocate: it copies until registration maps that memory for DMA.
  const rte_bus *bus = info.device ? rte_dev_bus(info.device) : nullptr;
  const bool software = bus && std::strcmp(rte_bus_name(bus), "vdev") == 0;
  zero_copy_ = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) && software;
  if (zero_copy_) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  auto fail = [&](const char *what, int rc) {
    *error = std::string(what) + ": " + rte_strerror(rc < 0 ? -rc : rc);
    return false;
  };
  // An RX and a TX queue per worker. The device spreads received frames over the RX queues
  // (RSS, or af_packet's fanout); a worker hands what is not its QPs' to their workers.
  dev_.queues = std::max<uint16_t>(cfg.queues, 1);
  if (dev_.queues > kMaxQueues || dev_.queues > info.max_tx_queues ||
      dev_.queues > info.max_rx_queues) {
    *error = "the device has " + std::to_string(std::min(info.max_rx_queues, info.max_tx_queues)) +
             " queue pairs for " + std::to_string(dev_.queues) +
             " workers (af_packet: add qpairs=N to the --vdev)";
    return false;
  }
  if (dev_.queues > 1) conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
  int rc_start = 0;
  auto set_up = [&](bool rx_interrupts) {
    conf.intr_conf.rxq = rx_interrupts;
    if (int rc = rte_eth_dev_configure(port_id_, dev_.queues, dev_.queues, &conf); rc != 0)
      return fail("rte_eth_dev_configure", rc);
    uint16_t rxd = kQueueDescriptors, txd = kQueueDescriptors;
    rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rxd, &txd);
    for (uint16_t q = 0; q < dev_.queues; q++) {
      if (int rc = rte_eth_rx_queue_setup(port_id_, q, rxd, unsigned(socket), nullptr, rx_mbufs_);
          rc)
        return fail("rte_eth_rx_queue_setup", rc);
      if (int rc = rte_eth_tx_queue_setup(port_id_, q, txd, unsigned(socket), nullptr); rc)
        return fail("rte_eth_tx_queue_setup", rc);
    }
    on_interrupt_thread([&] { rc_start = rte_eth_dev_start(port_id_); });
    return true;
  };
  // RX interrupts, so that an idle worker sleeps until a frame comes rather than looking
  // every kPollNs; a device that cannot start with them starts without (a PMD without them
  // starts anyway: its queues have no interrupt descriptor, see arm_rx_interrupt()). memif in
  // DPDK 22.11 has none, and its client may fail to start for want of a server: its link then
  // stays down and housekeeping() tries again.
  dev_.rx_interrupts = !memif_ && set_up(true) && rc_start == 0;
  if (!dev_.rx_interrupts) {
    if (!memif_) rte_eth_dev_stop(port_id_);  // (a failed start may have left half of it)
    error->clear();
    if (!set_up(false)) return false;
  }
  if (rc_start != 0 && !memif_) return fail("rte_eth_dev_start", rc_start);
  started_ = true;
  running_ = rc_start == 0;
  rte_eth_promiscuous_enable(port_id_);  // frames are filtered by address here
  rte_ether_addr mac;
  rte_eth_macaddr_get(port_id_, &mac);
  std::memcpy(mac_.bytes, mac.addr_bytes, 6);
  uint16_t ip_mtu = 1500;
  rte_eth_dev_get_mtu(port_id_, &ip_mtu);
  if (memif_) ip_mtu = memif_mtu(cfg.eal_args);
  // A frame must fit one mbuf when the device cannot take chains.
  uint32_t room = RTE_MBUF_DEFAULT_DATAROOM - kEthHeaderBytes;
  if (!zero_copy_ && ip_mtu > room) ip_mtu = uint16_t(room);
  mtu_ = roce_mtu_for(ip_mtu, ip_header_len_);
  if (!mtu_) {
    *error = "the device's MTU (" + std::to_string(ip_mtu) + ") is too small for RoCE";
    return false;
  }
  next_restart_ = now_ns() + kMemifRetryNs;
  dev_.configured = true;
  housekeeping(now_ns());
  return true;
}

DpdkPort::~DpdkPort() {
  for (; ready_head_ < ready_.size(); ready_head_++) pool_.free(ready_[ready_head_]);
  drop_backlog();
  for (auto &[ip, pkts] : pending_)
    for (Packet *p : pkts) pool_.free(p);
  // Queue 0's port goes first (worker 0's); every worker has stopped by then and the other
  // ports are still there for payload_done.
  if (started_ && queue_ == 0) {
    on_interrupt_thread([this] {
      rte_eth_dev_stop(port_id_);
      rte_eth_dev_close(port_id_);  // frees what the device held, calling payload_done
    });
    started_ = false;
  }
}

// DPDK's per-lcore caches need a thread id: the worker registers itself on first use.
void DpdkPort::on_thread() {
  if (registered_thread_) return;
  registered_thread_ = true;
  if (rte_lcore_id() == LCORE_ID_ANY) rte_thread_register();
}

// Arms this queue's RX interrupt for a sleep of the worker, if the device has one and nothing
// here wants the worker sooner (frames to send or deliver, peers being resolved, faults that
// hold frames back).
int DpdkPort::arm_rx_interrupt() {
  if (!dev_.rx_interrupts || !running_ || backlog_count_ || pending_packets_ ||
      ready_head_ != ready_.size() || faults_.active())
    return -1;
  if (!rx_intr_looked_up_) {
    rx_intr_looked_up_ = true;
    rx_intr_fd_ = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id_, queue_);
    char link[64] = {};
    const std::string path = "/proc/self/fd/" + std::to_string(rx_intr_fd_);
    rx_intr_eventfd_ = rx_intr_fd_ >= 0 && ::readlink(path.c_str(), link, sizeof(link) - 1) > 0 &&
                       std::strstr(link, "eventfd") != nullptr;
  }
  if (rx_intr_fd_ < 0) return -1;
  // -ENOTSUP: nothing to arm, the descriptor is readable whenever frames wait (tap's queue).
  const int rc = rte_eth_dev_rx_intr_enable(port_id_, queue_);
  if (rc != 0 && rc != -ENOTSUP) return -1;
  rx_intr_enabled_ = rc == 0;
  // A frame that came since the last look would raise no (edge-triggered) interrupt.
  if (rte_eth_rx_queue_count(port_id_, queue_) > 0) {
    rx_interrupt_done();
    return -1;
  }
  rx_armed_ = true;
  return rx_intr_fd_;
}

void DpdkPort::rx_interrupt_done() {
  pollfd p{rx_intr_fd_, POLLIN, 0};
  if (rx_armed_ && ::poll(&p, 1, 0) == 1) {
    counters_[kPortRxInterrupts]++;
    uint64_t count;
    if (rx_intr_eventfd_ && ::read(rx_intr_fd_, &count, sizeof(count)) < 0) count = 0;
  }
  rx_armed_ = false;
  if (rx_intr_enabled_) rte_eth_dev_rx_intr_disable(port_id_, queue_);
  rx_intr_enabled_ = false;
}

// The device is done with a zero-copy payload: the packet that referenced it goes back.
void DpdkPort::payload_done(void *, void *opaque) {
  auto *pkt = static_cast<Packet *>(opaque);
  DpdkPort *port = scratch<TxScratch>(pkt).port;
  port->tx_in_flight_--;
  port->pool_.free(pkt);
}

// Ethernet, IPv4, UDP and the transport header in one mbuf; the payload attached in place
// (zero-copy) or copied after them; pad and ICRC last. The packet is the frame's to free.
rte_mbuf *DpdkPort::build_frame(Packet *pkt, const MacAddress &dst) {
  const uint32_t pad = pkt->set_pad();
  const uint32_t roce_len = pkt->header_len + pkt->payload_len + pad + uint32_t(wire::kIcrcBytes);
  const bool copied = bounced(pkt);
  const uint32_t headers = uint32_t(kEthHeaderBytes + ip_header_len_ + kUdpHeaderBytes);
  // A payload copied once already (bounced) is attached too when the frame would not fit one
  // mbuf (jumbo frames on memif). memif copies every frame into its shared ring itself, so
  // attaching saves no copy there: a frame that fits one mbuf is built whole, and memif's copy
  // of it is one aligned block instead of three segments, the payload's misaligned (+16% for
  // 64 KiB writes, 10 interleaved runs).
  const bool fits = headers + roce_len <= RTE_MBUF_DEFAULT_DATAROOM;
  const bool attach =
      zero_copy_ && (!fits || (!memif_ && !copied && pkt->payload_len >= kZeroCopyMin));
  rte_mbuf *head = rte_pktmbuf_alloc(mbufs_);
  if (!head) return nullptr;
  const uint32_t head_len = headers + pkt->header_len + (attach ? 0 : roce_len - pkt->header_len);
  auto *h = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(head, uint16_t(head_len)));
  if (!h) {
    rte_pktmbuf_free(head);
    return nullptr;
  }
  const uint16_t udp_len = uint16_t(kUdpHeaderBytes + roce_len);
  uint8_t *ip = h + build_eth(h, dst, mac_, ipv6_ ? kEtherTypeIpv6 : kEtherTypeIpv4);
  uint8_t *udp = ip + (ipv6_ ? build_ipv6(ip, gid_, pkt->dst_gid, udp_len, 0, 0, kTtl)
                             : build_ipv4(ip, gid_, pkt->dst_gid, udp_len, 0, kTtl, 0, true));
  build_udp(udp, pkt->udp_sport, udp_port_, udp_len, 0);
  uint8_t *transport = udp + kUdpHeaderBytes;
  // All of the header array (fixed size: vector moves); what lies past header_len is
  // overwritten by the payload or is past the mbuf's data.
  std::memcpy(transport, pkt->header, kMaxTransportHeader);
  static const uint8_t kZeros[4] = {};
  iovec body[3] = {{pkt->header, pkt->header_len},
                   {const_cast<uint8_t *>(pkt->payload), pkt->payload_len},
                   {const_cast<uint8_t *>(kZeros), pad}};
  const uint32_t icrc = roce_icrc(ip, ip_header_len_, udp, body, 3);
  uint8_t icrc_bytes[4];
  store_icrc(icrc_bytes, icrc);
  // Over IPv6 the UDP checksum is not optional (RFC 8200 8.1): a kernel peer drops a datagram
  // without one. It covers the ICRC, so it comes last.
  auto udp_checksum = [&] {
    iovec parts[5] = {{udp, kUdpHeaderBytes},
                      {pkt->header, pkt->header_len},
                      {const_cast<uint8_t *>(pkt->payload), pkt->payload_len},
                      {const_cast<uint8_t *>(kZeros), pad},
                      {icrc_bytes, wire::kIcrcBytes}};
    uint16_t sum = ipv6_upper_checksum(gid_, pkt->dst_gid, kIpProtocolUdp, parts, 5);
    wire::store_be16(udp + 6, sum ? sum : 0xffff);
  };
  if (ipv6_) udp_checksum();
  if (!attach) {
    uint8_t *p = transport + pkt->header_len;
    std::memcpy(p, pkt->payload, pkt->payload_len);
    std::memset(p + pkt->payload_len, 0, pad);
    std::memcpy(p + pkt->payload_len + pad, icrc_bytes, wire::kIcrcBytes);
    counters_[kPortTxPayloadCopied] += pkt->payload_len;
    pool_.free(pkt);
    return head;
  }
  rte_mbuf *payload = rte_pktmbuf_alloc(ext_mbufs_);
  rte_mbuf *tail = rte_pktmbuf_alloc(mbufs_);
  if (!payload || !tail) {
    rte_pktmbuf_free(payload);
    rte_pktmbuf_free(tail);
    rte_pktmbuf_free(head);
    return nullptr;
  }
  TxScratch &tx = scratch<TxScratch>(pkt);
  tx.port = this;
  tx.shinfo.free_cb = &DpdkPort::payload_done;
  tx.shinfo.fcb_opaque = pkt;
  rte_mbuf_ext_refcnt_set(&tx.shinfo, 1);
  void *va = const_cast<uint8_t *>(pkt->payload);
  rte_pktmbuf_attach_extbuf(payload, va, rte_iova_t(uintptr_t(va)), uint16_t(pkt->payload_len),
                            &tx.shinfo);
  rte_pktmbuf_append(payload, uint16_t(pkt->payload_len));
  tx_in_flight_++;  // from here the packet is freed by payload_done
  auto *t = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(tail, uint16_t(pad + wire::kIcrcBytes)));
  std::memset(t, 0, pad);
  std::memcpy(t + pad, icrc_bytes, wire::kIcrcBytes);
  (copied ? counters_[kPortTxPayloadCopied] : counters_[kPortTxPayloadZeroCopy]) +=
      pkt->payload_len;
  if (rte_pktmbuf_chain(head, payload) || rte_pktmbuf_chain(head, tail)) {
    rte_pktmbuf_free(head);  // frees what was chained; payload_done returns the packet
    return nullptr;
  }
  return head;
}

// In order: nothing new goes out while older frames wait in the backlog.
void DpdkPort::send_frames(rte_mbuf **frames, uint16_t n) {
  const uint16_t sent = drain_backlog() ? send_now(frames, n) : 0;
  for (uint16_t i = sent; i < n; i++) {
    if (backlog_count_ == kTxBacklog) {  // a backlog this long: lost, as on a full NIC
      rte_pktmbuf_free(frames[i]);
      counters_[kPortTxErrors]++;
      continue;
    }
    backlog_[(backlog_head_ + backlog_count_++) % kTxBacklog] = frames[i];
  }
}

uint16_t DpdkPort::send_now(rte_mbuf **frames, uint16_t n) {
  const uint16_t sent = rte_eth_tx_burst(port_id_, queue_, frames, n);
  for (uint16_t i = 0; i < sent; i++) counters_[kPortTxBytes] += frames[i]->pkt_len;
  counters_[kPortTxPackets] += sent;
  if (sent) stalled_since_ns_ = 0;
  if (sent < n && !stalled_since_ns_) stalled_since_ns_ = now_ns();
  return sent;
}

// True when the backlog is empty (sent, or dropped with the link down).
bool DpdkPort::drain_backlog() {
  if (!backlog_count_) return true;
  if (!running_ || !link_up()) {
    drop_backlog();
    return true;
  }
  while (backlog_count_) {
    const auto run = uint16_t(std::min<uint32_t>(backlog_count_, kTxBacklog - backlog_head_));
    const uint16_t sent = send_now(&backlog_[backlog_head_], run);
    backlog_head_ = (backlog_head_ + sent) % kTxBacklog;
    backlog_count_ -= sent;
    if (sent < run) {
      if (now_ns() - stalled_since_ns_ < kTxStallNs) return false;
      drop_backlog();
    }
  }
  return true;
}

void DpdkPort::drop_backlog() {
  counters_[kPortTxErrors] += backlog_count_;
  for (; backlog_count_; backlog_count_--, backlog_head_ = (backlog_head_ + 1) % kTxBacklog)
    rte_pktmbuf_free(backlog_[backlog_head_]);
}

void DpdkPort::transmit_resolved(Packet **pkts, uint16_t n, uint64_t now) {
  rte_mbuf *frames[kBurst];
  uint16_t nframes = 0;
  IpKey cached_ip = 0;
  bool cached = false;
  MacAddress cached_mac;
  for (uint16_t i = 0; i < n; i++) {
    Packet *pkt = pkts[i];
    const IpKey ip = ip_key(pkt->dst_gid);
    if (!running_ || !link_up() || gid_is_ipv4(pkt->dst_gid) == ipv6_) {  // not our family
      counters_[kPortTxErrors]++;
      pool_.free(pkt);
      continue;
    }
    if (!cached || ip != cached_ip) {
      NeighborTable::Answer a;
      {
        std::lock_guard lock(dev_.neighbors_mu);
        a = dev_.neighbors.lookup(ip, now);
        if (a.mac) cached_mac = *a.mac;  // the entry may move once the lock is gone
      }
      if (a.send_request) send_neighbor(Neighbor::kAsk, pkt->dst_gid, MacAddress{});
      if (!a.mac) {
        std::vector<Packet *> &waiting = pending_[ip];
        if (a.state == NeighborTable::State::kFailed || waiting.size() >= kMaxPendingPerPeer) {
          counters_[kPortTxNoRoute]++;
          pool_.free(pkt);
        } else {
          if (pkt->payload_len && !bounced(pkt)) {
            std::memcpy(pkt->bounce, pkt->payload, pkt->payload_len);
            pkt->payload = pkt->bounce;
          }
          waiting.push_back(pkt);
          pending_packets_++;
        }
        cached = false;
        continue;
      }
      cached_ip = ip;
      cached = true;
    }
    rte_mbuf *m = build_frame(pkt, cached_mac);
    if (!m) {
      counters_[kPortTxErrors]++;  // no mbuf: the frame is lost, as on a full NIC
      continue;
    }
    frames[nframes++] = m;
    if (nframes == kBurst) {
      send_frames(frames, nframes);
      nframes = 0;
    }
  }
  if (nframes) send_frames(frames, nframes);
}

// Any thread may ask (the request goes out on this port's queue while its worker runs the
// command, or is parked): nothing here needs the worker's per-lcore mbuf cache.
void DpdkPort::resolve(const uint8_t *peer_gid) {
  if (gid_is_ipv4(peer_gid) == ipv6_ || !running_ || !link_up() || !enter_device()) return;
  bool ask;
  {
    std::lock_guard lock(dev_.neighbors_mu);
    ask = dev_.neighbors.prime(ip_key(peer_gid), now_ns());
  }
  if (ask) send_neighbor(Neighbor::kAsk, peer_gid, MacAddress{});
  leave_device();
}

uint16_t DpdkPort::tx_burst(Packet **pkts, uint16_t n) {
  on_thread();
  if (!enter_device()) {  // restarting, its link down: lost, as on a NIC without a link
    counters_[kPortTxErrors] += n;
    for (uint16_t i = 0; i < n; i++) pool_.free(pkts[i]);
    return n;
  }
  for (uint16_t i = 0; i < n; i += kBurst)
    transmit_resolved(pkts + i, uint16_t(std::min<int>(kBurst, n - i)), now_ns());
  leave_device();
  return n;
}

void DpdkPort::send_control_frame(const uint8_t *frame, size_t len) {
  rte_mbuf *m = rte_pktmbuf_alloc(mbufs_);
  if (!m) return;
  auto *out = reinterpret_cast<uint8_t *>(rte_pktmbuf_append(m, uint16_t(len)));
  std::memcpy(out, frame, len);
  if (!running_ || rte_eth_tx_burst(port_id_, queue_, &m, 1) != 1) rte_pktmbuf_free(m);
}

// Ask for a peer's Ethernet address, answer a peer that asked for ours, or announce ours
// (after the link comes up): ARP over IPv4, neighbour solicitations and advertisements over
// IPv6 (to the peer's solicited-node group; an answer to the asker; an announcement to all
// nodes, overriding what they knew).
void DpdkPort::send_neighbor(Neighbor what, const uint8_t *peer_gid, const MacAddress &peer_mac) {
  uint8_t frame[std::max(kNdFrameBytes, kEthMinFrame)];
  if (!ipv6_) {
    ArpMessage msg{what == Neighbor::kAnswer ? ArpMessage::kReply : ArpMessage::kRequest,
                   mac_,
                   {},
                   peer_mac,
                   {}};
    std::memcpy(msg.sender_ip, ip_, 4);
    std::memcpy(msg.target_ip, what == Neighbor::kAnnounce ? ip_ : peer_gid + 12, 4);
    return send_control_frame(frame, build_arp_frame(frame, msg));
  }
  NdMessage msg{};
  msg.src_mac = mac_;
  msg.link_address = mac_;
  msg.has_link_address = true;
  std::memcpy(msg.src_ip, gid_, 16);
  MacAddress to = peer_mac;
  if (what == Neighbor::kAsk) {
    msg.type = NdMessage::kSolicitation;
    std::memcpy(msg.target, peer_gid, 16);
    solicited_node(peer_gid, msg.dst_ip);
    to = ipv6_multicast_mac(msg.dst_ip);
  } else {
    msg.type = NdMessage::kAdvertisement;
    std::memcpy(msg.target, gid_, 16);
    msg.solicited = what == Neighbor::kAnswer;
    msg.override_ = true;
    std::memcpy(msg.dst_ip, what == Neighbor::kAnswer ? peer_gid : kAllNodes, 16);
    if (what == Neighbor::kAnnounce) to = ipv6_multicast_mac(kAllNodes);
  }
  send_control_frame(frame, build_nd_frame(frame, msg, to));
}

// A peer told us its Ethernet address. RFC 826 (and RFC 4861 7.2.3-5 in effect): learn it
// when the message was for us or the peer is awaited, else only refresh a known entry; then
// send what waited for the peer.
void DpdkPort::heard_from(const uint8_t *peer_gid, const MacAddress &mac, bool for_us,
                          uint64_t now) {
  // No host has a group or all-zero address: such a claim would only poison the table.
  if ((mac.bytes[0] & 1) || mac == MacAddress{}) return;
  const IpKey peer = ip_key(peer_gid);
  auto waiting = pending_.find(peer);
  {
    std::lock_guard lock(dev_.neighbors_mu);
    if (!for_us && waiting == pending_.end()) {
      dev_.neighbors.refresh(peer, mac, now);
      return;
    }
    dev_.neighbors.learn(peer, mac, now);
  }
  if (waiting == pending_.end()) return;
  std::vector<Packet *> pkts = std::move(waiting->second);
  pending_.erase(waiting);
  pending_packets_ -= uint32_t(pkts.size());
  for (size_t i = 0; i < pkts.size(); i += kBurst)
    transmit_resolved(pkts.data() + i, uint16_t(std::min<size_t>(kBurst, pkts.size() - i)), now);
}

void DpdkPort::on_arp(const uint8_t *frame, uint32_t len, uint64_t now) {
  ArpMessage m;
  if (ipv6_ || !parse_arp_frame(frame, len, &m)) return;
  const bool for_us = std::memcmp(m.target_ip, ip_, 4) == 0;
  uint8_t sender[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::memcpy(sender + 12, m.sender_ip, 4);
  if (for_us && m.op == ArpMessage::kRequest && !(m.sender_mac.bytes[0] & 1))
    send_neighbor(Neighbor::kAnswer, sender, m.sender_mac);
  heard_from(sender, m.sender_mac, for_us, now);
}

// Solicitations for our address are answered (those of a duplicate-address check, from the
// unspecified address, to all nodes); a solicitation tells us its sender's address, an
// advertisement its target's.
void DpdkPort::on_nd(const uint8_t *frame, uint32_t len, uint64_t now) {
  NdMessage m;
  if (!parse_nd_frame(frame, len, &m)) return;
  static const uint8_t kUnspecified[16] = {};
  const bool about_us = std::memcmp(m.target, gid_, 16) == 0;
  if (m.type == NdMessage::kSolicitation) {
    const bool from_nowhere = std::memcmp(m.src_ip, kUnspecified, 16) == 0;
    if (about_us && !(m.src_mac.bytes[0] & 1))
      send_neighbor(from_nowhere ? Neighbor::kAnnounce : Neighbor::kAnswer, m.src_ip,
                    m.has_link_address ? m.link_address : m.src_mac);
    if (!from_nowhere && m.has_link_address) heard_from(m.src_ip, m.link_address, about_us, now);
    return;
  }
  if (about_us) return;  // someone else claims our address: not ours to resolve
  heard_from(m.target, m.has_link_address ? m.link_address : m.src_mac, m.solicited, now);
}

void DpdkPort::drop_pending(IpKey ip) {
  auto it = pending_.find(ip);
  if (it == pending_.end()) return;
  for (Packet *p : it->second) pool_.free(p);
  counters_[kPortTxNoRoute] += it->second.size();
  pending_packets_ -= uint32_t(it->second.size());
  pending_.erase(it);
}

void DpdkPort::housekeeping(uint64_t now) {
  if (now < next_housekeeping_) return;
  next_housekeeping_ = now + kHousekeepingNs;
  if (queue_ == 0) watch_device(now);
  // Peers that never answered: their packets go; those answered (perhaps on another
  // worker's queue) go out; the others are asked again.
  std::vector<IpKey> failed, resolved;
  for (auto &[ip, pkts] : pending_) {
    NeighborTable::Answer a;
    {
      std::lock_guard lock(dev_.neighbors_mu);
      a = dev_.neighbors.lookup(ip, now);
    }
    uint8_t target[16];
    key_to_gid(ip, target);
    if (a.send_request) send_neighbor(Neighbor::kAsk, target, MacAddress{});
    if (a.state == NeighborTable::State::kFailed) failed.push_back(ip);
    if (a.mac) resolved.push_back(ip);
  }
  for (IpKey ip : failed) drop_pending(ip);
  for (IpKey ip : resolved) {
    std::vector<Packet *> pkts = std::move(pending_[ip]);
    pending_.erase(ip);
    pending_packets_ -= uint32_t(pkts.size());
    for (size_t i = 0; i < pkts.size(); i += kBurst)
      transmit_resolved(pkts.data() + i, uint16_t(std::min<size_t>(kBurst, pkts.size() - i)), now);
  }
  if (tx_in_flight_ && running_) rte_eth_tx_done_cleanup(port_id_, queue_, 0);
}

// The device's link (worker 0's port looks after it).
void DpdkPort::watch_device(uint64_t now) {
  // Frames the device dropped for want of RX descriptors (af_packet's and af_xdp's kernel
  // rings included). A restarted device counts from 0 again.
  rte_eth_stats st;
  if (rte_eth_stats_get(port_id_, &st) == 0) {
    if (st.imissed < imissed_seen_) imissed_before_ += imissed_seen_;
    imissed_seen_ = st.imissed;
    counters_[kPortRxDropped] = imissed_before_ + imissed_seen_;
  }
  rte_eth_link link{};
  bool up = rte_eth_link_get_nowait(port_id_, &link) != 0 || link.link_status;
  if (!iface_.empty()) up = up && kernel_link_running(iface_);
  const bool was_up = link_up_.load(std::memory_order_relaxed);
  if (up != was_up || !announced_) {
    if (up != was_up) counters_[kPortLinkChanges]++;
    // A memif peer that just went away may be shutting down: reconnecting at once would land
    // between its device's stop and close, which DPDK 22.11's memif server does not survive.
    if (was_up && !up) next_restart_ = now + kMemifRetryNs;
    link_up_.store(up, std::memory_order_relaxed);
    // An announcement (gratuitous ARP, unsolicited advertisement) when the link comes up:
    // peers that knew another MAC for our address (a restarted vrnicd, a new NIC) update it.
    announced_ = up;
    if (up) send_neighbor(Neighbor::kAnnounce, gid_, MacAddress{});
  }
  // A memif client connects when the device starts and, in DPDK 22.11, never again: one that
  // started before its server (or outlived it) is restarted now and then until it connects.
  if (!up && memif_ && now >= next_restart_) {
    next_restart_ = now + kMemifRetryNs;
    restart_device();
  }
}

// With the other workers kept out of their queues. memif holds no transmitted mbuf (it copies
// each frame into its ring at once), so stopping it frees nothing another worker owns.
void DpdkPort::restart_device() {
  dev_.pausing.store(true, std::memory_order_seq_cst);
  for (uint16_t q = 0; q < dev_.queues; q++)
    while (q != queue_ && dev_.in_device[q].load(std::memory_order_seq_cst))
      std::this_thread::yield();
  on_interrupt_thread([this] {
    if (running_) rte_eth_dev_stop(port_id_);
    running_ = rte_eth_dev_start(port_id_) == 0;
  });
  dev_.pausing.store(false, std::memory_order_release);
}

// A frame off the wire: ARP, or an IPv4 UDP datagram to our RoCE port (anything else on the
// link is not ours and is ignored, as a NIC's filters would).
// An IPv4 datagram to us: its header checked (a damaged one is counted even when it may not be
// ours: it came to our MAC), kOk for UDP to our address.
DpdkPort::Check DpdkPort::check_ipv4(const uint8_t *ip, uint32_t room, uint32_t *ip_len) {
  if (room < kIpv4HeaderBytes || (ip[0] >> 4) != 4) return Check::kMalformed;
  *ip_len = uint32_t(ip[0] & 0xf) * 4;
  if (*ip_len < kIpv4HeaderBytes || *ip_len > room || ipv4_header_checksum(ip, *ip_len))
    return Check::kMalformed;
  if (std::memcmp(ip + 16, ip_, 4) != 0 || ip[9] != kIpProtocolUdp) return Check::kIgnore;
  const uint32_t total = wire::load_be16(ip + 2);
  if (total < *ip_len + kUdpHeaderBytes || total > room ||
      (wire::load_be16(ip + 6) & 0x3fff) /* a fragment: RoCE never sends one */)
    return Check::kMalformed;
  return Check::kOk;
}

// An IPv6 packet to our link address or a group we are in: neighbour discovery (ICMPv6), or
// kOk for UDP to our address. RoCE sends no extension headers: a packet with one is not ours.
DpdkPort::Check DpdkPort::check_ipv6(const uint8_t *ip, uint32_t room) {
  if (room < kIpv6HeaderBytes || (ip[0] >> 4) != 6) return Check::kMalformed;
  const uint32_t payload = wire::load_be16(ip + 4);
  if (payload > room - kIpv6HeaderBytes) return Check::kMalformed;
  if (ip[6] == kIpProtocolIcmpv6) return Check::kNeighborDiscovery;
  if (ip[6] != kIpProtocolUdp || std::memcmp(ip + 24, gid_, 16) != 0) return Check::kIgnore;
  if (payload < kUdpHeaderBytes) return Check::kMalformed;
  return Check::kOk;
}

void DpdkPort::receive_frame(rte_mbuf *m, uint64_t now) {
  Packet *pkt = nullptr;
  const uint8_t *frame = rte_pktmbuf_mtod(m, const uint8_t *);
  uint32_t len = m->data_len;
  if (m->nb_segs > 1) {  // chained (a large frame on memif): one copy into a packet
    pkt = pool_.alloc();
    if (!pkt || m->pkt_len > kPacketBufferBytes) {
      counters_[kPortRxNoBuffer] += pkt == nullptr;
      counters_[kPortRxMalformed] += pkt != nullptr;
      if (pkt) pool_.free(pkt);
      rte_pktmbuf_free(m);
      return;
    }
    frame = static_cast<const uint8_t *>(rte_pktmbuf_read(m, 0, m->pkt_len, pkt->bounce));
    len = m->pkt_len;
  }
  auto ignore = [&] {
    if (pkt) pool_.free(pkt);
    rte_pktmbuf_free(m);
  };
  auto malformed = [&] {
    counters_[kPortRxMalformed]++;
    ignore();
  };
  if (len < kEthHeaderBytes) return malformed();
  const uint16_t ether_type = wire::load_be16(frame + 12);
  if (ether_type == kEtherTypeArp) {
    on_arp(frame, len, now);
    return ignore();
  }
  MacAddress dst;
  std::memcpy(dst.bytes, frame, 6);
  const uint8_t *ip = frame + kEthHeaderBytes;
  const uint32_t room = len - uint32_t(kEthHeaderBytes);
  const uint8_t *udp = nullptr;
  uint32_t ip_len = 0, udp_len = 0;
  Check got = Check::kIgnore;
  if (ether_type == kEtherTypeIpv4 && !ipv6_ && dst == mac_) {
    got = check_ipv4(ip, room, &ip_len);
  } else if (ether_type == kEtherTypeIpv6 && ipv6_ &&
             (dst == mac_ || dst == dev_.solicited_mac || dst == ipv6_multicast_mac(kAllNodes))) {
    ip_len = kIpv6HeaderBytes;
    got = check_ipv6(ip, room);
    if (got == Check::kNeighborDiscovery) {
      on_nd(frame, len, now);
      return ignore();
    }
  }
  if (got == Check::kMalformed) return malformed();
  if (got != Check::kOk) return ignore();
  udp = ip + ip_len;
  udp_len = ipv6_ ? wire::load_be16(ip + 4) : wire::load_be16(ip + 2) - ip_len;
  if (wire::load_be16(udp + 2) != udp_port_) return ignore();
  if (wire::load_be16(udp + 4) != udp_len) return malformed();
  if (!pkt && !(pkt = pool_.alloc())) {
    counters_[kPortRxNoBuffer]++;
    return ignore();
  }
  if (m->nb_segs > 1) {
    rte_pktmbuf_free(m);  // its bytes were copied into the packet
  } else {
    pkt->release = &DpdkPort::release_mbuf;  // the payload stays in the mbuf until consumed
    pkt->release_arg = m;
  }
  RxScratch &rx = scratch<RxScratch>(pkt);
  // Fixed parts at fixed sizes (a variable-size memcpy is a slow rep movs), options after.
  if (ipv6_) {
    std::memcpy(rx.ip, ip, kIpv6HeaderBytes);
    std::memcpy(pkt->src_gid, ip + 8, 16);
  } else {
    std::memcpy(rx.ip, ip, kIpv4HeaderBytes);
    if (ip_len > kIpv4HeaderBytes)
      std::memcpy(rx.ip + kIpv4HeaderBytes, ip + kIpv4HeaderBytes, ip_len - kIpv4HeaderBytes);
    std::memset(pkt->src_gid, 0, 10);
    pkt->src_gid[10] = pkt->src_gid[11] = 0xff;
    std::memcpy(pkt->src_gid + 12, ip + 12, 4);
  }
  std::memcpy(rx.udp, udp, kUdpHeaderBytes);
  rx.ip_len = uint8_t(ip_len);
  std::memcpy(pkt->dst_gid, gid_, 16);
  pkt->udp_sport = wire::load_be16(udp);
  RxFrame f{pkt, const_cast<uint8_t *>(udp + kUdpHeaderBytes), udp_len - uint32_t(kUdpHeaderBytes)};
  if (faults_.active()) {
    faults_.push(f);
  } else {
    on_received(f);
  }
}

void DpdkPort::on_received(RxFrame f) {
  Packet *pkt = f.pkt;
  const RxScratch &rx = scratch<RxScratch>(pkt);
  if (!pkt->parse(f.data, f.len)) {
    counters_[kPortRxMalformed]++;
    pool_.free(pkt);
    return;
  }
  if (!roce_icrc_ok(rx.ip, rx.ip_len, rx.udp, f.data, f.len)) {
    counters_[kPortRxIcrcErrors]++;
    pool_.free(pkt);
    return;
  }
  counters_[kPortRxPackets]++;
  counters_[kPortRxBytes] += f.len;
  ready_.push_back(pkt);
}

uint16_t DpdkPort::rx_burst(Packet **pkts, uint16_t n) {
  on_thread();
  if (ready_head_ == ready_.size()) {
    ready_.clear();
    ready_head_ = 0;
    const uint64_t now = now_ns();
    if (enter_device()) {
      housekeeping(now);
      drain_backlog();
      rte_mbuf *frames[kBurst];
      uint16_t got = running_ ? rte_eth_rx_burst(port_id_, queue_, frames, kBurst) : 0;
      for (uint16_t i = 0; i < got; i++) rte_prefetch0(rte_pktmbuf_mtod(frames[i], void *));
      for (uint16_t i = 0; i < got; i++) receive_frame(frames[i], now);
      leave_device();
    }
    faults_.release_due();
  }
  uint16_t i = 0;
  for (; i < n && ready_head_ < ready_.size(); i++) pkts[i] = ready_[ready_head_++];
  return i;
}

}  // namespace
}  // namespace vrnic

extern "C" __attribute__((visibility("default"))) vrnic::Port *vrnic_dpdk_port_open(
    const vrnic::DpdkPortConfig *cfg, vrnic::PacketPool *pool, std::string *error) {
  if (cfg->device >= vrnic::kMaxDevices) {
    *error = "device vrnic" + std::to_string(cfg->device) + ": at most " +
             std::to_string(vrnic::kMaxDevices) + " devices";
    return nullptr;
  }
  auto port = std::make_unique<vrnic::DpdkPort>(*pool, vrnic::g_devices[cfg->device]);
  if (!port->open(*cfg, error)) return nullptr;
  return port.release();
}
