# The hostile group's third round (issue 52), sourced by tests/integration/72_hostile.sh: the
# surfaces added since the second -- imported contexts, the descriptors vrnicd shares, the
# metrics endpoint, XRC files, auto-start's directory, the default quotas -- attacked as the
# group's throw-away account, on the shared root vrnicd (SOCK, D_PID) or on a vrnicd of the
# check's own. Uses the group's as_attacker, with_victim, probe_while, own_vrnicd,
# fill_and_hold and account_stat.
# shellcheck shell=bash disable=SC2317 # checks are called through check()

IMPORT_ATTACK=$VRNIC_BUILD_DIR/tests/import_attack
SHARED_FDS=$VRNIC_BUILD_DIR/tests/shared_fds
XRC_FILE_OPEN=$VRNIC_BUILD_DIR/tests/xrc_file_open
MCAST_CHURN=$VRNIC_BUILD_DIR/tests/mcast_churn
A_IMPORT_ATTACK=$SHARE/tests/import_attack
A_SHARED_FDS=$SHARE/tests/shared_fds
A_XRC_FILE_OPEN=$SHARE/tests/xrc_file_open
A_MCAST_CHURN=$SHARE/tests/mcast_churn

# The programs above, where the account may run them (the group's setup calls this).
round3_setup() {
  cp "$IMPORT_ATTACK" "$SHARED_FDS" "$XRC_FILE_OPEN" "$MCAST_CHURN" "$SHARE/tests/"
}

# Rows 1, 2, 3, 4, 7: root exports a context (a PD, an RC QP, a secret on its heap it never
# registered) to the account, which imports it: registering root's memory is refused, on the
# import's connection and on the exported socket itself, the directory it is given holds none
# of root's regions (and the poster cells it holds odd are its own user's: root's
# deregistration still returns), the wake eventfd it fills is its own (root's WRITE through a
# sleeping worker completes), capture and faults are EPERM, it lists none of root's QPs, its
# rdma_cm listener goes with its connection; registering its own memory in the imported PD
# works; after the import closes, its own registration does not crash vrnicd.
import_check() {
  local dir=$SHARE/import-$1 out=$VRNIC_TMP/import-$1 rc=0 hold pid pd addr
  rm -rf "$dir" && mkdir -p "$dir" && chmod 0777 "$dir" || return 1
  rm -f "$out.in" && mkfifo "$out.in" || return 1
  # (its WRITE at the end through the worker, which it wakes with its doorbell)
  "${VRUN[@]}" VRNIC_DIRECT_PATH=0 timeout -k 5 90 "$IMPORT_ATTACK" exporter "$dir/cmd.sock" <"$out.in" \
    >"$out.exporter" 2>&1 &
  local epid=$!
  exec {hold}>"$out.in"
  wait_for 10 "the exporter to listen" grep -q '^listening=1' "$out.exporter"
  pid=$(awk -F= '$1 == "pid" { print $2 }' "$out.exporter")
  pd=$(awk -F= '$1 == "pd" { print $2 }' "$out.exporter")
  addr=$(awk -F= '$1 == "addr" { print $2 }' "$out.exporter")
  echo "root's exporter: pid $pid, PD $pd, its unregistered secret at $addr"
  as_attacker timeout -k 5 60 "$A_IMPORT_ATTACK" importer "$dir/cmd.sock" "$SOCK" "$pid" "$pd" \
    "$addr" "$dir/restore" >"$out.importer" 2>&1 &
  local ipid=$!
  wait_for 30 "the importer's last attack" grep -q '^row3_cells_set_odd=\|^setup_error' "$out.importer"
  echo check >&"$hold"
  exec {hold}>&-
  vrnic_wait_exit "$epid" 30
  local erc=$VRNIC_RC
  touch "$dir/restore"
  vrnic_wait_exit "$ipid" 30
  local irc=$VRNIC_RC
  echo "account (importer):" && sed 's/^/    /' "$out.importer"
  echo "root (exporter):" && sed 's/^/    /' "$out.exporter"
  ((irc == 0)) || { echo "FAIL: the importer got through ($(_vrnic_status_word "$irc"))"; rc=1; }
  ((erc == 0)) || { echo "FAIL: root's memory was touched, or its deregistration stalled"; rc=1; }
  _vrnic_running "$D_PID" || { echo "FAIL: vrnicd died"; rc=1; }
  CHECK_NOTE=$(grep -o 'reg_dereg_ms=[0-9.]*' "$out.exporter")
  return "$rc"
}

