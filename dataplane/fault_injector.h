// Fault injection for a port's receive path: loss, duplication, reordering, corruption and
// delay, each a probability (or a time), drawn from a seeded generator so a run can be
// reproduced. Applied to frames as they come off the wire, before any check: a corrupted
// frame must be caught by the ICRC like a real one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"

namespace vrnic {

struct FaultConfig {
  double loss = 0;        // probability a frame is dropped
  double duplicate = 0;   // ... delivered twice
  double reorder = 0;     // ... held back and delivered after the next one
  double corrupt = 0;     // ... has one random bit flipped
  uint32_t delay_us = 0;  // added to every frame
  // Every frame with this BTH opcode is held back behind the next frame, as reorder does at
  // random: a chosen packet overtaken on the way, for tests of what recovers from that.
  int16_t hold_opcode = -1;  // -1: none
  // CM MADs (to QP1) of this attribute ID lose the first copy of each transaction: the
  // sender's CM timer sends it again and that copy passes (a lost DREQ, say, for tests of
  // the CM's retries).
  int32_t drop_mad_attr = -1;  // -1: none
  uint64_t seed = 1;

  bool any() const {
    return loss || duplicate || reorder || corrupt || delay_us || hold_opcode >= 0 ||
           drop_mad_attr >= 0;
  }
  // "loss=1,dup=0.5,reorder=5,corrupt=1,delay_us=100,hold_op=16,drop_mad=21,seed=7" (rates in
  // percent; hold_op a BTH opcode, 0-255; drop_mad a CM attribute ID, 21 = 0x15 the DREQ).
  static absl::StatusOr<FaultConfig> parse(const std::string &text);
  std::string to_string() const;
};

struct FaultCounters {
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t corrupted = 0;  // corrupted frames delivered: a duplicated one counts twice
  uint64_t delayed = 0;
};

class FaultInjector {
 public:
  explicit FaultInjector(const FaultConfig &cfg) { configure(cfg); }
  void configure(const FaultConfig &cfg);
  const FaultConfig &config() const { return cfg_; }
  const FaultCounters &counters() const { return counters_; }

  bool drop() { return roll(cfg_.loss, counters_.dropped); }
  // Whether this packet (from its BTH on) is the first copy of a MAD drop_mad names.
  bool drop_mad(const uint8_t *pkt, uint32_t len);
  bool duplicate() { return roll(cfg_.duplicate, counters_.duplicated); }
  // Whether to hold this frame back behind the next one: its opcode is the one held, or the
  // dice say so (counted as reordered either way).
  bool reorder(uint8_t bth_opcode) {
    if (cfg_.hold_opcode == bth_opcode) {
      counters_.reordered++;
      return true;
    }
    return roll(cfg_.reorder, counters_.reordered);
  }
  // Flips one random bit of the frame when the dice say so; whether it did.
  bool maybe_corrupt(uint8_t *frame, uint32_t len);
  // A corrupted frame was duplicated: the copy carries the same flipped bit.
  void count_corrupted_copy() { counters_.corrupted++; }
  uint64_t delay_ns() const { return uint64_t(cfg_.delay_us) * 1000; }
  void count_delayed() { counters_.delayed++; }

 private:
  bool roll(double p, uint64_t &counter) {
    if (p <= 0 || uniform_(rng_) >= p) return false;
    counter++;
    return true;
  }
  FaultConfig cfg_;
  FaultCounters counters_;
  // The transactions drop_mad has dropped a copy of, the last few.
  std::array<uint64_t, 16> mad_tids_{};
  size_t mad_tids_seen_ = 0;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace vrnic
