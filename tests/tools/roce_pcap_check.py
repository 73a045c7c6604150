#!/usr/bin/python3
"""roce_pcap_check: checks the ICRC of every RoCEv2 packet in a capture.

An independent check of vrnic's wire format, written from the rules in ROCE.md (not from
vrnic's C++): for every UDP datagram to or from the RoCEv2 port it recomputes the invariant
CRC with zlib and compares it with the last 4 bytes of the UDP payload.

Reads pcap and pcapng (through scapy's raw readers), link types Ethernet (VLAN tags
included), Linux cooked SLL and SLL2 (what `tshark -i any` writes) and raw IP; IPv4 and
IPv6. Prints a summary (packets checked, bad ones, opcodes seen) and exits 1 when any
packet is bad or when no RoCE packet was found.

  roce_pcap_check.py FILE [FILE...] [--port 4791] [--tshark] [--verbose]
                     [--tshark-payload-heuristics] [--zero-udp6-checksum-from ADDR]
  roce_pcap_check.py --self-test [--tshark]

--tshark also has tshark decode the capture and fails when a RoCE packet is not decoded as
InfiniBand with the same BTH opcode, or shows as malformed or with an expert error
(Wireshark does not check ICRCs). Wireshark's heuristic guesses at the payload's content are
off for this (see IB_PAYLOAD_HEURISTICS); --tshark-payload-heuristics leaves them on.
--zero-udp6-checksum-from ADDR (repeatable) lets IPv6 packets from ADDR carry a zero UDP
checksum, which tshark calls an error and rdma_rxe sends (the ICRC covers the packet).
--self-test writes captures with the ROCE.md test vector, damaged and masked-field
variants and an IPv6 packet, in each link type and file format, and checks that the
checker (and with --tshark, tshark) judges each as it should.
"""

import argparse
import collections
import ipaddress
import os
import subprocess
import sys
import tempfile
import zlib

from scapy.utils import RawPcapReader

ROCE_PORT = 4791

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLANS = (0x8100, 0x88A8, 0x9100)

IP_PROTO_UDP = 17
BTH_BYTES = 12
ICRC_BYTES = 4

# BTH opcodes (ROCE.md): transport base + operation.
TRANSPORTS = {0x00: "RC", 0x20: "UC", 0x40: "RD", 0x60: "UD", 0xA0: "XRC"}
OPERATIONS = {
    0x00: "SEND_FIRST", 0x01: "SEND_MIDDLE", 0x02: "SEND_LAST", 0x03: "SEND_LAST_IMM",
    0x04: "SEND_ONLY", 0x05: "SEND_ONLY_IMM", 0x06: "WRITE_FIRST", 0x07: "WRITE_MIDDLE",
    0x08: "WRITE_LAST", 0x09: "WRITE_LAST_IMM", 0x0A: "WRITE_ONLY", 0x0B: "WRITE_ONLY_IMM",
    0x0C: "READ_REQUEST", 0x0D: "READ_RESPONSE_FIRST", 0x0E: "READ_RESPONSE_MIDDLE",
    0x0F: "READ_RESPONSE_LAST", 0x10: "READ_RESPONSE_ONLY", 0x11: "ACK", 0x12: "ATOMIC_ACK",
    0x13: "CMP_SWAP", 0x14: "FETCH_ADD", 0x16: "SEND_LAST_INV", 0x17: "SEND_ONLY_INV",
    0x1C: "FLUSH", 0x1D: "ATOMIC_WRITE",
}
OPCODE_CNP = 0x81


def opcode_name(opcode):
    if opcode == OPCODE_CNP:
        return "CNP"
    transport = TRANSPORTS.get(opcode & 0xE0)
    operation = OPERATIONS.get(opcode & 0x1F)
    if transport is None or operation is None:
        return "opcode 0x%02x" % opcode
    return "%s_%s" % (transport, operation)


# ---- The ICRC, from ROCE.md ----

