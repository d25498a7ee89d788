#!/usr/bin/env python3
"""Turns the strace logs guest.sh took inside the VM into the CASE.hex test files.

    strace2hex.py RAW_DIR OUT_DIR
    strace2hex.py compare DIR_A DIR_B   # which messages differ beyond seq/pid, by attribute path

RAW_DIR holds, per case, CASE.strace (strace -e write=all -e read=all hex dumps),
CASE.cmd, CASE.rc, CASE.out, plus `order` and `env`. For every case OUT_DIR gets
CASE.hex (format in README.md: `>` request / `<` reply, one netlink message per line
in hex, `#` comment lines decoding the message that follows), plus index.txt.

MSG_PEEK reads are dropped (libnl peeks every message before reading it for real).
Only what ipvsadm read is recorded: a reply it never read is not in the log.
"""
import ipaddress, os, re, struct, sys

# ---- strace log -> events ------------------------------------------------------------
CALL = re.compile(r"^(socket|bind|getsockname|sendmsg|recvmsg|sendto|recvfrom|close)\((\d*)")
RET = re.compile(r"\)\s+=\s+(-?\d+)")
DUMP = re.compile(r"^ \| [0-9a-f]{5}  ")

def events(path):
    """[(kind, fd, data)]: kind socket|close|send|recv; data = the bytes of one syscall."""
    out, cur = [], None
    def flush():
        nonlocal cur
        if cur is not None:
            kind, fd, want, data = cur
            if len(data) != want:
                sys.exit(f"{path}: {kind} on fd {fd}: dump has {len(data)} bytes, syscall returned {want}")
            out.append((kind, fd, bytes(data)))
        cur = None
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if DUMP.match(line):
            if cur is not None:
                cur[3].extend(bytes.fromhex(line[10:59].replace(" ", "")))
            continue
        if line.startswith(" * "):          # " * N bytes in buffer K"
            continue
        m = CALL.match(line)
        if not m:
            continue
        flush()
        call, fd = m.group(1), m.group(2)
        r = RET.search(line)
        ret = int(r.group(1)) if r else -1
        if call == "socket":
            if "AF_NETLINK" in line and ret >= 0:
                out.append(("socket", str(ret), b""))
        elif call == "close":
            out.append(("close", fd, b""))
        elif call in ("sendmsg", "sendto") and ret >= 0:
            cur = ["send", fd, ret, bytearray()]
        elif call in ("recvmsg", "recvfrom") and ret >= 0:
            if "MSG_PEEK" in line.rsplit("}", 1)[-1]:
                continue                     # the same bytes come again in the real read
            cur = ["recv", fd, ret, bytearray()]
    flush()
    return out

def split(data):
    msgs, i = [], 0
    while i + 16 <= len(data):
        n = struct.unpack_from("<I", data, i)[0]
        if n < 16 or i + n > len(data):
            sys.exit(f"bad nlmsg_len {n} at {i} of {len(data)}")
        msgs.append(data[i:i + n])
        i += (n + 3) & ~3
    if i != len(data):
        sys.exit(f"{len(data) - i} trailing bytes after the last message")
    return msgs

# ---- decoding (comments only: the hex line is the data) ------------------------------
IPVS_CMDS = ["UNSPEC", "NEW_SERVICE", "SET_SERVICE", "DEL_SERVICE", "GET_SERVICE", "NEW_DEST",
             "SET_DEST", "DEL_DEST", "GET_DEST", "NEW_DAEMON", "DEL_DAEMON", "GET_DAEMON",
             "SET_CONFIG", "GET_CONFIG", "SET_INFO", "GET_INFO", "ZERO", "FLUSH"]
CTRL_CMDS = {1: "NEWFAMILY", 2: "DELFAMILY", 3: "GETFAMILY", 4: "NEWOPS", 5: "DELOPS", 6: "GETOPS",
             7: "NEWMCAST_GRP", 8: "DELMCAST_GRP", 9: "GETMCAST_GRP", 10: "GETPOLICY"}
ERRNO = {0: "ack", 1: "EPERM", 2: "ENOENT", 3: "ESRCH", 17: "EEXIST", 22: "EINVAL",
         95: "EOPNOTSUPP", 97: "EAFNOSUPPORT"}

