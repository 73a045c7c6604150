#!/usr/bin/env bash
# rdma_cm through vrnic (issue 20): the drop-in librdmacm.so.1 (its ABI against rdma-core 44's)
# and rdmacm-utils' programs, server and client on one vrnicd. Their connections go through
# vrnicd's connection manager and QP1 on the loop port, the same CM MADs a kernel peer gets;
# the data is checked by the programs themselves (rping -V). Failure paths: no listener
# (REJECTED reason 8, ECONNREFUSED on a sync id), a client killed while connected.
# shellcheck source=tests/lib.sh disable=SC2317,SC2119 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init rdmacm
# shellcheck source=tests/lib_hosts.sh
source "$VRNIC_ROOT/tests/lib_hosts.sh"

RDMACM_DIR=$VRNIC_PROVIDER_DIR
SYSTEM_RDMACM=/usr/lib/x86_64-linux-gnu/librdmacm.so.1
# vrnic's librdmacm.so.1 and libibverbs.so.1, never the system's; every symbol bound at load.
CM_RUN=(env "LD_LIBRARY_PATH=$VRNIC_PROVIDER_DIR" LD_BIND_NOW=1)

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
  [[ -n ${CM_SERVER_SOCK:-} ]] || ensure_vrnicd || return 1
  local ssock=${CM_SERVER_SOCK:-$VRNIC_SOCKET} csock=${CM_CLIENT_SOCK:-$VRNIC_SOCKET}
  tmo=$(vrnic_timeout 60)
  CM_SERVER_LOG=$VRNIC_TMP/$tag.server.log
  CM_CLIENT_LOG=$VRNIC_TMP/$tag.client.log
  # CM_SERVER_NS / CM_CLIENT_NS: the network namespace each runs in, if any.
  local sns=() cns=()
  [[ -n ${CM_SERVER_NS:-} ]] && sns=(ip netns exec "$CM_SERVER_NS")
  [[ -n ${CM_CLIENT_NS:-} ]] && cns=(ip netns exec "$CM_CLIENT_NS")
  echo "+ ${sns[*]} ${srv[*]} &   # server"
  VRNIC_SOCKET=$ssock "${CM_RUN[@]}" "${sns[@]}" timeout -k 5 "$tmo" "${srv[@]}" \
    >"$CM_SERVER_LOG" 2>&1 </dev/null &
  pid=$!
  _vrnic_track "$pid"
  # CM_SERVER_READY: how to tell the server is ready, if not by its listener in vrnicd.
  local ready=(stat_is cm_listeners 1 "$ssock")
  [[ -n ${CM_SERVER_READY:-} ]] && read -ra ready <<<"$CM_SERVER_READY"
  if ! wait_for 15 "the server ready (${ready[*]})" "${ready[@]}"; then
    vrnic_tail "$CM_SERVER_LOG"
    kill "$pid" 2>/dev/null
    return 1
  fi
  echo "+ ${cns[*]} ${cli[*]}   # client"
  VRNIC_SOCKET=$csock vrnic_fg "${CM_RUN[@]}" "${cns[@]}" timeout -k 5 "$tmo" "${cli[@]}" \
    >"$CM_CLIENT_LOG" 2>&1 </dev/null
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
  [[ -n ${CM_SERVER_SOCK:-} ]] || vrnicd_check_alive || rc=1
  return "$rc"
}

