#!/usr/bin/env bash
# rdma-core's pingpong examples (RC, UC, UD, SRQ), server and client on vrnic0 (GID index 0),
# over 127.0.0.1.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init pingpong

# pingpong PROG ARGS...: both sides exit 0 and print "bytes in". -c makes the receiver check
# the data it got (it prints "invalid data in page N" otherwise).
pingpong() {
  local prog=$1 port ok=0 side f
  shift
  ensure_vrnicd || return 1
  port=$(next_port)
  verbs_pair "$prog-$port" "$port" "$prog" -d vrnic0 -g 0 -c "$@" || return 1
  for side in server client; do
    f=$SERVER_LOG
    [[ $side == client ]] && f=$CLIENT_LOG
    if ! grep -q 'bytes in' "$f"; then
      echo "FAIL: no 'bytes in' line from the $side"
      ok=1
    fi
    if grep -qi 'invalid data' "$f"; then
      echo "FAIL: the $side's data check failed:"
      grep -i 'invalid data' "$f" | head -n 5
      ok=1
    fi
  done
  if ((ok)); then
    echo "--- server output:"; vrnic_tail "$SERVER_LOG" 10
    echo "--- client output:"; vrnic_tail "$CLIENT_LOG" 10
    return 1
  fi
  CHECK_NOTE=$(grep -m1 'usec/iter' "$CLIENT_LOG" | sed -E 's/.*= *//')
  cat "$CLIENT_LOG"
}

check "ibv_rc_pingpong -s 1 -n 1000" pingpong ibv_rc_pingpong -s 1 -n 1000
check "ibv_rc_pingpong -s 4096 -n 1000" pingpong ibv_rc_pingpong -s 4096 -n 1000
check "ibv_rc_pingpong -s 65536 -n 1000" pingpong ibv_rc_pingpong -s 65536 -n 1000
check "ibv_rc_pingpong -e -s 4096 -n 1000 (completion events)" \
  pingpong ibv_rc_pingpong -e -s 4096 -n 1000
for prog in ibv_uc_pingpong ibv_ud_pingpong "ibv_srq_pingpong -q 16"; do
  read -ra cmd <<<"$prog"
  check "$prog -n 1000" pingpong "${cmd[@]}" -n 1000
  check "$prog -e -n 1000 (completion events)" pingpong "${cmd[@]}" -e -n 1000
done
# XRC: rdma-core's ibv_xsrq_pingpong, its server's and client's QPs and SRQs in XRC domains
# (both processes open /tmp/xrc_domain, as the example does: on one vrnicd, one domain).
xsrq_pingpong() {
  local port
  ensure_vrnicd || return 1
  port=$(next_port)
  verbs_pair "xsrq-$port" "$port" ibv_xsrq_pingpong -d vrnic0 -g 0 "$@" && xsrq_result_ok &&
    cat "$CLIENT_LOG"
}
check "ibv_xsrq_pingpong -n 1000 (XRC)" xsrq_pingpong -n 1000
check "ibv_xsrq_pingpong -e -n 1000 (XRC, completion events)" xsrq_pingpong -e -n 1000
check "ibv_xsrq_pingpong -o -s 65536 -n 200 (XRC, on-demand paging)" \
  xsrq_pingpong -o -s 65536 -n 200
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
