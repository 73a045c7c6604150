#!/usr/bin/env bash
# perf/bench_dpdk.sh: vrnic's dpdk port against DPDK's own ceiling on the same path (issue 5,
# "Performance"). Two paths:
#   memif      two vrnicd in this namespace joined by net_memif
#   af_packet  two vrnicd on net_af_packet, one in each of two network namespaces joined by a
#              veth pair
#   memif8k    memif with 8192-byte buffers at both ends (bsize=8192): RoCE MTU 4096, 4154 B
#              frames; `ib_write_bw -s 65536` only (the same as memif for 64-byte writes)
# and for each, in every round: `ib_write_bw -s 65536 -D 5` and `ib_write_bw -s 64 -q 16 -D 5`
# (server on the first vrnicd, client on the second), next to perf/dpdk_ceiling.sh (two
# dpdk-testpmd, txonly -> rxonly) over the same path with frames of the size vrnic sends
# (RoCE MTU 1024 on a 1500-byte link: 1082 B frames for the large messages, 138 B for 64-byte
# writes). vrnic's packet rate is its bandwidth divided by the payload per packet (1024 or
# 64 B); the ratio to the ceiling's packet rate is the figure the issue asks for (target
# >= 0.60). Ceilings are measured with no vrnicd running (an idle vrnicd still polls), the
# vrnicd pairs are then started for vrnic's figures.
#
# CPUs: the ceiling's two testpmd forwarding threads are pinned, the receiver's to CPU 1 and
# the sender's to CPU 0 (perf/dpdk_ceiling.sh); vrnicd's workers and perftest float, as they
# do by default. `memif-pinned` is the memif pair with its workers pinned the way testpmd's
# are (`--cpus 1` for the server, which receives, `--cpus 0` for the client), against the
# same ceiling. Pinned was faster on an otherwise idle machine and not with other load: with
# perftest's client a third spinning thread on two CPUs, a pinned worker cannot move away from
# a busy CPU (perf/RESULTS.md, "Pinned workers").
#
# Medians over ROUNDS (default 3); logs and summary.md go to perf/out/bench-dpdk-<date>/.
#
# Worker scaling (`ib_write_bw -q 16` with 1 and 2 workers) is perf/bench_workers.sh.
#
# Usage: perf/bench_dpdk.sh [ROUNDS]            (root: namespaces, DPDK devices)
# Environment: VRNIC_SKIP_SETUP=1 skips the package and build steps; BENCH_SECONDS (default 5).

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
secs=${BENCH_SECONDS:-5}
target=0.60

vrnic_tmp_init || exit 1
trap 'vrnic_cleanup; exit 130' INT TERM
bench_setup || exit 1
vrnic_install_packages dpdk-dev || exit 1  # dpdk-testpmd
# shellcheck source=tests/lib_dpdk.sh
source tests/lib_dpdk.sh
need_dpdk || exit 1
bench_out_dir bench-dpdk || exit 1
out=$BENCH_OUT
NS_A=vrbench-a-$$ NS_B=vrbench-b-$$ VETH_A=vba$$ VETH_B=vbb$$

{
  bench_system_info
  echo "dpdk:     $(pkg-config --modversion libdpdk 2>/dev/null), EAL $EAL_BASE"
} | tee "$out/system.txt"

# Sizes: [message size]=frame bytes on the wire, payload bytes per packet; memif8k's MTU is 4096.
declare -A FRAME=([65536]=1082 [64]=138 [memif8k.65536]=4154)
declare -A PAYLOAD=([65536]=1024 [64]=64 [memif8k.65536]=4096)
frame_of() { echo "${FRAME[$1.$2]:-${FRAME[$2]}}"; }
payload_of() { echo "${PAYLOAD[$1.$2]:-${PAYLOAD[$2]}}"; }
declare -A ARGS=([65536]="-s 65536" [64]="-s 64 -q 16")
declare -A results  # [path.size.kind] = space-separated values per round
BENCH_ROUNDS=$rounds
BENCH_STEPS=$((12 * rounds))

# ceiling ROUND PATH SIZE: testpmd's Mpps for this path and frame size.
ceiling() {
  local log=$out/ceiling.$2.$3.$1.log line mpps frame path=${2%8k} bsize=
  frame=$(frame_of "$2" "$3")
  [[ $2 == memif8k ]] && bsize=8192
  if MEMIF_BSIZE=$bsize vrnic_fg timeout -k 10 120 perf/dpdk_ceiling.sh "$path" "$frame" "$secs" \
    >"$log" 2>&1; then
    line=$(tail -n 1 "$log")
    mpps=$(sed -n 's/.* mpps=\([0-9.]*\).*/\1/p' <<<"$line")
  fi
  if [[ -n ${mpps:-} ]]; then
    results[$2.$3.ceiling]+="$mpps "
    bench_progress "$1" "testpmd $2 $frame B frames" "$mpps Mpps"
  else
    bench_progress "$1" "testpmd $2 $frame B frames" ""
    bench_fail "$log"
  fi
}