# attribute tables: type -> (name, kind); kind u8|u16|u32|u64|be16|str|addr|flags|nest:TABLE
STATS = {1: ("CONNS", "u32"), 2: ("INPKTS", "u32"), 3: ("OUTPKTS", "u32"), 4: ("INBYTES", "u64"),
         5: ("OUTBYTES", "u64"), 6: ("CPS", "u32"), 7: ("INPPS", "u32"), 8: ("OUTPPS", "u32"),
         9: ("INBPS", "u32"), 10: ("OUTBPS", "u32"), 11: ("PAD", "raw")}
STATS64 = {k: (n, "u64" if n != "PAD" else "raw") for k, (n, _) in STATS.items()}
SVC = {1: ("AF", "u16"), 2: ("PROTOCOL", "u16"), 3: ("ADDR", "addr"), 4: ("PORT", "be16"),
       5: ("FWMARK", "u32"), 6: ("SCHED_NAME", "str"), 7: ("FLAGS", "flags"), 8: ("TIMEOUT", "u32"),
       9: ("NETMASK", "netmask"), 10: ("STATS", "nest:STATS"), 11: ("PE_NAME", "str"),
       12: ("STATS64", "nest:STATS64")}
DEST = {1: ("ADDR", "addr"), 2: ("PORT", "be16"), 3: ("FWD_METHOD", "u32"), 4: ("WEIGHT", "u32"),
        5: ("U_THRESH", "u32"), 6: ("L_THRESH", "u32"), 7: ("ACTIVE_CONNS", "u32"),
        8: ("INACT_CONNS", "u32"), 9: ("PERSIST_CONNS", "u32"), 10: ("STATS", "nest:STATS"),
        11: ("ADDR_FAMILY", "u16"), 12: ("STATS64", "nest:STATS64"), 13: ("TUN_TYPE", "u8"),
        14: ("TUN_PORT", "be16"), 15: ("TUN_FLAGS", "u16")}
CMD = {1: ("SERVICE", "nest:SVC"), 2: ("DEST", "nest:DEST"), 3: ("DAEMON", "raw"),
       4: ("TIMEOUT_TCP", "u32"), 5: ("TIMEOUT_TCP_FIN", "u32"), 6: ("TIMEOUT_UDP", "u32")}
INFO = {1: ("VERSION", "version"), 2: ("CONN_TAB_SIZE", "u32")}
CTRL = {1: ("FAMILY_ID", "u16"), 2: ("FAMILY_NAME", "str"), 3: ("VERSION", "u32"),
        4: ("HDRSIZE", "u32"), 5: ("MAXATTR", "u32"), 6: ("OPS", "ops"), 7: ("MCAST_GROUPS", "raw")}
TABLES = {"STATS": STATS, "STATS64": STATS64, "SVC": SVC, "DEST": DEST}
FWD = {0: "masq", 1: "local", 2: "tunnel", 3: "route", 4: "bypass"}

def attrs(data):
    i = 0
    while i + 4 <= len(data):
        n, t = struct.unpack_from("<HH", data, i)
        if n < 4 or i + n > len(data):
            yield (None, data[i:]); return
        yield (t, data[i + 4:i + n])
        i += (n + 3) & ~3

def value(kind, v, ctx):
    if kind == "u8" and len(v) == 1: return str(v[0])
    if kind == "u16" and len(v) == 2: return str(struct.unpack("<H", v)[0])
    if kind == "u32" and len(v) == 4: return str(struct.unpack("<I", v)[0])
    if kind == "u64" and len(v) == 8: return str(struct.unpack("<Q", v)[0])
    if kind == "be16" and len(v) == 2: return f"{struct.unpack('>H', v)[0]} (big-endian)"
    if kind == "str": return repr(v.rstrip(b"\0").decode(errors="replace")) + f" ({len(v)} bytes incl. NUL)"
    if kind == "version" and len(v) == 4:
        x = struct.unpack("<I", v)[0]; return f"0x{x:06x} ({x >> 16}.{(x >> 8) & 255}.{x & 255})"
    if kind == "flags" and len(v) == 8:
        f, m = struct.unpack("<II", v); return f"{{flags 0x{f:x}, mask 0x{m:x}}}"
    if kind == "netmask" and len(v) == 4:
        x = struct.unpack("<I", v)[0]
        if ctx.get("af") == 10:
            return f"{x} (IPv6: a prefix length, host-order u32)"
        return f"{ipaddress.IPv4Address(v)} (IPv4: the mask's bytes in network order, i.e. u32 0x{x:08x} read LE)"
    if kind == "addr" and len(v) == 16:
        af = ctx.get("af")
        if af == 2: return f"{ipaddress.IPv4Address(v[:4])} (4 address bytes + 12 zero: union nf_inet_addr)"
        if af == 10: return str(ipaddress.IPv6Address(v))
        return v.hex()
    return v.hex() if v else "(empty)"

