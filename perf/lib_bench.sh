# shellcheck shell=bash
# perf/lib_bench.sh: helpers shared by the benchmark scripts in perf/ (bench_loopback.sh,
# bench_udp.sh). Source it after tests/lib.sh, don't run it. Like lib.sh it does not use
# `set -e`; every helper returns a status.
#
#   bench_setup                  packages and build (unless VRNIC_SKIP_SETUP=1), provider check
#   bench_out_dir NAME           creates perf/out/NAME-<date>/ and sets BENCH_OUT to it
#   bench_system_info            date, commit, CPU, kernel, perftest version (to stdout)
#   bench_progress ROUND WHAT RESULT   one progress line "[step/steps] round r/R  WHAT  RESULT"
#   bench_fail LOG               counts a failed measurement, shows LOG's tail
#   bench_perftest LOG TAG CMD...      one perftest pair; sets ROW to the client's first row
#   measure ROUND NAME PROG ARGS...    bench_perftest on the one vrnicd (scripts may redefine)
#   bench_bw_gbs VALUE UNIT      a perftest bandwidth (MiB/s or Gb/s) in GB/s (1e9 bytes/s)
#   bench_median VALUES...       the median, two decimals ("n/a" if no values)
#   bench_median_fmt FMT VALUES...  the same, printed with printf format FMT
#   bench_ratio A B              "A/B (P%)", or "n/a"
#   bench_free_udp_port          a UDP port for two udp vrnicd, free now, in BENCH_UDP_PORT
#   bench_count_arg WHAT DEFAULT [VALUE]   the script's one argument (rounds, runs): VALUE or
#                                DEFAULT, a positive integer, in BENCH_COUNT; else usage, 1
#
# State: BENCH_ROUNDS and BENCH_STEPS (set by the script), BENCH_STEP and BENCH_FAILURES
# (counted here), BENCH_OUT, ROW.

BENCH_ROUNDS=${BENCH_ROUNDS:-1}
BENCH_STEPS=${BENCH_STEPS:-1}
BENCH_STEP=0
BENCH_FAILURES=0
BENCH_OUT=
ROW=

# bench_setup: as perf/demo.sh does, install missing packages (as root) and build, unless
# VRNIC_SKIP_SETUP=1; then make sure the provider library is there.
bench_setup() {
  if [[ ${VRNIC_SKIP_SETUP:-0} != 1 ]]; then
    echo "== setup"
    vrnic_install_packages "${VRNIC_BUILD_PACKAGES[@]}" || return 1
    vrnic_build || return 1
  fi
  require_provider
}

# bench_out_dir NAME: perf/out/NAME-<date>/ (relative to the repository), in BENCH_OUT.
bench_out_dir() {
  BENCH_OUT=perf/out/$1-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$BENCH_OUT"
}

# bench_system_info: what the figures were measured on, one "key: value" line each.
bench_system_info() {
  local dirty=
  git diff --quiet HEAD 2>/dev/null || dirty=' (+ local changes)'
  echo "date:     $(date -Is)"
  echo "commit:   $(git rev-parse --short HEAD 2>/dev/null || echo '?')$dirty"
  echo "cpu:      $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) CPUs"
  echo "kernel:   $(uname -r)"
  echo "perftest: $(dpkg-query -W -f='${Version}' perftest 2>/dev/null)"
  echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the start"
}

# bench_progress ROUND WHAT RESULT: one progress line; an empty RESULT marks a failure (the
# caller follows it with bench_fail).
bench_progress() {
  BENCH_STEP=$((BENCH_STEP + 1))
  printf '[%2d/%d] round %d/%d  %-34s %s\n' "$BENCH_STEP" "$BENCH_STEPS" "$1" "$BENCH_ROUNDS" \
    "$2" "$3"
}

# bench_fail LOG: count a failed measurement and show the last lines of its log.
bench_fail() {
  BENCH_FAILURES=$((BENCH_FAILURES + 1))
  echo "        FAILED; last lines of $1:"
  tail -n 8 "$1" | sed 's/^/        | /'
}

