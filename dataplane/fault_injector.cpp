// Fault injection on a port's receive path: loss, reordering, duplication, corruption and
// delay, from a --faults spec (fault_injector.h).
#include "fault_injector.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "vrnic/cm_wire.h"
#include "vrnic/wire.h"
#include "absl/strings/str_split.h"

namespace vrnic {

void FaultInjector::configure(const FaultConfig &cfg) {
  cfg_ = cfg;
  rng_.seed(cfg.seed);
}

bool FaultInjector::maybe_corrupt(uint8_t *frame, uint32_t len) {
  if (!len || !roll(cfg_.corrupt, counters_.corrupted)) return false;
  uint64_t bit = rng_() % (uint64_t(len) * 8);
  frame[bit / 8] ^= uint8_t(1u << (bit % 8));
  return true;
}

bool FaultInjector::drop_mad(const uint8_t *pkt, uint32_t len) {
  using namespace wire;
  constexpr size_t kMadAt = Bth::kSize + Deth::kSize;  // a UD SEND_ONLY to QP1
  if (cfg_.drop_mad_attr < 0 || len < kMadAt + cm::kMadHeaderBytes) return false;
  const uint8_t *mad = pkt + kMadAt;
  if (reinterpret_cast<const Bth *>(pkt)->dest_qp() != cm::kGsiQpn || mad[1] != cm::kMgmtClassCm ||
      load_be16(mad + cm::kMadAttrOffset) != cfg_.drop_mad_attr)
    return false;
  const uint64_t tid = load_be64(mad + cm::kMadTidOffset);
  for (size_t i = 0; i < std::min(mad_tids_seen_, mad_tids_.size()); i++)
    if (mad_tids_[i] == tid) return false;  // a copy sent again: it passes
  mad_tids_[mad_tids_seen_++ % mad_tids_.size()] = tid;
  counters_.dropped++;
  return true;
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
    } else if (kv.first == "drop_mad") {
      if (value > 0xffff || value != double(int(value)))
        return absl::InvalidArgumentError("drop_mad is a CM attribute ID (0-65535)");
      cfg.drop_mad_attr = int32_t(value);
    } else if (kv.first == "seed") {
      cfg.seed = uint64_t(value);
    } else {
      return absl::InvalidArgumentError(
          "unknown fault '" + kv.first +
          "' (loss, dup, reorder, corrupt, delay_us, hold_op, drop_mad, seed)");
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
  if (drop_mad_attr >= 0) text += ",drop_mad=" + std::to_string(drop_mad_attr);
  return text;
}

}  // namespace vrnic