def masked_ip_header(ip):
    """The IP header with the fields routers change set to all ones."""
    ip = bytearray(ip)
    if ip[0] >> 4 == 6:
        ip[0] |= 0x0F                # traffic class, high nibble
        ip[1:4] = b"\xff\xff\xff"    # traffic class, low nibble; flow label
        ip[7] = 0xFF                 # hop limit
    else:
        ip[1] = 0xFF                 # TOS
        ip[8] = 0xFF                 # TTL
        ip[10:12] = b"\xff\xff"      # header checksum
    return bytes(ip)


def roce_icrc(ip_header, udp_header, transport):
    """The ICRC of a packet: transport is the UDP payload without its last 4 bytes."""
    udp = udp_header[:6] + b"\xff\xff"                            # UDP checksum
    bth = transport[:4] + b"\xff" + transport[5:]                 # FECN, BECN, reserved
    return zlib.crc32(b"\xff" * 8 + masked_ip_header(ip_header) + udp + bth) & 0xFFFFFFFF


# ---- Taking packets apart ----

MAX_ROCE_PACKET = 4096 + 64 + ICRC_BYTES  # path MTU, the longest transport header, ICRC


def segment_headers(ip_header, udp_header, length, index):
    """The IP and UDP headers of segment `index` of a UDP GSO send, `length` bytes of UDP
    payload: the kernel sets the lengths, and numbers IPv4 IDs on from the send's."""
    ip, udp = bytearray(ip_header), bytearray(udp_header)
    if ip[0] >> 4 == 6:
        ip[4:6] = (8 + length).to_bytes(2, "big")
    else:
        ip[2:4] = (len(ip) + 8 + length).to_bytes(2, "big")
        ip[4:6] = ((int.from_bytes(ip[4:6], "big") + index) & 0xFFFF).to_bytes(2, "big")
    udp[4:6] = (8 + length).to_bytes(2, "big")
    return bytes(ip), bytes(udp)


def icrc_holds(ip_header, udp_header, packet):
    return roce_icrc(ip_header, udp_header, packet[:-ICRC_BYTES]) == \
        int.from_bytes(packet[-ICRC_BYTES:], "little")


def split_gso(ip_header, udp_header, payload):
    """The RoCE packets of a UDP datagram as [(IP header, UDP header, packet)]: itself, or --
    a UDP GSO send captured before the kernel segmented it, as on loopback -- its segments,
    all of one size but the last. That size is the one at which the first packet's ICRC
    holds; every segment is then checked on its own like any packet."""
    if icrc_holds(ip_header, udp_header, payload):
        return [(ip_header, udp_header, payload)]
    for size in range(BTH_BYTES + ICRC_BYTES, min(MAX_ROCE_PACKET + 1, len(payload)), 4):
        ip, udp = segment_headers(ip_header, udp_header, size, 0)
        if icrc_holds(ip, udp, payload[:size]):
            out = []
            for index, off in enumerate(range(0, len(payload), size)):
                packet = payload[off:off + size]
                ip, udp = segment_headers(ip_header, udp_header, len(packet), index)
                out.append((ip, udp, packet))
            return out
    return [(ip_header, udp_header, payload)]

class Skip(Exception):
    """A packet that is not (checkable) RoCE; the reason is counted."""


def network_layer(linktype, frame):
    """(ethertype, offset of the IP header) for one captured frame."""
    if linktype == LINKTYPE_ETHERNET:
        if len(frame) < 14:
            raise Skip("short frame")
        ethertype, off = int.from_bytes(frame[12:14], "big"), 14
        while ethertype in ETHERTYPE_VLANS:
            if len(frame) < off + 4:
                raise Skip("short frame")
            ethertype, off = int.from_bytes(frame[off + 2:off + 4], "big"), off + 4
        return ethertype, off
    if linktype == LINKTYPE_LINUX_SLL:
        if len(frame) < 16:
            raise Skip("short frame")
        return int.from_bytes(frame[14:16], "big"), 16
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(frame) < 20:
            raise Skip("short frame")
        return int.from_bytes(frame[0:2], "big"), 20
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if not frame:
            raise Skip("short frame")
        return (ETHERTYPE_IPV6 if frame[0] >> 4 == 6 else ETHERTYPE_IPV4), 0
    raise Skip("link type %d" % linktype)


