# shellcheck shell=bash
# tests/lib_hosts.sh: several vrnicd as named hosts, and verbs programs between them, for the
# groups and benchmarks that run more than one daemon (dpdk, wire's workers). Source it after
# tests/lib.sh (and vrnic_tmp_init). SOCK[name], PID[name] and LOG[name] hold each daemon's
# socket, pid and log.
#
#   veth_pair NS1 NS2 V1 V2 [A1 A2]   two namespaces joined by a veth pair, with addresses
#                                     A1 and A2 (CIDR) if given; removed at cleanup
#   host_vrnicd NAME NETNS ARGS       a vrnicd in NETNS ("-": here) with ARGS
#   host_device NAME HOST INDEX       device vrnicINDEX of daemon HOST, as a host of its own
#   with_hosts SETUP NAME... -- CMD   CMD, once SETUP has started the daemons NAME...
#   stat_of COUNTER NAME              one `vrnicctl stats` counter of a daemon
#   wait_link NAME...                 each daemon's link up within 10 s
#   between SRV CLI PROG ARGS         PROG's server on daemon SRV, its client on CLI
#   perftest_between / pingpong_between SRV CLI PROG ARGS   the same, checking the results
#   integrity_between A ADDR_A B ADDR_B BYTES   the wire integrity test (RC at 1% loss) between
#                                     two daemons' devices, BYTES per setting
#   clean_counters NAME...            frames both ways, no ICRC or format errors
#   expect_refusal STATUS TEXT ARGS   `vrnicd ARGS` exits STATUS saying TEXT, leaving no socket
#   stop_hosts                        every daemon idle, exits 0 on SIGTERM

HOSTS_DIR=$VRNIC_TMP/hosts
mkdir -p "$HOSTS_DIR"
declare -gA SOCK PID LOG DEVNAME HOST_OF

# veth_pair NS1 NS2 VETH1 VETH2 [ADDR1 ADDR2]: two namespaces joined by a veth pair, both ends
# (and lo) up; without addresses for the dpdk ports, which own them; removed at cleanup.
veth_pair() {
  vrnic_on_cleanup "ip netns del $1 2>/dev/null; ip netns del $2 2>/dev/null"
  echo "+ ip netns add $1; ip netns add $2; veth $3 <-> $4${5:+, $5 <-> $6}"
  ip netns add "$1" && ip netns add "$2" &&
    ip link add "$3" netns "$1" type veth peer name "$4" netns "$2" || return 1
  if [[ -n ${5:-} ]]; then
    ip -n "$1" addr add "$5" dev "$3" && ip -n "$2" addr add "$6" dev "$4" || return 1
  fi
  ip -n "$1" link set lo up && ip -n "$2" link set lo up &&
    ip -n "$1" link set "$3" up && ip -n "$2" link set "$4" up
}

# host_vrnicd NAME NETNS ARGS...: a vrnicd (in NETNS, or here for "-"), tracked by NAME.
# Inside a namespace bpffs is mounted first (ip netns exec gives a private mount namespace;
# af_xdp's loader wants bpffs).
host_vrnicd() {
  local name=$1 ns=$2
  shift 2
  SOCK[$name]=$HOSTS_DIR/$name.sock
  LOG[$name]=$HOSTS_DIR/$name.log
  local cmd=("$VRNICD" --socket "${SOCK[$name]}" "$@")
  if [[ $ns != - ]]; then
    cmd=(ip netns exec "$ns" sh -c 'mount -t bpf bpf /sys/fs/bpf 2>/dev/null; exec "$@"' sh
      "${cmd[@]}")
  fi
  local main_pid=$VRNICD_PID main_log=$VRNICD_LOG rc
  VRNIC_DAEMON_START_TIMEOUT=30 _vrnicd_spawn "${SOCK[$name]}" "${LOG[$name]}" "${cmd[@]}"
  rc=$?
  PID[$name]=$VRNICD_PID
  VRNICD_PID=$main_pid VRNICD_LOG=$main_log
  return "$rc"
}

# host_device NAME HOST INDEX: device vrnicINDEX of the daemon HOST (started with --device),
# reachable as NAME in the functions here; its daemon is HOST's.
host_device() {
  SOCK[$1]=${SOCK[$2]}.vrnic$3
  LOG[$1]=${LOG[$2]}
  DEVNAME[$1]=vrnic$3
  HOST_OF[$1]=$2
}
pid_of() { echo "${PID[${HOST_OF[$1]:-$1}]}"; }
dev_of() { echo "${DEVNAME[$1]:-vrnic0}"; }

# with_hosts SETUP NAME... -- CMD...: CMD, the daemons NAME... running. SETUP (a function that
# starts them) runs the first time, and again if one died; a SETUP that failed is not tried
# again: the checks that need it fail at once, saying so.
declare -gA _SETUP_FAILED
with_hosts() {
  local setup=$1 up=1
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do
    [[ -n ${PID[$1]:-} ]] && _vrnic_running "${PID[$1]}" || up=0
    shift
  done
  shift
  if ((!up)); then
    ((${_SETUP_FAILED[$setup]:-0})) && { echo "$setup failed earlier"; return 1; }
    _SETUP_FAILED[$setup]=1
    "$setup" || return 1
    _SETUP_FAILED[$setup]=0
  fi
  "$@"
}

stat_of() { vrnic_stat "$1" "${SOCK[$2]}"; }

