#!/usr/bin/env bash
# The dpdk port: vrnicd driving Ethernet devices through DPDK (issue 5).
#   - two network namespaces joined by a veth pair: vrnicd on net_af_packet at one end and on
#     net_af_xdp at the other (perftest, pingpong, the wire integrity test at 1% loss, the wire
#     format seen by tshark, zero-copy transmit, link down and up);
#   - two vrnicd joined by net_memif (shared memory between two daemons on this host; a full
#     ring holds frames back, a stopped peer does not wedge the sender);
#   - a dpdk vrnicd against a udp-port vrnicd whose kernel owns the other end of a veth;
#   - the same over IPv6 (neighbour discovery instead of ARP, UDP checksums);
#   - two workers per daemon; memif on 2 MiB hugepages; two dpdk devices in one vrnicd (over
#     memif to each other; over two veths, one link down while the other carries traffic);
#   - RX interrupts: vrnicd on net_tap sleeps until a frame comes.
# Namespaces, veths, memif sockets and hugepages are made here and removed (released) on exit,
# failures included; everywhere else DPDK runs without hugepages (--no-huge).
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init dpdk
# shellcheck source=tests/lib_dpdk.sh
source "$VRNIC_ROOT/tests/lib_dpdk.sh"

NS_A=vrdp-a-$$ NS_B=vrdp-b-$$ VETH_A=vda$$ VETH_B=vdb$$
NS_C=vrdp-c-$$ NS_D=vrdp-d-$$ VETH_C=vdc$$ VETH_D=vdd$$
IP_A=10.77.0.1 IP_B=10.77.0.2 IP_M1=10.78.0.1 IP_M2=10.78.0.2 IP_C=10.79.0.1 IP_D=10.79.0.2

# The daemons of each part are started once for the group (with_hosts).
# start_raw_pair N1 N2 NS1 NS2 VETH1 VETH2 ADDR1 ADDR2: af_packet in NS1 <-> af_xdp in NS2,
# daemons N1 and N2 on the two ends of one veth pair.
start_raw_pair() {
  need_dpdk && veth_pair "$3" "$4" "$5" "$6" || return 1
  host_vrnicd "$1" "$3" --dpdk "$7" --eal "$EAL_BASE --vdev net_af_packet0,iface=$5,$AF_PACKET_RING" &&
    host_vrnicd "$2" "$4" --dpdk "$8" --eal "$EAL_BASE --vdev net_af_xdp0,iface=$6" &&
    wait_link "$1" "$2"
}
# start_kernel_pair N1 N2 NS1 NS2 VETH1 VETH2 ADDR1 ADDR2 PREFIX [ARGS]: a dpdk vrnicd (af_packet)
# in NS1 <-> a udp-port vrnicd (ARGS) on ADDR2/PREFIX, the kernel's end of the veth in NS2 (an
# IPv6 address without duplicate detection: usable at once).
start_kernel_pair() {
  local nodad=()
  [[ $8 == *:* ]] && nodad=(nodad)
  need_dpdk && veth_pair "$3" "$4" "$5" "$6" || return 1
  ip -n "$4" addr add "$8/$9" dev "$6" "${nodad[@]}" || return 1
  host_vrnicd "$1" "$3" --dpdk "$7" --eal "$EAL_BASE --vdev net_af_packet0,iface=$5,$AF_PACKET_RING" &&
    host_vrnicd "$2" "$4" --udp "$8" "${@:10}" && wait_link "$1"
}
start_veth_hosts() { start_raw_pair a b "$NS_A" "$NS_B" "$VETH_A" "$VETH_B" "$IP_A" "$IP_B"; }

# Bad frames at a dpdk port from the other end of its veth (scapy, independent of vrnic):
# each damaged one counted as malformed or as an ICRC error, exactly; foreign ones ignored;
# the daemon unharmed and still carrying traffic.
# bad_frames_to TARGET PEER NS_FROM VETH_FROM NS_TARGET VETH_TARGET FROM_IP TARGET_IP [ARGS]
bad_frames_to() {
  local target=$1 peer=$2 ns_from=$3 veth_from=$4 ns_to=$5 veth_to=$6 from_ip=$7 to_ip=$8
  shift 8
  local mac out m0 i0 m i want_m want_i
  mac=$(ip -n "$ns_to" -br link show "$veth_to" | awk '{ print $3 }')
  m0=$(stat_of wire_rx_malformed "$target") i0=$(stat_of wire_rx_icrc_errors "$target")
  echo "+ ip netns exec $ns_from python3 tests/tools/bad_frames.py --iface $veth_from" \
    "--dst-mac $mac --src-ip $from_ip --dst-ip $to_ip $*"
  out=$(ip netns exec "$ns_from" timeout -k 5 60 /usr/bin/python3 \
    "$VRNIC_ROOT/tests/tools/bad_frames.py" --iface "$veth_from" --dst-mac "$mac" \
    --src-ip "$from_ip" --dst-ip "$to_ip" "$@" 2>&1) || { echo "$out"; return 1; }
  grep -v WARNING <<<"$out" | sed 's/^/    /'
  read -r want_m want_i < <(sed -n 's/^expect malformed=\([0-9]*\) icrc=\([0-9]*\)$/\1 \2/p' <<<"$out")
  [[ -n $want_m ]] || { echo "FAIL: bad_frames.py printed no expectation"; return 1; }
  wait_for 5 "vrnicd $target to have counted them" stat_over wire_rx_malformed \
    $((m0 + want_m - 1)) "${SOCK[$target]}"
  wait_for 2 "its counters to settle" counter_settled wire_rx_malformed "${SOCK[$target]}"
  m=$(($(stat_of wire_rx_malformed "$target") - m0)) i=$(($(stat_of wire_rx_icrc_errors "$target") - i0))
  echo "vrnicd $target counted malformed +$m (want $want_m), ICRC errors +$i (want $want_i)"
  ((m == want_m && i == want_i)) || { echo "FAIL: counters disagree"; return 1; }
  pingpong_between "$target" "$peer" ibv_rc_pingpong >/dev/null ||
    { echo "FAIL: no traffic afterwards"; return 1; }
  CHECK_NOTE="$m malformed, $i ICRC errors"
}
# --- failure paths: clear errors, never a half-started daemon ----------------------------------
refusals() {
  need_dpdk || return 1
  local ok=0
  expect_refusal 1 "not a unicast IPv4 or IPv6 address" --dpdk 10.76.0.300 --eal "$EAL_BASE" ||
    ok=1
  expect_refusal 1 "not a unicast IPv4 or IPv6 address" --dpdk ff02::1 --eal "$EAL_BASE" || ok=1
  expect_refusal 1 "no Ethernet device" --dpdk 10.76.0.1 --eal "$EAL_BASE" || ok=1
  expect_refusal 1 "rte_eal_init" --dpdk 10.76.0.1 --eal "--no-such-eal-option" || ok=1
  VRNIC_DPDK_MODULE=$DIR/none.so expect_refusal 1 "needs its module" --dpdk 10.76.0.1 || ok=1
  expect_refusal 2 "--eal is for the dpdk port" --eal "$EAL_BASE" || ok=1
  expect_refusal 2 "not both" --dpdk 10.76.0.1 --udp 127.0.0.1 || ok=1
  return "$ok"
}
check "vrnicd --dpdk refuses bad addresses, missing devices, bad EAL options, a missing module" \
  refusals

