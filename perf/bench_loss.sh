#!/usr/bin/env bash
# perf/bench_loss.sh: what loss, duplicates and reordering cost (issue 31, "Performance").
# Two vrnicd on the udp port, `--udp 127.0.0.1` and `--udp 127.0.0.2`, the same faults set on
# both (`vrnicctl faults SPEC`: what each daemon receives is dropped, duplicated or held back
# at that rate); perftest servers on the first, clients on the second. Twice: both daemons as
# by default (go-back-N: a sequence NAK has the requester send everything again from the lost
# packet), then both with --selective-repeat (the NAK says what is held; only the missing
# packets are sent again). Each round measures, for every fault setting (none first):
#   ib_write_bw -s 65536 -D 4     bandwidth (BW average)
#   ib_read_bw  -s 65536 -D 4     bandwidth (BW average)
# and each setting's figure as a ratio to the loss-free one of the same round; prints the
# medians of both over the rounds against the issue's targets, writes loss.csv and, with
# gnuplot, loss.png (throughput ratio against the fault rate). Logs, summary.md, loss.csv
# and both daemons' counters go to perf/out/bench-loss-<date>/. Installs missing packages
# (as root) and builds first, like perf/demo.sh.
#
# Usage: perf/bench_loss.sh [ROUNDS]      (default 3; about 2 minutes a round and mode)
# Environment:
#   BENCH_FAULTS   the settings, space-separated (default "loss=1 loss=10 dup=1 reorder=5")
#   BENCH_SECONDS  perftest's -D (default 4)
#   VRNIC_SKIP_SETUP=1  skip the package and build steps
# Units: GB/s = 1e9 bytes/s (perftest's MB/sec are MiB/s and are converted).

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh
# shellcheck source=perf/lib_bench.sh
source perf/lib_bench.sh

bench_count_arg ROUNDS 3 "${1:-}" || exit 2
rounds=$BENCH_COUNT
read -r -a faults <<<"${BENCH_FAULTS:-loss=1 loss=10 dup=1 reorder=5}"
seconds=${BENCH_SECONDS:-4}
settings=(none "${faults[@]}")
# The issue's targets, as a ratio to no faults: writes, then reads ("-": none set).
declare -A write_target=([loss=1]=0.9 [loss=10]=0.5 [dup=1]=0.95 [reorder=5]=0.95)
declare -A read_target=([loss=1]=0.8)

vrnic_tmp_init || exit 1
bench_setup || exit 1
bench_out_dir bench-loss || exit 1
out=$BENCH_OUT
# The two ways the daemons recover, each with its vrnicd options.
modes=(go-back-N selective)
declare -A mode_args=([go-back-N]="" [selective]="--selective-repeat")

bench_udp_pair_header "vrnic under faults, udp port: $rounds rounds of ${settings[*]}, go-back-N and selective repeat"
echo "logs:     $out/"
echo