# wait_link NAME...: each daemon's link comes up within 10 s (a port starts with its link
# down: memif until its peer connects, a veth until both ends are up and running).
wait_link() {
  local d
  for d in "$@"; do
    for _ in $(seq 100); do
      [[ $(stat_of wire_link_up "$d") == 1 ]] && continue 2
      sleep 0.1
    done
    echo "the link of vrnicd $d is not up after 10 s"
    return 1
  done
  echo "links up: $*"
}


# between SERVER CLIENT PROG ARGS...: PROG's server on daemon SERVER, its client on CLIENT
# (both programs here, meeting over TCP on 127.0.0.1; their vrnicds carry the RoCE traffic).
between() {
  local srv=$1 cli=$2 prog=$3 port
  shift 3
  port=$(next_port)
  VRNIC_SOCKET=${SOCK[$srv]} VRNIC_CLIENT_ENV=VRNIC_SOCKET=${SOCK[$cli]} \
    VRNIC_CLIENT_DEVICE=$(dev_of "$cli") VRNICD_PID=$(pid_of "$srv") VRNICD_LOG=${LOG[$srv]} \
    verbs_pair "dpdk-$prog-$port" "$port" "$prog" "$@" || return 1
  _vrnic_running "$(pid_of "$cli")" || { echo "the client's vrnicd died"; vrnic_tail "${LOG[$cli]}"; return 1; }
  cat "$CLIENT_LOG"
}

perftest_between() {
  local srv=$1 cli=$2
  shift 2
  between "$srv" "$cli" "$@" -d "$(dev_of "$srv")" -x 0 -F && perftest_result_ok
}

pingpong_between() {
  local srv=$1 cli=$2 prog=$3
  shift 3
  # The caller's options come last: theirs win (e.g. another -n).
  between "$srv" "$cli" "$prog" -d "$(dev_of "$srv")" -g 0 -c -n 1000 "$@" && pingpong_result_ok
}

# integrity_between A ADDR_A B ADDR_B BYTES: the wire integrity test of issue 4 (every byte
# and completion checked; READ, WRITE, SEND, atomics, 64 WRs in flight) between the devices
# A and B (addresses ADDR_A, ADDR_B), BYTES per setting, at 1% loss both ways. The QPs'
# timeout is 14 (67 ms; retry budget 537 ms, perftest's default): two polling dpdk daemons and
# the test on two loaded cores once went 8 x 17 ms (timeout 12) without an ACK.
integrity_between() {
  VRNIC_WIRE_DAEMONS="${SOCK[$1]}@$2@$(dev_of "$1"),${SOCK[$3]}@$4@$(dev_of "$3")" \
    VRNIC_WIRE_BYTES=$5 VRNIC_WIRE_TIMEOUT=14 VRNIC_CATCH2_TIMEOUT=300 \
    VRNICD_PID=$(pid_of "$1") VRNICD_LOG=${LOG[$1]} VRNIC_SOCKET=${SOCK[$1]} \
    _catch2_case "$VRNIC_BUILD_DIR/tests/wire_integrity_test" \
    "RC across the wire under loss=1: every byte and completion verified"
}

# Both daemons' frames went over the wire with no ICRC or format errors.
clean_counters() {
  local d
  for d in "$@"; do
    echo "+ vrnicctl --socket ${SOCK[$d]} stats (wire)"
    vrnicctl_stats "${SOCK[$d]}" | grep -E '^wire_' | sed 's/^/    /'
    (($(stat_of wire_rx_packets "$d") > 0)) || { echo "FAIL: $d received nothing"; return 1; }
    (($(stat_of wire_rx_icrc_errors "$d") == 0)) || { echo "FAIL: ICRC errors at $d"; return 1; }
    (($(stat_of wire_rx_malformed "$d") == 0)) || { echo "FAIL: malformed frames at $d"; return 1; }
  done
}


# expect_refusal STATUS TEXT ARGS...: `vrnicd ARGS` exits with STATUS, says TEXT and leaves no
# socket (of any of its devices) behind.
expect_refusal() {
  local want=$1 text=$2 out rc sock=$HOSTS_DIR/refused.sock
  shift 2
  echo "+ vrnicd $*"
  out=$(timeout -k 2 30 "$VRNICD" --socket "$sock" "$@" 2>&1 </dev/null)
  rc=$?
  grep -v '^ \|^EAL\|^$\|^Usage' <<<"$out" | tail -n 3 | sed 's/^/    /'
  ((rc == want)) || { echo "FAIL: exit status $rc, want $want"; return 1; }
  grep -qF -- "$text" <<<"$out" || { echo "FAIL: no '$text' in its output"; return 1; }
  ! compgen -G "$sock*" >/dev/null || { echo "FAIL: it left a socket behind: $(echo "$sock"*)"; return 1; }
}

# stop_hosts: every daemon idle (no objects left) and exits 0 on SIGTERM.
stop_hosts() {
  local d ok=0
  # Local: a group's own vrnicd (wire's, say) keeps its VRNICD_PID and VRNIC_SOCKET.
  local VRNICD_PID VRNICD_LOG VRNIC_SOCKET
  for d in "${!PID[@]}"; do
    [[ -n ${PID[$d]} ]] || continue
    # shellcheck disable=SC2034 # VRNIC_SOCKET: vrnicd_idle_and_stop's daemon
    VRNICD_PID=${PID[$d]} VRNICD_LOG=${LOG[$d]} VRNIC_SOCKET=${SOCK[$d]}
    echo "== vrnicd $d"
    vrnicd_idle_and_stop || ok=1
    PID[$d]=
  done
  return "$ok"
}
