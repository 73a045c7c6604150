# Connection churn on one SRQ (issue 53, item 2), for the catch2 group (one vrnicd) and the
# wire group (across two): build/tests/srq_churn's server on the group's vrnicd, three client
# processes (VRNIC_CLIENT_ENV picks their vrnicd) connecting, sending verified messages and
# tearing down, for SECONDS; no QP that was not torn down may report an error or an event.
# shellcheck shell=bash

SRQ_CHURN=$VRNIC_BUILD_DIR/tests/srq_churn

# srq_churn_run SECONDS
srq_churn_run() {
  local secs=$1 port rc=0 i pids=()
  port=$(next_port)
  # (The server accepts a little longer than the clients connect.)
  "${VRUN[@]}" timeout -k 5 $((secs + 60)) "$SRQ_CHURN" server "$port" $((secs + 3)) \
    >"$VRNIC_TMP/churn.server" 2>&1 </dev/null &
  local spid=$!
  _vrnic_track "$spid"
  wait_for 10 "the churn server to listen" grep -q '^listening=' "$VRNIC_TMP/churn.server"
  echo "+ srq_churn server $port $secs; 3 x srq_churn client 127.0.0.1 $port $secs"
  for i in 1 2 3; do
    env ${VRNIC_CLIENT_ENV:+"$VRNIC_CLIENT_ENV"} "${VRUN[@]}" timeout -k 5 $((secs + 60)) \
      "$SRQ_CHURN" client 127.0.0.1 "$port" "$secs" >"$VRNIC_TMP/churn.client$i" 2>&1 </dev/null &
    pids+=($!)
    _vrnic_track "$!"
  done
  for i in 0 1 2; do
    vrnic_wait_exit "${pids[$i]}" $((secs + 90))
    echo "client $((i + 1)): $(_vrnic_status_word "$VRNIC_RC"): $(tail -n 2 "$VRNIC_TMP/churn.client$((i + 1))" | tr '\n' ' ')"
    ((VRNIC_RC == 0)) || rc=1
  done
  vrnic_wait_exit "$spid" 90
  echo "server: $(_vrnic_status_word "$VRNIC_RC"): $(tail -n 2 "$VRNIC_TMP/churn.server" | tr '\n' ' ')"
  ((VRNIC_RC == 0)) || rc=1
  CHECK_NOTE=$(grep -o 'connections=[0-9]* messages=[0-9]*' "$VRNIC_TMP/churn.server")
  return "$rc"
}
