#!/usr/bin/env python3
"""Captures what `nft -f` sends to the kernel for each case, as test data.

For every CASE.nft in this folder (optional preamble, a line `#capture`,
then the commands to capture), runs the preamble, then the commands under
`strace -e write=FD`, in a throwaway network namespace, and writes CASE.hex:
the messages of the captured transaction between BATCH_BEGIN and BATCH_END,
one message per line in hex. Needs root, nft and strace; developers run it
when a case changes (CI only reads the .hex files).

    sudo crates/netlink/testdata/capture.py
"""
import os, re, subprocess, sys, tempfile, uuid

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nft")

def sh(*args, **kw):
    done = subprocess.run(args, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr}")
    return done

def messages(dump):
    """Byte stream of every sendmsg buffer, split into netlink messages."""
    data = bytearray()
    for line in dump.splitlines():
        m = re.match(r"\s*\|\s*[0-9a-f]{5}\s+((?:[0-9a-f]{2}\s+){1,16})", line)
        if m:
            data += bytes.fromhex(m.group(1).replace(" ", ""))
    out, i = [], 0
    while i + 16 <= len(data):
        length = int.from_bytes(data[i:i + 4], "little")
        if length < 16:
            break
        out.append(bytes(data[i:i + length]))
        i += (length + 3) & ~3
    return out

def batch(msgs):
    """The messages of the last batch: BATCH_BEGIN (0x10) to BATCH_END (0x11)."""
    start = max(i for i, m in enumerate(msgs) if int.from_bytes(m[4:6], "little") == 0x10)
    end = next(i for i in range(start, len(msgs)) if int.from_bytes(msgs[i][4:6], "little") == 0x11)
    return msgs[start:end + 1]

def capture(path):
    text = open(path).read()
    preamble, _, commands = text.rpartition("#capture\n")
    ns = "kp-cap-" + uuid.uuid4().hex[:6]
    sh("ip", "netns", "add", ns)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pre, cmd, trace = (os.path.join(tmp, n) for n in ("pre.nft", "cmd.nft", "trace"))
            open(pre, "w").write(preamble)
            open(cmd, "w").write(commands)
            if preamble.strip():
                sh("ip", "netns", "exec", ns, "nft", "-f", pre)
            # nft's netlink socket is fd 3.
            sh("ip", "netns", "exec", ns, "strace", "-e", "trace=sendmsg", "-e", "write=3", "-o", trace, "nft", "-f", cmd)
            msgs = batch(messages(open(trace).read()))
    finally:
        subprocess.run(["ip", "netns", "del", ns])
    with open(path[:-4] + ".hex", "w") as f:
        for m in msgs:
            f.write(m.hex() + "\n")
    return len(msgs)

if __name__ == "__main__":
    cases = sorted(p for p in os.listdir(HERE) if p.endswith(".nft"))
    for case in cases if len(sys.argv) < 2 else [c + ".nft" for c in sys.argv[1:]]:
        print(f"{case}: {capture(os.path.join(HERE, case))} messages")
