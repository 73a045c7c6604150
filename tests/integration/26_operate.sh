#!/usr/bin/env bash
# vrnic as an operator runs it (issue 33): installed with `meson install` into a DESTDIR and
# used from there with no build tree on any path (vrnic-run, systemd units, socket
# activation), auto-started on first use, watched (vrnicctl --json, Prometheus /metrics, a
# real Prometheus server scraping it), and every program's options and --help.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init operate

ROOT=$VRNIC_TMP/root  # the DESTDIR
BIN=
LIBDIR=

# INSTALLED CMD...: CMD from the installed tree only, no build tree on PATH or
# LD_LIBRARY_PATH (an env command, so that it can be backgrounded and signalled as CMD).
INSTALLED=()
installed_env() {
  INSTALLED=(env -u LD_LIBRARY_PATH PATH="$BIN:/usr/sbin:/usr/bin:/sbin:/bin")
}

# meson install into $ROOT; BIN and LIBDIR are where the programs and libraries landed.
install_tree() {
  echo "+ meson install -C ${VRNIC_BUILD_DIR#"$VRNIC_ROOT"/} --destdir $ROOT --no-rebuild"
  meson install -C "$VRNIC_BUILD_DIR" --destdir "$ROOT" --no-rebuild --quiet || return 1
  BIN=$(dirname "$(find "$ROOT" -name vrnic-run -type f)")
  LIBDIR=$(dirname "$(find "$ROOT" -name libibverbs.so.1 | head -n 1)")
  echo "programs in ${BIN#"$ROOT"}, libraries in ${LIBDIR#"$ROOT"}"
  installed_env
  local f ok=0
  for f in "$BIN/vrnicd" "$BIN/vrnicctl" "$BIN/vrnic-run" "$LIBDIR/libibverbs.so.1" \
    "$LIBDIR/librdmacm.so.1"; do
    [[ -e $f ]] || { echo "FAIL: ${f#"$ROOT"} not installed"; ok=1; }
  done
  # A directory of their own: never where the system's libibverbs is.
  [[ ${LIBDIR##*/} == vrnic ]] || { echo "FAIL: libraries not in a vrnic directory"; ok=1; }
  # Nothing of the tests or benchmarks.
  if find "$ROOT" -type f | grep -E '_test$|/tests?/|bench'; then
    echo "FAIL: test or benchmark files installed"
    ok=1
  fi
  return "$ok"
}
check "meson install --destdir: vrnicd, vrnicctl, vrnic-run, the libraries in a directory of their own" \
  install_tree

# The installed vrnicd, on a socket of this group's.
start_installed_vrnicd() {
  local dir=$VRNIC_TMP/installed
  mkdir -p "$dir"
  VRNIC_SOCKET=$dir/vrnicd.sock
  export VRNIC_SOCKET
  _vrnicd_spawn "$VRNIC_SOCKET" "$dir/vrnicd.log" "${INSTALLED[@]}" vrnicd --socket "$VRNIC_SOCKET"
}

installed_programs() {
  [[ -n $BIN ]] || return 1
  local ok=0 out=$VRNIC_TMP/installed.out port
  start_installed_vrnicd || return 1
  echo "+ vrnic-run ibv_devinfo   # PATH=${BIN#"$ROOT"}:/usr/bin..., no LD_LIBRARY_PATH"
  "${INSTALLED[@]}" vrnic-run ibv_devinfo >"$out" 2>&1
  cat "$out"
  grep -q 'hca_id:.*vrnic0' "$out" || { echo "FAIL: vrnic-run ibv_devinfo: no vrnic0"; ok=1; }
  echo "+ vrnic-run ldd \$(command -v ibv_devinfo)"
  "${INSTALLED[@]}" vrnic-run ldd "$(command -v ibv_devinfo)" | tee "$out" | grep -E 'ibverbs|rdmacm'
  grep -q "libibverbs.so.1 => $LIBDIR/libibverbs.so.1" "$out" ||
    { echo "FAIL: ibv_devinfo does not load the installed libibverbs.so.1"; ok=1; }
  # ib_write_bw, both sides through vrnic-run.
  port=$(next_port)
  local VRUN=("${INSTALLED[@]}" vrnic-run)
  verbs_pair installed-bw "$port" ib_write_bw -d vrnic0 -x 0 -F -s 65536 -n 2000 || ok=1
  perftest_parse "$CLIENT_LOG" | grep -q '^bw 65536' ||
    { echo "FAIL: no 64 KiB bandwidth line"; ok=1; }
  # rping (librdmacm), the server ready once vrnicd has its listener.
  port=$(next_port)
  echo "+ vrnic-run rping -s -a 127.0.0.1 -p $port -C 5 -V &"
  "${INSTALLED[@]}" vrnic-run timeout -k 5 60 rping -s -a 127.0.0.1 -p "$port" -C 5 -V \
    >"$VRNIC_TMP/rping.server.log" 2>&1 </dev/null &
  local spid=$!
  _vrnic_track "$spid"
  wait_for 15 "rping's listener" stat_is cm_listeners 1 || ok=1
  echo "+ vrnic-run rping -c -a 127.0.0.1 -p $port -C 5 -V -v"
  "${INSTALLED[@]}" vrnic-run timeout -k 5 60 rping -c -a 127.0.0.1 -p "$port" -C 5 -V -v \
    >"$VRNIC_TMP/rping.client.log" 2>&1 </dev/null || { echo "FAIL: rping client"; ok=1; }
  vrnic_wait_exit "$spid" 20 && ((VRNIC_RC == 0)) || { echo "FAIL: rping server"; ok=1; }
  vrnic_tail "$VRNIC_TMP/rping.client.log" 5
  [[ $(grep -c 'ping data' "$VRNIC_TMP/rping.client.log") == 5 ]] ||
    { echo "FAIL: want 5 pings"; ok=1; }
  stop_vrnicd TERM || ok=1
  return "$ok"
}
check "installed tree only: vrnic-run ibv_devinfo, an ib_write_bw pair and rping on the installed vrnicd" \
  installed_programs

# systemd-analyze verify on the installed units, in the DESTDIR as its root (with the host's
# own units there too, which ours order themselves after): no error and no warning.
units_verify() {
  [[ -n $BIN ]] || return 1
  local units ok=0 out=$VRNIC_TMP/verify.out kind
  mkdir -p "$ROOT/lib/systemd" && cp -a /lib/systemd/system "$ROOT/lib/systemd/" || return 1
  units=$(dirname "$(find "$ROOT" -path '*/systemd/system/vrnicd.service')")
  units=${units#"$ROOT"}
  for kind in system user; do
    echo "+ systemd-analyze verify --root=\$DESTDIR ${units%/*}/$kind/vrnicd.socket ${units%/*}/$kind/vrnicd.service"
    systemd-analyze verify --root="$ROOT" "${units%/*}/$kind/vrnicd.socket" \
      "${units%/*}/$kind/vrnicd.service" >"$out" 2>&1 || { echo "FAIL: exit status $?"; ok=1; }
    cat "$out"
    [[ -s $out ]] && { echo "FAIL: systemd-analyze had something to say"; ok=1; }
  done
  grep -q '^ListenSequentialPacket=/run/vrnic/vrnicd.sock' "$ROOT$units/vrnicd.socket" &&
    grep -q '^SocketGroup=rdma' "$ROOT$units/vrnicd.socket" ||
    { echo "FAIL: the socket unit's path or group"; ok=1; }
  grep -q "^ExecStart=${BIN#"$ROOT"}/vrnicd " "$ROOT$units/vrnicd.service" ||
    { echo "FAIL: ExecStart is not the installed vrnicd"; ok=1; }
  return "$ok"
}
check "systemd-analyze verify: vrnicd.socket and vrnicd.service (host and user units)" units_verify

# systemd-socket-activate makes the socket and starts the installed vrnicd on the first
# connection, handing it the socket (LISTEN_FDS), as systemd does with vrnicd.socket.
socket_activation() {
  [[ -n $BIN ]] || return 1
  local sock=$VRNIC_TMP/activated.sock out=$VRNIC_TMP/activated.out pid ok=0
  echo "+ systemd-socket-activate --seqpacket -l $sock vrnicd &"
  "${INSTALLED[@]}" systemd-socket-activate --seqpacket -l "$sock" "$BIN/vrnicd" \
    >"$VRNIC_TMP/activated.log" 2>&1 </dev/null &
  pid=$!
  _vrnic_track "$pid"
  wait_for 10 "the socket" test -S "$sock" || return 1
  pgrep -f "^$BIN/vrnicd" && { echo "FAIL: vrnicd runs before the first connection"; ok=1; }
  echo "+ VRNIC_SOCKET=$sock vrnic-run ibv_devices"
  "${INSTALLED[@]}" VRNIC_SOCKET="$sock" vrnic-run ibv_devices >"$out" 2>&1
  cat "$out"
  grep -q vrnic0 "$out" || { echo "FAIL: no vrnic0 through the activated socket"; ok=1; }
  "${INSTALLED[@]}" vrnicctl --socket "$sock" devices --json | tee "$out"
  /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["daemon"]; sys.exit(not d["socket_activated"])' \
    "$out" || { echo "FAIL: vrnicctl devices does not say socket_activated"; ok=1; }
  cat "$VRNIC_TMP/activated.log"
  kill -TERM "$pid"
  vrnic_wait_exit "$pid" 10 && ((VRNIC_RC == 0)) || { echo "FAIL: vrnicd's exit on SIGTERM"; ok=1; }
  return "$ok"
}
check "socket activation: systemd-socket-activate hands the installed vrnicd its socket" \
  socket_activation

# Auto-start: no daemon, VRNIC_SOCKET unset, a private XDG_RUNTIME_DIR.
AUTO_XDG=$VRNIC_TMP/xdg
auto_env() {
  env -u VRNIC_SOCKET XDG_RUNTIME_DIR="$AUTO_XDG" VRNIC_AUTOSTART_IDLE=3 "$@"
}
auto_daemons() { pgrep -f -- "--socket $AUTO_XDG/vrnicd.sock" | wc -l; }
auto_gone() { (($(auto_daemons) == 0)) && [[ ! -e $AUTO_XDG/vrnicd.sock ]]; }

autostart() {
  local ok=0 i pids=() n
  mkdir -p "$AUTO_XDG" && chmod 700 "$AUTO_XDG"
  echo "+ XDG_RUNTIME_DIR=$AUTO_XDG ibv_devinfo -l   x10 at once, no vrnicd"
  for i in $(seq 10); do
    auto_env "${VRUN[@]}" timeout -k 2 30 ibv_devinfo -l >"$VRNIC_TMP/auto.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "FAIL: program $((i + 1)) exit status $?"; ok=1; }
    grep -qx $'\tvrnic0' "$VRNIC_TMP/auto.$((i + 1))" ||
      { echo "FAIL: program $((i + 1)) did not list vrnic0:"; cat "$VRNIC_TMP/auto.$((i + 1))"; ok=1; }
  done
  grep -h 'started vrnicd' "$VRNIC_TMP"/auto.*
  n=$(grep -l 'started vrnicd' "$VRNIC_TMP"/auto.* | wc -l)
  ((n == 1)) || { echo "FAIL: $n programs say they started a vrnicd, want 1"; ok=1; }
  n=$(auto_daemons)
  echo "vrnicd processes on $AUTO_XDG/vrnicd.sock: $n"
  ((n == 1)) || { echo "FAIL: want one daemon"; ok=1; }
  echo "+ vrnicctl devices"
  auto_env "$VRNICCTL" devices | tee "$VRNIC_TMP/auto.devices"
  grep -q ' autostarted' "$VRNIC_TMP/auto.devices" || { echo "FAIL: not shown as auto-started"; ok=1; }
  wait_for 20 "the auto-started vrnicd to exit after its idle time (3 s)" auto_gone || ok=1
  echo "+ VRNIC_AUTOSTART=0 ibv_devinfo -l"
  auto_env VRNIC_AUTOSTART=0 "${VRUN[@]}" timeout -k 2 30 ibv_devinfo -l >"$VRNIC_TMP/auto.off" 2>&1
  cat "$VRNIC_TMP/auto.off"
  grep -q '0 HCAs found' "$VRNIC_TMP/auto.off" && grep -q 'no vrnicd at' "$VRNIC_TMP/auto.off" ||
    { echo "FAIL: want no device and the no-vrnicd message"; ok=1; }
  (($(auto_daemons) == 0)) || { echo "FAIL: VRNIC_AUTOSTART=0 started one"; ok=1; }
  pkill -f -- "--socket $AUTO_XDG/vrnicd.sock"
  return "$ok"
}
check "auto-start: ten programs at once with no vrnicd get one, auto-started; it exits when idle; VRNIC_AUTOSTART=0 does not" \
  autostart

# The installed library starts the installed vrnicd.
autostart_installed() {
  [[ -n $BIN ]] || return 1
  local ok=0 out=$VRNIC_TMP/auto-installed.out
  echo "+ XDG_RUNTIME_DIR=$AUTO_XDG vrnic-run ibv_devices   # installed tree, no vrnicd"
  auto_env env -u LD_LIBRARY_PATH PATH="$BIN:/usr/bin:/bin" vrnic-run ibv_devices >"$out" 2>&1
  cat "$out"
  grep -q vrnic0 "$out" || { echo "FAIL: no vrnic0"; ok=1; }
  pgrep -af -- "--socket $AUTO_XDG/vrnicd.sock" | tee "$out"
  grep -q "^[0-9]* $BIN/vrnicd " "$out" || { echo "FAIL: not the installed vrnicd"; ok=1; }
  wait_for 20 "the auto-started vrnicd to exit" auto_gone || ok=1
  pkill -f -- "--socket $AUTO_XDG/vrnicd.sock"
  return "$ok"
}
check "auto-start from the installed tree: the installed vrnicd" autostart_installed

# vrnicctl --json next to the text, while an ib_write_bw pair runs through the workers.
METRICS_PORT=
json_and_metrics() {
  local ok=0 port kind
  METRICS_PORT=$(next_port)
  start_vrnicd --metrics "127.0.0.1:$METRICS_PORT" --metrics-qps || return 1
  port=$(next_port)
  VRNIC_DIRECT_PATH=0 start_server json "$port" ib_write_bw -d vrnic0 -x 0 -F -s 4096 -D 6 \
    -p "$port" || return 1
  VRNIC_DIRECT_PATH=0 "${VRUN[@]}" timeout -k 5 60 ib_write_bw -d vrnic0 -x 0 -F -s 4096 -D 6 \
    -p "$port" 127.0.0.1 >"$VRNIC_TMP/json.client.log" 2>&1 </dev/null &
  local cpid=$!
  _vrnic_track "$cpid"
  wait_for 15 "two QPs in RTS" stat_is qps 2 || ok=1
  wait_for 15 "packets" counter_positive packets_sent || ok=1
  for kind in qps devices; do
    echo "+ vrnicctl $kind; vrnicctl $kind --json"
    "$VRNICCTL" "$kind" >"$VRNIC_TMP/$kind.txt" && "$VRNICCTL" "$kind" --json >"$VRNIC_TMP/$kind.json" ||
      ok=1
    /usr/bin/python3 tests/tools/json_matches_text.py "$kind" "$VRNIC_TMP/$kind.txt" \
      "$VRNIC_TMP/$kind.json" || ok=1
  done
  echo "+ curl http://127.0.0.1:$METRICS_PORT/metrics | promtool check metrics"
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$VRNIC_TMP/metrics.txt" || { echo "FAIL: curl"; ok=1; }
  grep -E '^vrnic_(qps|packets_sent_total|qp_bytes_sent_total)\{' "$VRNIC_TMP/metrics.txt" | head -n 4
  promtool check metrics <"$VRNIC_TMP/metrics.txt" || { echo "FAIL: promtool check metrics"; ok=1; }
  grep -q '^vrnic_qp_state{device="vrnic0",qpn="0x[0-9a-f]*",type="RC",session="[0-9]*",state="RTS"} 1$' \
    "$VRNIC_TMP/metrics.txt" || { echo "FAIL: no RC QP in RTS in /metrics"; ok=1; }
  vrnic_wait_exit "$cpid" 30 && ((VRNIC_RC == 0)) || { echo "FAIL: client"; ok=1; }
  finish_server
  ((VRNIC_RC == 0)) || { echo "FAIL: server"; ok=1; }
  # At rest, the stats of both forms agree value for value.
  wait_for 10 "no QPs" stat_is qps 0 || ok=1
  "$VRNICCTL" stats >"$VRNIC_TMP/stats.txt" && "$VRNICCTL" stats --json >"$VRNIC_TMP/stats.json" &&
    "$VRNICCTL" stats >"$VRNIC_TMP/stats.after.txt" || ok=1
  /usr/bin/python3 tests/tools/json_matches_text.py stats "$VRNIC_TMP/stats.txt" \
    "$VRNIC_TMP/stats.json" "$VRNIC_TMP/stats.after.txt" || ok=1
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$VRNIC_TMP/metrics.txt"
  local sent
  sent=$(awk -F= '$1 == "packets_sent" { print $2 }' "$VRNIC_TMP/stats.txt")
  grep -qx "vrnic_packets_sent_total{device=\"vrnic0\"} $sent" "$VRNIC_TMP/metrics.txt" ||
    { echo "FAIL: /metrics' packets_sent is not vrnicctl's ($sent)"; ok=1; }
  echo "+ curl http://127.0.0.1:$METRICS_PORT/other"
  [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$METRICS_PORT/other") == 404 ]] ||
    { echo "FAIL: want 404 for another path"; ok=1; }
  [[ $(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$METRICS_PORT/metrics") == 405 ]] ||
    { echo "FAIL: want 405 for POST"; ok=1; }
  # A client that connects and says nothing holds the endpoint 2 s at most.
  echo "+ a silent connection, then curl /metrics"
  exec 7<>"/dev/tcp/127.0.0.1/$METRICS_PORT"
  curl -sf -m 10 "http://127.0.0.1:$METRICS_PORT/metrics" | grep -q '^vrnic_sessions' ||
    { echo "FAIL: no answer behind a silent connection"; ok=1; }
  exec 7>&-
  return "$ok"
}
counter_positive() { (($(vrnic_stat "$1") > 0)); }
check "vrnicctl qps/devices/stats --json agree with the text; /metrics passes promtool check metrics" \
  json_and_metrics

# A real Prometheus scrapes /metrics every second while traffic runs; its query API shows
# vrnic_bytes_sent_total grow.
prometheus_scrape() {
  [[ -n $METRICS_PORT ]] || return 1
  local ok=0 web dir=$VRNIC_TMP/prometheus pid port q
  web=$(next_port)
  mkdir -p "$dir"
  cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: vrnicd
    static_configs:
      - targets: ['127.0.0.1:$METRICS_PORT']
EOF
  echo "+ prometheus --config.file=prometheus.yml --web.listen-address=127.0.0.1:$web &"
  prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$web" >"$dir/log" 2>&1 </dev/null &
  pid=$!
  _vrnic_track "$pid"
  q() { curl -sf "http://127.0.0.1:$web/api/v1/query" --data-urlencode "query=$1"; }
  wait_for 60 "Prometheus's first scrape of vrnicd" \
    sh -c "curl -sf 'http://127.0.0.1:$web/api/v1/query?query=up' | grep -q '\"1\"'" ||
    { vrnic_tail "$dir/log"; ok=1; }
  port=$(next_port)
  VRNIC_DIRECT_PATH=0 verbs_pair scraped "$port" ib_write_bw -d vrnic0 -x 0 -F -s 65536 -D 3 || ok=1
  sleep 2  # two more scrapes
  echo "+ query: increase(vrnic_bytes_sent_total{device=\"vrnic0\"}[1m])"
  q 'increase(vrnic_bytes_sent_total{device="vrnic0"}[1m])' | tee "$dir/answer"
  echo
  /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["data"]["result"]; sys.exit(not (r and float(r[0]["value"][1]) > 0))' \
    "$dir/answer" || { echo "FAIL: Prometheus saw no growth of vrnic_bytes_sent_total"; ok=1; }
  kill -TERM "$pid"
  vrnic_wait_exit "$pid" 20 || _vrnic_kill_hard "$pid"
  stop_vrnicd TERM || ok=1
  return "$ok"
}
check "Prometheus scrapes vrnicd --metrics; its query API shows vrnic_bytes_sent_total grow" \
  prometheus_scrape

# vrnicctl capture while an ib_write_bw pair runs: on the loop port (one vrnicd) or across the
# udp port (two): tshark decodes every frame as RoCEv2 (InfiniBand), none malformed, and the
# frames are what the device sent plus what it took from the wire (vrnicctl stats).
sent_plus_received() {
  local out
  out=$(vrnicctl_stats "$1") || return 1
  awk -F= '$1 == "packets_sent" || $1 == "wire_rx_packets" { n += $2 } END { print n }' <<<"$out"
}
capture_pair() {
  local mode=$1 ok=0 pcap=$VRNIC_TMP/capture-$1.pcap log=$VRNIC_TMP/capture-$1.log cpid
  local before after port frames n
  if [[ $mode == udp ]]; then
    start_udp_pair || return 1
    local -x VRNIC_CLIENT_ENV=VRNIC_SOCKET=$PAIR_B
  else
    start_vrnicd || return 1
  fi
  echo "+ vrnicctl capture -w $pcap &"
  "$VRNICCTL" capture -w "$pcap" >"$log" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  wait_for 10 "the capture" grep -q capturing "$log" || return 1
  before=$(sent_plus_received "$VRNIC_SOCKET")
  port=$(next_port)
  verbs_pair "capture-$mode" "$port" ib_write_bw -d vrnic0 -x 0 -F -s 65536 -n 300 || ok=1
  wait_for 10 "the counters to settle" counter_settled packets_sent || ok=1
  after=$(sent_plus_received "$VRNIC_SOCKET")
  kill -INT "$cpid"
  vrnic_wait_exit "$cpid" 10 && ((VRNIC_RC == 0)) || { echo "FAIL: vrnicctl capture's exit"; ok=1; }
  cat "$log"
  grep -q ' 0 dropped' "$log" || { echo "FAIL: frames dropped"; ok=1; }
  frames=$(tshark -r "$pcap" 2>/dev/null | wc -l)
  n=$(tshark -r "$pcap" -T fields -e frame.protocols 2>/dev/null | grep -c ':udp:infiniband')
  echo "tshark: $frames frames, $n of them RoCEv2 (InfiniBand in UDP);" \
    "vrnicd: $((after - before)) packets sent and received from the wire"
  tshark -r "$pcap" 2>/dev/null | awk '{ $1 = $2 = ""; print }' | sed -E 's/ QP=.*//' | sort |
    uniq -c | sort -rn | head -n 6
  ((frames > 0 && n == frames)) || { echo "FAIL: not every frame is RoCEv2"; ok=1; }
  ((frames == after - before)) || { echo "FAIL: the capture has $frames frames, want $((after - before))"; ok=1; }
  n=$(tshark -r "$pcap" -Y '_ws.malformed' 2>/dev/null | wc -l)
  ((n == 0)) || { echo "FAIL: $n malformed frames"; ok=1; }
  if [[ $mode == udp ]]; then
    kill -TERM "$PEER_PID"
    vrnic_wait_exit "$PEER_PID" 10 || ok=1
  fi
  stop_vrnicd TERM || ok=1
  return "$ok"
}
check "vrnicctl capture, loop port: an ib_write_bw pair, every frame RoCEv2 and none malformed; as many as vrnicd counted" \
  capture_pair loop
check "vrnicctl capture, udp port (two vrnicds): every frame RoCEv2, none malformed; as many as vrnicd sent and received" \
  capture_pair udp

# --qp: with two QPs a side, a capture of one (through a pipe into tshark) has only its
# packets: those it sends (to its peer) and those sent to it.
capture_one_qp() {
  local ok=0 port qpn dests cpid
  start_vrnicd || return 1
  port=$(next_port)
  start_server qp-filter "$port" ib_write_bw -d vrnic0 -x 0 -F -s 4096 -q 2 -D 5 -p "$port" ||
    return 1
  "${VRUN[@]}" timeout -k 5 60 ib_write_bw -d vrnic0 -x 0 -F -s 4096 -q 2 -D 5 -p "$port" \
    127.0.0.1 >"$VRNIC_TMP/qp-filter.client.log" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  # The client's QPs in RTS, the server's in RTR (ib_write_bw's server only receives).
  wait_for 15 "two QPs in RTS" sh -c "[ \$('$VRNICCTL' qps --state RTS | wc -l) = 2 ]" || return 1
  "$VRNICCTL" qps | awk '{ print $1, $2, $3 }'
  [[ $("$VRNICCTL" qps | wc -l) == 4 ]] || { echo "FAIL: want four QPs"; ok=1; }
  qpn=$("$VRNICCTL" qps --state RTS | head -n 1 | sed -E 's/^qpn=(0x[0-9a-f]+).*/\1/')
  echo "+ vrnicctl capture --qp $qpn -c 200 -w - | tshark -r - -T fields -e infiniband.bth.destqp"
  dests=$("$VRNICCTL" capture --qp "$qpn" -c 200 -w - 2>"$VRNIC_TMP/qp-filter.log" |
    tshark -r - -T fields -e infiniband.bth.destqp 2>/dev/null | sort | uniq -c)
  cat "$VRNIC_TMP/qp-filter.log"
  echo "$dests"
  [[ $(awk '{ n += $1 } END { print n }' <<<"$dests") == 200 ]] || { echo "FAIL: want 200 frames"; ok=1; }
  [[ $(wc -l <<<"$dests") == 2 ]] || { echo "FAIL: want the packets of one QP and its peer's"; ok=1; }
  grep -q " $qpn\$" <<<"$dests" || { echo "FAIL: nothing sent to $qpn"; ok=1; }
  vrnic_wait_exit "$cpid" 30 && ((VRNIC_RC == 0)) || { echo "FAIL: client"; ok=1; }
  finish_server
  ((VRNIC_RC == 0)) || { echo "FAIL: server"; ok=1; }
  stop_vrnicd TERM || ok=1
  return "$ok"
}
check "vrnicctl capture --qp through a pipe (-w -): only that QP's packets, with two QPs a side" \
  capture_one_qp

# One capture at a time; a bad --qp or file; a capture whose vrnicd dies ends (status 1) with
# what it had written readable.
capture_errors() {
  local ok=0 pcap=$VRNIC_TMP/dying.pcap log=$VRNIC_TMP/dying.log cpid out
  start_vrnicd || return 1
  "$VRNICCTL" capture -w "$pcap" >"$log" 2>&1 </dev/null &
  cpid=$!
  _vrnic_track "$cpid"
  wait_for 10 "the capture" grep -q capturing "$log" || return 1
  while IFS='|' read -r args status want; do
    # shellcheck disable=SC2086 # args are words
    out=$("$VRNICCTL" capture $args 2>&1)
    local rc=$?
    echo "+ vrnicctl capture $args -> exit $rc: $out"
    [[ $rc == "$status" && $out == *"$want"* ]] || { echo "FAIL: want exit $status and '$want'"; ok=1; }
  done <<EOF
-w $VRNIC_TMP/second.pcap|1|another capture runs on this device
--qp zebra -w $VRNIC_TMP/x.pcap|2|is not a QP number
-w $VRNIC_TMP/no/such/dir/x.pcap|1|no/such/dir/x.pcap
-c 5|2|--write is required
EOF
  local port
  port=$(next_port)
  verbs_pair dying "$port" ib_write_bw -d vrnic0 -x 0 -F -s 4096 -n 100 || ok=1
  echo "+ kill -KILL vrnicd"
  kill -KILL "$VRNICD_PID"
  vrnic_wait_exit "$VRNICD_PID" 10
  VRNICD_PID=
  vrnic_wait_exit "$cpid" 10 || { echo "FAIL: the capture outlived vrnicd"; return 1; }
  cat "$log"
  ((VRNIC_RC == 1)) && grep -q 'vrnicd went away' "$log" || { echo "FAIL: want status 1, 'vrnicd went away'"; ok=1; }
  out=$(tshark -r "$pcap" 2>/dev/null | wc -l)
  echo "tshark reads $out frames"
  ((out > 0)) || { echo "FAIL: the pcap written before vrnicd died is unreadable or empty"; ok=1; }
  return "$ok"
}
check "vrnicctl capture: one at a time (another gets EBUSY), bad arguments, vrnicd killed during a capture" \
  capture_errors

# --help exits 0 for every program; a wrong option exits 2 naming it; the README's synopsis
# has every option --help lists.
options() {
  local ok=0 prog out opt
  for prog in "$VRNICD" "$VRNICCTL" "$BIN/vrnic-run"; do
    echo "+ ${prog##*/} --help"
    "$prog" --help >"$VRNIC_TMP/help.out" 2>&1 || { echo "FAIL: exit status $?"; ok=1; }
    head -n 3 "$VRNIC_TMP/help.out"
    # The options it lists (each at the start of a line of its own), not those its text names.
    grep -oE -- "^ +(-[a-z], ?)?--[a-z][a-z-]*( ['A-Z]|\$| {2,})" "$VRNIC_TMP/help.out" |
      grep -oE -- '--[a-z][a-z-]*' | sort -u >"$VRNIC_TMP/help.opts"
    while read -r opt; do
      grep -q -- "$opt\b" README.md || { echo "FAIL: README does not mention ${prog##*/} $opt"; ok=1; }
    done <"$VRNIC_TMP/help.opts"
  done
  while IFS='|' read -r prog args want; do
    # shellcheck disable=SC2086 # args are words
    out=$("$prog" $args 2>&1)
    local rc=$?
    echo "+ ${prog##*/} $args -> exit $rc: $(head -n 1 <<<"$out")"
    [[ $rc == 2 && $out == *"$want"* ]] || { echo "FAIL: want exit 2 and '$want'"; ok=1; }
  done <<EOF
$VRNICD|--bogus|--bogus
$VRNICD|--workers|--workers
$VRNICD|--workers 0|--workers: a number from 1 to
$VRNICD|--metrics 10.1.2.3:9|not a loopback address
$VRNICD|--exit-idle x|--exit-idle
$VRNICCTL|--bogus stats|--bogus
$VRNICCTL|qps --bogus|--bogus
$VRNICCTL|qps --state SLEEPY|--state
$VRNICCTL|frobnicate|frobnicate
$BIN/vrnic-run|--bogus true|--bogus
EOF
  return "$ok"
}
check "every program's --help exits 0 and its options are in the README; a wrong option exits 2 naming it" \
  options

vrnic_script_finish