rping_pair() {  # ARGS for both sides (after -a/-p)
  local port
  port=$(next_port)
  local at=${CM_SERVER_ADDR:-127.0.0.1}
  # shellcheck disable=SC2086 # RPING_CLIENT_ARGS: words
  cm_pair "rping-$port" rping -s -a "$at" -p "$port" "$@" -- \
    rping -c ${RPING_CLIENT_ARGS:-} -a "$at" -p "$port" "$@" || return 1
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

# CM_CLIENT_BIND: the client's own address (another vrnicd's), for runs across two.
ucmatose_pair() {
  local at=${CM_SERVER_ADDR:-127.0.0.1}
  # shellcheck disable=SC2086
  cm_pair "ucmatose-$1" ucmatose -b "$at" "${@:2}" -- \
    ucmatose ${CM_CLIENT_BIND:+-b $CM_CLIENT_BIND} -s "$at" "${@:2}" && status_zero_both
}

udaddy_pair() {
  # shellcheck disable=SC2086
  local at=${CM_SERVER_ADDR:-127.0.0.1}
  # shellcheck disable=SC2086
  cm_pair udaddy udaddy -b "$at" -- udaddy ${CM_CLIENT_BIND:+-b $CM_CLIENT_BIND} -s "$at" &&
    status_zero_both
}

# mckey (rdmacm-utils' multicast test) as its man page runs it: a receiver joined to a group
# until 20 datagrams came, a sender joined to it sending them; on one vrnicd, or (in_namespaces)
# the receiver on one and the sender on another, the datagrams IP multicast on the veth
# (issue 32 item 6). The receiver is ready once its QP is attached to the group (its vrnicd's
# mcast_attached).
mckey_pair() {
  local group=230.1.2.$((RANDOM % 200 + 1))
  CM_SERVER_READY="stat_is mcast_attached 1 ${CM_SERVER_SOCK:-$VRNIC_SOCKET}" \
    cm_pair mckey mckey -m "$group" -b "${CM_SERVER_ADDR:-127.0.0.1}" -C 20 -- \
    mckey -m "$group" -b "${CM_CLIENT_BIND:-127.0.0.1}" -s -C 20 && status_zero_both || return 1
  grep -q 'joined dgid: ::ffff:'"$group" "$CM_SERVER_LOG" ||
    { echo "FAIL: the receiver did not say it joined $group"; return 1; }
}

# perftest's -R: its connections through rdma_cm (keys exchanged on the QP itself). Its server
# listens for the second connection only once the first is up, and Debian's perftest takes the
# REJ (reason 8, no listener yet) its client then may get as the end: a race the server lost
# once in a fresh-machine run here. As in the rxe group (tests/tools/cm_connect_gate), the
# client's every rdma_resolve_addr waits until vrnicd has a listener again (the server
# destroys its first before the exchange the client waits for).
perftest_rdmacm() {
  local prog=$1 gate=$VRNIC_TMP/cm-gate.sh
  shift
  [[ -e $CM_GATE_SO ]] || { echo "FAIL: $CM_GATE_SO not built"; return 1; }
  cat >"$gate" <<EOF
n=0
until $VRNICCTL stats | grep -qx 'cm_listeners=[1-9][0-9]*' || [ \$n -ge 300 ]; do
  sleep 0.05; n=\$((n + 1))
done
EOF
  cm_pair "$prog-R" "$prog" -R -d vrnic0 -F "$@" -- \
    env LD_PRELOAD="$CM_GATE_SO" VRNIC_CM_GATE="sh $gate" "$prog" -R -d vrnic0 -F "$@" 127.0.0.1 ||
    return 1
  CLIENT_LOG=$CM_CLIENT_LOG perftest_result_ok
}

# Two vrnicd on the udp port, 127.0.0.1 (the servers) and 127.0.0.2 (the clients).
CM_UDP_PORT=
two_hosts() {
  CM_UDP_PORT=$(free_udp_port) || return 1
  host_vrnicd cm1 - --udp 127.0.0.1 --udp-port "$CM_UDP_PORT" &&
    host_vrnicd cm2 - --udp 127.0.0.2 --udp-port "$CM_UDP_PORT"
}
across() {
  with_hosts two_hosts cm1 cm2 -- across_run "$@"
}
across_run() {
  # Seen by the functions it runs (bash's dynamic scope).
  local CM_SERVER_SOCK=${SOCK[cm1]} CM_CLIENT_SOCK=${SOCK[cm2]} CM_CLIENT_BIND=127.0.0.2
  local RPING_CLIENT_ARGS="-I 127.0.0.2"
  "$@"
}

# One vrnicd with two devices, vrnic0 on 127.0.0.11 and vrnic1 on 127.0.0.12: a listener on
# the wildcard address listens on both, as the kernel's does. rping's server on 0.0.0.0 takes
# a connection to each device's address, from the other device (rping -V checks the data).
two_devices() {
  local port
  port=$(free_udp_port) || return 1
  host_vrnicd dv - --udp 127.0.0.11 --udp-port "$port" --device --udp 127.0.0.12 \
    --udp-port "$port" && host_device dv1 dv 1
}
wildcard_listener() { with_hosts two_devices dv -- wildcard_run; }
wildcard_run() {
  local CM_SERVER_SOCK=${SOCK[dv]} CM_CLIENT_SOCK=${SOCK[dv]} port from to pair
  # The listen on vrnic1 comes after vrnic0's, within the same rdma_listen.
  local CM_SERVER_READY="stat_is cm_listeners 1 ${SOCK[dv1]}"
  for pair in "127.0.0.12 127.0.0.11" "127.0.0.11 127.0.0.12"; do
    read -r from to <<<"$pair"
    port=$(next_port)
    cm_pair "rping-any-$port" rping -s -a 0.0.0.0 -p "$port" -C 10 -V -- \
      rping -c -I "$from" -a "$to" -p "$port" -C 10 -V || return 1
    echo "$from -> $to, accepted by the listener on 0.0.0.0: 10 pings verified"
  done
}

# One vrnicd with an IPv4 device (127.0.0.21) and an IPv6 one (::1): an IPv4 and an IPv6
# wildcard id with RDMA_OPTION_ID_AFONLY listen at one port, each taking its family's
# connections (tests/tools/cm_afonly), as the kernel's cma_check_port allows.
two_families() {
  local port
  port=$(free_udp_port) || return 1
  host_vrnicd af - --udp 127.0.0.21 --udp-port "$port" --device --udp ::1 --udp-port "$port"
}
afonly_run() {
  VRNIC_SOCKET=${SOCK[af]} vrnic_fg "${CM_RUN[@]}" timeout 30 \
    "$VRNIC_BUILD_DIR/tests/cm_afonly" 127.0.0.21 ::1 "$(next_port)"
}

sync_pair() {  # rdma_server/rdma_client and the x variants: "end 0" on both sides
  local server=$1 client=$2
  shift 2
  cm_pair "$server" "$server" "$@" -- "$client" -s "${CM_SERVER_ADDR:-127.0.0.1}" "$@" || return 1
  grep -q "$server: end 0" "$CM_SERVER_LOG" && grep -q "$client: end 0" "$CM_CLIENT_LOG"
}

cmtime_1000() {
  CM_KEEP_SERVER=1 cm_pair cmtime cmtime -b 127.0.0.1 -c 1000 -- cmtime -s 127.0.0.1 -c 1000 ||
    return 1
  grep -E '^(connect|disconnect) ' "$CM_CLIENT_LOG"
  CHECK_NOTE=$(awk '$1 == "connect" { print "connect " $3 " ms total" }' "$CM_CLIENT_LOG")
  grep -q '^destroy ' "$CM_CLIENT_LOG"
}

# Two namespaces joined by a veth pair, a vrnicd with a udp port at each end: the programs as on
# two hosts that see only their own interface, no loopback address in play. (libfabric's verbs
# provider offers only devices with an address on an interface other than lo: here the veth's;
# in the root namespace, the host's, which a default vrnicd takes: in_root below.)
NS_A=vrnic-cma-$$ NS_B=vrnic-cmb-$$ NS_ADDR_A=10.200.0.1 NS_ADDR_B=10.200.0.2
ns_hosts() {
  ((EUID == 0)) || { echo "network namespaces need root"; return 1; }
  veth_pair "$NS_A" "$NS_B" "vca$$" "vcb$$" "$NS_ADDR_A/24" "$NS_ADDR_B/24" &&
    host_vrnicd na "$NS_A" --udp "$NS_ADDR_A" && host_vrnicd nb "$NS_B" --udp "$NS_ADDR_B"
}
# ns_roles SERVER_HOST SERVER_NS SERVER_ADDR CLIENT_HOST CLIENT_NS CLIENT_ADDR CMD...: CMD with
# the server on the first namespace's vrnicd, the client on the second's.
ns_roles() {
  local CM_SERVER_SOCK=${SOCK[$1]} CM_SERVER_NS=$2 CM_SERVER_ADDR=$3
  local CM_CLIENT_SOCK=${SOCK[$4]} CM_CLIENT_NS=$5 CM_CLIENT_BIND=$6 RPING_CLIENT_ARGS="-I $6"
  shift 6
  "$@"
}
ns_run() { ns_roles na "$NS_A" "$NS_ADDR_A" nb "$NS_B" "$NS_ADDR_B" "$@"; }
ns_run_reversed() { ns_roles nb "$NS_B" "$NS_ADDR_B" na "$NS_A" "$NS_ADDR_A" "$@"; }
in_namespaces() {
  with_hosts ns_hosts na nb -- ns_run "$@"
}
# The same two, the other way round: the server in the second namespace.
in_namespaces_reversed() {
  with_hosts ns_hosts na nb -- ns_run_reversed "$@"
}

# The root namespace and a vrnicd started with no options: a loop port whose GIDs are
# 127.0.0.1 and the host's interface addresses (Device::add_host_addresses), by which
# libfabric's verbs provider finds vrnic0, as it finds rxe by its Ethernet interface's. On a
# host with no such address (up, not loopback) the test gives it one first: a veth pair of its
# own with a loopback address at one end (no traffic leaves vrnicd either way: every peer
# here is a local process on the loop port).
ROOT_VETH=vrd$$
root_default() {
  if [[ -z $(ip -o addr show up | awk '$2 != "lo" && $4 !~ /^fe80:/') ]]; then
    ((EUID == 0)) || { echo "no interface address but lo's, and no root to add one"; return 1; }
    vrnic_on_cleanup "ip link del ${ROOT_VETH}a 2>/dev/null"
    echo "+ ip link add ${ROOT_VETH}a type veth peer name ${ROOT_VETH}b; 127.0.0.31/32 on it"
    ip link add "${ROOT_VETH}a" type veth peer name "${ROOT_VETH}b" &&
      ip addr add 127.0.0.31/32 dev "${ROOT_VETH}a" && ip link set "${ROOT_VETH}a" up &&
      ip link set "${ROOT_VETH}b" up || return 1
  fi
  host_vrnicd rd -
}
root_run() {
  local CM_SERVER_SOCK=${SOCK[rd]} CM_CLIENT_SOCK=${SOCK[rd]} CM_SERVER_ADDR=127.0.0.1
  "$@"
}
in_root() {
  with_hosts root_default rd -- root_run "$@"
}
fi_offers_msg() {
  local out
  out=$(VRNIC_SOCKET=${SOCK[rd]} "${CM_RUN[@]}" timeout 30 fi_info -p verbs -t FI_EP_MSG 2>&1)
  echo "$out" | grep -E 'domain|type' | sort -u | sed 's/^/    /'
  grep -q 'domain: vrnic0$' <<<"$out" && grep -q 'FI_EP_MSG' <<<"$out"
}

# A TCP server listening on PORT in namespace NS ("-": this one).
tcp_listening() {
  local in=()
  [[ $1 != - ]] && in=(ip netns exec "$1")
  [[ -n $("${in[@]}" ss -Hltn "sport = :$2") ]]
}

# fi_pingpong ARGS (libfabric's verbs provider, its connections through rdma_cm): the server
# listens on rdma_cm only once the client reached it on its TCP control port. Both exit 0;
# with -c each checks every byte it received. Its default sizes, 64 B to 1 MiB: at 1 MiB a
# vrnicd's sends overtake each other on the veth, and the sequence NAKs that follow once
# failed the server's QP at the first one, when its retry count came from fi_pingpong's
# accept (0) instead of the REQ (7), as ib_cm takes it (see cm_retry_counts).
fi_pair() {
  local port
  port=$(next_port)
  CM_SERVER_READY="tcp_listening ${CM_SERVER_NS:--} $port" cm_pair "fi-$port" \
    fi_pingpong -B "$port" "$@" -- fi_pingpong -P "$port" "$@" "$CM_SERVER_ADDR" || return 1
  grep -E '^(bytes|[0-9]+[km]?) ' "$CM_CLIENT_LOG" | sed 's/^/    /'
  CHECK_NOTE=$(awk '$1 ~ /^[0-9]+[km]?$/ { print $1 ": " $7 " us per transfer" }' \
    "$CM_CLIENT_LOG" | tail -1)
  grep -qE '^1m +[0-9]+[km]? +=' "$CM_CLIENT_LOG" ||
    { echo "FAIL: no 1 MiB round reported"; return 1; }
}

# Open MPI over libfabric (verbs;ofi_rxm, connections through rdma_cm): build/tests/mpi_check,
# 2 ranks on the vrnicd HOST, in namespace NS (or this one). Debian's Open MPI 4.1 builds its openib BTL
# without the rdmacm CPC (only udcm, which does not run on RoCE), so the MTL for OFI is the
# way its MPI reaches rdma_cm. osc pt2pt: one-sided over the same MTL.
MPI_CHECK=$VRNIC_BUILD_DIR/tests/mpi_check
mpi_over_ofi() {  # HOST [NS]
  local host=$1 in=() out=$VRNIC_TMP/mpi-ofi.$1.log rc passed mads bytes
  [[ -n ${2:-} ]] && in=(ip netns exec "$2")
  [[ -x $MPI_CHECK ]] || { echo "$MPI_CHECK not built (libopenmpi-dev)"; return 1; }
  mads=$(stat_of cm_mads_received "$host")
  bytes=$(stat_of bytes_sent "$host")
  local cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml cm
    --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm" --mca btl self --mca osc pt2pt
    -x LD_LIBRARY_PATH -x VRNIC_SOCKET -x LD_BIND_NOW "$MPI_CHECK")
  echo "+ ${in[*]} ${cmd[*]}"
  VRNIC_SOCKET=${SOCK[$host]} vrnic_fg "${CM_RUN[@]}" "${in[@]}" \
    timeout -k 5 "$(vrnic_timeout 120)" "${cmd[@]}" >"$out" 2>&1 </dev/null
  rc=$?
  grep 'mpi_check:' "$out" | sed 's/^/    /'
  passed=$(grep -c 'checks passed' "$out")
  mads=$(($(stat_of cm_mads_received "$host") - mads))
  bytes=$(($(stat_of bytes_sent "$host") - bytes))
  echo "    vrnicd: $mads CM MADs received, $bytes bytes sent"
  if ((rc != 0 || passed != 2)); then
    echo "FAIL: mpirun $(_vrnic_status_word "$rc"), $passed of 2 ranks passed"
    vrnic_tail "$out" 30
    return 1
  fi
  # The connections went through vrnicd's CM, the data through its transport (16 MiB and more).
  ((mads > 0 && bytes >= 16 << 20)) || { echo "FAIL: not through vrnic's rdma_cm?"; return 1; }
  CHECK_NOTE="2 ranks, $mads CM MADs"
}

