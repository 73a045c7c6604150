#!/usr/bin/python3
"""json_matches_text.py KIND TEXT JSON [TEXT_AFTER]: vrnicctl's --json output (KIND stats, qps
or devices) parsed by Python's json module and checked against its text output: the same names
in the same order and the same values. vrnicd's counters move between calls (vrnicctl's own
connection moves some): stats takes the text before and after the JSON, and each JSON value
must lie between the two; for qps only the identity and names are compared, and the counters
must not go back. Exit 0 when they agree, else 1 with what differs."""
import json
import sys


def text_pairs(line):
    return [tuple(w.split("=", 1)) for w in line.split() if "=" in w]


def main():
    kind, text_path, json_path = sys.argv[1:4]
    after_path = sys.argv[4] if len(sys.argv) > 4 else text_path
    text = open(text_path).read().splitlines()
    data = json.load(open(json_path))
    bad = []
    if kind == "stats":
        pairs = [tuple(line.split("=", 1)) for line in text]
        after = dict(line.split("=", 1) for line in open(after_path).read().splitlines())
        if [k for k, _ in pairs] != list(data):
            bad.append(f"names differ: text {len(pairs)}, json {len(data)}")
        for k, v in pairs:
            lo, hi = sorted((int(v), int(after.get(k, -1))))
            if not isinstance(data.get(k), int) or not lo <= data[k] <= hi:
                bad.append(f"{k}: text {v} then {after.get(k)}, json {data.get(k)}")
    elif kind == "qps":
        qps = data["qps"]
        if len(qps) != len(text):
            bad.append(f"{len(text)} QPs in text, {len(qps)} in json")
        for line, q in zip(text, qps):
            pairs = text_pairs(line)
            if [k for k, _ in pairs] != list(q):
                bad.append(f"names differ for {line.split()[0]}")
            t = dict(pairs)
            if int(t["qpn"], 16) != q["qpn"] or t["type"] != q["type"] or t["session"] != str(q["session"]):
                bad.append(f"identity differs: {t['qpn']} {t['type']} / {q['qpn']} {q['type']}")
            for k in ("packets_sent", "bytes_sent", "packets_received"):
                if q[k] < int(t[k]):
                    bad.append(f"{k} went back: text {t[k]}, json later {q[k]}")
    elif kind == "devices":
        devs = data["devices"]
        if len(devs) != len(text):
            bad.append(f"{len(text)} devices in text, {len(devs)} in json")
        for line, d in zip(text, devs):
            words = line.split()
            t = dict(text_pairs(line))
            if words[0] != d["name"] or t["socket"] != d["socket"] or t["node_guid"] != d["node_guid"]:
                bad.append(f"device differs: {line} / {d}")
            if int(t["daemon_pid"]) != data["daemon"]["pid"]:
                bad.append("daemon pid differs")
            if ("autostarted" in words) != data["daemon"]["autostarted"]:
                bad.append("autostarted differs")
            if ("socket_activated" in words) != data["daemon"]["socket_activated"]:
                bad.append("socket_activated differs")
    else:
        bad.append(f"unknown kind {kind}")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print(f"{kind}: json agrees with text ({len(text)} lines)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
