# shellcheck shell=bash
# tests/lib_rxe.sh: a peer that no one here wrote -- Linux's Soft-RoCE (rdma_rxe) in a QEMU VM
# -- for the rxe group. Source it after tests/lib.sh (and vrnic_tmp_init). Root only.
#
#   rxe_image                  the VM image: reused from $RXE_CACHE when current, else built
#                              (tests/rxe/build_image.sh, ~2 minutes); says which
#   rxe_vm_up                  network namespace $RXE_NS with a tap (host side $RXE_HOST_IP4
#                              and $RXE_HOST_IP6), and the VM on it ($RXE_VM_IP4, $RXE_VM_IP6),
#                              booted and ready; removed again at cleanup
#   rxe_run SECS 'CMD'         CMD (bash) in the VM, its output here; its exit status
#   rxe_start 'CMD' / rxe_wait ID SECS    the same, in the background (a server)
#   rxe_wait_listen PORT SECS  until a TCP server in the VM listens on PORT
#
# In the VM, jobs see RXE_DEV (rxe0), RXE_GID4 and RXE_GID6 (the GID indexes of its IPv4 and
# IPv6 addresses) and find the project at its host path (read-only).
#
# The VM runs under TCG (software emulation) unless VRNIC_RXE_ACCEL=kvm: this workplace's
# /dev/kvm is a PVM hypervisor, which hangs Debian's stock kernel at boot, and only a host
# whose kvm_intel or kvm_amd module is loaded is taken to have a real one. TCG makes the peer
# slow (tens of MB/s), which these tests do not time.
#
# Settings: VRNIC_RXE_CACHE (image folder, default /var/cache/vrnic-rxe), VRNIC_RXE_ACCEL
# (kvm or tcg), VRNIC_RXE_BOOT_TIMEOUT (seconds, default 300).

RXE_CACHE=${VRNIC_RXE_CACHE:-/var/cache/vrnic-rxe}
RXE_NS=vrnic-rxe-$$
RXE_TAP=vrxtap0
RXE_HOST_IP4=10.77.0.1 RXE_VM_IP4=10.77.0.2
RXE_HOST_IP6=fd77::1 RXE_VM_IP6=fd77::2
RXE_CTL=$VRNIC_TMP/rxe-ctl
RXE_CONSOLE=$VRNIC_TMP/rxe-console.log
RXE_QEMU_PID=
# Host tools the group needs beyond the suite's.
# shellcheck disable=SC2034 # used by the scripts that source this file
RXE_PACKAGES=(mmdebstrap qemu-system-x86 e2fsprogs tcpdump)

# rxe_image_current: the image in $RXE_CACHE is whole and made by this build_image.sh.
rxe_image_current() {
  local stamp
  stamp=$(sha256sum "${VRNIC_ROOT:-.}/tests/rxe/build_image.sh" | cut -d' ' -f1)
  [[ $(cat "$RXE_CACHE/stamp" 2>/dev/null) == "$stamp" ]]
}

# shellcheck disable=SC2034 # CHECK_NOTE is read by check()
rxe_image() {
  # tests/run.sh may have started the build at the beginning of the run.
  if [[ -n ${VRNIC_RXE_PREBUILD_PID:-} ]] && _vrnic_running "$VRNIC_RXE_PREBUILD_PID"; then
    echo "waiting for the image build tests/run.sh started (log: $VRNIC_RXE_PREBUILD_LOG)"
    local deadline=$((EPOCHSECONDS + 900))
    while _vrnic_running "$VRNIC_RXE_PREBUILD_PID" && ((EPOCHSECONDS < deadline)); do sleep 1; done
    vrnic_tail "$VRNIC_RXE_PREBUILD_LOG" 5
    if rxe_image_current; then
      sed 's/^/    /' "$RXE_CACHE/versions.txt"
      CHECK_NOTE="built beside the first groups"
      return 0
    fi
    echo "the background build did not finish the image; building it here"
  fi
  if rxe_image_current; then
    echo "reusing the VM image in $RXE_CACHE:"
    sed 's/^/    /' "$RXE_CACHE/versions.txt"
    CHECK_NOTE="reused"
    return 0
  fi
  echo "building the VM image in $RXE_CACHE (Debian bookworm, mmdebstrap; about 2 minutes)"
  vrnic_fg timeout -k 10 900 "$VRNIC_ROOT/tests/rxe/build_image.sh" "$RXE_CACHE" || {
    echo "FAIL: the image build failed"
    return 1
  }
  sed 's/^/    /' "$RXE_CACHE/versions.txt"
  CHECK_NOTE="built"
}

# The control share: the guest's script, its addresses and the jobs folder.
_rxe_write_ctl() {
  rm -rf "$RXE_CTL"
  mkdir -p "$RXE_CTL/jobs" || return 1
  cp "$VRNIC_ROOT/tests/rxe/guest_init.sh" "$RXE_CTL/"
  cat >"$RXE_CTL/config" <<EOF
VM_IP4=$RXE_VM_IP4
VM_IP6=$RXE_VM_IP6
GID4=0000:0000:0000:0000:0000:ffff:0a4d:0002
GID6=fd77:0000:0000:0000:0000:0000:0000:0002
PROJECT=$VRNIC_ROOT
BUILD=$VRNIC_BUILD_DIR
EOF
}