def udp_datagram(linktype, frame):
    """(IP header, UDP header, UDP payload, UDP length field) of a frame with a UDP datagram."""
    ethertype, off = network_layer(linktype, frame)
    if ethertype == ETHERTYPE_IPV4:
        if len(frame) < off + 20 or frame[off] >> 4 != 4:
            raise Skip("not IP")
        ihl = (frame[off] & 0x0F) * 4
        total = int.from_bytes(frame[off + 2:off + 4], "big")
        if frame[off + 9] != IP_PROTO_UDP:
            raise Skip("not UDP")
        if int.from_bytes(frame[off + 6:off + 8], "big") & 0x3FFF:
            raise Skip("IP fragment")
        ip_header, ip_end = frame[off:off + ihl], off + total
    elif ethertype == ETHERTYPE_IPV6:
        if len(frame) < off + 40 or frame[off] >> 4 != 6:
            raise Skip("not IP")
        if frame[off + 6] != IP_PROTO_UDP:
            raise Skip("not UDP (or IPv6 extension headers)")
        ihl = 40
        ip_header, ip_end = frame[off:off + 40], off + 40 + int.from_bytes(frame[off + 4:off + 6], "big")
    else:
        raise Skip("not IP")
    udp_off = off + ihl
    if len(frame) < udp_off + 8:
        raise Skip("captured short")
    udp_header = frame[udp_off:udp_off + 8]
    udp_len = int.from_bytes(udp_header[4:6], "big")
    if len(frame) < min(ip_end, udp_off + udp_len):
        raise Skip("captured short")
    return ip_header, udp_header, frame[udp_off + 8:min(ip_end, udp_off + udp_len)], udp_len


def read_frames(path):
    """(frame number, link type, bytes) for every packet of a pcap or pcapng file."""
    reader = RawPcapReader(path)
    try:
        for number, (frame, meta) in enumerate(reader, start=1):
            linktype = getattr(meta, "linktype", None)
            yield number, (reader.linktype if linktype is None else linktype), frame
    finally:
        reader.close()


# ---- Checking a capture ----

class Report:
    def __init__(self):
        self.checked = 0
        self.by_ip = collections.Counter()
        self.opcodes = collections.Counter()
        self.bad = []           # (frame number, description)
        self.skipped = collections.Counter()
        self.opcodes_by_frame = {}  # frame number -> BTH opcode, None if not checked
        self.gso_sends = 0          # datagrams that were UDP GSO sends (several packets)

    def ok(self):
        return self.checked > 0 and not self.bad


def check_capture(path, port, verbose=False):
    report = Report()
    for number, linktype, frame in read_frames(path):
        try:
            ip_header, udp_header, payload, udp_len = udp_datagram(linktype, frame)
        except Skip as why:
            report.skipped[str(why)] += 1
            continue
        sport = int.from_bytes(udp_header[0:2], "big")
        dport = int.from_bytes(udp_header[2:4], "big")
        if port not in (sport, dport):
            continue
        report.opcodes_by_frame[number] = None
        version = "IPv6" if ip_header[0] >> 4 == 6 else "IPv4"
        if udp_len != 8 + len(payload):
            report.bad.append((number, "UDP length %d, datagram has %d bytes" %
                               (udp_len, 8 + len(payload))))
            continue
        if len(payload) < BTH_BYTES + ICRC_BYTES:
            report.bad.append((number, "UDP payload of %d bytes: no room for BTH and ICRC" %
                               len(payload)))
            continue
        report.opcodes_by_frame[number] = payload[0]
        packets = split_gso(ip_header, udp_header, payload)
        if len(packets) > 1:
            report.gso_sends += 1
        for index, (ip, udp, packet) in enumerate(packets):
            where = number if len(packets) == 1 else "%d.%d" % (number, index)
            if len(packet) < BTH_BYTES + ICRC_BYTES:
                report.bad.append((where, "segment of %d bytes: no room for BTH and ICRC" %
                                   len(packet)))
                continue
            report.checked += 1
            report.by_ip[version] += 1
            name = opcode_name(packet[0])
            report.opcodes[name] += 1
            want = roce_icrc(ip, udp, packet[:-ICRC_BYTES])
            got = int.from_bytes(packet[-ICRC_BYTES:], "little")
            if got != want:
                report.bad.append((where, "%s %s: ICRC %08x, should be %08x (bytes %s)" % (
                    version, name, got, want, want.to_bytes(4, "little").hex())))
            elif verbose:
                print("  #%s %s %s %d bytes: ICRC ok" % (where, version, name, len(packet)))
    return report


