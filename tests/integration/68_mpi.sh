#!/usr/bin/env bash
# Open MPI 4.1 (Debian's openmpi-bin) over UCX over vrnic (issue 18): build/tests/mpi_check
# (tests/tools/mpi_check.cpp: point-to-point 0 B to 16 MiB, non-blocking many-to-many,
# Allreduce, Alltoall, Bcast, Put/Get/Accumulate in a window, every byte checked) with
# `--mca pml ucx --mca osc ucx` and UCX_TLS=rc_verbs,ud_verbs (so that shared memory does
# not take over): 2 and 4 ranks on one root vrnicd, and 2 ranks each on its own vrnicd (udp
# port on 127.0.0.1 and 127.0.0.2, MPMD). vrnicd's counters must show the traffic went
# through it. Killing one rank mid-run must end the job with a non-zero exit within 60 s.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init mpi

MPI_CHECK=$VRNIC_BUILD_DIR/tests/mpi_check
# Per application context: Open MPI applies -x only to the context it appears in.
ucx_env() {
  echo -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=vrnic0:1 \
    -x LD_LIBRARY_PATH="$VRNIC_PROVIDER_DIR" -x VRNIC_SOCKET="$1"
}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none
  --mca pml ucx --mca osc ucx --mca btl self)

setup() {
  ((EUID == 0)) || { echo "needs root: UCX uses the device only through its /dev node"; return 1; }
  command -v mpirun >/dev/null || { echo "mpirun missing (package openmpi-bin)"; return 1; }
  [[ -x $MPI_CHECK ]] ||
    { echo "$MPI_CHECK not built (needs libopenmpi-dev when meson configures)"; return 1; }
  ensure_vrnicd || return 1
  ONE=$VRNIC_SOCKET
}

# sent SOCKET KEY: a vrnicd counter, 0 if it cannot be read.
counter() { vrnic_stat "$2" "$1" || echo 0; }

# job WANT_RANKS MIN_BYTES KEY SOCKET... -- MPIRUN_ARGS...: runs mpirun; passes if it exits 0,
# every rank reports its checks passed, and KEY grew by MIN_BYTES on each SOCKET.
job() {
  local want=$1 min=$2 key=$3 out=$VRNIC_TMP/mpi.$RANDOM.log rc s i=0 passed
  shift 3
  local socks=() before=()
  while [[ $1 != -- ]]; do socks+=("$1"); before+=("$(counter "$1" "$key")"); shift; done
  shift
  echo "+ ${MPIRUN[*]} $*"
  vrnic_fg timeout -k 5 "$(vrnic_timeout 120)" "${MPIRUN[@]}" "$@" >"$out" 2>&1 </dev/null
  rc=$?
  grep 'mpi_check:' "$out" | sed 's/^/    /'
  passed=$(grep -c 'checks passed' "$out")
  if ((rc != 0 || passed != want)); then
    echo "FAIL: mpirun $(_vrnic_status_word "$rc"), $passed of $want ranks passed; its output:"
    vrnic_tail "$out" 30
    return 1
  fi
  for s in "${socks[@]}"; do
    local grew=$(($(counter "$s" "$key") - before[i]))
    echo "    $key grew by $grew on ${s##*/vrnicd.}"
    ((grew >= min)) || { echo "FAIL: want at least $min: not through vrnic?"; return 1; }
    i=$((i + 1))
  done
  CHECK_NOTE="$passed ranks"
}

# The 16 MiB message round the ring alone crosses vrnic once per rank.
ranks_one_vrnicd() {
  local n=$1
  # shellcheck disable=SC2046 # ucx_env's words are separate arguments
  job "$n" $((n * 16 << 20)) bytes_sent "$ONE" -- -np "$n" $(ucx_env "$ONE") "$MPI_CHECK"
}

ranks_two_vrnicd() {
  # shellcheck disable=SC2046
  job 2 $((16 << 20)) wire_tx_bytes "$PAIR_A" "$PAIR_B" -- \
    -np 1 $(ucx_env "$PAIR_A") "$MPI_CHECK" : -np 1 $(ucx_env "$PAIR_B") "$MPI_CHECK"
}

# rank_kill MPIRUN_ARGS...: mpi_check --forever; SIGKILL rank 1 once both run; mpirun must
# exit non-zero within 60 s, and no rank may be left behind.
rank_kill() {
  local out=$VRNIC_TMP/mpi.kill.$RANDOM.log job pid t0 secs rc ok=0
  echo "+ ${MPIRUN[*]} $*"
  "${MPIRUN[@]}" "$@" >"$out" 2>&1 </dev/null &
  job=$!
  _vrnic_track "$job"
  both_running() { (($(grep -c 'running until killed' "$out") == 2)) || ! _vrnic_running "$job"; }
  wait_for 30 "both ranks exchanging" both_running
  pid=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$out")
  if [[ -z $pid ]]; then
    echo "FAIL: the ranks did not start; mpirun's output:"
    vrnic_tail "$out"
    kill -KILL "$job" 2>/dev/null
    return 1
  fi
  echo "+ kill -KILL $pid (rank 1)"
  t0=$(vrnic_now_us)
  kill -KILL "$pid"
  if ! vrnic_wait_exit "$job" 60; then
    echo "FAIL: mpirun still running 60 s after rank 1 died (a hang); its output:"
    vrnic_tail "$out"
    kill -KILL "$job" 2>/dev/null
    ok=1
  else
    rc=$VRNIC_RC
    secs=$(vrnic_elapsed "$t0")
    echo "mpirun exited $(_vrnic_status_word "$rc") ${secs}s after the kill"
    ((rc != 0)) || { echo "FAIL: exit status 0 after a rank was killed"; ok=1; }
    CHECK_NOTE="exit $rc after ${secs}s"
  fi
  no_rank_left() { ! pgrep -f "$MPI_CHECK --forever"; }
  if ! wait_for 5 "every rank to be gone" no_rank_left; then
    echo "FAIL: ranks left running:"
    pgrep -af "$MPI_CHECK --forever" | sed 's/^/    /'
    pkill -KILL -f "$MPI_CHECK --forever"
    ok=1
  fi
  return "$ok"
}

if check "setup: a root vrnicd, mpirun, mpi_check" setup; then
  check "Open MPI over UCX, 2 ranks on one vrnicd: every check passes" ranks_one_vrnicd 2
  check "Open MPI over UCX, 4 ranks on one vrnicd: every check passes" ranks_one_vrnicd 4
  # shellcheck disable=SC2046
  check "rank killed mid-run (one vrnicd): the job ends non-zero within 60 s" \
    rank_kill -np 2 $(ucx_env "$ONE") "$MPI_CHECK" --forever
  check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop
fi
if check "two vrnicd on 127.0.0.1 and 127.0.0.2 (udp port)" start_udp_pair; then
  check "Open MPI over UCX, 2 ranks each on its own vrnicd (MPMD, udp port)" ranks_two_vrnicd
  # shellcheck disable=SC2046
  check "rank killed mid-run (two vrnicd): the job ends non-zero within 60 s" \
    rank_kill -np 1 $(ucx_env "$PAIR_A") "$MPI_CHECK" --forever : \
    -np 1 $(ucx_env "$PAIR_B") "$MPI_CHECK" --forever
  check "both vrnicd: no objects left, exit 0 on SIGTERM" pair_idle_and_stop
fi
vrnic_script_finish