_rxe_accel() {
  local accel=${VRNIC_RXE_ACCEL:-}
  if [[ -z $accel ]]; then
    accel=tcg
    [[ -w /dev/kvm && (-d /sys/module/kvm_intel || -d /sys/module/kvm_amd) ]] && accel=kvm
  fi
  case $accel in
    kvm) echo "-accel kvm -cpu host" ;;
    *) echo "-accel tcg,thread=multi,tb-size=256 -cpu max" ;;
  esac
}

rxe_vm_up() {
  local deadline accel
  [[ -f $RXE_CACHE/stamp ]] || { echo "no VM image (rxe_image first)"; return 1; }
  ip netns add "$RXE_NS" || return 1
  vrnic_on_cleanup "ip netns del $RXE_NS 2>/dev/null"
  ip -n "$RXE_NS" link set lo up &&
    ip -n "$RXE_NS" tuntap add dev "$RXE_TAP" mode tap &&
    ip -n "$RXE_NS" addr add "$RXE_HOST_IP4/24" dev "$RXE_TAP" &&
    ip -n "$RXE_NS" addr add "$RXE_HOST_IP6/64" dev "$RXE_TAP" nodad &&
    ip -n "$RXE_NS" link set "$RXE_TAP" up || return 1
  _rxe_write_ctl || return 1
  accel=$(_rxe_accel)
  echo "booting the VM ($accel) in netns $RXE_NS"
  # shellcheck disable=SC2086 # accel holds several arguments
  ip netns exec "$RXE_NS" qemu-system-x86_64 -name vrnic-rxe -machine q35 $accel -smp 2 -m 2048 \
    -nodefaults -no-user-config -display none -vga none -no-reboot \
    -kernel "$RXE_CACHE/vmlinuz" -initrd "$RXE_CACHE/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1 quiet init=/sbin/vrnic-rxe-init" \
    -drive "file=$RXE_CACHE/rootfs.img,if=virtio,format=raw,snapshot=on" \
    -fsdev "local,id=ctl,path=$RXE_CTL,security_model=none" \
    -device virtio-9p-pci,fsdev=ctl,mount_tag=ctl \
    -fsdev "local,id=project,path=$VRNIC_ROOT,security_model=none,readonly=on" \
    -device virtio-9p-pci,fsdev=project,mount_tag=project \
    -fsdev "local,id=build,path=$VRNIC_BUILD_DIR,security_model=none,readonly=on" \
    -device virtio-9p-pci,fsdev=build,mount_tag=build \
    -netdev "tap,id=n0,ifname=$RXE_TAP,script=no,downscript=no" \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02 \
    -object rng-random,id=rng0,filename=/dev/urandom -device virtio-rng-pci,rng=rng0 \
    -serial "file:$RXE_CONSOLE" </dev/null >"$VRNIC_TMP/qemu.log" 2>&1 &
  RXE_QEMU_PID=$!
  _vrnic_track "$RXE_QEMU_PID"
  vrnic_on_cleanup "_rxe_power_off"
  deadline=$((EPOCHSECONDS + ${VRNIC_RXE_BOOT_TIMEOUT:-300}))
  until [[ -e $RXE_CTL/ready ]]; do
    if ! _vrnic_running "$RXE_QEMU_PID" || ((EPOCHSECONDS > deadline)); then
      echo "FAIL: the VM did not come up; qemu and console:"
      vrnic_tail "$VRNIC_TMP/qemu.log" 10
      vrnic_tail "$RXE_CONSOLE" 20
      return 1
    fi
    sleep 0.2
  done
  grep -a 'rxe-vm:' "$RXE_CONSOLE" | sed 's/^/    /'
}

# Cleanup: a clean power-off first (the VM's disk is a snapshot, nothing to lose); the
# process tracking kills qemu if it is still there.
_rxe_power_off() {
  [[ -d $RXE_CTL/jobs ]] && : >"$RXE_CTL/jobs/POWEROFF"
  [[ -n $RXE_QEMU_PID ]] && vrnic_wait_exit "$RXE_QEMU_PID" 10
  return 0
}

# rxe_start 'CMD': submits CMD; prints the job's id (unique without shared state: callers run
# it in a subshell).
rxe_start() {
  local id=job-${EPOCHREALTIME/[.,]/}-$BASHPID-$RANDOM
  printf '%s\n' "$1" >"$RXE_CTL/jobs/$id.tmp" && mv "$RXE_CTL/jobs/$id.tmp" "$RXE_CTL/jobs/$id.cmd"
  echo "$id"
}

# rxe_wait ID SECS: waits for job ID (SECS at most), prints its output, returns its status
# (124 when it did not end in time: the job itself must be bounded with `timeout`).
rxe_wait() {
  local id=$1 deadline=$((EPOCHSECONDS + $2)) rc
  while [[ ! -e $RXE_CTL/jobs/$id.rc ]]; do
    if ((EPOCHSECONDS > deadline)) || ! _vrnic_running "$RXE_QEMU_PID"; then
      cat "$RXE_CTL/jobs/$id.out" 2>/dev/null
      echo "(VM job $id did not finish within $2 s)"
      return 124
    fi
    sleep 0.1
  done
  cat "$RXE_CTL/jobs/$id.out"
  rc=$(<"$RXE_CTL/jobs/$id.rc")
  return "${rc:-125}"
}

rxe_run() {
  local id
  id=$(rxe_start "timeout -k 5 $1 bash -c $(printf '%q' "$2")") || return 1
  rxe_wait "$id" $(($1 + 15))
}

rxe_wait_listen() {
  rxe_run "$2" "until ss -Hltn '( sport = :$1 )' | grep -q .; do sleep 0.1; done"
}
