#!/usr/bin/env bash
# rdma-core v44's own test suite (the pyverbs tests Debian's python3-pyverbs ships in
# /usr/share/doc/rdma-core/tests, some files gzipped) against vrnic0, unpacked into this
# run's temp folder (issue 18). tests/tools/pyverbs_suite.py runs it as run_tests.py does and
# passes only with 0 failures, 0 errors, at least MIN_PASS tests passed (the kernel's
# Soft-RoCE passes 86 of the same suite) and no skip but those of capabilities vrnic does not
# report. Twice: on a loop-port vrnicd, and on one with a udp port on 127.0.0.1, each with
# `lo` shown as vrnic0's interface in sysfs (tests/tools/with_ib_netdev.sh), which its
# rdma_cm tests need. Then those rdma_cm tests (test_rdmacm.py, issue 20) once more over a
# veth: in a network namespace of the test's own, vrnicd with a udp port on the veth.
# shellcheck source=tests/lib.sh disable=SC2317,SC2119 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init pyverbs
# shellcheck source=tests/lib_hosts.sh
source "$VRNIC_ROOT/tests/lib_hosts.sh"

SUITE_SRC=/usr/share/doc/rdma-core/tests
SUITE=$VRNIC_TMP/pyverbs-tests
# What vrnic passed when the last capability landed (imported objects, issue 32); the
# kernel's Soft-RoCE passes 86.
MIN_PASS=141

# The ODP tests of huge pages (test_odp_rc_huge_*) skip when none are reserved: reserve a few
# 2 MiB pages for the run, as root may, and give them back after.
HUGE=/proc/sys/vm/nr_hugepages
huge_pages() {
  ((EUID == 0)) || { echo "needs root (vm.nr_hugepages)"; return 1; }
  local had
  had=$(<"$HUGE") || return 1
  ((had >= 8)) && { echo "$had huge pages reserved already"; return 0; }
  vrnic_on_cleanup "echo $had >$HUGE"
  echo 8 >"$HUGE" && (($(<"$HUGE") >= 8)) || { echo "could not reserve 8 huge pages"; return 1; }
  echo "8 huge pages of 2 MiB reserved for the run (were $had)"
}

unpack() {
  [[ -d $SUITE_SRC ]] || { echo "$SUITE_SRC missing (package python3-pyverbs)"; return 1; }
  cp -r "$SUITE_SRC" "$SUITE" && gunzip -f "$SUITE"/*.gz 2>/dev/null
  [[ -f $SUITE/run_tests.py && -f $SUITE/test_qp.py ]] ||
    { echo "no run_tests.py / test_qp.py in $SUITE after unpacking"; return 1; }
  echo "$(find "$SUITE" -name 'test_*.py' | wc -l) test modules in $SUITE"
}

# suite NAME [ARGS]: the whole suite on $VRNIC_SOCKET's vrnic0 (or what ARGS of
# pyverbs_suite.py choose, through the command prefix SUITE_IN if set); the summary lines in
# the check log.
suite() {
  local out=$VRNIC_TMP/pyverbs.$1.log rc args=("${@:2}")
  ((${#args[@]})) || args=(--min-pass "$MIN_PASS")
  local in=()
  [[ -n ${SUITE_IN:-} ]] && read -ra in <<<"$SUITE_IN"
  echo "+ ${in[*]} run_tests.py --dev vrnic0 (through tests/tools/pyverbs_suite.py, ${args[*]})"
  vrnic_fg "${VRUN[@]}" "${in[@]}" timeout -k 5 "$(vrnic_timeout 240)" /usr/bin/python3 \
    "$VRNIC_ROOT/tests/tools/pyverbs_suite.py" "$SUITE" --dev vrnic0 "${args[@]}" \
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

# The device's interface in sysfs, as the kernel shows a RoCE device's: `lo`, which holds
# 127.0.0.1, the address of both ports below. With it the suite's rdma_cm tests run too (in a
# mount namespace of their own: nothing outside it changes).
ON_LO="unshare -m --propagation private $VRNIC_ROOT/tests/tools/with_ib_netdev.sh vrnic0 lo"

loop_port() {
  ((EUID == 0)) || { echo "needs root (a mount namespace for vrnic0's sysfs entry)"; return 1; }
  ensure_vrnicd || return 1
  SUITE_IN=$ON_LO suite loop
}

udp_port() {
  local p
  p=$(free_udp_port) || return 1
  start_vrnicd --udp 127.0.0.1 --udp-port "$p" || return 1
  echo "vrnicd with a udp port on 127.0.0.1:$p"
  SUITE_IN=$ON_LO suite udp
}

# test_rdmacm.py again over a veth in a namespace of its own, not lo: 10 tests (connections
# sync and async, rejected, UD, read, write, an external QP, multicast joins and leave).
RDMACM_NS=vrnic-py-$$
rdmacm_tests() {
  ((EUID == 0)) || { echo "needs root (network and mount namespaces)"; return 1; }
  vrnic_on_cleanup "ip netns del $RDMACM_NS 2>/dev/null"
  ip netns add "$RDMACM_NS" && ip -n "$RDMACM_NS" link set lo up &&
    ip -n "$RDMACM_NS" link add vpy0 type veth peer name vpy1 &&
    ip -n "$RDMACM_NS" addr add 10.201.0.1/24 dev vpy0 &&
    ip -n "$RDMACM_NS" link set vpy0 up && ip -n "$RDMACM_NS" link set vpy1 up || return 1
  host_vrnicd py "$RDMACM_NS" --udp 10.201.0.1 || return 1
  VRNIC_SOCKET=${SOCK[py]} SUITE_IN="ip netns exec $RDMACM_NS \
    $VRNIC_ROOT/tests/tools/with_ib_netdev.sh vrnic0 vpy0" suite rdmacm --only test_rdmacm \
    --min-pass 10
}

if check "unpack rdma-core's pyverbs suite" unpack &&
  check "huge pages for the ODP huge-page tests" huge_pages; then
  check "rdma-core pyverbs suite on vrnic0 (loop port): 0 failed, 0 errors, >= $MIN_PASS passed" \
    loop_port
  check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop
  check "rdma-core pyverbs suite on vrnic0 (udp port, 127.0.0.1)" udp_port
  check "vrnicd (udp port): no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop
  check "rdma-core test_rdmacm.py on vrnic0 (a veth in a namespace): 0 failed, >= 10 passed" \
    rdmacm_tests
  check "vrnicd (namespace): no objects left, exit 0" stop_hosts
fi
vrnic_script_finish
