#!/usr/bin/env bash
# Hostile input: a million mutated RoCEv2 packets into a vrnicd's udp port under ASan+UBSan,
# and at the same time hostile control-protocol messages into its socket, while a verified RC
# connection runs through the same vrnicd.
#
#   build-asan/   vrnicd alone, built with -fsanitize=address,undefined (-O1, line tables);
#                 a report stops the daemon with a non-zero status (halt_on_error), leaks
#                 included (LeakSanitizer at exit)
#   daemons       two sanitized vrnicd: A on 127.0.0.1 and B on 127.0.0.2, on a free UDP port
#   traffic       build/tests/fuzz/fuzz_traffic: server on A, client on B; WRITE/READ back,
#                 SEND, atomics, WRITE with immediate, every byte and value checked, until
#                 the fuzzer is done
#   fuzzer        build/tests/fuzz/packet_fuzz from 127.0.0.3 and .4 at A: see its header for
#                 what it sends and why packets with a correct ICRC never reach the traffic's QP
#   ctl fuzzer    build/tests/fuzz/ctl_fuzz at A's socket meanwhile: random and mutated
#                 messages with descriptors of every kind (see its header); every message
#                 answered or the connection closed within 1 s, no fd left behind
#   afterwards    vrnicd's counters (every receive path taken, MADs to QP1 included: some
#                 taken by the connection manager, some dropped, none leaving a connection
#                 behind), a datagram longer than
#                 vrnicd's receive buffer (must count as malformed), clean SIGTERM exits and
#                 no sanitizer report in either log
#
# Settings: VRNIC_FUZZ_PACKETS (default 1000000), VRNIC_FUZZ_RATE (packets/s, default 25000),
# VRNIC_CTL_FUZZ_SECONDS (default 30),
# VRNIC_FUZZ_SEED (default: the fuzzer picks one and prints it), VRNIC_ASAN_BUILD_DIR
# (default build-asan). When something fails, the daemons' logs, the fuzzer's and the traffic's
# output and the last 2048 packets sent are kept in build-asan/fuzz-evidence/. To replay the
# packets, start a fresh sanitized vrnicd on the same address and port, then
#   VRNIC_SOCKET=SOCK build/tests/fuzz/packet_fuzz --port P --daemon-pid PID \
#     --replay build-asan/fuzz-evidence/last-packets.txt [--replay-range A:B]
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init fuzz

FUZZ_PACKETS=${VRNIC_FUZZ_PACKETS:-1000000}
FUZZ_RATE=${VRNIC_FUZZ_RATE:-25000}
PACKET_FUZZ=$VRNIC_BUILD_DIR/tests/fuzz/packet_fuzz
CTL_FUZZ=$VRNIC_BUILD_DIR/tests/fuzz/ctl_fuzz
CTL_FUZZ_SECONDS=${VRNIC_CTL_FUZZ_SECONDS:-30}
A_FDS=''  # vrnicd A's open descriptors before any client
FUZZ_TRAFFIC=$VRNIC_BUILD_DIR/tests/fuzz/fuzz_traffic
# shellcheck source=tests/lib_asan.sh
source "$VRNIC_ROOT/tests/lib_asan.sh"
KEEP_DIR=$ASAN_BUILD_DIR/fuzz-evidence  # logs and the last packets, when something failed

FUZZ_PORT=
pick_udp_port() {
  FUZZ_PORT=$(free_udp_port)
}

A_PID='' A_LOG='' A_SOCK='' B_PID='' B_LOG='' B_SOCK=''
start_sanitized() {  # NAME ADDR: sets <NAME>_PID, _LOG, _SOCK
  local name=$1 addr=$2 dir
  dir=$VRNIC_TMP/asan-$name
  mkdir -p "$dir" || return 1
  _vrnicd_spawn "$dir/vrnicd.sock" "$dir/vrnicd.log" env "${SANITIZER_ENV[@]}" "$ASAN_VRNICD" \
    --socket "$dir/vrnicd.sock" --udp "$addr" --udp-port "$FUZZ_PORT" || return 1
  printf -v "${name}_PID" '%s' "$VRNICD_PID"
  printf -v "${name}_LOG" '%s' "$VRNICD_LOG"
  printf -v "${name}_SOCK" '%s' "$dir/vrnicd.sock"
  VRNICD_PID='' VRNICD_LOG=''
}

