#!/usr/bin/env bash
# perf/demo.sh: vrnic's main job in one command. Installs missing Debian packages (as root; a
# clear message otherwise), configures and builds vrnic, starts vrnicd, and runs perftest's
# ib_write_bw server and client through vrnic (device vrnic0, GID index 0, 127.0.0.1),
# printing perftest's bandwidth table. Stops vrnicd at the end.
#
# Usage: perf/demo.sh [extra ib_write_bw options, e.g. -D 5 or -n 20000]
# Environment: VRNIC_SKIP_SETUP=1 skips the package and build steps.

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=tests/lib.sh
source tests/lib.sh

DEMO_START=$(vrnic_now_us)
# Each step with the seconds since the demo started.
say() { printf '\n== %s  (at %s s)\n' "$*" "$(vrnic_elapsed "$DEMO_START")"; }

vrnic_tmp_init || exit 1
: "${VRNIC_TEST_TIMEOUT:=300}" # per perftest process; extra options may ask for long runs

if [[ ${VRNIC_SKIP_SETUP:-0} != 1 ]]; then
  say "1/4 Debian packages"
  vrnic_install_packages "${VRNIC_BUILD_PACKAGES[@]}" || exit 1
  say "2/4 build (meson + ninja)"
  # Only what the demo runs: the rest builds when tests/run.sh needs it.
  vrnic_build control/vrnicd control/vrnicctl provider/libibverbs.so.1.14.44 || exit 1
fi

say "3/4 start vrnicd"
require_provider || exit 1
# A private socket, so that the demo never disturbs a vrnicd you are already running.
if ! start_vrnicd; then
  echo "demo: vrnicd did not start" >&2
  exit 1
fi

say "4/4 ib_write_bw through vrnic0"
port=$(next_port)
args=(ib_write_bw -d vrnic0 -x 0 -F -s 65536 "$@" -p "$port")
echo "By hand, this is (vrnicd on its default socket, perftest's default TCP port):"
echo "  build/control/vrnicd &"
hand="LD_LIBRARY_PATH=build/provider ib_write_bw -d vrnic0 -x 0 -F -s 65536${*:+ $*}"
echo "  $hand &"
echo "  $hand 127.0.0.1"
echo
status=0
if ! start_server demo "$port" "${args[@]}"; then
  status=1
else
  echo "(server listening on TCP port $port; running the client)"
  echo
  run_client demo "${args[@]}" 127.0.0.1
  cat "$CLIENT_LOG"
  echo "(the bandwidth table at $(vrnic_elapsed "$DEMO_START") s since the demo started)"
  finish_server
  srv=$VRNIC_RC
  if ((CLIENT_RC != 0 || srv != 0)); then
    echo
    echo "demo: FAILED (client: $(_vrnic_status_word "$CLIENT_RC"), server: $(_vrnic_status_word "$srv"))"
    echo "--- server output:"
    vrnic_tail "$SERVER_LOG" 30
    status=1
  elif [[ -z $(perftest_parse "$CLIENT_LOG") ]]; then
    echo "demo: FAILED: no bandwidth table in the client's output"
    status=1
  fi
fi

echo
if ! vrnicd_check_alive; then
  status=1
elif ! stop_vrnicd TERM; then
  status=1
fi
((status == 0)) && echo "demo: OK"
exit "$status"
