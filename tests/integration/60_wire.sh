#!/usr/bin/env bash
# RoCEv2 on the wire: two vrnicd, on 127.0.0.1 and 127.0.0.2, each with a udp port. Servers
# use the first, clients the second, so every packet crosses kernel UDP (ICRC and all).
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init wire

# Both daemons, started once for the group.
wire_daemons() {
  [[ -n $VRNICD_PID && -n $PEER_PID ]] && _vrnic_running "$VRNICD_PID" &&
    _vrnic_running "$PEER_PID" && return 0
  ensure_vrnicd --udp 127.0.0.1 || return 1
  start_peer_vrnicd --udp 127.0.0.2 || return 1
  VRNIC_CLIENT_ENV=VRNIC_SOCKET=$PEER_SOCKET
}

across() {
  local prog=$1 port
  shift
  wire_daemons || return 1
  port=$(next_port)
  verbs_pair "wire-$prog-$port" "$port" "$prog" "$@" || return 1
  cat "$CLIENT_LOG"
}

# perftest across the wire: as 40_perftest.sh checks, a non-zero figure on the client.
perftest_across() {
  across "$@" -d vrnic0 -x 0 -F || return 1
  local rows
  rows=$(perftest_parse "$CLIENT_LOG")
  [[ -n $rows ]] && awk '$3 + 0 <= 0 { bad = 1 } END { exit bad }' <<<"$rows" || {
    echo "FAIL: no non-zero result row from the client"
    return 1
  }
  CHECK_NOTE=$(awk 'NR == 1 { if ($1 == "bw") print $3, $4; else print $3, "us" }' <<<"$rows")
}

pingpong_across() {
  across "$@" -d vrnic0 -g 0 -c || return 1
  grep -q 'bytes in' "$CLIENT_LOG" && ! grep -qi 'invalid data' "$CLIENT_LOG" "$SERVER_LOG" || {
    echo "FAIL: no 'bytes in' line, or the receiver found invalid data"
    return 1
  }
  CHECK_NOTE=$(grep -m1 'usec/iter' "$CLIENT_LOG" | sed -E 's/.*= *//')
}

# Both daemons' packets really went over UDP, with no ICRC or format errors.
wire_counters() {
  local s
  for s in "$VRNIC_SOCKET" "$PEER_SOCKET"; do
    echo "+ vrnicctl --socket $s stats"
    vrnicctl_stats "$s" | grep -E 'packets|icrc|malformed|tx_errors|retransmits' | sed 's/^/    /'
  done
  for s in "$VRNIC_SOCKET" "$PEER_SOCKET"; do
    (($(vrnic_stat udp_rx_packets "$s") > 0)) || { echo "FAIL: no UDP packets received"; return 1; }
    (($(vrnic_stat udp_rx_icrc_errors "$s") == 0)) || { echo "FAIL: ICRC errors"; return 1; }
    (($(vrnic_stat udp_rx_malformed "$s") == 0)) || { echo "FAIL: malformed packets"; return 1; }
  done
}

stop_both() {
  local ok=0 main_pid=$VRNICD_PID main_log=$VRNICD_LOG
  VRNICD_PID=$PEER_PID VRNICD_LOG=$PEER_LOG
  stop_vrnicd TERM "$PEER_SOCKET" || ok=1
  PEER_PID=
  VRNICD_PID=$main_pid VRNICD_LOG=$main_log
  vrnicd_idle_and_stop || ok=1
  return "$ok"
}

check "ib_write_bw -s 65536 -n 5000 across udp" perftest_across ib_write_bw -s 65536 -n 5000
check "ib_read_bw -s 65536 -n 2000 across udp" perftest_across ib_read_bw -s 65536 -n 2000
check "ib_send_bw -s 65536 -n 2000 across udp" perftest_across ib_send_bw -s 65536 -n 2000
check "ib_atomic_bw -n 2000 across udp" perftest_across ib_atomic_bw -n 2000
check "ib_write_lat -n 1000 across udp" perftest_across ib_write_lat -n 1000
check "ib_read_lat -n 1000 across udp" perftest_across ib_read_lat -n 1000
check "ib_send_lat -n 1000 across udp" perftest_across ib_send_lat -n 1000
check "ib_atomic_lat -n 1000 across udp" perftest_across ib_atomic_lat -n 1000
check "ibv_rc_pingpong -n 1000 across udp" pingpong_across ibv_rc_pingpong -n 1000
check "ibv_uc_pingpong -n 1000 across udp" pingpong_across ibv_uc_pingpong -n 1000
check "ibv_ud_pingpong -n 1000 across udp" pingpong_across ibv_ud_pingpong -n 1000
check "udp counters: packets both ways, no ICRC or format errors" wire_counters
[[ -n $VRNICD_PID ]] && check "both vrnicd: no objects left, exit 0 on SIGTERM" stop_both

vrnic_script_finish