# rstream (rsockets) OPTS: server and client, both must exit 0; with -T v each checks every
# byte it received.
# rsocket_pair PROG ARGS: rstream, or riostream (its data written with riowrite into the
# peer's riomap'ed buffer, which the peer watches in memory), server and client; -T v: each
# side checks the data.
rsocket_pair() {
  local prog=$1 port at=${CM_SERVER_ADDR:-127.0.0.1}
  shift
  port=$(next_port)
  # shellcheck disable=SC2086
  cm_pair "$prog-$port" "$prog" -b "$at" -p "$port" "$@" -- \
    "$prog" -s "$at" ${CM_CLIENT_BIND:+-b $CM_CLIENT_BIND} -p "$port" "$@" || return 1
  sed -n '/^name/,$p' "$CM_CLIENT_LOG" | sed 's/^/    /'
  CHECK_NOTE=$(awk 'NR == 2 { print $7 " Gb/s" }' "$CM_CLIENT_LOG")
}
rstream_pair() { rsocket_pair rstream "$@"; }
riostream_pair() { rsocket_pair riostream "$@"; }

# udpong (datagram rsockets) ARGS for both sides: the server as its man page starts it (no
# address: bound where getaddrinfo(NULL, port) says), serving until it is stopped; the client
# at 127.0.0.1 (or the server's vrnicd's address). Its report: xfers is what the server
# counted (datagrams, which a receiver without a free buffer drops, as UDP's are).
# Custom runs (-C, -S): the default run's latency tests resend after 1 ms and echo whatever
# came back, so each reply later than that stays in flight for the rest of the run (see
# README); on a 2-vCPU machine a few are.
udpong_pair() {
  local port at=${CM_SERVER_ADDR:-127.0.0.1}
  port=$(next_port)
  # (the server's stdout line-buffered: it is stopped with SIGTERM, its report kept)
  CM_KEEP_SERVER=1 cm_pair "udpong-$port" stdbuf -oL udpong -p "$port" "$@" -- \
    udpong -s "$at" -p "$port" "$@" || return 1
  sed -n '/^name/,$p' "$CM_CLIENT_LOG" | sed 's/^/    /'
  grep -q 'client login from' "$CM_SERVER_LOG" || { echo "FAIL: no login at the server"; return 1; }
  CHECK_NOTE=$(awk '$1 == "custom" { print $3 " xfers, " $7 " us/xfer" }' "$CM_CLIENT_LOG")
  [[ -n $CHECK_NOTE ]] || { echo "FAIL: no result line"; return 1; }
}