BENCH_ROUNDS=$rounds
BENCH_STEPS=$((2 * ${#modes[@]} * ${#settings[@]} * rounds))

# faults_on SPEC: the same faults on both daemons ("" clears).
faults_on() {
  local s
  for s in "$VRNIC_SOCKET" "$PEER_SOCKET"; do
    timeout -k 2 10 "$VRNICCTL" --socket "$s" faults "$1" >/dev/null || return 1
  done
}

# measure ROUND NAME PROG ARGS...: one perftest pair across the two vrnicd; sets ROW.
measure() {
  local round=$1 name=$2 log=$out/$2.$1.log
  shift 2
  ROW=
  if ! _vrnic_running "$VRNICD_PID" || ! _vrnic_running "$PEER_PID"; then
    echo "a vrnicd died" >>"$log"
    return 1
  fi
  bench_perftest "$log" "$name.$round" "$@"
}

# figures[MODE.TEST.SETTING.ROUND]: GB/s (absent when that measurement failed).
declare -A figures
for m in "${modes[@]}"; do
  echo "   -- $m${mode_args[$m]:+ (vrnicd ${mode_args[$m]})}"
  # shellcheck disable=SC2086 # the options split at spaces, none for go-back-N
  bench_start_udp_pair ${mode_args[$m]} || exit 1
  for ((r = 1; r <= rounds; r++)); do
    for s in "${settings[@]}"; do
      spec=$s
      [[ $s == none ]] && spec=""
      faults_on "$spec" || { echo "vrnicctl faults $spec failed"; exit 1; }
      echo "        faults: $s"
      for t in write read; do
        got=()
        bench_bw "$r" "$m.${t}_bw.$s" got "ib_${t}_bw" -s 65536 -D "$seconds"
        ((${#got[@]})) && figures[$m.$t.$s.$r]=${got[0]}
      done
    done
    faults_on ""
  done
  bench_stop_udp_pair ".$m"
done

# values MODE TEST SETTING [ratio]: the rounds' figures, or their ratios to the same round's
# loss-free figure in the same mode, space-separated.
values() {
  local r v b
  for ((r = 1; r <= rounds; r++)); do
    v=${figures[$1.$2.$3.$r]:-} b=${figures[$1.$2.none.$r]:-}
    [[ -z $v ]] && continue
    if [[ ${4:-} == ratio ]]; then
      [[ -n $b ]] && awk -v a="$v" -v b="$b" 'BEGIN { if (b > 0) printf "%.3f ", a / b }'
    else
      printf '%s ' "$v"
    fi
  done
}

# verdict RATIO TARGET: "met", "not met", or "" with no target.
verdict() {
  [[ -z $2 || $1 == n/a ]] && return 0
  awk -v r="$1" -v t="$2" 'BEGIN { print (r >= t ? "met" : "not met") }'
}

csv=$out/loss.csv
echo "setting,mode,write_gbs,write_ratio,read_gbs,read_ratio" >"$csv"
{
  echo "## vrnic under faults, udp port ($(date +%Y-%m-%d))"
  echo
  sed 's/^/    /' "$out/system.txt"
  echo
  echo "Medians over $rounds rounds; ratios to the loss-free run of the same round and mode."
  echo "Faults on both vrnicd (\`vrnicctl faults SPEC\`); perftest \`-s 65536 -D $seconds\`,"
  echo "client on 127.0.0.2, server on 127.0.0.1 (\`-d vrnic0 -x 0 -F\`); go-back-N: both"
  echo "vrnicd as by default, selective: both with \`--selective-repeat\`."
  echo
  echo "| faults | recovery | write GB/s | write ratio (target) | read GB/s | read ratio (target) |"
  echo "|---|---|---|---|---|---|"
  for s in "${settings[@]}"; do
    for m in "${modes[@]}"; do
      # shellcheck disable=SC2046 # the figures are space-separated on purpose
      w=$(bench_median $(values "$m" write "$s")) rd=$(bench_median $(values "$m" read "$s"))
      wr=1 rr=1
      if [[ $s != none ]]; then
        # shellcheck disable=SC2046
        wr=$(bench_median_fmt %.3f $(values "$m" write "$s" ratio))
        # shellcheck disable=SC2046
        rr=$(bench_median_fmt %.3f $(values "$m" read "$s" ratio))
      fi
      wt=${write_target[$s]:-} rt=${read_target[$s]:-}
      echo "| $s | $m | $w | $wr${wt:+ (>= $wt: $(verdict "$wr" "$wt"))} | $rd | $rr${rt:+ (>= $rt: $(verdict "$rr" "$rt"))} |"
      echo "$s,$m,$w,$wr,$rd,$rr" >>"$csv"
    done
  done
  echo
  echo "Counters after each mode's run (both directions, all rounds): server / client vrnicd"
  echo
  for m in "${modes[@]}"; do
    echo "- $m:"
    for k in retransmits timeouts naks_sent naks_received duplicates out_of_sequence packets_held selective_resends read_gaps; do
      echo "  - $k: $(awk -F= -v k="$k" '$1 == k { print $2 }' "$out/stats.server.$m.txt") / $(awk -F= -v k="$k" '$1 == k { print $2 }' "$out/stats.client.$m.txt")"
    done
  done
} >"$out/summary.md"
if command -v gnuplot >/dev/null; then
  gnuplot -e "csv='$csv'; png='$out/loss.png'" perf/plot_loss.gp 2>>"$out/gnuplot.log" &&
    echo "plot: $out/loss.png"
fi
echo
cat "$out/summary.md"
((BENCH_FAILURES == 0)) || { echo "$BENCH_FAILURES measurements failed"; exit 1; }
