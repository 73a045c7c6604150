// The receive-path stage that applies injected faults to packets before delivery
// (rx_fault_stage.h).
#include "rx_fault_stage.h"

#include <cstring>

#include "vrnic/clock.h"

namespace vrnic {

RxFaultStage::~RxFaultStage() {
  for (; delayed_head_ < delayed_.size(); delayed_head_++)
    pool_.free(delayed_[delayed_head_].frame.pkt);
  if (held_.pkt) pool_.free(held_.pkt);
}

void RxFaultStage::configure(const FaultConfig &cfg) {
  if (cfg.any()) {
    if (faults_) {
      faults_->configure(cfg);
    } else {
      faults_ = std::make_unique<FaultInjector>(cfg);
    }
    return;
  }
  faults_.reset();
  if (held_.pkt) deliver_(port_, held_);
  held_ = {};
  for (; delayed_head_ < delayed_.size(); delayed_head_++)
    deliver_(port_, delayed_[delayed_head_].frame);
  delayed_.clear();
  delayed_head_ = 0;
}

void RxFaultStage::deliver_or_delay(RxFrame frame) {
  if (faults_->delay_ns()) {
    faults_->count_delayed();
    delayed_.push_back({monotonic_ns() + faults_->delay_ns(), frame});
  } else {
    deliver_(port_, frame);
  }
}

void RxFaultStage::push(RxFrame frame) {
  FaultInjector &f = *faults_;
  if (f.drop_mad(frame.data, frame.len) || f.drop()) {
    pool_.free(frame.pkt);
    return;
  }
  const bool corrupted = f.maybe_corrupt(frame.data, frame.len);
  if (f.duplicate()) {
    // The copy lives in its own packet's bounce buffer, with the port's per-packet notes
    // (the sender's address) but not the original's hold on a port buffer.
    if (Packet *copy = pool_.alloc(); copy && frame.len <= kPacketBufferBytes) {
      std::memcpy(copy->bounce, frame.data, frame.len);
      copy->wire = frame.pkt->wire;
      if (corrupted) f.count_corrupted_copy();
      deliver_or_delay({copy, copy->bounce, frame.len});
    } else if (copy) {
      pool_.free(copy);
    }
  }
  if (!held_.pkt && frame.len && f.reorder(frame.data[0])) {  // (the BTH's first byte)
    held_ = frame;
    return;
  }
  deliver_or_delay(frame);
  if (held_.pkt) {
    RxFrame late = held_;
    held_ = {};
    deliver_or_delay(late);
  }
}

void RxFaultStage::release_due() {
  if (delayed_head_ == delayed_.size()) return;
  uint64_t now = monotonic_ns();
  while (delayed_head_ < delayed_.size() && delayed_[delayed_head_].due_ns <= now) {
    deliver_(port_, delayed_[delayed_head_].frame);
    delayed_head_++;
  }
  if (delayed_head_ == delayed_.size()) {
    delayed_.clear();
    delayed_head_ = 0;
  }
}

}  // namespace vrnic