# AF_IB addresses (tests/tools/cm_af_ib), and rdmacm-utils' programs given GIDs (-f gid: AF_IB
# addresses from rdma_getaddrinfo): the loop port's GID 0 written as IPv6.
cm_af_ib() {
  vrnic_fg "${CM_RUN[@]}" timeout 30 "$VRNIC_BUILD_DIR/tests/cm_af_ib" "$(next_port)"
}
gid_ucmatose() {  # ARGS for both sides
  cm_pair "ucmatose-gid-$RANDOM" ucmatose -f gid -b ::ffff:127.0.0.1 "$@" -- \
    ucmatose -f gid -s ::ffff:127.0.0.1 "$@" && status_zero_both
}
gid_udaddy() {
  cm_pair "udaddy-gid-$RANDOM" udaddy -f gid -b ::ffff:127.0.0.1 -- \
    udaddy -f gid -s ::ffff:127.0.0.1 && status_zero_both
}

# Datagram rsockets' data, addresses and errors (tests/tools/rsocket_dgram_check).
rsocket_dgram_check() {
  vrnic_fg "${CM_RUN[@]}" timeout 60 "$VRNIC_BUILD_DIR/tests/rsocket_dgram_check" "$(next_port)"
}

# A plain TCP program under the system's librspreload.so: iperf (2), server and client, its
# sockets rsockets on vrnic. vrnicd must have carried at least what iperf says it sent.
iperf_preloaded() {
  local port before after sent
  command -v iperf >/dev/null || { echo "iperf missing (package iperf)"; return 1; }
  local preload=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
  [[ -f $preload ]] || { echo "$preload missing (package librdmacm1)"; return 1; }
  ensure_vrnicd || return 1
  port=$(next_port)
  before=$(vrnic_stat bytes_sent)
  local CM_RUN=("${CM_RUN[@]}" "LD_PRELOAD=$preload")
  CM_KEEP_SERVER=1 cm_pair "iperf-$port" iperf -s -B 127.0.0.1 -p "$port" -- \
    iperf -c 127.0.0.1 -p "$port" -t 2 -f m || return 1
  after=$(vrnic_stat bytes_sent)
  grep -E 'connected|Mbits' "$CM_CLIENT_LOG" | sed 's/^/    /'
  sent=$(awk '/Mbits\/sec/ { for (i = 1; i < NF; i++) if ($(i + 1) == "MBytes") print $i }' \
    "$CM_CLIENT_LOG")
  echo "    iperf sent ${sent:-?} MB; vrnicd sent $(((after - before) >> 20)) MiB"
  [[ -n $sent ]] || { echo "FAIL: no result from iperf"; return 1; }
  ((after - before >= ${sent%.*} * 1000000)) || { echo "FAIL: not through vrnic?"; return 1; }
  CHECK_NOTE=$(awk '/Mbits\/sec/ { print $(NF - 1) " Mbit/s" }' "$CM_CLIENT_LOG")
}