def decode(data, table, depth, ctx):
    lines = []
    for t, v in attrs(data):   # the address family first: replies put DEST ADDR before ADDR_FAMILY
        if t is not None and table.get(t & 0x3fff, ("",))[0] in ("AF", "ADDR_FAMILY") and len(v) == 2:
            ctx["af"] = struct.unpack("<H", v)[0]
    for t, v in attrs(data):
        if t is None:
            lines.append(f"{'  ' * depth}<{len(v)} trailing bytes {v.hex()}>"); break
        base, fl = t & 0x3fff, ("|NESTED" if t & 0x8000 else "") + ("|NET_BYTEORDER" if t & 0x4000 else "")
        name, kind = table.get(base, (f"?{base}", "raw"))
        head = f"{'  ' * depth}{name} ({base}{fl}, len {len(v) + 4})"
        if kind.startswith("nest:"):
            sub = TABLES[kind[5:]]
            if kind[5:] in ("STATS", "STATS64"):      # one line: name=value ...
                vals = []
                for st, sv in attrs(v):
                    if st is not None:
                        sname, skind = sub.get(st & 0x3fff, (f"?{st}", "raw"))
                        vals.append(f"{sname.lower()}={value(skind, sv, ctx)}")
                lines.append(head + ": " + " ".join(vals))
            else:
                lines.append(head + ":")
                lines += decode(v, sub, depth + 1, dict(ctx))
        elif kind == "ops":
            ops = []
            for _, op in attrs(v):
                d = {st: struct.unpack("<I", sv)[0] for st, sv in attrs(op) if st and len(sv) == 4}
                ops.append(f"{d.get(1)}/0x{d.get(2, 0):x}")
            lines.append(head + ": cmd/flags " + " ".join(ops))
        else:
            if name == "FWD_METHOD" and len(v) == 4:
                lines.append(f"{head} = {value(kind, v, ctx)} ({FWD.get(struct.unpack('<I', v)[0], '?')})")
            else:
                lines.append(f"{head} = {value(kind, v, ctx)}")
    return lines

def nlflags(f, typ, request):
    names = [(1, "REQUEST"), (2, "MULTI"), (4, "ACK"), (8, "ECHO"), (0x10, "DUMP_INTR"), (0x20, "DUMP_FILTERED")]
    if typ == 2:
        names += [(0x100, "CAPPED"), (0x200, "ACK_TLVS")]
    elif request:
        names += [(0x300, "DUMP")] if f & 0x300 == 0x300 else [(0x100, "ROOT"), (0x200, "MATCH")]
        names += [(0x400, "ATOMIC")]
    out, rest = [], f
    for bit, n in names:
        if f & bit == bit and bit & rest:
            out.append(n); rest &= ~bit
    if rest: out.append(f"0x{rest:x}")
    return "|".join(out) or "0"

