#!/usr/bin/env bash
# Device discovery: ibv_devices / ibv_devinfo through vrnic, with and without a daemon.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init devices

# No daemon: VRNIC_SOCKET names a path where nothing listens. ibv_devices must exit promptly
# and successfully, list no device, and print exactly one stderr line saying how to start vrnicd.
no_daemon() {
  local sock=$VRNIC_TMP/no-daemon/vrnicd.sock out=$VRNIC_TMP/nd.out err=$VRNIC_TMP/nd.err
  local start rc secs ok=0 devs nerr
  require_provider || return 1
  echo "+ VRNIC_SOCKET=$sock ibv_devices"
  start=$(vrnic_now_us)
  vrun VRNIC_SOCKET="$sock" timeout -k 2 10 ibv_devices >"$out" 2>"$err" </dev/null
  rc=$?
  secs=$(vrnic_elapsed "$start")
  echo "exit status $rc after ${secs}s"
  echo "--- stdout:"; cat "$out"
  echo "--- stderr:"; cat "$err"
  echo "---"
  if ((rc != 0)); then
    echo "FAIL: ibv_devices exited with $(_vrnic_status_word "$rc"), want 0 (an empty device list)"
    ok=1
  fi
  if ((${secs%.*} >= 5)); then
    echo "FAIL: took ${secs}s, want well under 5s"
    ok=1
  fi
  # Everything but ibv_devices' two header lines is a device.
  devs=$(grep -vE '^[[:space:]]*(device|------)' "$out" | grep -c '[^[:space:]]')
  if ((devs != 0)); then
    echo "FAIL: $devs device line(s) listed, want none"
    ok=1
  fi
  nerr=$(grep -c '[^[:space:]]' "$err")
  if ((nerr != 1)); then
    echo "FAIL: $nerr non-empty stderr line(s), want exactly one"
    ok=1
  fi
  if ! grep -q 'vrnicd' "$err"; then
    echo "FAIL: stderr does not mention vrnicd (how to start it)"
    ok=1
  fi
  return "$ok"
}

lists_vrnic0() {
  local out=$VRNIC_TMP/devices.out
  require_provider || return 1
  ensure_vrnicd || return 1
  echo "+ ibv_devices"
  vrun timeout -k 2 10 ibv_devices >"$out" 2>&1 </dev/null
  local rc=$?
  cat "$out"
  ((rc == 0)) || { echo "ibv_devices: $(_vrnic_status_word "$rc")"; return 1; }
  awk '$1 == "vrnic0" { found = 1 } END { exit !found }' "$out" ||
    { echo "vrnic0 not listed"; return 1; }
}

devinfo() {
  local out=$VRNIC_TMP/devinfo.out ok=0 rc
  require_provider || return 1
  ensure_vrnicd || return 1
  echo "+ ibv_devinfo -v -d vrnic0"
  vrun timeout -k 2 10 ibv_devinfo -v -d vrnic0 >"$out" 2>&1 </dev/null
  rc=$?
  cat "$out"
  echo "---"
  ((rc == 0)) || { echo "FAIL: ibv_devinfo: $(_vrnic_status_word "$rc")"; ok=1; }
  grep -qE 'state:[[:space:]]*PORT_ACTIVE' "$out" || { echo "FAIL: no 'state: PORT_ACTIVE'"; ok=1; }
  grep -qE 'link_layer:[[:space:]]*Ethernet' "$out" ||
    { echo "FAIL: no 'link_layer: Ethernet'"; ok=1; }
  grep -qE 'GID\[[[:space:]]*0\]:[[:space:]]*::ffff:127\.0\.0\.1,[[:space:]]*RoCE v2' "$out" ||
    { echo "FAIL: no 'GID[  0]: ::ffff:127.0.0.1, RoCE v2' line"; ok=1; }
  return "$ok"
}

check "no daemon: ibv_devices exits promptly, lists nothing, one stderr line naming vrnicd" no_daemon
check "ibv_devices lists vrnic0" lists_vrnic0
check "ibv_devinfo -v -d vrnic0: PORT_ACTIVE, link_layer Ethernet, GID[0] ::ffff:127.0.0.1 RoCE v2" devinfo
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
