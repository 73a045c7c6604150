// Per-user quotas in vrnicd (quota.h): parsing --limits, charging and releasing.
#include "quota.h"

#include <unistd.h>

#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace vrnic {

absl::StatusOr<UserLimits> UserLimits::parse(const std::string &spec) {
  UserLimits l;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    uint64_t v;
    if (!absl::SimpleAtoi(kv.second, &v))
      return absl::InvalidArgumentError("limit '" + std::string(item) + "': want name=number");
    auto count = [&](uint32_t *out) -> absl::Status {
      if (v == 0 || v > std::numeric_limits<uint32_t>::max())
        return absl::InvalidArgumentError(kv.first + " must be between 1 and 4294967295");
      *out = uint32_t(v);
      return absl::OkStatus();
    };
    absl::Status st;
    if (kv.first == "sessions") {
      st = count(&l.sessions);
    } else if (kv.first == "channels") {
      st = count(&l.channels);
    } else if (kv.first == "mrs") {
      st = count(&l.mrs);
    } else if (kv.first == "qps") {
      st = count(&l.qps);
    } else if (kv.first == "mr_bytes") {
      l.mr_bytes = v;
    } else {
      return absl::InvalidArgumentError("unknown limit '" + kv.first +
                                        "' (sessions, channels, mrs, qps, mr_bytes)");
    }
    if (!st.ok()) return st;
  }
  return l;
}

std::string UserLimits::to_string() const {
  return "sessions=" + std::to_string(sessions) + ",channels=" + std::to_string(channels) +
         ",mrs=" + std::to_string(mrs) + ",qps=" + std::to_string(qps) +
         ",mr_bytes=" + std::to_string(mr_bytes);
}

UserQuotas::UserQuotas(UserLimits limits) : limits_(limits) {
  if (!limits_.mr_bytes)
    limits_.mr_bytes = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
}

uint64_t &UserQuotas::used(UserUsage &u, Quota what) {
  switch (what) {
    case Quota::kSessions:
      return u.sessions;
    case Quota::kChannels:
      return u.channels;
    case Quota::kMrs:
      return u.mrs;
    case Quota::kQps:
      return u.qps;
    case Quota::kMrBytes:
      break;
  }
  return u.mr_bytes;
}

uint64_t UserQuotas::limit(Quota what) const {
  switch (what) {
    case Quota::kSessions:
      return limits_.sessions;
    case Quota::kChannels:
      return limits_.channels;
    case Quota::kMrs:
      return limits_.mrs;
    case Quota::kQps:
      return limits_.qps;
    case Quota::kMrBytes:
      break;
  }
  return limits_.mr_bytes;
}

int UserQuotas::charge(uid_t uid, Quota what, uint64_t amount) {
  UserUsage &u = users_[uid];
  uint64_t &n = used(u, what);
  if (amount > limit(what) || n > limit(what) - amount) {
    u.refusals++;
    return ENOMEM;
  }
  n += amount;
  return 0;
}

void UserQuotas::release(uid_t uid, Quota what, uint64_t amount) {
  auto it = users_.find(uid);
  if (it != users_.end()) used(it->second, what) -= amount;
}

UserUsage UserQuotas::usage(uid_t uid) const {
  auto it = users_.find(uid);
  return it == users_.end() ? UserUsage{} : it->second;
}

}  // namespace vrnic
