#!/usr/bin/env bash
# vrnicd lifecycle: clean exit on SIGTERM/SIGINT, socket-path rules, reclaiming the objects of
# a client killed with SIGKILL in the middle of a transfer.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init lifecycle

# Each check starts its own vrnicd and stops it again.
stop_with() {
  start_vrnicd || return 1
  stop_vrnicd "$1"
}

# `vrnicd` with no --socket uses $VRNIC_SOCKET; vrnicctl and the provider find it the same way.
socket_from_env() {
  local dir=$VRNIC_TMP/env-socket sock out=$VRNIC_TMP/env-socket.devices
  mkdir -p "$dir"
  sock=$dir/from-env.sock
  _vrnicd_spawn "$sock" "$dir/vrnicd.log" env VRNIC_SOCKET="$sock" "$VRNICD" || return 1
  local ok=0
  echo "+ VRNIC_SOCKET=$sock vrnicctl stats"
  VRNIC_SOCKET=$sock timeout -k 2 10 "$VRNICCTL" stats || { echo "FAIL: vrnicctl via \$VRNIC_SOCKET"; ok=1; }
  echo "+ VRNIC_SOCKET=$sock ibv_devices"
  vrun VRNIC_SOCKET="$sock" timeout -k 2 10 ibv_devices >"$out" 2>&1 </dev/null
  cat "$out"
  awk '$1 == "vrnic0" { f = 1 } END { exit !f }' "$out" ||
    { echo "FAIL: ibv_devices via \$VRNIC_SOCKET does not list vrnic0"; ok=1; }
  stop_vrnicd TERM "$sock" || ok=1
  return "$ok"
}

# With neither --socket nor $VRNIC_SOCKET, the socket is $XDG_RUNTIME_DIR/vrnicd.sock.
socket_from_xdg() {
  local xdg=$VRNIC_TMP/xdg out=$VRNIC_TMP/xdg.devices ok=0
  mkdir -p "$xdg" && chmod 700 "$xdg"
  _vrnicd_spawn "$xdg/vrnicd.sock" "$xdg/vrnicd.log" \
    env -u VRNIC_SOCKET XDG_RUNTIME_DIR="$xdg" "$VRNICD" || return 1
  echo "+ XDG_RUNTIME_DIR=$xdg vrnicctl stats   # VRNIC_SOCKET unset"
  env -u VRNIC_SOCKET XDG_RUNTIME_DIR="$xdg" timeout -k 2 10 "$VRNICCTL" stats ||
    { echo "FAIL: vrnicctl does not find the daemon at \$XDG_RUNTIME_DIR/vrnicd.sock"; ok=1; }
  echo "+ XDG_RUNTIME_DIR=$xdg ibv_devices   # VRNIC_SOCKET unset"
  vrun env -u VRNIC_SOCKET XDG_RUNTIME_DIR="$xdg" timeout -k 2 10 ibv_devices >"$out" 2>&1 </dev/null
  cat "$out"
  awk '$1 == "vrnic0" { f = 1 } END { exit !f }' "$out" ||
    { echo "FAIL: the provider does not find the daemon at \$XDG_RUNTIME_DIR/vrnicd.sock"; ok=1; }
  stop_vrnicd TERM "$xdg/vrnicd.sock" || ok=1
  return "$ok"
}

