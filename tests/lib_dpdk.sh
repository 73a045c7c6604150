# shellcheck shell=bash
# tests/lib_dpdk.sh: vrnicd on the dpdk port, for tests/integration/65_dpdk.sh and
# perf/bench_dpdk.sh. Source it after tests/lib.sh (and vrnic_tmp_init).
#
#   need_dpdk                     root and the dpdk module, or a message saying which is missing
# and, from tests/lib_hosts.sh (sourced here), named vrnicd and verbs programs between them.

DPDK_MODULE=$VRNIC_BUILD_DIR/dataplane/dpdk/vrnic_port_dpdk.so
EAL_BASE="--no-huge -m 256 --no-pci"
# af_packet's default ring drops most 1500 B frames on this machine; this one does not.
AF_PACKET_RING="blocksz=65536,framesz=2048,framecnt=32768"
# shellcheck source=tests/lib_hosts.sh
source "$VRNIC_ROOT/tests/lib_hosts.sh"
DIR=$HOSTS_DIR

need_dpdk() {
  ((EUID == 0)) || { echo "network namespaces and DPDK's devices need root"; return 1; }
  [[ -e $DPDK_MODULE ]] || {
    echo "the dpdk module is not built ($DPDK_MODULE): is libdpdk-dev installed?"
    return 1
  }
}

