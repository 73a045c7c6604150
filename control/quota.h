// What each user may hold in vrnicd, and what each holds now (the kinds: vrnic/quotas.h). A
// kernel driver has the process's RLIMIT_MEMLOCK, its fd limit and the kernel's own memory
// accounting to stop one user from taking the NIC's memory, descriptors and objects from
// everyone else; vrnicd serves every process of the host from one address space, one fd
// table and one set of object tables, so it keeps the account itself (issue 17, rows 8 and 9;
// issue 28, rows 5, 7 and 9).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "vrnic/quotas.h"

namespace vrnic {

// Quotas per user (uid), summed over the user's sessions. Set with
// --limits KEY=VALUE[,KEY=VALUE...]; 0 for mr_bytes means the machine's RAM.
struct UserLimits {
  std::array<uint64_t, kQuotaCount> max;

  UserLimits();
  uint64_t operator[](Quota q) const { return max[uint32_t(q)]; }
  static absl::StatusOr<UserLimits> parse(const std::string &spec);
  std::string to_string() const;
};

// What one session's objects hold of their payers' accounts, by payer. An object is paid by
// the user whose connection made it: nearly always the session's own, but an imported
// context's connection (ibv_import_device) pays with its own user's account for what it makes
// in the session it speaks for, as a kernel charges pinned memory to the caller's mm, never
// the exporter's (issue 52). Each object keeps its payer for its own release; what a closing
// session still holds goes back in one call per payer (a million MRs: no walk over them).
class QuotaLedger {
 public:
  void add(uid_t payer, Quota what, uint64_t amount);
  void remove(uid_t payer, Quota what, uint64_t amount);
  template <typename Fn>  // fn(uid, kind, amount) for each nonzero entry
  void for_each(Fn &&fn) const {
    for (const auto &[uid, held] : payers_)
      for (uint32_t i = 0; i < kQuotaCount; i++)
        if (held[i]) fn(uid, Quota(i), held[i]);
  }
  void clear() { payers_.clear(); }

 private:
  std::vector<std::pair<uid_t, std::array<uint64_t, kQuotaCount>>> payers_;  // usually one
};

struct UserUsage {
  std::array<uint64_t, kQuotaCount> used{};
  uint64_t refusals = 0;  // requests refused for a quota
  uint64_t operator[](Quota q) const { return used[uint32_t(q)]; }
};

class UserQuotas {
 public:
  explicit UserQuotas(UserLimits limits);
  const UserLimits &limits() const { return limits_; }
  // Takes `amount` of `what` for `uid`; ENOMEM (as a kernel driver past RLIMIT_MEMLOCK or out
  // of objects) when that would go past the user's limit, or for mappings and descriptors
  // past what the whole device may hold, which is then counted as a refusal.
  int charge(uid_t uid, Quota what, uint64_t amount = 1);
  void release(uid_t uid, Quota what, uint64_t amount = 1);
  // The same for an object of a session, also taken out of its ledger (QuotaCharge enters it).
  void release(QuotaLedger &ledger, uid_t payer, Quota what, uint64_t amount = 1);
  // Everything a closing session's objects still held, given back.
  void release_all(QuotaLedger &ledger);
  UserUsage usage(uid_t uid) const;

 private:
  UserLimits limits_;
  uint64_t device_mappings_ = 0;      // every user's together
  uint64_t device_mapping_limit_;     // below vm.max_map_count, with room for vrnicd's own
  uint64_t device_fds_ = 0;           // likewise descriptors, below RLIMIT_NOFILE
  uint64_t device_fd_limit_;
  std::map<uid_t, UserUsage> users_;  // users with anything charged (or refused)
};

// A charge that is given back unless the object it pays for was made: every early return of
// a create path releases it, and keep() hands it to the object once it exists (and enters it
// in the session's ledger, for a charge made with one).
class QuotaCharge {
 public:
  QuotaCharge(UserQuotas &quotas, uid_t uid, Quota what, uint64_t amount = 1)
      : quotas_(quotas), uid_(uid), what_(what), amount_(amount),
        status_(quotas.charge(uid, what, amount)) {}
  QuotaCharge(UserQuotas &quotas, QuotaLedger &ledger, uid_t payer, Quota what,
              uint64_t amount = 1)
      : QuotaCharge(quotas, payer, what, amount) {
    ledger_ = &ledger;
  }
  QuotaCharge(const QuotaCharge &) = delete;
  QuotaCharge &operator=(const QuotaCharge &) = delete;
  ~QuotaCharge() {
    if (!status_ && !kept_) quotas_.release(uid_, what_, amount_);
  }
  int status() const { return status_; }  // 0, or ENOMEM: nothing was charged
  void keep() {
    if (kept_ || status_) return;
    kept_ = true;
    if (ledger_) ledger_->add(uid_, what_, amount_);
  }

 private:
  UserQuotas &quotas_;
  QuotaLedger *ledger_ = nullptr;
  uid_t uid_;
  Quota what_;
  uint64_t amount_;
  int status_;
  bool kept_ = false;
};

}  // namespace vrnic