def print_report(path, report, port):
    print("roce_pcap_check: %s: %d RoCE packets checked (%s), %d bad" % (
        path, report.checked,
        ", ".join("%s %d" % kv for kv in sorted(report.by_ip.items())) or "none",
        len(report.bad)))
    if report.gso_sends:
        print("  %d of the datagrams were UDP GSO sends captured whole, checked segment by "
              "segment" % report.gso_sends)
    if report.opcodes:
        print("  opcodes: " + ", ".join("%s %d" % (name, n) for name, n in
                                        sorted(report.opcodes.items(), key=lambda kv: -kv[1])))
    for number, what in report.bad[:20]:
        print("  BAD #%s: %s" % (number, what))
    if len(report.bad) > 20:
        print("  ... and %d more bad packets" % (len(report.bad) - 20))
    if report.skipped:
        print("  not checked: " + ", ".join("%s %d" % kv for kv in sorted(report.skipped.items())))
    if report.checked == 0:
        print("  FAIL: no RoCE packet (UDP port %d) found" % port)


# ---- tshark ----

TSHARK_ERROR_SEVERITY = 0x00800000  # Wireshark's PI_ERROR

# Wireshark hands an InfiniBand payload to these heuristic dissectors (tshark 4.0 names; -G
# heuristic-decodes lists their table). They guess at user data: "eth_over_ib" takes any
# payload whose bytes 2-3 are zero for IPoIB, so a 2-byte RDMA WRITE of 0x0061 plus its pad
# becomes a malformed CRTP packet. The payload is the application's, not part of the wire
# format under test, so they are off unless --tshark-payload-heuristics.
IB_PAYLOAD_HEURISTICS = [
    "eth_over_ib", "mellanox_eoib", "smcr_infiniband", "rpcrdma_infiniband", "nvme_rdma",
    "fc_infiniband", "sdp_infiniband", "lnet_ib", "iser_infiniband", "smb_direct_infiniband",
    "drbd_rdma",
]


def run_tshark(args, disable):
    """tshark's output, with the heuristics in disable off (names tshark lacks are dropped)."""
    disable = list(disable)
    while True:
        cmd = ["tshark", "-n"] + [a for name in disable for a in ("--disable-heuristic", name)]
        out = subprocess.run(cmd + args, capture_output=True, text=True, timeout=600)
        unknown = [name for name in disable if "No such protocol %s," % name in out.stderr]
        if out.returncode == 0 or not unknown:
            return out
        disable = [name for name in disable if name not in unknown]


