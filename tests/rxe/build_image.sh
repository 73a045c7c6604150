#!/usr/bin/env bash
# tests/rxe/build_image.sh CACHE: builds the rxe group's VM image into CACHE, from Debian
# bookworm's own packages: the distribution kernel (rdma_rxe is one of its modules), rdma-core
# 44, perftest, ibverbs-utils and rdmacm-utils, as a user of the kernel's Soft-RoCE has them.
# No systemd: the kernel starts /sbin/vrnic-rxe-init, which hands over to the script the test
# puts on the VM's control share (tests/rxe/guest_init.sh), so that changing the guest needs
# no rebuild.
#
# The packages come through the host's own apt sources (the files under /etc/apt), so no
# mirror is named here; the image keeps no apt sources (the VM has no network to use them).
# Writes CACHE/{vmlinuz,initrd.img,rootfs.img,versions.txt} and, last, CACHE/stamp (this
# script's checksum), which is what tells a later run that the image is whole and current.
# Needs root (mmdebstrap --mode=root) and about 1.5 GiB of disk.
set -euo pipefail
cache=${1:?usage: build_image.sh CACHE}
stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  [[ -s $f ]] && grep -qE '^(deb |Types:.*deb)' "$f" && grep -q bookworm "$f" && sources+=("$f")
done
((${#sources[@]})) || { echo "build_image: no bookworm apt sources under /etc/apt" >&2; exit 1; }

packages=(linux-image-amd64 initramfs-tools kmod udev iproute2 procps
  rdma-core ibverbs-utils ibverbs-providers libibverbs1 perftest rdmacm-utils)
root=$cache/root.tmp
rm -rf "$root" "$cache/stamp"
mkdir -p "$cache"
mmdebstrap --mode=root --variant=minbase --quiet \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --include="$(IFS=,; echo "${packages[*]}")" bookworm "$root" "${sources[@]}"

rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*
echo rxevm >"$root/etc/hostname"
# PID 1: mount the control share (9p) and run the test's guest script from it.
cat >"$root/sbin/vrnic-rxe-init" <<'INIT'
#!/bin/bash
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
modprobe -q 9pnet_virtio; modprobe -q 9p
mkdir -p /mnt/ctl
if mount -t 9p -o trans=virtio,version=9p2000.L ctl /mnt/ctl && [[ -f /mnt/ctl/guest_init.sh ]]; then
  exec bash /mnt/ctl/guest_init.sh
fi
echo "vrnic-rxe-init: no control share" >/dev/console
echo o >/proc/sysrq-trigger
sleep 10
INIT
chmod 0755 "$root/sbin/vrnic-rxe-init"

kernel=$(find "$root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
cp "$root/boot/vmlinuz-$kernel" "$cache/vmlinuz"
cp "$root/boot/initrd.img-$kernel" "$cache/initrd.img"
{
  echo "kernel $kernel"
  # shellcheck disable=SC2016 # dpkg-query's format, not the shell's
  chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' linux-image-amd64 rdma-core \
    ibverbs-providers perftest ibverbs-utils rdmacm-utils
} >"$cache/versions.txt"
mb=$(($(du -sm "$root" | cut -f1) * 13 / 10 + 256))
mkfs.ext4 -q -F -L rxevm -d "$root" "$cache/rootfs.img" "${mb}M"
rm -rf "$root"
echo "$stamp" >"$cache/stamp"
