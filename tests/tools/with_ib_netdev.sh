#!/usr/bin/env bash
# with_ib_netdev.sh DEV IFACE CMD...: CMD with /sys/class/infiniband/DEV/device/net/IFACE
# there, as the kernel shows a RoCE device's network interface (rdma-core's pyverbs tests read
# it to find the device's IP address). vrnic has no sysfs of its own: in a private mount
# namespace (`ip netns exec` gives one) /sys/class becomes a tmpfs of links to the real
# entries, plus that folder. Root only; nothing outside the namespace changes.
set -euo pipefail
dev=$1 iface=$2
shift 2
real=$(mktemp -d /run/vrnic-sysclass.XXXXXX)
mount --bind /sys/class "$real"
mount -t tmpfs -o mode=0755 vrnic-sysclass /sys/class
for entry in "$real"/*; do ln -s "$entry" "/sys/class/${entry##*/}"; done
mkdir -p "/sys/class/infiniband/$dev/device/net/$iface"
exec "$@"