# rconnect to a port nobody listens on: ECONNREFUSED, blocking and not.
rstream_refused() {
  local port out
  ensure_vrnicd || return 1
  port=$(next_port)
  out=$("${CM_RUN[@]}" timeout 20 rstream -s 127.0.0.1 -p "$port" -T b -S 64 -C 1 2>&1)
  grep -v '^name' <<<"$out" | sed 's/^/    blocking: /'
  grep -q 'rconnect: Connection refused' <<<"$out" || return 1
  # Non-blocking: rconnect says EINPROGRESS, then rpoll gives POLLOUT|POLLERR|POLLHUP, as for
  # a TCP socket (rstream stops there).
  out=$("${CM_RUN[@]}" timeout 20 rstream -s 127.0.0.1 -p "$port" -T n -S 64 -C 1 2>&1)
  grep -v '^name' <<<"$out" | sed 's/^/    non-blocking: /'
  grep -q '^rpoll' <<<"$out"
}

# An rstream server SIGKILLed mid-transfer: the client ends within 20 s with an error (its
# peer's vrnicd ends the connection with a DREQ; a read sees the end, a write EPIPE), no hang.
rstream_dead_server() {
  local port spid cpid
  ensure_vrnicd || return 1
  port=$(next_port)
  "${CM_RUN[@]}" rstream -b 127.0.0.1 -p "$port" -T b -S 65536 -C 10000000 \
    >"$VRNIC_TMP/rs-dead.server.log" 2>&1 </dev/null &
  spid=$!
  _vrnic_track "$spid"
  wait_for 15 "the server's listener" stat_is cm_listeners 1 || return 1
  "${CM_RUN[@]}" rstream -s 127.0.0.1 -p "$port" -T b -S 65536 -C 10000000 \
    >"$VRNIC_TMP/rs-dead.client.log" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  wait_for 15 "the connection" stat_is cm_connections 2 || { kill -KILL "$cpid" "$spid"; return 1; }
  sleep 0.3
  echo "+ kill -KILL <rstream server>"
  kill -KILL "$spid"
  vrnic_wait_exit "$spid" 5
  if ! vrnic_wait_exit "$cpid" 20; then
    echo "FAIL: the client did not end after its peer died"
    kill -KILL "$cpid"
    return 1
  fi
  echo "client: $(_vrnic_status_word "$VRNIC_RC"); its last words:"
  vrnic_tail "$VRNIC_TMP/rs-dead.client.log" 2
  ((VRNIC_RC != 0)) || { echo "FAIL: the client says it completed"; return 1; }
  wait_objects_zero 10
}

# rdma_destroy_id waits for the id's events to be acknowledged (tests/tools/cm_destroy_wait).
destroy_waits_for_acks() {
  ensure_vrnicd || return 1
  vrnic_fg "${CM_RUN[@]}" timeout 20 "$VRNIC_BUILD_DIR/tests/cm_destroy_wait" "$(next_port)"
}

# rdma_listen's backlog counts the requests whose CONNECT_REQUEST the application has not
# fetched, as ucma's; past it a request gets no answer and is sent again (tests/tools/cm_backlog).
listen_backlog() {
  ensure_vrnicd || return 1
  vrnic_fg "${CM_RUN[@]}" timeout 60 "$VRNIC_BUILD_DIR/tests/cm_backlog" "$(next_port)"
}

# The retry counts each side's QP gets, as ib_cm sets them (tests/tools/cm_retry_counts).
retry_counts() {
  ensure_vrnicd || return 1
  vrnic_fg "${CM_RUN[@]}" timeout 30 "$VRNIC_BUILD_DIR/tests/cm_retry_counts" "$(next_port)"
}

# ECE through rdma_cm (tests/tools/cm_ece): what the REQ and REP carry, what each QP runs with.
ece_calls() {
  ensure_vrnicd || return 1
  vrnic_fg "${CM_RUN[@]}" timeout 30 "$VRNIC_BUILD_DIR/tests/cm_ece" "$(next_port)"
}

