#!/usr/bin/env bash
# rdma_cm through vrnic (issue 20): the drop-in librdmacm.so.1 (its ABI against rdma-core 44's)
# and rdmacm-utils' programs, server and client on one vrnicd. Their connections go through
# vrnicd's connection manager and QP1 on the loop port, the same CM MADs a kernel peer gets;
# the data is checked by the programs themselves (rping -V). Failure paths: no listener
# (REJECTED reason 8, ECONNREFUSED on a sync id), a client killed while connected.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init rdmacm

RDMACM_DIR=$VRNIC_BUILD_DIR/rdmacm
SYSTEM_RDMACM=/usr/lib/x86_64-linux-gnu/librdmacm.so.1
# vrnic's librdmacm.so.1 and libibverbs.so.1, never the system's; every symbol bound at load.
CM_RUN=(env "LD_LIBRARY_PATH=$VRNIC_PROVIDER_DIR:$RDMACM_DIR" LD_BIND_NOW=1)

abi() {
  bash "$VRNIC_ROOT/tests/abi_check.sh" "$RDMACM_DIR/librdmacm.so.1" "$SYSTEM_RDMACM"
}

# The programs resolve librdmacm.so.1 and libibverbs.so.1 to vrnic's.
loads_ours() {
  local prog out rc=0
  for prog in rping ucmatose udaddy rdma_server rdma_client cmtime; do
    out=$("${CM_RUN[@]}" ldd "$(command -v "$prog")") || return 1
    if ! grep -q "librdmacm.so.1 => $RDMACM_DIR/" <<<"$out" ||
      ! grep -q "libibverbs.so.1 => $VRNIC_PROVIDER_DIR/" <<<"$out"; then
      echo "FAIL: $prog does not load vrnic's libraries:"
      grep -E 'librdmacm|libibverbs' <<<"$out"
      rc=1
    fi
  done
  return "$rc"
}

# cm_pair TAG SERVER... -- CLIENT...: the server, once vrnicd has its listener; then the
# client; both must exit 0. Logs in $CM_SERVER_LOG and $CM_CLIENT_LOG.
cm_pair() {
  local tag=$1 srv=() cli=() pid rc=0 tmo
  shift
  while [[ $1 != -- ]]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  ensure_vrnicd || return 1
  tmo=$(vrnic_timeout 60)
  CM_SERVER_LOG=$VRNIC_TMP/$tag.server.log
  CM_CLIENT_LOG=$VRNIC_TMP/$tag.client.log
  echo "+ ${srv[*]} &   # server"
  "${CM_RUN[@]}" timeout -k 5 "$tmo" "${srv[@]}" >"$CM_SERVER_LOG" 2>&1 </dev/null &
  pid=$!
  _vrnic_track "$pid"
  if ! wait_for 15 "the server's listener in vrnicd" stat_is cm_listeners 1; then
    vrnic_tail "$CM_SERVER_LOG"
    kill "$pid" 2>/dev/null
    return 1
  fi
  echo "+ ${cli[*]}   # client"
  vrnic_fg "${CM_RUN[@]}" timeout -k 5 "$tmo" "${cli[@]}" >"$CM_CLIENT_LOG" 2>&1 </dev/null
  local crc=$?
  if [[ ${CM_KEEP_SERVER:-0} == 1 ]]; then
    kill -TERM "$pid" 2>/dev/null  # it serves for ever (cmtime)
    vrnic_wait_exit "$pid" 10
  else
    vrnic_wait_exit "$pid" 20 || { kill -TERM "$pid"; vrnic_wait_exit "$pid" 5; VRNIC_RC=124; }
    ((VRNIC_RC == 0)) || rc=1
  fi
  local src=$VRNIC_RC
  ((crc == 0)) || rc=1
  echo "server: $(_vrnic_status_word "$src"); client: $(_vrnic_status_word "$crc")"
  if ((rc)); then
    echo "--- server:"; vrnic_tail "$CM_SERVER_LOG" 8
    echo "--- client:"; vrnic_tail "$CM_CLIENT_LOG" 8
  fi
  vrnicd_check_alive || rc=1
  return "$rc"
}

rping_pair() {  # ARGS for both sides (after -a/-p)
  local port
  port=$(next_port)
  cm_pair "rping-$port" rping -s -a 127.0.0.1 -p "$port" "$@" -- \
    rping -c -a 127.0.0.1 -p "$port" "$@" || return 1
  # -V: each side checks every ping's data and fails on a mismatch.
  if grep -qi 'data mismatch\|error' "$CM_CLIENT_LOG" "$CM_SERVER_LOG"; then
    grep -i 'mismatch\|error' "$CM_CLIENT_LOG" "$CM_SERVER_LOG" | head -5
    return 1
  fi
}

status_zero_both() {  # ucmatose and udaddy end with "return status 0" on each side
  local f
  for f in "$CM_SERVER_LOG" "$CM_CLIENT_LOG"; do
    grep -q 'return status 0' "$f" || { echo "FAIL: no 'return status 0' in ${f##*/}"; return 1; }
  done
}

