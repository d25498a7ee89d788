/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The cgroup sock_addr programs: socket-level load balancing. connect and
 * sendmsg rewrite the destination of a socket in the cgroup from a
 * frontend to a backend, so every packet already carries the backend and
 * netfilter never NATs it (no conntrack NAT entry); recvmsg and
 * getpeername show the frontend again (kp_sock_rev).
 *
 * Not translated: loopback destinations. IPv4 destinations of IPv6
 * sockets (v4-mapped, ::ffff:a.b.c.d) are translated like IPv4 ones.
 */
#ifndef KP_SOCK_H
#define KP_SOCK_H

#include "kp_lb.h"

#define KP_ECONNREFUSED 111
#define KP_SOCK_ALLOW 1

/* The verifier wants every user_ip6 access as its own 4-byte load or
 * store at a constant offset from ctx, so no loops here. */
static __always_inline void kp_ctx_ip6_get(struct bpf_sock_addr *ctx, __u32 w[4])
{
	w[0] = ctx->user_ip6[0];
	w[1] = ctx->user_ip6[1];
	w[2] = ctx->user_ip6[2];
	w[3] = ctx->user_ip6[3];
}

static __always_inline void kp_ctx_ip6_set(struct bpf_sock_addr *ctx, const __u32 w[4])
{
	ctx->user_ip6[0] = w[0];
	ctx->user_ip6[1] = w[1];
	ctx->user_ip6[2] = w[2];
	ctx->user_ip6[3] = w[3];
}

/* The client of a socket: its network namespace (one pod, one address). */
static __always_inline void kp_sock_client(struct bpf_sock_addr *ctx, struct kp_client *client)
{
	__u64 cookie = bpf_get_netns_cookie(ctx);

	__builtin_memset(client, 0, sizeof(*client));
	__builtin_memcpy(client->id, &cookie, 8);
	client->scope = 0;
	client->hash = kp_hash(client->id);
}

/* Translate {key} for the socket; writes the backend to *be. Returns
 * 1 translate, 0 pass untranslated, -1 refuse. */
static __always_inline int kp_sock_forward(struct bpf_sock_addr *ctx, struct kp_frontend_key *key,
					   struct kp_backend *be)
{
	struct kp_sock_rev_key rkey = {};
	struct kp_sock_rev rev = {};
	struct kp_frontend *fe;
	struct kp_client client;

	fe = kp_frontend_lookup(key);
	if (!fe)
		return 0;
	switch (fe->internal.verdict) {
	case KP_VERDICT_REJECT:
		return -1;
	case KP_VERDICT_FORWARD:
		break;
	default:
		/* DROP: the companion nftables table drops the packets. */
		return 0;
	}
	kp_sock_client(ctx, &client);
	if (!kp_pick(key, fe, 0, &client, be))
		return 0;
	/* A backend of the other family cannot serve this connection. */
	if (kp_addr_is_v4(be->addr) != kp_addr_is_v4(key->addr))
		return 0;
	rkey.cookie = bpf_get_socket_cookie(ctx);
	__builtin_memcpy(rkey.addr, be->addr, 16);
	rkey.port = be->port;
	__builtin_memcpy(rev.addr, key->addr, 16);
	rev.port = key->port;
	bpf_map_update_elem(&kp_sock_rev, &rkey, &rev, BPF_ANY);
	return 1;
}

static __always_inline int kp_sock_refuse(struct bpf_sock_addr *ctx)
{
	bpf_set_retval(-KP_ECONNREFUSED);
	return 0;
}

static __always_inline int kp_sock4(struct bpf_sock_addr *ctx)
{
	struct kp_frontend_key key = {};
	struct kp_backend be;
	__be32 ip = ctx->user_ip4;
	__be32 backend_ip;
	int ret;

	if ((bpf_ntohl(ip) >> 24) == 127)
		return KP_SOCK_ALLOW;
	kp_addr_v4(key.addr, ip);
	key.port = (__be16)ctx->user_port;
	key.proto = ctx->protocol;
	ret = kp_sock_forward(ctx, &key, &be);
	if (ret < 0)
		return kp_sock_refuse(ctx);
	if (ret == 0)
		return KP_SOCK_ALLOW;
	__builtin_memcpy(&backend_ip, be.addr + 12, 4);
	ctx->user_ip4 = backend_ip;
	ctx->user_port = be.port;
	return KP_SOCK_ALLOW;
}