daemons() {
  [[ -x $ASAN_VRNICD ]] || { echo "the sanitized vrnicd is not built ($ASAN_VRNICD)"; return 1; }
  pick_udp_port || return 1
  start_sanitized A 127.0.0.1 || return 1
  start_sanitized B 127.0.0.2 || return 1
  echo "A: pid $A_PID, 127.0.0.1:$FUZZ_PORT; B: pid $B_PID, 127.0.0.2:$FUZZ_PORT"
  A_FDS=$(ls "/proc/$A_PID/fd" | wc -l)
}

# kv FILE KEY: a value from key=value lines.
kv() { awk -F= -v k="$2" '$1 == k { print $2; exit }' "$1"; }

keep_evidence() {
  mkdir -p "$KEEP_DIR" || return 0
  [[ -s $VRNIC_TMP/fuzz.dump ]] && cp -f "$VRNIC_TMP/fuzz.dump" "$KEEP_DIR/last-packets.txt" &&
    echo "the last packets sent: $KEEP_DIR/last-packets.txt; to replay them, start a fresh" \
      "sanitized vrnicd --udp 127.0.0.1 --udp-port $FUZZ_PORT, then VRNIC_SOCKET=<its socket>" \
      "$PACKET_FUZZ --port $FUZZ_PORT --replay $KEEP_DIR/last-packets.txt --daemon-pid <its pid>"
  [[ -n $A_LOG ]] && cp -f "$A_LOG" "$KEEP_DIR/vrnicd-A.log"
  [[ -n $B_LOG ]] && cp -f "$B_LOG" "$KEEP_DIR/vrnicd-B.log"
  cp -f "$VRNIC_TMP"/fuzz.out "$VRNIC_TMP"/fuzz.err "$VRNIC_TMP"/traffic.*.log "$KEEP_DIR/" 2>/dev/null
  echo "logs kept in $KEEP_DIR"
}

