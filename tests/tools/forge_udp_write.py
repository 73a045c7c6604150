#!/usr/bin/python3
"""forge_udp_write: an RDMA WRITE forged by a local user with no access to vrnicd's socket,
from an ordinary UDP socket on 127.0.0.1 (no privilege) to a vrnicd's udp port on
127.0.0.1: the source address is vrnicd's own, so the packet looks as if it came from the
peer of a QP connected over the loop port (issue 28, row 8). vrnicd must drop it.

Sends COUNT copies of one RC RDMA WRITE ONLY (BTH, RETH, 64 bytes of 0xAB) to QPN at PSN,
rkey RKEY, address ADDR, its ICRC right for the IPv4 header the kernel sends it with (DF
set, unconnected: IP ID 0).

  forge_udp_write.py --port UDP --qpn N --psn N --rkey K --addr A [--count N]
Prints one summary line.
"""

import argparse
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roce_pcap_check import roce_icrc  # noqa: E402

RC_RDMA_WRITE_ONLY = 0x0A
LOCAL = "127.0.0.1"


def main():
    ap = argparse.ArgumentParser()
    num = lambda v: int(v, 0)  # noqa: E731
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--qpn", type=num, required=True)
    ap.add_argument("--psn", type=num, required=True)
    ap.add_argument("--rkey", type=num, required=True)
    ap.add_argument("--addr", type=num, required=True)
    ap.add_argument("--count", type=int, default=16)
    a = ap.parse_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ip_mtu_discover, ip_pmtudisc_do = 10, 2  # <linux/in.h>; not in Python's socket module
    s.setsockopt(socket.IPPROTO_IP, ip_mtu_discover, ip_pmtudisc_do)  # DF, as vrnic sends
    s.bind((LOCAL, 0))
    sport = s.getsockname()[1]
    payload = b"\xab" * 64
    bth = struct.pack(">BBHII", RC_RDMA_WRITE_ONLY, 0, 0xFFFF, a.qpn & 0xFFFFFF,
                      (1 << 31) | (a.psn & 0xFFFFFF))
    reth = struct.pack(">QII", a.addr, a.rkey, len(payload))
    transport = bth + reth + payload
    udp_len = 8 + len(transport) + 4
    udp = struct.pack(">HHHH", sport, a.port, udp_len, 0)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(LOCAL), socket.inet_aton(LOCAL))
    datagram = transport + struct.pack("<I", roce_icrc(ip, udp, transport))
    for _ in range(a.count):
        s.sendto(datagram, (LOCAL, a.port))
    print(f"forged={a.count} from={LOCAL}:{sport} to={LOCAL}:{a.port} qpn={a.qpn:#x} "
          f"psn={a.psn} bytes={len(payload)}")


if __name__ == "__main__":
    main()
