#!/usr/bin/env python3
"""Captures real GETRULE dumps of iptables-nft rules, as test data.

Loads getrule.rules (IPv4) and getrule6.rules (IPv6) with
iptables-nft-restore in a throwaway network namespace, then for each chain
below runs `nft list chain FAMILY TABLE CHAIN` under strace and writes
nft/getrule.hex: per chain a `# FAMILY TABLE CHAIN` line, the GETRULE
request nft sent (`> HEX`), and each message of the kernel's answer up to
NLMSG_DONE (`< HEX`). Needs root, iptables-nft, nft and strace; developers
run it when the rules change (CI only reads the .hex file).

    sudo crates/netlink/testdata/capture_rules.py
"""
import os, re, subprocess, sys, tempfile, uuid

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nft")
CHAINS = [
    ("ip", "filter", "INPUT"),
    ("ip", "filter", "FORWARD"),
    ("ip", "filter", "KUBE-FIREWALL"),
    ("ip", "nat", "PREROUTING"),
    ("ip", "nat", "POSTROUTING"),
    ("ip", "nat", "KUBE-POSTROUTING"),
    ("ip", "nat", "KUBE-SEP-ABCDEFGHIJKLMNOP"),
    ("ip", "mangle", "KUBE-IPTABLES-HINT"),
    ("ip6", "filter", "INPUT"),
]
GETRULE = (10 << 8) | 7

def sh(*args, **kw):
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr}")
    return done

def calls(trace):
    """(syscall, bytes) for each traced call, from strace's hex dumps."""
    out = []
    for line in trace.splitlines():
        m = re.match(r"\s*\|\s*[0-9a-f]{5}\s+((?:[0-9a-f]{2}\s+){1,16})", line)
        if m and out:
            out[-1][1].extend(bytes.fromhex(m.group(1).replace(" ", "")))
        elif re.match(r"[a-z]+\(", line):
            out.append((line.split("(")[0], bytearray()))
    return out

def split(data):
    msgs, i = [], 0
    while i + 16 <= len(data):
        length = int.from_bytes(data[i:i + 4], "little")
        if length < 16:
            break
        msgs.append(bytes(data[i:i + length]))
        i += (length + 3) & ~3
    return msgs

def kind(msg):
    return int.from_bytes(msg[4:6], "little")

def capture(ns, tmp, family, table, chain):
    trace = os.path.join(tmp, "trace")
    sh("ip", "netns", "exec", ns, "strace", "-e", "trace=sendto,sendmsg,recvmsg", "-e", "write=3", "-e", "read=3",
       "-o", trace, "nft", "list", "chain", family, table, chain)
    lines, answering = [f"# {family} {table} {chain}"], False
    for call, data in calls(open(trace).read()):
        for msg in split(data):
            if call.startswith("send") and kind(msg) == GETRULE:
                lines.append("> " + msg.hex())
                answering = True
            elif call == "recvmsg" and answering:
                lines.append("< " + msg.hex())
                if kind(msg) == 3:  # NLMSG_DONE
                    answering = False
    if not any(l.startswith(">") for l in lines):
        sys.exit(f"nft sent no GETRULE for {family} {table} {chain}")
    return lines

def main():
    ns = "kp-caprules-" + uuid.uuid4().hex[:6]
    sh("ip", "netns", "add", ns)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for tool, rules in (("iptables-nft-restore", "getrule.rules"), ("ip6tables-nft-restore", "getrule6.rules")):
                sh("ip", "netns", "exec", ns, tool, os.path.join(HERE, rules))
            lines = []
            for family, table, chain in CHAINS:
                lines += capture(ns, tmp, family, table, chain)
    finally:
        subprocess.run(["ip", "netns", "del", ns])
    with open(os.path.join(HERE, "getrule.hex"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"getrule.hex: {len(CHAINS)} chains, {sum(l.startswith('<') for l in lines)} answer messages")

if __name__ == "__main__":
    main()