# riomap, riowrite and riounmap: errors and data (tests/tools/rio_errors).
rio_errors() {
  ensure_vrnicd || return 1
  vrnic_fg "${CM_RUN[@]}" timeout 30 "$VRNIC_BUILD_DIR/tests/rio_errors" "$(next_port)"
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
# the server ends (told by DISCONNECTED or by its CQ, whichever comes first); nothing of either
# is left in vrnicd, CM connections included.
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
  # What told it first: the CM (DISCONNECTED, from the DREQ vrnicd sent for the dead client)
  # or its CQ (an error completion); it exits on either.
  echo "the server's last words:"
  vrnic_tail "$VRNIC_TMP/dead.server.log" 3
  # The dead client's connection went through DREQ / DREP and time-wait: none left.
  wait_objects_zero 10
}

# On the wire: tshark decodes every MAD to QP1 as InfiniBand CM, none malformed, no expert
# error (a capture on lo while ucmatose connects across the two vrnicd).
cm_on_the_wire() {
  local pcap=$VRNIC_TMP/cm.pcap tpid n_qp1 n_cm bad
  command -v tshark >/dev/null || { echo "tshark missing (package tshark)"; return 1; }
  tshark -i lo -f "udp port $CM_UDP_PORT" -w "$pcap" >"$VRNIC_TMP/tshark.log" 2>&1 &
  tpid=$!
  _vrnic_track "$tpid"
  wait_for 10 "tshark to capture" grep -q "Capturing on" "$VRNIC_TMP/tshark.log" || return 1
  ucmatose_pair wire -c 2 -C 10 || { kill "$tpid"; return 1; }
  wait_for 5 "the last MADs" counter_settled cm_mads_received "${SOCK[cm1]}"
  kill -INT "$tpid"
  vrnic_wait_exit "$tpid" 10
  local dec=(tshark -r "$pcap" -d "udp.port==$CM_UDP_PORT,infiniband")
  n_qp1=$("${dec[@]}" -Y 'infiniband.bth.destqp == 1' 2>/dev/null | wc -l)
  n_cm=$("${dec[@]}" -Y 'infiniband.bth.destqp == 1' 2>/dev/null | grep -c ' CM: ')
  bad=$("${dec[@]}" -Y '_ws.malformed || _ws.expert.severity >= 0x00600000' 2>/dev/null | wc -l)
  "${dec[@]}" -Y 'infiniband.bth.destqp == 1' 2>/dev/null | sed 's/^/    /' | head -12
  echo "$n_qp1 packets to QP1, $n_cm decoded as CM, $bad malformed or with an expert warning"
  CHECK_NOTE="$n_cm CM MADs decoded"
  ((n_qp1 > 0 && n_cm == n_qp1 && bad == 0))
}

# Two vrnicd that each lose 10% of what they receive, MADs included, with short CM timers
# (VRNIC_CM_RESPONSE_TIMEOUT=14: a MAD is sent again after 0.6 s): connections still come up
# (MAD retries), data verified, and each ends in DISCONNECTED.
# faulty_pair A ADDR_A B ADDR_B FAULTS: two udp vrnicd with short CM timers, each with FAULTS
# on what it receives.
faulty_pair() {
  local port
  port=$(free_udp_port) || return 1
  VRNIC_CM_RESPONSE_TIMEOUT=14 host_vrnicd "$1" - --udp "$2" --udp-port "$port" --faults "$5" &&
    VRNIC_CM_RESPONSE_TIMEOUT=14 host_vrnicd "$3" - --udp "$4" --udp-port "$port" --faults "$5"
}
lossy_hosts() { faulty_pair cl1 127.0.0.3 cl2 127.0.0.4 loss=10; }
lossy_run() {
  local CM_SERVER_SOCK=${SOCK[cl1]} CM_CLIENT_SOCK=${SOCK[cl2]} CM_CLIENT_BIND=127.0.0.4
  local RPING_CLIENT_ARGS="-I 127.0.0.4" CM_SERVER_ADDR=127.0.0.3
  "$@" || return 1
  local resent
  resent=$(($(stat_of cm_mads_resent cl1) + $(stat_of cm_mads_resent cl2)))
  CHECK_NOTE="$resent MADs sent again"
}
lossy() {
  with_hosts lossy_hosts cl1 cl2 -- lossy_run "$@"
}
# Selective repeat agreed through ECE, the daemons as by default (no --selective-repeat):
# what the losses cost is sent again alone (selective_resends), at both ends.
ece_selective_run() {
  local before=() after=() d
  for d in cl1 cl2; do before+=("$(stat_of selective_resends "$d")"); done
  lossy_run "$@" || return 1
  for d in cl1 cl2; do after+=("$(stat_of selective_resends "$d")"); done
  echo "    selective_resends: cl1 +$((after[0] - before[0])), cl2 +$((after[1] - before[1]))"
  CHECK_NOTE="$((after[0] - before[0] + after[1] - before[1])) packets sent again alone"
  ((after[0] > before[0] && after[1] > before[1])) ||
    { echo "FAIL: no packet sent again alone at one end: selective repeat not agreed"; return 1; }
}
ece_selective() {
  with_hosts lossy_hosts cl1 cl2 -- ece_selective_run "$@"
}

