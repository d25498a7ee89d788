#!/bin/sh
# Compiles kproxy's BPF programs (kproxy.bpf.c and its headers) into one
# object, the only place the compiler flags are written down (build.rs
# runs this script too).
#
#   build.sh                 write kproxy.bpf.o next to this script (commit it)
#   build.sh --out PATH      write PATH instead (build.rs: OUT_DIR)
#   build.sh --check         compile afresh and fail if kproxy.bpf.o differs
#
# CLANG names the compiler (default clang). The output depends only on the
# sources, the system headers and the clang version: the compile runs in
# this directory with relative paths, the DWARF compilation directory is
# ".", and clang writes no timestamps; so two checkouts at different paths
# produce the same bytes with the same clang (Debian's clang 14 is the one
# the committed object was built with).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
clang=${CLANG:-clang}
mode=write
out="$here/kproxy.bpf.o"
case "${1:-}" in
--out) out=$2 ;;
--check) mode=check ;;
"") ;;
*) echo "usage: $0 [--out PATH | --check]" >&2; exit 2 ;;
esac

compile() {
	# linux/types.h includes asm/types.h, which Debian keeps under the
	# multiarch include directory.
	multiarch=$("$clang" -print-multiarch 2>/dev/null || true)
	(cd "$here" && "$clang" -target bpf -mcpu=v3 -O2 -g -Wall -Werror \
		${multiarch:+-idirafter "/usr/include/$multiarch"} \
		-fdebug-compilation-dir=. -fdebug-prefix-map="$here"=. \
		-c kproxy.bpf.c -o "$1")
}

if [ "$mode" = check ]; then
	tmp=$(mktemp)
	trap 'rm -f "$tmp"' EXIT
	compile "$tmp"
	if ! cmp -s "$tmp" "$here/kproxy.bpf.o"; then
		echo "kproxy.bpf.o does not match its sources compiled with $("$clang" --version | head -n 1)" >&2
		echo "run crates/bpf/programs/build.sh and commit kproxy.bpf.o" >&2
		exit 1
	fi
	echo "kproxy.bpf.o matches its sources"
else
	compile "$out"
fi
