#!/usr/bin/env bash
# perf/bench_loopback.sh: loopback benchmark of vrnic (one vrnicd; perftest server and client on
# this host, 127.0.0.1). Runs RUNS rounds (default 5); each round measures, in this order:
#   ib_write_bw -s 65536 -D 5          bandwidth (BW average)
#   ib_write_lat -s 2 -n 10000         t_typical (perftest's median) and 99% percentile
#   ib_send_lat -s 2 -n 10000          the same
#   memcpy_bw 65536                    memcpy bandwidth of the same size, one core
# and prints a summary of the medians over the rounds and the ratio of vrnic's write bandwidth
# to memcpy's. Logs and the summary go to perf/out/bench-<date>/.
# Installs missing packages (as root) and builds first, like perf/demo.sh.
#
# Usage: perf/bench_loopback.sh [RUNS]
# Environment:
#   BENCH_BW_ARGS     ib_write_bw options (default "-s 65536 -D 5"; e.g. "-s 65536 -n 20000")
#   BENCH_LAT_ITERS   iterations of each latency run (default 10000)
#   VRNIC_SKIP_SETUP=1  skip the package and build steps
# Units: GB/s = 1e9 bytes/s (perftest's MB/sec are MiB/s and are converted); latencies in us.

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg RUNS 5 "${1:-}" || exit 2
runs=$BENCH_COUNT
read -r -a bw_args <<<"${BENCH_BW_ARGS:--s 65536 -D 5}"
lat_iters=${BENCH_LAT_ITERS:-10000}
memcpy_size=65536

vrnic_tmp_init || exit 1

bench_setup || exit 1

memcpy_bw=$VRNIC_BUILD_DIR/perf/memcpy_bw
if [[ ! -x $memcpy_bw ]]; then
  # Not (yet) a meson target: build it here, with the project's optimization level.
  memcpy_bw=$VRNIC_TMP/memcpy_bw
  echo "memcpy_bw: not in the build tree; compiling perf/memcpy_bw.cpp (-O2)"
  c++ -std=c++20 -O2 -Wall -Wextra -o "$memcpy_bw" perf/memcpy_bw.cpp || exit 1
fi

bench_out_dir bench || exit 1
out=$BENCH_OUT

echo "== vrnic loopback benchmark: $runs rounds"
bench_system_info | tee "$out/system.txt"

start_vrnicd >"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
echo "vrnicd:   pid $VRNICD_PID, socket $VRNIC_SOCKET"
echo "logs:     $out/"
echo

bw=() wlat_t=() wlat_p99=() slat_t=() slat_p99=() mc=()
BENCH_ROUNDS=$runs
BENCH_STEPS=$((4 * runs))

for ((r = 1; r <= runs; r++)); do
  bench_bw "$r" write_bw bw ib_write_bw "${bw_args[@]}"
  bench_lat "$r" write_lat wlat_t wlat_p99 ib_write_lat -s 2 -n "$lat_iters"
  bench_lat "$r" send_lat slat_t slat_p99 ib_send_lat -s 2 -n "$lat_iters"
  # memcpy of the same size, in the same run
  log=$out/memcpy.$r.log
  if "$memcpy_bw" "$memcpy_size" >"$log" 2>&1 &&
    g=$(sed -n 's/^median_GBps=//p' "$log") && [[ -n $g ]]; then
    mc+=("$g")
    bench_progress "$r" "memcpy_bw $memcpy_size" "$g GB/s"
  else
    bench_progress "$r" "memcpy_bw $memcpy_size" ""
    bench_fail "$log"
  fi
done

vrnicd_check_alive >/dev/null || BENCH_FAILURES=$((BENCH_FAILURES + 1))
stop_vrnicd TERM >"$out/vrnicd-stop.log" 2>&1 || {
  BENCH_FAILURES=$((BENCH_FAILURES + 1))
  cat "$out/vrnicd-stop.log"
}

bw_med=$(bench_median "${bw[@]}")
mc_med=$(bench_median "${mc[@]}")
ratio=$(bench_ratio "$bw_med" "$mc_med")
ws=$(grep -m1 'L2 cache' "$out/memcpy.1.log" 2>/dev/null | sed 's/^memcpy_bw: //')

{
  echo "## vrnic loopback benchmark ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $runs rounds (GB/s = 1e9 bytes/s; latencies in microseconds)."
  echo "Commands: LD_LIBRARY_PATH=build/provider <cmd> -d vrnic0 -x 0 -F (server), same + 127.0.0.1 (client)."
  echo
  echo "| measurement | median | per round |"
  echo "|---|---|---|"
  echo "| ib_write_bw ${bw_args[*]} | $bw_med GB/s | ${bw[*]:-} |"
  echo "| ib_write_lat -s 2 -n $lat_iters, t_typical | $(bench_median "${wlat_t[@]}") us | ${wlat_t[*]:-} |"
  echo "| ib_write_lat -s 2 -n $lat_iters, 99% | $(bench_median "${wlat_p99[@]}") us | ${wlat_p99[*]:-} |"
  echo "| ib_send_lat -s 2 -n $lat_iters, t_typical | $(bench_median "${slat_t[@]}") us | ${slat_t[*]:-} |"
  echo "| ib_send_lat -s 2 -n $lat_iters, 99% | $(bench_median "${slat_p99[@]}") us | ${slat_p99[*]:-} |"
  echo "| memcpy $memcpy_size B, one core | $mc_med GB/s | ${mc[*]:-} |"
  echo "| ib_write_bw / memcpy | $ratio | |"
  echo
  echo "memcpy working set: source and destination 2 x $memcpy_size B each, like perftest's buffers; ${ws:-L2 size unknown}."
  ((BENCH_FAILURES)) && echo "FAILED runs: $BENCH_FAILURES (excluded from the medians; logs in $out/)."
} >"$out/summary.md"

echo
echo "== Summary"
cat "$out/summary.md"
echo
echo "(saved to $out/summary.md)"
((BENCH_FAILURES == 0))
