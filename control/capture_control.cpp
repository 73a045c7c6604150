// vrnicctl capture, vrnicd's side: the rings shared with the capturing vrnicctl, the tap the
// workers write them through (dataplane/capture_tap.h), and the direct path turned off while
// it runs, so that every packet goes through a worker to be seen.
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "server.h"
#include "vrnic/capture_ring.h"

namespace vrnic {

void Server::update_direct_path() {
  const bool on = cfg_.direct_path && !faults_on_ && !capture_tap_;
  daemon_shm_->direct_path.store(on ? 1 : 0, std::memory_order_relaxed);
}

int Server::start_capture(Session &s, const ctl::CaptureReq &req, ctl::CaptureResp &resp,
                          std::vector<int> &fds) {
  if (capture_tap_) return EBUSY;
  const uint32_t workers = uint32_t(workers_.all().size());
  absl::StatusOr<SharedRegion> region =
      make_shared_region("vrnic-capture", capture::region_bytes(workers));
  if (!region.ok()) return ENOMEM;
  int fd = ::dup(region->fd);  // the reply's copy, closed once sent
  if (fd < 0) {
    region->release();
    return errno;
  }
  capture_region_ = *region;
  capture_tap_ = std::make_unique<CaptureTap>(
      capture_region_.map, workers, req.qpn == ctl::kCaptureAnyQp ? CaptureTap::kAnyQp : req.qpn);
  capture_session_ = s.id;
  dev_.capture.store(capture_tap_.get(), std::memory_order_release);
  update_direct_path();
  fds.push_back(fd);
  resp.workers = workers;
  resp.ring_bytes = capture::kRingBytes;
  resp.region_bytes = capture_region_.bytes;
  std::fprintf(stderr, "vrnicd: vrnic%u: capture started (session %u)\n", cfg_.device_index, s.id);
  return 0;
}

int Server::stop_capture(Session &s) {
  if (!capture_tap_ || capture_session_ != s.id) return ENOENT;
  end_capture();
  return 0;
}

// The workers stop writing (after a grace period none holds the tap), then the rings go.
void Server::end_capture() {
  if (!capture_tap_) return;
  dev_.capture.store(nullptr, std::memory_order_release);
  workers_.synchronize();
  capture_tap_.reset();
  capture_region_.release();
  capture_session_ = 0;
  update_direct_path();
  std::fprintf(stderr, "vrnicd: vrnic%u: capture stopped\n", cfg_.device_index);
}

}  // namespace vrnic
