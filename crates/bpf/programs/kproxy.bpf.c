/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kproxy's BPF programs, one object (kproxy.bpf.o): the socket-level load
 * balancer (kp_sock.h), the tc NAT (kp_tc.h), and kp_hash_selftest, which
 * only the tests load (it returns kp_hash of the 16 bytes after the
 * Ethernet header, run with BPF_PROG_TEST_RUN).
 */
#include "kp_lb.h"
#include "kp_sock.h"
#include "kp_tc.h"

SEC("classifier")
int kp_hash_selftest(struct __sk_buff *skb)
{
	__u8 bytes[16];

	if (bpf_skb_load_bytes(skb, ETH_HLEN, bytes, 16))
		return 0;
	return kp_hash(bytes);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
