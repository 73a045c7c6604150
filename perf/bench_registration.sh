#!/usr/bin/env bash
# perf/bench_registration.sh: what a first registration costs (issue 53): perf/control_ops's
# ibv_reg_mr of a fresh buffer (its pages converted to shared ones, under the write fence
# since issue 53) of 4 KiB and of 1 MiB, 500 of each a round, median per round; with
# BASELINE_BUILD=DIR the same on another build's vrnicd and provider in the same rounds
# (the build before the fence), alternating. Medians over ROUNDS and ratios.
#
# Usage: perf/bench_registration.sh [ROUNDS]   (default 5; BASELINE_BUILD=DIR,
#        VRNIC_SKIP_SETUP=1)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 5 "${1:-}" || exit 2
rounds=$BENCH_COUNT
vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
bench_out_dir bench-registration || exit 1
out=$BENCH_OUT
bench_system_info | tee "$out/system.txt"
builds=(this)
if [[ -n ${BASELINE_BUILD:-} ]]; then
  [[ -x $BASELINE_BUILD/perf/control_ops ]] || { echo "no perf/control_ops in $BASELINE_BUILD"; exit 1; }
  echo "baseline: $BASELINE_BUILD ($(git -C "$BASELINE_BUILD/.." rev-parse --short HEAD 2>/dev/null))" |
    tee -a "$out/system.txt"
  builds=(baseline this)
fi
sizes=(4096 1048576)
main_vrnicd=$VRNICD main_vrnicctl=$VRNICCTL main_vrun=("${VRUN[@]}")
main_ops=$VRNIC_BUILD_DIR/perf/control_ops

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((rounds * ${#builds[@]} * ${#sizes[@]}))
declare -A us
for ((r = 1; r <= rounds; r++)); do
  for b in "${builds[@]}"; do
    VRNICD=$main_vrnicd VRNICCTL=$main_vrnicctl VRUN=("${main_vrun[@]}") ops=$main_ops
    if [[ $b == baseline ]]; then
      # (its own vrnicctl too: the control protocol may differ between the builds)
      VRNICD=$BASELINE_BUILD/control/vrnicd VRNICCTL=$BASELINE_BUILD/control/vrnicctl
      ops=$BASELINE_BUILD/perf/control_ops
      VRUN=(env "LD_LIBRARY_PATH=$BASELINE_BUILD/provider")
    fi
    log=$out/$b.$r.log
    start_vrnicd >>"$log" 2>&1 || { bench_fail "$log"; continue; }
    for size in "${sizes[@]}"; do
      if vrun timeout -k 5 300 "$ops" 500 "$size" >>"$log.$size" 2>&1; then
        v=$(awk '$1 == "ibv_reg_mr_fresh" { sub("median_us=", "", $2); print $2 }' "$log.$size" | tail -n 1)
        us[$b.$size]+="$v "
        bench_progress "$r" "$b: ibv_reg_mr of a fresh $size bytes" "$v us"
      else
        bench_progress "$r" "$b: ibv_reg_mr of a fresh $size bytes" ""
        bench_fail "$log.$size"
      fi
    done
    stop_vrnicd TERM >>"$log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))
  done
done

# shellcheck disable=SC2086 # space-separated on purpose
med() { bench_median ${us[$1]:-}; }
{
  echo "## A first registration, with the write fence and before it ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Command: \`perf/bench_registration.sh $rounds\`${BASELINE_BUILD:+ with BASELINE_BUILD=<build of the commit before>}"
  echo "(ibv_reg_mr of a fresh, touched buffer: 500 a round; medians of the rounds' medians, us)."
  echo
  header="| buffer"
  for b in "${builds[@]}"; do header+=" | $b"; done
  echo "$header | ratio |"
  echo "|---|$(printf -- '---|%.0s' "${builds[@]}")---|"
  for size in "${sizes[@]}"; do
    row="| $size bytes"
    for b in "${builds[@]}"; do row+=" | $(med "$b.$size")"; done
    if [[ ${#builds[@]} == 2 ]]; then
      row+=" | $(bench_ratio "$(med "this.$size")" "$(med "baseline.$size")")"
    else
      row+=" | -"
    fi
    echo "$row |"
  done
} | tee "$out/summary.md"
echo "failures: $BENCH_FAILURES"
((BENCH_FAILURES == 0))
