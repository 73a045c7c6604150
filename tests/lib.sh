# shellcheck shell=bash
# tests/lib.sh: helpers shared by tests/run.sh, tests/integration/*.sh and perf/*.sh.
# Source it, don't run it. It does not use `set -e`; every helper returns a status instead.
#
# What it provides:
#   setup    vrnic_install_packages PKG... (VRNIC_BUILD_PACKAGES, VRNIC_TEST_PACKAGES),
#            vrnic_build (meson setup if needed, ninja); run.sh, demo.sh and bench use these
#   temp     vrnic_tmp_init: a private temp dir plus traps that kill what we started
#   daemon   start_vrnicd, stop_vrnicd, ensure_vrnicd, vrnic_stat, wait_objects_zero
#   verbs    vrun CMD (LD_LIBRARY_PATH=build/provider), next_port, start_server, run_client,
#            finish_server, verbs_pair, perftest_parse
#   results  vrnic_script_init GROUP, check NAME CMD..., record_result, vrnic_script_finish
#
# Settings (environment):
#   VRNIC_BUILD_DIR          build directory (default: <repo>/build)
#   VRNIC_TEST_TIMEOUT       seconds for one verbs program (default 60)
#   VRNIC_CATCH2_TIMEOUT     seconds for one Catch2 test case (default 120)
#   VRNIC_SUITE_DEADLINE     epoch seconds; checks after it fail as "not run" (run.sh sets it
#                            per group)
#   VRNIC_PORT_BASE          first TCP port handed out by next_port (default 18600)

export LC_ALL=C

VRNIC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VRNIC_BUILD_DIR=${VRNIC_BUILD_DIR:-$VRNIC_ROOT/build}
[[ $VRNIC_BUILD_DIR == /* ]] || VRNIC_BUILD_DIR=$VRNIC_ROOT/$VRNIC_BUILD_DIR
VRNICD=$VRNIC_BUILD_DIR/control/vrnicd
VRNICCTL=$VRNIC_BUILD_DIR/control/vrnicctl
VRNIC_PROVIDER_DIR=$VRNIC_BUILD_DIR/provider
# An LD_PRELOAD shim that runs $VRNIC_CM_GATE before each rdma_resolve_addr (tests/tools).
CM_GATE_SO=$VRNIC_BUILD_DIR/tests/libcm_connect_gate.so
export VRNIC_ROOT VRNIC_BUILD_DIR VRNICD VRNICCTL VRNIC_PROVIDER_DIR

# Debian packages. Build: what meson needs plus the real verbs clients the demo runs.
# shellcheck disable=SC2034 # used by the scripts that source this file
VRNIC_BUILD_PACKAGES=(build-essential g++ meson ninja-build pkg-config libibverbs-dev librdmacm-dev
  liburing-dev libabsl-dev libisal-dev libcli11-dev nlohmann-json3-dev libpcap-dev catch2 perftest
  ibverbs-utils iproute2 libdpdk-dev)
# Extra packages the test suite uses.
# shellcheck disable=SC2034
VRNIC_TEST_PACKAGES=(python3-pyverbs tshark python3-scapy ucx-utils openmpi-bin libopenmpi-dev
  rdmacm-utils libfabric-bin iperf systemd curl prometheus)

# ---------------------------------------------------------------------------------------------
# Small utilities

vrnic_now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$t"; }

# vrnic_elapsed START_US: seconds since START_US with one decimal.
vrnic_elapsed() {
  local d=$(($(vrnic_now_us) - $1))
  printf '%d.%d' $((d / 1000000)) $(((d % 1000000) / 100000))
}

# vrnic_tail FILE [N [PREFIX]]: the last N lines of FILE, indented, for failure reports.
vrnic_tail() {
  local f=$1 n=${2:-20} p=${3:-"    "}
  [[ -s $f ]] || { echo "$p(${f##*/}: empty)"; return 0; }
  # (without the colour escapes compilers write into logs)
  tail -n "$n" -- "$f" | sed -e $'s/\e\[[0-9;]*[mK]//g' -e "s/^/$p/"
}

# vrnic_timeout SECS: SECS capped to what is left of the suite budget (at least 1).
vrnic_timeout() {
  local want=$1 left
  if [[ -n ${VRNIC_SUITE_DEADLINE:-} ]]; then
    left=$((VRNIC_SUITE_DEADLINE - EPOCHSECONDS))
    ((left < want)) && want=$left
  fi
  ((want < 1)) && want=1
  echo "$want"
}

vrnic_budget_left() {
  [[ -z ${VRNIC_SUITE_DEADLINE:-} ]] || ((EPOCHSECONDS < VRNIC_SUITE_DEADLINE))
}

