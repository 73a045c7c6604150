#!/usr/bin/env bash
# perf/bench_qp_scale.sh: throughput and set-up cost against the number of RC QPs (issue 29),
# with perf/qp_scale on one vrnicd (loop port): for N QPs in pairs, 4 KiB WRITEs, K=2
# outstanding on each, all active, random order; and N-2 idle with 1 pair active. The baseline,
# in every round: one pair with 64 WRs outstanding on each QP (what one QP can do). Each run's
# memcpy over its own working set normalises it: the figure compared across N is the run's
# ratio to memcpy over the baseline's. Medians over ROUNDS; CSV and a plot in
# perf/out/bench-qp-scale-<date>/ (qp_scale.csv, qp_scale.png).
#
# ACROSS=udp: the same across two vrnicd over the udp port (127.0.0.1 and 127.0.0.2), each run
# two qp_scale processes (-L / -C), half the QPs on each daemon, both ends active; a run's
# messages/s and ratio to memcpy are the two processes' summed, its set-up times the
# listener's.
#
# Usage: perf/bench_qp_scale.sh [ROUNDS]   (default 3; QP_COUNTS="2 64 1024 4096 16384 65536",
#        BENCH_SECONDS=2, ACROSS=udp, VRNIC_SKIP_SETUP=1)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
secs=${BENCH_SECONDS:-2}
read -r -a counts <<<"${QP_COUNTS:-2 64 1024 4096 16384 65536}"
vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
command -v gnuplot >/dev/null ||
  vrnic_install_packages gnuplot-nox || echo "note: no gnuplot; writing the CSV only"
bench_out_dir bench-qp-scale || exit 1
out=$BENCH_OUT
bench_system_info | tee "$out/system.txt"
qp_scale=$VRNIC_BUILD_DIR/perf/qp_scale
across=${ACROSS:-}
where="one vrnicd, loop port"
if [[ $across == udp ]]; then
  where="two vrnicd, udp port"
  # shellcheck source=tests/lib_hosts.sh
  source tests/lib_hosts.sh
  udp_port=$(free_udp_port) || exit 1
  host_vrnicd u1 - --udp 127.0.0.1 --udp-port "$udp_port" >"$out/vrnicd.log" 2>&1 &&
    host_vrnicd u2 - --udp 127.0.0.2 --udp-port "$udp_port" >>"$out/vrnicd.log" 2>&1 ||
    { cat "$out/vrnicd.log"; exit 1; }
elif [[ -n $across ]]; then
  echo "ACROSS is udp or nothing" >&2
  exit 2
else
  start_vrnicd >"$out/vrnicd.log" 2>&1 || { cat "$out/vrnicd.log"; exit 1; }
