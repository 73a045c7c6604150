// Devices and contexts: discovery through vrnicd's socket, ibv_open_device as a session with
// vrnicd, and the device/port/GID queries (answered from what vrnicd said at open).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "internal.h"
#include "vrnic/autostart.h"
#include "vrnic/socket_path.h"

#undef ibv_get_device_list
#undef ibv_query_port

using namespace vrnic;
using namespace vrnic::provider;

namespace {

// The devices vrnicd reported at the last ibv_get_device_list: the ibv_device given to the
// application, and where that device's vrnicd socket is. Entries live as long as the process
// (contexts keep pointing at their device); a later listing rewrites them in place.
struct ProviderDevice {
  ibv_device dev;
  char socket[ctl::kSocketPathBytes];
  uint64_t guid;
};
ProviderDevice g_devices[ctl::kMaxDevices];
std::mutex g_devices_mu;

void set_device(uint32_t index, const ctl::DeviceListEntry &e) {
  ProviderDevice &d = g_devices[index];
  std::memset(&d.dev, 0, sizeof(d.dev));
  d.dev.node_type = IBV_NODE_CA;
  d.dev.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d.dev.name, sizeof(d.dev.name), "%s", e.name);
  const std::string node = device_node_name(e.socket);
  std::snprintf(d.dev.dev_name, sizeof(d.dev.dev_name), "%s", node.c_str());
  std::snprintf(d.dev.dev_path, sizeof(d.dev.dev_path), "/sys/class/infiniband_verbs/%s",
                node.c_str());
  std::snprintf(d.dev.ibdev_path, sizeof(d.dev.ibdev_path), "/sys/class/infiniband/%s", e.name);
  std::snprintf(d.socket, sizeof(d.socket), "%s", e.socket);
  d.guid = e.node_guid;
}

// The index of one of our devices, or -1.
int device_index(const ibv_device *device) {
  for (uint32_t i = 0; i < ctl::kMaxDevices; i++)
    if (device == &g_devices[i].dev) return int(i);
  return -1;
}

void fill_device_attr(const ctl::DeviceInfo &d, ibv_device_attr *a) {
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", d.fw_ver);
  a->node_guid = htobe64(d.node_guid);
  a->sys_image_guid = htobe64(d.sys_image_guid);
  a->max_mr_size = d.max_mr_size;
  a->page_size_cap = 0xfffff000;  // any power of two from 4 KiB
  a->vendor_id = d.vendor_id;
  a->vendor_part_id = d.vendor_part_id;
  a->hw_ver = d.hw_ver;
  a->max_qp = int(d.max_qp);
  a->max_qp_wr = int(d.max_qp_wr);
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_MEM_WINDOW |
                        IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a->max_sge = int(d.max_sge);
  a->max_sge_rd = int(d.max_sge);
  a->max_cq = int(d.max_cq);
  a->max_cqe = int(d.max_cqe);
  a->max_mr = int(d.max_mr);
  a->max_pd = int(d.max_pd);
  a->max_qp_rd_atom = int(d.max_qp_rd_atom);
  a->max_ee_rd_atom = 0;
  a->max_res_rd_atom = int(d.max_qp_rd_atom * d.max_qp);
  a->max_qp_init_rd_atom = int(d.max_qp_rd_atom);
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_ah = int(d.max_ah);
  a->max_pkeys = 1;
  a->max_srq = int(d.max_srq);
  a->max_srq_wr = int(d.max_srq_wr);
  a->max_srq_sge = int(d.max_sge);
  a->max_mw = int(d.max_mw);
  a->max_mcast_grp = int(d.max_mcast_grp);
  a->max_mcast_qp_attach = int(d.max_mcast_qp_attach);
  a->max_total_mcast_qp_attach = int(d.max_total_mcast_qp_attach);
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
}

int query_device(ibv_context *ctx, ibv_device_attr *attr) {
  fill_device_attr(Context::of(ctx)->info, attr);
  return 0;
}

