#!/usr/bin/env bash
# perf/bench_odp.sh: on-demand paging against registered memory (issue 32), one loop-port
# vrnicd, perftest server and client on this host. Each of RUNS rounds (default 3) measures
#   ib_write_bw -s 65536 -D 5                 pinned memory: the same-host direct path
#   ib_write_bw -s 65536 -D 5 --odp           ODP: vrnicd's workers through /proc/<pid>/mem
#   the same two with VRNIC_DIRECT_PATH=0     pinned memory on the worker path, and ODP again
# and prints the medians and the ratios of ODP to each. Logs and the summary go to
# perf/out/odp-<date>/.
#
# Usage: perf/bench_odp.sh [RUNS]
# Environment: VRNIC_SKIP_SETUP=1 skips the package and build steps.
# Units: GB/s = 1e9 bytes/s.

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg RUNS 3 "${1:-}" || exit 2
runs=$BENCH_COUNT
vrnic_tmp_init || exit 1
bench_setup || exit 1
bench_out_dir odp || exit 1
out=$BENCH_OUT

echo "== ODP against pinned memory: $runs rounds"
bench_system_info | tee "$out/system.txt"
start_vrnicd >"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
echo "logs:     $out/"
echo

pinned=() odp=() pinned_worker=() odp_worker=()
BENCH_ROUNDS=$runs
BENCH_STEPS=$((4 * runs))
args=(-s 65536 -D 5)
for ((r = 1; r <= runs; r++)); do
  bench_bw "$r" pinned pinned ib_write_bw "${args[@]}"
  bench_bw "$r" odp odp ib_write_bw "${args[@]}" --odp
  VRNIC_DIRECT_PATH=0 bench_bw "$r" pinned_worker pinned_worker ib_write_bw "${args[@]}"
  VRNIC_DIRECT_PATH=0 bench_bw "$r" odp_worker odp_worker ib_write_bw "${args[@]}" --odp
done

vrnicd_check_alive >/dev/null || BENCH_FAILURES=$((BENCH_FAILURES + 1))
stop_vrnicd TERM >"$out/vrnicd-stop.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))

p=$(bench_median "${pinned[@]}") o=$(bench_median "${odp[@]}")
pw=$(bench_median "${pinned_worker[@]}") ow=$(bench_median "${odp_worker[@]}")
{
  echo "## ODP against pinned memory ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $runs rounds (GB/s = 1e9 bytes/s). Command: perf/bench_odp.sh $runs"
  echo
  echo "| ib_write_bw ${args[*]} | median | per round |"
  echo "|---|---|---|"
  echo "| pinned (direct path) | $p GB/s | ${pinned[*]:-} |"
  echo "| --odp | $o GB/s | ${odp[*]:-} |"
  echo "| pinned, VRNIC_DIRECT_PATH=0 | $pw GB/s | ${pinned_worker[*]:-} |"
  echo "| --odp, VRNIC_DIRECT_PATH=0 | $ow GB/s | ${odp_worker[*]:-} |"
  echo "| ODP / pinned | $(bench_ratio "$o" "$p") | |"
  echo "| ODP / pinned, both on the worker path | $(bench_ratio "$ow" "$pw") | |"
  ((BENCH_FAILURES)) && echo "FAILED runs: $BENCH_FAILURES (excluded from the medians; logs in $out/)."
} >"$out/summary.md"
echo
echo "== Summary"
cat "$out/summary.md"
((BENCH_FAILURES == 0))
