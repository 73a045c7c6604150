// Which QP to move between workers when their loads are uneven (load_balance.h).
#include "load_balance.h"

#include <algorithm>

namespace vrnic {

std::optional<QpMove> choose_move(const std::vector<QpLoad> &qps, uint32_t workers) {
  if (workers < 2) return std::nullopt;
  std::vector<uint64_t> load(workers, 0);
  for (const QpLoad &q : qps)
    if (q.worker < workers) load[q.worker] += q.packets;
  uint32_t busy = uint32_t(std::max_element(load.begin(), load.end()) - load.begin());
  uint32_t idle = uint32_t(std::min_element(load.begin(), load.end()) - load.begin());
  uint64_t gap = load[busy] - load[idle];
  if (gap < kMinGapPackets || load[busy] < 2 * load[idle]) return std::nullopt;
  auto miss = [&](const QpLoad &q) {
    return q.packets > gap / 2 ? q.packets - gap / 2 : gap / 2 - q.packets;
  };
  const QpLoad *best = nullptr;
  for (const QpLoad &q : qps) {
    if (q.worker != busy || !q.packets || q.packets >= gap) continue;
    if (!best || miss(q) < miss(*best)) best = &q;
  }
  if (!best) return std::nullopt;
  return QpMove{best->qpn, busy, idle, load[busy], load[idle]};
}

}  // namespace vrnic
