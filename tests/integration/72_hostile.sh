#!/usr/bin/env bash
# Hostile clients (issue 17): our own attacker programs (build/tests/hostile, one subcommand
# per attack) against a root vrnicd that serves two users, as an admin would run a shared one
# (first the one built with ASan+UBSan, then the release build): root, whose verified RC
# traffic runs through it the whole time, and a throw-away account this group creates and
# removes (the attacker). Each check shows the attack refused or hurting only the attacker,
# vrnicd answering others within a second, and the victim's bytes intact; at the end no
# sanitizer report and no object left.
#
#   daemon      build-asan/control/vrnicd, then build/control/vrnicd, each with
#               --socket-group <the account's group> --limits ...
#   victim      build/tests/fuzz/fuzz_traffic server and client (root), until the end
#   attacker    runs as the account (setpriv), from a copy of the programs it may read (the
#               checkout itself may be under a directory the account cannot enter)
#   row 10      a million MRs and an exit, on a vrnicd of its own (of each build)
#   round 3     (issue 52, tests/hostile_round3.sh) an importer of root's context, every
#               descriptor the account is given turned against vrnicd, /metrics, an XRC file
#               by O_PATH, a squatted auto-start directory, the default quotas
#
# Settings: VRNIC_ASAN_BUILD_DIR (default build-asan).
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=tests/lib_asan.sh
source "$VRNIC_ROOT/tests/lib_asan.sh"
vrnic_script_init hostile

HOSTILE=$VRNIC_BUILD_DIR/tests/hostile
QUOTA_FILL=$VRNIC_BUILD_DIR/tests/quota_fill
FUZZ_TRAFFIC=$VRNIC_BUILD_DIR/tests/fuzz/fuzz_traffic
ACCOUNT=vrnic-hostile-$$
SHARE=/tmp/vrnic-hostile-$$  # what the account may read: its programs, the socket
SOCK=$SHARE/run/vrnicd.sock
LIMITS=sessions=32,channels=64,mrs=2000,qps=64,mr_bytes=1073741824,pds=100,cqs=100,srqs=50
LIMITS+=,ahs=200,mws=200,cm_ids=300,mappings=2000
D_PID='' D_LOG='' SRV='' CLI=''

# as_attacker CMD...: CMD as the throw-away account (its own uid and group, no others),
# through vrnic's libibverbs, on the shared vrnicd.
as_attacker() {
  setpriv --reuid="$ACCOUNT" --regid="$ACCOUNT" --clear-groups --reset-env \
    env VRNIC_SOCKET="$SOCK" LD_LIBRARY_PATH="$SHARE/provider" HOME=/ "$@"
}
A_HOSTILE=$SHARE/tests/hostile
A_QUOTA_FILL=$SHARE/tests/quota_fill
A_FORGE=$SHARE/tests/forge_udp_write.py
A_VRNICCTL=$SHARE/control/vrnicctl
A_VRNICD=$SHARE/control/vrnicd  # the checkout may be where the account cannot go (a 0700 home)
# shellcheck source=tests/hostile_round3.sh
source "$VRNIC_ROOT/tests/hostile_round3.sh"

# ms CMD...: runs CMD, prints how long it took in milliseconds (after CMD's own output).
ms() {
  local t0=$EPOCHREALTIME rc
  "$@"
  rc=$?
  LAST_MS=$(((${EPOCHREALTIME/[.,]/} - ${t0/[.,]/}) / 1000))
  return "$rc"
}

cleanup_account() {
  rm -rf "$SHARE"
  if id "$ACCOUNT" >/dev/null 2>&1; then
    pkill -KILL -u "$ACCOUNT" 2>/dev/null
    userdel "$ACCOUNT" 2>/dev/null
  fi
  getent group "$ACCOUNT" >/dev/null && groupdel "$ACCOUNT" 2>/dev/null
  rm -rf "/tmp/vrnicd-$(id -u "$ACCOUNT" 2>/dev/null || echo none)"
}