# --- af_packet <-> af_xdp across a veth pair ------------------------------------------------
across_veth() { with_hosts start_veth_hosts a b -- "$@"; }
for t in "ib_write_bw -s 65536 -n 5000" "ib_read_bw -s 65536 -n 2000" "ib_send_bw -s 65536 -n 2000" \
  "ib_atomic_bw -n 2000" "ib_write_lat -n 1000" "ib_read_lat -n 1000" "ib_send_lat -n 1000" \
  "ib_atomic_lat -n 1000"; do
  read -ra cmd <<<"$t"
  check "$t: af_packet <-> af_xdp across a veth pair" across_veth perftest_between a b "${cmd[@]}"
done
check "ibv_rc_pingpong: af_packet <-> af_xdp across a veth pair" \
  across_veth pingpong_between a b ibv_rc_pingpong
check "ibv_ud_pingpong: af_packet <-> af_xdp across a veth pair" \
  across_veth pingpong_between a b ibv_ud_pingpong

# Zero-copy transmit: with af_packet (which takes chained mbufs) the sender attaches the
# registered memory to its frames; the counters say how many payload bytes went out in place
# and how many were copied. af_xdp cannot take chains, so that side copies (and says so).
zero_copy() {
  local zc0 cp0 rt0 zc cp rt sent=$((3000 * 65536))
  zc0=$(stat_of wire_tx_payload_zero_copy a) cp0=$(stat_of wire_tx_payload_copied a)
  rt0=$(stat_of retransmits a)
  perftest_between b a ib_write_bw -s 65536 -n 3000 >/dev/null || return 1
  zc=$(($(stat_of wire_tx_payload_zero_copy a) - zc0)) cp=$(($(stat_of wire_tx_payload_copied a) - cp0))
  rt=$(($(stat_of retransmits a) - rt0))
  echo "af_packet sender: $zc payload bytes zero-copy, $cp copied, $rt retransmissions" \
    "(retransmissions are copied on purpose); $sent bytes written"
  echo "af_xdp side: $(stat_of wire_tx_payload_zero_copy b) zero-copy," \
    "$(stat_of wire_tx_payload_copied b) copied"
  ((zc >= sent)) || { echo "FAIL: not every written byte left in place"; return 1; }
  ((rt > 0 || cp == 0)) || { echo "FAIL: bytes copied with no retransmission"; return 1; }
  (($(stat_of wire_tx_payload_zero_copy b) == 0)) || { echo "FAIL: af_xdp cannot chain"; return 1; }
  CHECK_NOTE="$((zc / 1048576)) MiB in place, $cp B copied"
}
check "zero-copy transmit: af_packet sends registered memory in place, copies nothing" \
  across_veth zero_copy
check "dpdk counters: frames both ways, no ICRC or format errors" across_veth clean_counters a b

# What went on the veth, checked by others: tshark decodes each frame as RoCEv2 and an
# independent ICRC check (tests/tools, Python) passes every packet; tshark finds no bad UDP
# checksum (IPv6 carries one).
# wire_format SERVER CLIENT NETNS VETH: traffic between two daemons, captured on VETH.
wire_format() {
  local srv=$1 cli=$2 ns=$3 veth=$4 cap=$DIR/veth-$4.pcapng tpid ok=0 t bad
  command -v tshark >/dev/null || { echo "tshark is not installed"; return 1; }
  echo "+ ip netns exec $ns tshark -i $veth -f udp -w veth-$veth.pcapng &"
  ip netns exec "$ns" tshark -q -i "$veth" -f udp -w "$cap" >"$DIR/tshark.log" 2>&1 &
  tpid=$!
  _vrnic_track "$tpid"
  wait_for 5 "tshark to start capturing" grep -q "Capturing on" "$DIR/tshark.log"
  for t in "ib_write_bw -s 4100 -n 200" "ib_read_bw -s 9000 -n 100" "ib_send_bw -s 3 -n 200" \
    "ib_atomic_bw -n 100" "ib_send_bw -c UD -s 1000 -n 100" "ib_write_bw -c UC -s 5000 -n 100"; do
    read -ra cmd <<<"$t"
    between "$srv" "$cli" "${cmd[@]}" -d vrnic0 -x 0 -F >/dev/null || { echo "FAIL: $t"; ok=1; }
  done
  wait_for 5 "the capture to be written" file_settled "$cap"
  kill -INT "$tpid" 2>/dev/null
  vrnic_wait_exit "$tpid" 10
  echo "+ python3 tests/tools/roce_pcap_check.py --tshark veth.pcapng"
  vrnic_fg timeout -k 5 120 /usr/bin/python3 "$VRNIC_ROOT/tests/tools/roce_pcap_check.py" \
    --tshark "$cap" || ok=1
  bad=$(tshark -r "$cap" -o udp.check_checksum:TRUE -Y "udp.checksum.status == 0" 2>/dev/null | wc -l)
  echo "frames with a bad UDP checksum (tshark): $bad"
  ((bad == 0)) || ok=1
  return "$ok"
}
check "wire format on the veth: tshark decodes every frame; independent ICRC check passes" \
  across_veth wire_format a b "$NS_A" "$VETH_A"

# The wire integrity test of issue 4 (every byte and completion checked; READ, WRITE, SEND,
# atomics, 64 WRs in flight) between the two dpdk daemons, 1 GiB at 1% loss on both.
integrity() { integrity_between a "$IP_A" b "$IP_B" 1G; }
check "wire integrity test, 1 GiB at 1% loss: af_packet <-> af_xdp" across_veth integrity

