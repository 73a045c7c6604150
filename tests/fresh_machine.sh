#!/usr/bin/env bash
# tests/fresh_machine.sh [REPO [WORKDIR]]: the README's two commands as a new user meets them,
# on a fresh Debian 12 root. Makes a minimal bookworm root with mmdebstrap (from the host's own
# apt sources, as tests/rxe/build_image.sh does), none of the project's packages in it; clones
# REPO (default: this checkout's repository, its HEAD) into a directory of mode 0700 in it
# (/home/dev, as Debian's adduser makes a home); then, chrooted there as root, runs
# `perf/demo.sh` and then `tests/run.sh`, in that order, each timed, and prints both results.
# Exit status: 0 only if both passed. Root only. Needs about 4 GiB of disk under WORKDIR
# (default: a new directory under /var/tmp), which is removed at the end unless
# VRNIC_FRESH_KEEP=1.
#
# Inside, the run has its own /tmp, /run and root file system; it shares with the host what a
# chroot must: the kernel (its modules, namespaces, veths, taps, netem), /dev (tun, kvm,
# hugepages), /proc and /sys. So this checks packages, the build, the checkout's location and
# the suite's time on a machine that has none of them; it cannot check a different kernel,
# kernel state the host changed (sysctls, loaded modules, hugepages reserved), or what CI's
# image has preinstalled beyond a minimal root (here it is less: a stricter test).
set -euo pipefail

((EUID == 0)) || { echo "fresh_machine: needs root (mmdebstrap, chroot)" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=${1:-$here}
work=${2:-$(mktemp -d /var/tmp/vrnic-fresh.XXXXXX)}
root=$work/root
mkdir -p "$work" || { echo "fresh_machine: cannot make $work" >&2; exit 1; }
log=$work/fresh.log

for tool in mmdebstrap git; do
  command -v "$tool" >/dev/null || {
    echo "fresh_machine: $tool missing: apt-get install -y $tool" >&2
    exit 1
  }
done

sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  [[ -s $f ]] && grep -qE '^(deb |Types:.*deb)' "$f" && grep -q bookworm "$f" && sources+=("$f")
done
((${#sources[@]})) || { echo "fresh_machine: no bookworm apt sources under /etc/apt" >&2; exit 1; }

# shellcheck disable=SC2317,SC2013 # called by the EXIT trap; mount points have no spaces
cleanup() {
  local m
  # Whatever the chroot's run left mounted (it runs in a mount namespace of its own, so
  # normally nothing).
  for m in $(awk -v r="$root" '$2 ~ "^"r { print $2 }' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  if [[ ${VRNIC_FRESH_KEEP:-0} == 1 ]]; then
    echo "fresh_machine: kept $work"
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT

echo "fresh_machine: a Debian bookworm root in $root (mmdebstrap, minbase)"
start=$EPOCHSECONDS
# minbase, plus what a cloud image or CI runner has before anyone installs anything: git to
# clone, sudo-less root, certificates, the account tools (useradd), procps.
mmdebstrap --mode=root --variant=minbase --quiet \
  --include=git,ca-certificates,passwd,procps,iproute2,kmod,python3 \
  bookworm "$root" "${sources[@]}"
# The root keeps the host's apt sources: the suite installs its packages from them.
for f in "${sources[@]}"; do cp "$f" "$root$f"; done
echo "fresh_machine: root made in $((EPOCHSECONDS - start)) s"

mkdir -m 0700 "$root/home/dev"
git clone -q "$repo" "$root/home/dev/vrnic"
echo "fresh_machine: cloned $repo ($(git -C "$root/home/dev/vrnic" rev-parse --short HEAD))" \
  "into /home/dev/vrnic (/home/dev mode 0700)"

# The README's commands, in its order, each with its time and exit status.
cat >"$root/fresh-run.sh" <<'RUN'
#!/bin/bash
cd /home/dev/vrnic || exit 1
export HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
t0=$EPOCHSECONDS
perf/demo.sh </dev/null
demo=$?
t1=$EPOCHSECONDS
tests/run.sh </dev/null
suite=$?
t2=$EPOCHSECONDS
echo "fresh_machine: perf/demo.sh exit $demo in $((t1 - t0)) s; tests/run.sh exit $suite in $((t2 - t1)) s"
((demo == 0 && suite == 0))
RUN
chmod +x "$root/fresh-run.sh"

set +e
unshare --mount --propagation private -- bash -c '
  set -e
  root=$1
  # The root a mount point of its own, as / is on a machine: `ip netns exec` makes / a
  # slave mount, which a plain directory cannot be.
  mount --bind "$root" "$root"
  mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
  mount -t tmpfs -o mode=0755 tmpfs "$root/run"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
  mkdir -p "$root/dev/shm" && mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  exec chroot "$root" /fresh-run.sh
' _ "$root" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo "fresh_machine: the README's two commands on a fresh root: $( ((rc == 0)) && echo passed ||
  echo "FAILED (status $rc)"); the suite's last line: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)"
exit "$rc"
