#!/usr/bin/env bash
# ABI of the drop-in libibverbs.so.1: tests/abi_check.sh (SONAME, symbol versions, ...).
# shellcheck source=tests/lib.sh disable=SC2317 # checks are called through check()
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vrnic_script_init abi

abi_check() {
  local lib=$VRNIC_PROVIDER_DIR/libibverbs.so.1
  if [[ ! -f tests/abi_check.sh ]]; then
    echo "tests/abi_check.sh is missing"
    return 1
  fi
  require_provider || return 1
  echo "+ bash tests/abi_check.sh ${lib#"$VRNIC_ROOT"/}"
  vrnic_fg timeout -k 5 "$(vrnic_timeout 120)" bash tests/abi_check.sh "${lib#"$VRNIC_ROOT"/}"
}

check "tests/abi_check.sh build/provider/libibverbs.so.1" abi_check

vrnic_script_finish
