#!/bin/bash
# tests/rxe/guest_init.sh: the rxe group's VM, from boot to power-off (run as PID 1 by the
# image's /sbin/vrnic-rxe-init, from the control share /mnt/ctl that tests/lib_rxe.sh writes).
#
# Loads rdma_rxe, gives eth0 the addresses in /mnt/ctl/config, makes rxe0 on it, mounts the
# project (read-only, at its host path, so programs built on the host run here by the same
# name; and the build folder likewise), writes /run/rxe.env (RXE_GID4 and RXE_GID6: the indexes of the RoCEv2 GIDs that hold
# the IPv4 and IPv6 addresses), and touches /mnt/ctl/ready. Then it runs jobs: each
# /mnt/ctl/jobs/ID.cmd is run by bash, concurrently with the others, its output in ID.out and
# its exit status in ID.rc; /mnt/ctl/jobs/POWEROFF ends the VM.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
ctl=/mnt/ctl
# shellcheck source=/dev/null disable=SC2153 # VM_IP4, VM_IP6, GID4, GID6, PROJECT, BUILD
. $ctl/config
say() { echo "rxe-vm: $*" >/dev/ttyS0; }
power_off() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 30
}
trap power_off EXIT

mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
hostname rxevm
for m in virtio_net rdma_rxe ib_uverbs rdma_ucm; do modprobe -q $m || say "modprobe $m failed"; done
ip link set lo up
for _ in $(seq 100); do [[ -e /sys/class/net/eth0 ]] && break; sleep 0.1; done
ip addr add "$VM_IP4/24" dev eth0
ip addr add "$VM_IP6/64" dev eth0 nodad
ip link set eth0 up
rdma link add rxe0 type rxe netdev eth0 || say "rdma link add failed"
mkdir -p "$PROJECT"
mount -t 9p -o trans=virtio,version=9p2000.L,ro project "$PROJECT" || say "no project share"
mkdir -p "$BUILD"  # within the project, or a folder of its own (VRNIC_BUILD_DIR)
mount -t 9p -o trans=virtio,version=9p2000.L,ro build "$BUILD" || say "no build share"

# The GID table fills in as the addresses come up.
gid_index() {
  local want=$1 g n
  for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    n=${g##*/}
    [[ $(cat "$g" 2>/dev/null) == "$want" &&
      $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/"$n" 2>/dev/null) == "RoCE v2" ]] &&
      { echo "$n"; return 0; }
  done
  return 1
}
gid4='' gid6=''
for _ in $(seq 200); do
  gid4=$(gid_index "$GID4") && gid6=$(gid_index "$GID6") && break
  sleep 0.1
done
echo "export RXE_DEV=rxe0 RXE_GID4=$gid4 RXE_GID6=$gid6 VM_IP4=$VM_IP4 VM_IP6=$VM_IP6" >/run/rxe.env
ulimit -l unlimited
say "ready: rxe0 GID index $gid4 ($VM_IP4), $gid6 ($VM_IP6)"
touch $ctl/ready

run_job() {
  (
    # shellcheck source=/dev/null
    . /run/rxe.env
    cd /tmp && exec bash "$1.run"
  ) >"$1.out" 2>&1 </dev/null
  echo $? >"$1.rc.tmp"
  mv "$1.rc.tmp" "$1.rc"
}
while [[ ! -e $ctl/jobs/POWEROFF ]]; do
  for f in "$ctl"/jobs/*.cmd; do
    [[ -e $f ]] || continue
    mv "$f" "${f%.cmd}.run" 2>/dev/null && run_job "${f%.cmd}" &
  done
  sleep 0.1
done
