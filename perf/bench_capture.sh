#!/usr/bin/env bash
# perf/bench_capture.sh: what a packet capture costs (issue 33): ib_write_bw of 64 KiB on the
# loop port with no capture, and with `vrnicctl capture -w /dev/null` running (every frame
# built, ICRC and all, written into its ring and out through libpcap), in the same run,
# alternating; with BASELINE_BUILD=DIR also the same pair on another build's vrnicd and
# provider (the build before the capture tap, to show what the tap costs when off). Every
# configuration with VRNIC_DIRECT_PATH=0 (a capture turns the direct path off, so that
# capture on and off go through the same path). Medians over ROUNDS and ratios.
#
# Usage: perf/bench_capture.sh [ROUNDS]   (default 5; BENCH_SECONDS=4, BASELINE_BUILD=DIR,
#        VRNIC_SKIP_SETUP=1)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 5 "${1:-}" || exit 2
rounds=$BENCH_COUNT
secs=${BENCH_SECONDS:-4}
vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
bench_out_dir bench-capture || exit 1
out=$BENCH_OUT
bench_system_info | tee "$out/system.txt"
configs=(off on)
if [[ -n ${BASELINE_BUILD:-} ]]; then
  [[ -x $BASELINE_BUILD/control/vrnicd ]] || { echo "no vrnicd in $BASELINE_BUILD"; exit 1; }
  echo "baseline: $BASELINE_BUILD ($(git -C "$BASELINE_BUILD/.." rev-parse --short HEAD 2>/dev/null))" |
    tee -a "$out/system.txt"
  configs=(baseline off on)
fi
export VRNIC_DIRECT_PATH=0
main_vrnicd=$VRNICD main_vrun=("${VRUN[@]}")

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((rounds * ${#configs[@]}))
declare -A gbs
for ((r = 1; r <= rounds; r++)); do
  for c in "${configs[@]}"; do
    log=$out/$c.$r.log
    VRNICD=$main_vrnicd VRUN=("${main_vrun[@]}")
    if [[ $c == baseline ]]; then
      VRNICD=$BASELINE_BUILD/control/vrnicd
      VRUN=(env "LD_LIBRARY_PATH=$BASELINE_BUILD/provider")
    fi
    start_vrnicd >>"$log" 2>&1 || { bench_progress "$r" "$c" ""; bench_fail "$log"; continue; }
    cpid=
    if [[ $c == on ]]; then
      "$VRNICCTL" capture -w /dev/null >"$out/capture.$r.log" 2>&1 </dev/null &
      cpid=$!
      _vrnic_track "$cpid"
      wait_for 10 "the capture" grep -q capturing "$out/capture.$r.log" >>"$log"
    fi
    if bench_perftest "$log" "$c.$r" ib_write_bw -s 65536 -D "$secs"; then
      read -r _ _ v unit <<<"$ROW"
      g=$(bench_bw_gbs "$v" "$unit")
      gbs[$c]+="$g "
      extra=
      if [[ -n $cpid ]]; then
        kill -INT "$cpid"
        vrnic_wait_exit "$cpid" 10
        extra="  ($(grep -o '[0-9]* packets captured, [0-9]* dropped' "$out/capture.$r.log"))"
      fi
      bench_progress "$r" "capture $c" "$g GB/s$extra"
    else
      [[ -n $cpid ]] && kill -INT "$cpid"
      bench_progress "$r" "capture $c" ""
      bench_fail "$log"
    fi
    stop_vrnicd TERM >>"$log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))
  done
done

# shellcheck disable=SC2086 # space-separated on purpose
med() { bench_median ${gbs[$1]:-}; }
{
  echo "## Capture: ib_write_bw 64 KiB on the loop port, capture off and on ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Command: \`perf/bench_capture.sh $rounds\`${BASELINE_BUILD:+ with BASELINE_BUILD=<build of the commit before the tap>}"
  echo "(VRNIC_DIRECT_PATH=0 everywhere; -D $secs per run; medians of $rounds rounds, GB/s)."
  echo
  echo "| configuration | GB/s | ratio to capture off |"
  echo "|---|---|---|"
  for c in "${configs[@]}"; do
    echo "| $c | $(med "$c") | $(bench_ratio "$(med "$c")" "$(med off)") |"
  done
} | tee "$out/summary.md"
echo "failures: $BENCH_FAILURES"
((BENCH_FAILURES == 0))