# bench_perftest LOG TAG CMD...: one perftest pair through verbs_pair (a fresh TCP port,
# "-d vrnic0 -x 0 -F" appended; VRNIC_CLIENT_ENV and friends apply), everything appended to
# LOG; sets ROW to the client's first result row (see perftest_parse). Runs in this shell, not
# in $(...), so that ROW and lib.sh's state survive.
bench_perftest() {
  local log=$1 tag=$2 port rc
  shift 2
  ROW=
  port=$(next_port)
  verbs_pair "$tag" "$port" "$@" -d vrnic0 -x 0 -F >>"$log" 2>&1
  rc=$?
  {
    [[ -n $SERVER_LOG ]] && { echo "=== server output"; cat "$SERVER_LOG"; }
    [[ -n $CLIENT_LOG ]] && { echo "=== client output"; cat "$CLIENT_LOG"; }
  } >>"$log"
  ((rc == 0)) || return 1
  ROW=$(perftest_parse "$CLIENT_LOG" | head -n 1)
  [[ -n $ROW ]]
}

# bench_bw_gbs VALUE UNIT: perftest's bandwidth (UNIT MiB/s, or Gb/s with --report_gbits) in
# GB/s of 1e9 bytes, two decimals.
bench_bw_gbs() {
  if [[ $2 == Gb/s ]]; then
    awk -v v="$1" 'BEGIN { printf "%.2f\n", v / 8 }'
  else
    awk -v v="$1" 'BEGIN { printf "%.2f\n", v * 1048576 / 1e9 }'
  fi
}

# bench_median VALUES...: the median (mean of the middle two for an even count), two decimals;
# "n/a" if none. bench_median_fmt FMT VALUES... prints it with printf format FMT instead.
bench_median() {
  bench_median_fmt '%.2f' "$@"
}

