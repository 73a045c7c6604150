#!/usr/bin/env bash
# Several devices (virtual NICs) in one vrnicd: `vrnicd --udp A --device --udp B` serves vrnic0
# and vrnic1, each with its own socket, port, address, GID table, workers, objects and
# counters. Checked here:
#   - discovery: ibv_devices lists both (distinct GUIDs), ibv_devinfo shows each one's GID,
#     vrnicctl devices / --device;
#   - traffic between the two devices of one vrnicd (perftest, pingpong with data checks, the
#     wire integrity test at 1% loss) and from vrnic1 to another vrnicd;
#   - isolation: faults set on one device touch only its traffic and counters;
#   - refusals: a device without a wire port, two with one address, too many, a device whose
#     port cannot open (nothing left behind), an unknown device in vrnicctl.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init vnics
# shellcheck source=tests/lib_hosts.sh
source "$VRNIC_ROOT/tests/lib_hosts.sh"

UDP_PORT=$(free_udp_port) || exit 1
IP_V0=127.0.0.21 IP_V1=127.0.0.22 IP_P=127.0.0.23
# v: one vrnicd, vrnic0 on IP_V0 (one worker) and vrnic1 on IP_V1 (two workers); p: another
# vrnicd on IP_P.
start_hosts() {
  host_vrnicd v - --udp $IP_V0 --udp-port "$UDP_PORT" \
    --device --workers 2 --udp $IP_V1 --udp-port "$UDP_PORT" &&
    host_vrnicd p - --udp $IP_P --udp-port "$UDP_PORT" || return 1
  host_device v1 v 1
}
on_hosts() { with_hosts start_hosts v p -- "$@"; }

listed() {
  local out=$VRNIC_TMP/vnics-devices.out
  echo "+ VRNIC_SOCKET=${SOCK[v]} ibv_devices"
  vrun VRNIC_SOCKET="${SOCK[v]}" timeout -k 2 10 ibv_devices >"$out" 2>&1 </dev/null
  sed 's/^/    /' "$out"
  awk '$1 == "vrnic0" { g0 = $2 } $1 == "vrnic1" { g1 = $2 }
       END { exit !(g0 != "" && g1 != "" && g0 != g1) }' "$out" ||
    { echo "FAIL: want vrnic0 and vrnic1 with different GUIDs"; return 1; }
  echo "+ vrnicctl --socket ${SOCK[v]} devices"
  "$VRNICCTL" --socket "${SOCK[v]}" devices | tee "$out" | sed 's/^/    /'
  grep -qx "vrnic1 socket=${SOCK[v1]} .*" "$out" || { echo "FAIL: vrnic1's socket not listed"; return 1; }
}
check "vrnicd --device: ibv_devices lists vrnic0 and vrnic1 (own GUIDs); vrnicctl devices" \
  on_hosts listed

# Each device's GID 0 is its own address, whichever device's socket the client starts from.
gids() {
  local d ip out
  for d in v v1; do
    ip=$IP_V0
    [[ $d == v1 ]] && ip=$IP_V1
    echo "+ VRNIC_SOCKET=${SOCK[v1]} ibv_devinfo -v -d $(dev_of $d)"
    out=$(vrun VRNIC_SOCKET="${SOCK[v1]}" timeout -k 2 10 ibv_devinfo -v -d "$(dev_of $d)" 2>&1)
    grep -E 'hca_id|state:|GID\[' <<<"$out" | sed 's/^/    /'
    grep -q "PORT_ACTIVE" <<<"$out" && grep -q "GID\[  0\]:.*::ffff:$ip, RoCE v2" <<<"$out" ||
      { echo "FAIL: $(dev_of $d): want PORT_ACTIVE and GID[0] ::ffff:$ip"; return 1; }
  done
}
check "ibv_devinfo -d vrnic0 / -d vrnic1: each its own GID[0] (::ffff:$IP_V0, ::ffff:$IP_V1)" \
  on_hosts gids

check "ib_write_bw -s 65536 -n 5000: vrnic0 -> vrnic1 of one vrnicd" \
  on_hosts perftest_between v v1 ib_write_bw -s 65536 -n 5000
check "ib_read_bw -s 65536 -n 2000: vrnic0 <- vrnic1 of one vrnicd" \
  on_hosts perftest_between v v1 ib_read_bw -s 65536 -n 2000
