#!/usr/bin/env bash
# perf/bench_direct_lat.sh: perftest's server and client, two processes of one user on one
# vrnicd (loopback), with the same-host direct path (the default) and without it
# (VRNIC_DIRECT_PATH=0), the two alternating in each round. Each round measures:
#   ib_write_lat, ib_read_lat, ib_send_lat -s SIZE -n ITERS   SIZE in 2 64 4096 65536:
#                                                             t_typical (median) and 99%
#   ib_atomic_lat -n ITERS                                    (8 bytes)
#   ib_write_bw -s 64 -n 200000, 1 QP and -q 16               messages/s
#   ib_write_bw -s 65536 -n 20000                             next to a memcpy of 64 KiB
# SENDs take the worker path either way (the direct path runs WRITE, READ and atomics): they
# are the control. Prints the medians over the rounds; writes perf/direct_lat.csv and, with
# gnuplot, perf/direct_lat.png (latency percentiles against size, direct against worker).
# Logs go to perf/out/direct-lat-<date>/.
#
# Usage: perf/bench_direct_lat.sh [ROUNDS]     (default 3)
# Environment: BENCH_LAT_ITERS (default 10000), VRNIC_SKIP_SETUP=1 (no package/build step).

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
iters=${BENCH_LAT_ITERS:-10000}
sizes=(2 64 4096 65536)
modes=(direct worker)

vrnic_tmp_init || exit 1
bench_setup || exit 1
command -v gnuplot >/dev/null ||
  vrnic_install_packages gnuplot-nox || echo "note: no gnuplot; writing the CSV only"
bench_out_dir direct-lat || exit 1
out=$BENCH_OUT
memcpy_bw=$VRNIC_BUILD_DIR/perf/memcpy_bw

echo "== same-host direct path against the worker path, perftest: $rounds rounds"
bench_system_info | tee "$out/system.txt"
start_vrnicd >"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
echo "vrnicd: pid $VRNICD_PID; logs: $out/"

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((rounds * (2 * (3 * ${#sizes[@]} + 1 + 3) + 1)))
declare -A lat_t lat_p rate

# with_mode MODE CMD...: CMD with the direct path on (direct) or off (worker).
with_mode() {
  local mode=$1
  shift
  if [[ $mode == worker ]]; then VRNIC_DIRECT_PATH=0 "$@"; else "$@"; fi
}

for ((r = 1; r <= rounds; r++)); do
  for mode in "${modes[@]}"; do
    for prog in ib_write_lat ib_read_lat ib_send_lat; do
      for s in "${sizes[@]}"; do
        got_t=() got_p=()
        with_mode "$mode" bench_lat "$r" "$mode-$prog-$s" got_t got_p "$prog" -s "$s" -n "$iters"
        lat_t[$mode,$prog,$s]+="${got_t[*]:-} " lat_p[$mode,$prog,$s]+="${got_p[*]:-} "
      done
    done
    got_t=() got_p=()
    with_mode "$mode" bench_lat "$r" "$mode-ib_atomic_lat" got_t got_p ib_atomic_lat -n "$iters"
    lat_t[$mode,ib_atomic_lat,8]+="${got_t[*]:-} " lat_p[$mode,ib_atomic_lat,8]+="${got_p[*]:-} "
    for q in 1 16; do
      got_g=()
      with_mode "$mode" bench_bw "$r" "$mode-bw64-q$q" got_g ib_write_bw -s 64 -q "$q" -n 200000
      # messages/s from GB/s: 64-byte messages
      [[ -n ${got_g[*]:-} ]] &&
        rate[$mode,64,$q]+="$(awk -v g="${got_g[0]}" 'BEGIN { printf "%.0f", g * 1e9 / 64 }') "
    done
    got_g=()
    with_mode "$mode" bench_bw "$r" "$mode-bw64k" got_g ib_write_bw -s 65536 -n 20000
    rate[$mode,65536,1]+="${got_g[*]:-} "
  done
  log=$out/memcpy.$r.log
  if "$memcpy_bw" 65536 >"$log" 2>&1 && g=$(sed -n 's/^median_GBps=//p' "$log") && [[ -n $g ]]; then
    rate[memcpy]+="$g "
    bench_progress "$r" "memcpy_bw 65536" "$g GB/s"
  else
    bench_progress "$r" "memcpy_bw 65536" ""
    bench_fail "$log"
  fi
done
stop_vrnicd TERM >"$out/vrnicd-stop.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))

# shellcheck disable=SC2086 # word lists
med() { bench_median $1; }
csv=perf/direct_lat.csv
{
  echo "op,size,direct_typical_us,direct_p99_us,worker_typical_us,worker_p99_us"
  for prog in ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
    list=("${sizes[@]}")
    [[ $prog == ib_atomic_lat ]] && list=(8)
    for s in "${list[@]}"; do
      echo "${prog%_lat},$s,$(med "${lat_t[direct,$prog,$s]}"),$(med "${lat_p[direct,$prog,$s]}"),$(med "${lat_t[worker,$prog,$s]}"),$(med "${lat_p[worker,$prog,$s]}")"
    done
  done
} >"$csv"
mc=$(med "${rate[memcpy]:-}")
{
  echo "## perftest between two processes: direct path against worker path ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds, the two paths alternating in each; latencies in us (perftest's"
  echo "t_typical and 99%), from $csv:"
  echo
  echo '```'
  column -t -s, "$csv"
  echo '```'
  echo
  echo "| ib_write_bw | direct | worker | direct / worker |"
  echo "|---|---|---|---|"
  for q in 1 16; do
    d=$(bench_median_fmt '%.0f' ${rate[direct,64,$q]:-}) w=$(bench_median_fmt '%.0f' ${rate[worker,64,$q]:-})
    echo "| -s 64 -q $q, msgs/s | $d | $w | $(bench_ratio "$d" "$w") |"
  done
  d=$(med "${rate[direct,65536,1]:-}") w=$(med "${rate[worker,65536,1]:-}")
  echo "| -s 65536, GB/s | $d | $w | $(bench_ratio "$d" "$w") |"
  echo "| -s 65536 against memcpy of 64 KiB ($mc GB/s) | $(bench_ratio "$d" "$mc") | $(bench_ratio "$w" "$mc") | |"
  ((BENCH_FAILURES)) && echo "FAILED runs: $BENCH_FAILURES (excluded; logs in $out/)."
} >"$out/summary.md"
if command -v gnuplot >/dev/null; then
  gnuplot -e "csv='$csv'; png='perf/direct_lat.png'" perf/plot_direct_lat.gp ||
    echo "gnuplot failed: no plot"
fi
echo
cat "$out/summary.md"
((BENCH_FAILURES == 0))