# Each DREQ's first copy lost (--faults drop_mad=21 at both vrnicd; short CM timers, so a DREQ
# is sent again after 0.6 s): the connections still end in DISCONNECTED on both sides and the
# programs exit 0; the losses and resends show in the counters.
lost_dreq_hosts() { faulty_pair dq1 127.0.0.6 dq2 127.0.0.7 drop_mad=21; }
lost_dreq_run() {
  local CM_SERVER_SOCK=${SOCK[dq1]} CM_CLIENT_SOCK=${SOCK[dq2]} CM_CLIENT_BIND=127.0.0.7
  local RPING_CLIENT_ARGS="-I 127.0.0.7" CM_SERVER_ADDR=127.0.0.6 dropped resent
  sum() { echo $(($(stat_of "$1" dq1) + $(stat_of "$1" dq2))); }
  dropped=$((-$(sum faults_dropped)))
  resent=$((-$(sum cm_mads_resent)))
  "$@" || return 1
  wait_for 5 "the last MADs" counter_settled cm_mads_received "${SOCK[dq1]}"
  dropped=$((dropped + $(sum faults_dropped)))
  resent=$((resent + $(sum cm_mads_resent)))
  echo "    $dropped DREQs lost, $resent MADs sent again"
  CHECK_NOTE="$dropped DREQs lost"
  ((dropped > 0 && resent >= dropped)) || { echo "FAIL: no DREQ lost and sent again"; return 1; }
}
lost_dreq() {
  with_hosts lost_dreq_hosts dq1 dq2 -- lost_dreq_run "$@"
}

# A peer that is not there (127.0.0.9: no vrnicd, the kernel drops the datagrams): the REQ
# is sent 1 + VRNIC_CM_RETRIES times, then UNREACHABLE with ETIMEDOUT (Linux's timers: 16
# tries 4.6 s apart, 74 s; here VRNIC_CM_RESPONSE_TIMEOUT=14 VRNIC_CM_RETRIES=2: 3 x 0.6 s).
dead_peer() {
  local port out t0 t1
  port=$(free_udp_port) || return 1
  if [[ -z ${PID[dp]:-} ]]; then
    VRNIC_CM_RESPONSE_TIMEOUT=14 VRNIC_CM_RETRIES=2 \
      host_vrnicd dp - --udp 127.0.0.5 --udp-port "$port" || return 1
  fi
  t0=$(vrnic_now_us)
  out=$(VRNIC_SOCKET=${SOCK[dp]} "${CM_RUN[@]}" timeout 30 rping -c -I 127.0.0.5 -a 127.0.0.9 \
    -p 7471 -C 1 2>&1)
  t1=$(vrnic_now_us)
  echo "$out" | head -3
  CHECK_NOTE="UNREACHABLE after $(((t1 - t0) / 1000)) ms"
  grep -q 'RDMA_CM_EVENT_UNREACHABLE, error -110' <<<"$out" || {
    echo "FAIL: no UNREACHABLE with -ETIMEDOUT"
    return 1
  }
  (($(stat_of cm_mads_resent dp) == 2)) || { echo "FAIL: not 2 resends of the REQ"; return 1; }
}

check "librdmacm.so.1: exactly the symbols and versions of rdma-core 44's" abi
check "rdmacm-utils load vrnic's librdmacm.so.1 and libibverbs.so.1 (BIND_NOW)" loads_ours
check "rping -C 1000 -S 64 -V: one vrnicd" rping_pair -C 1000 -S 64 -V
check "rping -C 100 -S 65535 -V: one vrnicd (65535: rping's largest)" rping_pair -C 100 -S 65535 -V
check "rping -q -C 100 -V: the application's own QP (rdma_init_qp_attr)" rping_pair -q -C 100 -V
check "ucmatose -c 10" ucmatose_pair c10 -c 10
check "ucmatose -c 4 -m (rdma_migrate_id)" ucmatose_pair m4 -c 4 -m
check "udaddy (UD, SIDR)" udaddy_pair
check "AF_IB addresses: rdma_getaddrinfo, bind, listen, resolve, connect (tests/tools/cm_af_ib)" \
  cm_af_ib
check "ucmatose -f gid -c 4 (AF_IB addresses)" gid_ucmatose -c 4
check "ucmatose -f gid -P ib -c 4 (AF_IB, the IB port space)" gid_ucmatose -P ib -c 4
check "udaddy -f gid (AF_IB, SIDR)" gid_udaddy
check "mckey: a group's datagrams reach the receiver that joined it (one vrnicd)" mckey_pair
check "rdma_server / rdma_client (synchronous ids, rdma_create_ep)" sync_pair rdma_server rdma_client
check "rdma_xserver / rdma_xclient -c r" sync_pair rdma_xserver rdma_xclient -c r
check "cmtime -c 1000" cmtime_1000
check "no listener: REJECTED reason 8; ECONNREFUSED on a sync id" no_listener
check "rdma_destroy_id waits until the id's events are acknowledged (as rdma-core's)" \
  destroy_waits_for_acks
check "QP retry counts as ib_cm sets them: the passive side's from the REQ, not its accept's" \
  retry_counts
check "rdma_listen's backlog: requests not yet fetched past it get no answer, then come again" \
  listen_backlog
check "ECE: two vrnic QPs agree on selective repeat; none with a peer that offers no ECE; rdma_reject_ece" \
  ece_calls
for t in "ib_write_bw -n 1000" "ib_read_bw -n 1000" "ib_send_bw -n 1000" "ib_send_bw -c UD -n 1000" \
  "ib_write_lat -n 1000"; do
  read -ra cmd <<<"$t"
  check "perftest -R: $t" perftest_rdmacm "${cmd[@]}"
done
check "across two vrnicd (udp, 127.0.0.1 / 127.0.0.2): rping -C 1000 -S 64 -V" \
  across rping_pair -C 1000 -S 64 -V
check "across two vrnicd: rping -C 100 -S 65535 -V" across rping_pair -C 100 -S 65535 -V
check "across two vrnicd: ucmatose -c 10" across ucmatose_pair x10 -c 10
check "across two vrnicd: udaddy" across udaddy_pair
check "two devices of one vrnicd: a listener on 0.0.0.0 is reached at each device's address" \
  wildcard_listener
check "an IPv4 and an IPv6 wildcard with AFONLY at one port, each taking its family's requests" \
  with_hosts two_families af -- afonly_run
