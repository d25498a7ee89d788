/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The contract between kproxy's BPF programs and its planner
 * (crates/ebpf/src/maps.rs mirrors every struct here byte for byte).
 *
 * Conventions
 * - Addresses are 16 bytes: IPv6 as is, IPv4 as the mapped address
 *   ::ffff:a.b.c.d. Addresses and ports are in network byte order.
 * - Every struct has explicit padding, all padding is zero.
 * - A backend group is immutable once a frontend points at it: an update
 *   writes a new group, repoints the frontend with one map update, and the
 *   old group is deleted one sync later (see docs/ebpf.md, "Consistency").
 */
#ifndef KPROXY_MAPS_H
#define KPROXY_MAPS_H

#include <linux/types.h>

/* What a selection does. */
#define KP_VERDICT_FORWARD 0 /* count > 0: pick a backend */
#define KP_VERDICT_REJECT 1  /* refuse: ECONNREFUSED on the socket, reject mark on tc */
#define KP_VERDICT_DROP 2    /* silently drop (tc); the socket hook passes it untranslated */

/* How a selection picks a slot in [0, count). Weights and Maglev are laid
 * out by the planner as repeated slots, so the programs only pick a slot. */
#define KP_SCHED_RANDOM 0    /* bpf_get_prandom_u32() % count */
#define KP_SCHED_RR 1        /* per-group counter (kp_rr), fetch-and-add % count */
#define KP_SCHED_HASH_SRC 2  /* kp_hash(client) % count: sh, and mh (Maglev table of count slots) */
#define KP_SCHED_HASH_DST 3  /* kp_hash(frontend address) % count: dh */

/* kp_frontend.flags */
#define KP_F_EXTERNAL (1 << 0)      /* node port, external IP or load-balancer IP */
#define KP_F_SOURCE_RANGES (1 << 1) /* tc: drop sources outside kp_source_ranges[id] */
#define KP_F_MASQ_INTERNAL (1 << 2) /* tc: masquerade when the source is local (masqueradeAll) */
#define KP_F_MASQ_EXTERNAL (1 << 3) /* tc: masquerade when the source is not local */
#define KP_F_OWNED_ADDRESS (1 << 4) /* port-0 entry: the address is a cluster IP (see below) */

/* kp_config.flags */
#define KP_C_LOCAL_DETECTOR (1 << 0) /* kp_local_cidrs tells local sources; without it every tc source is external */

/*
 * kp_frontends (HASH, key kp_frontend_key, value kp_frontend)
 * One entry per (frontend address, port, protocol). A cluster IP also has
 * one entry with port 0 and proto 0 and KP_F_OWNED_ADDRESS whose internal
 * and external selections say what an unserved port of that address gets
 * (REJECT, as in the other modes).
 */
struct kp_frontend_key {
	__u8 addr[16];
	__be16 port;
	__u8 proto; /* IPPROTO_TCP, IPPROTO_UDP, IPPROTO_SCTP */
	__u8 pad;
};

struct kp_selection {
	__u32 group; /* kp_backends group id; 0 = none */
	__u16 count; /* slots in the group; 0: verdict applies */
	__u8 verdict; /* KP_VERDICT_* */
	__u8 sched;   /* KP_SCHED_* */
};

struct kp_frontend {
	/* Sockets in the cgroup always use `internal`; tc uses `internal` for
	 * local sources (kp_local_cidrs) and `external` for the others. */
	struct kp_selection internal;
	struct kp_selection external;
	__u32 id;               /* frontend id: kp_source_ranges, kp_affinity */
	__u32 affinity_timeout; /* seconds of inactivity; 0: no session affinity */
	__u32 flags;            /* KP_F_* */
	__u32 pad;
};

/* kp_backends (HASH, key kp_backend_key, value kp_backend) */
struct kp_backend_key {
	__u32 group;
	__u32 slot; /* [0, count) */
};

struct kp_backend {
	__u8 addr[16];
	__be16 port;
	__u16 pad;
};

/* kp_rr (HASH, key __u32 group, value __u64 counter): KP_SCHED_RR groups only. */

/*
 * kp_source_ranges (LPM_TRIE, key kp_range_key, value __u8 1)
 * prefixlen counts the 32 bits of `id` plus the range's bits in the
 * 128-bit address (an IPv4 /24 is 32 + 96 + 24).
 */
struct kp_range_key {
	__u32 prefixlen;
	__be32 id; /* kp_frontend.id, big-endian so it is the key's leading bits */
	__u8 addr[16];
};

/* kp_local_cidrs (LPM_TRIE, key kp_cidr_key, value __u8 1): the
 * local-traffic detector's CIDRs (clusterCIDR). */
struct kp_cidr_key {
	__u32 prefixlen; /* 0-128 over the 16-byte address */
	__u8 addr[16];
};

/*
 * kp_affinity (LRU_HASH, key kp_affinity_key, value kp_affinity)
 * The client is the source address on tc and, on the socket hooks, the
 * socket's network namespace cookie (one pod, one address).
 */
struct kp_affinity_key {
	__u8 client[16]; /* tc: source address; sockets: netns cookie in the first 8 bytes, rest 0 */
	__u32 id;        /* kp_frontend.id */
	__u32 scope;     /* 0: socket, 1: tc */
};

struct kp_affinity {
	__u64 last_seen_ns; /* bpf_ktime_get_ns() */
	struct kp_backend backend;
	__u32 pad;
};

/*
 * kp_flows (LRU_HASH, tc only, key kp_flow_key, value kp_flow): one entry
 * per connection NATed on tc, both directions:
 * - forward: client -> frontend, value = the backend (so later packets of
 *   the connection keep their backend);
 * - reverse: backend -> client, value = the frontend (the reply's source
 *   is rewritten back to it).
 */
struct kp_flow_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 direction; /* 0 forward, 1 reverse */
	__u16 pad;
};

struct kp_flow {
	__u8 addr[16];
	__be16 port;
	__u16 pad;
	__u32 mark; /* forward: the mark bits to set again (masquerade, reject) */
	__u64 last_seen_ns;
};

/*
 * kp_sock_rev (LRU_HASH, key kp_sock_rev_key, value kp_sock_rev): what the
 * socket hooks translated, so that recvmsg (UDP replies) and getpeername
 * show the frontend, not the backend. Written by connect and sendmsg.
 */
struct kp_sock_rev_key {
	__u64 cookie; /* bpf_get_socket_cookie() */
	__u8 addr[16]; /* the backend */
	__be16 port;
	__u16 pad;
	__u32 pad2;
};

struct kp_sock_rev {
	__u8 addr[16]; /* the frontend */
	__be16 port;
	__u16 pad;
};

/* kp_config (ARRAY, one entry, key __u32 0) */
struct kp_config {
	__u64 node_netns_cookie; /* the netns kproxy runs in (the node's) */
	__u32 masquerade_mark;   /* 1 << masqueradeBit */
	__u32 reject_mark;       /* tc: mark for the companion table's reject rule */
	__u32 flags;             /* KP_C_* */
	__u32 pad;
};

/* The client hash of KP_SCHED_HASH_*: the 16 bytes as four little-endian
 * u32 words w0..w3; h = 0x9e3779b9; for each w: h ^= w; h *= 0x85ebca6b;
 * h ^= h >> 13; then h ^= h >> 16; h *= 0x85ebca6b; h ^= h >> 13;
 * h *= 0xc2b2ae35; h ^= h >> 16 (all u32, wrapping). The planner's tracer
 * computes the same (crates/ebpf/src/hash.rs has shared test vectors). */

#endif
