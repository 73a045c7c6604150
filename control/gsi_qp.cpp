// QP1 of a device, vrnicd's own UD QP for CM MADs (gsi_qp.h).
#include "gsi_qp.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "dataplane/completion_queue.h"
#include "dataplane/memory_region.h"
#include "dataplane/transport.h"
#include "errno_status.h"
#include "vrnic/ctl_protocol.h"

namespace vrnic {
namespace {

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
using Region = std::unique_ptr<uint8_t, FreeDeleter>;

Region zeroed(size_t bytes) {
  bytes = (bytes + 4095) & ~size_t(4095);
  auto *p = static_cast<uint8_t *>(std::aligned_alloc(4096, bytes));
  if (p) std::memset(p, 0, bytes);
  return Region(p);
}

// The GID a MAD came from: the source address of the IP header in the GRH bytes (RoCEv2 puts
// an IPv4 header in the last 20 of them, an IPv6 header in all 40).
cm::Gid source_gid(const uint8_t grh[40]) {
  cm::Gid gid{};
  if ((grh[20] >> 4) == 4) {
    gid[10] = gid[11] = 0xff;
    std::memcpy(gid.data() + 12, grh + 20 + 12, 4);
  } else {
    std::memcpy(gid.data(), grh + 8, 16);
  }
  return gid;
}

}  // namespace

struct GsiQp::Memory {
  Region qp_region, send_cq_region, recv_cq_region, buffers;
  QueuePair qp;
  CompletionQueue send_cq, recv_cq;
  MemoryRegion mr;
};

GsiQp::GsiQp(Device &dev, WorkerGroup &workers) : dev_(dev), workers_(workers) {}

absl::Status GsiQp::start() {
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return errno_status(errno, "pipe2");
  mem_ = std::make_unique<Memory>();
  Memory &m = *mem_;
  m.qp_region = zeroed(shm::qp_region_bytes(kSendSlots, kRecvSlots));
  m.send_cq_region = zeroed(shm::cq_region_bytes(kSendSlots));
  m.recv_cq_region = zeroed(shm::cq_region_bytes(kRecvSlots));
  m.buffers = zeroed(size_t(kRecvSlots) * kRecvBytes);
  if (!m.qp_region || !m.send_cq_region || !m.recv_cq_region || !m.buffers)
    return errno_status(ENOMEM, "QP1 memory");
  m.send_cq.lay_out(m.send_cq_region.get(), kSendSlots, false);
  m.recv_cq.lay_out(m.recv_cq_region.get(), kRecvSlots, false);
  m.recv_cq.channel_fd = pipe_[1];
  m.recv_cq.shared->notify.store(shm::kNotifyNext);
  const uint64_t base = reinterpret_cast<uint64_t>(m.buffers.get());
  m.mr.key = Device::kGsiMrKey;
  m.mr.pd = 0;
  m.mr.access = IBV_ACCESS_LOCAL_WRITE;
  m.mr.addr = m.mr.iova = base;
  m.mr.length = size_t(kRecvSlots) * kRecvBytes;
  m.mr.pieces.push_back({base, m.mr.length, m.buffers.get()});

  QueuePair &qp = m.qp;
  qp.pd = 0;
  qp_init(qp, IBV_QPT_UD, m.qp_region.get(), kSendSlots, kRecvSlots,
          mtu_bytes(dev_.info.port_active_mtu));
  qp.qpn = Device::kGsiQpn;
  qp.worker = 0;
  qp.shared->worker.store(0);
  m.send_cq.multi_worker = m.recv_cq.multi_worker = workers_.size() > 1;
  qp_attach_queues(qp, &m.send_cq, &m.recv_cq, nullptr);
  for (uint32_t i = 0; i < kRecvSlots; i++) post_recv(i);
  workers_.execute_all([&] {
    ctl::QpAttrWire a{};
    a.qkey = cm::kGsiQkey;
    a.port_num = 1;
    qp_modify(workers_[0], qp, a, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_PORT, IBV_QPS_INIT);
    qp_modify(workers_[0], qp, a, IBV_QP_STATE, IBV_QPS_RTR);
    qp_modify(workers_[0], qp, a, IBV_QP_STATE, IBV_QPS_RTS);
    dev_.gsi_mr = &m.mr;
    dev_.gsi = &qp;
  });
  qp_ = &qp;
  return absl::OkStatus();
}

void GsiQp::stop() {
  if (!qp_) return;
  workers_.execute_all([&] {
    dev_.gsi = nullptr;
    dev_.gsi_mr = nullptr;
    qp_release(workers_[0], *qp_);
  });
  qp_ = nullptr;
}

GsiQp::~GsiQp() {
  stop();
  for (int fd : pipe_)
    if (fd >= 0) ::close(fd);
}

void GsiQp::post_recv(uint32_t slot) {
  QueuePair &qp = mem_->qp;
  const uint32_t p = qp.own_rq.indices->producer.load(std::memory_order_relaxed);
  shm::RecvWqe &w = qp.own_rq.ring[p & qp.own_rq.mask];
  w = {};
  w.wr_id = slot;
  w.num_sge = 1;
  w.length = kRecvBytes;
  w.sge[0] = {reinterpret_cast<uint64_t>(mem_->buffers.get()) + uint64_t(slot) * kRecvBytes,
              kRecvBytes, Device::kGsiMrKey};
  qp.own_rq.indices->producer.store(p + 1, std::memory_order_release);
  recv_posted_++;
}

void GsiQp::reap_sends() {
  CompletionQueue &cq = mem_->send_cq;
  uint32_t producer = cq.shared->ring.producer.load(std::memory_order_acquire);
  cq.shared->ring.consumer.store(producer, std::memory_order_release);  // nothing to learn
}

bool GsiQp::send(const cm::Gid &to, const cm::Mad &mad) {
  if (!qp_) return false;
  reap_sends();
  QueuePair &qp = *qp_;
  while (send_head_ - qp.shared->sq.consumer.load(std::memory_order_acquire) >= kSendSlots) {
    unsent_ = true;
    flush();  // returns once the worker has run, sending some
    if (qp.state() != IBV_QPS_RTS) return false;
  }
  shm::SendWqe &w = qp.sq[send_head_ & qp.sq_mask];
  w = {};
  w.wr_id = send_head_;
  w.opcode = IBV_WR_SEND;
  w.flags = shm::kWqeInline;  // unsignaled: the slot frees itself once sent
  w.length = cm::kMadBytes;
  std::memcpy(w.ud.dgid, to.data(), 16);
  w.ud.remote_qpn = cm::kGsiQpn;
  w.ud.remote_qkey = cm::kGsiQkey;
  w.ud.sgid_index = 0;
  w.ud.hop_limit = 64;
  std::memcpy(w.inline_data, mad.bytes.data(), cm::kMadBytes);
  send_head_++;
  qp.shared->sq.producer.store(send_head_, std::memory_order_release);
  unsent_ = true;
  return true;
}

void GsiQp::flush() {
  if (!unsent_ || !qp_) return;
  unsent_ = false;
  Worker &w0 = workers_[0];
  w0.execute([&] { w0.schedule(*qp_); });
}

void GsiQp::receive(const std::function<void(const cm::Gid &, const cm::Mad &)> &fn) {
  if (!qp_) return;
  ctl::EventRecord rec[16];
  while (::read(pipe_[0], rec, sizeof(rec)) > 0) {
  }
  CompletionQueue &cq = mem_->recv_cq;
  for (int pass = 0; pass < 2; pass++) {
    uint32_t producer = cq.shared->ring.producer.load(std::memory_order_acquire);
    while (recv_polled_ != producer) {
      const shm::Cqe cqe = cq.ring[recv_polled_ & cq.mask];
      recv_polled_++;
      cq.shared->ring.consumer.store(recv_polled_, std::memory_order_release);
      const uint32_t slot = uint32_t(cqe.wr_id) % kRecvSlots;
      const uint8_t *buf = mem_->buffers.get() + size_t(slot) * kRecvBytes;
      if (cqe.status != IBV_WC_SUCCESS || cqe.byte_len != kRecvBytes) {
        dropped_++;  // not a 256-byte MAD
      } else {
        cm::Mad mad;
        std::memcpy(mad.bytes.data(), buf + kGrhBytes, cm::kMadBytes);
        fn(source_gid(buf), mad);
      }
      post_recv(slot);
    }
    // Armed again, then looked at once more: a MAD that came in between raised no event.
    cq.shared->notify.store(shm::kNotifyNext, std::memory_order_seq_cst);
  }
}

}  // namespace vrnic