bench_median_fmt() {
  local fmt=$1
  shift
  (($#)) || { echo n/a; return 0; }
  printf '%s\n' "$@" | sort -g | awk -v fmt="$fmt\n" '
    { a[NR] = $1 }
    END {
      if (NR % 2) printf fmt, a[(NR + 1) / 2]
      else printf fmt, (a[NR / 2] + a[NR / 2 + 1]) / 2
    }'
}

# bench_ratio A B: "A/B (P%)" with two decimals; "n/a" if either is n/a or B is not positive.
bench_ratio() {
  if [[ $1 == n/a || $2 == n/a ]]; then
    echo n/a
    return 0
  fi
  awk -v a="$1" -v b="$2" \
    'BEGIN { if (b > 0) printf "%.2f (%.0f%%)\n", a / b, 100 * a / b; else print "n/a" }'
}

# measure ROUND NAME PROG ARGS...: one perftest pair (bench_perftest) on the script's one
# vrnicd, restarting it first if it died; sets ROW; log $out/NAME.ROUND.log. Runs in this
# shell (not in $(...)). A script with other daemons defines its own after sourcing this.
measure() {
  local round=$1 name=$2
  shift 2
  ROW=
  # shellcheck disable=SC2119 # the default vrnicd, no arguments
  ensure_vrnicd >>"$out/$name.$round.log" 2>&1 || return 1
  bench_perftest "$out/$name.$round.log" "$name.$round" "$@"
}

# bench_bw ROUND NAME GBS_ARRAY PROG ARGS...: one bandwidth measurement through the script's
# measure() (which sets ROW; its log is $out/NAME.ROUND.log); appends GB/s to the array named
# GBS_ARRAY and prints progress.
# shellcheck disable=SC2154 # $out is the calling script's output directory
bench_bw() {
  local round=$1 name=$2 v unit g
  local -n gbs=$3
  shift 3
  if measure "$round" "$name" "$@" && [[ $ROW == bw* ]]; then
    read -r _ _ v unit <<<"$ROW"
    g=$(bench_bw_gbs "$v" "$unit")
    gbs+=("$g")
    bench_progress "$round" "$*" "$g GB/s  ($v $unit)"
  else
    bench_progress "$round" "$*" ""
    bench_fail "$out/$name.$round.log"
  fi
}

# bench_lat ROUND NAME TYPICAL_ARRAY P99_ARRAY PROG ARGS...: one latency measurement; appends
# perftest's t_typical and 99th percentile (microseconds).
bench_lat() {
  local round=$1 name=$2 t p99
  local -n typical=$3 tail99=$4
  shift 4
  if measure "$round" "$name" "$@" && [[ $ROW == lat* ]]; then
    read -r _ _ t p99 _ <<<"$ROW"
    typical+=("$t")
    tail99+=("$p99")
    bench_progress "$round" "$*" "t_typical $t us, 99% $p99 us"
  else
    bench_progress "$round" "$*" ""
    bench_fail "$out/$name.$round.log"
  fi
}

# bench_free_udp_port: a UDP port for the benchmark's vrnicd, free on this machine now
# (lib.sh's free_udp_port); in BENCH_UDP_PORT.
bench_free_udp_port() {
  BENCH_UDP_PORT=$(free_udp_port)
}

# bench_count_arg WHAT DEFAULT [VALUE]: the benchmark's count argument (WHAT: ROUNDS, RUNS),
# VALUE if given, else DEFAULT, in BENCH_COUNT; a usage line and status 1 if it is not a
# positive integer.
bench_count_arg() {
  BENCH_COUNT=${3:-$2}
  [[ $BENCH_COUNT =~ ^[1-9][0-9]*$ ]] && return 0
  echo "usage: perf/${0##*/} [$1]" >&2
  return 1
}

# bench_udp_pair_header TITLE: the udp benchmarks' opening (bench_out_dir first): a free UDP
# port (BENCH_UDP_PORT), "== TITLE" and the machine, also in $BENCH_OUT/system.txt.
bench_udp_pair_header() {
  bench_free_udp_port
  echo "== $1"
  {
    bench_system_info
    echo "vrnicd:   --udp 127.0.0.1 and --udp 127.0.0.2, --udp-port $BENCH_UDP_PORT"
  } | tee "$BENCH_OUT/system.txt"
}

# bench_start_udp_pair [VRNICD ARGS...]: the two vrnicd the udp benchmarks run between, each
# with ARGS: the server's on 127.0.0.1, the clients' on 127.0.0.2 (VRNIC_CLIENT_ENV points
# clients there). Their start logs go to $BENCH_OUT/vrnicd-start.log; shown, and status 1,
# when one does not start.
bench_start_udp_pair() {
  if ! start_vrnicd --udp 127.0.0.1 --udp-port "$BENCH_UDP_PORT" "$@" \
    >>"$BENCH_OUT/vrnicd-start.log" 2>&1 ||
    ! start_peer_vrnicd --udp 127.0.0.2 --udp-port "$BENCH_UDP_PORT" "$@" \
      >>"$BENCH_OUT/vrnicd-start.log" 2>&1; then
    cat "$BENCH_OUT/vrnicd-start.log"
    return 1
  fi
  VRNIC_CLIENT_ENV=VRNIC_SOCKET=$PEER_SOCKET
}

# bench_stop_udp_pair [SUFFIX]: both daemons' counters to $BENCH_OUT/stats.{server,client}
# SUFFIX.txt, then both stopped; a failure to read or to stop counts in BENCH_FAILURES.
bench_stop_udp_pair() {
  local ok=1
  vrnicctl_stats "$VRNIC_SOCKET" >"$BENCH_OUT/stats.server${1:-}.txt" 2>&1 || ok=0
  vrnicctl_stats "$PEER_SOCKET" >"$BENCH_OUT/stats.client${1:-}.txt" 2>&1 || ok=0
  ((ok)) || BENCH_FAILURES=$((BENCH_FAILURES + 1))
  stop_vrnicd TERM >>"$BENCH_OUT/vrnicd-stop.log" 2>&1 || BENCH_FAILURES=$((BENCH_FAILURES + 1))
  VRNICD_PID=$PEER_PID VRNICD_LOG=$PEER_LOG
  stop_vrnicd TERM "$PEER_SOCKET" >>"$BENCH_OUT/vrnicd-stop.log" 2>&1 ||
    BENCH_FAILURES=$((BENCH_FAILURES + 1))
  PEER_PID=
}
