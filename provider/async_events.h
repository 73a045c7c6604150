// A context's asynchronous events (ibv_get_async_event, ibv_ack_async_event) and the objects
// they and completion events name. vrnicd echoes, with each QP, SRQ or CQ event, a cookie the
// object was created with. The cookie is a number this context never reuses, from a random
// start, not the object's address: an event still unread when its object was destroyed is
// then dropped, as the kernel drops it
// (ib_uverbs_release_uevent), instead of naming whatever object lives at that address by
// the time it is read (issue 53: a storage messenger got IBV_EVENT_QP_LAST_WQE_REACHED "for"
// a QP it had just moved to RTR -- its predecessor's, freed, at the same address -- and tore
// the new connection down); and so is one whose cookie no object here has (another process's,
// an importer's, on our channels: issue 52), never taken for an address. And, as rdma-core
// does, ibv_destroy_qp, ibv_destroy_srq and ibv_destroy_cq return only once every async event
// reported for the object has been acknowledged.
#pragma once

#include <condition_variable>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace vrnic::provider {

class AsyncObjects {
 public:
  AsyncObjects();
  // A cookie for a new object (echoed in its events).
  uint64_t add(void *object);
  // The object's events are dropped from now on; returns once those already reported have
  // been acknowledged (or at once if none). Call after vrnicd destroyed it.
  void remove(uint64_t cookie);
  // An event read for `cookie`: its object, counted as reported; nullptr when it is gone.
  void *report(uint64_t cookie);
  // A completion event's CQ (not counted: ibv_ack_cq_events counts those); nullptr if gone.
  void *find(uint64_t cookie);
  // ibv_ack_async_event for an event of `object`.
  void ack(const void *object);

 private:
  struct Entry {
    void *object;
    uint32_t reported = 0, acked = 0;
  };
  std::mutex mu_;
  std::condition_variable acked_;
  std::unordered_map<uint64_t, Entry> by_cookie_;
  std::unordered_map<const void *, uint64_t> by_object_;
  uint64_t next_;
};

// One record of an event channel (the async events' or a completion channel), read as the
// descriptor's mode says; read()'s result, EINTR retried.
ssize_t read_event_record(int fd, void *record, size_t len);

}  // namespace vrnic::provider