setup() {
  ((EUID == 0)) || { echo "the hostile group needs root (a second user, a root vrnicd)"; return 1; }
  build_asan "$HOSTILE" "$QUOTA_FILL" "$FUZZ_TRAFFIC" "$IMPORT_ATTACK" "$SHARED_FDS" \
    "$XRC_FILE_OPEN" "$MCAST_CHURN" || return 1
  echo "+ useradd --system --user-group --no-create-home $ACCOUNT"
  useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$ACCOUNT" || return 1
  vrnic_on_cleanup cleanup_account
  mkdir -p "$SHARE"/{run,tests,control,provider} && chmod 0755 "$SHARE" "$SHARE"/* || return 1
  cp -a "$VRNIC_PROVIDER_DIR"/libibverbs.so* "$SHARE/provider/" &&
    cp "$HOSTILE" "$QUOTA_FILL" "$VRNIC_ROOT"/tests/tools/{forge_udp_write,roce_pcap_check}.py \
      "$SHARE/tests/" &&
    cp "$VRNICCTL" "$VRNICD" "$SHARE/control/" && round3_setup || return 1
}

# start_daemon asan|release: the shared root vrnicd of that build, and root's traffic on it.
start_daemon() {
  local cmd=("$VRNICD")
  [[ $1 == asan ]] && cmd=(env "${SANITIZER_ENV[@]}" "$ASAN_VRNICD")
  rm -f "$VRNIC_TMP/victim.stop" "$VRNIC_TMP"/victim.*.log
  _vrnicd_spawn "$SOCK" "$VRNIC_TMP/vrnicd-$1.log" "${cmd[@]}" \
    --socket "$SOCK" --socket-group "$ACCOUNT" --limits "$LIMITS" || return 1
  D_PID=$VRNICD_PID D_LOG=$VRNICD_LOG
  VRNIC_SOCKET=$SOCK
  export VRNIC_SOCKET
  ls -l "$SOCK"
  [[ $(stat -c '%a %G' "$SOCK") == "660 $ACCOUNT" ]] ||
    { echo "FAIL: the socket is not mode 660, group $ACCOUNT"; return 1; }
  # The victim: root's verified RC traffic through the same vrnicd, until the end.
  local port qpn i
  port=$(next_port)
  "${VRUN[@]}" timeout -k 5 900 "$FUZZ_TRAFFIC" server --port "$port" \
    >"$VRNIC_TMP/victim.server.log" 2>&1 </dev/null &
  SRV=$!
  _vrnic_track "$SRV"
  wait_for 10 "the victim's server to print its QPN" grep -q '^qpn=' "$VRNIC_TMP/victim.server.log"
  qpn=$(awk -F= '$1 == "qpn" { print $2 }' "$VRNIC_TMP/victim.server.log")
  [[ -n $qpn ]] || { echo "the victim's server printed no QPN"; return 1; }
  "${VRUN[@]}" timeout -k 5 900 "$FUZZ_TRAFFIC" client --server 127.0.0.1 --port "$port" \
    --stop-file "$VRNIC_TMP/victim.stop" --max-seconds 800 --seed "$$" \
    >"$VRNIC_TMP/victim.client.log" 2>&1 </dev/null &
  CLI=$!
  _vrnic_track "$CLI"
  echo "victim traffic running (server QPN $qpn)"
}

# probe_while PID: root's `vrnicctl stats` every 0.2 s while PID runs; fails if one took a
# second or more (the control plane, which waits on the workers, is frozen).
probe_while() {
  local worst=0 n=0
  while _vrnic_running "$1"; do
    ms timeout 5 "$VRNICCTL" stats >/dev/null || { echo "FAIL: vrnicctl stats failed"; return 1; }
    ((LAST_MS > worst)) && worst=$LAST_MS
    n=$((n + 1))
    sleep 0.2  # the probes' pace: five a second, time itself
  done
  echo "liveness: $n probes of vrnicctl stats, slowest ${worst} ms"
  ((worst < 1000)) || { echo "FAIL: vrnicd took ${worst} ms to answer"; return 1; }
}

# Row 6: requests, never a reply read.
flood() {
  as_attacker "$A_HOSTILE" flood "$SOCK" 100000
}

# Row 3: management needs vrnicd's own user or root; a user sees only its own QPs.
management() {
  local out rc=0 victim_qpn
  out=$(as_attacker "$A_VRNICCTL" faults loss=100 2>&1) &&
    { echo "FAIL: the account could set faults: $out"; rc=1; }
  echo "account: vrnicctl faults loss=100: $out"
  grep -q "only vrnicd's own user and root" <<<"$out" || { echo "FAIL: not refused with EPERM"; rc=1; }
  victim_qpn=$(awk -F= '$1 == "qpn" { print $2 }' "$VRNIC_TMP/victim.server.log")
  out=$(as_attacker "$A_VRNICCTL" move "$victim_qpn" 0 2>&1) &&
    { echo "FAIL: the account could move root's QP: $out"; rc=1; }
  echo "account: vrnicctl move $victim_qpn 0: $out"
  out=$(as_attacker "$A_VRNICCTL" qps 2>&1)
  echo "account: vrnicctl qps: $(wc -l <<<"${out:-}") line(s) ${out:0:60}"
  [[ -z $out ]] || { echo "FAIL: the account sees QPs that are not its own"; rc=1; }
  "$VRNICCTL" qps | grep -q "qpn=$(printf '0x%x' "$victim_qpn") " ||
    { echo "FAIL: root does not see the victim's QP"; rc=1; }
  return "$rc"
}

# with_victim TAG ATTACK...: root's victim (`hostile victim`: an RC pair of its own), its QPN,
# PSN, rkey and address in V_QPN, V_PSN, V_RKEY, V_ADDR; then ATTACK; then the victim checks
# that its memory and its connection are as it left them.
with_victim() {
  local tag=$1 vout=$VRNIC_TMP/$1.victim rc=0
  shift
  rm -f "$VRNIC_TMP/$tag.in"
  mkfifo "$VRNIC_TMP/$tag.in" || return 1
  "${VRUN[@]}" timeout -k 5 60 "$HOSTILE" victim <"$VRNIC_TMP/$tag.in" >"$vout" 2>&1 &
  local vpid=$!
  exec {hold}>"$VRNIC_TMP/$tag.in"
  four_lines() { (($(grep -c = "$vout") >= 4)); }
  wait_for 5 "the victim to print its QPN and PSN" four_lines
  V_QPN=$(awk -F= '$1 == "qpn" { print $2 }' "$vout")
  V_PSN=$(awk -F= '$1 == "psn" { print $2 }' "$vout")
  V_RKEY=$(awk -F= '$1 == "rkey" { print $2 }' "$vout")
  V_ADDR=$(awk -F= '$1 == "addr" { print $2 }' "$vout")
  "$@" || rc=1
  echo check >&"$hold"
  exec {hold}>&-
  vrnic_wait_exit "$vpid" 20
  cat "$vout"
  ((VRNIC_RC == 0)) || { echo "FAIL: the victim's memory or connection was touched"; rc=1; }
  return "$rc"
}

# Row 2: another user's QPN, PSN, rkey and address, all known: nothing lands.
inject_attack() {
  echo "root's victim: QPN $V_QPN, expects PSN $V_PSN, rkey $V_RKEY at $V_ADDR"
  as_attacker "$A_HOSTILE" inject "$V_QPN" "$V_PSN" "$V_RKEY" "$V_ADDR"
}
inject() { with_victim inject inject_attack; }

# Row 2 through rdma_cm: a CM call's QP transitions name a QP by QPN; another process's is
# refused (the root victim's connection still carries its WRITE), the attacker's own is made.
# Round 2, row 8: so is an rdma_connect whose REQ would name it (a peer takes a second REQ
# from a connected QP for a stale connection, and tears the first one down).
cm_qp_attack() {
  echo "root's victim: QPN $V_QPN"
  as_attacker "$A_HOSTILE" cm-qp "$SOCK" "$V_QPN"
}
cm_qp_steps() { with_victim cmqp cm_qp_attack; }

# Row 1: the process that registered memory exits and a root process gets its PID.
pid_reuse() {
  local dir=$SHARE/reuse-$EPOCHREALTIME out child addr=0x6f0000000000 rc=0
  mkdir -p "$dir" && chmod 0777 "$dir" || return 1
  as_attacker "$A_HOSTILE" reuse-attacker "$addr" "$dir" >"$VRNIC_TMP/reuse.out" 2>&1 &
  local apid=$!
  wait_for 10 "the attacker to print its child's PID" grep -q '^child_pid=' "$VRNIC_TMP/reuse.out"
  child=$(awk -F= '$1 == "child_pid" { print $2 }' "$VRNIC_TMP/reuse.out")
  [[ -n $child ]] || { echo "the attacker printed no PID"; cat "$VRNIC_TMP/reuse.out"; return 1; }
  echo "the registering process (pid $child) has exited; a root process takes its PID"
  "$HOSTILE" spawn-at-pid "$child" "$addr" "$dir" >"$VRNIC_TMP/reuse.root" 2>&1 &
  local vpid=$!
  wait_for 10 "the root process to be ready" test -e "$dir/ready"
  [[ -e $dir/ready ]] || { echo "the root process did not start"; cat "$VRNIC_TMP/reuse.root"; return 1; }
  echo "root process with pid $child holds a pattern at $addr; the attacker writes its MR there"
  touch "$dir/go"
  wait_for 15 "the attacker's WRITE" test -e "$dir/done"
  echo "attacker's WRITE: $(cat "$dir/write_status" 2>/dev/null || echo none)"
  touch "$dir/check"
  vrnic_wait_exit "$vpid" 20
  echo "root process: $(cat "$VRNIC_TMP/reuse.root"); bytes changed: $(cat "$dir/changed" 2>/dev/null)"
  ((VRNIC_RC == 0)) || { echo "FAIL: the write reached the root process"; rc=1; }
  [[ $(cat "$dir/write_status" 2>/dev/null) != success ]] ||
    { echo "FAIL: the WRITE completed successfully"; rc=1; }
  vrnic_wait_exit "$apid" 20
  return "$rc"
}

# Rows 8 and 9: quotas, in the account's own `vrnicctl stats`.
account_stat() { as_attacker "$A_VRNICCTL" stats | awk -F= -v k="$1" '$1 == k { print $2 }'; }
quota_mr_bytes() {
  local out rc=0
  out=$(as_attacker "$A_HOSTILE" mr-bytes "$SOCK" 268435456) || rc=1
  echo "$out"
  grep -q '^registered=4$' <<<"$out" || { echo "FAIL: want 4 x 256 MiB under mr_bytes=1 GiB"; rc=1; }
  echo "account: user_quota_refusals=$(account_stat user_quota_refusals)" \
    "user_mr_bytes=$(account_stat user_mr_bytes) limit_mr_bytes=$(account_stat limit_mr_bytes)"
  (($(account_stat user_quota_refusals) >= 1)) || { echo "FAIL: no refusal counted"; rc=1; }
  [[ $(account_stat user_mr_bytes) == 0 ]] || { echo "FAIL: bytes still charged after exit"; rc=1; }
  return "$rc"
}
# quota_count SUBCOMMAND KEY N: the attacker's SUBCOMMAND made exactly N (the quota) before
# ENOMEM; root, whose quota is its own, still opens the device.
quota_count() {
  local out rc=0
  out=$(as_attacker "$A_HOSTILE" "$1") || rc=1
  echo "$out"
  grep -q "^$2=$3\$" <<<"$out" || { echo "FAIL: want $2=$3 (the quota)"; rc=1; }
  vrun timeout 10 ibv_devinfo -d vrnic0 >/dev/null || { echo "FAIL: root cannot open vrnic0"; rc=1; }
  return "$rc"
}

# Quotas on objects: ENOMEM at the limit, which ibv_query_device reports.
quota_objects() {
  local out rc=0
  out=$(as_attacker "$A_HOSTILE" objects) || rc=1
  echo "$out"
  grep -q '^qps_created=64$' <<<"$out" && grep -q '^mrs_created=2000$' <<<"$out" &&
    grep -q '^max_mr_size=1073741824$' <<<"$out" ||
    { echo "FAIL: want 64 QPs, 2000 MRs, max_mr_size 1 GiB (--limits $LIMITS)"; rc=1; }
  return "$rc"
}

# Row 5: a send WQE rewritten (num_sge 255, garbage SGEs) before each retransmission.
sge_rewrite() {
  local out rc=0
  out=$(as_attacker "$A_HOSTILE" sge-rewrite 2) || rc=1
  echo "$out"
  _vrnic_running "$D_PID" || { echo "FAIL: vrnicd died"; rc=1; }
  return "$rc"
}

# Rows 4 and 12 (root's regions, against the sanitized vrnicd: map_files needs root).
regions() {
  vrun timeout 60 "$VRNIC_BUILD_DIR/tests/region_attack"
}

# Row 7: open and close, and vrnicd's descriptors stay as they were.
open_close() {
  local before after
  before=$(vrnicd_fds "$D_PID")
  vrun timeout 120 "$VRNIC_BUILD_DIR/tests/open_close" 2000 || return 1
  # vrnicd closes a session's descriptors when it sees the connection end
  fds_back() { (($(ls "/proc/$D_PID/fd" | wc -l) == before)); }
  wait_for 5 "vrnicd's descriptors to be back to $before" fds_back
  after=$(ls "/proc/$D_PID/fd" | wc -l)
  echo "vrnicd's fds: $before before 2,000 open/close cycles, $after after"
  CHECK_NOTE="$before fds before and after"
  ((before == after))
}

# fill_and_hold TAG CHECK CMD...: CMD (a quota_fill of the account's) runs until it prints
# "full", then CHECK runs while it holds what it made (its output so far in FILL_OUT); then
# CMD is let go and must exit 0.
fill_and_hold() {
  local tag=$1 check_fn=$2 out=$VRNIC_TMP/$1.out rc=0 hold
  FILL_OUT=$out
  shift 2
  rm -f "$VRNIC_TMP/$tag.in" && mkfifo "$VRNIC_TMP/$tag.in" || return 1
  "$@" <"$VRNIC_TMP/$tag.in" >"$out" 2>&1 &
  local apid=$!
  exec {hold}>"$VRNIC_TMP/$tag.in"
  wait_for 60 "the account's $tag to be made" grep -q '^full$' "$out"
  grep -q '^full$' "$out" || { echo "FAIL: $tag never filled"; rc=1; }
  echo "account, holding: $(grep -v '^full$' "$out" | tr '\n' ' ')"
  "$check_fn" || rc=1
  echo go >&"$hold"
  exec {hold}>&-
  vrnic_wait_exit "$apid" 30
  echo "account, after: $(tail -n +2 "$out" | grep -v '^full$' | tail -n 1)"
  ((VRNIC_RC == 0)) || { echo "FAIL: $tag: $(_vrnic_status_word "$VRNIC_RC")"; rc=1; }
  return "$rc"
}

# Round 2, rows 5, 7 and 9: quota_hold KIND QUOTA N: the account makes KIND until refused
# (N made: its QUOTA; ENOMEM) and holds them while root makes one object of every kind and
# vrnicd answers within a second; freed, they are given back (one more is made).
quota_hold() {
  HOLD_KEY=$2 HOLD_WANT=$3
  fill_and_hold "fill-$1" while_full as_attacker timeout -k 5 120 "$A_QUOTA_FILL" fill "$1" "$SOCK"
}
while_full() {
  local rc=0 used
  grep -q "^made=$HOLD_WANT\$" "$FILL_OUT" || { echo "FAIL: want made=$HOLD_WANT (--limits $LIMITS)"; rc=1; }
  grep -q '^refused_errno=ENOMEM$' "$FILL_OUT" || { echo "FAIL: not refused with ENOMEM"; rc=1; }
  used=$(account_stat "user_$HOLD_KEY")
  echo "account: user_$HOLD_KEY=$used limit_$HOLD_KEY=$(account_stat "limit_$HOLD_KEY")"
  local root_rc=0
  ms vrun timeout 20 "$QUOTA_FILL" one-of-each "$SOCK" >"$VRNIC_TMP/one-of-each.out" 2>&1 || root_rc=1
  echo "root, meanwhile (${LAST_MS} ms): $(tr '\n' ' ' <"$VRNIC_TMP/one-of-each.out")"
  ((root_rc == 0)) || { echo "FAIL: root could not make one of each"; rc=1; }
  ms timeout 5 "$VRNICCTL" stats >/dev/null || { echo "FAIL: vrnicctl stats failed"; rc=1; }
  ((LAST_MS < 1000)) || { echo "FAIL: vrnicctl stats took ${LAST_MS} ms"; rc=1; }
  return "$rc"
}

# Round 2, row 6: a thousand connections that never speak hold no more of vrnicd's fds than
# the account's session quota and the few past it waiting to be told ENOMEM (8).
idle_connections() {
  IDLE_BEFORE=$(vrnicd_fds "$D_PID")
  fill_and_hold idle idle_fds as_attacker timeout -k 5 60 "$A_QUOTA_FILL" idle "$SOCK" 1000
}
idle_fds() {
  local during allowed
  # Once it holds still: a connection vrnicd is accepting and about to close counts for the
  # moment between accept and close (seen once: +41, one more than allowed).
  during=$(vrnicd_fds "$D_PID")
  allowed=$((32 + 8))
  echo "vrnicd's fds: $IDLE_BEFORE before, $during with 1,000 idle connections (allowed: +$allowed)"
  CHECK_NOTE="+$((during - IDLE_BEFORE)) fds for 1,000 idle connections"
  ((during - IDLE_BEFORE <= allowed))
}

# Rows 11 and 14: work the client makes up in shared memory, while others are served.
attack_with_probe() { attack_with_probe_of "$A_HOSTILE" "$@"; }
# attack_with_probe_of PROGRAM ARGS...: PROGRAM as the account, vrnicd probed while it runs.
attack_with_probe_of() {
  as_attacker "$@" >"$VRNIC_TMP/attack.out" 2>&1 &
  local apid=$! rc=0
  probe_while "$apid" || rc=1
  vrnic_wait_exit "$apid" 30
  cat "$VRNIC_TMP/attack.out"
  ((VRNIC_RC == 0)) || { echo "FAIL: ${1##*/} ${2:-} exited with $VRNIC_RC"; rc=1; }
  return "$rc"
}