# Link down on the veth: a client of the daemon at that end gets IBV_EVENT_PORT_ERR and sees
# the port DOWN; link up: IBV_EVENT_PORT_ACTIVE, port ACTIVE; then traffic flows again.
link_flap() {
  local wpid ok=0 log=$DIR/events.log
  echo "+ port_event_watch PORT_ERR PORT_ACTIVE &   # a client of vrnicd at $VETH_A"
  VRNIC_SOCKET=${SOCK[a]} "${VRUN[@]}" timeout -k 2 30 \
    "$VRNIC_BUILD_DIR/tests/port_event_watch" --timeout 10 PORT_ERR PORT_ACTIVE >"$log" 2>&1 &
  wpid=$!
  _vrnic_track "$wpid"
  wait_for 5 "port_event_watch to be ready" grep -q ready "$log"
  echo "+ ip -n $NS_A link set $VETH_A down; sleep 1; ip -n $NS_A link set $VETH_A up"
  # The link stays down for a second: time itself, the outage under test.
  ip -n "$NS_A" link set "$VETH_A" down && sleep 1 && ip -n "$NS_A" link set "$VETH_A" up
  vrnic_wait_exit "$wpid" 20 || ok=1
  sed 's/^/    /' "$log"
  ((VRNIC_RC == 0)) || { echo "FAIL: port_event_watch: $(_vrnic_status_word "$VRNIC_RC")"; ok=1; }
  wait_link a b && pingpong_between a b ibv_rc_pingpong >/dev/null ||
    { echo "FAIL: no traffic after link up"; ok=1; }
  echo "link changes seen by vrnicd a: $(stat_of wire_link_changes a)"
  return "$ok"
}
check "link down gives IBV_EVENT_PORT_ERR, link up PORT_ACTIVE, and traffic resumes" \
  across_veth link_flap

# A peer nobody answers for (no host has the address: ARP or ND goes unanswered): an RC write
# fails with IBV_WC_RETRY_EXC_ERR after its retry budget (timeout 14, retry_cnt 7: 537 ms), the
# QP is destroyed at once (its frames waiting for the address hold no client memory), those
# frames are counted as unroutable once the address has failed (1 s), and traffic with the
# real peer goes on.
# unreachable HOST PEER ADDRESS: from vrnicd HOST to ADDRESS; PEER is HOST's real peer.
unreachable() {
  local host=$1 peer=$2 addr=$3 ok=0 nr0 nr=0 log=$DIR/unreachable.log
  nr0=$(stat_of wire_tx_no_route "$host")
  echo "+ unreachable_peer --peer $addr   # a client of vrnicd $host; no host has $addr"
  VRNIC_SOCKET=${SOCK[$host]} "${VRUN[@]}" timeout -k 2 30 \
    "$VRNIC_BUILD_DIR/tests/unreachable_peer" --peer "$addr" >"$log" 2>&1 || ok=1
  sed 's/^/    /' "$log"
  wait_for 3 "frames counted as unroutable" stat_over wire_tx_no_route "$nr0" "${SOCK[$host]}"
  nr=$(($(stat_of wire_tx_no_route "$host") - nr0))
  echo "    frames dropped for want of the address: $nr"
  ((nr > 0)) || { echo "FAIL: none counted as unroutable (wire_tx_no_route)"; ok=1; }
  pingpong_between "$host" "$peer" ibv_rc_pingpong >/dev/null ||
    { echo "FAIL: no traffic with the real peer afterwards"; ok=1; }
  CHECK_NOTE=$(sed -n 's/^status=.* after_ms=\([0-9]*\) .*/\1 ms/p' "$log")
  return "$ok"
}
check "RC write to an address nobody answers (ARP): RETRY_EXC_ERR in the retry budget, no hang" \
  across_veth unreachable a b 10.77.0.99
check "bad frames at an af_xdp port: counted exactly, foreign ones ignored, traffic goes on" \
  across_veth bad_frames_to b a "$NS_A" "$VETH_A" "$NS_B" "$VETH_B" $IP_A $IP_B

# --- two vrnicd joined by memif ---------------------------------------------------------------
start_memif_hosts() {
  local sock=$DIR/memif.sock
  need_dpdk &&
    host_vrnicd m1 - --dpdk "$IP_M1" --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$sock" &&
    host_vrnicd m2 - --dpdk "$IP_M2" --eal "$EAL_BASE --vdev net_memif0,role=client,socket=$sock" &&
    wait_link m1 m2
}
across_memif() { with_hosts start_memif_hosts m1 m2 -- "$@"; }

# The first traffic between two fresh vrnicd: 16 QPs post 2048 writes at once, more than may
# wait for a peer whose address is unknown (256). Each vrnicd starts resolving its peer when a
# QP goes to RTR, as a RoCE driver resolves the destination MAC then, so by the first write the
# address is known: no frame is dropped unresolved and none is sent twice.
first_burst() {
  local d bad=0
  perftest_between "$1" "$2" ib_write_bw -s 64 -q 16 -n 2000 >/dev/null || return 1
  for d in "$1" "$2"; do
    echo "    $d: wire_tx_no_route=$(stat_of wire_tx_no_route "$d")" \
      "retransmits=$(stat_of retransmits "$d") timeouts=$(stat_of timeouts "$d")"
    (($(stat_of wire_tx_no_route "$d") == 0 && $(stat_of retransmits "$d") == 0)) || bad=1
  done
  ((!bad)) || { echo "FAIL: frames lost while the peer was resolved"; return 1; }
}
check "first traffic, ib_write_bw -s 64 -q 16: the peer resolved at RTR, no frame lost or resent" \
  across_memif first_burst m1 m2
check "ib_write_bw -s 65536 -n 5000: two vrnicd over memif" \
  across_memif perftest_between m1 m2 ib_write_bw -s 65536 -n 5000
check "ib_read_bw -s 65536 -n 2000: two vrnicd over memif" \
  across_memif perftest_between m1 m2 ib_read_bw -s 65536 -n 2000
check "ibv_rc_pingpong: two vrnicd over memif" across_memif pingpong_between m1 m2 ibv_rc_pingpong
# ib_write_lat waits for the peer's write by spinning on memory, never yielding: a worker that
# shares its core used to get it back only at a scheduler tick, 4 ms a round trip (20000
# iterations: 80 s). Now ~3 s. The timeout, 1 ms a round trip, is a bound on that stall.
VRNIC_TEST_TIMEOUT=20 check \
  "ib_write_lat -n 20000: two vrnicd over memif, no worker left waiting for a tick" \
  across_memif perftest_between m1 m2 ib_write_lat -n 20000
