/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The tc programs, for traffic from outside the cgroup: ingress DNATs a
 * new connection to a frontend and records both directions in kp_flows,
 * egress rewrites the replies' source back to the frontend. Masquerade and
 * REJECT are marks a companion nftables table acts on.
 *
 * SCTP is looked up (source ranges, DROP, REJECT apply) but not
 * translated: its checksum is a CRC32c over the whole packet.
 * IPv6 extension headers and IPv4 fragments are passed untouched.
 */
#ifndef KP_TC_H
#define KP_TC_H

#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include "kp_lb.h"

#ifndef IPPROTO_SCTP
#define IPPROTO_SCTP 132
#endif

/* A parsed packet: the flow key and where its fields live. */
struct kp_pkt {
	struct kp_flow_key key;
	__u32 l3;      /* offset of the IP header */
	__u32 l4;      /* offset of the L4 header */
	__u32 l4_csum; /* offset of the L4 checksum, 0: none (SCTP) */
	int v4;
	int syn;       /* a TCP SYN without ACK: a new connection */
};

/*
 * When a flow entry stops counting. kp_flows is an LRU, so an entry lives
 * until evicted; a later connection reusing the 5-tuple must not inherit
 * its backend (which may be gone). A TCP SYN opens a new connection unless
 * the entry was used in the last KP_SYN_RETRY_NS (SYN retransmits keep
 * their backend); a UDP flow idle for KP_UDP_IDLE_NS is new again (the
 * conntrack UDP stream timeout). An established TCP flow never expires.
 */
#define KP_SYN_RETRY_NS (30ULL * 1000000000ULL)
#define KP_UDP_IDLE_NS (120ULL * 1000000000ULL)

static __always_inline int kp_parse(struct __sk_buff *skb, struct kp_pkt *pkt)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u16 *ports;

	__builtin_memset(pkt, 0, sizeof(*pkt));
	if ((void *)(eth + 1) > end)
		return 0;
	pkt->l3 = sizeof(*eth);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return 0;
		/* Later fragments carry no ports. */
		if (ip->frag_off & bpf_htons(0x1fff))
			return 0;
		pkt->v4 = 1;
		pkt->key.proto = ip->protocol;
		kp_addr_v4(pkt->key.saddr, ip->saddr);
		kp_addr_v4(pkt->key.daddr, ip->daddr);
		pkt->l4 = pkt->l3 + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return 0;
		pkt->key.proto = ip6->nexthdr;
		__builtin_memcpy(pkt->key.saddr, &ip6->saddr, 16);
		__builtin_memcpy(pkt->key.daddr, &ip6->daddr, 16);
		pkt->l4 = pkt->l3 + sizeof(*ip6);
	} else {
		return 0;
	}
	switch (pkt->key.proto) {
	case IPPROTO_TCP:
		pkt->l4_csum = pkt->l4 + 16;
		break;
	case IPPROTO_UDP:
		pkt->l4_csum = pkt->l4 + 6;
		break;
	case IPPROTO_SCTP:
		break;
	default:
		return 0;
	}
	ports = data + pkt->l4;
	if ((void *)(ports + 2) > end)
		return 0;
	pkt->key.sport = ports[0];
	pkt->key.dport = ports[1];
	if (pkt->key.proto == IPPROTO_TCP) {
		__u8 *flags = data + pkt->l4 + 13;

		if ((void *)(flags + 1) > end)
			return 0;
		/* SYN (0x02) without ACK (0x10). */
		pkt->syn = (*flags & 0x12) == 0x02;
	}
	return 1;
}

/*
 * Rewrite the source (dst = 0) or destination address and port, fixing
 * the IPv4 header checksum and the L4 pseudo-header checksum (a UDP/IPv4
 * checksum of 0, "none", stays 0: BPF_F_MARK_MANGLED_0).
 */
