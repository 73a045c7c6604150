// How many unacknowledged PSNs an RC requester may have out. Go-back-N repeats everything
// sent after a loss, so the cost of a loss grows with the window: the window halves on each
// loss signal (a sequence NAK, a timeout) and grows back as ACKs show progress, the way TCP's
// congestion window does. On a clean path it stays at its ceiling, which also bounds the
// packet buffers one QP can hold.
#pragma once

#include <algorithm>
#include <cstdint>

namespace vrnic {

class SendWindow {
 public:
  static constexpr uint32_t kMaxPsns = 512;
  static constexpr uint32_t kMinPsns = 8;

  bool allows(int32_t unacknowledged) const { return unacknowledged <= int32_t(psns_); }
  uint32_t psns() const { return psns_; }

  void on_loss() { psns_ = std::max(kMinPsns, psns_ / 2); }

  // `acked` PSNs newly acknowledged: below half the ceiling the window grows by what was
  // acknowledged (a quick return after a burst of losses), above it by one per window.
  void on_progress(uint32_t acked) {
    if (psns_ < kMaxPsns / 2) {
      psns_ = std::min(kMaxPsns, psns_ + acked);
    } else {
      credit_ += acked;
      if (credit_ >= psns_) {
        credit_ = 0;
        psns_ = std::min(kMaxPsns, psns_ + std::max<uint32_t>(1, psns_ / 8));
      }
    }
  }

 private:
  uint32_t psns_ = kMaxPsns;
  uint32_t credit_ = 0;
};

}  // namespace vrnic
