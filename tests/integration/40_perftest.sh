#!/usr/bin/env bash
# Debian's perftest 4.5 on vrnic0: server and client both exit 0 with a non-zero figure.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init perftest

# perftest PROG ARGS...: runs the pair with -d vrnic0 -x 0 -F, then reads perftest's result
# table: the client must report a non-zero bandwidth (BW average) or latency (t_typical); so
# must the server wherever it prints a table row (not every test prints one there).
perftest() {
  local prog=$1 port ok=0 crows srows
  shift
  ensure_vrnicd || return 1
  port=$(next_port)
  verbs_pair "$prog-$port" "$port" "$prog" -d vrnic0 -x 0 -F "$@" || return 1
  crows=$(perftest_parse "$CLIENT_LOG")
  srows=$(perftest_parse "$SERVER_LOG")
  echo "client result rows: ${crows:-none}"
  echo "server result rows: ${srows:-none}"
  if [[ -z $crows ]]; then
    echo "FAIL: no result row in the client's output"
    ok=1
  elif ! awk '$3 + 0 <= 0 { bad = 1 } END { exit bad }' <<<"$crows"; then
    echo "FAIL: the client reports a zero figure"
    ok=1
  fi
  if [[ -n $srows ]] && ! awk '$3 + 0 <= 0 { bad = 1 } END { exit bad }' <<<"$srows"; then
    echo "FAIL: the server reports a zero figure"
    ok=1
  fi
  if ((ok)); then
    echo "--- server output:"; vrnic_tail "$SERVER_LOG" 15
    echo "--- client output:"; vrnic_tail "$CLIENT_LOG" 15
    return 1
  fi
  CHECK_NOTE=$(awk 'NR == 1 { if ($1 == "bw") print $3, $4; else print $3, "us" }' <<<"$crows")
  cat "$CLIENT_LOG"
}

# The same-host direct path (issue 30): perftest's two processes are of one user, so its RC
# WRITEs, READs and atomics take it, direct_ops growing; with VRNIC_DIRECT_PATH=0 the same
# runs pass on the worker path and it counts nothing.
ensure_vrnicd >/dev/null  # here, not in the $(...) below: its vrnicd would be the subshell's
direct_before=$(vrnic_stat direct_ops)
direct_moved() {
  local now
  now=$(vrnic_stat direct_ops) || return 1
  echo "direct_ops before ${direct_before:-?}, now $now"
  [[ -n $direct_before ]] && (($1 ? now > direct_before : now == direct_before))
}
# env_off_perftest PROG ARGS...: perftest with the direct path off in both processes.
env_off_perftest() { VRNIC_DIRECT_PATH=0 perftest "$@"; }

check "ib_write_bw -s 65536 -n 5000" perftest ib_write_bw -s 65536 -n 5000
check "ib_read_bw -s 65536 -n 5000" perftest ib_read_bw -s 65536 -n 5000
check "ib_send_bw -s 65536 -n 5000" perftest ib_send_bw -s 65536 -n 5000
check "ib_write_bw -q 8 -s 65536 -n 5000" perftest ib_write_bw -q 8 -s 65536 -n 5000
check "ib_atomic_bw -n 5000" perftest ib_atomic_bw -n 5000
check "ib_write_lat -n 1000" perftest ib_write_lat -n 1000
check "ib_read_lat -n 1000" perftest ib_read_lat -n 1000
check "ib_send_lat -n 1000" perftest ib_send_lat -n 1000
check "ib_atomic_lat -n 1000" perftest ib_atomic_lat -n 1000
check "the RC WRITE, READ and atomic runs took the direct path between their two processes (direct_ops grew)" \
  direct_moved 1
direct_before=$(vrnic_stat direct_ops)
for args in "ib_write_bw -s 65536 -n 2000" "ib_read_bw -s 65536 -n 2000" "ib_atomic_bw -n 2000" \
  "ib_write_lat -n 500" "ib_read_lat -n 500" "ib_atomic_lat -n 500"; do
  # shellcheck disable=SC2086 # the words of args
  check "VRNIC_DIRECT_PATH=0: $args" env_off_perftest $args
done
check "VRNIC_DIRECT_PATH=0: those runs took the worker path only (direct_ops +0)" direct_moved 0
# Other transports and queue shapes.
check "ib_send_bw -c UD -n 5000" perftest ib_send_bw -c UD -n 5000
check "ib_send_lat -c UD -n 1000" perftest ib_send_lat -c UD -n 1000
check "ib_write_bw -c UC -s 65536 -n 5000" perftest ib_write_bw -c UC -s 65536 -n 5000
check "ib_send_bw --use-srq -s 65536 -n 5000" perftest ib_send_bw --use-srq -s 65536 -n 5000
check "ib_write_bw -q 64 -s 4096 -n 1000" perftest ib_write_bw -q 64 -s 4096 -n 1000
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