def tshark_check(path, port, opcodes, payload_heuristics=False, zero_udp6_from=()):
    """Problems tshark sees in the RoCE packets of a capture, as a list of strings. opcodes
    maps the frame number of every RoCE packet to its BTH opcode (None when unchecked).
    zero_udp6_from: IPv6 sources whose zero UDP checksum is not counted (tshark's expert
    error "Illegal checksum value (0)"; rdma_rxe sends them so)."""
    args = ["-r", path, "-o", "infiniband.rroce.port:%d" % port,
            "-Y", "udp.port == %d" % port, "-T", "fields", "-E", "separator=/t",
            "-e", "frame.number", "-e", "frame.protocols", "-e", "infiniband.bth.opcode",
            "-e", "_ws.expert.severity", "-e", "_ws.malformed", "-e", "_ws.expert.message",
            "-e", "ipv6.src"]
    try:
        out = run_tshark(args, [] if payload_heuristics else IB_PAYLOAD_HEURISTICS)
    except FileNotFoundError:
        return ["tshark is not installed (Debian package tshark)"]
    if out.returncode != 0:
        return ["tshark failed (%d): %s" % (out.returncode, out.stderr.strip()[-400:])]
    problems, seen = [], set()
    for line in out.stdout.splitlines():
        number, protocols, opcode, severities, malformed, messages, src6 = (
            line.split("\t") + [""] * 7)[:7]
        if not number:
            continue
        number = int(number)
        seen.add(number)
        if "infiniband" not in protocols.split(":"):
            problems.append("#%d not decoded as InfiniBand (%s)" % (number, protocols))
        elif opcodes.get(number) is not None and opcode != str(opcodes[number]):
            problems.append("#%d BTH opcode %s in tshark, %d here" % (number, opcode,
                                                                       opcodes[number]))
        if malformed:
            problems.append("#%d malformed: %s (%s)" % (
                number, ", ".join(m for m in malformed.split(",") if m != "_ws.malformed"),
                protocols))
        elif any(s and int(s, 0) >= TSHARK_ERROR_SEVERITY for s in severities.split(",")):
            if not (src6 and str(ipaddress.ip_address(src6)) in zero_udp6_from and
                    set(messages.split(",")) <= {"Illegal checksum value (0)"}):
                problems.append("#%d expert error: %s" % (number, messages))
    missing = sorted(set(opcodes) - seen)
    if missing:
        problems.append("tshark did not show %d RoCE packets (first #%d)" %
                        (len(missing), missing[0]))
    return problems


def check_files(paths, port, use_tshark, payload_heuristics, verbose, zero_udp6_from=()):
    all_ok = True
    for path in paths:
        report = check_capture(path, port, verbose)
        print_report(path, report, port)
        ok = report.ok()
        if use_tshark:
            problems = tshark_check(path, port, report.opcodes_by_frame, payload_heuristics,
                                    zero_udp6_from)
            print("  tshark: %d RoCE packets decoded, %d problems" % (
                len(report.opcodes_by_frame), len(problems)))
            for p in problems[:20]:
                print("  TSHARK: " + p)
            ok = ok and not problems
        all_ok = all_ok and ok
    return all_ok


# ---- Self-test ----

# ROCE.md's test vector: RC RDMA WRITE only, 10.0.0.1 -> 10.0.0.2, ICRC 84 d8 fa bc.
VECTOR = bytes.fromhex(
    "02000000000202000000000108004500004c000100004011669e0a0000010a000002c12312b70038b370"
    "0a00ffff000000118000000500000000000010000000123400000010000102030405060708090a0b0c0d"
    "0e0f84d8fabc")


