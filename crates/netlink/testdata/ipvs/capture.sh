#!/usr/bin/env bash
# capture.sh - record the exact netlink bytes ipvsadm sends and the kernel's replies, per
# case, inside the ipvs-vm guest (a stock Debian 6.1 kernel with IPVS under qemu).
#
#   crates/netlink/testdata/ipvs/capture.sh [OUT_DIR]     # default: this folder
#
# Boots ../shared/tools/ipvs-vm/run.sh (IPVS_VM overrides its path) with a payload of
# guest.sh (the cases) and strace, which hex-dumps every buffer ipvsadm passes to
# sendmsg/recvmsg. The guest ships its logs back over the serial console; strace2hex.py
# turns them into OUT_DIR/CASE.hex, index.txt and env.txt (format: README.md).
# Needs: bash, python3, base64, tar, and strace on the host (copied into the guest with its
# libraries) - or, without one, apt-get download of strace + libunwind8 into the cache
# (never installed). CAPTURE_STRACE=download forces that path; CAPTURE_KEEP=1 keeps the
# console log and raw strace logs (strace2hex.py RAW OUT re-converts them without a VM). Nothing runs as root on the
# host beyond what run.sh does; the host's network namespace is not touched.
# Developers run it when a case changes; tests only read the .hex files.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-$HERE}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
VM=${IPVS_VM:-$(cd "$HERE/../../../.." && pwd)/tools/ipvs-vm/run.sh}
[ -x "$VM" ] || { echo "capture.sh: ipvs-vm run.sh not found (set IPVS_VM)" >&2; exit 1; }
WORK=${IPVS_QEMU_WORK:-/tmp/ipvs-qemu}
log() { echo "[capture] $*" >&2; }

TMP=$(mktemp -d /tmp/ipvs-capture.XXXXXX)
if [ "${CAPTURE_KEEP:-0}" = 1 ]; then log "keeping $TMP (console.log, raw/ strace logs)"; else trap 'rm -rf "$TMP"' EXIT; fi
P="$TMP/payload"
mkdir -p "$P"
cp "$HERE/guest.sh" "$P/guest.sh"
chmod -x "$P/guest.sh"   # run.sh would otherwise treat it as a test binary; it is run explicitly

# ---- strace for the guest ----------------------------------------------------------
host_strace=$(command -v strace || true)
if [ -n "$host_strace" ] && [ "${CAPTURE_STRACE:-}" != download ]; then
	cp -L "$host_strace" "$P/strace"   # executable: run.sh copies its shared libraries in
	echo /payload/strace >"$P/strace.cmd"
	strace_src="host $(strace -V | head -1)"
else
	# no strace on the host: take Debian's (and the libunwind it needs) from the archive,
	# unpacked, not installed. Not executable in the payload (run.sh's ldd would miss the
	# unpacked libraries); the guest starts it through the dynamic loader instead.
	S="$WORK/strace"
	if [ ! -e "$S/.done" ]; then
		log "downloading strace + libunwind8 into $S (not installed)"
		rm -rf "$S"; mkdir -p "$S/debs" "$S/root"
		(cd "$S/debs" && apt-get download -qq -o APT::Sandbox::User=root strace libunwind8 >/dev/null) ||
			{ apt-get update -qq && (cd "$S/debs" && apt-get download -qq -o APT::Sandbox::User=root strace libunwind8 >/dev/null); }
		for d in "$S"/debs/*.deb; do dpkg -x "$d" "$S/root"; done
		touch "$S/.done"
	fi
	mkdir -p "$P/strace-lib"
	cp "$S/root/usr/bin/strace" "$P/strace-bin"; chmod -x "$P/strace-bin"
	LP="$S/root/lib/x86_64-linux-gnu:$S/root/usr/lib/x86_64-linux-gnu"
	LD_LIBRARY_PATH=$LP ldd "$S/root/usr/bin/strace" | awk '/=> \//{print $3}' | while read -r lib; do
		cp -L "$lib" "$P/strace-lib/"
	done
	echo "/lib64/ld-linux-x86-64.so.2 --library-path /payload/strace-lib /payload/strace-bin" >"$P/strace.cmd"
	strace_src="$(ls "$S"/debs/strace_*.deb | xargs -n1 basename) (downloaded)"
fi

# ---- boot, run the cases, collect ----------------------------------------------------
log "booting the ipvs-vm guest ($VM)"
t0=$(date +%s.%N)
set +e
"$VM" --payload "$P" -- sh /payload/guest.sh >"$TMP/console.log" 2>&1
rc=$?
set -e
t1=$(date +%s.%N)
grep -E '^(captured|FAIL)|^\[ipvs-qemu\]' "$TMP/console.log" >&2 || true
if [ "$rc" != 0 ]; then
	log "guest run failed (exit $rc); console: $TMP/console.log (kept)"
	trap - EXIT
	exit 1
fi
mkdir -p "$TMP/raw"
sed -n 's/^@@CAPB64@@//p' "$TMP/console.log" | tr -d '\r' | base64 -d | tar -xzf - -C "$TMP/raw"

# ---- convert -------------------------------------------------------------------------
rm -f "$OUT"/*.hex
python3 "$HERE/strace2hex.py" "$TMP/raw" "$OUT" >&2
pkgver() { ls "$WORK/debs/" 2>/dev/null | grep "^$1_" | tail -1 | sed 's/\.deb$//; s/%3a/:/'; }
{
	echo "# written by capture.sh; the guest kernel, tools and libraries the captures came from"
	sed 's/ | /\n/' "$TMP/raw/env"
	echo "packages: $(pkgver "$(cat "$WORK/kernel-pkg" 2>/dev/null)") $(pkgver ipvsadm) $(pkgver libnl-3-200) $(pkgver libnl-genl-3-200)"
	echo "strace source: $strace_src"
} >"$OUT/env.txt"
log "wrote $(ls "$OUT"/*.hex | wc -l) captures to $OUT in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s of VM time"