check "on the wire: tshark decodes every CM MAD, none malformed" across cm_on_the_wire
check "10% loss at both vrnicd: ucmatose -c 10 -C 10 connects (MAD retries) and disconnects" \
  lossy ucmatose_pair lossy -c 10 -C 10
check "10% loss at both vrnicd: rping -C 100 -V" lossy rping_pair -C 100 -V
check "10% loss at both vrnicd: rping -C 100 -S 65535 -V, selective repeat agreed by ECE" \
  ece_selective rping_pair -C 100 -S 65535 -V
check "two namespaces (veth): rping -C 1000 -S 64 -V" in_namespaces rping_pair -C 1000 -S 64 -V
check "two namespaces: rping -C 100 -S 65535 -V" in_namespaces rping_pair -C 100 -S 65535 -V
check "two namespaces: ucmatose -c 10" in_namespaces ucmatose_pair ns10 -c 10
check "two namespaces: udaddy" in_namespaces udaddy_pair
check "two namespaces: mckey, the sender's vrnicd reaching the receiver's by IP multicast" \
  in_namespaces mckey_pair
check "two namespaces: mckey the other way (the receiver in the second namespace)" \
  in_namespaces_reversed mckey_pair
check "two namespaces: rdma_server / rdma_client" in_namespaces sync_pair rdma_server rdma_client
check "two namespaces: libfabric fi_pingpong -p verbs -e msg -c (64 B to 1 MiB)" \
  in_namespaces fi_pair -p verbs -e msg -I 100 -c
check "two namespaces: libfabric fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c (64 B to 1 MiB)" \
  in_namespaces fi_pair -p "verbs;ofi_rxm" -e rdm -I 100 -c
check "Open MPI over libfabric verbs;ofi_rxm (rdma_cm): mpi_check, 2 ranks" \
  in_namespaces mpi_over_ofi na "$NS_A"
check "root namespace, a default vrnicd: fi_info -p verbs offers vrnic0 for FI_EP_MSG" \
  in_root fi_offers_msg
check "root namespace, a default vrnicd: fi_pingpong -p verbs -e msg -c (64 B to 1 MiB)" \
  in_root fi_pair -p verbs -e msg -I 100 -c
check "root namespace, a default vrnicd: fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c" \
  in_root fi_pair -p "verbs;ofi_rxm" -e rdm -I 100 -c
check "root namespace, a default vrnicd: Open MPI over libfabric verbs;ofi_rxm, 2 ranks" \
  in_root mpi_over_ofi rd
check "each DREQ's first copy lost: rping -C 10 -V still ends in DISCONNECTED on both sides" \
  lost_dreq rping_pair -C 10 -V
check "each DREQ's first copy lost: ucmatose -c 4 -C 4 disconnects every connection" \
  lost_dreq ucmatose_pair dreq -c 4 -C 4
check "rstream -T b -T v -S 4096 -C 10000 (rsockets, blocking, data verified)" \
  rstream_pair -T b -T v -S 4096 -C 10000
check "rstream -T b -T v -S 1048576 -C 100" rstream_pair -T b -T v -S 1048576 -C 100
check "rstream -T n -T v -S 65536 -C 1000 (non-blocking)" rstream_pair -T n -T v -S 65536 -C 1000
check "rstream -T a -T v -S 65536 -C 1000 (rpoll)" rstream_pair -T a -T v -S 65536 -C 1000
check "riostream -T v -S 4096 -C 1000 (riomap, riowrite; data verified)" \
  riostream_pair -T v -S 4096 -C 1000
check "riostream -T n -T v -S 1048576 -C 20 (non-blocking; 64 KiB WRITEs)" \
  riostream_pair -T n -T v -S 1048576 -C 20
check "riomap/riowrite/riounmap: their errors, and the bytes in the peer's memory" rio_errors
check "udpong -C 20000 -S 1024 (datagram rsockets, non-blocking: the server counts)" \
  udpong_pair -C 20000 -S 1024
check "udpong -T e -C 5000 -S 1536 (echo: each datagram back)" udpong_pair -T e -C 5000 -S 1536
check "udpong -T b -T e -C 5000 -S 64 (blocking)" udpong_pair -T b -T e -C 5000 -S 64
check "udpong -T a -T e -C 5000 -S 512 (rpoll)" udpong_pair -T a -T e -C 5000 -S 512
check "datagram rsockets: data, addresses, truncation, rpoll, IPv6 and every error" \
  rsocket_dgram_check
check "across two vrnicd: udpong -T e -C 2000 -S 1024" across udpong_pair -T e -C 2000 -S 1024
check "across two vrnicd: rstream -T b -T v -S 65536 -C 1000" \
  across rstream_pair -T b -T v -S 65536 -C 1000
check "across two vrnicd: riostream -T v -S 65536 -C 100" across riostream_pair -T v -S 65536 -C 100
check "two namespaces: rstream -T n -T v -S 65536 -C 1000" \
  in_namespaces rstream_pair -T n -T v -S 65536 -C 1000
check "iperf under LD_PRELOAD=librspreload.so: its TCP sockets rsockets on vrnic" iperf_preloaded
check "rsockets: rconnect with no listener: ECONNREFUSED (blocking), POLLERR (non-blocking)" \
  rstream_refused
check "rsockets: the server killed mid-transfer: the client ends with an error, nothing left" \
  rstream_dead_server
check "a peer not there: UNREACHABLE (ETIMEDOUT) after the REQ's retries" dead_peer
check "a client killed while connected: the server ends, no CM connection left" dead_client
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left (CM ids and connections too), exits 0 on SIGTERM" vrnicd_idle_and_stop
check "the other vrnicd (udp, namespaces): no objects left, exit 0" stop_hosts

vrnic_script_finish
