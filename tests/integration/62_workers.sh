#!/usr/bin/env bash
# Several workers (vrnicd --workers 2): each QP runs on one worker (the least loaded when it
# is created); a packet that reaches the other worker is handed over, and CQs and SRQs used
# from both take a lock. Checked with everything crossing workers:
#   - one vrnicd, the loop port: both ends of a connection on the same daemon, one QP on each
#     worker (perftest, pingpong, SRQ pingpong; the QPs seen on both workers in vrnicctl qps);
#   - the Catch2 data-path and API suites against a two-worker vrnicd;
#   - two vrnicd over udp on 127.0.0.1 and 127.0.0.2, two workers each (a udp port per worker):
#     perftest with 16 QPs, pingpong, and the wire integrity test at 1% loss;
#   - QPs moved between workers mid-traffic (vrnicctl move, every 100 ms, during pingpong with
#     data checks and during the integrity test) and by vrnicd's own rebalancing.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init workers
# shellcheck source=tests/lib_hosts.sh
source "$VRNIC_ROOT/tests/lib_hosts.sh"

UDP_PORT=$(free_udp_port 2) || exit 1  # and the one after it
start_loop_host() { host_vrnicd w - --workers 2; }
on_loop() { with_hosts start_loop_host w -- "$@"; }

start_udp_hosts() {
  host_vrnicd u1 - --workers 2 --udp 127.0.0.1 --udp-port "$UDP_PORT" &&
    host_vrnicd u2 - --workers 2 --udp 127.0.0.2 --udp-port "$UDP_PORT"
}
on_udp() { with_hosts start_udp_hosts u1 u2 -- "$@"; }

# bw_run_start TAG ARGS...: ib_write_bw ARGS, server and client on the two-worker vrnicd,
# running in the background; bw_run_finish TAG waits for both and fails if the client did.
# Their WRITEs go through the workers (VRNIC_DIRECT_PATH=0): what the checks watch.
bw_run_start() {
  local tag=$1
  local -x VRNIC_DIRECT_PATH=0
  shift
  BW_PORT=$(next_port)
  VRNIC_SOCKET=${SOCK[w]} start_server "$tag" "$BW_PORT" ib_write_bw -d vrnic0 -x 0 -F "$@" \
    -p "$BW_PORT" || return 1
  VRNIC_SOCKET=${SOCK[w]} "${VRUN[@]}" timeout -k 5 60 ib_write_bw -d vrnic0 -x 0 -F "$@" \
    -p "$BW_PORT" 127.0.0.1 >"$HOSTS_DIR/$tag.client.log" 2>&1 </dev/null &
  BW_CPID=$!
  _vrnic_track "$BW_CPID"
}
bw_run_finish() {
  vrnic_wait_exit "$BW_CPID" 30
  local crc=$VRNIC_RC
  finish_server 10
  ((crc == 0)) || { echo "FAIL: the client failed"; tail -n 5 "$HOSTS_DIR/$1.client.log"; return 1; }
}

# The QPs of a run are spread over both workers: `vrnicctl qps` during ib_write_bw -q 4.
spread() {
  local out ok=0
  bw_run_start spread -q 4 -D 4 || return 1
  wait_for 20 "8 QPs moving data" qps_moving "${SOCK[w]}" 8 || ok=1
  out=$(timeout -k 2 10 "$VRNICCTL" --socket "${SOCK[w]}" qps 2>&1)
  bw_run_finish spread || ok=1
  grep -o 'qpn=[^ ]* type=[^ ]* state=[^ ]* session=[^ ]* worker=[0-9]*' <<<"$out" | sed 's/^/    /'
  for w in 0 1; do
    grep -q "worker=$w" <<<"$out" || { echo "FAIL: no QP on worker $w"; ok=1; }
  done
  CHECK_NOTE="$(grep -c 'worker=0' <<<"$out") QPs on worker 0, $(grep -c 'worker=1' <<<"$out") on 1"
  return "$ok"
}
check "QPs are spread over both workers (vrnicctl qps during ib_write_bw -q 4)" on_loop spread

for t in "ib_write_bw -s 65536 -n 2000" "ib_write_bw -s 65536 -q 4 -n 1000" \
  "ib_read_bw -s 65536 -q 4 -n 1000" "ib_send_bw -s 65536 -n 2000" "ib_atomic_bw -n 2000" \
  "ib_write_lat -n 1000" "ib_send_lat -n 1000"; do
  read -ra cmd <<<"$t"
  check "$t: one vrnicd, two workers (loop port)" on_loop perftest_between w w "${cmd[@]}"
