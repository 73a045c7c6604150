// Per-user quotas in vrnicd (quota.h): parsing --limits, charging and releasing.
#include "quota.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace vrnic {
namespace {

// The kernel's limit on one process's mappings (vm.max_map_count), which bounds vrnicd's.
uint64_t max_map_count() {
  uint64_t n = 65530;  // the kernel's default
  if (FILE *f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    unsigned long long v;
    if (std::fscanf(f, "%llu", &v) == 1) n = v;
    std::fclose(f);
  }
  return n;
}

}  // namespace

UserLimits::UserLimits() {
  for (uint32_t i = 0; i < kQuotaCount; i++) max[i] = kQuotaKinds[i].default_limit;
}

absl::StatusOr<UserLimits> UserLimits::parse(const std::string &spec) {
  UserLimits l;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    uint64_t v;
    if (!absl::SimpleAtoi(kv.second, &v))
      return absl::InvalidArgumentError("limit '" + std::string(item) + "': want name=number");
    uint32_t i = 0;
    while (i < kQuotaCount && kv.first != kQuotaKinds[i].name) i++;
    if (i == kQuotaCount) {
      std::string names;
      for (const QuotaKind &k : kQuotaKinds) names += std::string(names.empty() ? "" : ", ") + k.name;
      return absl::InvalidArgumentError("unknown limit '" + kv.first + "' (" + names + ")");
    }
    // Counts are of objects; 0 for mr_bytes keeps its meaning (the machine's RAM).
    if (Quota(i) != Quota::kMrBytes && (v == 0 || v > std::numeric_limits<uint32_t>::max()))
      return absl::InvalidArgumentError(kv.first + " must be between 1 and 4294967295");
    l.max[i] = v;
  }
  return l;
}

std::string UserLimits::to_string() const {
  std::string s;
  for (uint32_t i = 0; i < kQuotaCount; i++)
    s += std::string(i ? "," : "") + kQuotaKinds[i].name + "=" + std::to_string(max[i]);
  return s;
}

UserQuotas::UserQuotas(UserLimits limits) : limits_(limits) {
  uint64_t &bytes = limits_.max[uint32_t(Quota::kMrBytes)];
  if (!bytes) bytes = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
  // An eighth (at least 4096) stays vrnicd's: its libraries, threads, heap and sanitizer
  // mappings. Past the kernel's limit every mmap fails, every user's open with it.
  const uint64_t map_max = max_map_count();
  const uint64_t reserve = std::max<uint64_t>(4096, map_max / 8);
  device_mapping_limit_ = map_max > reserve ? map_max - reserve : 0;
}

int UserQuotas::charge(uid_t uid, Quota what, uint64_t amount) {
  UserUsage &u = users_[uid];
  uint64_t &n = u.used[uint32_t(what)];
  const uint64_t limit = limits_[what];
  bool refused = amount > limit || n > limit - amount;
  if (what == Quota::kMappings)
    refused = refused || device_mappings_ + amount > device_mapping_limit_;
  if (refused) {
    u.refusals++;
    return ENOMEM;
  }
  n += amount;
  if (what == Quota::kMappings) device_mappings_ += amount;
  return 0;
}

void UserQuotas::release(uid_t uid, Quota what, uint64_t amount) {
  auto it = users_.find(uid);
  if (it == users_.end()) return;
  it->second.used[uint32_t(what)] -= amount;
  if (what == Quota::kMappings) device_mappings_ -= amount;
}

UserUsage UserQuotas::usage(uid_t uid) const {
  auto it = users_.find(uid);
  return it == users_.end() ? UserUsage{} : it->second;
}

}  // namespace vrnic