void free_context(Context *c) {
  if (c->session_shm) ::munmap(c->session_shm, sizeof(shm::SessionShared));
  for (auto [map, len] : c->ring_chunks)
    if (map) ::munmap(map, len);
  if (c->daemon_shm)
    ::munmap(const_cast<shm::DaemonShared *>(c->daemon_shm), sizeof(shm::DaemonShared));
  if (c->wake_fd >= 0) ::close(c->wake_fd);
  if (c->vctx.context.async_fd >= 0) ::close(c->vctx.context.async_fd);
  if (c->async_write_fd >= 0) ::close(c->async_write_fd);
  if (c->imported_cmd_fd >= 0) ::close(c->imported_cmd_fd);
  pthread_mutex_destroy(&c->vctx.context.mutex);
  delete c;
}

void setup_ops(Context *c) {
  ibv_context &ctx = c->vctx.context;
  ctx.ops._compat_query_device = query_device;
  ctx.ops.poll_cq = poll_cq;
  ctx.ops.req_notify_cq = req_notify_cq;
  ctx.ops.post_send = post_send;
  ctx.ops.post_recv = post_recv;
  ctx.ops.post_srq_recv = post_srq_recv;
  ctx.ops.alloc_mw = alloc_mw;
  ctx.ops.bind_mw = bind_mw;
  ctx.ops.dealloc_mw = dealloc_mw;
  c->vctx.query_port = query_port;
  c->vctx.query_device_ex = query_device_ex;
  c->vctx.query_rt_values = query_rt_values;
  c->vctx.create_qp_ex = create_qp_ex;
  c->vctx.create_cq_ex = create_cq_ex;
  c->vctx.create_srq_ex = create_srq_ex;
  c->vctx.open_xrcd = open_xrcd;
  c->vctx.close_xrcd = close_xrcd;
  c->vctx.get_srq_num = get_srq_num;
  c->vctx.open_qp = open_qp;
  c->vctx.alloc_null_mr = alloc_null_mr;
  c->vctx.advise_mr = advise_mr;
  c->vctx.alloc_td = alloc_td;
  c->vctx.dealloc_td = dealloc_td;
  c->vctx.alloc_parent_domain = alloc_parent_domain;
  c->vctx.alloc_dm = alloc_dm;
  c->vctx.free_dm = free_dm;
  c->vctx.reg_dm_mr = reg_dm_mr;
  c->vctx.modify_cq = modify_cq;
  c->vctx.sz = sizeof(verbs_context);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
}

const ctl::GidEntry *gid_entry(ibv_context *ctx, uint32_t port, uint32_t index) {
  if (port != 1 || index >= ctl::kGidTableLen) return nullptr;
  return &Context::of(ctx)->info.gids[index];
}

}  // namespace

