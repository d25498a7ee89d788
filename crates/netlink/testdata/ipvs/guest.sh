#!/bin/sh
# Runs INSIDE the ipvs-vm guest (../shared/tools/ipvs-vm/run.sh), started by capture.sh.
# Runs each capture case under strace, which hex-dumps every netlink buffer ipvsadm sends
# and receives, then ships /tmp/cap to the host over the serial console as base64 lines
# prefixed with @@CAPB64@@ (a gzip'd tar: its CRC catches a garbled console line).
#
# A case: cap NAME WANT CMD... - WANT is "ok" (exit status 0 expected) or "err" (non-zero
# expected: the kernel's error reply is the point). Setup commands run without strace.
set -u
OUT=/tmp/cap
mkdir -p "$OUT"
: >"$OUT/order"
fail=0
# Debian's busybox-static runs its own applets before $PATH: use iproute2's ip explicitly.
ip() { /sbin/ip "$@"; }
STRACE=$(cat /payload/strace.cmd)   # "/payload/strace" or an ld.so invocation (see capture.sh)

cap() { # NAME ok|err CMD...
	name=$1 want=$2
	shift 2
	echo "$*" >"$OUT/$name.cmd"
	# socket/bind/getsockname/close mark where each of ipvsadm's netlink sockets starts and
	# ends; write=all/read=all hex-dump every byte sent/received (MSG_PEEK reads included:
	# the host side drops them).
	$STRACE -o "$OUT/$name.strace" -qq -xx -s 65535 \
		-e trace=socket,bind,getsockname,sendmsg,recvmsg,sendto,recvfrom,close \
		-e write=all -e read=all "$@" >"$OUT/$name.out" 2>&1
	rc=$?
	echo "$rc" >"$OUT/$name.rc"
	echo "$name" >>"$OUT/order"
	if { [ "$want" = ok ] && [ "$rc" != 0 ]; } || { [ "$want" = err ] && [ "$rc" = 0 ]; }; then
		echo "FAIL: $name: exit $rc, wanted $want"; sed 's/^/  | /' "$OUT/$name.out"; fail=1
	else
		echo "captured $name (exit $rc)"
	fi
}
setup() { "$@" || { echo "FAIL: setup: $*"; fail=1; }; }
reset() { setup ipvsadm -C; }

echo "kernel: $(uname -r) | $(cat /proc/version)" >"$OUT/env"
echo "ipvsadm: $(ipvsadm --version 2>&1)" >>"$OUT/env"
echo "strace: $($STRACE -V 2>&1 | head -1)" >>"$OUT/env"

# ---- topology (as smoke.sh): VIPs on a down dummy, two HTTP "pods" behind bridge cni0,
# a client pod on another routed subnet. Only needed for the traffic of the list cases.
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv4.vs.conntrack=1
setup ip link add kube-ipvs0 type dummy
setup ip addr add 10.96.0.10/32 dev kube-ipvs0
setup ip addr add 10.96.0.11/32 dev kube-ipvs0
setup ip -6 addr add fd00::10/128 dev kube-ipvs0 nodad
setup ip link add cni0 type bridge
setup ip addr add 10.244.1.1/24 dev cni0
setup ip link set cni0 up
for i in 2 3; do
	setup ip netns add pod$i
	setup ip link add veth$i type veth peer name eth0 netns pod$i
	setup ip link set veth$i master cni0 up
	setup ip -n pod$i link set lo up
	setup ip -n pod$i addr add 10.244.1.$i/24 dev eth0
	setup ip -n pod$i link set eth0 up
	setup ip -n pod$i route add default via 10.244.1.1
	mkdir -p /tmp/www$i && echo "pod$i" >/tmp/www$i/index.html
	setup ip netns exec pod$i httpd -p 10.244.1.$i:80 -h /tmp/www$i
done
setup ip netns add client
setup ip link add vcl type veth peer name eth0 netns client
setup ip addr add 10.244.2.1/24 dev vcl
setup ip link set vcl up
setup ip -n client link set lo up
setup ip -n client addr add 10.244.2.2/24 dev eth0
setup ip -n client link set eth0 up
setup ip -n client route add default via 10.244.2.1

# ---- family lookup, GET_INFO, empty dump -------------------------------------------
# every ipvsadm run starts with ipvs_init(): CTRL_CMD_GETFAMILY "IPVS" on its own socket,
# then GETFAMILY + IPVS_CMD_GET_INFO on a second one; --version stops there.
cap family ok ipvsadm --version
cap list-empty ok ipvsadm -Ln