# Round 2, row 12: forged rings in 24 of the account's sessions for 4 s (a user's share of a
# look is one session's, however many it has): vrnicd answers within 1 s, and root's
# ibv_rc_pingpong meanwhile passes, its data checked (-c); its latency is printed, not judged
# (before: 8 ms an iteration with 169 sessions; now microseconds).
doorbells_sessions() {
  as_attacker "$A_HOSTILE" doorbells 4 24 >"$VRNIC_TMP/db24.out" 2>&1 &
  local apid=$! rc=0 port
  port=$(next_port)
  sessions_open() { (($(account_stat user_sessions) >= 25)); }  # and vrnicctl's own
  wait_for 10 "the account's 24 sessions" sessions_open
  verbs_pair "db24-pingpong" "$port" ibv_rc_pingpong -d vrnic0 -g 0 -c -n 2000 || rc=1
  echo "root's ibv_rc_pingpong meanwhile: $(grep -h 'usec/iter' "$CLIENT_LOG" | tail -n 1)"
  CHECK_NOTE="root's pingpong: $(grep -ho '[0-9.]* usec/iter' "$CLIENT_LOG" | tail -n 1)"
  probe_while "$apid" || rc=1
  vrnic_wait_exit "$apid" 30
  cat "$VRNIC_TMP/db24.out"
  ((VRNIC_RC == 0)) || { echo "FAIL: hostile doorbells: $(_vrnic_status_word "$VRNIC_RC")"; rc=1; }
  grep -q '^sessions=24$' "$VRNIC_TMP/db24.out" || { echo "FAIL: want 24 sessions forged"; rc=1; }
  # What the budget is for, counted by vrnicd: the most cells one user took in one look of a
  # worker is the per-user budget exactly (reached: the forgery was heavy enough to meet it;
  # not past it: 24 sessions got no more than one would; per session they got 24 times it).
  local most
  most=$(vrnic_stat doorbell_user_look_max)
  echo "vrnicd: doorbell_user_look_max=$most (the budget: 1024 cells per user per look)"
  [[ $most == 1024 ]] || { echo "FAIL: one user's look took ${most:-?} cells, not its budget"; rc=1; }
  return "$rc"
}