def self_test(use_tshark):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
    from scapy.packet import Raw
    from scapy.utils import PcapNgWriter, PcapWriter

    failures = []

    def expect(what, cond):
        print("self-test: %-64s %s" % (what, "ok" if cond else "FAILED"))
        if not cond:
            failures.append(what)

    vector = Ether(VECTOR)
    ip_bytes = bytes(vector[IP])
    expect("the vector's ICRC recomputes to 84d8fabc",
           roce_icrc(ip_bytes[:20], ip_bytes[20:28], ip_bytes[28:-4]) == 0xBCFAD884)

    # The fields routers change: TTL, TOS, both checksums, FECN/BECN. Still good.
    masked = Ether(VECTOR)
    masked[IP].ttl, masked[IP].tos, masked[IP].chksum = 3, 0xB9, None
    masked[UDP].chksum = 0x1234
    body = bytearray(bytes(masked[UDP].payload))
    body[4] = 0xC0
    masked[UDP].remove_payload()
    masked = Ether(bytes(masked / Raw(bytes(body))))

    # Damage: one payload bit, then one header bit the ICRC covers (the DestQP).
    def damaged(offset_in_udp_payload):
        body = bytearray(bytes(Ether(VECTOR)[UDP].payload))
        body[offset_in_udp_payload] ^= 0x01
        p = Ether(VECTOR)
        p[UDP].remove_payload()
        return Ether(bytes(p / Raw(bytes(body))))

    # IPv6: RC SEND only with 13 bytes of payload (pad 3), ICRC from roce_icrc above.
    bth = bytes([0x04, 0x70, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x42, 0x80, 0x00, 0x00, 0x07])
    transport = bth + bytes(range(13)) + b"\x00" * 3
    v6 = IPv6(src="fd00::1", dst="fd00::2", tc=0x02, fl=0x12345, hlim=64) / \
        UDP(sport=0xC777, dport=ROCE_PORT) / Raw(transport + b"\x00" * 4)
    v6 = IPv6(bytes(v6))  # lengths and UDP checksum filled in
    raw6 = bytes(v6)
    icrc6 = roce_icrc(raw6[:40], raw6[40:48], transport)
    v6[UDP].remove_payload()
    v6 = IPv6(bytes(v6 / Raw(transport + icrc6.to_bytes(4, "little"))))
    v6_eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / v6
    expect("the IPv6 packet's ICRC comes out the same after scapy rebuilt it",
           roce_icrc(bytes(v6)[:40], bytes(v6)[40:48], bytes(v6)[48:-4]) == icrc6)

    other = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / \
        IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5353, dport=5353) / Raw(b"not roce")

    good = [vector, masked, v6_eth, other]
    bad = [damaged(40), damaged(6)]

    def cooked(p, v2):
        l3 = p.payload
        if v2:
            return CookedLinuxV2(proto=p.type, pkttype=0, lladdrtype=1, lladdrlen=6,
                                 src=b"\x02\x00\x00\x00\x00\x01\x00\x00") / l3
        return CookedLinux(proto=p.type, pkttype=0, lladdrtype=1, lladdrlen=6,
                           src=b"\x02\x00\x00\x00\x00\x01\x00\x00") / l3

    with tempfile.TemporaryDirectory(prefix="roce_pcap_check.") as tmp:
        cases = []  # (name, path, expected: True good / False bad)

        def write(name, packets, writer_cls, linktype, expected):
            path = os.path.join(tmp, name)
            if writer_cls is PcapNgWriter:
                w = PcapNgWriter(path)
                w.linktype = linktype  # scapy 2.5's pcapng writer has no parameter for it
            else:
                w = PcapWriter(path, linktype=linktype)
            with w:
                for p in packets:
                    w.write(p)
            cases.append((name, path, expected))

        for fmt, writer_cls in (("pcap", PcapWriter), ("pcapng", PcapNgWriter)):
            write("good-eth." + fmt, good, writer_cls, LINKTYPE_ETHERNET, True)
            write("good-sll." + fmt, [cooked(p, False) for p in good], writer_cls,
                  LINKTYPE_LINUX_SLL, True)
            write("good-sll2." + fmt, [cooked(p, True) for p in good], writer_cls,
                  LINKTYPE_LINUX_SLL2, True)
            write("bad-eth." + fmt, good + bad, writer_cls, LINKTYPE_ETHERNET, False)
            write("bad-sll2." + fmt, [cooked(p, True) for p in good + bad], writer_cls,
                  LINKTYPE_LINUX_SLL2, False)
        write("no-roce.pcap", [other], PcapWriter, LINKTYPE_ETHERNET, False)

        for name, path, expected in cases:
            report = check_capture(path, ROCE_PORT)
            n_roce = 0 if name.startswith("no-roce") else 3
            want_bad = 2 if name.startswith("bad") else 0
            expect("%s: %s, %d checked, %d bad" % (name, "good" if expected else "bad",
                                                    n_roce + want_bad, want_bad),
                   report.ok() == expected and report.checked == n_roce + want_bad and
                   len(report.bad) == want_bad and
                   report.by_ip.get("IPv6", 0) == (1 if n_roce else 0))
            if use_tshark and n_roce:
                problems = tshark_check(path, ROCE_PORT, report.opcodes_by_frame)
                expect("%s: tshark decodes every RoCE packet, none malformed" % name,
                       not problems)
                for p in problems:
                    print("  " + p)

        if use_tshark:
            # tshark must catch a malformed one: a BTH cut short.
            short = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / \
                IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=0xC123, dport=ROCE_PORT) / \
                Raw(bytes.fromhex("0a00ffff0000"))
            path = os.path.join(tmp, "malformed.pcap")
            with PcapWriter(path, linktype=LINKTYPE_ETHERNET) as w:
                w.write(vector)
                w.write(short)
            problems = tshark_check(path, ROCE_PORT, {1: 0x0A, 2: None})
            expect("tshark flags a truncated BTH as malformed",
                   len(problems) == 1 and problems[0].startswith("#2 malformed"))

            # A 2-byte RDMA WRITE of 00 61 (pad 00 00): Wireshark's IPoIB guess reads it as
            # CRTP and calls it malformed; with the payload heuristics off it is clean.
            bth = bytes.fromhex("0a60ffff0000001780000001")
            reth = bytes.fromhex("00000000000010000000123400000002")
            transport = bth + reth + b"\x00\x61" + b"\x00\x00"
            p = IP(bytes(IP(src="10.0.0.1", dst="10.0.0.2", flags="DF") /
                         UDP(sport=0xC123, dport=ROCE_PORT) / Raw(transport + bytes(4))))
            raw = bytes(p)
            icrc = roce_icrc(raw[:20], raw[20:28], transport)
            p = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / \
                IP(raw[:-4] + icrc.to_bytes(4, "little"))
            path = os.path.join(tmp, "ipoib-guess.pcap")
            with PcapWriter(path, linktype=LINKTYPE_ETHERNET) as w:
                w.write(p)
            report = check_capture(path, ROCE_PORT)
            expect("a 2-byte WRITE of 00 61: ICRC good", report.ok())
            expect("... tshark clean with the payload heuristics off",
                   not tshark_check(path, ROCE_PORT, report.opcodes_by_frame))
            expect("... and malformed with them on (why they are off)",
                   len(tshark_check(path, ROCE_PORT, report.opcodes_by_frame, True)) == 1)

    print("self-test: %s" % ("PASSED" if not failures else "%d FAILED" % len(failures)))
    return not failures