# A perftest client is SIGKILLed while ib_write_bw runs; vrnicd must free everything it (and
# then the server, which exits) owned, and keep running. PATH worker: its WRITEs go through
# vrnicd's workers (VRNIC_DIRECT_PATH=0 in both), under way once vrnicd sent 20000 packets;
# direct: on the same-host direct path, under way once 20000 took it.
sigkill_reclaim() {
  local port cpid deadline ok=0 stat=direct_ops
  if [[ $1 == worker ]]; then
    local -x VRNIC_DIRECT_PATH=0  # for both ends, until this returns
    stat=packets_sent
  fi
  require_provider || return 1
  start_vrnicd || return 1
  port=$(next_port)
  start_server sigkill "$port" ib_write_bw -d vrnic0 -x 0 -F -s 65536 -D 30 -p "$port" ||
    return 1
  CLIENT_LOG=$VRNIC_TMP/sigkill.client.log
  echo "+ ib_write_bw -d vrnic0 -x 0 -F -s 65536 -D 30 -p $port 127.0.0.1 &   # client, to be SIGKILLed"
  # No `timeout` wrapper: $! must be the client itself. We kill it below in any case.
  "${VRUN[@]}" ib_write_bw -d vrnic0 -x 0 -F -s 65536 -D 30 -p "$port" 127.0.0.1 \
    >"$CLIENT_LOG" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  # The transfer is well under way once 20000 packets (or direct WRITEs) went (perftest's own
  # output is block-buffered into the log, so it tells nothing until the end).
  under_way() { stat_over "$stat" 20000 || ! _vrnic_running "$cpid"; }
  if ! wait_for 20 "20000 $stat" under_way || ! _vrnic_running "$cpid"; then
    echo "FAIL: the client never started its transfer. Client output:"
    vrnic_tail "$CLIENT_LOG"
    echo "Server output:"
    vrnic_tail "$SERVER_LOG"
    return 1
  fi
  echo "vrnicd stats during the transfer:"
  vrnicctl_stats | sed 's/^/    /'
  echo "+ kill -KILL $cpid (client, mid-transfer)"
  kill -KILL "$cpid"
  vrnic_wait_exit "$cpid" 5
  # The server loses its TCP peer and exits (with an error, as perftest does).
  finish_server 15
  echo "server: $(_vrnic_status_word "$VRNIC_RC") (any status is fine here)"
  vrnicd_check_alive || return 1
  wait_objects_zero 10 || ok=1
  stop_vrnicd TERM || ok=1
  return "$ok"
}

check "vrnicd exits 0 on SIGTERM and removes its socket" stop_with TERM
check "vrnicd exits 0 on SIGINT and removes its socket" stop_with INT
check "vrnicd, vrnicctl and the provider use \$VRNIC_SOCKET" socket_from_env
check "vrnicd, vrnicctl and the provider default to \$XDG_RUNTIME_DIR/vrnicd.sock" socket_from_xdg
check "client SIGKILLed mid-transfer (ib_write_bw, worker path): vrnicd frees all its objects" \
  sigkill_reclaim worker
check "client SIGKILLed mid-transfer (ib_write_bw, direct path): vrnicd frees all its objects" \
  sigkill_reclaim direct

# Every open of the device (one per verbs program, ibv_devinfo's included) used to leave vrnicd
# one fd more: its copy of the event pipe the client sends with Hello. 10,000 opens and closes
# must leave vrnicd's fd count as it was (issue 17, row 7).
open_close_fds() {
  local before after
  # shellcheck disable=SC2119 # the default vrnicd
  ensure_vrnicd || return 1
  before=$(vrnicd_fds "$VRNICD_PID")
  vrnic_fg "${VRUN[@]}" timeout -k 5 120 "$VRNIC_BUILD_DIR/tests/open_close" 10000 || return 1
  wait_objects_zero 10 || return 1
  after=$(vrnicd_fds "$VRNICD_PID")
  echo "vrnicd's open fds: $before before, $after after"
  ((after == before)) || { echo "FAIL: vrnicd leaked $((after - before)) fds"; return 1; }
  CHECK_NOTE="$before fds before and after"
}
check "10,000 ibv_open_device/ibv_close_device cycles: vrnicd's fd count unchanged" open_close_fds

# A client shrinking or growing a region it shares with vrnicd (its session, its CQ, QP and MR
# memory), or writing the daemon region every client reads: refused by the memfds' seals, and
# vrnicd serves on (issue 17, rows 4 and 12; unsealed, the shrink killed vrnicd with SIGBUS).
regions_sealed() {
  # shellcheck disable=SC2119 # the default vrnicd
  ensure_vrnicd || return 1
  vrnic_fg "${VRUN[@]}" timeout -k 5 60 "$VRNIC_BUILD_DIR/tests/region_attack" || return 1
  vrnicd_check_alive || return 1
  wait_objects_zero 10
}
check "shrinking, growing or writing the regions shared with vrnicd is refused; vrnicd serves on" \
  regions_sealed

# Memory hooks as UCX's UCM has them (its own mmap/munmap/mremap in place of libc's) must not
# see ibv_reg_mr remap the buffer it registers: UCX takes that for the program unmapping its
# buffer and drops its registration (issue 18: every UCX transport then read zeros).
reg_mr_unseen() {
  # shellcheck disable=SC2119 # the default vrnicd
  ensure_vrnicd || return 1
  vrnic_fg "${VRUN[@]}" timeout -k 5 60 "$VRNIC_BUILD_DIR/tests/mem_hooks" || return 1
  wait_objects_zero 10
}
check "ibv_reg_mr is invisible to memory hooks (UCX's UCM): no mmap/mremap/munmap on the buffer" \
  reg_mr_unseen