ucmatose_pair() {
  cm_pair "ucmatose-$1" ucmatose -b 127.0.0.1 "${@:2}" -- ucmatose -s 127.0.0.1 "${@:2}" &&
    status_zero_both
}

udaddy_pair() {
  cm_pair udaddy udaddy -b 127.0.0.1 -- udaddy -s 127.0.0.1 && status_zero_both
}

sync_pair() {  # rdma_server/rdma_client and the x variants: "end 0" on both sides
  local srv=$1 cli=$2
  shift 2
  cm_pair "$srv" "$srv" "$@" -- "$cli" -s 127.0.0.1 "$@" || return 1
  grep -q "$srv: end 0" "$CM_SERVER_LOG" && grep -q "$cli: end 0" "$CM_CLIENT_LOG"
}

cmtime_1000() {
  CM_KEEP_SERVER=1 cm_pair cmtime cmtime -b 127.0.0.1 -c 1000 -- cmtime -s 127.0.0.1 -c 1000 ||
    return 1
  grep -E '^(connect|disconnect) ' "$CM_CLIENT_LOG"
  CHECK_NOTE=$(awk '$1 == "connect" { print "connect " $3 " ms total" }' "$CM_CLIENT_LOG")
  grep -q '^destroy ' "$CM_CLIENT_LOG"
}

# No listener on the port: REJECTED with reason 8 (rping prints the event and its status), and
# on a synchronous id (rdma_client) the call fails with ECONNREFUSED.
no_listener() {
  local port out rc=0
  ensure_vrnicd || return 1
  port=$(next_port)
  out=$("${CM_RUN[@]}" timeout 20 rping -c -a 127.0.0.1 -p "$port" -C 1 2>&1)
  echo "$out" | head -5
  grep -q 'RDMA_CM_EVENT_REJECTED, error 8' <<<"$out" || { echo "FAIL: no REJECTED 8"; rc=1; }
  out=$("${CM_RUN[@]}" timeout 20 rdma_client -s 127.0.0.1 -p "$port" 2>&1)
  echo "$out" | head -5
  grep -q 'rdma_connect: Connection refused' <<<"$out" || { echo "FAIL: no ECONNREFUSED"; rc=1; }
  return "$rc"
}

# A client SIGKILLed while connected: vrnicd abandons its connection (a DREQ to the server),
# the server sees DISCONNECTED and ends; nothing of either is left in vrnicd.
dead_client() {
  local port spid cpid
  ensure_vrnicd || return 1
  port=$(next_port)
  "${CM_RUN[@]}" timeout 60 rping -s -a 127.0.0.1 -p "$port" -C 1000000 \
    >"$VRNIC_TMP/dead.server.log" 2>&1 </dev/null &
  spid=$!
  _vrnic_track "$spid"
  wait_for 15 "the server's listener" stat_is cm_listeners 1 || return 1
  # No `timeout` around it: the PID is rping's own (env execs it), the one to kill.
  "${CM_RUN[@]}" stdbuf -oL rping -c -a 127.0.0.1 -p "$port" -C 1000000 -v \
    >"$VRNIC_TMP/dead.client.log" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  wait_for 15 "the client's pings" grep -q 'ping data' "$VRNIC_TMP/dead.client.log" || {
    kill -KILL "$cpid"
    return 1
  }
  echo "+ kill -KILL <rping client>"
  kill -KILL "$cpid"
  vrnic_wait_exit "$cpid" 5
  if ! vrnic_wait_exit "$spid" 15; then
    echo "FAIL: the server did not end after its peer died"
    vrnic_tail "$VRNIC_TMP/dead.server.log"
    return 1
  fi
  grep -a 'DISCONNECT EVENT' "$VRNIC_TMP/dead.server.log" || {
    echo "FAIL: the server got no DISCONNECTED"
    return 1
  }
  wait_objects_zero 10
}

check "librdmacm.so.1: exactly the symbols and versions of rdma-core 44's" abi
check "rdmacm-utils load vrnic's librdmacm.so.1 and libibverbs.so.1 (BIND_NOW)" loads_ours
check "rping -C 1000 -S 64 -V: one vrnicd" rping_pair -C 1000 -S 64 -V
check "rping -C 100 -S 65535 -V: one vrnicd (65535: rping's largest)" rping_pair -C 100 -S 65535 -V
check "rping -q -C 100 -V: the application's own QP (rdma_init_qp_attr)" rping_pair -q -C 100 -V
check "ucmatose -c 10" ucmatose_pair c10 -c 10
check "ucmatose -c 4 -m (rdma_migrate_id)" ucmatose_pair m4 -c 4 -m
check "udaddy (UD, SIDR)" udaddy_pair
check "rdma_server / rdma_client (synchronous ids, rdma_create_ep)" sync_pair rdma_server rdma_client
check "rdma_xserver / rdma_xclient -c r" sync_pair rdma_xserver rdma_xclient -c r
check "cmtime -c 1000" cmtime_1000
check "no listener: REJECTED reason 8; ECONNREFUSED on a sync id" no_listener
check "a client killed while connected: the server is told (DISCONNECTED), nothing left" dead_client
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left (CM ids and connections too), exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
