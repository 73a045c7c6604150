# shellcheck shell=bash
# tests/lib_dpdk.sh: vrnicd on the dpdk port, for tests/integration/65_dpdk.sh and
# perf/bench_dpdk.sh. Source it after tests/lib.sh (and vrnic_tmp_init). Daemons are named;
# SOCK[name], PID[name] and LOG[name] hold their socket, pid and log.
#
#   need_dpdk                     root and the dpdk module, or a message saying which is missing
#   veth_pair NS1 NS2 V1 V2       two namespaces joined by a veth pair (removed at cleanup)
#   dpdk_daemon NAME NETNS ARGS   a vrnicd in NETNS ("-": here) with ARGS
#   wait_link NAME...             each daemon's link up within 10 s
#   stat_of COUNTER NAME          one `vrnicctl stats` counter of a daemon

DPDK_MODULE=$VRNIC_BUILD_DIR/dataplane/dpdk/vrnic_port_dpdk.so
EAL_BASE="--no-huge -m 256 --no-pci"
# af_packet's default ring drops most 1500 B frames on this machine; this one does not.
AF_PACKET_RING="blocksz=65536,framesz=2048,framecnt=32768"
DIR=$VRNIC_TMP/dpdk
mkdir -p "$DIR"
declare -gA SOCK PID LOG

# dpdk_daemon NAME NETNS ARGS...: a vrnicd (in NETNS, or here for "-"), tracked by NAME.
# Inside a namespace bpffs is mounted first (ip netns exec gives a private mount namespace;
# af_xdp's loader wants bpffs).
dpdk_daemon() {
  local name=$1 ns=$2
  shift 2
  SOCK[$name]=$DIR/$name.sock
  LOG[$name]=$DIR/$name.log
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

need_dpdk() {
  ((EUID == 0)) || { echo "network namespaces and DPDK's devices need root"; return 1; }
  [[ -e $DPDK_MODULE ]] || {
    echo "the dpdk module is not built ($DPDK_MODULE): is libdpdk-dev installed?"
    return 1
  }
}

# veth_pair NS1 NS2 VETH1 VETH2: two namespaces joined by a veth pair, both ends up, no
# addresses (the dpdk ports own them); removed at cleanup.
veth_pair() {
  vrnic_on_cleanup "ip netns del $1 2>/dev/null; ip netns del $2 2>/dev/null"
  echo "+ ip netns add $1; ip netns add $2; veth $3 <-> $4"
  ip netns add "$1" && ip netns add "$2" &&
    ip link add "$3" netns "$1" type veth peer name "$4" netns "$2" &&
    ip -n "$1" link set "$3" up && ip -n "$2" link set "$4" up
}

stat_of() { vrnic_stat "$1" "${SOCK[$2]}"; }

# wait_link NAME...: each daemon's link comes up within 10 s (a port starts with its link
# down: memif until its peer connects, a veth until both ends are up and running).
wait_link() {
  local d
  for d in "$@"; do
    for _ in $(seq 100); do
      [[ $(stat_of link_up "$d") == 1 ]] && continue 2
      sleep 0.1
    done
    echo "the link of vrnicd $d is not up after 10 s"
    return 1
  done
  echo "links up: $*"
}

