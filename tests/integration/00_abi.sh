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

# pyverbs (Debian's python3-pyverbs) imports against our library -- mlx5dv included, whose
# module links the real libmlx5 -- and drives vrnic0 through it.
pyverbs_loads() {
  require_provider || return 1
  ensure_vrnicd || return 1
  echo "+ python3 -c 'import pyverbs.device, pyverbs.qp, pyverbs.providers.mlx5.mlx5dv; ...'"
  vrun timeout -k 5 60 /usr/bin/python3 - <<'PY'
import pyverbs.device as d, pyverbs.qp, pyverbs.providers.mlx5.mlx5dv
maps = open('/proc/self/maps').read()
lib = [l.split()[-1] for l in maps.splitlines() if 'libibverbs.so' in l]
assert lib and all('build/provider' in p for p in lib), lib
names = [dev.name.decode() for dev in d.get_device_list()]
assert names == ['vrnic0'], names
with d.Context(name='vrnic0') as ctx:
    attr = ctx.query_device()
    port = ctx.query_port(1)
    assert attr.max_qp > 0 and port.state == 4, (attr.max_qp, port.state)
print('pyverbs on', lib[0], ': vrnic0 max_qp', attr.max_qp)
PY
}

check "tests/abi_check.sh build/provider/libibverbs.so.1" abi_check
check "pyverbs (and its mlx5dv module) loads and drives vrnic0" pyverbs_loads
[[ -n $VRNICD_PID ]] && check "vrnicd: no objects left, exits 0 on SIGTERM" vrnicd_idle_and_stop

vrnic_script_finish