# own_vrnicd asan|release DIR ARGS...: a vrnicd of that build for one check, its socket
# DIR/vrnicd.sock (in VRNIC_SOCKET, which the caller makes local) and log DIR/vrnicd.log.
own_vrnicd() {
  local cmd=("$VRNICD")
  [[ $1 == asan ]] && cmd=(env "${SANITIZER_ENV[@]}" "$ASAN_VRNICD")
  mkdir -p "$2" || return 1
  VRNIC_SOCKET=$2/vrnicd.sock
  _vrnicd_spawn "$VRNIC_SOCKET" "$2/vrnicd.log" "${cmd[@]}" --socket "$VRNIC_SOCKET" "${@:3}"
}
# own_vrnicd_stop DIR: that vrnicd idle and stopped, and no sanitizer report in its log.
own_vrnicd_stop() {
  local rc=0
  VRNIC_DAEMON_STOP_TIMEOUT=20 vrnicd_idle_and_stop || rc=1
  if grep -qE "$SANITIZER_REPORT" "$1/vrnicd.log"; then
    sanitizer_excerpt "$1/vrnicd.log"
    rc=1
  fi
  return "$rc"
}

# Round 2, row 4: a vrnicd of two workers (of this build); the client's own QPs, one on each
# worker, rung through the other worker's ring while its registrations park the workers (a
# worker used to wait for a parked one: every worker and the control thread stopped for good).
cross_worker_doorbells() {
  local dir=$VRNIC_TMP/xdb-$1 rc=0
  local -x VRNIC_SOCKET
  own_vrnicd "$1" "$dir" --workers 2 || return 1
  "${VRUN[@]}" timeout -k 5 30 "$HOSTILE" doorbells-cross 3 >"$dir/attack.out" 2>&1 &
  local apid=$!
  probe_while "$apid" || rc=1
  vrnic_wait_exit "$apid" 40
  cat "$dir/attack.out"
  ((VRNIC_RC == 0)) || { echo "FAIL: hostile doorbells-cross: $(_vrnic_status_word "$VRNIC_RC")"; rc=1; }
  own_vrnicd_stop "$dir" || rc=1
  return "$rc"
}

