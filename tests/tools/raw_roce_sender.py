#!/usr/bin/python3
"""raw_roce_sender: RoCEv2 UD datagrams built by hand and sent on a raw IPv4 socket, each
with an IPv4 identification of its own choosing, as a kernel RoCE sender (rdma_rxe) or a NIC
numbers them -- which the ICRC covers and a UDP socket's receiver cannot see.

For each sequence number 0..COUNT-1 it sends one UD SEND only (BTH, DETH with the Q_Key,
payload: the number, 4 bytes big-endian, then ud_sink's pattern) with a random IP ID (never
0, so the receiver cannot just assume it), DF set, UDP checksum 0; its ICRC is computed with
that ID (roce_pcap_check.py's roce_icrc, written from ROCE.md). --corrupt K also sends K
copies, each with one random bit flipped (payload or ICRC), which must all be dropped.

  raw_roce_sender.py --src IP --dst IP --port UDP --qpn N --count N --size BYTES
                     [--qkey Q] [--corrupt K] [--seed S]
Prints one summary line. Needs CAP_NET_RAW (root).
"""

import argparse
import os
import random
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roce_pcap_check import roce_icrc  # noqa: E402

UD_SEND_ONLY = 0x64
SRC_QPN = 0x123


def pattern(seq, size):
    return bytes(((seq * 131 + i * 7 + (i >> 8)) & 0xFF) for i in range(4, size))


def packet(a, seq, ip_id):
    payload = struct.pack(">I", seq) + pattern(seq, a.size)
    pad = -len(payload) % 4
    bth = struct.pack(">BBHII", UD_SEND_ONLY, 0x40 | (pad << 4), 0xFFFF, a.qpn & 0xFFFFFF,
                      seq & 0xFFFFFF)
    deth = struct.pack(">II", a.qkey, SRC_QPN)
    transport = bth + deth + payload + b"\0" * pad
    udp_len = 8 + len(transport) + 4
    sport = 0xC000 | (seq & 0x3FFF)
    udp = struct.pack(">HHHH", sport, a.port, udp_len, 0)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ip_id, 0x4000, 64, 17, 0,
                     socket.inet_aton(a.src), socket.inet_aton(a.dst))
    ip = ip[:10] + struct.pack(">H", checksum(ip)) + ip[12:]
    icrc = roce_icrc(ip, udp, transport)
    return ip + udp + transport + struct.pack("<I", icrc)


def checksum(header):
    s = sum(struct.unpack(">%dH" % (len(header) // 2), header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--qpn", type=int, required=True)
    ap.add_argument("--qkey", type=lambda v: int(v, 0), default=0x11111111)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--corrupt", type=int, default=0)
    ap.add_argument("--seed", type=int, default=25570)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    ids = []
    for seq in range(a.count):
        ip_id = rng.randrange(1, 0x10000)
        ids.append(ip_id)
        s.sendto(packet(a, seq, ip_id), (a.dst, 0))
        if seq < a.corrupt:
            bad = bytearray(packet(a, seq, rng.randrange(1, 0x10000)))
            bit = rng.randrange(8 * (20 + 8 + 12 + 8), 8 * len(bad))  # after BTH byte 4
            bad[bit // 8] ^= 1 << (bit % 8)
            s.sendto(bytes(bad), (a.dst, 0))
    print("sent %d datagrams (IPv4 IDs %d..%d, first %s) and %d with one bit flipped" %
          (a.count, min(ids), max(ids), ids[:4], min(a.corrupt, a.count)))


if __name__ == "__main__":
    main()
