// What each user may hold in vrnicd, and what each holds now: connections, completion
// channels (an fd each in vrnicd), MRs, QPs and registered bytes. A kernel driver has the
// process's RLIMIT_MEMLOCK and fd limit to stop one user from taking the NIC's memory and
// descriptors from everyone else; vrnicd serves every process of the host from one address
// space and one fd table, so it keeps the account itself (issue 17, rows 8 and 9).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace vrnic {

// Quotas per user (uid), summed over the user's sessions. Set with
// --limits KEY=VALUE[,KEY=VALUE...]; 0 for mr_bytes means the machine's RAM.
struct UserLimits {
  uint32_t sessions = 1024;  // connections to the socket (vrnicctl's count too)
  uint32_t channels = 4096;
  uint32_t mrs = 1u << 20;
  uint32_t qps = 1u << 16;
  uint64_t mr_bytes = 0;

  static absl::StatusOr<UserLimits> parse(const std::string &spec);
  std::string to_string() const;
};

enum class Quota { kSessions, kChannels, kMrs, kQps, kMrBytes };

struct UserUsage {
  uint64_t sessions = 0;
  uint64_t channels = 0;
  uint64_t mrs = 0;
  uint64_t qps = 0;
  uint64_t mr_bytes = 0;
  uint64_t refusals = 0;  // requests refused for a quota
};

class UserQuotas {
 public:
  explicit UserQuotas(UserLimits limits);
  const UserLimits &limits() const { return limits_; }
  // Takes `amount` of `what` for `uid`; ENOMEM (as a kernel driver past RLIMIT_MEMLOCK or out
  // of objects) when that would go past the limit, which is then counted as a refusal.
  int charge(uid_t uid, Quota what, uint64_t amount = 1);
  void release(uid_t uid, Quota what, uint64_t amount = 1);
  UserUsage usage(uid_t uid) const;

 private:
  static uint64_t &used(UserUsage &u, Quota what);
  uint64_t limit(Quota what) const;
  UserLimits limits_;
  std::map<uid_t, UserUsage> users_;  // users with anything charged (or refused)
};

}  // namespace vrnic
