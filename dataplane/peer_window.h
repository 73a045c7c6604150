// How many packets one worker's RC requesters may have out towards one peer, all its QPs
// together, and when a requester resends without waiting for the IB timeout. Each QP's
// SendWindow bounds that QP; this bounds their sum, which is what the peer's receive buffer
// sees. A udp-port peer without root has a kernel socket buffer of net.core.rmem_max (212992
// bytes on most hosts: a few dozen 4 KiB datagrams), and 64 QPs at their own floor of 8 PSNs
// still overflow it; go-back-N then resends every loss's window into the same full buffer
// until a QP's retries run out.
//
// The window is loss-driven, like TCP's congestion window (RFC 5681): a sequence NAK (or an
// implied one) or a probe sets it to half of what was out, an IB timeout drops it to the floor,
// and each loss event counts once however many QPs report it. Acknowledgements grow it: by what
// they acknowledge below the threshold (doubling per round trip), by an eighth per window
// above. On a path that loses nothing it reaches its ceiling, above what the QPs' own windows
// allow together, within the first 32 K acknowledged PSNs, and holds nothing back.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace vrnic {

class QueuePair;

class PeerWindow {
 public:
  static constexpr uint32_t kMaxPackets = 1u << 15;
  static constexpr uint32_t kMinPackets = 16;
  // Where it starts, doubling each round trip up to the first loss: 64 QPs' first bursts at
  // once into a small buffer would be a loss on every QP.
  static constexpr uint32_t kInitialPackets = 64;

  bool allows() const { return in_flight_ < packets_; }
  bool at_ceiling() const { return packets_ == kMaxPackets; }
  uint32_t packets() const { return packets_; }
  uint32_t in_flight() const { return in_flight_; }

  // A QP that had `before` PSNs out (sent, not acknowledged) now has `now`.
  void charge(uint32_t before, uint32_t now) { in_flight_ += now - before; }

  void on_progress(uint32_t acked) {
    acked_ += acked;
    if (packets_ < threshold_) {
      packets_ = std::min(threshold_, packets_ + acked);
      return;
    }
    credit_ += acked;
    if (credit_ >= packets_) {
      credit_ = 0;
      packets_ = std::min(kMaxPackets, packets_ + std::max<uint32_t>(1, packets_ / 8));
    }
  }

  enum class Loss { kNak, kProbe, kTimeout };
  // A few packets lost at random and repaired one by one (a selective NAK, wire::Sack): the
  // path loses packets (probes stay armed, below), but the window stays, since the loss says
  // nothing of overload; a run of losses comes through on_loss.
  void on_random_loss(uint64_t now) { note_loss(now); }
  // Call before the QP rewinds, so that what was out is counted. `now` in ns.
  void on_loss(Loss kind, uint64_t now) {
    if (kind != Loss::kProbe) note_loss(now);
    if (acked_ >= recovered_at_) {  // a new loss event
      // Half of what was out, but never more than half the window: a window that has just
      // shrunk still has the packets of the larger one out.
      threshold_ = std::max(kMinPackets, std::min(in_flight_, packets_) / 2);
      recovered_at_ = acked_ + std::max(in_flight_, 1u);
      packets_ = std::min(packets_, threshold_);
      credit_ = 0;
    }
    if (kind == Loss::kTimeout) packets_ = kMinPackets;
  }

  // Round trips to the peer, measured as TCP does (RFC 6298): a QP times one PSN at a time,
  // never one that was sent twice (Karn). A requester that has seen no progress for
  // probe_ns() resends from its oldest unacknowledged PSN (a probe): the loss of a QP's last
  // packets shows no gap to the responder, so no NAK reports it, and the IB timeout is long
  // (67 ms for perftest). Probes run only while the path loses packets (a NAK or a timeout in
  // the last second): on a clean path a round trip that a busy CPU stretches past the probe
  // time would only resend what arrives anyway.
  static constexpr uint64_t kMinProbeNs = 5'000'000;  // above a scheduler tick (HZ=250: 4 ms)
  static constexpr uint64_t kLossyNs = 1'000'000'000;
  void rtt_sample(uint64_t ns) {
    if (!srtt_ns_) {
      srtt_ns_ = ns;
      rttvar_ns_ = ns / 2;
      return;
    }
    uint64_t dev = ns > srtt_ns_ ? ns - srtt_ns_ : srtt_ns_ - ns;
    rttvar_ns_ = (3 * rttvar_ns_ + dev) / 4;
    srtt_ns_ = (7 * srtt_ns_ + ns) / 8;
  }
  uint64_t srtt_ns() const { return srtt_ns_; }
  uint64_t probe_ns() const { return std::max(kMinProbeNs, srtt_ns_ + 4 * rttvar_ns_); }
  bool lossy(uint64_t now) const { return lost_ && now - last_loss_ns_ < kLossyNs; }

  // Kept by the worker (Worker::attach_peer): the peer, the QPs attached, and those held
  // back by this window, scheduled again when it opens.
  std::array<uint8_t, 16> gid{};
  uint32_t refs = 0;
  std::vector<QueuePair *> waiting;

 private:
  uint32_t packets_ = kInitialPackets;
  uint32_t threshold_ = kMaxPackets;
  uint32_t in_flight_ = 0;
  uint32_t credit_ = 0;
  uint64_t srtt_ns_ = 0, rttvar_ns_ = 0;
  void note_loss(uint64_t now) {
    lost_ = true;
    last_loss_ns_ = now;
  }
  bool lost_ = false;  // a loss seen (last_loss_ns_ says when; a clock may read 0)
  uint64_t last_loss_ns_ = 0;
  uint64_t acked_ = 0;         // PSNs acknowledged, all QPs, ever
  uint64_t recovered_at_ = 0;  // a loss before acked_ reaches this is the same event
};

}  // namespace vrnic
