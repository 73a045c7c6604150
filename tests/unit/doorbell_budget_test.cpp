// DoorbellBudget (dataplane/doorbell_budget.h): one budget per user per look, however many
// sessions the user has; a rotating start; slots of users gone reused (issue 28, row 12).
#include <catch2/catch.hpp>

#include <set>

#include "dataplane/doorbell_budget.h"

using vrnic::DoorbellBudget;

TEST_CASE("doorbells: a user's sessions share one budget per look, other users keep theirs",
          "[doorbells]") {
  DoorbellBudget b;
  std::vector<uint32_t> attacker;
  for (int i = 0; i < 169; i++) attacker.push_back(b.join(1000));
  const uint32_t victim = b.join(1001);
  CHECK(std::set<uint32_t>(attacker.begin(), attacker.end()).size() == 1);
  CHECK(victim != attacker[0]);
  b.new_look(170);
  uint32_t taken = 0;
  for (uint32_t s : attacker)
    while (b.take(s)) taken++;
  CHECK(taken == DoorbellBudget::kCellsPerLook);  // as one session would get, not 169 times it
  CHECK(b.take(victim));
  CHECK(b.most_taken() == 0);  // the look is not over
  b.new_look(170);
  CHECK(b.most_taken() == DoorbellBudget::kCellsPerLook);  // what vrnicctl stats reports
  CHECK(b.take(attacker[168]));  // a new look: whole again
}

TEST_CASE("doorbells: each look starts one session further; a gone user's slot is reused",
          "[doorbells]") {
  DoorbellBudget b;
  CHECK(b.new_look(0) == 0);
  std::set<uint32_t> starts;
  for (int i = 0; i < 3; i++) starts.insert(b.new_look(3));
  CHECK(starts == std::set<uint32_t>{0, 1, 2});
  const uint32_t a = b.join(1), c = b.join(2);
  b.leave(a);
  CHECK(b.join(3) == a);  // user 1 has no session left: its slot goes to user 3
  CHECK(b.join(2) == c);
}
