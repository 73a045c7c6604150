#!/usr/bin/env bash
# tests/stress/wire_faults.sh [N] [BUILD_DIR]: runs wire_integrity_test's RC cases under dup=1
# and loss=1 N times each (default 50), as the suite runs them (VRNIC_WIRE_BYTES=1G), and
# prints how many passed. Not part of tests/run.sh: it takes N x ~25 s. A failing run's
# output is kept in $TMPDIR/wire_faults.<case>.<i>.log. Exit status 0 only if all passed.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
n=${1:-50}
build=$(realpath "${2:-build}")
test_bin=$build/tests/wire_integrity_test
[[ -x $test_bin ]] || { echo "wire_faults: no $test_bin (build first: tests/run.sh catch2)" >&2; exit 2; }
export VRNICD=$build/control/vrnicd VRNICCTL=$build/control/vrnicctl
export VRNIC_WIRE_BYTES=${VRNIC_WIRE_BYTES:-1G} VRNIC_WIRE_TIMEOUT=${VRNIC_WIRE_TIMEOUT:-12}
failed=0
for fault in dup=1 loss=1; do
  passed=0
  for ((i = 1; i <= n; i++)); do
    log=${TMPDIR:-/tmp}/wire_faults.$fault.$i.log
    if timeout 600 "$test_bin" -r compact "RC across the wire under $fault: *" >"$log" 2>&1; then
      passed=$((passed + 1))
      rm -f "$log"
    else
      echo "run $i of $fault failed: $log"
    fi
    printf '\r%s: %d of %d passed (run %d)' "$fault" "$passed" "$n" "$i" >&2
  done
  echo >&2
  echo "$fault: $passed of $n passed"
  ((passed == n)) || failed=1
done
exit "$failed"
