#!/usr/bin/env bash
# perf/bench_ucx.sh: what UCX adds on top of verbs, through vrnic (issue 18). One root vrnicd
# (UCX needs its /dev/infiniband node), servers and clients on 127.0.0.1; RUNS rounds
# (default 5), each measuring in this order:
#   ib_write_bw -s 65536 -D 5                    verbs bandwidth (BW average)
#   ucx_perftest -t ucp_put_bw -s 65536 -n N     UCP put bandwidth (overall), UCX_TLS=rc_verbs,ud_verbs
#   ib_write_lat -s 2 -n 10000                   verbs latency (t_typical, half round trip)
#   ucx_perftest -t tag_lat -s 8 -n 10000        UCP tag-matching latency (median, half round trip)
# and prints the medians and the ratios put_bw / ib_write_bw and tag_lat / ib_write_lat.
# Logs and the summary go to perf/out/ucx-<date>/.
#
# Usage: perf/bench_ucx.sh [RUNS]      (as root)
# Environment: BENCH_PUT_ITERS (default 50000), BENCH_LAT_ITERS (default 10000),
#   VRNIC_SKIP_SETUP=1 skips the package and build steps.
# Units: GB/s = 1e9 bytes/s (perftest's and UCX's MB/s are MiB/s and are converted).

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg RUNS 5 "${1:-}" || exit 2
runs=$BENCH_COUNT
put_iters=${BENCH_PUT_ITERS:-50000}
lat_iters=${BENCH_LAT_ITERS:-10000}
((EUID == 0)) || { echo "bench_ucx.sh: run as root (UCX opens /dev/infiniband/<dev>)"; exit 1; }

vrnic_tmp_init || exit 1
bench_setup || exit 1
command -v ucx_perftest >/dev/null || vrnic_install_packages ucx-utils || exit 1
bench_out_dir ucx || exit 1
out=$BENCH_OUT

echo "== UCX over vrnic against verbs: $runs rounds"
{
  bench_system_info
  echo "ucx:      $(dpkg-query -W -f='${Version}' ucx-utils 2>/dev/null)"
} | tee "$out/system.txt"
start_vrnicd >"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
echo "vrnicd:   pid $VRNICD_PID, socket $VRNIC_SOCKET"
echo "logs:     $out/"
echo

# ucx ROUND NAME ARRAY FIELD SCALE ARGS...: one ucx_perftest pair; appends field FIELD of its
# Final line times SCALE to the array named ARRAY.
ucx() {
  local round=$1 name=$2 field=$4 scale=$5 v
  local -n vals=$3
  shift 5
  local log=$out/$name.$round
  if ucx_perftest_pair "$log" rc_verbs,ud_verbs "$@" >"$log.log" 2>&1; then
    v=$(awk -v f="$field" -v s="$scale" '{ printf "%.2f\n", $f * s }' <<<"$UCX_FINAL")
    vals+=("$v")
    bench_progress "$round" "ucx_perftest $*" "$v"
  else
    bench_progress "$round" "ucx_perftest $*" ""
    bench_fail "$log.log"
  fi
}

wbw=() put=() wlat=() wlat99=() tlat=()
BENCH_ROUNDS=$runs
BENCH_STEPS=$((4 * runs))
mib_to_gb=$(awk 'BEGIN { printf "%.9f", 1048576 / 1e9 }')
for ((r = 1; r <= runs; r++)); do
  bench_bw "$r" write_bw wbw ib_write_bw -s 65536 -D 5
  # Final: iterations, overhead 50%/avg/overall (us), bandwidth avg/overall (MiB/s), rates
  ucx "$r" put_bw put 7 "$mib_to_gb" -t ucp_put_bw -s 65536 -n "$put_iters"
  bench_lat "$r" write_lat wlat wlat99 ib_write_lat -s 2 -n "$lat_iters"
  ucx "$r" tag_lat tlat 3 1 -t tag_lat -s 8 -n "$lat_iters"
done
vrnicd_idle_and_stop >"$out/vrnicd-stop.log" 2>&1 || {
  BENCH_FAILURES=$((BENCH_FAILURES + 1))
  cat "$out/vrnicd-stop.log"
}

wbw_m=$(bench_median "${wbw[@]}") put_m=$(bench_median "${put[@]}")
wlat_m=$(bench_median "${wlat[@]}") tlat_m=$(bench_median "${tlat[@]}")
{
  echo "## UCX over vrnic against verbs ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $runs rounds, one root vrnicd, everything on 127.0.0.1. UCX runs with"
  echo "UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=vrnic0:1; perftest with -d vrnic0 -x 0 -F."
  echo "GB/s = 1e9 bytes/s; latencies are half round trips, in microseconds."
  echo
  echo "| measurement | median | per round |"
  echo "|---|---|---|"
  echo "| ib_write_bw -s 65536 -D 5 | $wbw_m GB/s | ${wbw[*]:-} |"
  echo "| ucx_perftest -t ucp_put_bw -s 65536 -n $put_iters (overall) | $put_m GB/s | ${put[*]:-} |"
  echo "| ucp_put_bw / ib_write_bw | $(bench_ratio "$put_m" "$wbw_m") | |"
  echo "| ib_write_lat -s 2 -n $lat_iters, t_typical | $wlat_m us | ${wlat[*]:-} |"
  echo "| ib_write_lat -s 2 -n $lat_iters, 99% | $(bench_median "${wlat99[@]}") us | ${wlat99[*]:-} |"
  echo "| ucx_perftest -t tag_lat -s 8 -n $lat_iters, median | $tlat_m us | ${tlat[*]:-} |"
  echo "| tag_lat / ib_write_lat | $(bench_ratio "$tlat_m" "$wlat_m") | |"
  ((BENCH_FAILURES)) && echo "FAILED runs: $BENCH_FAILURES (excluded from the medians; logs in $out/)."
} >"$out/summary.md"

echo
echo "== Summary"
cat "$out/summary.md"
echo
echo "(saved to $out/summary.md)"
((BENCH_FAILURES == 0))
