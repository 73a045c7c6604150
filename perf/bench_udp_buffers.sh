#!/usr/bin/env bash
# perf/bench_udp_buffers.sh: the udp port with the socket buffers an unprivileged vrnicd gets
# on most hosts (net.core.rmem_max = 212992 bytes; reproduced as root with --udp-buffer),
# against the default 32 MiB buffers (root) in the same run. Two vrnicd, `--udp 127.0.0.1` and
# `--udp 127.0.0.2` on a private UDP port, started afresh for each buffer size in each round;
# perftest servers use the first, clients the second. Each round runs, for each size:
#   ib_write_bw -s 4096 -n 2000 -q 64 -b     64 QPs both ways
#   ib_write_bw -s 65536 -n 2000 -q 16
#   ib_read_bw  -s 65536 -n 1000 -q 16       read responses fill the requester's own buffer
#   ib_send_bw  -s 65536 -n 1000 -q 16
# and records whether the pair completed (a QP that runs out of retries fails the program with
# IBV_WC_RETRY_EXC_ERR, perftest's "status 12"), its bandwidth, and both daemons' datagrams
# dropped by the kernel (wire_rx_dropped), retransmissions and IB timeouts during it.
# summary.md gives per command and size: runs completed, median bandwidth of those, and the
# ratio of the small buffers' median to the default's. Logs go to
# perf/out/bench-udp-buffers-<date>/.
#
# Usage: perf/bench_udp_buffers.sh [ROUNDS]      (root: --udp-buffer sets sizes past rmem_max)
# Environment: VRNIC_SKIP_SETUP=1 skips the package and build steps; VRNIC_BUILD_DIR another
# build (e.g. an older commit's, to compare).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
((EUID == 0)) || { echo "perf/bench_udp_buffers.sh: run as root (socket buffers past rmem_max)" >&2; exit 2; }
commands=("ib_write_bw -s 4096 -n 2000 -q 64 -b" "ib_write_bw -s 65536 -n 2000 -q 16"
  "ib_read_bw -s 65536 -n 1000 -q 16" "ib_send_bw -s 65536 -n 1000 -q 16")
sizes=(212992 33554432)

vrnic_tmp_init || exit 1
bench_setup || exit 1
bench_out_dir bench-udp-buffers || exit 1
out=$BENCH_OUT
bench_free_udp_port
udp_port=$BENCH_UDP_PORT

echo "== udp port with small and default socket buffers: $rounds rounds"
{
  bench_system_info
  echo "build:    $VRNIC_BUILD_DIR"
  echo "vrnicd:   --udp 127.0.0.1 and --udp 127.0.0.2, --udp-port $udp_port, --udp-buffer ${sizes[*]}"
} | tee "$out/system.txt"
echo "logs:     $out/"
echo
BENCH_ROUNDS=$rounds
BENCH_STEPS=$((rounds * ${#sizes[@]} * ${#commands[@]}))
declare -A done_n bw drops resent timeouts

# both COUNTER: the counter summed over both daemons.
both() { echo $(($(vrnic_stat "$1" "$VRNIC_SOCKET") + $(vrnic_stat "$1" "$PEER_SOCKET"))); }

start_pair() {
  start_vrnicd --udp 127.0.0.1 --udp-port "$udp_port" --udp-buffer "$1" &&
    start_peer_vrnicd --udp 127.0.0.2 --udp-port "$udp_port" --udp-buffer "$1"
}
stop_pair() {
  stop_vrnicd TERM >/dev/null 2>&1
  VRNICD_PID=$PEER_PID VRNICD_LOG=$PEER_LOG
  stop_vrnicd TERM "$PEER_SOCKET" >/dev/null 2>&1
  VRNICD_PID='' PEER_PID=''
}

for ((r = 1; r <= rounds; r++)); do
  for size in "${sizes[@]}"; do
    log=$out/daemons.$size.$r.log
    if ! start_pair "$size" >"$log" 2>&1; then
      cat "$log"
      exit 1
    fi
    VRNIC_CLIENT_ENV=VRNIC_SOCKET=$PEER_SOCKET
    for i in "${!commands[@]}"; do
      read -ra cmd <<<"${commands[$i]}"
      key="$i,$size"
      d0=$(both wire_rx_dropped) t0=$(both retransmits) o0=$(both timeouts)
      mlog=$out/cmd$i.$size.$r.log
      if bench_perftest "$mlog" "buffers-$i-$size-$r" "${cmd[@]}"; then
        read -r _ _ value unit <<<"$ROW"
        g=$(bench_bw_gbs "$value" "$unit")
        done_n[$key]=$((${done_n[$key]:-0} + 1))
        bw[$key]="${bw[$key]:-} $g"
        result="$g GB/s"
      else
        result="FAILED ($(grep -m1 -o 'Failed status [0-9]*' "$mlog" || echo 'see log'))"
      fi
      d=$(($(both wire_rx_dropped) - d0)) t=$(($(both retransmits) - t0)) o=$(($(both timeouts) - o0))
      drops[$key]="${drops[$key]:-} $d" resent[$key]="${resent[$key]:-} $t"
      timeouts[$key]="${timeouts[$key]:-} $o"
      bench_progress "$r" "${commands[$i]}, $size B" \
        "$result; dropped $d, resent $t, timeouts $o"
    done
    stop_pair
  done
done

{
  echo "## udp port: 212992-byte socket buffers against 32 MiB ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Per command and buffer size: runs completed of $rounds, median bandwidth of those (GB/s),"
  echo "and medians of both daemons' kernel drops, retransmissions and IB timeouts per run."
  echo
  echo "| command | buffers | completed | GB/s | dropped | resent | timeouts | small / default |"
  echo "|---|---|---|---|---|---|---|---|"
  for i in "${!commands[@]}"; do
    small_med='' def_med=''
    for size in "${sizes[@]}"; do
      key="$i,$size"
      read -ra v <<<"${bw[$key]:-}"
      read -ra dv <<<"${drops[$key]:-}"
      read -ra tv <<<"${resent[$key]:-}"
      read -ra ov <<<"${timeouts[$key]:-}"
      med=$(bench_median "${v[@]}")
      [[ $size == "${sizes[0]}" ]] && small_med=$med || def_med=$med
      ratio=''
      [[ $size == "${sizes[1]}" ]] && ratio=$(bench_ratio "$small_med" "$def_med")
      echo "| ${commands[$i]} | $size | ${done_n[$key]:-0}/$rounds | $med | $(bench_median_fmt %.0f "${dv[@]}") | $(bench_median_fmt %.0f "${tv[@]}") | $(bench_median_fmt %.0f "${ov[@]}") | $ratio |"
    done
  done
} >"$out/summary.md"

echo
echo "== Summary"
cat "$out/summary.md"
echo
echo "(saved to $out/summary.md)"