static __always_inline int kp_rewrite(struct __sk_buff *skb, const struct kp_pkt *pkt, int dst,
				      const __u8 addr[16], __be16 port)
{
	__u32 addr_off, port_off = pkt->l4 + (dst ? 2 : 0);
	__u64 l4flags = pkt->key.proto == IPPROTO_UDP && pkt->v4 ? BPF_F_MARK_MANGLED_0 : 0;
	const __u8 *old_addr = dst ? pkt->key.daddr : pkt->key.saddr;
	__be16 old_port = dst ? pkt->key.dport : pkt->key.sport;

	if (pkt->v4) {
		__be32 from, to;

		__builtin_memcpy(&from, old_addr + 12, 4);
		__builtin_memcpy(&to, addr + 12, 4);
		addr_off = pkt->l3 + (dst ? offsetof(struct iphdr, daddr) : offsetof(struct iphdr, saddr));
		if (bpf_l4_csum_replace(skb, pkt->l4_csum, from, to, BPF_F_PSEUDO_HDR | l4flags | 4))
			return -1;
		if (bpf_l3_csum_replace(skb, pkt->l3 + offsetof(struct iphdr, check), from, to, 4))
			return -1;
		if (bpf_skb_store_bytes(skb, addr_off, &to, 4, 0))
			return -1;
	} else {
		__u8 from[16], to[16];
		__s64 diff;

		__builtin_memcpy(from, old_addr, 16);
		__builtin_memcpy(to, addr, 16);
		addr_off = pkt->l3 + (dst ? offsetof(struct ipv6hdr, daddr) : offsetof(struct ipv6hdr, saddr));
		diff = bpf_csum_diff((__be32 *)from, 16, (__be32 *)to, 16, 0);
		if (bpf_l4_csum_replace(skb, pkt->l4_csum, 0, diff, BPF_F_PSEUDO_HDR))
			return -1;
		if (bpf_skb_store_bytes(skb, addr_off, to, 16, 0))
			return -1;
	}
	if (bpf_l4_csum_replace(skb, pkt->l4_csum, old_port, port, l4flags | 2))
		return -1;
	if (bpf_skb_store_bytes(skb, port_off, &port, 2, 0))
		return -1;
	return 0;
}

/* Whether the source is local (kp_local_cidrs) under the detector. */
static __always_inline int kp_source_local(const struct kp_config *cfg, const __u8 saddr[16])
{
	struct kp_cidr_key key = { .prefixlen = 128 };

	if (!cfg || !(cfg->flags & KP_C_LOCAL_DETECTOR))
		return 0;
	__builtin_memcpy(key.addr, saddr, 16);
	return bpf_map_lookup_elem(&kp_local_cidrs, &key) != NULL;
}

static __always_inline int kp_source_allowed(const struct kp_frontend *fe, const __u8 saddr[16])
{
	struct kp_range_key key = { .prefixlen = 32 + 128 };

	if (!(fe->flags & KP_F_SOURCE_RANGES))
		return 1;
	key.id = bpf_htonl(fe->id);
	__builtin_memcpy(key.addr, saddr, 16);
	return bpf_map_lookup_elem(&kp_source_ranges, &key) != NULL;
}

/* Record both directions of a NATed connection. */
static __always_inline void kp_flow_insert(const struct kp_pkt *pkt, const struct kp_backend *be, __u32 mark,
					   __u64 now)
{
	struct kp_flow fwd = { .port = be->port, .mark = mark, .last_seen_ns = now };
	struct kp_flow rev = { .port = pkt->key.dport, .last_seen_ns = now };
	struct kp_flow_key rkey = {};

	__builtin_memcpy(fwd.addr, be->addr, 16);
	__builtin_memcpy(rev.addr, pkt->key.daddr, 16);
	__builtin_memcpy(rkey.saddr, be->addr, 16);
	__builtin_memcpy(rkey.daddr, pkt->key.saddr, 16);
	rkey.sport = be->port;
	rkey.dport = pkt->key.sport;
	rkey.proto = pkt->key.proto;
	rkey.direction = 1;
	bpf_map_update_elem(&kp_flows, &pkt->key, &fwd, BPF_ANY);
	bpf_map_update_elem(&kp_flows, &rkey, &rev, BPF_ANY);
}