done
# Two workers and two ib_write_lat spinning on memory (never yielding) on two cores: a worker
# left to wait for a scheduler tick made round trips of up to 4 ms (see worker.cpp), and this
# took 17 s to minutes; now ~2 s. The timeout, 1 ms a round trip, is a bound on that stall.
VRNIC_TEST_TIMEOUT=20 check \
  "ib_write_lat -n 20000: one vrnicd, two workers, no worker left waiting for a tick" \
  on_loop perftest_between w w ib_write_lat -n 20000
for p in ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong; do
  check "$p: one vrnicd, two workers (loop port)" on_loop pingpong_between w w "$p"
done

# The Catch2 suites of the catch2 group, against the two-worker vrnicd.
catch2_suite() {
  local name=$1 out rc
  out=$HOSTS_DIR/$name.out
  echo "+ VRNIC_SOCKET=${SOCK[w]} $name"
  VRNIC_SOCKET=${SOCK[w]} VRNICCTL=$VRNICCTL vrnic_fg "${VRUN[@]}" timeout -k 5 300 \
    "$VRNIC_BUILD_DIR/tests/$name" -r compact >"$out" 2>&1 </dev/null
  rc=$?
  tail -n 15 "$out"
  CHECK_NOTE=$(grep -oE '(Passed all|Failed).*' "$out" | tail -n 1)
  ((rc == 0)) && _vrnic_running "${PID[w]}"
}
# A client killed mid-transfer (QPs on both workers): everything it made goes, the daemon
# carries on.
dead_client() {
  local port cpid spid
  local -x VRNIC_DIRECT_PATH=0  # killed while the workers carry their QPs
  port=$(next_port)
  echo "+ ib_write_bw -q 4 -D 20 (server and client on the two-worker vrnicd); kill -KILL both"
  VRNIC_SOCKET=${SOCK[w]} "${VRUN[@]}" ib_write_bw -d vrnic0 -x 0 -F -q 4 -D 20 -p "$port" \
    >"$HOSTS_DIR/dead.server.log" 2>&1 </dev/null &
  spid=$!
  _vrnic_track "$spid"
  wait_listen "$port" "$spid" 10 || { echo "FAIL: the server did not listen"; return 1; }
  VRNIC_SOCKET=${SOCK[w]} "${VRUN[@]}" ib_write_bw -d vrnic0 -x 0 -F -q 4 -D 20 -p "$port" \
    127.0.0.1 >"$HOSTS_DIR/dead.client.log" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  wait_for 20 "8 QPs moving data" qps_moving "${SOCK[w]}" 8
  kill -KILL "$cpid" "$spid" 2>/dev/null
  vrnic_wait_exit "$cpid" 5
  vrnic_wait_exit "$spid" 5
  VRNIC_SOCKET=${SOCK[w]} wait_objects_zero 10 || return 1
  _vrnic_running "${PID[w]}" || { echo "FAIL: vrnicd died"; return 1; }
  pingpong_between w w ibv_rc_pingpong >/dev/null || { echo "FAIL: no traffic afterwards"; return 1; }
}
check "clients killed mid-transfer: their objects go, the two-worker vrnicd carries on" \
  on_loop dead_client

for t in verbs_data_test api_test wr_api_test; do
  check "$t against a two-worker vrnicd" on_loop catch2_suite "$t"
done

for t in "ib_write_bw -s 65536 -q 16 -n 1000" "ib_read_bw -s 65536 -q 4 -n 1000" \
  "ib_send_bw -s 4096 -q 4 -n 2000"; do
  read -ra cmd <<<"$t"
  check "$t: two vrnicd over udp, two workers each" on_udp perftest_between u1 u2 "${cmd[@]}"
done
check "ibv_rc_pingpong: two vrnicd over udp, two workers each" \
  on_udp pingpong_between u1 u2 ibv_rc_pingpong

