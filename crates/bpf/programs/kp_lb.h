/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * kproxy's maps and the backend selection shared by the socket and the tc
 * programs: frontend lookup, session affinity, the schedulers and kp_hash.
 * The layout is kproxy_maps.h's; this file only declares the maps.
 */
#ifndef KP_LB_H
#define KP_LB_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "kproxy_maps.h"

/*
 * Map sizes. Frontends and backends are planner-owned and sized for the
 * largest cluster kproxy aims at (100k services x ~3 frontends each, x 10
 * endpoints, Maglev tables on a few): they are not preallocated
 * (BPF_F_NO_PREALLOC), so max_entries costs nothing until used. The LRU
 * maps must be preallocated (the kernel's LRU lists need it), so they are
 * moderate: each entry is ~100-130 bytes with the hash element, so
 * kp_flows' 128k (64k NATed tc connections) is ~16 MiB and kp_sock_rev's
 * 128k ~13 MiB; eviction only costs a reverse translation of an idle
 * flow or socket.
 */
#define KP_MAX_FRONTENDS (1 << 20)
#define KP_MAX_BACKENDS (1 << 22)
#define KP_MAX_RR (1 << 18)
#define KP_MAX_SOURCE_RANGES (1 << 16)
#define KP_MAX_LOCAL_CIDRS 1024
#define KP_MAX_AFFINITY (1 << 16)
#define KP_MAX_FLOWS (1 << 17)
#define KP_MAX_SOCK_REV (1 << 17)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KP_MAX_FRONTENDS);
	__type(key, struct kp_frontend_key);
	__type(value, struct kp_frontend);
} kp_frontends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KP_MAX_BACKENDS);
	__type(key, struct kp_backend_key);
	__type(value, struct kp_backend);
} kp_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KP_MAX_RR);
	__type(key, __u32);
	__type(value, __u64);
} kp_rr SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KP_MAX_SOURCE_RANGES);
	__type(key, struct kp_range_key);
	__type(value, __u8);
} kp_source_ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, KP_MAX_LOCAL_CIDRS);
	__type(key, struct kp_cidr_key);
	__type(value, __u8);
} kp_local_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KP_MAX_AFFINITY);
	__type(key, struct kp_affinity_key);
	__type(value, struct kp_affinity);
} kp_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KP_MAX_FLOWS);
	__type(key, struct kp_flow_key);
	__type(value, struct kp_flow);
} kp_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KP_MAX_SOCK_REV);
	__type(key, struct kp_sock_rev_key);
	__type(value, struct kp_sock_rev);
} kp_sock_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kp_config);
} kp_config SEC(".maps");

/* kproxy_maps.h's kp_hash; the words are little-endian, as BPF is here. */
static __always_inline __u32 kp_hash(const __u8 bytes[16])
{
	__u32 h = 0x9e3779b9, w;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		__builtin_memcpy(&w, bytes + 4 * i, 4);
		h ^= w;
		h *= 0x85ebca6b;
		h ^= h >> 13;
	}
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline int kp_addr_eq(const __u8 a[16], const __u8 b[16])
{
	__u64 a0, a1, b0, b1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

static __always_inline void kp_addr_v4(__u8 out[16], __be32 ip)
{
	__u32 lo = bpf_htonl(0xffff);

	__builtin_memset(out, 0, 10);
	__builtin_memcpy(out + 8, &lo, 4);
	__builtin_memcpy(out + 12, &ip, 4);
}

/* Whether a 16-byte address is a v4-mapped IPv4 address. */
static __always_inline int kp_addr_is_v4(const __u8 a[16])
{
	__u32 w[3];

	__builtin_memcpy(w, a, 12);
	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff);
}

/* The frontend of {addr, port, proto}, or the owned address's port-0
 * entry (an unserved port of a cluster IP), or NULL. */
static __always_inline struct kp_frontend *kp_frontend_lookup(struct kp_frontend_key *key)
{
	struct kp_frontend *fe = bpf_map_lookup_elem(&kp_frontends, key);
	struct kp_frontend_key owned = {};

	if (fe)
		return fe;
	__builtin_memcpy(owned.addr, key->addr, 16);
	fe = bpf_map_lookup_elem(&kp_frontends, &owned);
	if (fe && (fe->flags & KP_F_OWNED_ADDRESS))
		return fe;
	return NULL;
}

/* What a pick needs to know about the client. */
struct kp_client {
	__u8 id[16];  /* affinity client: source address or netns cookie */
	__u32 scope;  /* 0 socket, 1 tc */
	__u32 hash;   /* kp_hash(id), for KP_SCHED_HASH_SRC */
};