/* A new connection to a frontend (no flow yet). */
static __always_inline int kp_tc_new(struct __sk_buff *skb, struct kp_pkt *pkt)
{
	struct kp_frontend_key fk = { .port = pkt->key.dport, .proto = pkt->key.proto };
	struct kp_config *cfg = kp_config_get();
	const struct kp_selection *sel;
	struct kp_frontend *fe;
	struct kp_client client = { .scope = 1 };
	struct kp_backend be;
	__u32 mark = 0;
	int local;

	__builtin_memcpy(fk.addr, pkt->key.daddr, 16);
	fe = kp_frontend_lookup(&fk);
	if (!fe)
		return TC_ACT_OK;
	if (!kp_source_allowed(fe, pkt->key.saddr))
		return TC_ACT_SHOT;
	local = kp_source_local(cfg, pkt->key.saddr);
	sel = local ? &fe->internal : &fe->external;
	switch (sel->verdict) {
	case KP_VERDICT_DROP:
		return TC_ACT_SHOT;
	case KP_VERDICT_REJECT:
		if (cfg)
			skb->mark |= cfg->reject_mark;
		return TC_ACT_OK;
	default:
		break;
	}
	/* SCTP: looked up, not translated (see the top of this file). */
	if (pkt->l4_csum == 0)
		return TC_ACT_OK;
	__builtin_memcpy(client.id, pkt->key.saddr, 16);
	client.hash = kp_hash(client.id);
	if (!kp_pick(&fk, fe, !local, &client, &be))
		return TC_ACT_OK;
	if (cfg && ((fe->flags & (local ? KP_F_MASQ_INTERNAL : KP_F_MASQ_EXTERNAL)) ||
		    kp_addr_eq(be.addr, pkt->key.saddr)))
		mark = cfg->masquerade_mark;
	if (kp_rewrite(skb, pkt, 1, be.addr, be.port))
		return TC_ACT_SHOT;
	skb->mark |= mark;
	kp_flow_insert(pkt, &be, mark, bpf_ktime_get_ns());
	return TC_ACT_OK;
}

/* Whether a forward flow entry belongs to an earlier connection. */
static __always_inline int kp_flow_stale(const struct kp_pkt *pkt, const struct kp_flow *flow, __u64 now)
{
	__u64 idle = now - flow->last_seen_ns;

	if (pkt->syn)
		return idle > KP_SYN_RETRY_NS;
	return pkt->key.proto == IPPROTO_UDP && idle > KP_UDP_IDLE_NS;
}

SEC("classifier")
int kp_tc_ingress(struct __sk_buff *skb)
{
	struct kp_pkt pkt;
	struct kp_flow *flow;
	struct kp_backend be = {};
	__u64 now;

	if (!kp_parse(skb, &pkt))
		return TC_ACT_OK;
	flow = bpf_map_lookup_elem(&kp_flows, &pkt.key);
	now = bpf_ktime_get_ns();
	if (!flow || kp_flow_stale(&pkt, flow, now))
		return kp_tc_new(skb, &pkt);
	if (pkt.l4_csum == 0)
		return TC_ACT_OK;
	flow->last_seen_ns = now;
	__builtin_memcpy(be.addr, flow->addr, 16);
	be.port = flow->port;
	skb->mark |= flow->mark;
	if (kp_rewrite(skb, &pkt, 1, be.addr, be.port))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("classifier")
int kp_tc_egress(struct __sk_buff *skb)
{
	struct kp_pkt pkt;
	struct kp_flow *flow;
	__u8 addr[16];
	__be16 port;

	if (!kp_parse(skb, &pkt) || pkt.l4_csum == 0)
		return TC_ACT_OK;
	pkt.key.direction = 1;
	flow = bpf_map_lookup_elem(&kp_flows, &pkt.key);
	if (!flow)
		return TC_ACT_OK;
	flow->last_seen_ns = bpf_ktime_get_ns();
	__builtin_memcpy(addr, flow->addr, 16);
	port = flow->port;
	if (kp_rewrite(skb, &pkt, 0, addr, port))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

#endif
