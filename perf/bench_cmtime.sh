#!/usr/bin/env bash
# perf/bench_cmtime.sh: connection set-up and teardown rate through rdma_cm (issue 20,
# "Performance"): rdma-core's cmtime -c CONNS through vrnic's librdmacm.so.1, on one vrnicd
# (the loop port) and across two (--udp 127.0.0.1 / 127.0.0.2). Runs ROUNDS rounds (default
# 3); each round runs cmtime once per setup and records the wall time of each of its steps
# (create id, bind addr, resolve addr, resolve route, create qp, connect, disconnect, destroy:
# cmtime's "total ms", all CONNS connections in parallel), their sum, and connections per second over
# that sum. Prints the medians per setup; logs and summary.md in perf/out/bench-cmtime-<date>/.
# The issue's target: 1000 connections set up and torn down in under 1 s on one vrnicd.
#
# Usage: perf/bench_cmtime.sh [ROUNDS]
# Environment:
#   BENCH_CONNS        connections per run (default 1000)
#   VRNIC_SKIP_SETUP=1 skip the package and build steps

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
conns=${BENCH_CONNS:-1000}
# bind_addr: cmtime binds each id itself when given -b (the runs across), else resolve_addr
# binds it (a step of 0 ms).
steps=(create_id bind_addr resolve_addr resolve_route create_qp connect disconnect destroy)

vrnic_tmp_init || exit 1
bench_setup || exit 1
command -v cmtime >/dev/null || vrnic_install_packages rdmacm-utils || exit 1
bench_out_dir bench-cmtime || exit 1
out=$BENCH_OUT
bench_free_udp_port
udp_port=$BENCH_UDP_PORT

{
  bench_system_info
  echo "cmtime -c $conns; one vrnicd (loop port), and two (--udp 127.0.0.1/.2, port $udp_port)"
} | tee "$out/system.txt"

start_vrnicd >"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
LOCAL_SOCK=$VRNIC_SOCKET
LOCAL_PID=$VRNICD_PID
# The pair for the runs across: a server vrnicd and a client one.
start_peer_vrnicd --udp 127.0.0.1 --udp-port "$udp_port" \
  >>"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
ACROSS_SERVER_SOCK=$PEER_SOCKET
ACROSS_SERVER_PID=$PEER_PID
start_peer_vrnicd --udp 127.0.0.2 --udp-port "$udp_port" \
  >>"$out/vrnicd-start.log" 2>&1 || { cat "$out/vrnicd-start.log"; exit 1; }
ACROSS_CLIENT_SOCK=$PEER_SOCKET
ACROSS_CLIENT_PID=$PEER_PID
CM_RUN=(env "LD_LIBRARY_PATH=$VRNIC_PROVIDER_DIR")

# run_cmtime LOG SERVER_SOCK CLIENT_SOCK CLIENT_BIND: one cmtime pair; its client's step table.
run_cmtime() {
  local log=$1 spid
  VRNIC_SOCKET=$2 "${CM_RUN[@]}" timeout 120 cmtime -b 127.0.0.1 -c "$conns" >"$log.server" 2>&1 &
  spid=$!
  wait_for 15 "cmtime's listener" stat_is cm_listeners 1 "$2" || { kill "$spid"; return 1; }
  VRNIC_SOCKET=$3 vrnic_fg "${CM_RUN[@]}" timeout 120 cmtime ${4:+-b "$4"} -s 127.0.0.1 \
    -c "$conns" >"$log" 2>&1
  local rc=$?
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  wait_for 15 "the connections' time-wait to end" stat_is cm_connections 0 "$2"
  return "$rc"
}

declare -A total
BENCH_ROUNDS=$rounds
BENCH_STEPS=$((2 * rounds))
for ((r = 1; r <= rounds; r++)); do
  for setup in local across; do
    log=$out/cmtime.$setup.$r.log
    if [[ $setup == local ]]; then
      run_cmtime "$log" "$LOCAL_SOCK" "$LOCAL_SOCK" ""
    else
      run_cmtime "$log" "$ACROSS_SERVER_SOCK" "$ACROSS_CLIENT_SOCK" 127.0.0.2
    fi
    rc=$?
    if ((rc != 0)) || ! grep -q '^destroy ' "$log"; then
      bench_progress "$r" "cmtime -c $conns ($setup)" ""
      bench_fail "$log"
      continue
    fi
    # "step : total max min per-conn": the step's wall time is the first number after ':'.
    sum=0
    for s in "${steps[@]}"; do
      v=$(awk -v s="${s//_/ }" -F: '{ k = $1; sub(/ +$/, "", k) } k == s { split($2, f, " "); print f[1] }' "$log")
      [[ -z $v && $s == bind_addr ]] && v=0  # not a step of its own without -b
      total[$setup.$s]+="${v:-nan} "
      sum=$(awk -v a="$sum" -v b="${v:-0}" 'BEGIN { printf "%.2f", a + b }')
    done
    total[$setup.sum]+="$sum "
    bench_progress "$r" "cmtime -c $conns ($setup)" "$sum ms set-up + teardown"
  done
done

for d in "$LOCAL_PID" "$ACROSS_SERVER_PID" "$ACROSS_CLIENT_PID"; do kill -TERM "$d" 2>/dev/null; done

{
  echo "# cmtime -c $conns: medians of $rounds rounds (ms, all connections in parallel)"
  echo
  echo "| step | one vrnicd | two vrnicd (udp) |"
  echo "|---|---|---|"
  for s in "${steps[@]}" sum; do
    # shellcheck disable=SC2086 # the rounds, one word each
    l=$(bench_median ${total[local.$s]:-})
    # shellcheck disable=SC2086
    a=$(bench_median ${total[across.$s]:-})
    echo "| ${s//_/ } | $l | $a |"
  done
  # shellcheck disable=SC2086
  l=$(bench_median ${total[local.sum]:-})
  # shellcheck disable=SC2086
  a=$(bench_median ${total[across.sum]:-})
  echo
  echo "connections per second (set up and torn down): one vrnicd" \
    "$(awk -v c="$conns" -v t="$l" 'BEGIN { if (t > 0) printf "%.0f", c * 1000 / t; else print "?" }')," \
    "two $(awk -v c="$conns" -v t="$a" 'BEGIN { if (t > 0) printf "%.0f", c * 1000 / t; else print "?" }')"
  echo "target: $conns in under 1000 ms on one vrnicd"
} | tee "$out/summary.md"
((BENCH_FAILURES == 0))