# perf/qp_scale across the two vrnicd (issue 29): 1024 RC QPs, half in a process on each
# daemon, QP i of one paired with QP i of the other, both ends writing (sending, reading) at
# once, 2 WRs outstanding on each; each process compares every byte that landed in its buffer
# and counts every completion (it exits 1 otherwise).
QP_SCALE=$VRNIC_BUILD_DIR/perf/qp_scale
qp_scale_across() {
  local port out1=$HOSTS_DIR/qp_scale_across.1.log out2=$HOSTS_DIR/qp_scale_across.2.log
  local p1 p2 rc1=1 rc2=1
  port=$(next_port)
  echo "+ qp_scale -q 1024 -k 2 -t 2 $* -L $port (on u1) / -C 127.0.0.1:$port (on u2)"
  VRNIC_SOCKET=${SOCK[u1]} "${VRUN[@]}" timeout -k 5 120 "$QP_SCALE" -q 1024 -k 2 -t 2 "$@" \
    -L "$port" >"$out1" 2>&1 </dev/null &
  p1=$!
  _vrnic_track "$p1"
  VRNIC_SOCKET=${SOCK[u2]} "${VRUN[@]}" timeout -k 5 120 "$QP_SCALE" -q 1024 -k 2 -t 2 "$@" \
    -C "127.0.0.1:$port" >"$out2" 2>&1 </dev/null &
  p2=$!
  _vrnic_track "$p2"
  vrnic_wait_exit "$p1" 150 && rc1=$VRNIC_RC
  vrnic_wait_exit "$p2" 150 && rc2=$VRNIC_RC
  echo "u1's process (exit $rc1):"; cat "$out1"
  echo "u2's process (exit $rc2):"; cat "$out2"
  CHECK_NOTE="$(awk -F, '$1 ~ /^(write|send|read)$/ { print $15 " completions, " $16 " bad bytes" }' "$out1") on u1"
  ((rc1 == 0 && rc2 == 0))
}
for op in write send read; do
  check "qp_scale across two vrnicd over udp: 1024 RC QPs, ${op}s both ways, every byte and completion" \
    on_udp qp_scale_across -o "$op"
done

check "udp counters of the two-worker daemons: no ICRC or format errors" \
  on_udp clean_counters u1 u2

# mover NAME...: moves every QP of these daemons to the other worker, every 100 ms, until
# killed (its pid in MOVER_PID).
mover() {
  (
    while :; do
      for d in "$@"; do
        "$VRNICCTL" --socket "${SOCK[$d]}" qps 2>/dev/null |
          sed -n 's/^qpn=\(0x[0-9a-f]*\) .* worker=\([01]\).*/\1 \2/p' |
          while read -r qpn on; do "$VRNICCTL" --socket "${SOCK[$d]}" move "$qpn" $((1 - on)); done
      done
      sleep 0.1  # the mover's pace: ten rounds a second, time itself
    done
  ) >/dev/null 2>&1 &
  MOVER_PID=$!
  _vrnic_track "$MOVER_PID"
}
stop_mover() {
  kill "$MOVER_PID" 2>/dev/null
  vrnic_wait_exit "$MOVER_PID" 5
}
moves_of() { stat_of qp_moves "$1"; }

# moving D1 D2 CMD...: CMD with the mover at work on daemons D1 and D2 (may be the same);
# at least one QP must have moved meanwhile.
moving() {
  local daemons=("$1") before after rc d
  [[ $2 != "$1" ]] && daemons+=("$2")
  shift 2
  before=0
  for d in "${daemons[@]}"; do before=$((before + $(moves_of "$d"))); done
  mover "${daemons[@]}"
  "$@"
  rc=$?
  stop_mover
  after=0
  for d in "${daemons[@]}"; do after=$((after + $(moves_of "$d"))); done
  echo "QPs moved meanwhile: $((after - before))"
  ((after > before)) || { echo "FAIL: no QP was moved"; return 1; }
  CHECK_NOTE="${CHECK_NOTE:+$CHECK_NOTE, }$((after - before)) moves"
  return "$rc"
}

integrity() { integrity_between u1 127.0.0.1 u2 127.0.0.2 256M; }
check "wire integrity test, 256 MiB at 1% loss: two vrnicd over udp, two workers each" \
  on_udp integrity

# Moving QPs loses and reorders nothing: every byte and completion still checked.
check "QPs moved every 100 ms during ibv_rc_pingpong -n 10000 (data checked), loop port" \
  on_loop moving w w pingpong_between w w ibv_rc_pingpong -n 10000
check "QPs moved every 100 ms during the wire integrity test at 1% loss, udp" \
  on_udp moving u1 u2 integrity

refuse_moves() {
  local ok=0 out
  for args in "0xffffff 0" "0x10 9" "x 1"; do
    read -ra a <<<"$args"
    out=$(timeout -k 2 10 "$VRNICCTL" --socket "${SOCK[w]}" move "${a[@]}" 2>&1)
    local rc=$?
    echo "+ vrnicctl move $args: exit $rc: $out"
    ((rc != 0)) || ok=1
  done
  return "$ok"
}
check "vrnicctl move refuses a QP or worker that does not exist" on_loop refuse_moves