check "memif counters: frames both ways, no ICRC or format errors" \
  across_memif clean_counters m1 m2

# A QP's packets leave the dpdk port in PSN order and arrive so (issue 31, as the wire group
# checks the udp port across a veth): 1 MiB writes and sends over memif, which drops nothing
# (a full ring holds frames back), and neither responder sees a packet out of sequence nor
# does a requester send one again.
in_order_between() {
  local ok
  counters_unchanged "$1=${SOCK[$1]} $2=${SOCK[$2]}" "out_of_sequence naks_sent retransmits" \
    mib_writes_and_sends "$1" "$2"
  ok=$?
  CHECK_NOTE=$COUNTERS_NOTE
  echo "$CHECK_NOTE"
  return "$ok"
}
mib_writes_and_sends() {
  local prog
  for prog in ib_write_bw ib_send_bw; do
    perftest_between "$1" "$2" "$prog" -s 1048576 -n 150 >/dev/null || return 1
  done
}
check "1 MiB writes and sends over memif arrive in PSN order: no out-of-sequence packet, NAK or resend" \
  across_memif in_order_between m1 m2

# Small writes on 16 QPs fill memif's ring faster than the peer empties it: frames that find it
# full wait in the port and go in order, none dropped (go-back-N would resend them). UD has no
# window to hold it back: the worker stops making packets while the port's backlog is long, as
# a NIC stops fetching WQEs, so no datagram is dropped at the sender either (and perftest's UD
# server, which waits for every message, finishes).
# no_tx_drops PERFTEST ARGS...: run between m1 and m2; neither vrnicd counts a TX error.
no_tx_drops() {
  local d before=()
  for d in m1 m2; do before+=("$(stat_of wire_tx_errors "$d")"); done
  perftest_between m1 m2 "$@" || return 1
  for d in m1 m2; do
    echo "    $d wire_tx_errors: ${before[0]} -> $(stat_of wire_tx_errors "$d")"
    (($(stat_of wire_tx_errors "$d") == before[0])) || { echo "FAIL: $d dropped frames"; return 1; }
    before=("${before[@]:1}")
  done
}
check "memif ring full: ib_write_bw -s 64 -q 16 -n 20000, frames held back, none dropped" \
  across_memif no_tx_drops ib_write_bw -s 64 -q 16 -n 20000
check "memif ring full: ib_send_bw -c UD -s 64 -q 16 -n 20000, the sender held back, none dropped" \
  across_memif no_tx_drops ib_send_bw -c UD -s 64 -q 16 -n 20000

# The memif server's vrnicd dies: its peer's link goes down; a new one on the same socket
# brings it back up (the client reconnects by itself) and traffic flows again.
# memif_peer_death SERVER CLIENT VRNICD-ARGS...: SERVER killed, restarted with VRNICD-ARGS.
memif_peer_death() {
  local srv=$1 cli=$2
  shift 2
  echo "+ kill -KILL ${PID[$srv]}   # the memif server's vrnicd"
  kill -KILL "${PID[$srv]}"
  vrnic_wait_exit "${PID[$srv]}" 5
  wait_for 10 "$cli's link to go down" stat_is wire_link_up 0 "${SOCK[$cli]}"
  [[ $(stat_of wire_link_up "$cli") == 0 ]] || { echo "FAIL: the client's link is still up"; return 1; }
  echo "link of $cli down"
  host_vrnicd "$srv" - "$@" && wait_link "$srv" "$cli" &&
    pingpong_between "$srv" "$cli" ibv_rc_pingpong
}
check "memif: peer vrnicd killed, link down; a new one, link up and traffic again" \
  across_memif memif_peer_death m1 m2 --dpdk $IP_M1 \
  --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$DIR/memif.sock"

# The memif peer stops reading in the middle of a transfer (SIGSTOP: alive, link up): 16 QPs
# have more frames out than memif's ring and the port's backlog hold, so the backlog fills and
# stays full. The sending program is killed meanwhile; its vrnicd still cleans up within
# seconds (destroying a QP waits for the port to empty: a stalled queue's backlog is dropped).
# The peer continued, traffic flows again.
memif_peer_stopped() {
  local sock=$DIR/memif-stop.sock port srv cli
  need_dpdk || return 1
  host_vrnicd p1 - --dpdk 10.83.0.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$sock" &&
    host_vrnicd p2 - --dpdk 10.83.0.2 --eal "$EAL_BASE --vdev net_memif0,role=client,socket=$sock" &&
    wait_link p1 p2 || return 1
  port=$(next_port)
  VRNIC_SOCKET=${SOCK[p1]} "${VRUN[@]}" timeout -k 5 60 \
    ib_write_bw -d vrnic0 -x 0 -F -s 65536 -q 16 -D 30 -p "$port" >"$DIR/stop.server.log" 2>&1 &
  srv=$!
  _vrnic_track "$srv"
  wait_listen "$port" "$srv" 15 || return 1
  VRNIC_SOCKET=${SOCK[p2]} "${VRUN[@]}" timeout -k 5 60 \
    ib_write_bw -d vrnic0 -x 0 -F -s 65536 -q 16 -D 30 -p "$port" 127.0.0.1 >"$DIR/stop.client.log" 2>&1 &
  cli=$!
  _vrnic_track "$cli"
  wait_for 10 "10000 frames from p2" stat_over wire_tx_packets 10000 "${SOCK[p2]}"
  echo "+ kill -STOP ${PID[p1]}   # the memif server's vrnicd, mid-transfer ($(stat_of wire_tx_packets p2) frames sent)"
  kill -STOP "${PID[p1]}"
  sleep 0.5  # p1 stays stopped while p2 goes on sending: the outage under test, time itself
  echo "+ kill -KILL $cli   # the sending ib_write_bw"
  kill -KILL "$cli"
  vrnic_wait_exit "$cli" 5
  # While p1 is still stopped: its QP gone from p2 within 5 s (a vrnicd waiting for a port that
  # never empties would not even answer vrnicctl).
  local qps errors
  wait_for 5 "p2 to destroy the dead client's QP" stat_is qps 0 "${SOCK[p2]}"
  qps=$(stat_of qps p2)
  errors=$(stat_of wire_tx_errors p2)
  echo "    p2, its peer still stopped: qps=${qps:-?} wire_tx_errors=${errors:-?}"
  kill -CONT "${PID[p1]}"
  kill -KILL "$srv" 2>/dev/null
  vrnic_wait_exit "$srv" 5
  [[ $qps == 0 ]] || { echo "FAIL: p2 did not destroy the dead client's QP in 5 s"; return 1; }
  ((errors > 0)) || { echo "FAIL: no frames dropped with the peer stopped"; return 1; }
  VRNIC_SOCKET=${SOCK[p1]} wait_objects_zero 10 || return 1
  pingpong_between p1 p2 ibv_rc_pingpong
}
check "memif: peer vrnicd stopped mid-transfer, the sender's vrnicd still cleans up a dead client; traffic after" \
  memif_peer_stopped

