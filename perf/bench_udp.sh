#!/usr/bin/env bash
# perf/bench_udp.sh: vrnic's udp port against the kernel's own UDP on loopback (issue 4,
# "Performance"). Two vrnicd, `--udp 127.0.0.1` and `--udp 127.0.0.2` on a private UDP port;
# perftest servers use the first, clients the second (VRNIC_SOCKET), so every packet crosses
# kernel UDP. Runs ROUNDS rounds (default 3); each round measures, in this order:
#   ib_write_bw -s 65536 -D 5          bandwidth (BW average), client 127.0.0.2 -> 127.0.0.1
#   ib_write_lat -s 2 -n 5000          t_typical (perftest's median) and 99% percentile
#   udp_bw plain                       kernel UDP, 4136-byte datagrams, sendmmsg/recvmmsg
#   udp_bw gso                         the same with UDP_SEGMENT + UDP_GRO
# (udp_bw: perf/udp_bw.cpp; each of its figures is itself the median of its --runs runs), then
# prints the medians over the rounds, the ratio of vrnic's write bandwidth to each UDP
# baseline (the issue's target: at least 70% of plain), and both vrnicd's counters
# (`vrnicctl stats`) after the run. Logs and summary.md go to perf/out/bench-udp-<date>/.
# Installs missing packages (as root) and builds first, like perf/demo.sh.
#
# Usage: perf/bench_udp.sh [ROUNDS]
# Environment:
#   BENCH_BW_ARGS     ib_write_bw options (default "-s 65536 -D 5")
#   BENCH_LAT_ITERS   iterations of each latency run (default 5000)
#   BENCH_UDP_ARGS    udp_bw options (default "--runs 3 --seconds 3"; see perf/udp_bw.cpp)
#   VRNIC_SKIP_SETUP=1  skip the package and build steps
# Units: GB/s = 1e9 bytes/s (perftest's MB/sec are MiB/s and are converted); latencies in us.
# vrnic's figure counts RDMA payload, udp_bw's counts UDP payload (the RoCE headers and ICRC
# of a 4096-byte packet are ~1% of it), so the ratios slightly favour the kernel.

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
read -r -a bw_args <<<"${BENCH_BW_ARGS:--s 65536 -D 5}"
lat_iters=${BENCH_LAT_ITERS:-5000}
read -r -a udp_args <<<"${BENCH_UDP_ARGS:---runs 3 --seconds 3}"
target=0.70

vrnic_tmp_init || exit 1
bench_setup || exit 1

udp_bw=$VRNIC_BUILD_DIR/perf/udp_bw
if [[ ! -x $udp_bw ]]; then
  udp_bw=$VRNIC_TMP/udp_bw
  echo "udp_bw: not in the build tree; compiling perf/udp_bw.cpp (-O2)"
  c++ -std=c++20 -O2 -Wall -Wextra -pthread -o "$udp_bw" perf/udp_bw.cpp || exit 1
fi

bench_out_dir bench-udp || exit 1
out=$BENCH_OUT

bench_udp_pair_header "vrnic udp-port benchmark: $rounds rounds"
bench_start_udp_pair || exit 1
echo "server:   vrnicd pid $VRNICD_PID on 127.0.0.1, socket $VRNIC_SOCKET"
echo "client:   vrnicd pid $PEER_PID on 127.0.0.2, socket $PEER_SOCKET"
echo "logs:     $out/"
echo

bw=() lat_t=() lat_p99=() plain_g=() plain_p=() gso_g=() gso_p=()
BENCH_ROUNDS=$rounds
BENCH_STEPS=$((4 * rounds))

# daemons_alive LOG: both vrnicd still running (a dead one is not restarted: the other would
# keep stale peers); notes a dead one in LOG.
daemons_alive() {
  local ok=0
  _vrnic_running "$VRNICD_PID" || { echo "server vrnicd (pid $VRNICD_PID) died" >>"$1"; ok=1; }
  _vrnic_running "$PEER_PID" || { echo "client vrnicd (pid $PEER_PID) died" >>"$1"; ok=1; }
  return "$ok"
}

# measure ROUND NAME PROG ARGS...: one perftest pair across the two vrnicd; sets ROW.
measure() {
  local round=$1 name=$2 log=$out/$2.$1.log
  shift 2
  ROW=
  daemons_alive "$log" || return 1
  bench_perftest "$log" "$name.$round" "$@" && daemons_alive "$log"
}

# udp MODE ROUND: one udp_bw run; sets UDP_G (GB/s) and UDP_P (Mpps) from its last line.
udp() {
  local log=$out/udp_$1.$2.log line
  UDP_G='' UDP_P=''
  echo "+ $udp_bw $1 ${udp_args[*]}" >"$log"
  vrnic_fg timeout -k 5 300 "$udp_bw" "$1" "${udp_args[@]}" >>"$log" 2>&1 || return 1
  line=$(grep "^mode=$1 " "$log" | tail -n 1)
  UDP_G=$(sed -n 's/.* gbps=\([0-9.]*\).*/\1/p' <<<"$line")
  UDP_P=$(sed -n 's/.* mpps=\([0-9.]*\).*/\1/p' <<<"$line")
  [[ -n $UDP_G && -n $UDP_P ]]
}

udp_desc() {
  local h
  h=$(grep -m1 "^mode $1:" "$out/udp_$1.1.log" 2>/dev/null | sed "s/^mode $1: //")
  echo "${h:-udp_bw $1}"
}