# Issue 30: the same-host direct path is only between processes of one user. A root poster's
# WRITEs into a region of the account's process take the worker path (direct_ops stays 0 on
# a vrnicd of their own, of this build) and land byte for byte.
other_user_direct() {
  local dir=$SHARE/direct-$1 rc=0
  local -x VRNIC_SOCKET
  own_vrnicd "$1" "$dir" --socket-group "$ACCOUNT" || return 1
  vrnic_fg "${VRUN[@]}" timeout -k 5 60 "$VRNIC_BUILD_DIR/tests/direct_peers" --case other-user \
    --uid "$(id -u "$ACCOUNT")" --gid "$(id -g "$ACCOUNT")" || rc=1
  local ops
  ops=$(vrnic_stat direct_ops)
  echo "vrnicd: direct_ops=$ops"
  [[ $ops == 0 ]] || { echo "FAIL: the direct path was taken between two users"; rc=1; }
  own_vrnicd_stop "$dir" || rc=1
  return "$rc"
}

# Round 2, row 8: on a --udp vrnicd (of this build) root's victim connects over the loop port;
# the account, with no access to vrnicd's socket, forges WRITEs into it from a UDP socket on
# 127.0.0.1 (vrnicd's own address: the loop peer's). They reach the udp port whole (no ICRC
# error) and are dropped there; nothing lands, the victim's connection carries on.
udp_forgery() {
  local dir=$VRNIC_TMP/forge-$1 rc=0
  local -x VRNIC_SOCKET
  FORGE_PORT=$(free_udp_port) && own_vrnicd "$1" "$dir" --udp 127.0.0.1 --udp-port "$FORGE_PORT" ||
    return 1
  with_victim "forge-$1" forge_attack || rc=1
  own_vrnicd_stop "$dir" || rc=1
  return "$rc"
}
forge_attack() {
  local rx0 icrc0 drop0 rc=0
  rx0=$(vrnic_stat wire_rx_packets) icrc0=$(vrnic_stat wire_rx_icrc_errors)
  drop0=$(vrnic_stat packets_dropped)
  echo "root's victim: QPN $V_QPN, expects PSN $V_PSN, rkey $V_RKEY at $V_ADDR"
  as_attacker /usr/bin/python3 "$A_FORGE" --port "$FORGE_PORT" --qpn "$V_QPN" --psn "$V_PSN" \
    --rkey "$V_RKEY" --addr "$V_ADDR" --count 16 || rc=1
  wait_for 5 "vrnicd to take the 16 datagrams" stat_over wire_rx_packets $((rx0 + 15))
  echo "vrnicd: wire_rx_packets +$(($(vrnic_stat wire_rx_packets) - rx0))," \
    "wire_rx_icrc_errors +$(($(vrnic_stat wire_rx_icrc_errors) - icrc0))," \
    "packets_dropped +$(($(vrnic_stat packets_dropped) - drop0))"
  [[ $(vrnic_stat wire_rx_icrc_errors) == "$icrc0" ]] ||
    { echo "FAIL: the forged packets were not whole (an ICRC error): the test proves nothing"; rc=1; }
  return "$rc"
}