# Jumbo frames on memif: with buffers of 8192 bytes (bsize=, the same at both ends) a frame of
# a 4096-byte RoCE MTU fits one buffer. Retransmissions at 1% loss send payloads copied once
# already, attached to the frame as they no longer fit one mbuf.
start_jumbo_hosts() {
  local sock=$DIR/memif-jumbo.sock
  need_dpdk &&
    host_vrnicd j1 - --dpdk 10.86.0.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$sock,bsize=8192" &&
    host_vrnicd j2 - --dpdk 10.86.0.2 --eal "$EAL_BASE --vdev net_memif0,role=client,socket=$sock,bsize=8192" &&
    wait_link j1 j2
}
across_jumbo() { with_hosts start_jumbo_hosts j1 j2 -- "$@"; }
jumbo_mtu() {
  local d mtu
  for d in j1 j2 m1; do
    mtu=$(VRNIC_SOCKET=${SOCK[$d]} vrun ibv_devinfo -d vrnic0 | awk '/active_mtu/ { print $2; exit }')
    echo "    $d: active_mtu $mtu"
    [[ $d == m1 && $mtu == 1024 ]] || [[ $d != m1 && $mtu == 4096 ]] ||
      { echo "FAIL: $d's MTU"; return 1; }
  done
}
check "memif with bsize=8192: active_mtu 4096 (1024 with memif's default 2048-byte buffers)" \
  across_jumbo with_hosts start_memif_hosts m1 m2 -- jumbo_mtu
check "ib_write_bw -s 65536 -n 5000: memif, 4096-byte MTU" \
  across_jumbo perftest_between j1 j2 ib_write_bw -s 65536 -n 5000
check "ib_read_bw -s 65536 -n 2000: memif, 4096-byte MTU" \
  across_jumbo perftest_between j1 j2 ib_read_bw -s 65536 -n 2000
check "wire integrity test, 256 MiB at 1% loss: memif, 4096-byte MTU" \
  across_jumbo integrity_between j1 10.86.0.1 j2 10.86.0.2 256M
check "memif 4096-byte MTU counters: frames both ways, no ICRC or format errors" \
  across_jumbo clean_counters j1 j2

# --- two dpdk devices in one vrnicd -----------------------------------------------------------
# vrnic0 and vrnic1 of one vrnicd, each on its own memif device, joined to each other: DPDK is
# set up once, by vrnic0's --eal; vrnic1's names only its device (added to the running EAL).
start_dual_hosts() {
  local sock=$DIR/memif-dual.sock
  need_dpdk &&
    host_vrnicd x - --dpdk 10.88.0.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$sock" \
      --device --dpdk 10.88.0.2 --eal "--vdev net_memif1,role=client,socket=$sock" || return 1
  host_device x1 x 1
  wait_link x x1
}
across_dual() { with_hosts start_dual_hosts x -- "$@"; }
for t in "ib_write_bw -s 65536 -n 5000" "ib_read_bw -s 65536 -n 2000"; do
  read -ra cmd <<<"$t"
  check "$t: vrnic0 <-> vrnic1 of one vrnicd, each on its own memif" \
    across_dual perftest_between x x1 "${cmd[@]}"
done
check "ibv_rc_pingpong: vrnic0 <-> vrnic1 of one vrnicd, each on its own memif" \
  across_dual pingpong_between x x1 ibv_rc_pingpong
check "two dpdk devices' counters: frames both ways on each, no ICRC or format errors" \
  across_dual clean_counters x x1

# Two vrnicd, each with two dpdk devices on net_af_packet, across two veth pairs between two
# namespaces: vrnic0 of each on the first pair, vrnic1 on the second. A link goes down on one
# pair: only that device's port goes down, the other device carries traffic meanwhile.
NS_Y=vrdp-y-$$ NS_Z=vrdp-z-$$ VETH_Y0=vdy0$$ VETH_Z0=vdz0$$ VETH_Y1=vdy1$$ VETH_Z1=vdz1$$
start_dual_veth_hosts() {
  need_dpdk && veth_pair "$NS_Y" "$NS_Z" "$VETH_Y0" "$VETH_Z0" || return 1
  ip link add "$VETH_Y1" netns "$NS_Y" type veth peer name "$VETH_Z1" netns "$NS_Z" &&
    ip -n "$NS_Y" link set "$VETH_Y1" up && ip -n "$NS_Z" link set "$VETH_Z1" up || return 1
  host_vrnicd y "$NS_Y" --dpdk 10.89.0.1 \
    --eal "$EAL_BASE --vdev net_af_packet0,iface=$VETH_Y0,$AF_PACKET_RING" \
    --device --dpdk 10.89.1.1 --eal "--vdev net_af_packet1,iface=$VETH_Y1,$AF_PACKET_RING" &&
    host_vrnicd z "$NS_Z" --dpdk 10.89.0.2 \
      --eal "$EAL_BASE --vdev net_af_packet0,iface=$VETH_Z0,$AF_PACKET_RING" \
      --device --dpdk 10.89.1.2 --eal "$EAL_BASE --vdev net_af_packet1,iface=$VETH_Z1,$AF_PACKET_RING" ||
    return 1
  host_device y1 y 1
  host_device z1 z 1
  wait_link y y1 z z1
}
dual_link_down() {
  local ok=0
  pingpong_between y z ibv_rc_pingpong >/dev/null && pingpong_between y1 z1 ibv_rc_pingpong >/dev/null ||
    { echo "FAIL: no traffic on both devices to begin with"; return 1; }
  echo "+ ip -n $NS_Y link set $VETH_Y0 down   # vrnic0's link"
  ip -n "$NS_Y" link set "$VETH_Y0" down || return 1
  wait_for 10 "vrnic0's link to go down" stat_is wire_link_up 0 "${SOCK[y]}"
  echo "    link_up: vrnic0 $(stat_of wire_link_up y), vrnic1 $(stat_of wire_link_up y1)"
  [[ $(stat_of wire_link_up y) == 0 ]] || { echo "FAIL: vrnic0's link is still up"; ok=1; }
  [[ $(stat_of wire_link_up y1) == 1 ]] || { echo "FAIL: vrnic1's link went down with it"; ok=1; }
  pingpong_between y1 z1 ibv_rc_pingpong >/dev/null ||
    { echo "FAIL: vrnic1 carried no traffic while vrnic0's link was down"; ok=1; }
  echo "+ ip -n $NS_Y link set $VETH_Y0 up"
  ip -n "$NS_Y" link set "$VETH_Y0" up || return 1
  wait_link y && pingpong_between y z ibv_rc_pingpong >/dev/null ||
    { echo "FAIL: no traffic on vrnic0 after its link came back"; ok=1; }
  return "$ok"
}
check "two dpdk devices on two veths: one's link down, the other carries traffic; then both again" \
  with_hosts start_dual_veth_hosts y z -- dual_link_down