check "ib_send_bw -s 4096 -n 5000: vrnic1 -> vrnic0 of one vrnicd" \
  on_hosts perftest_between v1 v ib_send_bw -s 4096 -n 5000
check "ibv_rc_pingpong: vrnic0 <-> vrnic1 of one vrnicd" \
  on_hosts pingpong_between v v1 ibv_rc_pingpong
check "ibv_ud_pingpong: vrnic0 <-> vrnic1 of one vrnicd" \
  on_hosts pingpong_between v v1 ibv_ud_pingpong -s 1024
check "ibv_rc_pingpong: vrnic1 <-> another vrnicd" on_hosts pingpong_between v1 p ibv_rc_pingpong

integrity() { integrity_between v $IP_V0 v1 $IP_V1 256M; }
check "wire integrity test, 256 MiB at 1% loss: vrnic0 <-> vrnic1 of one vrnicd" \
  on_hosts integrity

# Faults set on vrnic1 touch only vrnic1's received packets: vrnic0's counters do not move.
# (Duplicates, not losses: ibv_rc_pingpong's server may exit before its last ACK is through,
# and a lost one then fails the client, on any RNIC.)
isolated_faults() {
  local before0 after0 after1 rc=0
  before0=$(stat_of faults_duplicated v)
  echo "+ vrnicctl --socket ${SOCK[v]} --device vrnic1 faults dup=10"
  "$VRNICCTL" --socket "${SOCK[v]}" --device vrnic1 faults dup=10 || return 1
  pingpong_between v v1 ibv_rc_pingpong -n 2000 || rc=1
  after0=$(stat_of faults_duplicated v) after1=$(stat_of faults_duplicated v1)
  "$VRNICCTL" --socket "${SOCK[v]}" --device vrnic1 faults "" || rc=1
  echo "faults_duplicated: vrnic0 $before0 -> $after0, vrnic1 $after1"
  ((after1 > 0)) || { echo "FAIL: vrnic1 duplicated nothing"; return 1; }
  ((after0 == before0)) || { echo "FAIL: vrnic0 duplicated packets too"; return 1; }
  return "$rc"
}
check "faults on vrnic1 (vrnicctl --device vrnic1) touch vrnic1's packets only" \
  on_hosts isolated_faults
check "every device's counters: frames both ways, no ICRC or format errors" \
  on_hosts clean_counters v v1 p

unknown_device() {
  local out rc
  echo "+ vrnicctl --socket ${SOCK[v]} --device vrnic7 stats"
  out=$("$VRNICCTL" --socket "${SOCK[v]}" --device vrnic7 stats 2>&1)
  rc=$?
  echo "    $out"
  ((rc == 1)) && grep -q "no device vrnic7" <<<"$out" ||
    { echo "FAIL: want exit 1 and 'no device vrnic7'"; return 1; }
}
check "vrnicctl --device vrnic7: a clear error, exit 1" on_hosts unknown_device

refusals() {
  local ok=0 many=() i
  for i in 0 1 2 3 4 5 6 7; do many+=(--device --udp 127.0.0.3$i); done
  expect_refusal 2 "vrnic1 needs a wire port" --udp 127.0.0.24 --device || ok=1
  expect_refusal 2 "already has this address" --udp 127.0.0.24 --device --udp 127.0.0.24 || ok=1
  expect_refusal 2 "at most 8 devices" --udp 127.0.0.24 "${many[@]}" || ok=1
  # vrnic1's address and port are vrnicd p's: vrnic1 cannot open its port; vrnic0, already
  # up, is taken down again and no socket is left.
  expect_refusal 1 "vrnic1: " --udp 127.0.0.24 --udp-port "$UDP_PORT" \
    --device --udp $IP_P --udp-port "$UDP_PORT" || ok=1
  return "$ok"
}
check "vrnicd refuses: no wire port, a shared address, 9 devices, a port that fails" \
  on_hosts refusals

stopped() {
  echo "== vrnic1"
  VRNIC_SOCKET=${SOCK[v1]} wait_objects_zero 10 || return 1
  stop_hosts || return 1
  [[ ! -e ${SOCK[v1]} ]] || { echo "FAIL: vrnic1's socket ${SOCK[v1]} is left"; return 1; }
}
((${#PID[@]} > 0)) && check "every vrnicd: no objects left on any device, exits 0 on SIGTERM" stopped

vrnic_script_finish
