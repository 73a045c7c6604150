// How much of one look at the doorbell rings each user gets (issue 28, row 12). A worker
// reads its doorbell ring in every session's shared memory; the cells are client memory, so a
// client can fill its rings with forged rings at will. Each look is bounded per user, not per
// session: a user's sessions share one budget, so a user with 169 sessions of forged rings
// gets no more of the worker than a user with one (per session, such a user raised another
// user's ping-pong from 5 us to 8 ms). And the look starts one session further each time,
// so none of a user's sessions is always the one left when the budget is spent.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace vrnic {

class DoorbellBudget {
 public:
  // Cells one user's sessions may take in one look together: a QP rings once until it is
  // served (doorbell_pending), so a user with more QPs ringing at once is served over several
  // looks, a few microseconds apart.
  static constexpr uint32_t kCellsPerLook = 1024;

  // A session of `uid` comes or goes; join gives the user's slot, which its sessions keep.
  uint32_t join(uid_t uid) {
    for (uint32_t i = 0; i < users_.size(); i++) {
      if (users_[i].uid == uid) {
        users_[i].sessions++;
        return i;
      }
    }
    for (uint32_t i = 0; i < users_.size(); i++) {
      if (users_[i].sessions == 0) {  // a user gone: its slot is reused
        users_[i] = {uid, 1, kCellsPerLook};
        return i;
      }
    }
    users_.push_back({uid, 1, kCellsPerLook});
    return uint32_t(users_.size() - 1);
  }
  void leave(uint32_t user) { users_[user].sessions--; }

  // A new look: every user's budget is whole again; returns where the look starts among
  // `sessions` rings (0 when there are none).
  uint32_t new_look(uint32_t sessions) {
    // Counted by uid, not by slot, so that the count holds the budget to what it promises
    // whatever join() does: slots that took nothing cost nothing here.
    uint32_t most = most_taken_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < users_.size(); i++) {
      if (users_[i].left == kCellsPerLook) continue;
      uint32_t by_uid = 0;
      for (const User &u : users_)
        if (u.uid == users_[i].uid) by_uid += kCellsPerLook - u.left;
      most = std::max(most, by_uid);
    }
    for (User &u : users_) u.left = kCellsPerLook;
    most_taken_.store(most, std::memory_order_relaxed);
    return sessions ? start_++ % sessions : 0;
  }
  // The most cells one user took in one look, of the looks finished so far (vrnicctl stats:
  // doorbell_user_look_max), read by the control thread while the worker runs. What the
  // hostile group's check holds the budget to: it never exceeds kCellsPerLook, however many
  // sessions the user forges in.
  uint32_t most_taken() const { return most_taken_.load(std::memory_order_relaxed); }
  // One cell for `user`: false when its budget for this look is spent.
  bool take(uint32_t user) {
    if (!users_[user].left) return false;
    users_[user].left--;
    return true;
  }

 private:
  struct User {
    uid_t uid;
    uint32_t sessions;
    uint32_t left;
  };
  std::vector<User> users_;
  uint32_t start_ = 0;
  std::atomic<uint32_t> most_taken_{0};
};

}  // namespace vrnic
