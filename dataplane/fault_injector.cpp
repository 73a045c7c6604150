// Fault injection on a port's receive path: loss, reordering, duplication, corruption and
// delay, from a --faults spec (fault_injector.h).
#include "fault_injector.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace vrnic {

void FaultInjector::configure(const FaultConfig &cfg) {
  cfg_ = cfg;
  rng_.seed(cfg.seed);
}

void FaultInjector::maybe_corrupt(uint8_t *frame, uint32_t len) {
  if (!len || !roll(cfg_.corrupt, counters_.corrupted)) return;
  uint64_t bit = rng_() % (uint64_t(len) * 8);
  frame[bit / 8] ^= uint8_t(1u << (bit % 8));
}

absl::StatusOr<FaultConfig> FaultConfig::parse(const std::string &text) {
  FaultConfig cfg;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double value;
    if (!absl::SimpleAtod(kv.second, &value) || value < 0)
      return absl::InvalidArgumentError("fault setting '" + std::string(item) +
                                        "': want name=number");
    auto percent = [&](double *out) -> absl::Status {
      if (value > 100) return absl::InvalidArgumentError(kv.first + " is a percentage (0-100)");
      *out = value / 100;
      return absl::OkStatus();
    };
    absl::Status st;
    if (kv.first == "loss") {
      st = percent(&cfg.loss);
    } else if (kv.first == "dup") {
      st = percent(&cfg.duplicate);
    } else if (kv.first == "reorder") {
      st = percent(&cfg.reorder);
    } else if (kv.first == "corrupt") {
      st = percent(&cfg.corrupt);
    } else if (kv.first == "delay_us") {
      cfg.delay_us = uint32_t(value);
    } else if (kv.first == "hold_op") {
      if (value > 255 || value != double(int(value)))
        return absl::InvalidArgumentError("hold_op is a BTH opcode (0-255)");
      cfg.hold_opcode = int16_t(value);
    } else if (kv.first == "seed") {
      cfg.seed = uint64_t(value);
    } else {
      return absl::InvalidArgumentError("unknown fault '" + kv.first +
                                        "' (loss, dup, reorder, corrupt, delay_us, hold_op, seed)");
    }
    if (!st.ok()) return st;
  }
  return cfg;
}

std::string FaultConfig::to_string() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "loss=%g,dup=%g,reorder=%g,corrupt=%g,delay_us=%u,seed=%llu",
                loss * 100, duplicate * 100, reorder * 100, corrupt * 100, delay_us,
                static_cast<unsigned long long>(seed));
  std::string text = buf;
  if (hold_opcode >= 0) text += ",hold_op=" + std::to_string(hold_opcode);
  return text;
}

}  // namespace vrnic
