#!/usr/bin/env bash
# The Catch2 test binaries under build/tests/, every test case counted on its own. They get
# VRNIC_SOCKET (a running vrnicd) and VRNICCTL in their environment.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init catch2

export VRNICD=$VRNIC_BUILD_DIR/control/vrnicd  # daemon_test starts its own daemons
run_catch2_binary unit/unit_tests
# The same unit tests as a developer runs them (issue 19): meson's fast suite, all of it.
meson_fast_suite() {
  vrun timeout -k 5 120 meson test -C "$VRNIC_BUILD_DIR" --suite fast --no-rebuild --print-errorlogs
}
check "meson test --suite fast: the unit and transport tests pass" meson_fast_suite
run_catch2_binary daemon_test
run_catch2_binary verbs_data_test
run_catch2_binary wr_api_test
run_catch2_binary unsupported_test
run_catch2_binary api_test
# RC, UC and UD between two vrnicd over udp under injected faults, every byte verified: 1 GiB
# per RC setting (no faults, loss=1, loss=10, reorder=5, dup=1, corrupt=1), as issue 4 asks.
# The RC QPs use timeout 12 (17 ms): with 1 ms (8) the queueing of 64 large WRs in flight on a
# loaded 2-core machine outlasts the retry budget even without faults.
VRNIC_CATCH2_TIMEOUT=600 VRNIC_WIRE_BYTES=1G VRNIC_WIRE_TIMEOUT=12 run_catch2_binary wire_integrity_test
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