# vrnic ROUND PATH SIZE SERVER CLIENT: ib_write_bw between two vrnicd; Mpps and GB/s.
vrnic() {
  local round=$1 path=$2 size=$3 log=$out/vrnic.$2.$3.$1.log v unit g mpps
  local -a args
  read -ra args <<<"${ARGS[$size]}"
  if VRNIC_SOCKET=${SOCK[$4]} VRNIC_CLIENT_ENV=VRNIC_SOCKET=${SOCK[$5]} VRNICD_PID=${PID[$4]} \
    bench_perftest "$log" "$path.$size.$round" ib_write_bw "${args[@]}" -D "$secs" &&
    [[ $ROW == bw* ]]; then
    read -r _ _ v unit <<<"$ROW"
    g=$(bench_bw_gbs "$v" "$unit")
    # From perftest's own figure, not the rounded GB/s (64-byte writes are a few MB/s).
    mpps=$(awk -v v="$v" -v u="$unit" -v p="$(payload_of "$path" "$size")" \
      'BEGIN { b = (u == "Gb/s") ? v * 1e9 / 8 : v * 1048576; printf "%.3f", b / p / 1e6 }')
    results[$path.$size.vrnic]+="$mpps "
    results[$path.$size.gbs]+="$g "
    bench_progress "$round" "vrnic $path ib_write_bw ${ARGS[$size]}" "$g GB/s, $mpps Mpps"
  else
    bench_progress "$round" "vrnic $path ib_write_bw ${ARGS[$size]}" ""
    bench_fail "$log"
  fi
}

start_pairs() {
  host_vrnicd m1 - --dpdk 10.78.0.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$DIR/memif.sock" &&
    host_vrnicd m2 - --dpdk 10.78.0.2 --eal "$EAL_BASE --vdev net_memif0,role=client,socket=$DIR/memif.sock" &&
    host_vrnicd p1 - --cpus 1 --dpdk 10.79.0.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$DIR/memif-p.sock" &&
    host_vrnicd p2 - --cpus 0 --dpdk 10.79.0.2 --eal "$EAL_BASE --vdev net_memif0,role=client,socket=$DIR/memif-p.sock" &&
    host_vrnicd j1 - --dpdk 10.86.0.1 --eal "$EAL_BASE --vdev net_memif0,role=server,socket=$DIR/memif-8k.sock,bsize=8192" &&
    host_vrnicd j2 - --dpdk 10.86.0.2 --eal "$EAL_BASE --vdev net_memif0,role=client,socket=$DIR/memif-8k.sock,bsize=8192" &&
    veth_pair "$NS_A" "$NS_B" "$VETH_A" "$VETH_B" &&
    host_vrnicd a "$NS_A" --dpdk 10.77.0.1 --eal "$EAL_BASE --vdev net_af_packet0,iface=$VETH_A,$AF_PACKET_RING" &&
    host_vrnicd b "$NS_B" --dpdk 10.77.0.2 --eal "$EAL_BASE --vdev net_af_packet0,iface=$VETH_B,$AF_PACKET_RING" &&
    wait_link m1 m2 p1 p2 j1 j2 a b
}

stop_pairs() {
  local d
  for d in m1 m2 p1 p2 j1 j2 a b; do
    [[ -n ${PID[$d]:-} ]] || continue
    VRNICD_PID=${PID[$d]} VRNICD_LOG=${LOG[$d]} stop_vrnicd TERM "${SOCK[$d]}" >>"$out/vrnicd-stop.log" 2>&1
    PID[$d]=
  done
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
}

# (path size) pairs measured, in order.
RUNS=("memif 65536" "memif-pinned 65536" "af_packet 65536" "memif 64" "memif-pinned 64"
  "af_packet 64" "memif8k 65536")
declare -A PAIR=([memif]="m1 m2" [memif-pinned]="p1 p2" [af_packet]="a b" [memif8k]="j1 j2")
ceiling_of() { echo "${1%-pinned}"; }  # the path whose ceiling a path is measured against
for ((r = 1; r <= rounds; r++)); do
  for run in "${RUNS[@]}"; do
    read -r path size <<<"$run"
    [[ $(ceiling_of "$path") == "$path" ]] && ceiling "$r" "$path" "$size"
  done
  start_pairs >"$out/vrnicd-start.$r.log" 2>&1 || { cat "$out/vrnicd-start.$r.log"; exit 1; }
  for run in "${RUNS[@]}"; do
    read -r path size <<<"$run"
    # shellcheck disable=SC2086 # the pair's two names
    vrnic "$r" "$path" "$size" ${PAIR[$path]}
  done
  stop_pairs
done

# shellcheck disable=SC2086 # the values are space-separated on purpose
med() { bench_median_fmt "${2:-%.3f}" ${results[$1]:-}; }
{
  echo "## vrnic dpdk port vs dpdk-testpmd on the same path ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds of ${secs} s. vrnic: \`ib_write_bw ARGS -D $secs -d vrnic0 -x 0 -F\`,"
  echo "server on the first vrnicd, client on the second; its packet rate is bandwidth / payload per"
  echo "packet. Ceiling: \`perf/dpdk_ceiling.sh PATH FRAME $secs\` (testpmd txonly -> rxonly, same frame size)."
  echo
  echo "| path | ib_write_bw | vrnic GB/s | vrnic Mpps | testpmd Mpps (frame) | ratio (target >= $target) |"
  echo "|---|---|---|---|---|---|"
  for run in "${RUNS[@]}"; do
    read -r path size <<<"$run"
    echo "| $path | ${ARGS[$size]} | $(med "$path.$size.gbs" %.2f) | $(med "$path.$size.vrnic") |" \
      "$(med "$(ceiling_of "$path").$size.ceiling") ($(frame_of "$path" "$size") B) |" \
      "$(bench_ratio "$(med "$path.$size.vrnic")" "$(med "$(ceiling_of "$path").$size.ceiling")") |"
  done
  echo
  echo "Per round (Mpps): $(for k in "${!results[@]}"; do printf '%s=[%s] ' "$k" "${results[$k]% }"; done)"
  echo
  echo "Worker scaling: perf/bench_workers.sh."
} | tee "$out/summary.md"
vrnic_cleanup
echo "failures: $BENCH_FAILURES; summary: $out/summary.md"
((BENCH_FAILURES == 0))