# The /dev/infiniband node UCX looks for (ibv_device.dev_name): made by a root vrnicd, an
# alias of /dev/null that nobody reads, gone after SIGTERM; after SIGKILL it stays until the
# next vrnicd on that socket replaces it (issue 18).
nodes() { ls /dev/infiniband/vrnic_* 2>/dev/null; }
device_node() {
  ((EUID == 0)) || { echo "needs root"; return 1; }
  local rc=0 node out pid before
  before=$(nodes)
  start_vrnicd || return 1
  node=$(comm -13 <(echo "$before") <(nodes))  # the node this vrnicd made
  [[ -n $node ]] || { echo "FAIL: no new node in /dev/infiniband while vrnicd runs"; return 1; }
  ls -l "$node"
  [[ $(stat -c '%F %t:%T %a' "$node" 2>/dev/null) == "character special file 1:3 600" ]] ||
    { echo "FAIL: $node is not a character device 1:3 mode 600"; rc=1; }
  echo "+ ucx_info -d   # through vrnic's libibverbs"
  out=$(vrun timeout 30 ucx_info -d 2>&1)
  grep -E "Transport: (rc|ud)_verbs" -A1 <<<"$out" | sed 's/^/    /'
  for t in rc_verbs ud_verbs; do
    grep -A1 "Transport: $t" <<<"$out" | grep -q "Device: vrnic0:1" ||
      { echo "FAIL: ucx_info -d does not list $t on vrnic0:1"; rc=1; }
  done
  stop_vrnicd TERM || rc=1
  [[ -e $node ]] && { echo "FAIL: $node left after SIGTERM"; rc=1; }
  # SIGKILL: left behind, then replaced by the next vrnicd on the same socket.
  local sock=$VRNIC_SOCKET dir=${VRNIC_SOCKET%/*}
  _vrnicd_spawn "$sock" "$dir/again.log" "$VRNICD" --socket "$sock" || return 1
  pid=$VRNICD_PID
  kill -KILL "$pid"
  vrnic_wait_exit "$pid" 5
  rm -f "$sock"
  [[ -c $node ]] && echo "after SIGKILL: $node still there, as expected"
  _vrnicd_spawn "$sock" "$dir/third.log" "$VRNICD" --socket "$sock" || return 1
  [[ -c $node ]] || { echo "FAIL: the next vrnicd did not make $node"; rc=1; }
  stop_vrnicd TERM "$sock" || rc=1
  [[ -e $node ]] && { echo "FAIL: $node left after the next vrnicd's SIGTERM"; rc=1; }
  return "$rc"
}
check "a root vrnicd makes the /dev/infiniband node UCX needs (ucx_info -d lists vrnic0:1); gone after SIGTERM, replaced after SIGKILL" \
  device_node

# Without root: one line says UCX will not see the device and what root command fixes it.
device_node_notice() {
  local dir=/tmp/vrnic-node-$$ out rc=0
  # nobody runs a copy: the checkout may be under a directory it cannot enter (a 0700 home).
  mkdir -p "$dir" && chmod 0777 "$dir" && cp "$VRNICD" "$dir/" && chmod 0755 "$dir/vrnicd" ||
    return 1
  out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups timeout -s INT 3 \
    "$dir/vrnicd" --socket "$dir/vrnicd.sock" 2>&1)
  rm -rf "$dir"
  echo "vrnicd as nobody: $out"
  [[ $(grep -c "UCX will not list the device" <<<"$out") == 1 ]] ||
    { echo "FAIL: want one line saying UCX will not see the device"; rc=1; }
  grep -q "sudo sh -c 'mkdir -p /dev/infiniband && mknod" <<<"$out" ||
    { echo "FAIL: the line does not give the root command"; rc=1; }
  return "$rc"
}
check "vrnicd without root: one line saying UCX will not see the device, with the root command" \
  device_node_notice

# A client in a mount namespace and chroot of its own (as in a container, or under
# `ip netns exec` on a machine that is itself a chroot): its /proc is a mount vrnicd's root
# does not hold, so its /proc/self/mem reads to vrnicd as ".../root/proc/<pid>/mem". It opens
# the device and moves data through memory vrnicd reaches that way (ibv_rc_pingpong's buffers
# are not memfds). Root only (mount namespace, chroot).
chrooted_client() {
  local dir=$VRNIC_TMP/chroot-client sock out rc=0
  ((EUID == 0)) || { echo "skipped: needs root"; CHECK_NOTE="not root"; return 0; }
  mkdir -p "$dir/root" && sock=$dir/vrnicd.sock
  _vrnicd_spawn "$sock" "$dir/vrnicd.log" "$VRNICD" --socket "$sock" || return 1
  echo "+ unshare -m: / bound at $dir/root, a new proc there, chroot; ibv_devinfo, ibv_rc_pingpong"
  out=$(unshare --mount --propagation private -- sh -c '
    mount --rbind / "$1" && mount -t proc proc "$1/proc" || exit 9
    exec chroot "$1" env VRNIC_SOCKET="$2" LD_LIBRARY_PATH="$3" sh -c "
      timeout 10 ibv_devinfo -d vrnic0 | grep -c PORT_ACTIVE &&
      { timeout 20 ibv_rc_pingpong -d vrnic0 -g 0 -p $4 -n 100 & sleep 0.5;
        timeout 20 ibv_rc_pingpong -d vrnic0 -g 0 -p $4 -n 100 127.0.0.1; c=\$?; wait \$!; s=\$?;
        echo pingpong client \$c server \$s; [ \$c = 0 ] && [ \$s = 0 ]; }"
  ' _ "$dir/root" "$sock" "$VRNIC_PROVIDER_DIR" "$(next_port)" 2>&1) || rc=1
  echo "$out"
  stop_vrnicd TERM "$sock" || rc=1
  ((rc == 0)) || echo "FAIL: the chrooted client could not use vrnic0"
  return "$rc"
}
check "a client in a chroot and mount namespace of its own (its /proc elsewhere) opens vrnic0 and moves data" \
  chrooted_client

# perf/qp_scale (issue 29): thousands of RC QPs in pairs on one vrnicd, each moving a slice of
# its own, in random order; qp_scale compares every slice with what its peer sent and counts
# every completion (its exit status); vrnicd holds no object after.
QP_SCALE=$VRNIC_BUILD_DIR/perf/qp_scale
qp_scale() {
  local out rc=0
  require_provider || return 1
  ensure_vrnicd || return 1
  out=$(vrun timeout -k 5 120 "$QP_SCALE" -r -t 1 "$@" 2>&1) || rc=1
  echo "$out"
  CHECK_NOTE=$(tail -n 1 <<<"$out" | awk -F, '{ printf "%s msgs/s, create %ss, connect %ss", $10, $7, $8 }')
  wait_objects_zero 10 || rc=1
  return "$rc"
}
for op in write send read; do
  check "qp_scale: 4096 RC QPs, 2 ${op}s of 4 KiB outstanding on each, random order: every byte and completion" \
    qp_scale -q 4096 -k 2 -o "$op"
done

# A client holding 16,384 QPs that exits without destroying them, and one SIGKILLed with as
# many in traffic: vrnicd frees everything.
qp_scale_exit() {
  local rc=0
  require_provider || return 1
  ensure_vrnicd || return 1
  vrun timeout -k 5 180 "$QP_SCALE" -q 16384 -t 1 -s 64 -X || rc=1
  wait_objects_zero 20 || rc=1
  echo "+ qp_scale -q 16384 -t 60 -s 64 &   # to be SIGKILLed in its traffic"
  "${VRUN[@]}" "$QP_SCALE" -q 16384 -t 60 -s 64 >"$VRNIC_TMP/qp_scale_kill.log" 2>&1 </dev/null &
  local cpid=$!
  _vrnic_track "$cpid"
  at_rts() { grep -q '16384 QPs at RTS' "$VRNIC_TMP/qp_scale_kill.log" || ! _vrnic_running "$cpid"; }
  wait_for 120 "16,384 QPs at RTS" at_rts
  sleep 0.5
  echo "vrnicd: qps=$(vrnic_stat qps) while the client runs"
  [[ $(vrnic_stat qps) == 16384 ]] || { echo "FAIL: want 16384 QPs in vrnicd"; rc=1; }
  # vrnicctl qps filtered by vrnicd (by session, by state) and cut short (--limit).
  local first session n
  first=$(timeout 10 "$VRNICCTL" --socket "$VRNIC_SOCKET" qps --state RTS --limit 1)
  session=$(sed -n 's/.* session=\([0-9]*\) .*/\1/p' <<<"$first")
  echo "vrnicctl qps --state RTS --limit 1: ${first:0:60}..."
  n=$(timeout 20 "$VRNICCTL" --socket "$VRNIC_SOCKET" qps --session "${session:-0}" | grep -c "session=$session ")
  echo "vrnicctl qps --session $session: $n lines"
  ((n == 16384)) || { echo "FAIL: want the session's 16,384 QPs"; rc=1; }
  n=$(timeout 10 "$VRNICCTL" --socket "$VRNIC_SOCKET" qps --state RTS --limit 5 | grep -c ' state=RTS ')
  ((n == 5)) || { echo "FAIL: --limit 5 listed $n"; rc=1; }
  n=$(timeout 10 "$VRNICCTL" --socket "$VRNIC_SOCKET" qps --state ERR | wc -l)
  ((n == 0)) || { echo "FAIL: --state ERR listed $n QPs, none is in ERR"; rc=1; }
  kill -KILL "$cpid"
  vrnic_wait_exit "$cpid" 10
  wait_objects_zero 20 || rc=1
  vrnicd_check_alive || rc=1
  return "$rc"
}
check "a client exits holding 16,384 QPs, another is SIGKILLed in traffic with as many: vrnicd frees them all; vrnicctl qps filters them" \
  qp_scale_exit

# Every limit ibv_query_device reports can be reached, and one more is refused (ENOMEM):
# under small --limits for every kind (the CQs' 999: a ring is a mapping, and mappings=1000
# leaves one for the session page), and at the defaults for QPs (65,536, the device's max_qp,
# in one context: its QPs' rings share a few chunks of its ring arena, not a mapping each).
QUOTA_FILL=$VRNIC_BUILD_DIR/tests/quota_fill
reported_limits() {
  local rc=0 out
  require_provider || return 1
  start_vrnicd --limits pds=300,cqs=5000,srqs=100,ahs=250,mws=300,mrs=400,qps=150,mappings=1000 ||
    return 1
  out=$(vrun timeout -k 5 60 "$QUOTA_FILL" limits 2>&1) || rc=1
  echo "$out"
  grep -q '^cqs limit=999 ' <<<"$out" || { echo "FAIL: max_cq is not lowered to the mappings"; rc=1; }
  stop_vrnicd TERM || rc=1
  start_vrnicd || return 1
  out=$(vrun timeout -k 5 60 "$QUOTA_FILL" limits qps 2>&1) || rc=1
  echo "$out"
  grep -q '^qps limit=65536 made=65536 refused=ENOMEM ok$' <<<"$out" || rc=1
  stop_vrnicd TERM || rc=1
  return "$rc"
}
check "each limit ibv_query_device reports is reached, one more is ENOMEM (small --limits; QPs at the default)" \
  reported_limits

# ibv_reg_mr finds the mappings it crosses with PROCMAP_QUERY (Linux 6.11); older kernels read
# /proc/self/maps whole. Both ways register the same (the verbs data tests move and check
# bytes through MRs of every kind of memory), the second forced here by VRNIC_MAPS_BY_READING.
VERBS_DATA_TEST=$VRNIC_BUILD_DIR/tests/verbs_data_test
maps_by_reading() {
  require_provider || return 1
  ensure_vrnicd || return 1
  vrun env VRNIC_MAPS_BY_READING=1 timeout -k 5 120 "$VERBS_DATA_TEST" "[memory],[fork],[write]" || return 1
  wait_objects_zero 10
}
check "ibv_reg_mr the older kernels' way (reading /proc/self/maps whole): the MR data tests pass" \
  maps_by_reading

# Issue 29: registering memory and making CQs, SRQs and MWs stops no worker. vrnicd's
# worker_stops across a process that makes 1,000 of each (and keeps them) grows by exactly
# what it grows across one that makes none (its open, and vrnicctl's own calls).
CONTROL_OPS=$VRNIC_BUILD_DIR/perf/control_ops
stops_across() {  # N: worker_stops from before control_ops --hold N starts to when it has made all
  local n=$1 fifo=$VRNIC_TMP/hold.$1 out=$VRNIC_TMP/hold.$1.out before after hold pid
  rm -f "$fifo" && mkfifo "$fifo" || return 1
  before=$(vrnic_stat worker_stops) || return 1
  "${VRUN[@]}" timeout -k 5 60 "$CONTROL_OPS" --hold "$n" <"$fifo" >"$out" 2>&1 &
  pid=$!
  exec {hold}>"$fifo"
  made() { grep -q '^made=' "$out"; }
  wait_for 30 "control_ops to make $n of each" made || { exec {hold}>&-; return 1; }
  after=$(vrnic_stat worker_stops)
  exec {hold}>&-
  vrnic_wait_exit "$pid" 20
  echo $((after - before))
}
creation_stops_nothing() {
  local none many
  require_provider || return 1
  ensure_vrnicd || return 1
  none=$(stops_across 0) || return 1
  many=$(stops_across 1000) || return 1
  echo "worker_stops: +$none across a process that made nothing, +$many across one that made 1,000 MRs, CQs, SRQs and MWs"
  CHECK_NOTE="+$many for 4,000 objects, +$none for none"
  wait_objects_zero 10 || return 1
  [[ $none == "$many" ]]
}
check "1,000 ibv_reg_mr, ibv_create_cq, ibv_create_srq and ibv_alloc_mw each stop no worker (worker_stops)" \
  creation_stops_nothing

# Issue 29: while one process streams 64 KiB writes on a QP pair (qp_scale, every byte
# compared at the end), another registers and deregisters MRs, creates and destroys CQs, and
# creates, modifies and destroys QPs, over and over (control_ops). No worker is parked for any
# of it: worker_stops does not move, while grace_periods (what destroying waits for instead)
# does (with two workers the rebalancer may move a QP, in a stop of its own: counted in
# qp_moves, and taken off). The stream's longest wait for a completion is shown, never asserted (timing). With
# one worker, then two (a grace period then spans both).
control_beside_stream() {
  local stops0 stops1 grace0 grace1 out=$VRNIC_TMP/stream.csv churn=$VRNIC_TMP/churn.log
  local spid rc rounds=0 gap moves0 moves1 stops
  require_provider || return 1
  if [[ -n ${1:-} ]]; then
    stop_vrnicd TERM || return 1
    start_vrnicd "$@" || return 1
  fi
  ensure_vrnicd || return 1
  stops0=$(vrnic_stat worker_stops) && grace0=$(vrnic_stat grace_periods) &&
    moves0=$(vrnic_stat qp_moves) || return 1
  echo "+ qp_scale -q 2 -k 16 -s 65536 -t 3 &   # the stream"
  "${VRUN[@]}" timeout -k 5 120 "$QP_SCALE" -q 2 -k 16 -s 65536 -t 3 >"$out" 2>&1 </dev/null &
  spid=$!
  echo "+ control_ops 50, again and again while the stream runs"
  while _vrnic_running "$spid"; do
    "${VRUN[@]}" timeout -k 5 60 "$CONTROL_OPS" 50 >"$churn" 2>&1 || { cat "$churn"; kill "$spid"; return 1; }
    rounds=$((rounds + 1))
  done
  vrnic_wait_exit "$spid" 60
  rc=$VRNIC_RC
  stops1=$(vrnic_stat worker_stops) && grace1=$(vrnic_stat grace_periods) &&
    moves1=$(vrnic_stat qp_moves) || return 1
  stops=$((stops1 - stops0 - (moves1 - moves0)))
  cat "$out"
  gap=$(awk -F, 'NR == 2 { print $NF }' "$out")
  echo "control_ops 50 x $rounds beside the stream: worker_stops +$stops (besides $((moves1 - moves0)) QP moves), grace_periods +$((grace1 - grace0)); the stream's longest wait for a completion: ${gap:-?} us"
  CHECK_NOTE="$rounds x 50 rounds; stops +$stops; longest completion wait ${gap:-?} us"
  if [[ -n ${1:-} ]]; then
    stop_vrnicd TERM || return 1
    start_vrnicd || return 1
  fi
  # Each round of control_ops: one dereg_mr (one grace period) and one destroy_qp (two).
  ((rc == 0 && rounds > 0 && stops == 0 && grace1 - grace0 >= 150 * rounds))
}
check "control calls beside a stream of writes park no worker (worker_stops +0), one worker" \
  control_beside_stream
check "control calls beside a stream of writes park no worker (worker_stops +0), two workers" \
  control_beside_stream --workers 2

vrnic_script_finish