# ---- services ----------------------------------------------------------------------
cap add-svc-tcp4-rr ok ipvsadm -A -t 10.96.0.10:80 -s rr
reset
cap add-svc-tcp4-wrr ok ipvsadm -A -t 10.96.0.10:80 -s wrr
reset
cap add-svc-tcp4-sh-flags ok ipvsadm -A -t 10.96.0.10:80 -s sh -b sh-fallback,sh-port
reset
cap add-svc-tcp4-mh ok ipvsadm -A -t 10.96.0.10:80 -s mh
reset
cap add-svc-tcp4-persistent ok ipvsadm -A -t 10.96.0.10:80 -s rr -p 10800 -M 255.255.255.0
reset
cap add-svc-udp4 ok ipvsadm -A -u 10.96.0.10:53 -s rr
cap add-svc-sctp4 ok ipvsadm -A --sctp-service 10.96.0.10:80 -s rr
cap add-svc-tcp6 ok ipvsadm -A -t [fd00::10]:80 -s rr
cap add-svc-fwmark ok ipvsadm -A -f 42 -s rr
cap add-dest-tcp6 ok ipvsadm -a -t [fd00::10]:80 -r [fd00:10:244:1::2]:8080 -m -w 1
setup ipvsadm -a -u 10.96.0.10:53 -r 10.244.1.2:53 -m
setup ipvsadm -a -f 42 -r 10.244.1.3:80 -m
# the dump encodings of UDP, SCTP, IPv6 and fwmark services and an IPv6 destination
cap list-mixed ok ipvsadm -Ln
reset

# ---- edit service, destination life cycle, delete -------------------------------------
setup ipvsadm -A -t 10.96.0.10:80 -s rr
cap edit-svc ok ipvsadm -E -t 10.96.0.10:80 -s wrr
cap add-dest ok ipvsadm -a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 3 -x 100 -y 10
cap edit-dest-weight0 ok ipvsadm -e -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 0
cap del-dest ok ipvsadm -d -t 10.96.0.10:80 -r 10.244.1.2:8080
cap del-svc ok ipvsadm -D -t 10.96.0.10:80

# ---- error replies -----------------------------------------------------------------
cap error-del-svc-missing err ipvsadm -D -t 10.96.0.99:80
setup ipvsadm -A -t 10.96.0.10:80 -s rr
cap error-add-svc-exists err ipvsadm -A -t 10.96.0.10:80 -s rr
cap error-del-dest-missing err ipvsadm -d -t 10.96.0.10:80 -r 10.244.1.9:80
reset

# ---- timeouts (IPVS_CMD_SET_CONFIG / GET_CONFIG) ----------------------------------------
cap get-timeout-default ok ipvsadm -L --timeout
cap set-timeout ok ipvsadm --set 900 120 300
cap get-timeout ok ipvsadm -L --timeout
# 900 120 300 are also the defaults: a second set with other values, and a 0 (= keep)
cap set-timeout-keep-fin ok ipvsadm --set 3600 0 30
cap get-timeout-after-keep ok ipvsadm -L --timeout

# ---- listing with statistics: two services, two destinations each, real traffic -------
setup ipvsadm -A -t 10.96.0.10:80 -s rr
setup ipvsadm -a -t 10.96.0.10:80 -r 10.244.1.2:80 -m
setup ipvsadm -a -t 10.96.0.10:80 -r 10.244.1.3:80 -m
setup ipvsadm -A -t 10.96.0.11:80 -s wrr -p 10800 -M 255.255.255.0
setup ipvsadm -a -t 10.96.0.11:80 -r 10.244.1.2:80 -m -w 2
setup ipvsadm -a -t 10.96.0.11:80 -r 10.244.1.3:80 -m -w 1 -x 100 -y 10
traffic() { # 4 requests per VIP from the node, 4 from the client pod
	for vip in 10.96.0.10 10.96.0.11; do
		for n in 1 2 3 4; do
			timeout 5 wget -q -O - http://$vip/ >/dev/null 2>&1 || { echo "FAIL: GET $vip from node"; fail=1; }
			ip netns exec client timeout 5 wget -q -O - http://$vip/ >/dev/null 2>&1 ||
				{ echo "FAIL: GET $vip from client"; fail=1; }
		done
	done
}
# The counters in a dump are the estimator's snapshot (it sums the per-CPU counters every
# 2 s), not live values: wait for a tick after the traffic so they count all of it, while
# the rates (2 s averages, decaying) are still non-zero.
traffic
sleep 2.5
traffic
sleep 2.5
cap list-rate ok ipvsadm -Ln --rate
cap list-stats ok ipvsadm -Ln --stats
cap list ok ipvsadm -Ln
cap list-one-svc ok ipvsadm -Ln -t 10.96.0.10:80
cap flush ok ipvsadm -C

# ---- ship the captures to the host ------------------------------------------------
echo "@@CAPBEGIN@@"
(cd "$OUT" && tar -czf - .) | base64 | sed 's/^/@@CAPB64@@/'
echo "@@CAPEND@@"
exit $fail
