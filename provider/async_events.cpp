// Asynchronous events and the objects they name (async_events.h).
#include "async_events.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>

#include "internal.h"

using namespace vrnic;
using namespace vrnic::provider;

namespace vrnic::provider {

AsyncObjects::AsyncObjects()
    : next_((uint64_t(::arc4random()) << 32 | ::arc4random()) | 1) {}

uint64_t AsyncObjects::add(void *object) {
  std::lock_guard lock(mu_);
  const uint64_t cookie = next_++;
  by_cookie_[cookie] = {object};
  by_object_[object] = cookie;
  return cookie;
}

void AsyncObjects::remove(uint64_t cookie) {
  std::unique_lock lock(mu_);
  auto it = by_cookie_.find(cookie);
  if (it == by_cookie_.end()) return;
  acked_.wait(lock, [&] { return it->second.acked >= it->second.reported; });
  by_object_.erase(it->second.object);
  by_cookie_.erase(it);
}

void *AsyncObjects::report(uint64_t cookie) {
  std::lock_guard lock(mu_);
  auto it = by_cookie_.find(cookie);
  if (it == by_cookie_.end()) return nullptr;
  it->second.reported++;
  return it->second.object;
}

void *AsyncObjects::find(uint64_t cookie) {
  std::lock_guard lock(mu_);
  auto it = by_cookie_.find(cookie);
  return it == by_cookie_.end() ? nullptr : it->second.object;
}

ssize_t read_event_record(int fd, void *record, size_t len) {
  ssize_t n;
  do {
    n = ::read(fd, record, len);
  } while (n < 0 && errno == EINTR);
  return n;
}

void AsyncObjects::ack(const void *object) {
  std::lock_guard lock(mu_);
  auto it = by_object_.find(object);
  if (it == by_object_.end()) return;
  by_cookie_.at(it->second).acked++;
  acked_.notify_all();
}

}  // namespace vrnic::provider

namespace {

// Whether an event names a QP, an SRQ or a CQ by a cookie of the context's AsyncObjects (the
// others name the port or the device).
bool names_object(uint32_t type) {
  switch (type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL:
      return false;
    default:
      return true;
  }
}

}  // namespace

extern "C" {

VRNIC_EXPORT int ibv_get_async_event(ibv_context *context, ibv_async_event *event) {
  Context *c = Context::of(context);
  for (;;) {
    ctl::EventRecord rec;
    const ssize_t n = read_event_record(context->async_fd, &rec, sizeof(rec));
    if (n == 0) {
      // vrnicd held the pipe's write end: end-of-file means the NIC is gone. Report it once,
      // as a device would, then fail.
      if (c->fatal_reported.exchange(true)) {
        errno = EIO;
        return -1;
      }
      event->event_type = IBV_EVENT_DEVICE_FATAL;
      event->element.port_num = 0;
      return 0;
    }
    if (n != sizeof(rec)) return -1;  // (a non-blocking channel with none: EAGAIN)
    event->event_type = ibv_event_type(rec.type);
    switch (rec.type) {
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
        event->element.port_num = 1;
        return 0;
      case IBV_EVENT_DEVICE_FATAL:
        return 0;
    }
    // A QP's, an SRQ's or a CQ's (the element is a union of pointers): dropped if it has
    // been destroyed, or is none of ours.
    if (void *object = c->async_objects.report(rec.cookie)) {
      if (rec.type == IBV_EVENT_CQ_ERR)
        event->element.cq = static_cast<ibv_cq *>(object);
      else
        event->element.qp = static_cast<ibv_qp *>(object);
      return 0;
    }
  }
}

VRNIC_EXPORT void ibv_ack_async_event(ibv_async_event *event) {
  if (!event || !names_object(event->event_type)) return;
  // The QP, the SRQ or the CQ: the same pointer in the union; each begins with its context.
  const void *object = event->element.qp;
  if (!object) return;
  ibv_context *ctx = event->element.qp->context;
  Context::of(ctx)->async_objects.ack(object);
}

}  // extern "C"