static __always_inline int kp_sock6(struct bpf_sock_addr *ctx)
{
	struct kp_frontend_key key = {};
	struct kp_backend be;
	__u32 w[4];
	int ret;

	kp_ctx_ip6_get(ctx, w);
	__builtin_memcpy(key.addr, w, 16);
	/* ::1 and ::ffff:127.0.0.0/104 are loopback. An IPv4 destination on
	 * an IPv6 socket is v4-mapped, which is how the maps write IPv4: it
	 * finds the IPv4 frontend and gets a v4-mapped backend. */
	if (w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == bpf_htonl(1))
		return KP_SOCK_ALLOW;
	if (kp_addr_is_v4(key.addr) && (bpf_ntohl(w[3]) >> 24) == 127)
		return KP_SOCK_ALLOW;
	key.port = (__be16)ctx->user_port;
	key.proto = ctx->protocol;
	ret = kp_sock_forward(ctx, &key, &be);
	if (ret < 0)
		return kp_sock_refuse(ctx);
	if (ret == 0)
		return KP_SOCK_ALLOW;
	__builtin_memcpy(w, be.addr, 16);
	kp_ctx_ip6_set(ctx, w);
	ctx->user_port = be.port;
	return KP_SOCK_ALLOW;
}

/* recvmsg/getpeername: the peer (a backend) shown as the frontend. */
static __always_inline int kp_sock_rev4(struct bpf_sock_addr *ctx)
{
	struct kp_sock_rev_key key = {};
	struct kp_sock_rev *rev;
	__be32 ip;

	key.cookie = bpf_get_socket_cookie(ctx);
	kp_addr_v4(key.addr, ctx->user_ip4);
	key.port = (__be16)ctx->user_port;
	rev = bpf_map_lookup_elem(&kp_sock_rev, &key);
	if (!rev)
		return KP_SOCK_ALLOW;
	__builtin_memcpy(&ip, rev->addr + 12, 4);
	ctx->user_ip4 = ip;
	ctx->user_port = rev->port;
	return KP_SOCK_ALLOW;
}

static __always_inline int kp_sock_rev6(struct bpf_sock_addr *ctx)
{
	struct kp_sock_rev_key key = {};
	struct kp_sock_rev *rev;
	__u32 w[4];

	key.cookie = bpf_get_socket_cookie(ctx);
	kp_ctx_ip6_get(ctx, w);
	__builtin_memcpy(key.addr, w, 16);
	key.port = (__be16)ctx->user_port;
	rev = bpf_map_lookup_elem(&kp_sock_rev, &key);
	if (!rev)
		return KP_SOCK_ALLOW;
	__builtin_memcpy(w, rev->addr, 16);
	kp_ctx_ip6_set(ctx, w);
	ctx->user_port = rev->port;
	return KP_SOCK_ALLOW;
}

SEC("cgroup/connect4")
int kp_connect4(struct bpf_sock_addr *ctx)
{
	return kp_sock4(ctx);
}

SEC("cgroup/sendmsg4")
int kp_sendmsg4(struct bpf_sock_addr *ctx)
{
	return kp_sock4(ctx);
}

SEC("cgroup/connect6")
int kp_connect6(struct bpf_sock_addr *ctx)
{
	return kp_sock6(ctx);
}

SEC("cgroup/sendmsg6")
int kp_sendmsg6(struct bpf_sock_addr *ctx)
{
	return kp_sock6(ctx);
}

SEC("cgroup/recvmsg4")
int kp_recvmsg4(struct bpf_sock_addr *ctx)
{
	return kp_sock_rev4(ctx);
}

SEC("cgroup/getpeername4")
int kp_getpeername4(struct bpf_sock_addr *ctx)
{
	return kp_sock_rev4(ctx);
}

SEC("cgroup/recvmsg6")
int kp_recvmsg6(struct bpf_sock_addr *ctx)
{
	return kp_sock_rev6(ctx);
}

SEC("cgroup/getpeername6")
int kp_getpeername6(struct bpf_sock_addr *ctx)
{
	return kp_sock_rev6(ctx);
}

#endif