# Row 4: the account turns every descriptor vrnicd gave it against vrnicd for 4 s (flags
# cleared, eventfds read by blocked threads and filled, memfds written, punched, sealed):
# vrnicctl answers within 1 s and root's ping-pong (data checked) runs meanwhile.
shared_fds_check() {
  as_attacker "$A_SHARED_FDS" "$SOCK" 4 >"$VRNIC_TMP/shared_fds.out" 2>&1 &
  local apid=$! rc=0 port
  wait_for 10 "the account's descriptors turned" grep -q '^fds=' "$VRNIC_TMP/shared_fds.out"
  cat "$VRNIC_TMP/shared_fds.out"
  port=$(next_port)
  verbs_pair "fds-pingpong" "$port" ibv_rc_pingpong -d vrnic0 -g 0 -c -n 2000 || rc=1
  echo "root's ibv_rc_pingpong meanwhile: $(grep -h 'usec/iter' "$CLIENT_LOG" | tail -n 1)"
  probe_while "$apid" || rc=1
  vrnic_wait_exit "$apid" 30
  ((VRNIC_RC == 0)) || { echo "FAIL: shared_fds: $(_vrnic_status_word "$VRNIC_RC")"; rc=1; }
  grep -q 'eventfds=[1-9]' "$VRNIC_TMP/shared_fds.out" || { echo "FAIL: no eventfd was given"; rc=1; }
  return "$rc"
}

# Row 5: a vrnicd of this build with --metrics: the account's scrape shows device counters
# and none of root's QPs (per-QP series need --metrics-qps); while the account trickles a
# request a byte a second, root's scrapes are answered at once.
metrics_check() {
  local dir=$VRNIC_TMP/metrics-$1 rc=0
  local -x VRNIC_SOCKET
  METRICS_PORT=$(next_port)
  own_vrnicd "$1" "$dir" --metrics "127.0.0.1:$METRICS_PORT" || return 1
  with_victim "metrics-$1" metrics_attack || rc=1
  own_vrnicd_stop "$dir" || rc=1
  return "$rc"
}
metrics_attack() {
  local rc=0 text=$VRNIC_TMP/metrics.account worst=0 i
  as_attacker curl -sf -m 5 "http://127.0.0.1:$METRICS_PORT/metrics" >"$text" ||
    { echo "FAIL: the account's scrape failed"; rc=1; }
  echo "account's scrape: $(wc -l <"$text") lines, $(grep -c 'qpn="' "$text") per-QP" \
    "(root's victim QP $(printf '0x%x' "$V_QPN") is up)"
  grep -q '^vrnic_qps{device="vrnic0"} [1-9]' "$text" || { echo "FAIL: no QP count"; rc=1; }
  ! grep -q 'qpn="' "$text" || { echo "FAIL: per-QP series served to anyone"; rc=1; }
  as_attacker /usr/bin/python3 -c "
import socket, time
s = socket.create_connection(('127.0.0.1', $METRICS_PORT))
for c in b'GET /metrics HTTP/1.0':
    s.send(bytes([c])); time.sleep(1)
" >/dev/null 2>&1 &
  local slow=$!
  sleep 0.5  # the slow client is connected and trickling
  for i in 1 2 3 4 5; do
    ms curl -sf -m 5 -o /dev/null "http://127.0.0.1:$METRICS_PORT/metrics" ||
      { echo "FAIL: root's scrape $i failed"; rc=1; }
    ((LAST_MS > worst)) && worst=$LAST_MS
    sleep 0.3
  done
  kill "$slow" 2>/dev/null
  vrnic_wait_exit "$slow" 5
  echo "root's 5 scrapes behind a client trickling its request: slowest ${worst} ms"
  CHECK_NOTE="scrapes behind a slow client: slowest ${worst} ms"
  ((worst < 1000)) || { echo "FAIL: a slow client held root's scrape ${worst} ms"; rc=1; }
  return "$rc"
}