# Row 13: a socket another user bound, and a private directory that is not ours.
squat() {
  local rc=0 fake=$SHARE/squat/vrnicd.sock out
  mkdir -p "$SHARE/squat" && chmod 0777 "$SHARE/squat" && rm -f "$fake" || return 1
  as_attacker /usr/bin/python3 -c "
import socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind('$fake'); s.listen(8)
time.sleep(8)" &
  local spid=$!
  wait_for 5 "the fake socket" test -S "$fake"
  out=$(VRNIC_SOCKET=$fake vrun timeout 10 ibv_devices 2>&1)
  echo "root, VRNIC_SOCKET=<the account's socket> ibv_devices:"
  sed 's/^/    /' <<<"$out"
  grep -q "neither you (uid 0) nor root: not using it" <<<"$out" ||
    { echo "FAIL: the library did not refuse a daemon of another user"; rc=1; }
  grep -q vrnic0 <<<"$out" && { echo "FAIL: it listed a device"; rc=1; }
  kill "$spid" 2>/dev/null
  vrnic_wait_exit "$spid" 5
  return "$rc"  # (the account's default directory taken by another: squat_autostart)
}

finish() {
  local rc=0 iters
  touch "$VRNIC_TMP/victim.stop"
  vrnic_wait_exit "$CLI" 60 || kill -TERM "$CLI"
  local cli_rc=$VRNIC_RC
  vrnic_wait_exit "$SRV" 30 || kill -TERM "$SRV"
  local srv_rc=$VRNIC_RC
  iters=$(awk -F= '$1 == "iterations" { print $2 }' "$VRNIC_TMP/victim.client.log")
  echo "victim: client $(_vrnic_status_word "$cli_rc"), server $(_vrnic_status_word "$srv_rc")," \
    "${iters:-0} iterations verified"
  if ((cli_rc != 0 || srv_rc != 0 || ${iters:-0} < 10)); then
    vrnic_tail "$VRNIC_TMP/victim.client.log"
    vrnic_tail "$VRNIC_TMP/victim.server.log"
    echo "FAIL: root's traffic did not run intact through the attacks"
    rc=1
  fi
  VRNICD_PID=$D_PID VRNICD_LOG=$D_LOG
  wait_objects_zero 20 || rc=1
  VRNIC_DAEMON_STOP_TIMEOUT=20 stop_vrnicd TERM "$SOCK" || rc=1
  if grep -qE "$SANITIZER_REPORT" "$D_LOG"; then
    echo "FAIL: sanitizer report in vrnicd's log:"
    sanitizer_excerpt "$D_LOG"
    rc=1
  else
    echo "vrnicd's log: no sanitizer report ($(wc -l <"$D_LOG") lines)"
  fi
  return "$rc"
}

