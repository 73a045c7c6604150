#!/usr/bin/env bash
# perf/dpdk_ceiling.sh: the packet-rate ceiling of two DPDK paths on this host, measured with
# dpdk-testpmd, so a vrnic RoCE benchmark can be put next to "what DPDK itself gets" in the
# same run (same machine, same load, same kernel).
#
# Usage: perf/dpdk_ceiling.sh memif|af_packet FRAME_BYTES SECONDS
#
#   memif      two testpmd processes joined by net_memif (role=server receives, role=client
#              sends), socket file in a private temp dir. Pure shared memory, no kernel on the
#              data path: the upper bound of a DPDK-to-DPDK hop on one host.
#   af_packet  two network namespaces vrceil-<pid>-a / vrceil-<pid>-b joined by a veth pair
#              (MTU 1500, up); one testpmd per namespace on net_af_packet
#              (blocksz=65536,framesz=2048,framecnt=32768). Every packet crosses the kernel
#              (PACKET_MMAP tx ring -> veth -> PACKET_MMAP rx ring): the ceiling of a DPDK
#              application that talks to a kernel netdev.
#
# In both paths the sender runs `--forward-mode=txonly --txpkts=FRAME_BYTES` and the receiver
# `rxonly`. FRAME_BYTES is the Ethernet frame without FCS (what testpmd's txonly sends), e.g.
# 1086 = a RoCEv2 packet with 1024 B payload, 130 = a small one, 4200 = a 4096 B-MTU RoCE packet.
#
# What is measured: the RECEIVER's packets/s, over SECONDS, after 1 s of warm-up. It is
# testpmd's own "Rx-pps (since last show)" from two `show port stats 0` commands SECONDS apart,
# i.e. (rx packets between the two) / (TSC time between the two), so the start-up ramp and
# the shutdown are not in the figure. The sender's rate goes to stderr as well; the difference
# is what the path dropped (af_packet: kernel rx ring full).
#
# Output: progress on stderr; the LAST line on stdout is
#   ceiling path=<memif|af_packet> frame=<bytes> mpps=<X.XXX> gbytes_per_s=<Y.YYY>
# with gbytes_per_s = mpps * frame / 1000 (GB/s = 1e9 bytes/s of whole frames).
#
# Cores: the host has 2 vCPUs and testpmd needs a main lcore (command line) plus a forwarding
# lcore, so each process gets `-l 0,1 --nb-cores=1` with opposite main lcores:
#   receiver: --main-lcore 0  -> forwarding (busy-poll) lcore 1
#   sender:   --main-lcore 1  -> forwarding (busy-poll) lcore 0
# The main lcores only sit in the command line read (idle), so each CPU runs exactly one
# busy-polling thread. Anything else running on the host (vrnicd, builds) lowers the ceiling.
#
# Memory: `--no-huge -m 512` (no hugepage setup to do and undo; mempools are small and the
# copy/poll cost does not depend on the page size at these rates) with a 32768-mbuf pool
# (testpmd's default pool size, ~155k mbufs, does not fit in 512 MB).
#
# Control: testpmd runs interactively (-i) with its stdin on a FIFO we write commands to and
# its stdout line-buffered (stdbuf -oL) to a log we poll. Interactive rather than
# `--auto-start --stats-period` + SIGTERM because a memif peer that disconnects while the
# other side is still polling segfaults testpmd 22.11 in the memif rx path (seen here: the
# server crashed the moment the client exited). So BOTH sides `stop` forwarding first, then
# both `quit`; the trap does the same on failure or interrupt before resorting to signals.
# (The main lcore blocks in read() on the FIFO, so it costs no CPU.)
#
# Sanity checks: txonly's "packet len=" must equal FRAME_BYTES (testpmd silently falls back
# to 64 B if it rejects --txpkts), and the receiver's bytes/packets must equal it too.
# Contention check: from /proc/<pid>/task/<tid>/schedstat, the time each forwarding thread
# spent runnable but waiting for a CPU during the window; above 3% a WARNING is printed (the
# figure is then not a clean ceiling). Idle DPDK vrnicd instances left running (their
# workers poll) are enough to trigger it.
#
# Frame size limits (checked below):
#   af_packet  <= 1514: the veth MTU is 1500 (+14 B Ethernet header); larger frames are
#              refused by the kernel. (framesz=2048 alone would allow ~1990.)
#   memif      <= 8192. The PMD's buffers are 2048 B (pkt_buffer_size); larger frames go as a
#              chain of memif descriptors, so 4200 works (3 buffers) although the port reports
#              MTU 1500 / max rx length 1518: memif does not enforce them. For frames above
#              2048 B the sender's mbufs are made large enough to hold the frame in one
#              segment (--mbuf-size); the receiver gets chained 2 KiB mbufs. Tested up to 8192
#              (4 buffers); at 9000 the receiver counted ~0.1% fewer bytes per packet than
#              sent (the size check at the end catches that), so the limit is 8192.
#
# Addresses: txonly's IPv4 addresses are set to 127.0.0.1 -> 127.0.0.2 (--tx-ip) and the
# destination MAC is testpmd's default 02:00:00:00:00:00; the frames only ever reach the
# peer testpmd (memif) or the peer veth inside our own namespace (af_packet), where the
# kernel drops them as not-for-this-host after the packet socket has copied them.
#
# Everything created (temp dir with FIFOs/logs/memif socket, DPDK runtime dirs
# /var/run/dpdk/vrceil-<pid>-*, namespaces and veths, testpmd processes) is removed on exit,
# failure or interrupt. Only processes this script started are killed, by pid.
# Needs root (namespaces, /var/run/dpdk) and dpdk-testpmd (Debian package dpdk).
# Environment: TESTPMD (default dpdk-testpmd), DPDK_CEILING_KEEP=1 keeps the temp dir (logs),
# MEMIF_BSIZE=N memif buffers of N bytes at both ends (a frame up to N in one buffer).