# Row 6: root's 0600 file, which the account cannot open but can name with O_PATH: its XRC
# domain is refused (EBADF, as the kernel's fdget); the account's own file opens one.
xrc_opath() {
  local root_file=$SHARE/xrc-root out rc=0
  : >"$root_file" && chmod 0600 "$root_file" || return 1
  out=$(as_attacker "$A_XRC_FILE_OPEN" "$root_file" read)
  echo "account, root's 0600 file opened for reading: $out"
  [[ $out == open=EACCES ]] || { echo "FAIL: want EACCES"; rc=1; }
  out=$(as_attacker "$A_XRC_FILE_OPEN" "$root_file" opath)
  echo "account, root's 0600 file by O_PATH: $out"
  [[ $out == open_xrcd=EBADF ]] || { echo "FAIL: want EBADF from ibv_open_xrcd"; rc=1; }
  local own=$SHARE/xrc/account
  mkdir -p "$SHARE/xrc" && chmod 0777 "$SHARE/xrc" || return 1
  as_attacker sh -c ": >'$own'" && out=$(as_attacker "$A_XRC_FILE_OPEN" "$own" read)
  echo "account, its own file: $out"
  [[ $out == open_xrcd=0 ]] || { echo "FAIL: the account's own file opens no domain"; rc=1; }
  rm -rf "$root_file" "$SHARE/xrc"
  return "$rc"
}

# Row 8: on a vrnicd of this build with the default limits, the account's PDs stop at its
# quota, a quarter of the device's table, and root makes one of each meanwhile. (Started with
# 4,096 descriptors, as a host with a lower RLIMIT_NOFILE gives it: default_fds goes on.)
default_quota() {
  local dir=$SHARE/defaults rc=0
  local -x VRNIC_SOCKET=$SHARE/defaults/vrnicd.sock
  mkdir -p "$dir" && chmod 0755 "$dir" || return 1
  _vrnicd_spawn "$VRNIC_SOCKET" "$dir/vrnicd.log" prlimit --nofile=4096:4096 "$VRNICD" \
    --socket "$VRNIC_SOCKET" --socket-group "$ACCOUNT" || return 1
  local asock=$VRNIC_SOCKET
  HOLD_KEY=pds HOLD_WANT=65535
  fill_and_hold defaults-pds default_quota_held as_attacker env VRNIC_SOCKET="$asock" \
    timeout -k 5 240 "$A_QUOTA_FILL" fill pds "$asock" || rc=1
  return "$rc"  # (default_fds goes on with this vrnicd, and stops it)
}
default_quota_held() {
  local rc=0 max
  # (quota_fill holds one PD of its own)
  grep -q '^made=65535$' "$FILL_OUT" || { echo "FAIL: want made=65535 (the default pds quota)"; rc=1; }
  grep -q '^refused_errno=ENOMEM$' "$FILL_OUT" || { echo "FAIL: not refused with ENOMEM"; rc=1; }
  max=$(vrun ibv_devinfo -v -d vrnic0 | awk '$1 == "max_pd:" { print $2 }')
  echo "root's context: max_pd=$max; the device holds $((max * 4))"
  vrun timeout 20 "$QUOTA_FILL" one-of-each "$VRNIC_SOCKET" >"$VRNIC_TMP/defaults.root" 2>&1 ||
    { echo "FAIL: root could not make one of each"; cat "$VRNIC_TMP/defaults.root"; rc=1; }
  return "$rc"
}

# By reading (four users' sessions and channels within quota took all of vrnicd's
# descriptors): on the same vrnicd (4,096 descriptors), the account's sessions stop at its
# descriptor quota, a quarter of what vrnicd may open past its own, before its session quota
# (1,024); root still opens the device.
default_fds() {
  local dir=$SHARE/defaults rc=0
  local -x VRNIC_SOCKET=$dir/vrnicd.sock
  fill_and_hold defaults-sessions default_fds_held as_attacker env VRNIC_SOCKET="$VRNIC_SOCKET" \
    timeout -k 5 120 "$A_QUOTA_FILL" fill sessions "$VRNIC_SOCKET" || rc=1
  own_vrnicd_stop "$dir" || rc=1
  return "$rc"
}
default_fds_held() {
  local rc=0 limit
  # (root's view of the account's account: the account has no connection left to ask with)
  limit=$(vrnic_stat limit_fds)
  echo "account: $(grep '^made=' "$FILL_OUT") sessions, limit_fds=$limit;" \
    "vrnicd holds $(ls "/proc/$VRNICD_PID/fd" | wc -l) fds of $(
      awk '/Max open files/ { print $4 }' "/proc/$VRNICD_PID/limits")"
  grep -q '^refused_errno=ENOMEM$' "$FILL_OUT" || { echo "FAIL: not refused with ENOMEM"; rc=1; }
  (($(grep -oP '^made=\K[0-9]+' "$FILL_OUT") * 4 <= limit && limit * 4 < 4096)) ||
    { echo "FAIL: the sessions did not stop at the descriptor quota"; rc=1; }
  vrun timeout 10 ibv_devinfo -d vrnic0 >/dev/null || { echo "FAIL: root cannot open vrnic0"; rc=1; }
  return "$rc"
}