namespace vrnic::provider {

// A context is a connection to the device's vrnicd that says Hello (a new session) or, with
// an exported context's cmd_fd, speaks for that one's session (ibv_import_device).
ibv_context *open_context(ibv_device *device, const std::string &path, int imported_cmd_fd) {
  const bool imported = imported_cmd_fd >= 0;
  auto *c = new (std::nothrow) Context();
  if (!c) return fail_null<ibv_context>(ENOMEM);
  ibv_context &ctx = c->vctx.context;
  ctx.device = device;
  ctx.async_fd = -1;
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  int event_fds[2];
  int err = c->conn.open(path.c_str());
  if (err) {
    std::fprintf(stderr, "vrnic: cannot reach vrnicd at %s: %s\n", path.c_str(),
                 std::strerror(err));
    free_context(c);
    return fail_null<ibv_context>(ENODEV);
  }
  if ((err = ctl::make_event_channel(event_fds))) {
    free_context(c);
    return fail_null<ibv_context>(err);
  }
  ctx.async_fd = event_fds[0];
  c->async_write_fd = event_fds[1];
  ctx.cmd_fd = c->conn.sock();
  ctl::HelloReq req{ctl::kProtocolVersion, 0};
  auto resp = std::make_unique<ctl::HelloResp>();
  std::vector<int> fds;
  // With the event pipe goes our own /proc/self/mem: vrnicd reaches memory that is not in a
  // memfd (heap, stack, files) through it. It is bound to this process's memory, not to a
  // PID that could be reused (issue 17, row 1), and it was opened with our rights, not
  // vrnicd's. Without /proc, such memory cannot be registered (EFAULT). An imported context
  // sends the exported cmd_fd instead, and its own /proc/self/mem with each registration
  // that needs it (c->opener is no process): the session's is its exporter's.
  int hello_fds[2] = {c->async_write_fd, imported ? imported_cmd_fd
                                                  : ::open("/proc/self/mem", O_RDWR | O_CLOEXEC)};
  err = c->conn.call(imported ? ctl::Op::kImportDevice : ctl::Op::kHello, &req, sizeof(req),
                     resp.get(), sizeof(*resp), hello_fds, hello_fds[1] >= 0 ? 2 : 1, &fds);
  c->reaches_memory = imported ? ::access("/proc/self/mem", R_OK | W_OK) == 0 : hello_fds[1] >= 0;
  c->opener = imported ? 0 : ::getpid();
  if (hello_fds[1] >= 0 && !imported) ::close(hello_fds[1]);
  // vrnicd keeps the only write end, so that its death reads as end-of-file.
  ::close(c->async_write_fd);
  c->async_write_fd = -1;
  const size_t directory_fds = !err && resp->directory ? 2 : 0;
  if (!err && fds.size() != 3 + directory_fds) err = EPROTO;
  if (err) {
    for (int fd : fds) ::close(fd);
    free_context(c);
    return fail_null<ibv_context>(err);
  }
  if (imported) {
    // Ours from now on: ibv_close_device closes it (rdma-core's import takes the fd too).
    ctx.cmd_fd = imported_cmd_fd;
    c->imported_cmd_fd = imported_cmd_fd;
  }
  c->info = resp->device;
  c->session = resp->session_id;
  void *s =
      ::mmap(nullptr, sizeof(shm::SessionShared), PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  void *d = ::mmap(nullptr, sizeof(shm::DaemonShared), PROT_READ, MAP_SHARED, fds[1], 0);
  ::close(fds[0]);
  ::close(fds[1]);
  c->wake_fd = fds[2];
  std::unique_ptr<DirectPeers> peers =
      directory_fds ? DirectPeers::open(fds[fds.size() - 2], fds[fds.size() - 1], c->session)
                    : nullptr;
  if (s == MAP_FAILED || d == MAP_FAILED) {
    if (s != MAP_FAILED) ::munmap(s, sizeof(shm::SessionShared));
    if (d != MAP_FAILED) ::munmap(d, sizeof(shm::DaemonShared));
    free_context(c);
    return fail_null<ibv_context>(ENOMEM);
  }
  c->session_shm = static_cast<shm::SessionShared *>(s);
  c->daemon_shm = static_cast<const shm::DaemonShared *>(d);
  c->direct = make_direct_path(c->daemon_shm->direct_path, std::move(peers));
  setup_ops(c);
  return &ctx;
}

// The device a vrnicd socket serves, as an ibv_device of ours: the one listed already, else
// asked of that vrnicd and put in a free entry; nullptr when none.
ibv_device *device_at(const std::string &path) {
  std::lock_guard<std::mutex> lock(g_devices_mu);
  for (ProviderDevice &d : g_devices)
    if (d.dev.name[0] && path == d.socket) return &d.dev;
  auto found = std::make_unique<ctl::DeviceListResp>();
  if (ctl::list_devices(path.c_str(), found.get())) return nullptr;
  for (uint32_t i = 0; i < found->count; i++) {
    if (path != found->devices[i].socket) continue;
    for (uint32_t slot = 0; slot < ctl::kMaxDevices; slot++) {
      if (g_devices[slot].dev.name[0]) continue;
      set_device(slot, found->devices[i]);
      return &g_devices[slot].dev;
    }
  }
  return nullptr;
}

}  // namespace vrnic::provider

extern "C" {

VRNIC_EXPORT ibv_device **ibv_get_device_list(int *num_devices) {
  auto **list = static_cast<ibv_device **>(std::calloc(ctl::kMaxDevices + 1, sizeof(ibv_device *)));
  if (!list) return fail_null<ibv_device *>(ENOMEM);
  std::string path;
  auto found = std::make_unique<ctl::DeviceListResp>();
  int err = ctl::find_devices(&path, found.get());
  int n = 0;
  if (err) {
    std::fprintf(stderr, "vrnic: no vrnicd at %s (%s); start it with: vrnicd --socket %s\n",
                 path.c_str(), std::strerror(err), path.c_str());
  } else {
    std::lock_guard<std::mutex> lock(g_devices_mu);
    for (uint32_t i = 0; i < found->count; i++) {
      set_device(i, found->devices[i]);
      list[n++] = &g_devices[i].dev;
    }
  }
  if (num_devices) *num_devices = n;
  return list;
}

VRNIC_EXPORT void ibv_free_device_list(ibv_device **list) {
  std::free(list);
}

VRNIC_EXPORT const char *ibv_get_device_name(ibv_device *device) {
  return device ? device->name : fail_null<const char>(EINVAL);
}

VRNIC_EXPORT __be64 ibv_get_device_guid(ibv_device *device) {
  int i = device_index(device);
  if (i < 0) {
    errno = EINVAL;
    return 0;
  }
  std::lock_guard<std::mutex> lock(g_devices_mu);
  return htobe64(g_devices[i].guid);
}

VRNIC_EXPORT int ibv_get_device_index(ibv_device *device) {
  return device_index(device);
}

VRNIC_EXPORT ibv_context *ibv_open_device(ibv_device *device) {
  int index = device_index(device);
  if (index < 0) return fail_null<ibv_context>(EINVAL);
  std::string path;
  {
    std::lock_guard<std::mutex> lock(g_devices_mu);
    path = g_devices[index].socket;
  }
  return open_context(device, path, -1);
}

VRNIC_EXPORT int ibv_close_device(ibv_context *context) {
  free_context(Context::of(context));  // closing the session makes vrnicd reclaim the rest
  return 0;
}

VRNIC_EXPORT int ibv_query_device(ibv_context *context, ibv_device_attr *device_attr) {
  return query_device(context, device_attr);
}

VRNIC_EXPORT int ibv_query_port(ibv_context *context, uint8_t port_num,
                                struct _compat_ibv_port_attr *port_attr) {
  // Old binaries pass the shorter struct that ends before the extended fields.
  return query_port(context, port_num, reinterpret_cast<ibv_port_attr *>(port_attr),
                    offsetof(ibv_port_attr, link_layer));
}

VRNIC_EXPORT int ibv_query_gid(ibv_context *context, uint8_t port_num, int index,
                               union ibv_gid *gid) {
  const ctl::GidEntry *e = gid_entry(context, port_num, uint32_t(index));
  if (!e || index < 0) return EINVAL;
  // An empty slot reads as the zero GID (ROCE.md).
  if (e->type == ctl::kGidEmpty)
    std::memset(gid->raw, 0, 16);
  else
    std::memcpy(gid->raw, e->gid, 16);
  return 0;
}

VRNIC_EXPORT int _ibv_query_gid_ex(ibv_context *context, uint32_t port_num, uint32_t gid_index,
                                   ibv_gid_entry *entry, uint32_t flags, size_t entry_size) {
  if (flags || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  const ctl::GidEntry *e = gid_entry(context, port_num, gid_index);
  if (!e) return EINVAL;
  if (e->type == ctl::kGidEmpty) return ENODATA;
  std::memcpy(entry->gid.raw, e->gid, 16);
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = e->type == 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  entry->ndev_ifindex = e->ndev_ifindex;
  return 0;
}

VRNIC_EXPORT ssize_t _ibv_query_gid_table(ibv_context *context, ibv_gid_entry *entries,
                                          size_t max_entries, uint32_t flags, size_t entry_size) {
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  size_t n = 0;
  for (uint32_t i = 0; i < ctl::kGidTableLen; i++) {
    if (gid_entry(context, 1, i)->type == ctl::kGidEmpty) continue;
    if (n == max_entries) return -EINVAL;
    auto *e = reinterpret_cast<ibv_gid_entry *>(reinterpret_cast<char *>(entries) + n * entry_size);
    _ibv_query_gid_ex(context, 1, i, e, 0, entry_size);
    n++;
  }
  return ssize_t(n);
}

VRNIC_EXPORT int ibv_query_gid_type(ibv_context *context, uint8_t port_num, unsigned int index,
                                    enum ibv_gid_type_sysfs *type) {
  const ctl::GidEntry *e = gid_entry(context, port_num, index);
  if (!e) return EINVAL;
  *type = e->type == 1 ? IBV_GID_TYPE_SYSFS_ROCE_V2 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
  return 0;
}

VRNIC_EXPORT int ibv_query_pkey(ibv_context *, uint8_t port_num, int index, __be16 *pkey) {
  if (port_num != 1 || index != 0) return EINVAL;
  *pkey = htobe16(0xffff);
  return 0;
}

VRNIC_EXPORT int ibv_get_pkey_index(ibv_context *, uint8_t port_num, __be16 pkey) {
  return port_num == 1 && be16toh(pkey) == 0xffff ? 0 : -1;
}

}  // extern "C"

namespace vrnic::provider {

int query_port(ibv_context *ctx, uint8_t port, ibv_port_attr *attr, size_t len) {
  if (port != 1) return EINVAL;
  const Context *c = Context::of(ctx);
  const ctl::DeviceInfo &d = c->info;
  // The link's state now (vrnicd keeps it in shared memory), not when the device was opened.
  uint32_t state =
      c->daemon_shm ? c->daemon_shm->port_state.load(std::memory_order_relaxed) : d.port_state;
  ibv_port_attr a{};
  a.state = ibv_port_state(state);
  a.max_mtu = ibv_mtu(d.port_max_mtu);
  a.active_mtu = ibv_mtu(d.port_active_mtu);
  a.gid_tbl_len = ctl::kGidTableLen;
  a.port_cap_flags = IBV_PORT_CM_SUP;
  a.max_msg_sz = 1u << 31;
  a.max_vl_num = 1;
  a.pkey_tbl_len = 1;
  a.active_width = uint8_t(d.active_width);
  a.active_speed = uint8_t(d.active_speed);
  a.phys_state = state == IBV_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  a.port_cap_flags2 = 0;
  std::memcpy(attr, &a, std::min(len, sizeof(a)));
  return 0;
}

int query_device_ex(ibv_context *ctx, const ibv_query_device_ex_input *input,
                    ibv_device_attr_ex *attr, size_t attr_size) {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex a{};
  fill_device_attr(Context::of(ctx)->info, &a.orig_attr);
  // The extended flags start with the 32 of ibv_device_attr, as the kernel reports them.
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
  // IB_UVERBS_DEVICE_ATOMIC_WRITE (rdma-core 45's IBV_DEVICE_ATOMIC_WRITE; 44's headers have
  // no name for it): IBTA 1.5's ATOMIC WRITE, ibv_wr_atomic_write.
  constexpr uint64_t kDeviceAtomicWrite = 1ull << 40;
  a.device_cap_flags_ex |= kDeviceAtomicWrite;
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  fill_odp_caps(*Context::of(ctx), &a);
  a.max_dm_size = Context::of(ctx)->info.max_dm_size;
  // Completion timestamps: the free-running clock is CLOCK_MONOTONIC in nanoseconds (1 GHz,
  // in kHz), all 64 bits of it.
  a.hca_core_clock = 1000000;
  a.completion_timestamp_mask = ~0ull;
  std::memcpy(attr, &a, std::min(attr_size, sizeof(a)));
  return 0;
}

// ibv_query_rt_values_ex: the free-running clock now (completion timestamps' clock), as
// seconds and nanoseconds of CLOCK_MONOTONIC.
int query_rt_values(ibv_context *, ibv_values_ex *values) {
  if (!values || (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK))) return EINVAL;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK)
    clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
  return 0;
}

}  // namespace vrnic::provider