# Row 10, on the release vrnicd: a million MRs, then exit.
million_mrs() {
  if [[ $1 == asan ]]; then
    local dir=$VRNIC_TMP/mrs-asan
    mkdir -p "$dir" && VRNIC_SOCKET=$dir/vrnicd.sock && export VRNIC_SOCKET
    _vrnicd_spawn "$VRNIC_SOCKET" "$dir/vrnicd.log" env "${SANITIZER_ENV[@]}" "$ASAN_VRNICD" \
      --socket "$VRNIC_SOCKET" || return 1
  else
    start_vrnicd || return 1
  fi
  local rc=0 t0 out left worst=0
  vrun timeout 300 "$HOSTILE" null-mrs 1000000 >"$VRNIC_TMP/mrs.out" 2>"$VRNIC_TMP/mrs.err"
  t0=${EPOCHREALTIME/[.,]/}
  cat "$VRNIC_TMP/mrs.out"
  while :; do
    ms vrnic_stat mrs >"$VRNIC_TMP/mrs.left" || { echo "FAIL: vrnicctl stats failed"; rc=1; break; }
    ((LAST_MS > worst)) && worst=$LAST_MS
    left=$(<"$VRNIC_TMP/mrs.left")
    [[ $left == 0 ]] && break
    (((${EPOCHREALTIME/[.,]/} - t0) > 30000000)) && { echo "FAIL: $left MRs left after 30 s"; rc=1; break; }
  done
  local teardown_ms=$(((${EPOCHREALTIME/[.,]/} - t0) / 1000))
  echo "teardown: ${teardown_ms} ms from exit to zero MRs; slowest stats reply ${worst} ms"
  CHECK_NOTE="$(awk -F= '$1 == "create_seconds" { print $2 }' "$VRNIC_TMP/mrs.out") s to create,"
  CHECK_NOTE+=" ${teardown_ms} ms to tear down"
  ((worst < 1000)) || { echo "FAIL: a stats request waited ${worst} ms"; rc=1; }
  grep -q '^null_mrs=1000000$' "$VRNIC_TMP/mrs.out" || { echo "FAIL: not a million MRs"; rc=1; }
  local log=$VRNICD_LOG
  VRNIC_DAEMON_STOP_TIMEOUT=20 vrnicd_idle_and_stop || rc=1
  if grep -qE "$SANITIZER_REPORT" "$log"; then
    echo "FAIL: sanitizer report in vrnicd's log:"
    sanitizer_excerpt "$log"
    rc=1
  fi
  return "$rc"
}

