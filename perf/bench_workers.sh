#!/usr/bin/env bash
# perf/bench_workers.sh: worker scaling (issue 5, "Performance"). Two vrnicd over udp on
# 127.0.0.1 and 127.0.0.2 (a private UDP port), first with --workers 1, then --workers 2, and
# in every round `ib_write_bw -s 65536 -q 16 -D SECS` and `ib_write_bw -s 64 -q 16 -D SECS`
# (server on the first vrnicd, client on the second). Reports the medians and the ratio
# 2 workers / 1 worker. This machine has 2 vCPUs shared by both vrnicd (a worker each, or two)
# and perftest's busy-polling client: more workers than cores to spare cannot scale here,
# the figure says what the hand-over between workers costs or gains.
#
# Usage: perf/bench_workers.sh [ROUNDS]     (default 3; VRNIC_SKIP_SETUP=1, BENCH_SECONDS=5)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
secs=${BENCH_SECONDS:-5}
vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
# shellcheck source=tests/lib_hosts.sh
source tests/lib_hosts.sh
bench_out_dir bench-workers || exit 1
out=$BENCH_OUT
udp_port=$((40000 + ($$ + 313) % 20000))
bench_system_info | tee "$out/system.txt"

declare -A results
BENCH_ROUNDS=$rounds
BENCH_STEPS=$((4 * rounds))
sizes=(65536 64)

for ((r = 1; r <= rounds; r++)); do
  for workers in 1 2; do
    host_vrnicd s - --workers "$workers" --udp 127.0.0.1 --udp-port "$udp_port" >>"$out/start.log" 2>&1 &&
      host_vrnicd c - --workers "$workers" --udp 127.0.0.2 --udp-port "$udp_port" >>"$out/start.log" 2>&1 ||
      { cat "$out/start.log"; exit 1; }
    for size in "${sizes[@]}"; do
      log=$out/w$workers.s$size.$r.log
      what="ib_write_bw -s $size -q 16, $workers worker(s)"
      if VRNIC_SOCKET=${SOCK[s]} VRNIC_CLIENT_ENV=VRNIC_SOCKET=${SOCK[c]} VRNICD_PID=${PID[s]} \
        bench_perftest "$log" "w$workers.$size.$r" ib_write_bw -s "$size" -q 16 -D "$secs" &&
        [[ $ROW == bw* ]]; then
        read -r _ _ v unit <<<"$ROW"
        # Three decimals from perftest's own figure: 64-byte writes are a few MB/s.
        g=$(awk -v v="$v" -v u="$unit" 'BEGIN { printf "%.3f", (u == "Gb/s") ? v / 8 : v * 1048576 / 1e9 }')
        results[$workers.$size]+="$g "
        bench_progress "$r" "$what" "$g GB/s"
      else
        bench_progress "$r" "$what" ""
        bench_fail "$log"
      fi
    done
    stop_hosts >>"$out/stop.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))
  done
done

# shellcheck disable=SC2086 # space-separated on purpose
med() { bench_median_fmt %.3f ${results[$1]:-}; }
{
  echo "## vrnic worker scaling, udp on loopback ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds of ${secs} s: \`ib_write_bw -s SIZE -q 16 -D $secs -d vrnic0 -x 0 -F\`,"
  echo "two vrnicd \`--workers N --udp 127.0.0.1|127.0.0.2\`."
  echo
  echo "| ib_write_bw | 1 worker GB/s | 2 workers GB/s | 2 / 1 |"
  echo "|---|---|---|---|"
  for size in "${sizes[@]}"; do
    echo "| -s $size -q 16 | $(med 1.$size) | $(med 2.$size) | $(bench_ratio "$(med 2.$size)" "$(med 1.$size)") |"
  done
  echo
  echo "Per round (GB/s): $(for k in "${!results[@]}"; do printf '%s=[%s] ' "$k" "${results[$k]% }"; done)"
} | tee "$out/summary.md"
vrnic_cleanup
echo "failures: $BENCH_FAILURES; summary: $out/summary.md"
((BENCH_FAILURES == 0))
