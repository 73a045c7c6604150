#!/usr/bin/env bash
# perf/bench_direct.sh: the same-host direct path against the worker path (issue 30), in the
# same run, alternating: perf/qp_scale with one pair of RC QPs in one process (the case the
# direct path takes today), RDMA WRITEs of 64 B to 1 MiB, 1 WR outstanding per QP (each waits
# for its completion) and 64 (a deep queue), with VRNIC_DIRECT_PATH=1 and =0. Medians over
# ROUNDS of messages/s and of the ratio to a memcpy over the same buffers (qp_scale measures
# it in each run). CSV and a plot in perf/out/bench-direct-<date>/ (direct.csv, direct.png).
#
# Usage: perf/bench_direct.sh [ROUNDS]   (default 3; SIZES="64 4096 65536 1048576",
#        BENCH_SECONDS=1, VRNIC_SKIP_SETUP=1)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
secs=${BENCH_SECONDS:-1}
read -r -a sizes <<<"${SIZES:-64 4096 65536 1048576}"
depths=(1 64)
vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
command -v gnuplot >/dev/null ||
  vrnic_install_packages gnuplot-nox || echo "note: no gnuplot; writing the CSV only"
bench_out_dir bench-direct || exit 1
out=$BENCH_OUT
bench_system_info | tee "$out/system.txt"
start_vrnicd >"$out/vrnicd.log" 2>&1 || { cat "$out/vrnicd.log"; exit 1; }
qp_scale=$VRNIC_BUILD_DIR/perf/qp_scale

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((rounds * ${#sizes[@]} * ${#depths[@]} * 2))
declare -A msgs ratio
for ((r = 1; r <= rounds; r++)); do
  for s in "${sizes[@]}"; do
    for k in "${depths[@]}"; do
      for d in 1 0; do
        log=$out/s$s.k$k.d$d.$r.log
        if vrun env VRNIC_DIRECT_PATH=$d timeout -k 5 120 "$qp_scale" -q 2 -k "$k" -s "$s" \
          -t "$secs" -H >"$log" 2>&1 </dev/null; then
          IFS=, read -r _ _ _ _ _ _ _ _ _ m _ _ ratio_v _ <<<"$(grep -E '^write,' "$log" | tail -n 1)"
          msgs[$s.$k.$d]+="$m " ratio[$s.$k.$d]+="$ratio_v "
          bench_progress "$r" "-s $s -k $k direct=$d" "$m msgs/s, ratio to memcpy $ratio_v"
        else
          bench_progress "$r" "-s $s -k $k direct=$d" ""
          bench_fail "$log"
        fi
      done
    done
  done
done
stop_vrnicd TERM >>"$out/vrnicd.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))

# shellcheck disable=SC2086 # space-separated on purpose
med() { bench_median_fmt "$1" ${2:-}; }
over() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "n/a") printf "%.2f", a / b }'; }
{
  echo "size,k1_direct_msgs,k1_worker_msgs,k1_speedup,k1_direct_ratio,k1_worker_ratio,k64_direct_msgs,k64_worker_msgs,k64_speedup,k64_direct_ratio,k64_worker_ratio"
  for s in "${sizes[@]}"; do
    row=$s
    for k in "${depths[@]}"; do
      dm=$(med %.0f "${msgs[$s.$k.1]:-}") wm=$(med %.0f "${msgs[$s.$k.0]:-}")
      row+=",$dm,$wm,$(over "$dm" "$wm"),$(med %.4f "${ratio[$s.$k.1]:-}"),$(med %.4f "${ratio[$s.$k.0]:-}")"
    done
    echo "$row"
  done
} >"$out/direct.csv"
if command -v gnuplot >/dev/null; then
  gnuplot -e "csv='$out/direct.csv'; png='$out/direct.png'" perf/plot_direct.gp ||
    echo "gnuplot failed (the CSV is there)"
fi
{
  echo "## vrnic direct path against the worker path, one pair in one process ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds of \`perf/qp_scale -q 2 -k K -s SIZE -t $secs\` with"
  echo "VRNIC_DIRECT_PATH=1 and =0 alternating; ratio: to memcpy over the same buffers, same run."
  echo
  echo "| size | k=1 direct msgs/s | k=1 worker msgs/s | direct / worker | k=1 direct vs memcpy | k=1 worker vs memcpy | k=64 direct msgs/s | k=64 worker msgs/s | direct / worker | k=64 direct vs memcpy | k=64 worker vs memcpy |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  tail -n +2 "$out/direct.csv" | sed 's/,/ | /g; s/^/| /; s/$/ |/'
  echo
  echo "failures: $BENCH_FAILURES"
} >"$out/summary.md"
cat "$out/summary.md"
echo "summary: ${out#"$VRNIC_ROOT"/}/summary.md; plot: ${out#"$VRNIC_ROOT"/}/direct.png"
((BENCH_FAILURES == 0))