struct kp_scan {
	__u32 group;
	struct kp_backend want;
	int found;
};

static long kp_scan_slot(__u32 slot, void *arg)
{
	struct kp_scan *scan = arg;
	struct kp_backend_key key = { .group = scan->group, .slot = slot };
	struct kp_backend *be = bpf_map_lookup_elem(&kp_backends, &key);

	if (be && be->port == scan->want.port && kp_addr_eq(be->addr, scan->want.addr)) {
		scan->found = 1;
		return 1;
	}
	return 0;
}

/* The affinity entry's backend if it is fresh and still in the group. */
static __always_inline int kp_affinity_get(const struct kp_affinity_key *key, const struct kp_frontend *fe,
					   const struct kp_selection *sel, struct kp_backend *out, __u64 now)
{
	struct kp_affinity *aff = bpf_map_lookup_elem(&kp_affinity, key);
	struct kp_scan scan = { .group = sel->group };

	if (!aff || now - aff->last_seen_ns > (__u64)fe->affinity_timeout * 1000000000ULL)
		return 0;
	scan.want = aff->backend;
	/* The entry may name a backend the service no longer has: only a
	 * backend in the current group counts (bpf_loop keeps the verifier's
	 * work constant for any group size). */
	bpf_loop(sel->count, kp_scan_slot, &scan, 0);
	if (!scan.found)
		return 0;
	*out = scan.want;
	aff->last_seen_ns = now;
	return 1;
}

static __always_inline __u32 kp_slot(const struct kp_selection *sel, const struct kp_frontend_key *fk,
				     const struct kp_client *client)
{
	__u64 *ctr;
	__u64 zero = 0;

	switch (sel->sched) {
	case KP_SCHED_RR:
		ctr = bpf_map_lookup_elem(&kp_rr, &sel->group);
		if (!ctr) {
			bpf_map_update_elem(&kp_rr, &sel->group, &zero, BPF_NOEXIST);
			ctr = bpf_map_lookup_elem(&kp_rr, &sel->group);
		}
		if (ctr)
			return __sync_fetch_and_add(ctr, 1) % sel->count;
		return 0;
	case KP_SCHED_HASH_SRC:
		return client->hash % sel->count;
	case KP_SCHED_HASH_DST:
		return kp_hash(fk->addr) % sel->count;
	default:
		return bpf_get_prandom_u32() % sel->count;
	}
}

/* One attempt at a backend for a FORWARD selection: 1 picked, 0 the
 * group's slot is gone (a concurrent update repointed the frontend). */
static __always_inline int kp_pick_once(const struct kp_frontend_key *fk, const struct kp_frontend *fe,
					const struct kp_selection *sel, const struct kp_client *client,
					struct kp_backend *out)
{
	struct kp_affinity_key akey = { .id = fe->id, .scope = client->scope };
	struct kp_backend_key bkey = { .group = sel->group };
	struct kp_affinity aff = {};
	struct kp_backend *be;
	__u64 now = 0;

	if (sel->count == 0)
		return 0;
	if (fe->affinity_timeout) {
		__builtin_memcpy(akey.client, client->id, 16);
		now = bpf_ktime_get_ns();
		if (kp_affinity_get(&akey, fe, sel, out, now))
			return 1;
	}
	bkey.slot = kp_slot(sel, fk, client);
	be = bpf_map_lookup_elem(&kp_backends, &bkey);
	if (!be)
		return 0;
	*out = *be;
	if (fe->affinity_timeout) {
		aff.last_seen_ns = now;
		aff.backend = *be;
		bpf_map_update_elem(&kp_affinity, &akey, &aff, BPF_ANY);
	}
	return 1;
}

/* A backend for a FORWARD selection of `fe` (the internal or external
 * one): on a miss the frontend is read again once, since the only miss a
 * consistent planner allows is a group replaced under us. */
static __always_inline int kp_pick(const struct kp_frontend_key *fk, const struct kp_frontend *fe, int external,
				   const struct kp_client *client, struct kp_backend *out)
{
	const struct kp_selection *sel = external ? &fe->external : &fe->internal;

	if (kp_pick_once(fk, fe, sel, client, out))
		return 1;
	fe = bpf_map_lookup_elem(&kp_frontends, fk);
	if (!fe)
		return 0;
	sel = external ? &fe->external : &fe->internal;
	if (sel->verdict != KP_VERDICT_FORWARD)
		return 0;
	return kp_pick_once(fk, fe, sel, client, out);
}

static __always_inline struct kp_config *kp_config_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&kp_config, &zero);
}

#endif