fi
# scale_run LOG ARGS...: one run; its CSV row (write,...) is the last line of LOG.
scale_run() {
  local log=$1 port p1 rc=0
  shift
  if [[ $across != udp ]]; then
    vrun timeout -k 5 300 "$qp_scale" "$@" -H >"$log" 2>&1
    return
  fi
  port=$(next_port)
  VRNIC_SOCKET=${SOCK[u1]} "${VRUN[@]}" timeout -k 5 300 "$qp_scale" "$@" -H -L "$port" \
    >"$log.1" 2>&1 </dev/null &
  p1=$!
  VRNIC_SOCKET=${SOCK[u2]} "${VRUN[@]}" timeout -k 5 300 "$qp_scale" "$@" -H \
    -C "127.0.0.1:$port" >"$log.2" 2>&1 </dev/null || rc=1
  wait "$p1" || rc=1
  cat "$log.1" "$log.2" >"$log"
  ((rc == 0)) || return 1
  # Both processes' messages and ratios summed, into the listener's row.
  paste -d, <(grep -E '^write,' "$log.1" | tail -n 1) <(grep -E '^write,' "$log.2" | tail -n 1) |
    awk -F, -v OFS=, '{ n = NF / 2; $10 += $(n + 10); $11 += $(n + 11); $13 += $(n + 13);
                       $15 += $(n + 15); NF = n; print }' >>"$log"
}

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((rounds * (2 * ${#counts[@]} + 1)))
echo "round,mode,op,qps,active,outstanding,size,order,create_s,connect_s,destroy_s,msgs_per_s,gbps,memcpy_gbps,ratio_to_memcpy,rss_bytes_per_qp,completions,bad_bytes" \
  >"$out/runs.csv"
declare -A ratio msgs create connect destroy
for ((r = 1; r <= rounds; r++)); do
  for n in base "${counts[@]}"; do
    for mode in all one; do
      [[ $n == base && $mode == one ]] && continue
      q=$n active=$n k=2
      [[ $n == base ]] && q=2 active=2 k=64
      [[ $mode == one ]] && active=2
      log=$out/q$n.$mode.$r.log
      if scale_run "$log" -q "$q" -a "$active" -k "$k" -s 4096 -t "$secs" -r; then
        row=$(grep -E '^write,' "$log" | tail -n 1)
        echo "$r,$mode,$row" >>"$out/runs.csv"
        IFS=, read -r _ _ _ _ _ _ c_s k_s d_s m _ _ ratio_v _ <<<"$row"
        ratio[$n.$mode]+="$ratio_v "
        msgs[$n.$mode]+="$m "
        if [[ $mode == all ]]; then create[$n]+="$c_s " connect[$n]+="$k_s " destroy[$n]+="$d_s "; fi
        bench_progress "$r" "qp_scale -q $q -a $active -k $k" "$m msgs/s, ratio to memcpy $ratio_v"
      else
        bench_progress "$r" "qp_scale -q $q -a $active -k $k" ""
        bench_fail "$log"
      fi
    done
  done
done
if [[ $across == udp ]]; then
  stop_hosts >>"$out/vrnicd.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))
else
  stop_vrnicd TERM >>"$out/vrnicd.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))
fi

# shellcheck disable=SC2086 # space-separated on purpose
med() { bench_median_fmt "$1" ${2:-}; }
base=$(med %.4f "${ratio[base.all]:-}") base_msgs=$(med %.0f "${msgs[base.all]:-}")
over() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "n/a") printf "%.3f", a / b }'; }
{
  echo "qps,all_msgs_per_s,all_msgs_vs_pair,all_ratio_to_memcpy,all_normalised_vs_pair,one_msgs_per_s,one_msgs_vs_pair,one_normalised_vs_pair,create_s,connect_s,destroy_s"
  for n in "${counts[@]}"; do
    am=$(med %.0f "${msgs[$n.all]:-}") om=$(med %.0f "${msgs[$n.one]:-}")
    a=$(med %.4f "${ratio[$n.all]:-}") o=$(med %.4f "${ratio[$n.one]:-}")
    echo "$n,$am,$(over "$am" "$base_msgs"),$a,$(over "$a" "$base"),$om,$(over "$om" "$base_msgs"),$(over "$o" "$base"),$(med %.3f "${create[$n]:-}"),$(med %.3f "${connect[$n]:-}"),$(med %.3f "${destroy[$n]:-}")"
  done
} >"$out/qp_scale.csv"
if command -v gnuplot >/dev/null; then
  gnuplot -e "csv='$out/qp_scale.csv'; png='$out/qp_scale.png'; where='$where'" perf/plot_qp_scale.gp ||
    echo "gnuplot failed (the CSV is there)"
fi
{
  echo "## vrnic QP scaling, $where ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds: \`perf/qp_scale -q N [-a 2] -k 2 -s 4096 -t $secs -r\` (4 KiB"
  echo "RDMA WRITEs, 2 outstanding per active QP, random order) against one pair with 64"
  echo "outstanding on each QP (\`-q 2 -k 64\`: $base_msgs msgs/s, ratio to memcpy $base): as"
  echo "measured, and normalised (each run's ratio to memcpy over its own working set, which"
  echo "leaves the caches as N grows)."
  echo
  echo "| QPs | all active: msgs/s | vs one pair | ratio to memcpy | normalised vs one pair | 2 active: msgs/s | vs one pair | normalised | create s | connect s | destroy s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  tail -n +2 "$out/qp_scale.csv" |
    awk -F, '{ printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; print "" }'
} | tee "$out/summary.md"
vrnic_cleanup
echo "failures: $BENCH_FAILURES; summary: $out/summary.md; plot: $out/qp_scale.png"
((BENCH_FAILURES == 0))