for ((r = 1; r <= rounds; r++)); do
  # across the udp port
  bench_bw "$r" write_bw bw ib_write_bw "${bw_args[@]}"
  bench_lat "$r" write_lat lat_t lat_p99 ib_write_lat -s 2 -n "$lat_iters"
  # the kernel's UDP, same run
  if udp plain "$r"; then
    plain_g+=("$UDP_G")
    plain_p+=("$UDP_P")
    bench_progress "$r" "udp_bw plain ${udp_args[*]}" "$UDP_G GB/s, $UDP_P Mpps"
  else
    bench_progress "$r" "udp_bw plain ${udp_args[*]}" ""
    bench_fail "$out/udp_plain.$r.log"
  fi
  if udp gso "$r"; then
    gso_g+=("$UDP_G")
    gso_p+=("$UDP_P")
    bench_progress "$r" "udp_bw gso ${udp_args[*]}" "$UDP_G GB/s, $UDP_P Mpps"
  else
    bench_progress "$r" "udp_bw gso ${udp_args[*]}" ""
    bench_fail "$out/udp_gso.$r.log"
  fi
done

# Counters of both daemons after the run, then stop them.
daemons_alive "$out/vrnicd-stop.log" || BENCH_FAILURES=$((BENCH_FAILURES + 1))
bench_stop_udp_pair

# counter_of FILE KEY: one counter from a saved `vrnicctl stats`; "?" if absent.
counter_of() {
  local v
  v=$(awk -F= -v k="$2" '$1 == k { print $2; exit }' "$1" 2>/dev/null)
  echo "${v:-?}"
}

bw_med=$(bench_median "${bw[@]}")
plain_med=$(bench_median "${plain_g[@]}")
gso_med=$(bench_median "${gso_g[@]}")
ratio_plain=$(bench_ratio "$bw_med" "$plain_med")
ratio_gso=$(bench_ratio "$bw_med" "$gso_med")
verdict="not measured"
if [[ $ratio_plain != n/a ]]; then
  if awk -v r="${ratio_plain%% *}" -v t="$target" 'BEGIN { exit !(r >= t) }'; then
    verdict="met"
  else
    verdict="not met"
  fi
fi
counters=(wire_tx_packets wire_tx_bytes wire_tx_errors wire_rx_packets wire_rx_bytes
  wire_rx_icrc_errors wire_rx_malformed packets_dropped retransmits timeouts naks_sent
  naks_received rnr_naks_sent rnr_naks_received duplicates out_of_sequence)

{
  echo "## vrnic udp port vs kernel UDP, loopback ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds (GB/s = 1e9 bytes/s; latencies in microseconds)."
  echo "perftest: server \`LD_LIBRARY_PATH=build/provider VRNIC_SOCKET=<vrnicd 127.0.0.1> <cmd> -d vrnic0 -x 0 -F\`,"
  echo "client the same with \`VRNIC_SOCKET=<vrnicd 127.0.0.2>\` and \`127.0.0.1\`; the data crosses kernel UDP."
  echo "udp_bw: \`build/perf/udp_bw MODE ${udp_args[*]}\`, 127.0.0.1 -> 127.0.0.2, sender and receiver threads on different CPUs."
  echo
  echo "| measurement | median | per round |"
  echo "|---|---|---|"
  echo "| ib_write_bw ${bw_args[*]}, udp port | $bw_med GB/s | ${bw[*]:-} |"
  echo "| ib_write_lat -s 2 -n $lat_iters, t_typical | $(bench_median "${lat_t[@]}") us | ${lat_t[*]:-} |"
  echo "| ib_write_lat -s 2 -n $lat_iters, 99% | $(bench_median "${lat_p99[@]}") us | ${lat_p99[*]:-} |"
  echo "| kernel UDP plain ($(udp_desc plain)) | $plain_med GB/s | ${plain_g[*]:-} |"
  echo "| kernel UDP plain, datagrams | $(bench_median_fmt %.3f "${plain_p[@]}") Mpps | ${plain_p[*]:-} |"
  echo "| kernel UDP GSO+GRO ($(udp_desc gso)) | $gso_med GB/s | ${gso_g[*]:-} |"
  echo "| kernel UDP GSO+GRO, datagrams | $(bench_median_fmt %.3f "${gso_p[@]}") Mpps | ${gso_p[*]:-} |"
  echo "| **ib_write_bw / UDP plain** (target >= $target: $verdict) | $ratio_plain | |"
  echo "| ib_write_bw / UDP GSO+GRO | $ratio_gso | |"
  echo
  echo "vrnicd counters after the run (\`vrnicctl stats\`; all rounds, both directions):"
  echo
  echo "| counter | server vrnicd (127.0.0.1) | client vrnicd (127.0.0.2) |"
  echo "|---|---|---|"
  for k in "${counters[@]}"; do
    echo "| $k | $(counter_of "$out/stats.server.txt" "$k") | $(counter_of "$out/stats.client.txt" "$k") |"
  done
  echo
  ((BENCH_FAILURES)) && echo "FAILED runs: $BENCH_FAILURES (excluded from the medians; logs in $out/)."
} >"$out/summary.md"

echo
echo "== Summary"
cat "$out/summary.md"
echo
echo "(saved to $out/summary.md)"
((BENCH_FAILURES == 0))