# vrnicd's own balancing: every QP of a run moved onto worker 0, vrnicd moves some back.
rebalancing() {
  local out qpns moved0 ok=0
  bw_run_start rebalance -q 2 -D 8 || return 1
  wait_for 20 "4 QPs moving data" qps_moving "${SOCK[w]}" 4 || ok=1
  qpns=$("$VRNICCTL" --socket "${SOCK[w]}" qps | sed -n 's/^qpn=\(0x[0-9a-f]*\) .*/\1/p')
  for q in $qpns; do "$VRNICCTL" --socket "${SOCK[w]}" move "$q" 0; done
  moved0=$(moves_of w)
  echo "moved every QP ($(wc -w <<<"$qpns")) to worker 0; moves so far: $moved0"
  # vrnicd looks at the loads every second; it moves one QP a look.
  moved_since() { (($(moves_of w) > $1)); }
  wait_for 10 "vrnicd to move a QP back" moved_since "$moved0" || ok=1
  out=$("$VRNICCTL" --socket "${SOCK[w]}" qps)
  grep -o 'qpn=[^ ]* .* worker=[01]' <<<"$out" | sed -E 's/ sq_psn.*//; s/^/    /'
  echo "moves now: $(moves_of w)"
  bw_run_finish rebalance || ok=1
  grep -q 'worker=1' <<<"$out" || { echo "FAIL: vrnicd moved no QP back to worker 1"; ok=1; }
  (($(moves_of w) > moved0)) || { echo "FAIL: no move counted"; ok=1; }
  grep "moved from worker 0 to 1" "${LOG[w]}" | tail -n 2
  grep -q "moved from worker 0 to 1" "${LOG[w]}" || { echo "FAIL: vrnicd logged no move"; ok=1; }
  return "$ok"
}
check "unbalanced workers: vrnicd moves a busy QP to the idle worker" on_loop rebalancing

# --cpus: worker i on the i-th CPU given. Two vrnicd over udp, the CPUs in opposite orders.
allowed_cpus() {  # this shell's CPUs (Cpus_allowed_list, e.g. 0-1,4), one number each
  local list item c
  list=$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)
  IFS=, read -ra items <<<"$list"
  for item in "${items[@]}"; do
    for ((c = ${item%-*}; c <= ${item#*-}; c++)); do echo "$c"; done
  done
}
mapfile -t CPUS < <(allowed_cpus)
CPU_A=${CPUS[0]} CPU_B=${CPUS[1]:-${CPUS[0]}}
P1_CPUS=$CPU_B,$CPU_A
((CPU_A != CPU_B)) || P1_CPUS=$CPU_A  # one CPU only: the same CPU twice is refused
start_pinned_hosts() {
  host_vrnicd p1 - --workers 2 --cpus "$P1_CPUS" --udp 127.0.0.1 --udp-port $((UDP_PORT + 1)) &&
    host_vrnicd p2 - --workers 2 --cpus "$CPU_A" --udp 127.0.0.2 --udp-port $((UDP_PORT + 1))
}
on_pinned() { with_hosts start_pinned_hosts p1 p2 -- "$@"; }

# worker_cpus NAME: "vrnic-wN CPUS" for each worker thread of NAME, in worker order.
worker_cpus() {
  local task
  for task in /proc/"$(pid_of "$1")"/task/*; do
    [[ $(cat "$task/comm" 2>/dev/null) == vrnic-w* ]] || continue
    echo "$(cat "$task/comm") $(awk '/^Cpus_allowed_list/ { print $2 }' "$task/status")"
  done | sort
}
pinned() {
  local got1 got2 want1 want2
  got1=$(worker_cpus p1) got2=$(worker_cpus p2)
  want1=$(printf 'vrnic-w0 %s\nvrnic-w1 %s' "$CPU_B" "$CPU_A")
  want2=$(printf 'vrnic-w0 %s\nvrnic-w1 %s' "$CPU_A" "$CPU_A")
  echo "    p1 (--cpus $P1_CPUS): $(tr '\n' ' ' <<<"$got1")"
  echo "    p2 (--cpus $CPU_A): $(tr '\n' ' ' <<<"$got2")"
  [[ $got1 == "$want1" && $got2 == "$want2" ]] || { echo "FAIL: want $want1 / $want2"; return 1; }
  perftest_between p1 p2 ib_write_bw -q 4 -n 2000
}
check "vrnicd --cpus: worker i on the i-th CPU given (round robin), traffic flows" on_pinned pinned

cpu_refusals() {
  local ok=0
  expect_refusal 2 "want CPU numbers and ranges" --cpus x || ok=1
  expect_refusal 2 "CPU $CPU_A given twice" --cpus "$CPU_A,$CPU_A" || ok=1
  expect_refusal 2 "CPU 4096 is not one vrnicd may run on" --cpus 4096 || ok=1
  return "$ok"
}
check "vrnicd refuses --cpus that is no CPU list, names a CPU twice or one it may not use" \
  cpu_refusals

((${#PID[@]} > 0)) && check "every two-worker vrnicd: no objects left, exits 0 on SIGTERM" stop_hosts

vrnic_script_finish
