#!/usr/bin/python3
"""bad_frames: sends damaged and foreign Ethernet frames to a raw-packet vrnic port.

Built with scapy, independently of vrnic's code, each frame addressed to the port's MAC and
IPv4 or IPv6 address (or broadcast, or its solicited-node group). Prints one line per frame and, last, what the port's counters
must have gained: `expect malformed=N icrc=M` (frames that are not the port's business --
other EtherTypes, other addresses, other UDP ports, foreign ARP -- count as neither).

  bad_frames.py --iface IF --dst-mac MAC --src-ip A --dst-ip B [--port 4791] [--no-fragments]

--no-fragments leaves out the IPv4 fragments, for ports that never see one: DPDK's
af_packet joins a fanout group that has the kernel reassemble fragments first (a lone one
is never delivered).
"""

import argparse
import struct

from scapy.all import ARP, IP, UDP, Ether, Raw, get_if_hwaddr, sendp
from scapy.layers.inet6 import (IPv6, ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS,
                                ICMPv6NDOptDstLLAddr, IPv6ExtHdrHopByHop)


def bth(opcode, dest_qp=0x10, psn=1, pad=0):
    """A 12-byte BTH (ROCE.md): opcode, SE/M/pad/TVer, P_Key, reserved, dest QP, A, PSN."""
    return struct.pack(">BBHI I", opcode, 0x40 | (pad << 4), 0xFFFF, dest_qp, psn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", required=True)
    ap.add_argument("--dst-mac", required=True)
    ap.add_argument("--src-ip", required=True)
    ap.add_argument("--dst-ip", required=True)
    ap.add_argument("--port", type=int, default=4791)
    ap.add_argument("--no-fragments", action="store_true")
    a = ap.parse_args()
    malformed, icrc, ignored = (ipv6_frames if ":" in a.dst_ip else ipv4_frames)(a)
    for kind, frames in (("malformed", malformed), ("icrc", icrc), ("ignored", ignored)):
        for what, frame in frames:
            print(f"send {kind:9} {what}")
            sendp(frame, iface=a.iface, verbose=False)
    print(f"expect malformed={len(malformed)} icrc={len(icrc)}")


def transport_frames(head, malformed, icrc):
    """Damaged transport headers and wrong ICRCs after a good IP/UDP head (either family)."""
    send_only = bth(0x04) + b"\x00" * 4  # RC SEND only, no payload, ICRC field zero
    malformed.append(("UDP payload of 8 bytes", head / Raw(b"\x04" * 8)))
    malformed.append(("reserved opcode 0x1f", head / Raw(bth(0x1F) + b"\x00" * 4)))
    tver = bytearray(send_only)
    tver[1] |= 0x01
    malformed.append(("transport version 1", head / Raw(bytes(tver))))
    # Shaped right, ICRC wrong: counted as ICRC errors.
    icrc.append(("RC SEND only, ICRC zero", head / Raw(send_only)))
    icrc.append(("RC WRITE only, ICRC random",
                 head / Raw(bth(0x0A) + b"\x00" * 16 + b"\xde\xad\xbe\xef")))


def ipv6_frames(a):
    eth = Ether(dst=a.dst_mac, type=0x86DD)
    ip = IPv6(src=a.src_ip, dst=a.dst_ip)
    udp = UDP(sport=0xC123, dport=a.port)
    send_only = bth(0x04) + b"\x00" * 4
    malformed, icrc, ignored = [], [], []
    long_ip = ip.copy()
    long_ip.plen = 1400  # claims more than the frame holds
    malformed.append(("IPv6 payload length past the frame", eth / long_ip / udp / Raw(send_only)))
    bad_udp_len = udp.copy()
    bad_udp_len.len = 200
    malformed.append(("UDP length disagrees with IPv6", eth / ip / bad_udp_len / Raw(send_only)))
    malformed.append(("IPv6 header cut short", eth / Raw(b"\x60\x00")))
    malformed.append(("version 4 in an IPv6 frame", eth / Raw(b"\x45" + b"\x00" * 60)))
    transport_frames(eth / ip / udp, malformed, icrc)
    # Not the port's business: ignored.
    ignored.append(("IPv4 frame", Ether(dst=a.dst_mac) / IP(src="10.0.0.1", dst="10.0.0.2") /
                    udp / Raw(send_only)))
    ignored.append(("another UDP port", eth / ip / UDP(sport=1, dport=a.port + 1) / Raw(send_only)))
    ignored.append(("TCP", eth / IPv6(src=a.src_ip, dst=a.dst_ip, nh=6) / Raw(b"\x00" * 20)))
    ignored.append(("a hop-by-hop extension header",
                    eth / ip / IPv6ExtHdrHopByHop() / udp / Raw(send_only)))
    ignored.append(("another IPv6 address",
                    eth / IPv6(src=a.src_ip, dst="fd00:ffff::1") / udp / Raw(send_only)))
    ignored.append(("another MAC", Ether(dst="02:00:00:00:00:99") / ip / udp / Raw(send_only)))
    ignored.append(("ICMPv6 echo request", eth / ip / ICMPv6EchoRequest()))
    ignored.append(("solicitation with hop limit 64 (not from the link)",
                    eth / IPv6(src=a.src_ip, dst=a.dst_ip, hlim=64) / ICMPv6ND_NS(tgt=a.dst_ip)))
    # Advertisements claiming the sender's address at impossible MACs must not poison the table.
    for bogus in ("00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "33:33:00:00:00:01"):
        ignored.append((f"advertisement: {a.src_ip} is at {bogus}",
                        eth / IPv6(src=a.src_ip, dst=a.dst_ip, hlim=255) /
                        ICMPv6ND_NA(tgt=a.src_ip, S=1, O=1) / ICMPv6NDOptDstLLAddr(lladdr=bogus)))
    return malformed, icrc, ignored


def ipv4_frames(a):
    eth = Ether(dst=a.dst_mac)
    ip = IP(src=a.src_ip, dst=a.dst_ip, flags="DF")
    udp = UDP(sport=0xC123, dport=a.port)
    send_only = bth(0x04) + b"\x00" * 4  # RC SEND only, no payload, ICRC field zero
    malformed, icrc = [], []
    ignored = []

    # The port's business, damaged: each counted as malformed.
    bad_sum = ip.copy()
    bad_sum.chksum = 0x1234
    malformed.append(("IPv4 header checksum wrong", eth / bad_sum / udp / Raw(send_only)))
    if not a.no_fragments:
        frag = IP(src=a.src_ip, dst=a.dst_ip, flags="MF")
        malformed.append(("IPv4 fragment (MF)", eth / frag / udp / Raw(send_only)))
        offset = IP(src=a.src_ip, dst=a.dst_ip, frag=8)
        malformed.append(("IPv4 fragment (offset 64)", eth / offset / udp / Raw(send_only)))
    long_ip = ip.copy()
    long_ip.len = 1400  # claims more than the frame holds
    malformed.append(("IPv4 total length past the frame", eth / long_ip / udp / Raw(send_only)))
    bad_udp_len = udp.copy()
    bad_udp_len.len = 200
    malformed.append(("UDP length disagrees with IP", eth / ip / bad_udp_len / Raw(send_only)))
    malformed.append(("IPv4 header cut short", Ether(dst=a.dst_mac, type=0x0800) / Raw(b"\x45\x00")))
    malformed.append(("IPv4 header length 4 bytes",
                      Ether(dst=a.dst_mac, type=0x0800) / Raw(b"\x41" + b"\x00" * 40)))
    transport_frames(eth / ip / udp, malformed, icrc)
    # Not the port's business: ignored.
    ignored.append(("IPv6 frame", Ether(dst=a.dst_mac, type=0x86DD) / Raw(b"\x60" + b"\x00" * 60)))
    ignored.append(("another UDP port", eth / ip / UDP(sport=1, dport=a.port + 1) / Raw(send_only)))
    ignored.append(("TCP", eth / IP(src=a.src_ip, dst=a.dst_ip, proto=6) / Raw(b"\x00" * 20)))
    ignored.append(("another IPv4 address",
                    eth / IP(src=a.src_ip, dst="10.255.255.254") / udp / Raw(send_only)))
    ignored.append(("another MAC", Ether(dst="02:00:00:00:00:99") / ip / udp / Raw(send_only)))
    mine = get_if_hwaddr(a.iface)  # what the sender's ARP says of itself
    ignored.append(("ARP for another address", Ether(dst="ff:ff:ff:ff:ff:ff") /
                    ARP(op=1, hwsrc=mine, psrc=a.src_ip, pdst="10.255.255.254")))
    ignored.append(("ARP with hardware type 6", Ether(dst="ff:ff:ff:ff:ff:ff") /
                    ARP(op=1, hwtype=6, hwsrc=mine, psrc=a.src_ip, pdst=a.dst_ip)))
    # Claims of the sender's address with impossible MACs must not poison the port's table.
    for bogus in ("00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01"):
        ignored.append((f"ARP reply claiming {a.src_ip} is at {bogus}",
                        Ether(dst=a.dst_mac) / ARP(op=2, hwsrc=bogus, psrc=a.src_ip,
                                                   hwdst=a.dst_mac, pdst=a.dst_ip)))

    return malformed, icrc, ignored


if __name__ == "__main__":
    main()