def main():
    parser = argparse.ArgumentParser(
        description="Check the ICRC of every RoCEv2 packet in pcap/pcapng captures.")
    parser.add_argument("files", nargs="*", metavar="FILE", help="pcap or pcapng capture")
    parser.add_argument("--port", type=int, default=ROCE_PORT,
                        help="RoCEv2 UDP port, source or destination (default 4791)")
    parser.add_argument("--tshark", action="store_true",
                        help="also require tshark to decode every RoCE packet as InfiniBand "
                             "without malformed-packet or expert errors")
    parser.add_argument("--tshark-payload-heuristics", action="store_true",
                        help="leave Wireshark's guesses at what an InfiniBand payload holds "
                             "(IPoIB, SMC-R, NVMe, ...) on; they misread user data")
    parser.add_argument("--zero-udp6-checksum-from", action="append", default=[], metavar="ADDR",
                        help="with --tshark: an IPv6 source whose zero UDP checksum is not an "
                             "error (rdma_rxe leaves it zero; the ICRC covers the packet)")
    parser.add_argument("--verbose", action="store_true", help="list every packet checked")
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker on captures it writes itself")
    args = parser.parse_args()
    if args.self_test:
        return 0 if self_test(args.tshark) else 1
    if not args.files:
        parser.error("no capture file given")
    zero_udp6_from = {str(ipaddress.ip_address(a)) for a in args.zero_udp6_checksum_from}
    return 0 if check_files(args.files, args.port, args.tshark, args.tshark_payload_heuristics,
                            args.verbose, zero_udp6_from) else 1


if __name__ == "__main__":
    sys.exit(main())
