// Per-user quotas (control/quota.h): --limits parsing, charges that stop at the limit and are
// given back, QuotaCharge's release on every path that does not keep it, and the device-wide
// bound on mappings (issue 28, rows 5, 7 and 9).
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdio>

#include "control/quota.h"

using vrnic::Quota;
using vrnic::QuotaCharge;
using vrnic::QuotaLedger;
using vrnic::UserLimits;
using vrnic::UserQuotas;

TEST_CASE("quota: --limits takes every kind by its name, refuses unknown names and zero counts",
          "[quota]") {
  auto l = UserLimits::parse("pds=3,cm_ids=7,mappings=9,mr_bytes=0");
  REQUIRE(l.ok());
  CHECK((*l)[Quota::kPds] == 3);
  CHECK((*l)[Quota::kCmIds] == 7);
  CHECK((*l)[Quota::kMappings] == 9);
  CHECK((*l)[Quota::kQps] == vrnic::kQuotaKinds[uint32_t(Quota::kQps)].default_limit);
  CHECK(UserLimits::parse(l->to_string()).ok());
  CHECK(!UserLimits::parse("pdz=3").ok());
  CHECK(!UserLimits::parse("pds=0").ok());
  CHECK(!UserLimits::parse("pds=x").ok());
  CHECK(!UserLimits::parse("cqs=4294967296").ok());
}

TEST_CASE("quota: ENOMEM at a user's limit, counted; other users and kinds unaffected; released",
          "[quota]") {
  UserQuotas q(*UserLimits::parse("cqs=2,ahs=1"));
  CHECK(q.charge(1000, Quota::kCqs) == 0);
  CHECK(q.charge(1000, Quota::kCqs) == 0);
  CHECK(q.charge(1000, Quota::kCqs) == ENOMEM);
  CHECK(q.charge(1000, Quota::kCqs, 1ull << 40) == ENOMEM);  // no wrap past the limit
  CHECK(q.usage(1000).refusals == 2);
  CHECK(q.usage(1000)[Quota::kCqs] == 2);
  CHECK(q.charge(1001, Quota::kCqs) == 0);  // another user's account
  CHECK(q.charge(1000, Quota::kAhs) == 0);
  q.release(1000, Quota::kCqs);
  CHECK(q.charge(1000, Quota::kCqs) == 0);
  CHECK(q.usage(1000)[Quota::kCqs] == 2);
}

TEST_CASE("quota: a QuotaCharge not kept is given back; a kept one stays; a refused one took nothing",
          "[quota]") {
  UserQuotas q(*UserLimits::parse("srqs=1"));
  {
    QuotaCharge c(q, 7, Quota::kSrqs);
    CHECK(c.status() == 0);
    CHECK(q.usage(7)[Quota::kSrqs] == 1);
  }  // an early return: nothing was made
  CHECK(q.usage(7)[Quota::kSrqs] == 0);
  {
    QuotaCharge c(q, 7, Quota::kSrqs);
    c.keep();
  }
  CHECK(q.usage(7)[Quota::kSrqs] == 1);
  {
    QuotaCharge refused(q, 7, Quota::kSrqs);
    CHECK(refused.status() == ENOMEM);
  }
  CHECK(q.usage(7)[Quota::kSrqs] == 1);  // the refused charge released nothing
}

TEST_CASE("quota: mappings of all users together stay below vm.max_map_count", "[quota]") {
  // Each user may hold more than the whole device: the device-wide bound refuses first.
  UserQuotas q(*UserLimits::parse("mappings=4294967295"));
  uint64_t held = 0;
  for (uid_t uid = 1; q.charge(uid, Quota::kMappings, 4096) == 0; uid++) held += 4096;
  unsigned long long map_max = 65530;
  if (FILE *f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    CHECK(std::fscanf(f, "%llu", &map_max) == 1);
    std::fclose(f);
  }
  CHECK(held > 0);
  CHECK(held + 4096 <= map_max);  // room kept for vrnicd's own mappings
  q.release(1, Quota::kMappings, 4096);
  CHECK(q.charge(99999, Quota::kMappings, 4096) == 0);
}

TEST_CASE("quota: by default a user may take a quarter of vrnicd's mappings and descriptors",
          "[quota]") {
  UserQuotas q{UserLimits{}};
  rlimit nofile{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &nofile) == 0);
  const uint64_t fds = q.limits()[Quota::kFds], maps = q.limits()[Quota::kMappings];
  CHECK(fds > 0);
  CHECK(fds * 4 <= nofile.rlim_cur);  // four users together cannot take them all
  CHECK(maps > 0);
  // Four users' default shares fit in what the device may map; a fifth is refused.
  for (uid_t uid = 1; uid <= 4; uid++) CHECK(q.charge(uid, Quota::kMappings, maps) == 0);
  CHECK(q.charge(5, Quota::kMappings, maps) == ENOMEM);
  // "0" asks for the machine's share again; other counts may not be 0.
  CHECK(UserLimits::parse("fds=0,mappings=0").ok());
  CHECK(!UserLimits::parse("qps=0").ok());
}

TEST_CASE("quota: a session's ledger gives each payer back what it paid, object by object or "
          "all at once (issue 52: an importer pays for what it makes)",
          "[quota]") {
  UserQuotas q(*UserLimits::parse("pds=3,mr_bytes=1000"));
  QuotaLedger ledger;
  {
    QuotaCharge owner(q, ledger, 1000, Quota::kPds), importer(q, ledger, 2000, Quota::kPds, 3);
    QuotaCharge bytes(q, ledger, 2000, Quota::kMrBytes, 600);
    CHECK(owner.status() == 0);
    CHECK(importer.status() == 0);
    owner.keep();
    importer.keep();
    bytes.keep();
  }
  CHECK(q.usage(1000)[Quota::kPds] == 1);
  CHECK(q.usage(2000)[Quota::kPds] == 3);  // the importer's own quota: full
  {
    QuotaCharge more(q, ledger, 2000, Quota::kPds);
    CHECK(more.status() == ENOMEM);
    more.keep();  // (refused: nothing to keep, nothing entered)
  }
  q.release(ledger, 2000, Quota::kPds);  // one object goes, to its payer
  CHECK(q.usage(2000)[Quota::kPds] == 2);
  q.release_all(ledger);  // the session closes
  CHECK(q.usage(1000)[Quota::kPds] == 0);
  CHECK(q.usage(2000)[Quota::kPds] == 0);
  CHECK(q.usage(2000)[Quota::kMrBytes] == 0);
  q.release_all(ledger);  // nothing twice
  CHECK(q.usage(1000)[Quota::kPds] == 0);
}
