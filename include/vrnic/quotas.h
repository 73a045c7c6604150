// What a user's quota account in vrnicd counts: one row per kind of thing a client can make
// vrnicd hold for it, with the name that `vrnicd --limits` takes and `vrnicctl stats` prints
// (user_<name>, limit_<name>) and its default limit. One table for vrnicd and vrnicctl.
#pragma once

#include <cstdint>

namespace vrnic {

enum class Quota : uint32_t {
  kSessions,  // connections to vrnicd's socket (vrnicctl's too)
  kChannels,  // completion channels and rdma_cm event channels: an fd each in vrnicd
  kPds,
  kMrs,
  kMws,
  kCqs,
  kQps,
  kSrqs,
  kAhs,
  kCmIds,     // rdma_cm ids, those a listener's requests make included
  kMappings,  // vrnicd's mappings for the user: session page, CQ, QP and SRQ rings, MR pieces
  kMcast,     // multicast attachments (a QP to a group): the device's groups are everyone's
  kFds,       // descriptors vrnicd keeps for the user: sessions', channels', DMs', ring arenas'
  kMrBytes,   // registered bytes, as RLIMIT_MEMLOCK counts pinned memory (device memory too)
};
inline constexpr uint32_t kQuotaCount = uint32_t(Quota::kMrBytes) + 1;

struct QuotaKind {
  const char *name;
  // 0: a share of what the machine gives vrnicd (UserQuotas): mr_bytes the RAM, mappings and
  // fds a quarter of vm.max_map_count and of vrnicd's RLIMIT_NOFILE, past vrnicd's own.
  uint64_t default_limit;
};

// A shared vrnicd's tables are everyone's: by default one user may take a quarter of each
// (Device::capacity is four times these), so that no user fills one alone (issue 52, row 8).
inline constexpr QuotaKind kQuotaKinds[kQuotaCount] = {
    {"sessions", 1024}, {"channels", 4096},   {"pds", 1u << 16}, {"mrs", 1u << 20},
    {"mws", 1u << 16},  {"cqs", 1u << 16},    {"qps", 1u << 16}, {"srqs", 1u << 16},
    {"ahs", 1u << 16},  {"cm_ids", 1u << 16}, {"mappings", 0},   {"mcast", 1024},
    {"fds", 0},         {"mr_bytes", 0},
};

}  // namespace vrnic