def describe(m, outgoing, state):
    n, typ, flags, seq, pid = struct.unpack_from("<IHHII", m)
    head = f"len {n}, flags {nlflags(flags, typ, outgoing)}"
    if typ == 2:
        err = struct.unpack_from("<i", m, 16)[0]
        e = ERRNO.get(-err, str(err))
        echoed = m[20:36]
        en, et, ef = struct.unpack_from("<IHH", echoed)
        s = f"NLMSG_ERROR error {err} ({e}) {head}; echoes the request header (len {en}, type 0x{et:x}, flags 0x{ef:x})"
        if len(m) > 36:
            s += f" and its {len(m) - 36} payload bytes"
        return [s]
    if typ == 3:
        return [f"NLMSG_DONE {head}, payload int {struct.unpack_from('<i', m, 16)[0]}"]
    if n < 20:
        return [f"type 0x{typ:x} {head}"]
    cmd, ver = m[16], m[17]
    body = m[20:]
    if typ == 0x10:
        lines = [f"GENL_ID_CTRL CTRL_CMD_{CTRL_CMDS.get(cmd, cmd)} (genl cmd {cmd}, version {ver}) {head}"]
        for t, v in attrs(body):
            if t == 1 and len(v) == 2:
                state["ipvs"] = struct.unpack("<H", v)[0]
        return lines + decode(body, CTRL, 1, {})
    if typ == state.get("ipvs"):
        name = IPVS_CMDS[cmd] if cmd < len(IPVS_CMDS) else str(cmd)
        lines = [f"IPVS (family id 0x{typ:x}) IPVS_CMD_{name} (genl cmd {cmd}, version {ver}) {head}"]
        table = INFO if cmd == 14 else CMD
        return lines + decode(body, table, 1, {})
    return [f"type 0x{typ:x} genl cmd {cmd} {head}"]

# ---- output ------------------------------------------------------------------------
def masked(m):
    """m without what differs from run to run: nlmsg_seq and nlmsg_pid (bytes 8..16), and
    in NLMSG_ERROR the echoed request header's seq and pid (bytes 28..36)."""
    b = bytearray(m)
    b[8:16] = bytes(8)
    if struct.unpack_from("<H", m, 4)[0] == 2 and len(m) >= 36:
        b[28:36] = bytes(8)
    return bytes(b)

def sockets(raw, name):
    """[[(direction, syscall_bytes, [messages])]] per netlink socket, in order."""
    socks, byfd = [], {}
    for kind, fd, data in events(os.path.join(raw, name + ".strace")):
        if kind == "socket":
            byfd[fd] = []; socks.append(byfd[fd])
        elif kind == "close":
            byfd.pop(fd, None)
        elif fd in byfd:
            byfd[fd].append((">" if kind == "send" else "<", len(data), split(data)))
        else:
            sys.exit(f"{name}: {kind} on fd {fd}, not a netlink socket")
    return socks

def flat(sock):
    return [masked(m) for _, _, msgs in sock for m in msgs]

def emit(lines, sock, state, skip=0):
    k = 0
    for d, nbytes, msgs in sock:
        if k + len(msgs) <= skip:
            k += len(msgs); continue
        lines.append(f"# {'sendmsg' if d == '>' else 'recvmsg'}: {nbytes} bytes, {len(msgs)} message{'s' * (len(msgs) != 1)}")
        for m in msgs:
            desc = describe(m, d == ">", state)
            lines.append(f"# {d} " + desc[0])
            lines += ["#     " + l for l in desc[1:]]
            lines.append(f"{d} {m.hex()}")
        k += len(msgs)
    return k - skip

