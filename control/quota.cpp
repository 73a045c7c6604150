// Per-user quotas in vrnicd (quota.h): parsing --limits, charging and releasing.
#include "quota.h"

#include <sys/resource.h>
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
    // Counts are of objects; 0 keeps its meaning where it is the default (a share of what
    // the machine gives: mr_bytes, mappings, fds).
    const bool share = kQuotaKinds[i].default_limit == 0;
    if ((v == 0 && !share) || (Quota(i) != Quota::kMrBytes && v > std::numeric_limits<uint32_t>::max()))
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
  // A user's share by default: a quarter, of mappings and of descriptors alike (an eighth of
  // the descriptors, at least 256, stays vrnicd's: ports, workers, metrics, its libraries).
  uint64_t &maps = limits_.max[uint32_t(Quota::kMappings)];
  if (!maps) maps = std::max<uint64_t>(1, device_mapping_limit_ / 4);
  rlimit nofile{};
  const uint64_t fd_max = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 ? nofile.rlim_cur : 1024;
  const uint64_t fd_reserve = std::max<uint64_t>(256, fd_max / 8);
  device_fd_limit_ = fd_max > fd_reserve ? fd_max - fd_reserve : 0;
  uint64_t &fds = limits_.max[uint32_t(Quota::kFds)];
  if (!fds) fds = std::max<uint64_t>(16, device_fd_limit_ / 4);
}

int UserQuotas::charge(uid_t uid, Quota what, uint64_t amount) {
  UserUsage &u = users_[uid];
  uint64_t &n = u.used[uint32_t(what)];
  const uint64_t limit = limits_[what];
  bool refused = amount > limit || n > limit - amount;
  if (what == Quota::kMappings)
    refused = refused || device_mappings_ + amount > device_mapping_limit_;
  if (what == Quota::kFds) refused = refused || device_fds_ + amount > device_fd_limit_;
  if (refused) {
    u.refusals++;
    return ENOMEM;
  }
  n += amount;
  if (what == Quota::kMappings) device_mappings_ += amount;
  if (what == Quota::kFds) device_fds_ += amount;
  return 0;
}

void UserQuotas::release(uid_t uid, Quota what, uint64_t amount) {
  auto it = users_.find(uid);
  if (it == users_.end()) return;
  it->second.used[uint32_t(what)] -= amount;
  if (what == Quota::kMappings) device_mappings_ -= amount;
  if (what == Quota::kFds) device_fds_ -= amount;
}

void UserQuotas::release(QuotaLedger &ledger, uid_t payer, Quota what, uint64_t amount) {
  ledger.remove(payer, what, amount);
  release(payer, what, amount);
}

void UserQuotas::release_all(QuotaLedger &ledger) {
  ledger.for_each([&](uid_t uid, Quota what, uint64_t amount) { release(uid, what, amount); });
  ledger.clear();
}

void QuotaLedger::add(uid_t payer, Quota what, uint64_t amount) {
  auto it = std::find_if(payers_.begin(), payers_.end(),
                         [&](const auto &p) { return p.first == payer; });
  if (it == payers_.end()) it = payers_.insert(payers_.end(), {payer, {}});
  it->second[uint32_t(what)] += amount;
}

void QuotaLedger::remove(uid_t payer, Quota what, uint64_t amount) {
  for (auto &[uid, held] : payers_)
    if (uid == payer) held[uint32_t(what)] -= amount;
}

UserUsage UserQuotas::usage(uid_t uid) const {
  auto it = users_.find(uid);
  return it == users_.end() ? UserUsage{} : it->second;
}

}  // namespace vrnic