# By reading: multicast attachments churned across many groups by the account for 3 s:
# vrnicd answers within a second meanwhile.
mcast_churn() {
  attack_with_probe_of "$A_MCAST_CHURN" "$SOCK" 3 1000
}

# Row 9: root's SEND latency (the worker path) idle and under the account's forged doorbells
# (24 sessions): printed, not judged -- two vCPUs shared with a busy attacker are the
# scheduler's to give out; what vrnicd controls, the budget, is tested in unit tests and by
# doorbell_user_look_max.
doorbell_p99() {
  local port idle busy
  port=$(next_port)
  verbs_pair send-lat-idle "$port" ib_send_lat -d vrnic0 -x 0 -F -s 2 -n 5000 || return 1
  idle=$(awk '$1 == 2 && NF >= 9 { print $8 }' "$CLIENT_LOG")
  as_attacker "$A_HOSTILE" doorbells 6 24 >"$VRNIC_TMP/db-p99.out" 2>&1 &
  local apid=$!
  sleep 1
  port=$(next_port)
  verbs_pair send-lat-busy "$port" ib_send_lat -d vrnic0 -x 0 -F -s 2 -n 5000 || return 1
  busy=$(awk '$1 == 2 && NF >= 9 { print $8 }' "$CLIENT_LOG")
  vrnic_wait_exit "$apid" 30
  echo "root's ib_send_lat -s 2, 99th percentile: idle ${idle:-?} us, under forged doorbells ${busy:-?} us"
  CHECK_NOTE="p99 ${idle:-?} us idle, ${busy:-?} us under forged doorbells"
  [[ -n $idle && -n $busy ]]
}

# Row 10: the account's /tmp/vrnicd-<uid>, made first by root (mode 0777): the account's
# program still finds a device -- auto-start puts its vrnicd in a private directory of its
# own (/tmp/vrnicd-<uid>.XXXXXX) and says whose the first one is.
squat_autostart() {
  local uid dir out rc=0
  uid=$(id -u "$ACCOUNT")
  dir=/tmp/vrnicd-$uid
  rm -rf "$dir" "$dir".* && mkdir -m 0777 "$dir" || return 1
  out=$(setpriv --reuid="$ACCOUNT" --regid="$ACCOUNT" --clear-groups --reset-env \
    env LD_LIBRARY_PATH="$SHARE/provider" HOME=/ VRNIC_AUTOSTART_IDLE=2 \
    timeout 20 ibv_devinfo -l 2>&1)
  echo "account, /tmp/vrnicd-$uid made by root (0777): ibv_devinfo -l:"
  sed 's/^/    /' <<<"$out"
  grep -q 'vrnic0' <<<"$out" || { echo "FAIL: the account's program found no device"; rc=1; }
  grep -q "started vrnicd .* at $dir\.[A-Za-z0-9]\{6\}/vrnicd.sock" <<<"$out" ||
    { echo "FAIL: auto-start did not use a private directory of the account's"; rc=1; }
  local log
  log=$(ls "$dir".*/vrnicd.sock.log 2>/dev/null | head -n 1)
  [[ -n $log ]] && grep -h "is not ours (uid 0" "$log" ||
    { echo "FAIL: vrnicd's log does not name the squatter"; rc=1; }
  pkill -u "$ACCOUNT" -x vrnicd 2>/dev/null
  wait_for 10 "the account's vrnicd to exit" sh -c "! pgrep -u '$ACCOUNT' -x vrnicd >/dev/null"
  rm -rf "$dir" "$dir".*
  return "$rc"
}