check "ib_write_bw -s 65536 -n 2000: vrnic1 <-> vrnic1 of two vrnicd, af_packet, second veth" \
  with_hosts start_dual_veth_hosts y z -- perftest_between y1 z1 ib_write_bw -s 65536 -n 2000

# A second dpdk device that cannot be: a clear error, nothing left behind.
dual_refusals() {
  local ok=0 first=(--dpdk 10.88.1.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$DIR/refused-memif.sock")
  need_dpdk || return 1
  expect_refusal 1 "vrnic1: dpdk port: net_memif0 is vrnic0's device" "${first[@]}" \
    --device --dpdk 10.88.1.2 --eal "--vdev net_memif0,role=client" || ok=1
  expect_refusal 1 "must be the first dpdk device's" "${first[@]}" \
    --device --dpdk 10.88.1.2 --eal "--no-huge -m 128 --vdev net_memif1,role=client" || ok=1
  expect_refusal 1 "vrnic1: dpdk port: no Ethernet device" "${first[@]}" \
    --device --dpdk 10.88.1.2 --eal "$EAL_BASE" || ok=1
  expect_refusal 1 "cannot add device net_nosuch0" "${first[@]}" \
    --device --dpdk 10.88.1.2 --eal "--vdev net_nosuch0" || ok=1
  return "$ok"
}
check "a second dpdk device refused: the first's device, other EAL options, none, no such device" \
  dual_refusals

# The same with two workers at each end (two queue pairs on the memif): the client's restart
# keeps its other worker out of the device meanwhile. Three times over.
memif_two_workers() {
  local round
  need_dpdk || return 1
  host_vrnicd w1 - --workers 2 --dpdk 10.82.0.1 --eal "$EAL_BASE --vdev $1" &&
    host_vrnicd w2 - --workers 2 --dpdk 10.82.0.2 --eal "$EAL_BASE --vdev $2" &&
    wait_link w1 w2 && pingpong_between w1 w2 ibv_rc_pingpong || return 1
  for round in 1 2 3; do
    echo "== round $round"
    memif_peer_death w1 w2 --workers 2 --dpdk 10.82.0.1 --eal "$EAL_BASE --vdev $1" || return 1
  done
  perftest_between w1 w2 ib_write_bw -s 65536 -q 4 -n 1000
}
check "memif, two workers each: peer killed and restarted 3 times, link and traffic back each time" \
  memif_two_workers "net_memif0,role=server,socket=$DIR/memif-w.sock" \
  "net_memif0,role=client,socket=$DIR/memif-w.sock"

# --- two workers on the dpdk port: af_packet with two queue pairs at both ends ---------------
# Each worker receives and sends on its own queue pair (af_packet spreads frames over them
# with a fanout group) and hands packets for the other worker's QPs over.
NS_E=vrdp-e-$$ NS_F=vrdp-f-$$ VETH_E=vde$$ VETH_F=vdf$$
start_two_worker_hosts() {
  need_dpdk && veth_pair "$NS_E" "$NS_F" "$VETH_E" "$VETH_F" &&
    host_vrnicd e "$NS_E" --workers 2 --dpdk 10.81.0.1 \
      --eal "$EAL_BASE --vdev net_af_packet0,iface=$VETH_E,qpairs=2,$AF_PACKET_RING" &&
    host_vrnicd f "$NS_F" --workers 2 --dpdk 10.81.0.2 \
      --eal "$EAL_BASE --vdev net_af_packet0,iface=$VETH_F,qpairs=2,$AF_PACKET_RING" &&
    wait_link e f
}
across_two() { with_hosts start_two_worker_hosts e f -- "$@"; }
check "ib_write_bw -s 65536 -q 4 -n 2000: dpdk, two workers each" \
  across_two perftest_between e f ib_write_bw -s 65536 -q 4 -n 2000
check "ib_read_bw -s 65536 -q 4 -n 1000: dpdk, two workers each" \
  across_two perftest_between e f ib_read_bw -s 65536 -q 4 -n 1000
check "ibv_rc_pingpong: dpdk, two workers each" across_two pingpong_between e f ibv_rc_pingpong
two_integrity() { integrity_between e 10.81.0.1 f 10.81.0.2 256M; }
check "wire integrity test, 256 MiB at 1% loss: dpdk, two workers each" across_two two_integrity
check "dpdk two-worker counters: frames both ways, no ICRC or format errors" \
  across_two clean_counters e f
check "vrnicd --workers 2 refuses a dpdk device with one queue pair" \
  expect_refusal 1 "queue pairs for 2 workers" --workers 2 --dpdk 10.76.0.1 \
  --eal "$EAL_BASE --vdev net_af_packet0,iface=lo"

# DPDK on hugepages: 2 MiB pages reserved here for two memif vrnicd (64 each), released after.
on_hugepages() {
  local before want ok=0 d
  need_dpdk || return 1
  before=$(cat /proc/sys/vm/nr_hugepages)
  want=$((before + 128))
  vrnic_on_cleanup "echo $before >/proc/sys/vm/nr_hugepages"
  echo "+ echo $want >/proc/sys/vm/nr_hugepages   # was $before"
  echo "$want" >/proc/sys/vm/nr_hugepages
  (($(awk '/^HugePages_Free/ { print $2 }' /proc/meminfo) >= 128)) ||
    { echo "FAIL: the kernel gave fewer than 128 free hugepages"; ok=1; }
  local sock=$DIR/memif-huge.sock
  if ((ok == 0)); then
    host_vrnicd h1 - --dpdk 10.80.0.1 --eal "-m 128 --no-pci --vdev net_memif0,role=server,socket=$sock" &&
      host_vrnicd h2 - --dpdk 10.80.0.2 --eal "-m 128 --no-pci --vdev net_memif0,role=client,socket=$sock" &&
      wait_link h1 h2 || ok=1
    echo "hugepages free while both run: $(awk '/^HugePages_Free/ { print $2 }' /proc/meminfo) of $want"
    ((ok == 0)) && { perftest_between h1 h2 ib_write_bw -s 65536 -n 2000 >/dev/null || ok=1; }
    ((ok == 0)) && { pingpong_between h1 h2 ibv_rc_pingpong >/dev/null || ok=1; }
    local note=$CHECK_NOTE
    for d in h1 h2; do
      [[ -n ${PID[$d]:-} ]] || continue
      VRNICD_PID=${PID[$d]} VRNICD_LOG=${LOG[$d]} stop_vrnicd TERM "${SOCK[$d]}" || ok=1
      PID[$d]=
    done
    CHECK_NOTE=$note
  fi
  echo "+ echo $before >/proc/sys/vm/nr_hugepages"
  echo "$before" >/proc/sys/vm/nr_hugepages
  return "$ok"
}
check "hugepages: two vrnicd over memif on 2 MiB pages reserved and released here" on_hugepages

# --- a dpdk vrnicd against a udp-port vrnicd -------------------------------------------------
# C: dpdk on af_packet; D: the kernel owns its end of the veth (address 10.79.0.2) and vrnicd
# uses it through UDP sockets. ARP: vrnicd C asks, D's kernel answers, and answers C's
# questions too.
start_mixed_hosts() {
  start_kernel_pair c d "$NS_C" "$NS_D" "$VETH_C" "$VETH_D" "$IP_C" "$IP_D" 24
}
across_mixed() { with_hosts start_mixed_hosts c d -- "$@"; }
check "ib_write_bw -s 65536 -n 5000: dpdk server, udp client" \
  across_mixed perftest_between c d ib_write_bw -s 65536 -n 5000
check "ib_write_bw -s 65536 -n 5000: udp server, dpdk client" \
  across_mixed perftest_between d c ib_write_bw -s 65536 -n 5000
check "ib_read_bw -s 65536 -n 2000: dpdk server, udp client" \
  across_mixed perftest_between c d ib_read_bw -s 65536 -n 2000
check "ibv_rc_pingpong: dpdk <-> udp" across_mixed pingpong_between c d ibv_rc_pingpong
check "ibv_ud_pingpong: dpdk <-> udp" across_mixed pingpong_between c d ibv_ud_pingpong
check "dpdk/udp counters: frames both ways, no ICRC or format errors" \
  across_mixed clean_counters c d

check "bad frames at an af_packet port: counted exactly, foreign ones ignored, traffic goes on" \
  across_mixed bad_frames_to c d "$NS_D" "$VETH_D" "$NS_C" "$VETH_C" $IP_D $IP_C --no-fragments

# --- IPv6: neighbour discovery instead of ARP, UDP checksums -----------------------------------
# G (af_packet) <-> H (af_xdp) on one veth pair, both dpdk; I (dpdk, af_packet) <-> J (a
# udp-port vrnicd whose kernel owns the other end of a veth, and answers neighbour
# solicitations and checks UDP checksums itself).
NS_G=vrdp-g-$$ NS_H=vrdp-h-$$ VETH_G=vdg$$ VETH_H=vdh$$
NS_I=vrdp-i-$$ NS_J=vrdp-j-$$ VETH_I=vdi$$ VETH_J=vdj$$
IP6_G=fd00:77::1 IP6_H=fd00:77::2 IP6_I=fd00:79::1 IP6_J=fd00:79::2
start_v6_hosts() { start_raw_pair g h "$NS_G" "$NS_H" "$VETH_G" "$VETH_H" "$IP6_G" "$IP6_H"; }
across_v6() { with_hosts start_v6_hosts g h -- "$@"; }
v6_gid() {
  local out
  out=$(vrun VRNIC_SOCKET="${SOCK[g]}" timeout -k 2 10 ibv_devinfo -v 2>&1)
  grep -E 'GID\[' <<<"$out" | sed 's/^/    /'
  grep -q "GID\[  0\]:.*$IP6_G, RoCE v2" <<<"$out" || { echo "FAIL: GID 0 is not $IP6_G"; return 1; }
}
check "IPv6 dpdk port: GID 0 is its address ($IP6_G)" across_v6 v6_gid
for t in "ib_write_bw -s 65536 -n 5000" "ib_read_bw -s 65536 -n 2000" "ib_send_bw -s 4096 -n 5000" \
  "ib_atomic_bw -n 2000" "ib_write_lat -s 64 -n 1000"; do
  read -ra cmd <<<"$t"
  check "$t: IPv6, af_packet <-> af_xdp (neighbour discovery)" \
    across_v6 perftest_between g h "${cmd[@]}"
done
check "ibv_rc_pingpong: IPv6, af_packet <-> af_xdp" across_v6 pingpong_between g h ibv_rc_pingpong
check "ibv_ud_pingpong: IPv6, af_packet <-> af_xdp" across_v6 pingpong_between g h ibv_ud_pingpong
check "RC write to an address nobody answers (ND): RETRY_EXC_ERR in the retry budget, no hang" \
  across_v6 unreachable g h fd00:77::99
check "wire format on an IPv6 veth: tshark decodes every frame, ICRC and UDP checksums good" \
  across_v6 wire_format g h "$NS_G" "$VETH_G"
check "wire integrity test, 256 MiB at 1% loss: IPv6, af_packet <-> af_xdp" \
  across_v6 integrity_between g $IP6_G h $IP6_H 256M
check "IPv6 dpdk counters: frames both ways, no ICRC or format errors" \
  across_v6 clean_counters g h
check "bad frames at an IPv6 af_xdp port: counted exactly, foreign and bogus ND ignored, traffic goes on" \
  across_v6 bad_frames_to h g "$NS_G" "$VETH_G" "$NS_H" "$VETH_H" $IP6_G $IP6_H

# --no-gso: a UDP GSO send to an IPv6 peer crosses a veth as one unsegmented frame, which
# af_packet at the far end truncates (a NIC or a router would segment it first).
start_v6_mixed_hosts() {
  start_kernel_pair i j "$NS_I" "$NS_J" "$VETH_I" "$VETH_J" "$IP6_I" "$IP6_J" 64 --no-gso
}
across_v6_mixed() { with_hosts start_v6_mixed_hosts i j -- "$@"; }
check "ib_write_bw -s 65536 -n 5000: IPv6, dpdk server, udp (kernel) client" \
  across_v6_mixed perftest_between i j ib_write_bw -s 65536 -n 5000
check "ib_write_bw -s 65536 -n 5000: IPv6, udp (kernel) server, dpdk client" \
  across_v6_mixed perftest_between j i ib_write_bw -s 65536 -n 5000
check "ibv_rc_pingpong: IPv6, dpdk <-> udp (kernel)" \
  across_v6_mixed pingpong_between i j ibv_rc_pingpong
v6_kernel_neighbor() {
  local out
  out=$(ip -n "$NS_J" -6 neigh show dev "$VETH_J")
  echo "    kernel neighbours of $VETH_J: $out"
  grep -q "^$IP6_I lladdr .* \(REACHABLE\|STALE\|DELAY\|PROBE\)" <<<"$out" ||
    { echo "FAIL: the kernel did not resolve $IP6_I through vrnicd's advertisement"; return 1; }
  (($(stat_of wire_tx_no_route i) == 0)) || { echo "FAIL: vrnicd i found no route"; return 1; }
}
check "the kernel resolved the dpdk port's IPv6 address (neighbour advertisement), and vrnicd the kernel's" \
  across_v6_mixed v6_kernel_neighbor
check "IPv6 dpdk/udp counters: frames both ways, no ICRC or format errors" \
  across_v6_mixed clean_counters i j

# --- RX interrupts: vrnicd on net_tap ----------------------------------------------------------
# DPDK's tap PMD has RX interrupts (its queue's file turns readable when a frame waits): an
# idle worker sleeps on that, up to the port's housekeeping period, instead of looking every
# 200 us. vrnicd T (dpdk on a tap) and vrnicd U (udp) in one namespace, through the tap's
# kernel side. (memif, af_packet and af_xdp in DPDK 22.11 have no RX interrupts.)
NS_T=vrdp-t-$$ TAP=vrtap$$ IP_T=10.85.0.1 IP_U=10.85.0.2
start_tap_hosts() {
  vrnic_on_cleanup "ip netns del $NS_T 2>/dev/null"
  echo "+ ip netns add $NS_T; vrnicd on net_tap0,iface=$TAP there; $IP_U on its kernel side"
  need_dpdk && ip netns add "$NS_T" && ip -n "$NS_T" link set lo up &&
    host_vrnicd t "$NS_T" --dpdk "$IP_T" --eal "$EAL_BASE --vdev net_tap0,iface=$TAP" &&
    ip -n "$NS_T" addr add "$IP_U"/24 dev "$TAP" && ip -n "$NS_T" link set "$TAP" up &&
    host_vrnicd u "$NS_T" --udp "$IP_U" && wait_link t
}
across_tap() { with_hosts start_tap_hosts t u -- "$@"; }
check "ib_write_bw -s 65536 -n 2000: dpdk on a tap (RX interrupts) <-> udp" \
  across_tap perftest_between t u ib_write_bw -s 65536 -n 2000
check "ibv_rc_pingpong: dpdk on a tap (RX interrupts) <-> udp" \
  across_tap pingpong_between u t ibv_rc_pingpong

# worker_wakeups NAME: voluntary context switches of NAME's worker thread so far.
worker_wakeups() {
  local task
  for task in /proc/"$(pid_of "$1")"/task/*; do
    [[ $(cat "$task/comm" 2>/dev/null) == vrnic-w0 ]] || continue
    awk '/^voluntary_ctxt_switches/ { print $2 }' "$task/status"
    return 0
  done
  return 1
}
# Idle, the worker sleeps on the interrupt: a handful of wakeups a second (housekeeping every
# 50 ms), not thousands; one frame from the kernel (its ARP request for us, then a datagram
# that is not RoCE) wakes it through the interrupt.
tap_rx_interrupts() {
  local w0 w1 i0 i1 try
  # Timers under test, time itself: idle long enough to fall asleep (20 ms without work),
  # then the wakeups of one idle second counted.
  sleep 0.5
  w0=$(worker_wakeups t) && sleep 1 && w1=$(worker_wakeups t) || return 1
  echo "    t's worker, idle: $((w1 - w0)) wakeups in 1 s"
  ((w1 - w0 < 200)) || { echo "FAIL: the idle worker polls instead of sleeping on the interrupt"; return 1; }
  # One frame at a time, each after the worker fell asleep again (vrnicctl's question wakes it;
  # it sleeps after 20 ms without work): a few tries, in case other traffic woke it just then.
  i0=$(stat_of wire_rx_interrupts t) && i1=$i0
  for try in 1 2 3; do
    sleep 0.3  # time itself: the worker falls asleep again after 20 ms without work
    ip -n "$NS_T" neigh flush dev "$TAP"
    echo "+ a UDP datagram from the kernel to $IP_T:4791 (try $try)"
    ip netns exec "$NS_T" bash -c "echo not-roce >/dev/udp/$IP_T/4791" || return 1
    wait_for 1 "the datagram to be counted" stat_over wire_rx_interrupts "$i0" "${SOCK[t]}"
    i1=$(stat_of wire_rx_interrupts t)
    ((i1 > i0)) && break
  done
  echo "    rx_interrupts $i0 -> $i1, malformed: $(stat_of wire_rx_malformed t)"
  ((i1 > i0)) || { echo "FAIL: the frame did not wake the worker through its interrupt"; return 1; }
  pingpong_between u t ibv_ud_pingpong
}
check "tap RX interrupts: an idle worker sleeps on them; a frame wakes it; traffic after" \
  across_tap tap_rx_interrupts

# --- the end ------------------------------------------------------------------------------
((${#PID[@]} > 0)) && check "every dpdk vrnicd: no objects left, exits 0 on SIGTERM" stop_hosts

vrnic_script_finish
