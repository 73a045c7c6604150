#!/usr/bin/env bash
# rdma-core v44's own test suite (the pyverbs tests Debian's python3-pyverbs ships in
# /usr/share/doc/rdma-core/tests, some files gzipped) against vrnic0, unpacked into this
# run's temp folder (issue 18). tests/tools/pyverbs_suite.py runs it as run_tests.py does and
# passes only with 0 failures, 0 errors, at least 86 tests passed (what the kernel's
# Soft-RoCE passes of the same suite) and no skip but those of capabilities vrnic does not
# report. Twice: on a loop-port vrnicd, and on one with a udp port on 127.0.0.1.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init pyverbs

SUITE_SRC=/usr/share/doc/rdma-core/tests
SUITE=$VRNIC_TMP/pyverbs-tests
MIN_PASS=86

unpack() {
  [[ -d $SUITE_SRC ]] || { echo "$SUITE_SRC missing (package python3-pyverbs)"; return 1; }
  cp -r "$SUITE_SRC" "$SUITE" && gunzip -f "$SUITE"/*.gz 2>/dev/null
  [[ -f $SUITE/run_tests.py && -f $SUITE/test_qp.py ]] ||
    { echo "no run_tests.py / test_qp.py in $SUITE after unpacking"; return 1; }
  echo "$(find "$SUITE" -name 'test_*.py' | wc -l) test modules in $SUITE"
}

# suite NAME: the whole suite on $VRNIC_SOCKET's vrnic0; the summary lines in the check log.
suite() {
  local out=$VRNIC_TMP/pyverbs.$1.log rc
  echo "+ run_tests.py --dev vrnic0 (through tests/tools/pyverbs_suite.py, --min-pass $MIN_PASS)"
  vrnic_fg "${VRUN[@]}" timeout -k 5 "$(vrnic_timeout 240)" /usr/bin/python3 \
    "$VRNIC_ROOT/tests/tools/pyverbs_suite.py" "$SUITE" --dev vrnic0 --min-pass "$MIN_PASS" \
    >"$out" 2>&1 </dev/null
  rc=$?
  # What did not pass, then the verdict and the skips by reason.
  grep -aE '\.\.\. (FAIL|ERROR)$|^(FAIL|ERROR):' "$out" | sed 's/^/    /'
  sed -n '/^pyverbs: /,$p' "$out" | sed 's/^/    /'
  if ((rc != 0)); then
    echo "FAIL: $(_vrnic_status_word "$rc"); the tracebacks:"
    sed -n '/^=\{20,\}/,/^-\{20,\} *$/p' "$out" | head -80 | sed 's/^/    /'
    vrnic_tail "$out" 10
    return 1
  fi
  CHECK_NOTE=$(sed -n "s/^pyverbs: //p" "$out")
}

loop_port() {
  ensure_vrnicd || return 1
  suite loop
}

udp_port() {
  local p
  p=$(free_udp_port) || return 1
  start_vrnicd --udp 127.0.0.1 --udp-port "$p" || return 1
  echo "vrnicd with a udp port on 127.0.0.1:$p"
  suite udp
}

if check "unpack rdma-core's pyverbs suite" unpack; then
  check "rdma-core pyverbs suite on vrnic0 (loop port): 0 failed, 0 errors, >= $MIN_PASS passed" \
    loop_port
  check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop
  check "rdma-core pyverbs suite on vrnic0 (udp port, 127.0.0.1)" udp_port
  check "vrnicd (udp port): no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop
fi
vrnic_script_finish
