// Completion queues and completion channels. Polling reads CQEs vrnicd wrote into the shared
// ring, merged in order with those of the WRs the direct path ran: no system call. Events
// arrive as records on the channel's pipe.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "internal.h"
#include "vrnic/clock.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace {

// After this many empty polls in a row a poller gives its CPU away once: on a 2-core
// machine the worker that would produce the completion may be waiting for it.
constexpr int kEmptyPollsBeforeYield = 64;
thread_local int t_empty_polls = 0;

}  // namespace

namespace vrnic::provider {

CqCursor cq_cursor(const Cq *cq) { return {cq->consumer, cq->direct_head, nullptr}; }

bool cq_next(Cq *cq, CqCursor &c, uint32_t producer) {
  const bool direct = c.direct != cq->direct_tail;
  const Cq::DirectCqe *d = direct ? &cq->direct[c.direct % Cq::kDirectSlots] : nullptr;
  // A direct completion goes once every CQE vrnicd had written before it has gone.
  if (d && (int32_t(d->after - c.worker) <= 0 || c.worker == producer)) {
    c.cqe = &d->cqe;
    c.direct++;
    return true;
  }
  if (c.worker == producer) return false;
  c.cqe = &cq->ring[c.worker & cq->mask];
  c.worker++;
  return true;
}

void cq_consume(Cq *cq, const CqCursor &c) {
  cq->direct_head = c.direct;
  if (c.worker == cq->consumer) return;
  cq->consumer = c.worker;
  cq->shared->ring.consumer.store(cq->consumer, std::memory_order_release);
}

bool cq_reserve_direct(Cq *cq) {
  if (!cq->direct || pthread_spin_trylock(&cq->lock)) return false;
  const bool room = cq->direct_tail - cq->direct_head + cq->direct_reserved < Cq::kDirectSlots;
  if (room) cq->direct_reserved++;
  pthread_spin_unlock(&cq->lock);
  return room;
}

void cq_push_direct(Cq *cq, const shm::Cqe &cqe) {
  pthread_spin_lock(&cq->lock);
  cq->direct_reserved--;
  cq->direct[cq->direct_tail % Cq::kDirectSlots] = {
      cqe, cq->shared->ring.producer.load(std::memory_order_acquire),
      cq->stamps ? monotonic_ns() : 0};
  cq->direct_tail++;
  pthread_spin_unlock(&cq->lock);
  // As vrnicd does after a CQE (dataplane/completion_queue.cpp): a CQ armed for the next
  // completion raises one event, whoever disarms it first. A send completion is never
  // solicited, so a solicited-only arm stays.
  if (cq->shared->notify.load(std::memory_order_seq_cst) == shm::kNotifyNext &&
      cq->shared->notify.exchange(shm::kNotifyNone) != shm::kNotifyNone && cq->ibv.channel) {
    ctl::EventRecord rec{ctl::kEventCompletion, 0, cq->event_cookie};
    ctl::send_event(Channel::of(cq->ibv.channel)->write_fd, &rec, sizeof(rec));
  }
}

int poll_cq(ibv_cq *ibcq, int n, ibv_wc *wc) {
  Cq *cq = Cq::of(ibcq);
  pthread_spin_lock(&cq->lock);
  uint32_t producer = cq->shared->ring.producer.load(std::memory_order_acquire);
  CqCursor c = cq_cursor(cq);
  int i = 0;
  for (; i < n && cq_next(cq, c, producer); i++) {
    const shm::Cqe &e = *c.cqe;
    ibv_wc &w = wc[i];
    w.wr_id = e.wr_id;
    w.status = ibv_wc_status(e.status);
    w.opcode = ibv_wc_opcode(e.opcode);
    w.vendor_err = 0;
    w.byte_len = e.byte_len;
    w.imm_data = e.imm_data;
    w.qp_num = e.qp_num;
    w.src_qp = e.src_qp;
    w.wc_flags = e.wc_flags;
    w.pkey_index = e.pkey_index;
    w.slid = e.slid;
    w.sl = e.sl;
    w.dlid_path_bits = 0;
  }
  if (i) cq_consume(cq, c);
  pthread_spin_unlock(&cq->lock);
  if (i) {
    t_empty_polls = 0;
  } else if (++t_empty_polls >= kEmptyPollsBeforeYield) {
    t_empty_polls = 0;
    sched_yield();
  }
  return i;
}

// vrnicd writes no more CQEs for the QP by now, but may append others at the producer end
// while we work: so walk back from the producer index we read, slide each CQE we keep over
// the ones dropped, and give the freed slots back by moving the consumer forward. A direct
// completion's place among vrnicd's moves with them: past as many dropped as were after it.
void clean_cq(ibv_cq *ibcq, uint32_t qpn) {
  if (!ibcq) return;  // (an XRC QP's missing CQs)
  Cq *cq = Cq::of(ibcq);
  pthread_spin_lock(&cq->lock);
  uint32_t producer = cq->shared->ring.producer.load(std::memory_order_acquire);
  uint32_t dropped = 0;
  uint32_t d = cq->direct_tail;  // direct completions not yet moved; their places only grow
  auto move_direct_from = [&](uint32_t boundary) {
    for (; d != cq->direct_head; d--) {
      Cq::DirectCqe &e = cq->direct[(d - 1) % Cq::kDirectSlots];
      if (int32_t(e.after - boundary) < 0) break;
      e.after += dropped;
    }
  };
  for (uint32_t i = producer; i != cq->consumer;) {
    move_direct_from(i);
    i--;
    const shm::Cqe &e = cq->ring[i & cq->mask];
    if (e.qp_num == qpn) {
      dropped++;
    } else if (dropped) {
      cq->ring[(i + dropped) & cq->mask] = e;
      if (cq->stamps) cq->stamps[(i + dropped) & cq->mask] = cq->stamps[i & cq->mask];
    }
  }
  move_direct_from(cq->consumer - 0x7fffffffu);  // the rest: every dropped CQE was after them
  if (dropped) {
    cq->consumer += dropped;
    cq->shared->ring.consumer.store(cq->consumer, std::memory_order_release);
  }
  // The QP's own direct completions go too, the others keep their order.
  uint32_t kept = cq->direct_head;
  for (uint32_t j = cq->direct_head; j != cq->direct_tail; j++) {
    const Cq::DirectCqe &e = cq->direct[j % Cq::kDirectSlots];
    if (e.cqe.qp_num != qpn) cq->direct[kept++ % Cq::kDirectSlots] = e;
  }
  cq->direct_tail = kept;
  pthread_spin_unlock(&cq->lock);
}

// Moderation is accepted and has no effect: vrnic raises each event as soon as it may,
// which is never later than moderation would.
int modify_cq(ibv_cq *, ibv_modify_cq_attr *attr) {
  if (!attr || attr->attr_mask != IBV_CQ_ATTR_MODERATE) return EINVAL;
  return 0;
}

int req_notify_cq(ibv_cq *ibcq, int solicited_only) {
  Cq *cq = Cq::of(ibcq);
  uint32_t want = solicited_only ? shm::kNotifySolicited : shm::kNotifyNext;
  // A pending "next completion" request is not weakened by a later solicited-only one.
  uint32_t cur = cq->shared->notify.load(std::memory_order_relaxed);
  if (cur != shm::kNotifyNext) cq->shared->notify.store(want, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return 0;
}

// The CQ's view of its region (header, ring, stamps).
static void lay_out(Cq *cq, void *map, uint32_t slots, bool stamped) {
  cq->shared = static_cast<shm::CqShared *>(map);
  cq->ring = shm::cq_ring(map);
  cq->stamps = stamped ? shm::cq_stamps(map, slots) : nullptr;
  cq->mask = slots - 1;
}

Cq *create_cq(ibv_context *context, int cqe, void *cq_context, ibv_comp_channel *channel,
              int comp_vector, bool stamped) {
  if (cqe < 1 || comp_vector < 0 || comp_vector >= context->num_comp_vectors)
    return fail_null<Cq>(EINVAL);
  Context *c = Context::of(context);
  auto *cq = new (std::nothrow) Cq{};
  if (!cq) return fail_null<Cq>(ENOMEM);
  std::memset(&cq->ex, 0, sizeof(cq->ex));
  cq->event_cookie = c->async_objects.add(&cq->ibv);
  ctl::CreateCqReq req{uint32_t(cqe), channel ? Channel::of(channel)->handle : 0,
                       cq->event_cookie, stamped ? ctl::kCqStamped : 0, 0};
  ctl::CreateCqResp resp{};
  void *map = nullptr;
  size_t len = 0;
  int err = c->create_mapped(
      ctl::Op::kCreateCq, &req, sizeof(req), resp, ctl::Op::kDestroyCq,
      [stamped](const ctl::CreateCqResp &r) { return shm::cq_region_bytes(r.slots, stamped); },
      &map, &len);
  if (err) {
    c->async_objects.remove(cq->event_cookie);
    delete cq;
    return fail_null<Cq>(err);
  }
  cq->handle = resp.handle;
  lay_out(cq, map, resp.slots, stamped);
  cq->map_len = len;
  // Without it (no memory) the CQ's QPs simply keep to the worker path.
  if (c->direct) cq->direct.reset(new (std::nothrow) Cq::DirectCqe[Cq::kDirectSlots]);
  pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
  ibv_cq &ib = cq->ibv;
  ib.context = context;
  ib.channel = channel;
  ib.cq_context = cq_context;
  ib.handle = resp.handle;
  ib.cqe = int(resp.slots);
  pthread_mutex_init(&ib.mutex, nullptr);
  pthread_cond_init(&ib.cond, nullptr);
  if (channel) __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
  return cq;
}

}  // namespace vrnic::provider

extern "C" {

VRNIC_EXPORT ibv_comp_channel *ibv_create_comp_channel(ibv_context *context) {
  int fds[2];
  if (int err = ctl::make_event_channel(fds)) return fail_null<ibv_comp_channel>(err);
  ctl::CreateChannelReq req{};
  ctl::HandleResp resp{};
  int err = Context::of(context)->conn.call(ctl::Op::kCreateChannel, &req, sizeof(req), &resp,
                                            sizeof(resp), &fds[1], 1);
  // vrnicd has its own copy of the write end; ours raises the direct path's events.
  auto *ch = err ? nullptr : new (std::nothrow) Channel{};
  if (!ch) {
    ::close(fds[0]);
    ::close(fds[1]);
    return fail_null<ibv_comp_channel>(err ? err : ENOMEM);
  }
  ch->ibv = {context, fds[0], 0};
  ch->handle = resp.handle;
  ch->write_fd = fds[1];
  return &ch->ibv;
}

VRNIC_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel *channel) {
  Channel *ch = Channel::of(channel);
  int err = Context::of(channel->context)->call_on(ctl::Op::kDestroyChannel, ch->handle);
  if (err) return err;
  ::close(channel->fd);
  ::close(ch->write_fd);
  delete ch;
  return 0;
}

VRNIC_EXPORT ibv_cq *ibv_create_cq(ibv_context *context, int cqe, void *cq_context,
                                   ibv_comp_channel *channel, int comp_vector) {
  Cq *cq = create_cq(context, cqe, cq_context, channel, comp_vector);
  return cq ? &cq->ibv : nullptr;
}

VRNIC_EXPORT int ibv_destroy_cq(ibv_cq *ibcq) {
  Cq *cq = Cq::of(ibcq);
  Context *c = Context::of(ibcq->context);
  int err = c->call_on(ctl::Op::kDestroyCq, cq->handle);
  if (err) return err;
  c->async_objects.remove(cq->event_cookie);
  if (ibcq->channel) __atomic_sub_fetch(&ibcq->channel->refcnt, 1, __ATOMIC_RELAXED);
  ::munmap(cq->shared, cq->map_len);
  pthread_spin_destroy(&cq->lock);
  delete cq;
  return 0;
}

VRNIC_EXPORT int ibv_resize_cq(ibv_cq *ibcq, int cqe) {
  if (cqe < 1) return EINVAL;
  Cq *cq = Cq::of(ibcq);
  Context *c = Context::of(ibcq->context);
  ctl::ResizeCqReq req{cq->handle, uint32_t(cqe)};
  ctl::CreateCqResp resp{};
  std::vector<int> fds;
  // Polling waits while vrnicd moves the unpolled completions to the new ring.
  pthread_spin_lock(&cq->lock);
  int err =
      c->conn.call(ctl::Op::kResizeCq, &req, sizeof(req), &resp, sizeof(resp), nullptr, 0, &fds);
  if (!err && fds.size() != 1) err = EPROTO;
  if (!err) {
    const bool stamped = cq->stamps != nullptr;  // vrnicd keeps them too
    size_t len = shm::cq_region_bytes(resp.slots, stamped);
    void *map = Context::mmap_shared(fds[0], len);
    if (!map) {
      err = ENOMEM;  // vrnicd moved on; this CQ can no longer be polled
    } else {
      ::munmap(cq->shared, cq->map_len);
      lay_out(cq, map, resp.slots, stamped);
      // The unpolled CQEs now start at index 0 of the new ring; the direct completions'
      // places among them move with them.
      for (uint32_t j = cq->direct_head; j != cq->direct_tail; j++) {
        uint32_t &after = cq->direct[j % Cq::kDirectSlots].after;
        after = int32_t(after - cq->consumer) > 0 ? after - cq->consumer : 0;
      }
      cq->consumer = 0;
      cq->map_len = len;
      ibcq->cqe = int(resp.slots);
    }
  }
  pthread_spin_unlock(&cq->lock);
  for (int fd : fds) ::close(fd);
  return err;
}

VRNIC_EXPORT int ibv_get_cq_event(ibv_comp_channel *channel, ibv_cq **cq, void **cq_context) {
  AsyncObjects &objects = Context::of(channel->context)->async_objects;
  for (;;) {
    ctl::EventRecord rec;
    const ssize_t n = read_event_record(channel->fd, &rec, sizeof(rec));
    if (n != sizeof(rec)) {
      if (n >= 0) errno = EIO;
      return -1;
    }
    // A CQ of this context's, by its cookie (async_events.h): one destroyed since, or a
    // cookie nobody here made (an importer's CQ on our channel), is no event of ours.
    auto *ib = static_cast<ibv_cq *>(objects.find(rec.cookie));
    if (!ib) continue;
    *cq = ib;
    *cq_context = ib->cq_context;
    return 0;
  }
}

VRNIC_EXPORT void ibv_ack_cq_events(ibv_cq *cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

}  // extern "C"