# _vrnic_running PID: true while PID is a live process (a zombie counts as exited).
_vrnic_running() {
  local s
  [[ -r /proc/$1/stat ]] || return 1
  s=$(<"/proc/$1/stat") 2>/dev/null || return 1
  s=${s##*) }
  [[ ${s%% *} != Z ]]
}

# vrnic_wait_exit PID SECS: wait up to SECS for our child PID to exit. On success returns 0
# and sets VRNIC_RC to its exit status; returns 1 if it is still running.
vrnic_wait_exit() {
  local pid=$1 deadline=$(($(vrnic_now_us) + $2 * 1000000))
  while _vrnic_running "$pid"; do
    (($(vrnic_now_us) >= deadline)) && return 1
    sleep 0.05
  done
  wait "$pid" 2>/dev/null
  VRNIC_RC=$?
  _vrnic_untrack "$pid"
  return 0
}

# wait_for SECS WHAT CMD...: runs CMD every 50 ms until it succeeds (status 0) or SECS pass;
# then status 1 and a line saying what was not seen. The one way tests wait for a condition
# (a counter, a log line, a socket) instead of sleeping a guessed time.
wait_for() {
  local secs=$1 what=$2 deadline
  shift 2
  deadline=$(($(vrnic_now_us) + secs * 1000000))
  until "$@" >/dev/null 2>&1; do
    if (($(vrnic_now_us) >= deadline)); then
      echo "timed out after ${secs}s waiting for $what"
      return 1
    fi
    sleep 0.05
  done
}

# vrnicd_fds PID: that vrnicd's fd count once it holds still (two counts 100 ms apart agree,
# 5 s at most): the connection of a vrnicctl call just made (a readiness probe's, say) is
# closed on vrnicd's side only when its loop sees the end, and a count before that is one
# more (the lifecycle group's fd check lost a fresh-machine run that way: 11 before, 10 after).
vrnicd_fds() {
  local a b i
  b=$(find "/proc/$1/fd" -mindepth 1 | wc -l)
  for ((i = 0; i < 50; i++)); do
    a=$b
    sleep 0.1
    b=$(find "/proc/$1/fd" -mindepth 1 | wc -l)
    ((a == b)) && break
  done
  echo "$b"
}

# stat_over KEY N [SOCKET]: the vrnicd counter KEY is above N.
stat_over() {
  local v
  v=$(vrnic_stat "$1" "${3:-}") || return 1
  ((v > $2))
}

# stat_is KEY VALUE [SOCKET]: the vrnicd counter KEY is VALUE.
stat_is() {
  [[ $(vrnic_stat "$1" "${3:-}") == "$2" ]]
}

# counter_settled KEY [SOCKET]: the vrnicd counter KEY did not change over 200 ms (what was
# sent to it has all been received and counted).
counter_settled() {
  local a b
  a=$(vrnic_stat "$1" "${2:-}") || return 1
  sleep 0.2
  b=$(vrnic_stat "$1" "${2:-}") || return 1
  [[ $a == "$b" ]]
}

# file_settled FILE: FILE exists and its size did not change over 300 ms (a capture written).
file_settled() {
  local a b
  a=$(stat -c %s "$1" 2>/dev/null) || return 1
  sleep 0.3
  b=$(stat -c %s "$1" 2>/dev/null) || return 1
  [[ $a == "$b" ]]
}

# qps_moving SOCKET N: at least N of the vrnicd's QPs are connected (RTS, or RTR: perftest's
# WRITE servers stay there) and have moved packets.
qps_moving() {
  local n
  n=$(timeout -k 2 10 "$VRNICCTL" --socket "$1" qps 2>/dev/null |
    grep -cE 'state=(RTR|RTS) .*packets_(sent|received)=[1-9]')
  ((n >= $2))
}

# vrnic_fg CMD...: run CMD and return its status, but from `wait`, so that a TERM sent to this
# shell (run.sh forwards Ctrl-C that way) runs the cleanup trap at once instead of after CMD.
# CMD must be a program, not a shell function (see VRUN).
vrnic_fg() {
  local pid rc
  "$@" &
  pid=$!
  _vrnic_track "$pid"
  wait "$pid"
  rc=$?
  _vrnic_untrack "$pid"
  return "$rc"
}

# ---------------------------------------------------------------------------------------------
# Setup: Debian packages, configure, build

vrnic_missing_packages() {
  local p st
  for p in "$@"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
    [[ $st == *" installed" ]] || printf '%s\n' "$p"
  done
}

# vrnic_install_packages PKG...: installs the missing ones as root (one apt-get update, only
# when something is missing); as another user, names them and fails.
vrnic_install_packages() {
  local missing log rc
  if ! command -v dpkg-query >/dev/null; then
    echo "vrnic: dpkg-query not found; this script expects Debian 12 (bookworm)." >&2
    return 1
  fi
  mapfile -t missing < <(vrnic_missing_packages "$@")
  if ((${#missing[@]} == 0)); then
    echo "packages: all ${#} required Debian packages are installed"
    return 0
  fi
  if ((EUID != 0)); then
    {
      echo "vrnic: missing Debian packages: ${missing[*]}"
      echo "vrnic: install them as root (or run this script as root):"
      echo "    sudo apt-get install -y ${missing[*]}"
    } >&2
    return 1
  fi
  log=$(mktemp "${TMPDIR:-/tmp}/vrnic-apt.XXXXXX")
  echo "packages: installing ${missing[*]} (apt-get update, then install)"
  {
    DEBIAN_FRONTEND=noninteractive apt-get -q -o Dpkg::Use-Pty=0 update &&
      DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0 \
        --no-install-recommends install "${missing[@]}"
  } >"$log" 2>&1
  rc=$?
  if ((rc != 0)); then
    echo "vrnic: apt-get failed (status $rc) installing: ${missing[*]}" >&2
    vrnic_tail "$log" 25 >&2
    rm -f -- "$log"
    return 1
  fi
  rm -f -- "$log"
  mapfile -t missing < <(vrnic_missing_packages "$@")
  if ((${#missing[@]})); then
    echo "vrnic: still missing after apt-get install: ${missing[*]}" >&2
    return 1
  fi
  echo "packages: installed"
}

# vrnic_packages_stamp: what decides meson's optional parts -- the version and status of every
# package the build and the suite use (libopenmpi-dev builds mpi_check, libdpdk-dev the dpdk
# module), one line each.
vrnic_packages_stamp() {
  dpkg-query -W -f='${Package} ${Version} ${Status}\n' "${VRNIC_BUILD_PACKAGES[@]}" \
    "${VRNIC_TEST_PACKAGES[@]}" 2>/dev/null | LC_ALL=C sort
}

# vrnic_build: meson setup (if not configured, or reconfigure a half-configured dir, or one
# configured before the packages changed: perf/demo.sh configures before tests/run.sh installs
# the test packages) and ninja, of every target or only the TARGETs given (build-dir relative
# paths, e.g. control/vrnicd: perf/demo.sh builds only what it runs). Output goes to a log; its
# tail is shown when something fails, ninja's progress every 10 s while it runs.
vrnic_build() {
  local log rc start stamp_file=$VRNIC_BUILD_DIR/vrnic-packages.stamp stamp ninja_pid
  log=$(mktemp "${TMPDIR:-/tmp}/vrnic-build.XXXXXX")
  start=$(vrnic_now_us)
  rc=0
  stamp=$(vrnic_packages_stamp)
  if [[ ! -f $VRNIC_BUILD_DIR/build.ninja || $(cat "$stamp_file" 2>/dev/null) != "$stamp" ]]; then
    if [[ -f $VRNIC_BUILD_DIR/meson-private/coredata.dat ]]; then
      echo "build: meson setup --reconfigure ${VRNIC_BUILD_DIR#"$VRNIC_ROOT"/} (new or changed packages)"
      meson setup --reconfigure "$VRNIC_BUILD_DIR" "$VRNIC_ROOT" >>"$log" 2>&1 ||
        meson setup --wipe "$VRNIC_BUILD_DIR" "$VRNIC_ROOT" >>"$log" 2>&1 || rc=$?
    else
      echo "build: meson setup ${VRNIC_BUILD_DIR#"$VRNIC_ROOT"/}"
      meson setup "$VRNIC_BUILD_DIR" "$VRNIC_ROOT" >>"$log" 2>&1 || rc=$?
    fi
    if ((rc != 0)); then
      echo "vrnic: meson setup failed (status $rc); last lines of its output:" >&2
      vrnic_tail "$log" 40 >&2
      rm -f -- "$log"
      return 1
    fi
    printf '%s\n' "$stamp" >"$stamp_file"
  fi
  echo "build: ninja -C ${VRNIC_BUILD_DIR#"$VRNIC_ROOT"/}${*:+ $*}"
  # ninja re-runs meson by itself when a meson.build changed.
  ninja -C "$VRNIC_BUILD_DIR" "$@" >>"$log" 2>&1 &
  ninja_pid=$!
  while ! vrnic_wait_exit "$ninja_pid" 10; do
    # ninja's last "[done/total]"
    echo "build: $(grep -o '^\[[0-9]*/[0-9]*\]' "$log" | tail -n 1) $(vrnic_elapsed "$start")s"
  done
  rc=$VRNIC_RC
  if ((rc != 0)); then
    echo "vrnic: build failed (ninja status $rc); last lines of its output:" >&2
    vrnic_tail "$log" 40 >&2
    rm -f -- "$log"
    return 1
  fi
  rm -f -- "$log"
  echo "build: ok ($(vrnic_elapsed "$start")s)"
}

# ---------------------------------------------------------------------------------------------
# Temp dir, process tracking, cleanup

_VRNIC_PIDS=()
_vrnic_track() { _VRNIC_PIDS+=("$1"); }
_vrnic_untrack() {
  local i
  for i in "${!_VRNIC_PIDS[@]}"; do
    [[ ${_VRNIC_PIDS[i]} == "$1" ]] && unset '_VRNIC_PIDS[i]'
  done
}

# vrnic_tmp_init: creates $VRNIC_TMP and installs traps. Cleanup is silent: it kills only the
# processes this shell started (by pid), then removes $VRNIC_TMP.
vrnic_tmp_init() {
  VRNIC_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vrnic-test.XXXXXX") || return 1
  export VRNIC_TMP
  trap 'vrnic_cleanup' EXIT
  trap 'vrnic_cleanup; trap - INT; kill -INT $$' INT
  trap 'vrnic_cleanup; exit 143' TERM
  trap 'vrnic_cleanup; exit 129' HUP
}

# _vrnic_kill_hard PID: SIGKILL. A `timeout` we started leads its own process group (pgid ==
# pid); kill that group so that its child does not outlive it.
_vrnic_kill_hard() {
  local s pgrp
  s=$(<"/proc/$1/stat") 2>/dev/null || return 0
  s=${s##*) }
  read -r _ _ pgrp _ <<<"$s"
  if [[ $pgrp == "$1" ]]; then
    kill -KILL -- "-$1" 2>/dev/null
  else
    kill -KILL "$1" 2>/dev/null
  fi
}

# vrnic_on_cleanup CMD: a shell command run at cleanup, after every process is stopped
# (e.g. removing the network namespaces a test made).
_VRNIC_CLEANUP_CMDS=()
vrnic_on_cleanup() { _VRNIC_CLEANUP_CMDS+=("$1"); }

vrnic_cleanup() {
  local pid deadline cmd
  if ((${#_VRNIC_PIDS[@]})); then
    for pid in "${_VRNIC_PIDS[@]}"; do
      _vrnic_running "$pid" && kill -TERM "$pid" 2>/dev/null
    done
    deadline=$(($(vrnic_now_us) + 7000000))
    for pid in "${_VRNIC_PIDS[@]}"; do
      while _vrnic_running "$pid" && (($(vrnic_now_us) < deadline)); do sleep 0.05; done
      _vrnic_running "$pid" && _vrnic_kill_hard "$pid"
      wait "$pid" 2>/dev/null
    done
    _VRNIC_PIDS=()
  fi
  if ((${#_VRNIC_CLEANUP_CMDS[@]})); then
    for cmd in "${_VRNIC_CLEANUP_CMDS[@]}"; do eval "$cmd"; done
    _VRNIC_CLEANUP_CMDS=()
  fi
  if [[ -n ${VRNIC_TMP:-} && -d $VRNIC_TMP ]]; then
    rm -rf -- "$VRNIC_TMP"
  fi
  return 0
}

# ---------------------------------------------------------------------------------------------
# vrnicd

VRNICD_PID=
VRNICD_LOG=
_VRNIC_DAEMON_SEQ=0

# vrnicctl_stats [SOCKET]: `vrnicctl stats` against SOCKET (default $VRNIC_SOCKET).
vrnicctl_stats() {
  timeout -k 2 10 "$VRNICCTL" --socket "${1:-$VRNIC_SOCKET}" stats
}

# vrnic_stat KEY [SOCKET]: one value from `vrnicctl stats` (key=value lines); empty if absent.
vrnic_stat() {
  local out
  out=$(vrnicctl_stats "${2:-}" 2>/dev/null) || return 1
  awk -F= -v k="$1" '$1 == k { print $2; found = 1; exit } END { exit !found }' <<<"$out"
}

# counters_unchanged "NAME=SOCKET ..." "KEY ..." COMMAND...: runs COMMAND; then 0 only when
# none of the counters KEY of any of the vrnicd (vrnicctl stats at SOCKET) moved. COUNTERS_NOTE
# says each one's change ("NAME: KEY DELTA ...; NAME: ..."). 1 also when COMMAND fails.
counters_unchanged() {
  local -a daemons keys before=()
  local d key k=0 ok=0 delta
  read -ra daemons <<<"$1"
  read -ra keys <<<"$2"
  shift 2
  for d in "${daemons[@]}"; do
    for key in "${keys[@]}"; do
      before+=("$(vrnic_stat "$key" "${d#*=}")") || return 1
    done
  done
  "$@" || return 1
  COUNTERS_NOTE=
  for d in "${daemons[@]}"; do
    COUNTERS_NOTE+="${d%%=*}:"
    for key in "${keys[@]}"; do
      delta=$(($(vrnic_stat "$key" "${d#*=}") - before[k]))
      k=$((k + 1))
      COUNTERS_NOTE+=" $key $delta"
      ((delta == 0)) || ok=1
    done
    COUNTERS_NOTE+="; "
  done
  COUNTERS_NOTE=${COUNTERS_NOTE%; }
  return "$ok"
}

# _vrnicd_spawn SOCKET LOG CMD...: start CMD (a vrnicd command line, may begin with `env ...`)
# in the background and wait until SOCKET exists and `vrnicctl stats` answers on it.
# SIGINT/SIGQUIT are reset to default: background jobs of a non-interactive shell inherit
# them ignored, a daemon started from a terminal does not.
_vrnicd_spawn() {
  local sock=$1 log=$2 deadline
  shift 2
  if [[ ! -x $VRNICD ]]; then
    echo "vrnicd is not built: $VRNICD missing"
    return 1
  fi
  if [[ ! -x $VRNICCTL ]]; then
    echo "vrnicctl is not built: $VRNICCTL missing"
    return 1
  fi
  echo "+ $* >${log##*/} &"
  env --default-signal=INT,QUIT "$@" >"$log" 2>&1 </dev/null &
  VRNICD_PID=$!
  VRNICD_LOG=$log
  _vrnic_track "$VRNICD_PID"
  deadline=$(($(vrnic_now_us) + ${VRNIC_DAEMON_START_TIMEOUT:-10} * 1000000))
  while :; do
    if ! _vrnic_running "$VRNICD_PID"; then
      vrnic_wait_exit "$VRNICD_PID" 1
      echo "vrnicd exited during startup (status $VRNIC_RC); its log:"
      vrnic_tail "$log"
      VRNICD_PID=
      return 1
    fi
    if [[ -S $sock ]] && vrnicctl_stats "$sock" >/dev/null 2>&1; then
      echo "vrnicd ready (pid $VRNICD_PID, socket $sock)"
      return 0
    fi
    if (($(vrnic_now_us) >= deadline)); then
      echo "vrnicd not ready after ${VRNIC_DAEMON_START_TIMEOUT:-10}s (socket $sock);" \
        "vrnicctl says: $(vrnicctl_stats "$sock" 2>&1 | tail -n 1)"
      vrnic_tail "$log"
      kill -KILL "$VRNICD_PID" 2>/dev/null
      vrnic_wait_exit "$VRNICD_PID" 5
      VRNICD_PID=
      return 1
    fi
    sleep 0.05
  done
}

# start_vrnicd [vrnicd args...]: a vrnicd on a private socket in a fresh dir under $VRNIC_TMP.
# Exports VRNIC_SOCKET; sets VRNICD_PID and VRNICD_LOG.
# shellcheck disable=SC2120 # callers may pass vrnicd arguments
start_vrnicd() {
  local dir
  _VRNIC_DAEMON_SEQ=$((_VRNIC_DAEMON_SEQ + 1))
  dir=$VRNIC_TMP/vrnicd.$_VRNIC_DAEMON_SEQ
  mkdir -p "$dir" || return 1
  VRNIC_SOCKET=$dir/vrnicd.sock
  export VRNIC_SOCKET
  _vrnicd_spawn "$VRNIC_SOCKET" "$dir/vrnicd.log" "$VRNICD" --socket "$VRNIC_SOCKET" "$@"
}

# stop_vrnicd [SIGNAL]: sends SIGNAL (default TERM) and checks that vrnicd exits 0 within 10 s
# and has removed its socket file.
stop_vrnicd() {
  local sig=${1:-TERM} sock=${2:-$VRNIC_SOCKET}
  if [[ -z $VRNICD_PID ]]; then
    echo "stop_vrnicd: no vrnicd running"
    return 1
  fi
  echo "+ kill -$sig $VRNICD_PID (vrnicd)"
  kill -s "$sig" "$VRNICD_PID" 2>/dev/null
  if ! vrnic_wait_exit "$VRNICD_PID" "${VRNIC_DAEMON_STOP_TIMEOUT:-10}"; then
    echo "vrnicd still running ${VRNIC_DAEMON_STOP_TIMEOUT:-10}s after SIG$sig; killing it. Its log:"
    vrnic_tail "$VRNICD_LOG"
    kill -KILL "$VRNICD_PID" 2>/dev/null
    vrnic_wait_exit "$VRNICD_PID" 5
    VRNICD_PID=
    return 1
  fi
  VRNICD_PID=
  if ((VRNIC_RC != 0)); then
    echo "vrnicd exited with status $VRNIC_RC after SIG$sig (want 0). Its log:"
    vrnic_tail "$VRNICD_LOG"
    return 1
  fi
  if [[ -e $sock ]]; then
    echo "vrnicd exited 0 after SIG$sig but left its socket file behind: $sock"
    return 1
  fi
  echo "vrnicd exited 0 after SIG$sig; socket removed"
}

# ensure_vrnicd [vrnicd args...]: start a vrnicd unless ours is running (used at the start of each check, so
# a daemon that died in one check is reported there and does not fail every later one silently).
_VRNICD_START_FAILED=0
ensure_vrnicd() {
  if [[ -n $VRNICD_PID ]] && _vrnic_running "$VRNICD_PID"; then
    return 0
  fi
  # One failed start per group is enough: do not spend the start timeout on every check.
  if ((_VRNICD_START_FAILED)); then
    echo "vrnicd failed to start earlier in this group (see the first failure); not retrying"
    return 1
  fi
  if [[ -n $VRNICD_PID ]]; then
    vrnic_wait_exit "$VRNICD_PID" 1
    echo "note: vrnicd (pid $VRNICD_PID) had died earlier (status $VRNIC_RC); restarting it." \
      "Last lines of its log:"
    vrnic_tail "$VRNICD_LOG" 10
    VRNICD_PID=
  fi
  start_vrnicd "$@" && return 0
  _VRNICD_START_FAILED=1
  return 1
}

# vrnicd_check_alive: after a test, complain (and fail) if vrnicd died during it.
vrnicd_check_alive() {
  [[ -n $VRNICD_PID ]] && _vrnic_running "$VRNICD_PID" && return 0
  echo "vrnicd died during this test. Last lines of its log:"
  vrnic_tail "$VRNICD_LOG"
  return 1
}

VRNIC_OBJECT_KEYS=(sessions pds mrs cqs qps cm_ids cm_connections)

# wait_objects_zero [SECS]: wait until vrnicd reports no sessions, PDs, MRs, CQs or QPs.
wait_objects_zero() {
  local secs=${1:-10} deadline out k v bad
  deadline=$(($(vrnic_now_us) + secs * 1000000))
  while :; do
    bad=
    if out=$(vrnicctl_stats 2>&1); then
      for k in "${VRNIC_OBJECT_KEYS[@]}"; do
        v=$(awk -F= -v k="$k" '$1 == k { print $2; exit }' <<<"$out")
        if [[ -z $v ]]; then
          echo "vrnicctl stats has no '$k=' line. Its output:"
          # shellcheck disable=SC2001
          sed 's/^/    /' <<<"$out"
          return 1
        fi
        [[ $v == 0 ]] || bad+=" $k=$v"
      done
      [[ -z $bad ]] && { echo "vrnicd objects all zero (${VRNIC_OBJECT_KEYS[*]})"; return 0; }
    else
      bad=" (vrnicctl stats failed: $(tail -n 1 <<<"$out"))"
    fi
    if (($(vrnic_now_us) >= deadline)); then
      echo "vrnicd objects not back to zero after ${secs}s:$bad"
      return 1
    fi
    sleep 0.1
  done
}

# vrnicd_idle_and_stop: the closing check of a group: no objects left, clean SIGTERM exit.
vrnicd_idle_and_stop() {
  vrnicd_check_alive || return 1
  local rc=0
  wait_objects_zero 10 || rc=1
  stop_vrnicd TERM || rc=1
  return "$rc"
}

# ---------------------------------------------------------------------------------------------
# Running verbs programs through vrnic

# vrun CMD...: CMD with build/provider first on LD_LIBRARY_PATH (so it loads vrnic's
# libibverbs.so.1). For background jobs use "${VRUN[@]}" CMD... & instead: a function run
# with & is a forked shell, so $! would not be the program (nor the `timeout` around it).
VRUN=(env "LD_LIBRARY_PATH=$VRNIC_PROVIDER_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
vrun() {
  "${VRUN[@]}" "$@"
}

# require_provider: fail early, with a clear message, if the provider library is not built.
require_provider() {
  [[ -e $VRNIC_PROVIDER_DIR/libibverbs.so.1 ]] && return 0
  echo "vrnic provider not built: $VRNIC_PROVIDER_DIR/libibverbs.so.1 missing"
  return 1
}

# free_udp_port [COUNT]: prints a UDP port in 20000-39999 such that it and the COUNT-1 after
# it (default 1) are bound by nothing on this host (for udp-port vrnicds on 127.0.0.x, the one
# way every test finds its UDP ports); fails after 50 tries.
free_udp_port() {
  local p i k n=${1:-1} busy
  for i in $(seq 1 50); do
    p=$((20000 + (RANDOM * 32768 + RANDOM + $$) % (20000 - n)))
    busy=0
    for ((k = 0; k < n; k++)); do
      [[ -n $(ss -Huan "( sport = :$((p + k)) )" 2>/dev/null) ]] && { busy=1; break; }
    done
    ((busy)) || { echo "$p"; return 0; }
  done
  echo "no free UDP port found" >&2
  return 1
}

# ucx_perftest_pair OUT TLS ARGS...: one ucx_perftest server and client on 127.0.0.1 over
# UCX_TLS=TLS on vrnic0:1, the server on SERVER_SOCKET's vrnicd and the client on
# CLIENT_SOCKET's (default: both $VRNIC_SOCKET's); logs in OUT.server and OUT.client. Passes
# if the client exits 0 with a "Final:" line, which it leaves in UCX_FINAL.
ucx_perftest_pair() {
  local out=$1 tls=$2 port srv rc
  local ssock=${SERVER_SOCKET:-$VRNIC_SOCKET} csock=${CLIENT_SOCKET:-$VRNIC_SOCKET}
  shift 2
  port=$(next_port)
  UCX_FINAL=
  echo "+ UCX_TLS=$tls UCX_NET_DEVICES=vrnic0:1 ucx_perftest $* -p $port [127.0.0.1]"
  "${VRUN[@]}" VRNIC_SOCKET="$ssock" UCX_TLS="$tls" UCX_NET_DEVICES=vrnic0:1 timeout -k 5 60 \
    ucx_perftest "$@" -p "$port" >"$out.server" 2>&1 </dev/null &
  srv=$!
  _vrnic_track "$srv"
  wait_listen "$port" "$srv" 10 || { vrnic_tail "$out.server"; return 1; }
  vrnic_fg "${VRUN[@]}" VRNIC_SOCKET="$csock" UCX_TLS="$tls" UCX_NET_DEVICES=vrnic0:1 \
    timeout -k 5 45 ucx_perftest 127.0.0.1 "$@" -p "$port" >"$out.client" 2>&1 </dev/null
  rc=$?
  vrnic_wait_exit "$srv" 20 || kill -TERM "$srv"
  UCX_FINAL=$(grep -m1 -E "^Final:" "$out.client")
  [[ -n $UCX_FINAL ]] && echo "    $UCX_FINAL"
  if ((rc != 0)) || [[ -z $UCX_FINAL ]]; then
    echo "FAIL: client $(_vrnic_status_word "$rc"); its last lines:"
    vrnic_tail "$out.client"
    vrnic_tail "$out.server" 5
    return 1
  fi
}

_vrnic_port_busy() {
  [[ -n $(ss -Htan "( sport = :$1 )" 2>/dev/null) ]]
}

# next_port: a TCP port for one server/client pair; distinct across the whole run (the
# counter lives in a file so that $(next_port) subshells and child scripts share it) and not
# in use on this machine right now.
next_port() {
  local f=${VRNIC_PORT_STATE:-$VRNIC_TMP/ports} p
  p=$(cat "$f" 2>/dev/null) || p=
  [[ $p =~ ^[0-9]+$ ]] || p=${VRNIC_PORT_BASE:-18600}
  while _vrnic_port_busy "$p"; do p=$((p + 1)); done
  echo $((p + 1)) >"$f"
  echo "$p"
}

# wait_listen PORT PID SECS: wait until something listens on TCP PORT, while PID is alive.
wait_listen() {
  local port=$1 pid=$2 deadline=$(($(vrnic_now_us) + $3 * 1000000)) in_ns=()
  [[ -n ${VRNIC_SERVER_NS:-} ]] && in_ns=(ip netns exec "$VRNIC_SERVER_NS")
  while :; do
    [[ -n $("${in_ns[@]}" ss -Hltn "( sport = :$port )" 2>/dev/null) ]] && return 0
    _vrnic_running "$pid" || return 1
    (($(vrnic_now_us) >= deadline)) && return 2
    sleep 0.05
  done
}

SERVER_PID=
SERVER_LOG=
CLIENT_LOG=
CLIENT_RC=

# start_server TAG PORT CMD...: CMD in the background under `timeout`, through vrun; waits
# until it listens on PORT. Sets SERVER_PID, SERVER_LOG.
start_server() {
  local tag=$1 port=$2 tmo rc
  shift 2
  SERVER_LOG=$VRNIC_TMP/$tag.server.log
  tmo=$(vrnic_timeout "${VRNIC_TEST_TIMEOUT:-60}")
  [[ -n ${VRNIC_SERVER_NS:-} ]] && set -- ip netns exec "$VRNIC_SERVER_NS" "$@"
  echo "+ $* &   # server, timeout ${tmo}s"
  "${VRUN[@]}" timeout -k 5 "$tmo" "$@" >"$SERVER_LOG" 2>&1 </dev/null &
  SERVER_PID=$!
  _vrnic_track "$SERVER_PID"
  wait_listen "$port" "$SERVER_PID" "${VRNIC_LISTEN_TIMEOUT:-15}"
  rc=$?
  ((rc == 0)) && return 0
  if ((rc == 1)); then
    vrnic_wait_exit "$SERVER_PID" 2
    echo "server exited (status $VRNIC_RC) before listening on TCP port $port. Its output:"
  else
    echo "server not listening on TCP port $port after ${VRNIC_LISTEN_TIMEOUT:-15}s. Its output:"
    kill -TERM "$SERVER_PID" 2>/dev/null
    vrnic_wait_exit "$SERVER_PID" 10
  fi
  vrnic_tail "$SERVER_LOG"
  SERVER_PID=
  return 1
}

# run_client TAG CMD...: CMD in the foreground under `timeout`, through vrun. Sets CLIENT_LOG,
# CLIENT_RC (124 = timed out).
run_client() {
  local tag=$1 tmo
  shift
  CLIENT_LOG=$VRNIC_TMP/$tag.client.log
  tmo=$(vrnic_timeout "${VRNIC_TEST_TIMEOUT:-60}")
  echo "+ $*   # client, timeout ${tmo}s"
  vrnic_fg "${VRUN[@]}" timeout -k 5 "$tmo" "$@" >"$CLIENT_LOG" 2>&1 </dev/null
  CLIENT_RC=$?
}

# finish_server [SECS]: wait for the server to exit (default 20 s after the client finished);
# kill it if it does not. Sets VRNIC_RC to its status (124 if we had to stop it).
# shellcheck disable=SC2120 # the default wait suits most callers
finish_server() {
  local secs=${1:-20}
  [[ -n $SERVER_PID ]] || { VRNIC_RC=1; return 1; }
  if ! vrnic_wait_exit "$SERVER_PID" "$secs"; then
    echo "server still running ${secs}s after the client finished; stopping it"
    kill -TERM "$SERVER_PID" 2>/dev/null
    vrnic_wait_exit "$SERVER_PID" 10 || { _vrnic_kill_hard "$SERVER_PID"; vrnic_wait_exit "$SERVER_PID" 5; }
    VRNIC_RC=124
  fi
  SERVER_PID=
  return 0
}

_vrnic_status_word() {
  case $1 in
    0) echo "exit 0" ;;
    124) echo "TIMED OUT" ;;
    137) echo "killed (SIGKILL, after timeout)" ;;
    13[0-9] | 1[4-9][0-9]) echo "status $1 (signal $(($1 - 128)))" ;;
    *) echo "status $1" ;;
  esac
}

# start_peer_vrnicd [vrnicd args...]: a second vrnicd (another "host") beside the group's
# own; sets PEER_SOCKET, PEER_PID, PEER_LOG and leaves VRNICD_PID/VRNIC_SOCKET alone.
start_peer_vrnicd() {
  local dir main_pid=$VRNICD_PID main_log=$VRNICD_LOG rc
  _VRNIC_DAEMON_SEQ=$((_VRNIC_DAEMON_SEQ + 1))
  dir=$VRNIC_TMP/vrnicd.$_VRNIC_DAEMON_SEQ
  mkdir -p "$dir" || return 1
  PEER_SOCKET=$dir/vrnicd.sock
  _vrnicd_spawn "$PEER_SOCKET" "$dir/vrnicd.log" "$VRNICD" --socket "$PEER_SOCKET" "$@"
  rc=$?
  PEER_PID=$VRNICD_PID
  PEER_LOG=$VRNICD_LOG
  VRNICD_PID=$main_pid
  VRNICD_LOG=$main_log
  return "$rc"
}

# start_udp_pair: the group's vrnicd on 127.0.0.1 and a peer vrnicd on 127.0.0.2, both with a
# udp port on one free UDP port (two "hosts" talking RoCEv2 over kernel UDP). Sets PAIR_A and
# PAIR_B (their sockets; VRNIC_SOCKET is PAIR_A) and PAIR_PORT.
start_udp_pair() {
  PAIR_PORT=$(free_udp_port) || return 1
  start_vrnicd --udp 127.0.0.1 --udp-port "$PAIR_PORT" || return 1
  PAIR_A=$VRNIC_SOCKET
  start_peer_vrnicd --udp 127.0.0.2 --udp-port "$PAIR_PORT" || return 1
  PAIR_B=$PEER_SOCKET
  echo "vrnicd A on 127.0.0.1, B on 127.0.0.2, UDP port $PAIR_PORT"
}

# pair_idle_and_stop: both of start_udp_pair's vrnicd hold no objects and exit 0 on SIGTERM.
pair_idle_and_stop() {
  VRNIC_SOCKET=$PAIR_B wait_objects_zero 10 || return 1
  kill -TERM "$PEER_PID"
  vrnic_wait_exit "$PEER_PID" 10 && ((VRNIC_RC == 0)) ||
    { echo "vrnicd B did not exit 0 on SIGTERM"; return 1; }
  vrnicd_idle_and_stop
}

# perftest_result_ok / pingpong_result_ok: after verbs_pair, the client's log shows a result
# (perftest: a non-zero figure; pingpong: its summary, and neither side found invalid data);
# CHECK_NOTE gets the figure.
perftest_result_ok() {
  local rows
  rows=$(perftest_parse "$CLIENT_LOG")
  # perftest times a run by its CPU's clock, which it samples first: on a loaded VM the
  # samples can fail its own fit (r^2 < 0.9), and then it reports 0.00 for a run that
  # completed (both sides exited 0, which verbs_pair checked). No figure, no failure.
  if [[ -n $rows ]] && grep -q 'Correlation coefficient r^2' "$CLIENT_LOG"; then
    CHECK_NOTE="completed; perftest could not time it (its clock sampling failed)"
    return 0
  fi
  [[ -n $rows ]] && awk '$3 + 0 <= 0 { bad = 1 } END { exit bad }' <<<"$rows" || {
    echo "FAIL: no non-zero result row from the client"
    return 1
  }
  CHECK_NOTE=$(awk 'NR == 1 { if ($1 == "bw") print $3, $4; else print $3, "us" }' <<<"$rows")
}
pingpong_result_ok() {
  grep -q 'bytes in' "$CLIENT_LOG" && ! grep -qi 'invalid data' "$CLIENT_LOG" "$SERVER_LOG" || {
    echo "FAIL: no 'bytes in' line, or the receiver found invalid data"
    return 1
  }
  CHECK_NOTE=$(grep -m1 'usec/iter' "$CLIENT_LOG" | sed -E 's/.*= *//')
}
# ibv_xsrq_pingpong (XRC) checks its completions, not its data; each side says "success" when
# every message of every client came.
xsrq_result_ok() {
  grep -q '^success' "$CLIENT_LOG" && grep -q '^success' "$SERVER_LOG" || {
    echo "FAIL: no 'success' line from both sides"
    return 1
  }
}

# verbs_pair TAG PORT CMD...: server `CMD -p PORT`, then client `CMD -p PORT 127.0.0.1`.
# The client runs with VRNIC_CLIENT_ENV (e.g. VRNIC_SOCKET=... to use another vrnicd) and, with
# VRNIC_CLIENT_DEVICE set, `-d VRNIC_CLIENT_DEVICE` after CMD's own options; with
# VRNIC_SERVER_NS / VRNIC_CLIENT_NS set, each side runs in that network namespace and the
# client connects to VRNIC_SERVER_ADDR.
# Both must exit 0. Leaves SERVER_LOG, CLIENT_LOG for further checks. Prints the tails of both
# logs (and of vrnicd's if it died) when anything failed.
verbs_pair() {
  local tag=$1 port=$2 srv_rc ok=0
  shift 2
  SERVER_LOG=
  CLIENT_LOG=
  CLIENT_RC=
  require_provider || return 1
  if ! start_server "$tag" "$port" "$@" -p "$port"; then
    [[ -n $VRNICD_PID ]] && vrnicd_check_alive
    return 1
  fi
  run_client "$tag" ${VRNIC_CLIENT_NS:+ip netns exec "$VRNIC_CLIENT_NS"} \
    env ${VRNIC_CLIENT_ENV:+"$VRNIC_CLIENT_ENV"} "$@" \
    ${VRNIC_CLIENT_DEVICE:+-d "$VRNIC_CLIENT_DEVICE"} -p "$port" "${VRNIC_SERVER_ADDR:-127.0.0.1}"
  finish_server
  srv_rc=$VRNIC_RC
  echo "server: $(_vrnic_status_word "$srv_rc"); client: $(_vrnic_status_word "$CLIENT_RC")"
  ((srv_rc == 0 && CLIENT_RC == 0)) || ok=1
  if [[ -n $VRNICD_PID ]]; then vrnicd_check_alive || ok=1; fi
  if ((ok != 0)); then
    # Without perftest's per-QP address lines, so that its error lines are what shows.
    local side log
    for side in server client; do
      [[ $side == server ]] && log=$SERVER_LOG || log=$CLIENT_LOG
      echo "--- $side output (tail, address lines left out):"
      grep -avE '^[[:space:]]*(GID|remote address|local address):' "$log" >"$log.short"
      vrnic_tail "$log.short" 10
    done
    echo "server: $(_vrnic_status_word "$srv_rc"); client: $(_vrnic_status_word "$CLIENT_RC")"
  fi
  return "$ok"
}

# perftest_parse FILE: the rows of perftest's result tables, one per line:
#   bw     BYTES AVG UNIT          (UNIT MiB/s or Gb/s, as perftest's header says)
#   lat    BYTES T_TYPICAL P99 AVG (microseconds; t_typical is perftest's median)
#   latdur BYTES AVG               (latency in duration mode)
perftest_parse() {
  awk '
    /#bytes/ {
      kind = ""
      if ($0 ~ /BW average/) { kind = "bw"; unit = ($0 ~ /Gb\/sec/) ? "Gb/s" : "MiB/s" }
      else if ($0 ~ /t_typical/) kind = "lat"
      else if ($0 ~ /t_avg/) kind = "latdur"
      next
    }
    /^[ \t]*-----/ { kind = ""; next }
    kind != "" && $1 ~ /^[0-9]+$/ {
      if (kind == "bw" && NF >= 5) print "bw", $1, $4, unit
      else if (kind == "lat" && NF >= 8) print "lat", $1, $5, $8, $6
      else if (kind == "latdur" && NF >= 3) print "latdur", $1, $3
    }' "$1"
}

# ---------------------------------------------------------------------------------------------
# Results: each check is one counted test

VRNIC_GROUP=
# shellcheck disable=SC2034 # set by check functions, read by check()
CHECK_NOTE=
_VRNIC_SEQ=0
_VRNIC_SCRIPT_PASS=0
_VRNIC_SCRIPT_FAIL=0
_VRNIC_OWN_RESULTS=0

# record_result PASS|FAIL NAME [SECONDS]: prints the result line and appends it to
# $VRNIC_RESULTS (one line per test; run.sh counts them).
record_result() {
  local st=$1 name=$2 secs=${3:-}
  printf '%s\t%s\n' "$st" "$name" >>"$VRNIC_RESULTS"
  if [[ $st == PASS ]]; then
    _VRNIC_SCRIPT_PASS=$((_VRNIC_SCRIPT_PASS + 1))
  else
    _VRNIC_SCRIPT_FAIL=$((_VRNIC_SCRIPT_FAIL + 1))
  fi
  printf '%s  %s%s\n' "$st" "$name" "${secs:+  (${secs}s)}"
}

# check NAME CMD...: runs CMD (usually a shell function) in this shell with its output in a
# log; exit status 0 = PASS. On FAIL prints the log's tail. A function may set CHECK_NOTE to
# a short text shown on the result line (e.g. a measured figure).
check() {
  local name=$1 log start rc secs
  shift
  [[ -n $VRNIC_GROUP ]] && name="$VRNIC_GROUP: $name"
  # VRNIC_ONLY=REGEX: only the checks whose names match it run (the others are not counted):
  # for working on a few checks of a long group.
  [[ -n ${VRNIC_ONLY:-} && ! $name =~ $VRNIC_ONLY ]] && return 0
  _VRNIC_SEQ=$((_VRNIC_SEQ + 1))
  if ! vrnic_budget_left; then
    record_result FAIL "$name  [not run: time budget exhausted]"
    return 1
  fi
  log=$VRNIC_TMP/check.$_VRNIC_SEQ.log
  CHECK_NOTE=
  start=$(vrnic_now_us)
  "$@" >"$log" 2>&1 </dev/null
  rc=$?
  secs=$(vrnic_elapsed "$start")
  if ((rc == 0)); then
    record_result PASS "$name${CHECK_NOTE:+  [$CHECK_NOTE]}" "$secs"
    return 0
  fi
  record_result FAIL "$name${CHECK_NOTE:+  [$CHECK_NOTE]}" "$secs"
  vrnic_tail "$log" "${VRNIC_FAIL_TAIL:-25}" "      | "
  return 1
}

# vrnic_script_init GROUP: for tests/integration/*.sh. Standalone (no $VRNIC_RESULTS from
# run.sh) the script keeps its own results and prints its own summary.
vrnic_script_init() {
  VRNIC_GROUP=$1
  cd "$VRNIC_ROOT" || exit 1
  vrnic_tmp_init || exit 1
  if [[ -z ${VRNIC_RESULTS:-} ]]; then
    VRNIC_RESULTS=$VRNIC_TMP/results
    _VRNIC_OWN_RESULTS=1
    : >"$VRNIC_RESULTS"
  fi
  export VRNIC_RESULTS
}

# vrnic_script_finish: cleanup; exit 1 if any of this script's checks failed.
vrnic_script_finish() {
  local p=$_VRNIC_SCRIPT_PASS f=$_VRNIC_SCRIPT_FAIL
  vrnic_cleanup
  if ((_VRNIC_OWN_RESULTS)); then
    echo "$p passed, $f failed"
  fi
  ((f == 0 && p > 0)) && exit 0
  exit 1
}

# vrnic_summary FILE: the "N passed, N failed" line from a results file.
vrnic_summary() {
  local p f
  p=$(grep -c '^PASS' "$1" 2>/dev/null)
  f=$(grep -c '^FAIL' "$1" 2>/dev/null)
  echo "${p:-0} passed, ${f:-0} failed"
}

# ---------------------------------------------------------------------------------------------
# Catch2 (v2) binaries: every test case runs as its own process, so each one is a counted test
# with its own timeout, and a crash or hang in one does not hide the others.

# _catch2_spec NAME: NAME escaped as an exact Catch2 test spec.
_catch2_spec() {
  local s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [][\\,*\"~#-]) out+="\\$c" ;;
      *) out+=$c ;;
    esac
  done
  printf '%s' "$out"
}

_catch2_case() {
  local bin=$1 name=$2 tmo out rc
  ensure_vrnicd || return 1
  tmo=$(vrnic_timeout "${VRNIC_CATCH2_TIMEOUT:-120}")
  out=$VRNIC_TMP/catch2.out
  echo "+ VRNIC_SOCKET=$VRNIC_SOCKET VRNICCTL=$VRNICCTL ${bin##*/} -r compact -w NoTests '$(_catch2_spec "$name")'"
  vrnic_fg "${VRUN[@]}" VRNIC_SOCKET="$VRNIC_SOCKET" VRNICCTL="$VRNICCTL" timeout -k 5 "$tmo" \
    "$bin" -r compact -w NoTests "$(_catch2_spec "$name")" >"$out" 2>&1 </dev/null
  rc=$?
  cat "$out"
  if ((rc == 124)); then
    echo "TIMED OUT after ${tmo}s"
  elif ((rc == 0)) && ! grep -qE '(^|[^0-9])1 test case' "$out"; then
    echo "exit 0 but Catch2 did not report exactly one test case run"
    rc=1
  elif ((rc != 0)); then
    _vrnic_status_word "$rc"
  fi
  vrnicd_check_alive || rc=1
  return "$rc"
}

# run_catch2_binary NAME: each test case of build/tests/NAME as one check. A missing binary,
# or one that lists no test case, is one failed test.
run_catch2_binary() {
  local name=$1 spec=${2:-} bin=$VRNIC_BUILD_DIR/tests/$1 list n=0 t
  if [[ ! -x $bin ]]; then
    record_result FAIL "$VRNIC_GROUP: $name  [binary missing: ${bin#"$VRNIC_ROOT"/}]"
    return 1
  fi
  list=$VRNIC_TMP/${name//\//_}.tests
  # --list-test-names-only exits with the number of tests; the status says nothing.
  vrun timeout -k 5 30 "$bin" --list-test-names-only ${spec:+"$spec"} >"$list" 2>"$list.err" </dev/null
  while IFS= read -r t; do
    [[ -z $t ]] && continue
    # Catch2 quotes names that start with '#'.
    [[ $t == \"*\" ]] && t=${t:1:${#t}-2}
    n=$((n + 1))
    check "$name: $t" _catch2_case "$bin" "$t"
  done <"$list"
  if ((n == 0)); then
    record_result FAIL "$VRNIC_GROUP: $name  [lists no test cases]"
    vrnic_tail "$list.err"
    return 1
  fi
}
