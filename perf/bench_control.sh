#!/usr/bin/env bash
# perf/bench_control.sh: what the verbs control path costs, and what it costs others (issue
# 29). On one vrnicd (loop port), in every round: perf/control_ops (2000 of each call: the
# median and 99th percentile of ibv_reg_mr, ibv_dereg_mr, ibv_create_cq, ibv_destroy_cq,
# ibv_create_qp + INIT, ibv_destroy_qp); then `ib_write_bw -s 65536 -D SECS` alone, and again
# while a second process runs control_ops over and over: the ratio of the two is what the
# control calls take from a stream of writes. Medians over ROUNDS.
#
# Usage: perf/bench_control.sh [ROUNDS]   (default 3; BENCH_SECONDS=4, VRNIC_SKIP_SETUP=1)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
secs=${BENCH_SECONDS:-4}
vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
bench_out_dir bench-control || exit 1
out=$BENCH_OUT
bench_system_info | tee "$out/system.txt"
start_vrnicd >"$out/vrnicd.log" 2>&1 || { cat "$out/vrnicd.log"; exit 1; }
control_ops=$VRNIC_BUILD_DIR/perf/control_ops

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((3 * rounds))
declare -A median p99
alone=() busy=()
calls=(ibv_reg_mr ibv_dereg_mr ibv_create_cq ibv_destroy_cq ibv_create_qp+INIT ibv_destroy_qp)
bw_of() { read -r _ _ v unit <<<"$ROW"; bench_bw_gbs "$v" "$unit"; }
for ((r = 1; r <= rounds; r++)); do
  log=$out/control_ops.$r.log
  if vrun timeout -k 5 120 "$control_ops" 2000 >"$log" 2>&1; then
    for c in "${calls[@]}"; do
      median[$c]+="$(awk -v c="$c" '$1 == c { sub("median_us=", "", $2); print $2 }' "$log") "
      p99[$c]+="$(awk -v c="$c" '$1 == c { sub("p99_us=", "", $3); print $3 }' "$log") "
    done
    bench_progress "$r" "control_ops 2000" "$(awk '$1 == "ibv_reg_mr" { print $2 }' "$log")"
  else
    bench_progress "$r" "control_ops 2000" ""
    bench_fail "$log"
  fi
  if bench_perftest "$out/bw_alone.$r.log" "alone.$r" ib_write_bw -s 65536 -D "$secs" && [[ $ROW == bw* ]]; then
    alone+=("$(bw_of)")
    bench_progress "$r" "ib_write_bw -s 65536, alone" "${alone[-1]} GB/s"
  else
    bench_progress "$r" "ib_write_bw -s 65536, alone" ""
    bench_fail "$out/bw_alone.$r.log"
  fi
  # The second process: control_ops again and again until the stream is over.
  (while :; do vrun "$control_ops" 200 >/dev/null 2>&1 || break; done) &
  churn=$!
  if bench_perftest "$out/bw_busy.$r.log" "busy.$r" ib_write_bw -s 65536 -D "$secs" && [[ $ROW == bw* ]]; then
    busy+=("$(bw_of)")
    bench_progress "$r" "ib_write_bw -s 65536, control_ops beside it" "${busy[-1]} GB/s"
  else
    bench_progress "$r" "ib_write_bw -s 65536, control_ops beside it" ""
    bench_fail "$out/bw_busy.$r.log"
  fi
  kill "$churn" 2>/dev/null
  wait "$churn" 2>/dev/null
done
stop_vrnicd TERM >>"$out/vrnicd.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))

# shellcheck disable=SC2086 # space-separated on purpose
{
  echo "## vrnic control calls, one vrnicd, loop port ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds of \`perf/control_ops 2000\` (us), and of \`ib_write_bw -s 65536"
  echo "-D $secs\` alone and beside a process running control_ops in a loop."
  echo
  echo "| call | median us | 99th percentile us |"
  echo "|---|---|---|"
  for c in "${calls[@]}"; do
    echo "| $c | $(bench_median_fmt %.1f ${median[$c]:-}) | $(bench_median_fmt %.1f ${p99[$c]:-}) |"
  done
  a=$(bench_median "${alone[@]}") b=$(bench_median "${busy[@]}")
  echo
  echo "| ib_write_bw -s 65536 | GB/s |"
  echo "|---|---|"
  echo "| alone | $a |"
  echo "| control_ops beside it | $b |"
  echo "| ratio | $(bench_ratio "$b" "$a") |"
} | tee "$out/summary.md"
vrnic_cleanup
echo "failures: $BENCH_FAILURES; summary: $out/summary.md"
((BENCH_FAILURES == 0))
