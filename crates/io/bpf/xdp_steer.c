// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * fastfwd XDP steering program.
 *
 * Attached to every interface fastfwd forwards on. It decides, per frame,
 * who handles it:
 *   - transit IPv4 / IPv6 (unicast, not addressed to this router) goes to
 *     fastfwd's AF_XDP socket bound to the receiving queue (XSKMAP entry
 *     keyed by the RX queue index);
 *   - everything the host must see stays with the kernel (XDP_PASS): ARP,
 *     IPv6 link-local and multicast destinations (ND, RA, MLD), IPv4
 *     broadcast and multicast, packets to the router's own addresses (held
 *     in the local_v4 / local_v6 hash maps, kept current by fastfwd's control
 *     thread), and every ethertype fastfwd does not forward.
 * If no socket is bound to the queue the redirect falls back to XDP_PASS,
 * so the interface keeps working as a plain kernel interface.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_QUEUES 64

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* The router's own IPv4 addresses (network byte order). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} local_v4 SEC(".maps");

/* The router's own IPv6 addresses. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct in6_addr);
	__type(value, __u8);
} local_v6 SEC(".maps");

/* Per-CPU verdict counters: 0 redirected, 1 passed to the host. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} verdicts SEC(".maps");

static __always_inline int count(int which, int verdict)
{
	__u32 key = which;
	__u64 *v = bpf_map_lookup_elem(&verdicts, &key);
	if (v)
		*v += 1;
	return verdict;
}

static __always_inline int to_host(void)
{
	return count(1, XDP_PASS);
}

static __always_inline int to_fastfwd(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;
	/* Low bits of flags: the action when the map slot is empty. */
	int verdict = bpf_redirect_map(&xsks, queue, XDP_PASS);
	return count(verdict == XDP_REDIRECT ? 0 : 1, verdict);
}

SEC("xdp")
int xdp_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u64 off = sizeof(*eth);
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return to_host();
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vh = data + off;
		if ((void *)(vh + 1) > end)
			return to_host();
		proto = vh->proto;
		off += sizeof(*vh);
	}
	/* Frames not addressed to a unicast MAC (broadcast, multicast) are host business. */
	if (eth->h_dest[0] & 1)
		return to_host();

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		__u32 dst;
		if ((void *)(ip + 1) > end)
			return to_host();
		dst = ip->daddr;
		/* 224.0.0.0/4 multicast and the limited broadcast. */
		if ((bpf_ntohl(dst) & 0xf0000000) == 0xe0000000 || dst == 0xffffffff)
			return to_host();
		if (bpf_map_lookup_elem(&local_v4, &dst))
			return to_host();
		return to_fastfwd(ctx);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > end)
			return to_host();
		/* ff00::/8 multicast (ND, MLD, RA) and fe80::/10 link-local. */
		if (ip6->daddr.s6_addr[0] == 0xff)
			return to_host();
		if (ip6->daddr.s6_addr[0] == 0xfe && (ip6->daddr.s6_addr[1] & 0xc0) == 0x80)
			return to_host();
		if (bpf_map_lookup_elem(&local_v6, &ip6->daddr))
			return to_host();
		return to_fastfwd(ctx);
	}
	return to_host();
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