set -euo pipefail

readonly PROG=dpdk_ceiling
log() { echo "$PROG: $*" >&2; }
die() { echo "$PROG: error: $*" >&2; exit 1; }
usage() { echo "usage: perf/dpdk_ceiling.sh memif|af_packet FRAME_BYTES SECONDS" >&2; exit 2; }

[[ $# -eq 3 ]] || usage
path=$1 frame=$2 secs=$3
[[ $path == memif || $path == af_packet ]] || usage
[[ $frame =~ ^[1-9][0-9]*$ ]] || usage
[[ $secs =~ ^[1-9][0-9]*$ ]] || usage

# txonly writes Ethernet + IPv4 + UDP headers (42 B); 60 is the Ethernet minimum without FCS.
(( frame >= 60 )) || die "FRAME_BYTES must be >= 60"
case $path in
  af_packet) (( frame <= 1514 )) || die "af_packet: FRAME_BYTES must be <= 1514 (veth MTU 1500)" ;;
  memif)     (( frame <= 8192 )) || die "memif: FRAME_BYTES must be <= 8192 (see the header)" ;;
esac

TESTPMD=${TESTPMD:-dpdk-testpmd}
command -v "$TESTPMD" >/dev/null || die "$TESTPMD not found (apt-get install dpdk)"
command -v stdbuf >/dev/null || die "stdbuf not found (coreutils)"
[[ $EUID -eq 0 ]] || die "must run as root (network namespaces, /var/run/dpdk)"
[[ $path == memif ]] || command -v ip >/dev/null || die "ip not found (iproute2)"

# --------------------------------------------------------------------------------------------
# State and cleanup. Everything is keyed by the role name ("rx" / "tx").
readonly ID="vrceil-$$"
tmp=''            # private temp dir: FIFOs, logs, memif socket
declare -A TP_PID=() TP_FD=() TP_LOG=()
NETNS=()          # namespaces we created (deleting one also deletes the veth end in it)
cleaned=0