def convert(raw, out, name, env, ref):
    """ref: the family case's sockets (ipvs_init), or None when converting that case."""
    cmd = open(os.path.join(raw, name + ".cmd")).read().strip()
    rc = open(os.path.join(raw, name + ".rc")).read().strip()
    output = open(os.path.join(raw, name + ".out"), errors="replace").read().rstrip("\n")
    lines = [f"# {name}: {cmd}", f"# exit status {rc}; {env}"]
    if output:
        lines.append("# output (stdout+stderr, verbatim):")
        lines += ["#| " + l for l in output.split("\n")]
    socks = sockets(raw, name)
    state, n = {"ipvs": None}, 0
    if ref is not None:
        # every ipvsadm run starts with ipvs_init's two sockets, and every later socket with
        # the GETFAMILY exchange: all equal to family.hex's up to seq/pid - checked, elided.
        if len(socks) < 2 or flat(socks[0]) != flat(ref[0]) or flat(socks[1]) != flat(ref[1]):
            sys.exit(f"{name}: ipvs_init's sockets differ from family.hex's (beyond seq/pid)")
        describe(ref[0][1][2][0], False, state)            # learn the IPVS family id
        lines += ["#", "# -- netlink sockets 1-2 (ipvs_init: GETFAMILY \"IPVS\"; GETFAMILY + IPVS_CMD_GET_INFO):",
                  "#    the same messages as family.hex up to seq/pid, elided"]
        first = 2
    else:
        first = 0
    getfamily = flat(ref[0]) if ref is not None else None
    for i, sock in enumerate(socks[first:], first + 1):
        lines += ["#", f"# -- netlink socket {i} (NETLINK_GENERIC)"]
        skip = 0
        if getfamily is not None and flat(sock)[:len(getfamily)] == getfamily:
            skip = len(getfamily)
            lines.append("# (GETFAMILY \"IPVS\" request, NEWFAMILY reply, ACK: as in family.hex socket 1 up to seq/pid, elided)")
        n += emit(lines, sock, state, skip)
        lines.append(f"# -- socket {i} closed")
    with open(os.path.join(out, name + ".hex"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return cmd, rc, n

def leaves(m):
    """{attribute path: value bytes} of a message, IPVS nests (service, destination, their
    stats) flattened: e.g. "/1/10/2" = SERVICE / STATS / INPKTS."""
    out = {"nlmsghdr len/type/flags": m[:8], "genlmsghdr": m[16:20]}
    typ = struct.unpack_from("<H", m, 4)[0]
    if typ <= 3 or len(m) <= 20:
        out["payload"] = m[16:]; return out
    ipvs_nests = typ != 0x10 and m[16] not in (12, 13, 14)
    def walk(data, path, depth):
        for t, v in attrs(data):
            if t is None:
                out[path + "/<trailing>"] = v; return
            p = f"{path}/{t & 0x3fff}"
            if ipvs_nests and ((depth == 0 and t & 0x3fff in (1, 2)) or (depth == 1 and t & 0x3fff in (10, 12))):
                walk(v, p, depth + 1)
            else:
                out[p] = v
    walk(m[20:], "", 0)
    return out

def compare(a, b):
    """Compare two capture folders message by message, up to seq/pid; print what differs."""
    same = True
    for name in sorted(f for f in os.listdir(a) if f.endswith(".hex")):
        pa, pb = os.path.join(a, name), os.path.join(b, name)
        if not os.path.exists(pb):
            print(f"{name}: missing in {b}"); same = False; continue
        ma = [l.split(" ", 1) for l in open(pa) if l[:1] in "<>"]
        mb = [l.split(" ", 1) for l in open(pb) if l[:1] in "<>"]
        if len(ma) != len(mb):
            print(f"{name}: {len(ma)} vs {len(mb)} messages"); same = False; continue
        for i, ((da, ha), (db, hb)) in enumerate(zip(ma, mb), 1):
            x, y = bytes.fromhex(ha.strip()), bytes.fromhex(hb.strip())
            if da != db or len(x) != len(y):
                print(f"{name} message {i}: direction/length differ ({da}{len(x)} vs {db}{len(y)})"); same = False; continue
            if masked(x) == masked(y):
                continue
            la, lb = leaves(x), leaves(y)
            diff = sorted(k for k in set(la) | set(lb) if la.get(k) != lb.get(k))
            print(f"{name} message {i} ({da}): differs beyond seq/pid in {', '.join(diff)}")
            same = False
    extra = set(f for f in os.listdir(b) if f.endswith(".hex")) - set(f for f in os.listdir(a) if f.endswith(".hex"))
    for name in sorted(extra):
        print(f"{name}: only in {b}"); same = False
    return same

def main():
    if sys.argv[1] == "compare":
        sys.exit(0 if compare(sys.argv[2], sys.argv[3]) else 1)
    raw, out = sys.argv[1], sys.argv[2]
    envlines = open(os.path.join(raw, "env")).read().split("\n")
    kernel = envlines[0].split(" | ")[0].replace("kernel: ", "kernel ")
    ipvsadm = envlines[1].replace("ipvsadm: ", "")
    env = f"{kernel}, {ipvsadm.split(' (')[0]}"
    order = open(os.path.join(raw, "order")).read().split()
    if order[0] != "family":
        sys.exit("the first case must be `family` (ipvsadm --version: ipvs_init only)")
    ref = sockets(raw, "family")
    index = ["# case | exit status | messages kept | command (captured by capture.sh; see README.md)"]
    for name in order:
        cmd, rc, n = convert(raw, out, name, env, None if name == "family" else ref)
        index.append(f"{name} | {rc} | {n} | {cmd}")
        print(f"{name}: {n} messages")
    with open(os.path.join(out, "index.txt"), "w") as f:
        f.write("\n".join(index) + "\n")

if __name__ == "__main__":
    main()