# attacks asan|release: every attack, on the shared root vrnicd of that build.
attacks() {
  local k="[$1]"
  check "$k the shared root vrnicd (socket 0660, group $ACCOUNT); root's traffic on it" \
    start_daemon "$1" || return 0
  check "$k row 6: a client that never reads its replies is dropped; others answered meanwhile" flood
  check "$k row 3: faults and QP moves refused (EPERM) to another user; vrnicctl qps shows only its own" \
    management
  check "$k row 2: a WRITE aimed at another user's QP (QPN, PSN, rkey known) fails; nothing lands" inject
  check "$k row 2, round 2 row 8: rdma_cm QP transitions, and rdma_connect, naming another process's QPN (or QP1's): EINVAL, its QP untouched" \
    cm_qp_steps
  check "$k row 1: a PID reused by a root process after the registering process exited: no access" \
    pid_reuse
  check "$k row 8: registered bytes past the user's quota: ENOMEM, counted, released at exit" \
    quota_mr_bytes
  check "$k row 9: completion channels past the user's quota: ENOMEM, given back when destroyed" \
    quota_count channels channels_created 64
  check "$k row 9: connections past the user's quota: ENOMEM; root unaffected" \
    quota_count sessions sessions_opened 32
  check "$k row 11: a send queue of local operations, producer 2^31 ahead: vrnicd answers within 1 s" \
    attack_with_probe local-ops 3
  check "$k row 14: forged doorbell rings for 3 s: vrnicd answers within 1 s" \
    attack_with_probe doorbells 3
  check "$k round 2, row 12: forged doorbells in 24 sessions get one budget (1024 cells a look); vrnicd answers, root's ping-pong runs" \
    doorbells_sessions
  check "$k row 13: a daemon of another user is refused; a socket directory not our own is refused" squat
  check "$k quotas: QPs and MRs past the user's limits: ENOMEM; ibv_query_device reports the limits" \
    quota_objects
  check "$k row 5: a send WQE rewritten before each retransmission: an error completion, vrnicd serves on" \
    sge_rewrite
  check "$k round 2, row 1: ibv_rereg_mr under a WRITE in flight: nothing lands outside the region" \
    attack_with_probe rereg-write
  check "$k round 2, row 13: an rdma_cm port below 1024 is refused (EACCES) to another user" \
    as_attacker "$A_HOSTILE" low-port "$SOCK"
  check "$k round 2, row 5: rdma_cm event channels past the user's channel quota: ENOMEM; root unaffected" \
    quota_hold cm-channels channels 64
  check "$k round 2, row 6: 1,000 idle connections hold at most the session quota's fds (+8)" \
    idle_connections
  check "$k round 2, row 7: MRs of one-byte pieces on pages of their own: the mapping quota, ENOMEM" \
    quota_hold mappings mappings 15
  local kind
  for kind in "pds pds 99" "cqs cqs 100" "srqs srqs 50" "ahs ahs 200" "mws mws 200" \
    "cm-ids cm_ids 300"; do
    local rows="row 9"
    [[ $kind == cm-ids* ]] && rows="rows 9, 10 (the CM table per user)"
    # shellcheck disable=SC2086 # KIND QUOTA N
    check "$k round 2, $rows: ${kind%% *} past the user's quota: ENOMEM, held; root makes its own" \
      quota_hold $kind
  done
  check "$k round 3, rows 1, 2, 3, 4, 7: an importer of root's context (on its own connection or root's socket): root's memory, directory, cells, wake and rights stay root's; its own registrations work; no crash" \
    import_check "$1"
  check "$k round 3, row 4: every descriptor vrnicd gave the account turned against it; vrnicd and root's ping-pong answer" \
    shared_fds_check
  check "$k round 3, row 6: an XRC domain on root's 0600 file by O_PATH: EBADF" xrc_opath
  check "$k round 3, row 10: the account's /tmp/vrnicd-<uid> taken by root: auto-start uses a private directory" \
    squat_autostart
  check "$k round 3, by reading: 1,000 multicast groups churned: vrnicd answers within 1 s" mcast_churn
  check "$k round 3, row 9: root's SEND latency idle and under forged doorbells (printed)" doorbell_p99
  check "$k rows 4, 12: shrinking, growing or writing the shared regions is refused" regions
  check "$k row 7: 2,000 ibv_open_device/ibv_close_device cycles leave vrnicd's fd count unchanged" \
    open_close
  check "$k root's traffic verified throughout; no objects left; no sanitizer report; exit 0" finish
  check "$k round 2, row 4: doorbells through the other worker's ring while the workers park" \
    cross_worker_doorbells "$1"
  check "$k a root poster and a target of another user: the worker path (direct_ops 0), every WRITE landed" \
    other_user_direct "$1"
  check "$k round 2, row 8: WRITEs forged from 127.0.0.1 by a user without the socket: dropped" \
    udp_forgery "$1"
  check "$k round 3, row 5: /metrics shows no per-QP series by default; a slow client holds nobody's scrape" \
    metrics_check "$1"
  if [[ $1 == release ]]; then
    check "$k round 3, row 8: at the default quotas one user's PDs stop at a quarter of the device's" \
      default_quota
    check "$k round 3, by reading: at the defaults one user's sessions stop at its descriptor quota" \
      default_fds
  fi
  check "$k row 10: a client exits holding 1,000,000 MRs: linear teardown, stats within 1 s" \
    million_mrs "$1"
}

if check "setup: the sanitized vrnicd, the attackers' account $ACCOUNT and their programs" setup; then
  attacks asan
  attacks release
fi

vrnic_script_finish