cleanup() {
  (( cleaned )) && return 0
  cleaned=1
  local name pid fd i alive=()
  for name in tx rx; do
    pid=${TP_PID[$name]:-}
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then alive+=("$name"); fi
  done
  # Graceful first, as at the end of a normal run: `stop` forwarding in both, then `quit`
  # (sender first), then TERM, then KILL. A memif peer that disconnects while the other side
  # still polls can crash it.
  for name in "${alive[@]}"; do
    log "stopping testpmd $name (pid ${TP_PID[$name]})"
    printf 'stop\n' 1>&"${TP_FD[$name]}" 2>/dev/null || true
  done
  (( ${#alive[@]} == 0 )) || sleep 1
  for name in "${alive[@]}"; do
    pid=${TP_PID[$name]}
    printf 'quit\n' 1>&"${TP_FD[$name]}" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for name in "${!TP_FD[@]}"; do fd=${TP_FD[$name]}; exec {fd}>&- || true; done
  for name in "${!TP_PID[@]}"; do rm -rf "/var/run/dpdk/$ID-$name"; done
  for i in "${NETNS[@]}"; do ip netns delete "$i" 2>/dev/null || true; done
  [[ -n $tmp ]] || return 0
  if [[ ${DPDK_CEILING_KEEP:-0} == 1 ]]; then log "logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM HUP
tmp=$(mktemp -d "/tmp/$ID.XXXXXX")

# --------------------------------------------------------------------------------------------
# testpmd helpers.

# tp_launch NAME MAIN_LCORE NETNS VDEV TESTPMD_APP_ARGS... : start an interactive testpmd.
# NETNS may be "" (host namespace).
tp_launch() {
  local name=$1 main=$2 ns=$3 vdev=$4; shift 4
  local fifo=$tmp/$name.in fd
  TP_LOG[$name]=$tmp/$name.log
  : >"${TP_LOG[$name]}"             # exists before testpmd opens it: tp_wait can grep at once
  mkfifo "$fifo"
  # Opened read-write so neither side blocks on open and testpmd never sees EOF.
  exec {fd}<>"$fifo"
  TP_FD[$name]=$fd
  # setsid: own session and process group, so a Ctrl-C on the terminal reaches only this
  # script, whose trap then shuts the two testpmd down in a safe order (see cleanup).
  local argv=(setsid stdbuf -oL "$TESTPMD" -l "0,1" --main-lcore "$main" --no-huge -m 512 --no-pci
             --file-prefix "$ID-$name" --vdev="$vdev"
             -- -i --nb-cores=1 --total-num-mbufs=32768 "$@")
  [[ -z $ns ]] || argv=(ip netns exec "$ns" "${argv[@]}")
  log "$name: ${argv[*]}"
  # ip netns exec, setsid (not a group leader here, so it does not fork) and stdbuf all
  # exec, so $! is testpmd's own pid; tp_ready checks that before we ever signal it.
  "${argv[@]}" <&"$fd" >"${TP_LOG[$name]}" 2>&1 &
  TP_PID[$name]=$!
}

tp_cmd() { printf '%s\n' "$2" >&"${TP_FD[$1]}"; }

tp_count() {
  local n
  n=$(grep -a -c -E -- "$2" "${TP_LOG[$1]}" 2>/dev/null) || true
  echo "${n:-0}"
}

# tp_wait NAME REGEX COUNT TIMEOUT_S: wait until NAME's log has COUNT lines matching REGEX.
tp_wait() {
  local name=$1 re=$2 want=$3 timeout=$4 i
  for ((i = 0; i < timeout * 10; i++)); do
    (( $(tp_count "$name" "$re") >= want )) && return 0
    if ! kill -0 "${TP_PID[$name]}" 2>/dev/null; then
      tail -n 25 "${TP_LOG[$name]}" >&2
      die "testpmd $name exited (waiting for /$re/)"
    fi
    sleep 0.1
  done
  tail -n 25 "${TP_LOG[$name]}" >&2
  die "testpmd $name: timed out after ${timeout}s waiting for /$re/"
}

# tp_query NAME COMMAND REGEX: run COMMAND, wait for one more line matching REGEX, print it.
tp_query() {
  local name=$1 cmd=$2 re=$3 n
  n=$(tp_count "$name" "$re")
  tp_cmd "$name" "$cmd"
  tp_wait "$name" "$re" $((n + 1)) 10
  grep -a -E -- "$re" "${TP_LOG[$name]}" | tail -n 1
}

# tp_ready NAME: wait for the first prompt (EAL and port init done), and make sure the pid
# we hold is testpmd itself (cleanup signals it).
tp_ready() {
  local comm want
  tp_wait "$1" 'testpmd> ' 1 60
  want=$(basename "$TESTPMD"); want=${want:0:15}
  read -r comm <"/proc/${TP_PID[$1]}/comm"
  [[ $comm == "$want" ]] || die "pid ${TP_PID[$1]} is '$comm', not $want"
}

# tp_link_up NAME: poll the port's link status (memif: up once the client has connected).
tp_link_up() {
  local name=$1 i status
  for ((i = 0; i < 40; i++)); do
    status=$(tp_query "$name" "show port info 0" 'Link status:')
    [[ $status == *up* ]] && return 0
    sleep 0.5
  done
  die "testpmd $name: port 0 link did not come up in 20 s"
}

# tp_start NAME: start forwarding and wait for the end of testpmd's start report (its
# "nb forwarding cores=" line comes after txonly's "packet len=" line).
tp_start() { tp_query "$1" start 'nb forwarding cores=' >/dev/null; }

# tp_rate NAME Rx|Tx: "<packets/s> <bits/s>" since the previous `show port stats 0` (0 0 on
# the first call).
tp_rate() { tp_query "$1" "show port stats 0" "$2-pps:" | awk '{print $2, $4}'; }

# tp_sched NAME: "<ns on CPU> <ns runnable but waiting for a CPU>" so far, summed over NAME's
# forwarding thread(s) (EAL names them rte-worker-<lcore>), from /proc/.../schedstat. Over the
# measurement window a busy-polling thread that has its core to itself waits ~0 ns; waiting
# means other tasks (a build, vrnicd, ...) took turns on that core and the figure is no
# ceiling. (On-CPU time can be below 100% without any competitor: kernel softirq work done
# on the thread's behalf, e.g. af_packet's veth path, is not always charged to it.)
tp_sched() {
  local t comm on wait sum_on=0 sum_wait=0
  for t in /proc/"${TP_PID[$1]}"/task/*; do
    read -r comm <"$t/comm" || continue
    [[ $comm == rte-worker-* ]] || continue
    read -r on wait _ <"$t/schedstat" || continue
    sum_on=$((sum_on + on)) sum_wait=$((sum_wait + wait))
  done
  echo "$sum_on $sum_wait"
}

# tp_stop NAME: stop forwarding and wait for testpmd's "Done." after its final statistics.
tp_stop() { tp_query "$1" stop 'Done\.' >/dev/null; }

# tp_quit NAME: quit and wait (10 s at most; then cleanup kills it) for a clean exit.
# Only after tp_stop on BOTH sides: with memif, a side that is still polling when its peer
# disconnects segfaults in the PMD's rx path (testpmd 22.11, seen here several times).
tp_quit() {
  local name=$1 pid=${TP_PID[$1]} rc=0 i
  tp_cmd "$name" quit
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "testpmd $name did not quit; it will be killed"
    return 0
  fi
  wait "$pid" || rc=$?
  (( rc == 0 )) || log "testpmd $name exited with status $rc"
}

# --------------------------------------------------------------------------------------------
# Path setup: sets RX_NS/TX_NS and RX_VDEV/TX_VDEV.

setup_memif() {
  local sock=$tmp/memif.sock
  RX_NS='' TX_NS=''
  RX_VDEV="net_memif0,role=server,id=0,socket=$sock${MEMIF_BSIZE:+,bsize=$MEMIF_BSIZE}"
  TX_VDEV="net_memif0,role=client,id=0,socket=$sock${MEMIF_BSIZE:+,bsize=$MEMIF_BSIZE}"
}

setup_af_packet() {
  local a=$ID-a b=$ID-b va=vrceil$$a vb=vrceil$$b  # veth names: <= 15 chars
  log "creating namespaces $a, $b and veth $va <-> $vb"
  ip netns add "$a"; NETNS+=("$a")
  ip netns add "$b"; NETNS+=("$b")
  # Created directly inside the namespaces: nothing ever appears in the host namespace.
  ip link add "$va" netns "$a" mtu 1500 type veth peer name "$vb" netns "$b" mtu 1500
  ip -n "$a" link set "$va" up
  ip -n "$b" link set "$vb" up
  TX_NS=$a RX_NS=$b
  local opts=blocksz=65536,framesz=2048,framecnt=32768
  TX_VDEV="net_af_packet0,iface=$va,$opts"
  RX_VDEV="net_af_packet0,iface=$vb,$opts"
}

# --------------------------------------------------------------------------------------------
# Run.

log "path=$path frame=$frame seconds=$secs (tmp $tmp)"
"setup_$path"

# Frames above 2048 B do not fit testpmd's default mbuf (2048 B data room): give the
# sender mbufs of frame + 128 B headroom, rounded up to 64 B.
tx_extra=()
(( frame <= 2048 )) || tx_extra=(--mbuf-size=$(( (frame + 128 + 63) / 64 * 64 )))

# The receiver first: memif's server must be listening before the client connects.
tp_launch rx 0 "$RX_NS" "$RX_VDEV" --forward-mode=rxonly
tp_ready rx
# (--mbuf-size must come before --txpkts: testpmd checks the length while parsing.)
tp_launch tx 1 "$TX_NS" "$TX_VDEV" --forward-mode=txonly "${tx_extra[@]}" --txpkts="$frame" \
  --tx-ip=127.0.0.1,127.0.0.2
tp_ready tx
tp_link_up rx
tp_link_up tx
log "links up; forwarding"

tp_start rx
tp_start tx
# testpmd does not fail on a --txpkts it rejects, it falls back to 64 B: make sure.
grep -a -q "packet len=$frame " "${TP_LOG[tx]}" ||
  die "testpmd tx did not take --txpkts=$frame: $(grep -a -E 'packet len=|give up' "${TP_LOG[tx]}" | tr '\n' ' ')"
sleep 1                              # warm-up: link-up ramp and first-touch page faults
tp_rate rx Rx >/dev/null             # baseline for "since last show"
tp_rate tx Tx >/dev/null
read -r rx_on0 rx_wait0 < <(tp_sched rx)
read -r tx_on0 tx_wait0 < <(tp_sched tx)
t0=$(date +%s%N)
log "measuring for ${secs}s"
sleep "$secs" & wait $!              # (a plain sleep would hold off the INT/TERM trap)
read -r rx_pps rx_bps < <(tp_rate rx Rx)
read -r tx_pps _ < <(tp_rate tx Tx)
read -r rx_on1 rx_wait1 < <(tp_sched rx)
read -r tx_on1 tx_wait1 < <(tp_sched tx)
t1=$(date +%s%N)

tp_stop tx
tp_stop rx
tp_quit tx
tp_quit rx

[[ $rx_pps =~ ^[0-9]+$ && $rx_bps =~ ^[0-9]+$ && $tx_pps =~ ^[0-9]+$ ]] || die "could not parse rates (rx='$rx_pps' tx='$tx_pps')"
(( rx_pps > 0 )) || die "receiver saw no packets (sender at $tx_pps pps); see logs (DPDK_CEILING_KEEP=1)"
# Bytes per received packet must be the frame size (testpmd counts frames without FCS).
rx_len=$(( rx_bps / 8 / rx_pps ))
(( rx_len >= frame - 1 && rx_len <= frame + 1 )) ||
  die "receiver got ${rx_len}-byte packets, expected $frame"
# "lost" compares two slightly different windows (the two `show` commands are not
# simultaneous), so +-0.5% is noise; af_packet's real losses are far larger.
awk -v r="$rx_pps" -v t="$tx_pps" 'BEGIN {
  printf "dpdk_ceiling: sender %.3f Mpps, receiver %.3f Mpps, lost %.1f%%\n",
         t / 1e6, r / 1e6, (t > 0 ? 100 * (t - r) / t : 0) }' >&2
# CPU use of each forwarding thread over the window (see tp_sched).
awk -v w=$((t1 - t0)) -v ro=$((rx_on1 - rx_on0)) -v rw=$((rx_wait1 - rx_wait0)) \
    -v to=$((tx_on1 - tx_on0)) -v tw=$((tx_wait1 - tx_wait0)) 'BEGIN {
  printf "dpdk_ceiling: forwarding threads on CPU %.0f%% (rx) and %.0f%% (tx) of the window, " \
         "waiting for a CPU %.1f%% (rx) and %.1f%% (tx)\n", 100*ro/w, 100*to/w, 100*rw/w, 100*tw/w
  if (rw > 0.03 * w || tw > 0.03 * w)
    print "dpdk_ceiling: WARNING: other load on the CPUs; this run is not a clean ceiling" }' >&2
awk -v p="$path" -v f="$frame" -v r="$rx_pps" 'BEGIN {
  printf "ceiling path=%s frame=%d mpps=%.3f gbytes_per_s=%.3f\n", p, f, r / 1e6, r * f / 1e9 }'