fuzz_with_traffic() {
  [[ -n $A_PID && -n $B_PID ]] || { echo "the daemons did not start"; return 1; }
  local tcp srv_log=$VRNIC_TMP/traffic.server.log cli_log=$VRNIC_TMP/traffic.client.log
  local fz_out=$VRNIC_TMP/fuzz.out fz_err=$VRNIC_TMP/fuzz.err stop=$VRNIC_TMP/fuzz.stop
  local fz_tmo=$((FUZZ_PACKETS / FUZZ_RATE + 90)) srv cli qpn i rc=0 fz_rc cli_rc srv_rc seed=()
  [[ -n ${VRNIC_FUZZ_SEED:-} ]] && seed=(--seed "$VRNIC_FUZZ_SEED")
  tcp=$(next_port)
  rm -f "$stop"
  echo "+ VRNIC_SOCKET=A fuzz_traffic server --port $tcp &"
  "${VRUN[@]}" VRNIC_SOCKET="$A_SOCK" timeout -k 5 $((fz_tmo + 120)) "$FUZZ_TRAFFIC" server \
    --port "$tcp" >"$srv_log" 2>&1 </dev/null &
  srv=$!
  _vrnic_track "$srv"
  qpn_or_gone() { [[ -n $(kv "$srv_log" qpn) ]] || ! _vrnic_running "$srv"; }
  wait_for 10 "the traffic server's QPN" qpn_or_gone
  qpn=$(kv "$srv_log" qpn)
  [[ -n $qpn ]] || { echo "the traffic server printed no QPN"; vrnic_tail "$srv_log"; return 1; }
  echo "+ VRNIC_SOCKET=B fuzz_traffic client --server 127.0.0.1 --port $tcp --stop-file fuzz.stop &"
  local sent0
  sent0=$(vrnic_stat packets_sent "$B_SOCK") || return 1
  "${VRUN[@]}" VRNIC_SOCKET="$B_SOCK" timeout -k 5 $((fz_tmo + 90)) "$FUZZ_TRAFFIC" client \
    --server 127.0.0.1 --port "$tcp" --stop-file "$stop" --max-seconds "$fz_tmo" \
    --seed "$$" >"$cli_log" 2>&1 </dev/null &
  cli=$!
  _vrnic_track "$cli"
  # the connection is up and moving data before the first hostile packet
  wait_for 30 "the checked traffic to flow" stat_over packets_sent $((sent0 + 1000)) "$B_SOCK" ||
    return 1
  echo "+ ctl_fuzz --socket A --seconds $CTL_FUZZ_SECONDS --seed $$ &"
  timeout -k 5 $((CTL_FUZZ_SECONDS + 60)) "$CTL_FUZZ" --socket "$A_SOCK" \
    --seconds "$CTL_FUZZ_SECONDS" --seed "$$" >"$VRNIC_TMP/ctl_fuzz.out" 2>&1 </dev/null &
  CTL_FUZZ_PID=$!
  _vrnic_track "$CTL_FUZZ_PID"
  echo "+ VRNIC_SOCKET=A packet_fuzz --target 127.0.0.1 --port $FUZZ_PORT --count $FUZZ_PACKETS" \
    "--rate $FUZZ_RATE --victim-qpn $qpn --daemon-pid $A_PID ${seed[*]}"
  vrnic_fg "${VRUN[@]}" VRNIC_SOCKET="$A_SOCK" timeout -k 5 "$(vrnic_timeout "$fz_tmo")" \
    "$PACKET_FUZZ" --target 127.0.0.1 --port "$FUZZ_PORT" --count "$FUZZ_PACKETS" \
    --rate "$FUZZ_RATE" --victim-qpn "$qpn" --daemon-pid "$A_PID" --dump "$VRNIC_TMP/fuzz.dump" \
    "${seed[@]}" >"$fz_out" 2>"$fz_err" </dev/null
  fz_rc=$?
  touch "$stop"
  vrnic_wait_exit "$cli" 60 || { kill -TERM "$cli"; vrnic_wait_exit "$cli" 10; }
  cli_rc=$VRNIC_RC
  vrnic_wait_exit "$srv" 30 || { kill -TERM "$srv"; vrnic_wait_exit "$srv" 10; }
  srv_rc=$VRNIC_RC
  echo "--- fuzzer (stderr)"
  sed 's/^/    /' "$fz_err"
  echo "--- fuzzer: $(_vrnic_status_word "$fz_rc")"
  sed 's/^/    /' "$fz_out"
  echo "--- traffic client: $(_vrnic_status_word "$cli_rc")"
  sed 's/^/    /' "$cli_log"
  echo "--- traffic server: $(_vrnic_status_word "$srv_rc")"
  sed 's/^/    /' "$srv_log"
  local sent iters fails=() p log
  sent=$(kv "$fz_out" packets_sent)
  iters=$(kv "$cli_log" iterations)
  ((fz_rc == 0)) || fails+=("the fuzzer exited with $(_vrnic_status_word "$fz_rc")")
  ((${sent:-0} >= FUZZ_PACKETS)) || fails+=("${sent:-no} packets sent, want $FUZZ_PACKETS")
  if ((cli_rc != 0 || srv_rc != 0)); then
    fails+=("the valid traffic failed (client $(_vrnic_status_word "$cli_rc"), server $(_vrnic_status_word "$srv_rc"))")
  elif [[ $(kv "$cli_log" stopped_by) != stop-file ]] || ((${iters:-0} < 10)); then
    fails+=("the valid traffic did not run alongside the whole fuzz run (${iters:-0} iterations)")
  fi
  for p in "$A_PID" "$B_PID"; do
    _vrnic_running "$p" || fails+=("vrnicd (pid $p) died")
  done
  grep -qE "$SANITIZER_REPORT" "$A_LOG" "$B_LOG" && fails+=("sanitizer report in a vrnicd log")
  if ((${#fails[@]})); then
    rc=1
    for log in "$A_LOG" "$B_LOG"; do
      echo "--- ${log#"$VRNIC_TMP"/}"
      sanitizer_excerpt "$log"
    done
    keep_evidence
    for p in "${fails[@]}"; do echo "FAIL: $p"; done
  fi
  local verified
  verified=$(kv "$cli_log" bytes_read_verified)
  CHECK_NOTE="seed $(kv "$fz_out" seed), ${sent:-0} packets in $(kv "$fz_out" seconds)s,"
  CHECK_NOTE+=" $(kv "$fz_out" icrc_valid_sent) with a correct ICRC; traffic: ${iters:-0} iterations,"
  CHECK_NOTE+=" $((${verified:-0} / 1048576)) MiB read back and verified"
  return "$rc"
}

# The control-protocol fuzzer that ran at A alongside: its verdict, and A's descriptors back
# to what they were before any client came.
ctl_fuzz_result() {
  [[ -n ${CTL_FUZZ_PID:-} ]] || { echo "the control-protocol fuzzer did not run"; return 1; }
  local rc=0 now
  vrnic_wait_exit "$CTL_FUZZ_PID" $((CTL_FUZZ_SECONDS + 60)) || kill -TERM "$CTL_FUZZ_PID"
  sed 's/^/    /' "$VRNIC_TMP/ctl_fuzz.out"
  ((VRNIC_RC == 0)) || { echo "FAIL: ctl_fuzz: $(_vrnic_status_word "$VRNIC_RC")"; rc=1; }
  ((${A_FDS:-0} > 0)) || { echo "no baseline fd count for vrnicd A"; return 1; }
  _vrnic_running "$A_PID" || { echo "FAIL: vrnicd A died"; return 1; }
  fds_back() { (($(ls "/proc/$A_PID/fd" | wc -l) == A_FDS)); }
  wait_for 5 "the last sessions' teardown" fds_back
  now=$(ls "/proc/$A_PID/fd" | wc -l)
  echo "vrnicd A's descriptors: $A_FDS before any client, $now after"
  ((now == A_FDS)) || { echo "FAIL: vrnicd A holds $((now - A_FDS)) more fds"; rc=1; }
  CHECK_NOTE="$(awk -F= '$1 == "messages" { print $2 }' "$VRNIC_TMP/ctl_fuzz.out") messages,"
  CHECK_NOTE+=" $(awk -F= '$1 == "connections" { print $2 }' "$VRNIC_TMP/ctl_fuzz.out") connections"
  return "$rc"
}

# What vrnicd A made of them: every path of the receive side was taken.
counters() {
  if [[ -z $A_PID ]] || ! _vrnic_running "$A_PID"; then
    echo "vrnicd A is not running"
    return 1
  fi
  local s rc=0 sent rx icrc mal drop btx
  for s in "$A_SOCK" "$B_SOCK"; do
    echo "+ vrnicctl --socket $s stats"
    vrnicctl_stats "$s" | grep -E 'packets|bytes|icrc|malformed|dropped|naks|retrans|dup|sequence' |
      sed 's/^/    /'
  done
  sent=$(kv "$VRNIC_TMP/fuzz.out" packets_sent)
  rx=$(vrnic_stat wire_rx_packets "$A_SOCK")
  icrc=$(vrnic_stat wire_rx_icrc_errors "$A_SOCK")
  mal=$(vrnic_stat wire_rx_malformed "$A_SOCK")
  drop=$(vrnic_stat packets_dropped "$A_SOCK")
  btx=$(vrnic_stat wire_tx_packets "$B_SOCK")
  local counted=$((rx + icrc + mal)) fuzz_rx=$((rx - btx))
  echo "fuzzer sent $sent; vrnicd A counted $counted UDP datagrams: $mal malformed," \
    "$icrc ICRC errors, $rx to the transport (about $fuzz_rx of them the fuzzer's, $btx" \
    "sent by B), $drop dropped by the transport; $((sent + btx - counted)) lost in the kernel"
  # The kernel may drop a few (the daemon's socket buffer is 8 MiB); most must get in.
  if ((counted * 10 < sent * 9)); then
    echo "FAIL: fewer than 90% of the packets reached vrnicd (a slow machine? lower VRNIC_FUZZ_RATE)"
    rc=1
  fi
  ((mal > 0 && icrc > 0 && fuzz_rx > 0 && drop > 0)) ||
    { echo "FAIL: some path (malformed, ICRC error, transport, drop) saw no packet"; rc=1; }
  # The MADs to QP1: the connection manager took some and refused (counted, dropped) others.
  local mads mad_drops
  mads=$(vrnic_stat cm_mads_received "$A_SOCK")
  mad_drops=$(vrnic_stat cm_mads_dropped "$A_SOCK")
  echo "vrnicd A's connection manager: $mads MADs received, $mad_drops dropped," \
    "$(vrnic_stat cm_mads_sent "$A_SOCK") sent (REJs to REQs nobody listens to)"
  ((mads > 0 && mad_drops > 0)) ||
    { echo "FAIL: no MAD reached vrnicd's connection manager, or none was dropped"; rc=1; }
  (($(vrnic_stat cm_connections "$A_SOCK") == 0)) ||
    { echo "FAIL: the MADs left CM connections behind"; rc=1; }
  CHECK_NOTE="$mal malformed, $icrc bad ICRC, ~$fuzz_rx to the transport ($drop dropped there),"
  CHECK_NOTE+=" $((sent + btx - counted)) lost in the kernel"
  CHECK_NOTE+="; $mads MADs to QP1, $mad_drops dropped by the CM"
  return "$rc"
}

# A datagram longer than vrnicd's receive buffer reaches it cut short (recvmsg truncates): it
# is malformed even when the bytes at the cut hold an ICRC that is right for what is left.
# packet_fuzz --probe-truncation sends a control of the largest legitimate size first.
truncation() {
  if [[ -z $A_PID ]] || ! _vrnic_running "$A_PID"; then
    echo "vrnicd A is not running"
    return 1
  fi
  local k before=() after=() d=()
  for k in wire_rx_packets wire_rx_malformed wire_rx_icrc_errors; do
    before+=("$(vrnic_stat "$k" "$A_SOCK")")
  done
  echo "+ packet_fuzz --target 127.0.0.1 --port $FUZZ_PORT --probe-truncation"
  vrnic_fg timeout -k 5 30 "$PACKET_FUZZ" --target 127.0.0.1 --port "$FUZZ_PORT" \
    --probe-truncation </dev/null || return 1
  wait_for 5 "vrnicd A to have counted them" counter_settled wire_rx_packets "$A_SOCK"
  for k in wire_rx_packets wire_rx_malformed wire_rx_icrc_errors; do
    after+=("$(vrnic_stat "$k" "$A_SOCK")")
  done
  for k in 0 1 2; do d+=($((after[k] - before[k]))); done
  echo "vrnicd A: +${d[0]} to the transport, +${d[1]} malformed, +${d[2]} ICRC errors"
  CHECK_NOTE="accepted ${d[0]} of 2 (want 1: the control), rejected $((d[1] + d[2])) (want 1)"
  if ((d[0] != 1 || d[1] + d[2] != 1)); then
    echo "FAIL: the datagram cut to the receive buffer was taken as a packet; the udp port"
    echo "      should count a datagram that fills its buffer (longer than any RoCE packet:"
    echo "      64 header bytes + 4096 + pad + ICRC) or comes back with MSG_TRUNC as malformed"
    return 1
  fi
}

# Both daemons alive, A has no objects left, both exit 0 on SIGTERM (LeakSanitizer runs
# then), and no sanitizer report anywhere in their logs.
stop_sanitized() {
  local rc=0 name pid log sock
  for name in A B; do
    pid=${name}_PID log=${name}_LOG sock=${name}_SOCK
    pid=${!pid} log=${!log} sock=${!sock}
    [[ -n $pid ]] || { echo "vrnicd $name was not started"; rc=1; continue; }
    if ! _vrnic_running "$pid"; then
      echo "FAIL: vrnicd $name (pid $pid) is not running"
      rc=1
    else
      VRNIC_SOCKET=$sock wait_objects_zero 10 || rc=1
      VRNICD_PID=$pid VRNICD_LOG=$log
      VRNIC_DAEMON_STOP_TIMEOUT=20 stop_vrnicd TERM "$sock" || rc=1
      VRNICD_PID='' VRNICD_LOG=''
    fi
    if grep -qE "$SANITIZER_REPORT" "$log"; then
      echo "FAIL: sanitizer report in vrnicd $name's log:"
      sanitizer_excerpt "$log"
      keep_evidence
      rc=1
    else
      echo "vrnicd $name's log: no sanitizer report ($(wc -l <"$log") lines)"
    fi
  done
  A_PID='' B_PID=''
  return "$rc"
}

check "build-asan: vrnicd with ASan+UBSan" build_asan "$PACKET_FUZZ" "$FUZZ_TRAFFIC" "$CTL_FUZZ" &&
  check "two sanitized vrnicd on 127.0.0.1 and 127.0.0.2 (udp)" daemons
check "$FUZZ_PACKETS mutated packets at vrnicd A under ASan+UBSan; RC traffic through it verified" \
  fuzz_with_traffic
check "control-protocol fuzzer at A meanwhile: every message answered within 1 s, no fd left" \
  ctl_fuzz_result
check "vrnicd A counted them: malformed, ICRC errors, transport drops" counters
check "a datagram cut short by vrnicd's receive buffer counts as malformed, whatever its ICRC" \
  truncation
check "sanitized vrnicd: alive, no objects left, exit 0 on SIGTERM, no sanitizer report" \
  stop_sanitized

vrnic_script_finish
