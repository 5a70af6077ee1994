// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * fastfwd's in-kernel forwarding engine.
 *
 * Attached to every forwarding interface, it runs the user-space
 * pipeline's stages (crates/pipeline/src/stages) on each frame in the
 * driver's receive path, in the same order and with the same checks, over
 * tables the control plane compiles from the same router state
 * (fastfwd_xdp.h describes them):
 *
 *   1. Ethernet / 802.1Q dispatch to a logical interface; unicast frames
 *      for other MACs dropped (not_our_mac). ARP as the pipeline's arp
 *      stage (RFC 826).
 *   2. IPv4 validation (RFC 1812 §5.2.2, header checksum included),
 *      martians (§5.3.7), local delivery; IPv6 (RFC 8200 §3, RFC 4291).
 *   3. Longest-prefix match in the poptrie, next-hop set, ECMP by the
 *      pipeline's 5-tuple hash (so both engines pick the same member).
 *   4. MTU check, TTL / hop-limit decrement (RFC 1624 checksum update),
 *      L2 rewrite, redirect through the `tx_ports` devmap.
 *
 * Every packet the program cannot finish exactly as the pipeline would is
 * an exception: it goes, unchanged, to fastfwd's AF_XDP socket on the
 * receiving queue (`xsks`), and the user-space pipeline handles it (ICMP
 * errors, neighbour misses, IPv4 options, fragmentation, firewall rules).
 * Host traffic goes to the kernel (XDP_PASS). Every outcome is counted,
 * and so is every redirected frame the kernel then drops (two tracepoint
 * programs at the end of this file).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "fastfwd_xdp.h"

#define ARRAY(name, n, value_t)                         \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY);       \
		__uint(max_entries, n);                 \
		__type(key, __u32);                     \
		__type(value, value_t);                 \
	} name SEC(".maps")

#define HASH(name, n, key_t, value_t)                   \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_HASH);        \
		__uint(max_entries, n);                 \
		__type(key, key_t);                     \
		__type(value, value_t);                 \
	} name SEC(".maps")

ARRAY(config, 1, struct ff_config);
ARRAY(ports, 2 * FF_MAX_PORTS, struct ff_port);
ARRAY(ifaces, 2 * FF_MAX_IFACES, struct ff_iface);
ARRAY(adjacencies, 2 * FF_MAX_ADJ, struct ff_adj);
ARRAY(hops, 2 * FF_MAX_HOPS, struct ff_hop);
/* FIB sizes here are defaults; the loader sets them (two halves each). */
ARRAY(fib4_top, 2 * FF_TOP4_PAIRS, __u64);
ARRAY(fib4_nodes, 2 * 4096, struct ff_node);
ARRAY(fib4_leaves, 2 * 4096, __u64);
ARRAY(fib6_top, 2 * FF_TOP6_PAIRS, __u64);
ARRAY(fib6_nodes, 2 * 4096, struct ff_node);
ARRAY(fib6_leaves, 2 * 4096, __u64);
HASH(vlans, 2 * FF_MAX_VLANS, struct ff_vlan_key, __u32);
HASH(neighbours, 2 * FF_MAX_NEIGHBOURS, struct ff_neigh_key, struct ff_mac);
HASH(local4, 2 * FF_MAX_LOCAL, struct ff_local4_key, __u32);
HASH(local6, 2 * FF_MAX_LOCAL, struct ff_local6_key, __u32);
ARRAY(test_out, 1, struct ff_test_out);
/* The clock of test runs (FF_CFG_TEST): replay's time, in ns. */
ARRAY(test_clock, 1, __u64);
HASH(ct_flows, FF_CT_MAX, struct ff_ct_key, struct ff_ct_value);
ARRAY(fw_meta, 4, struct ff_fw_meta);
ARRAY(fw_data, 2 * 4096, __u64);
ARRAY(fw_actions, 2 * FF_FW_MAX_SLOTS, __u32);
ARRAY(rule_filters, 8, struct ff_rule_filter);
HASH(rule_prefixes, 2 * FF_MAX_RULE_PREFIXES, struct ff_rule_key, __u8);

/* A forwarding decision waiting for the firewall: the program's entry
 * calls the classifier and then ff_forward itself, so the chain of global
 * functions (each with its own stack) stays within 512 bytes. */
#define FF_NEED_FW 0x100
struct fwd_scratch {
	__u32 out_if;
	__u32 l3_len;
	__u8 mac[6];
	__u16 v6;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fwd_scratch);
} fwd_scratch SEC(".maps");

/* Per-CPU room for the classifier's per-packet arrays (the stack of a
 * chain of global functions is limited to 512 bytes). */
struct fw_scratch {
	__u32 cls[16];
	__u32 value[16];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_scratch);
} fw_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * FF_FW_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct ff_fw_counter);
} fw_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ff_counters);
} counters SEC(".maps");

/* Egress, by port id. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, FF_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

/* Exceptions, by port id * FF_MAX_QUEUES + RX queue. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, FF_MAX_PORTS * FF_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* The receiving port, by ifindex: the port id in the low 16 bits; the
 * high 16 bits number the first of the interface's exception sockets
 * within the port's (0 but for the members of an aggregated port, whose
 * sockets are numbered one member after the other). */
HASH(ifindex_port, FF_MAX_RECEIVERS, __u32, __u32);

/* Redirected frames the kernel dropped, by port (the tracepoints). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FF_TX_FAULT_SLOTS);
	__type(key, __u32);
	__type(value, struct ff_tx_fault);
} tx_faults SEC(".maps");

#define ETH_P_8021AD_ 0x88A8

/* What the stages decided for one packet. */
struct ctx {
	struct ff_config *cfg;
	struct ff_counters *ctr;
	__u32 set;       /* the active half */
	__u32 port;
	__u32 in_if;     /* FF_NO_IFACE until known */
	__u32 frame_len;
	__u32 l3;        /* offset of the IP header */
	__u32 l3_len;    /* IP packet length */
	int unicast;     /* frame addressed to the interface's MAC */
};

/* The counters of interface i (NULL if none); the mask keeps the index
 * provably inside the array for the verifier. */
static __always_inline struct ff_if_counters *if_ctr(struct ctx *c, __u32 i)
{
	if (i >= FF_MAX_IFACES)
		return 0;
	/* The compiler may drop the check above where it proved it; the
	 * verifier may not have. The barrier keeps the mask. */
	asm volatile("" : "+r"(i));
	return &c->ctr->ifaces[i & (FF_MAX_IFACES - 1)];
}

static __always_inline int count_in(struct ctx *c)
{
	struct ff_if_counters *ic = if_ctr(c, c->in_if);
	if (ic) {
		ic->rx_packets++;
		ic->rx_bytes += c->frame_len;
	}
	c->ctr->rx_frames++;
	return 0;
}

static __always_inline void record_hint(struct ctx *c, __u32 kind, __u32 detail, __u32 hint)
{
	if (c->cfg->flags & FF_CFG_TEST) {
		__u32 k = 0;
		struct ff_test_out *o = bpf_map_lookup_elem(&test_out, &k);
		if (o) {
			o->kind = kind;
			o->detail = detail;
			o->ct_hint = hint;
		}
	}
}

static __always_inline void record(struct ctx *c, __u32 kind, __u32 detail)
{
	record_hint(c, kind, detail, FF_CT_HINT_NONE);
}

/* A drop the pipeline counts with drop_in (ingress interface known). */
static __always_inline int drop(struct ctx *c, __u32 reason)
{
	count_in(c);
	if (reason < FF_DROP_SLOTS)
		c->ctr->drops[reason]++;
	struct ff_if_counters *ic = if_ctr(c, c->in_if);
	if (ic)
		ic->rx_dropped++;
	record(c, FF_OUT_DROP, reason);
	return XDP_DROP;
}

static __always_inline int punt(struct ctx *c, __u32 reason)
{
	count_in(c);
	if (reason < FF_PUNT_SLOTS)
		c->ctr->punts[reason]++;
	record(c, FF_OUT_PUNT, reason);
	return XDP_PASS;
}

static __always_inline int to_host(struct ctx *c)
{
	c->ctr->to_host++;
	record(c, FF_OUT_HOST, 0);
	return XDP_PASS;
}

/* Hands the unchanged frame to the user-space pipeline, with `hint` (what
 * connection tracking found) in its metadata. Nothing was counted for it
 * here: the pipeline counts it as if it had seen it first. */
static __always_inline int hand_over(struct xdp_md *xdp, struct ctx *c, __u32 why, __u32 hint)
{
	if (why < FF_EXC_SLOTS)
		c->ctr->exceptions[why]++;
	if (c->cfg->flags & FF_CFG_TEST) {
		record_hint(c, FF_OUT_EXCEPTION, why, hint);
		return XDP_PASS;
	}
	/* The hint goes in front of the frame (struct ff_meta), which the
	 * pipeline strips: a prefix rather than XDP metadata, which some
	 * kernels refuse to XDP programs altogether (bpf_xdp_adjust_meta) and
	 * some drivers do not support, where every driver has headroom. */
	int prefixed = bpf_xdp_adjust_head(xdp, -(int)sizeof(struct ff_meta)) == 0;
	if (prefixed) {
		struct ff_meta *m = (void *)(long)xdp->data;
		if ((void *)(m + 1) <= (void *)(long)xdp->data_end) {
			m->magic = FF_META_MAGIC;
			m->ct_hint = hint;
		}
	} else {
		c->ctr->meta_failed++;
	}
	/* A bond member's socket sits at its own offset within the port's. */
	__u32 slot = xdp->rx_queue_index;
	__u32 ifindex = xdp->ingress_ifindex;
	__u32 *rx = bpf_map_lookup_elem(&ifindex_port, &ifindex);
	if (rx)
		slot += *rx >> 16;
	if (slot >= FF_MAX_QUEUES) {
		c->ctr->exceptions_lost++;
		return XDP_DROP;
	}
	__u32 key = c->port * FF_MAX_QUEUES + slot;
	__u64 fallback = (c->cfg->flags & FF_CFG_EXCEPTIONS_TO_KERNEL) ? XDP_PASS : XDP_DROP;
	int r = bpf_redirect_map(&xsks, key, fallback);
	if (r == XDP_DROP)
		c->ctr->exceptions_lost++;
	/* The kernel gets the frame as it arrived, without the hint. */
	if (r == XDP_PASS && prefixed)
		bpf_xdp_adjust_head(xdp, (int)sizeof(struct ff_meta));
	return r;
}

/* A transit packet to hand over after connection tracking (the entry
 * does both: it keeps the chain of global functions within the stack). */
#define FF_NEED_CT 0x200

/* Hands the frame over for `why`. A transit packet the pipeline will run
 * through its firewall (IPv4 options, neighbour miss, MTU, everything in
 * except-all mode, a table fault) goes through connection tracking first,
 * as it would there (FF_NEED_CT: the entry does it); the others (TTL
 * expiring, no route) never reach the pipeline's firewall. */
static __always_inline int exception(struct xdp_md *xdp, struct ctx *c, __u32 why)
{
	if ((c->cfg->flags & FF_CFG_CONNTRACK) && why != FF_EXC_TTL && why != FF_EXC_NO_ROUTE)
		return FF_NEED_CT | why;
	return hand_over(xdp, c, why, FF_CT_HINT_NONE);
}

#include "fib.h"

static __always_inline __u64 rotl64(__u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* The pipeline's flow_hash (crates/pipeline/src/stages/mod.rs): addresses
 * as u128 (IPv4 as ::ffff:a.b.c.d), protocol, ports (0 for fragments). */
static __always_inline __u32 flow_hash(__u64 src_hi, __u64 src_lo, __u64 dst_hi, __u64 dst_lo,
				       __u8 protocol, __u32 ports)
{
	__u64 h = src_lo ^ rotl64(src_hi, 23);
	h *= 0x9e3779b97f4a7c15ULL;
	h ^= rotl64(dst_lo, 17) ^ rotl64(dst_hi, 41);
	h *= 0xc2b2ae3d27d4eb4fULL;
	h ^= ((__u64)protocol << 32) | ports;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return (__u32)h;
}

static __always_inline __u16 be16_at(const __u8 *p)
{
	return ((__u16)p[0] << 8) | p[1];
}

/* The ports part of the flow key for the transport header at l4 (offset
 * in the frame), within the IP packet ending at pkt_end. */
static __always_inline __u32 l4_ports(void *data, void *end, __u32 l4, __u32 pkt_end, __u8 protocol)
{
	/* Beyond any frame (a page): no ports, as in the pipeline. The bound
	 * also lets the verifier track the pointer. */
	if (l4 > 8192)
		return 0;
	__u8 *p = data + l4;
	__u32 room = pkt_end > l4 ? pkt_end - l4 : 0;
	switch (protocol) {
	case 6:
	case 17:
	case 132:
	case 136:
		if (room < 4 || (void *)(p + 4) > end)
			return 0;
		return ((__u32)be16_at(p) << 16) | be16_at(p + 2);
	case 1:
	case 58: {
		if (room < 2 || (void *)(p + 2) > end)
			return 0;
		__u32 sp = be16_at(p);
		__u32 dp = 0;
		if (room >= 6 && (void *)(p + 6) <= end)
			dp = be16_at(p + 4);
		return (sp << 16) | dp;
	}
	}
	return 0;
}

/* The pipeline's IPv6 upper-layer walk (stages/ipv6.rs upper_layer) over
 * the packet at l3 of length l3_len: protocol (bits 0-7), its offset from
 * the IPv6 header (bits 8-31), fragment (bit 32), non-first fragment
 * (bit 33). A global function, verified on its own. */
__noinline __u64 ff_upper6(struct xdp_md *xdp, __u32 l3, __u32 l3_len)
{
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	__u64 flags = 0;
	if (l3 > 22)
		return 59 | (40 << 8);
	__u8 *h = data + l3;
	if ((void *)(h + 40) > end)
		return 59 | (40 << 8);
	__u32 nh = h[6];
	__u32 off = 40;
	for (int i = 0; i < 8; i++) {
		/* Frames are at most a page: the pipeline's walk ends by then too. */
		if (off > 4096)
			break;
		__u8 *x = data + l3 + off;
		if (nh == 0 || nh == 43 || nh == 60) {
			if (off + 2 > l3_len || (void *)(x + 2) > end)
				break;
			nh = x[0];
			off += ((__u32)x[1] + 1) * 8;
		} else if (nh == 44) {
			if (off + 8 > l3_len || (void *)(x + 8) > end)
				break;
			nh = x[0];
			__u16 off_m = be16_at(x + 2);
			if (off_m & 0xfff9)
				flags |= 1ULL << 32;
			off += 8;
			if (off_m & 0xfff8) {
				flags |= 1ULL << 33;
				break;
			}
		} else if (nh == 51) {
			if (off + 2 > l3_len || (void *)(x + 2) > end)
				break;
			nh = x[0];
			off += ((__u32)x[1] + 2) * 4;
		} else {
			break;
		}
	}
	return flags | ((__u64)(off & 0xffffff) << 8) | (nh & 0xff);
}

/* Eight bytes in network order (one load: unaligned loads are fine on
 * the architectures XDP runs on, and the verifier allows them). */
static __always_inline __u64 load_be64(const __u8 *p)
{
	return bpf_be64_to_cpu(*(const __u64 *)p);
}

static __always_inline __u16 csum_update16(__u16 csum, __u16 old, __u16 new)
{
	__u64 acc = (__u64)(__u16)~csum + (__u16)~old + new;
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	return ~(__u16)acc;
}

/* One's-complement check of a 20-byte IPv4 header (h + 20 <= end). */
static __always_inline int ipv4_checksum_ok(__u8 *h)
{
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 20; i += 2)
		sum += be16_at(h + i);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/* The chosen next hop, after the lookup. */
struct hop_choice {
	__u32 out_if;
	__u8 mac[6];
};

/* The ECMP hash of the IPv4 packet at c->l3 (stages flow_key, flow_hash). */
static __always_inline __u32 hash4(struct xdp_md *xdp, struct ctx *c)
{
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	__u32 l3 = c->l3;
	if (l3 > 22)
		return 0;
	__u8 *h = data + l3;
	if ((void *)(h + 20) > end)
		return 0;
	__u32 src_be, dst_be;
	__builtin_memcpy(&src_be, h + 12, 4);
	__builtin_memcpy(&dst_be, h + 16, 4);
	__u16 frag = be16_at(h + 6);
	__u32 ports = 0;
	/* Options went to the pipeline: the transport header is at 20. */
	if ((frag & 0x1fff) == 0)
		ports = l4_ports(data, end, l3 + 20, l3 + c->l3_len, h[9]);
	if (frag & 0x3fff)
		ports = 0;
	return flow_hash(0, 0xffff00000000ULL | bpf_ntohl(src_be), 0,
			 0xffff00000000ULL | bpf_ntohl(dst_be), h[9], ports);
}

/* The same for IPv6, through the upper-layer walk. */
static __always_inline __u32 hash6(struct xdp_md *xdp, struct ctx *c)
{
	__u64 u = ff_upper6(xdp, c->l3, c->l3_len);
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	__u32 l3 = c->l3;
	if (l3 > 22)
		return 0;
	__u8 *h = data + l3;
	if ((void *)(h + 40) > end)
		return 0;
	__u32 protocol = u & 0xff, offset = (u >> 8) & 0xffffff;
	__u32 ports = 0;
	if (!(u & (1ULL << 33)))
		ports = l4_ports(data, end, l3 + offset, l3 + c->l3_len, protocol);
	if (u & (1ULL << 32))
		ports = 0;
	return flow_hash(load_be64(h + 8), load_be64(h + 16), load_be64(h + 24), load_be64(h + 32),
			 protocol, ports);
}

/* Next-hop set, ECMP member and neighbour (stages choose_hop and forward).
 * key_hi/key_lo: the destination as the neighbour table keys it. Returns
 * 0 with the choice made, else -1 with *verdict set (finished). */
static __always_inline int choose(struct xdp_md *xdp, struct ctx *c, __u32 nh, int v6,
				  __u64 key_hi, __u64 key_lo, struct hop_choice *out, int *verdict)
{
	if (nh == FF_NO_ROUTE) {
		*verdict = exception(xdp, c, FF_EXC_NO_ROUTE);
		return -1;
	}
	if (nh >= FF_MAX_ADJ) {
		*verdict = drop(c, FF_DROP_BAD_NEXT_HOP);
		return -1;
	}
	__u32 k = c->set * FF_MAX_ADJ + nh;
	struct ff_adj *adj = bpf_map_lookup_elem(&adjacencies, &k);
	if (!adj) {
		*verdict = exception(xdp, c, FF_EXC_TABLE);
		return -1;
	}
	__u32 start = adj->start, count = adj->count;
	if (count == 0) {
		if (start == FF_DISCARD_BLACKHOLE)
			*verdict = drop(c, FF_DROP_ROUTE_BLACKHOLE);
		else if (start >= FF_DISCARD_UNREACHABLE && start <= FF_DISCARD_THROW)
			*verdict = exception(xdp, c, FF_EXC_NO_ROUTE);
		else
			*verdict = drop(c, FF_DROP_BAD_NEXT_HOP);
		return -1;
	}
	__u32 pick = 0;
	if (count > 1) {
		__u32 hash = v6 ? hash6(xdp, c) : hash4(xdp, c);
		pick = (__u32)(((__u64)hash * count) >> 32);
	}
	__u32 idx = start + pick;
	if (idx >= FF_MAX_HOPS) {
		*verdict = drop(c, FF_DROP_BAD_NEXT_HOP);
		return -1;
	}
	k = c->set * FF_MAX_HOPS + idx;
	struct ff_hop *hop = bpf_map_lookup_elem(&hops, &k);
	if (!hop) {
		*verdict = exception(xdp, c, FF_EXC_TABLE);
		return -1;
	}
	out->out_if = hop->iface;
	if (hop->flags & FF_HOP_GATEWAY) {
		if (!(hop->flags & FF_HOP_MAC)) {
			*verdict = exception(xdp, c, FF_EXC_NEIGHBOUR);
			return -1;
		}
		__builtin_memcpy(out->mac, hop->mac, 6);
		return 0;
	}
	struct ff_neigh_key nk = {.iface = hop->iface, .set = c->set};
	__u64 hb = bpf_cpu_to_be64(key_hi), lb = bpf_cpu_to_be64(key_lo);
	__builtin_memcpy(nk.addr, &hb, 8);
	__builtin_memcpy(nk.addr + 8, &lb, 8);
	struct ff_mac *m = bpf_map_lookup_elem(&neighbours, &nk);
	if (!m) {
		*verdict = exception(xdp, c, FF_EXC_NEIGHBOUR);
		return -1;
	}
	__builtin_memcpy(out->mac, m->mac, 6);
	return 0;
}

/* The egress interface and the MTU check (stage forward, first part).
 * NULL with *verdict set when the packet is finished or handed on. */
static __always_inline struct ff_iface *egress(struct xdp_md *xdp, struct ctx *c, struct hop_choice *hc,
					       int *verdict)
{
	if (hc->out_if >= FF_MAX_IFACES) {
		*verdict = exception(xdp, c, FF_EXC_TABLE);
		return 0;
	}
	__u32 k = c->set * FF_MAX_IFACES + hc->out_if;
	struct ff_iface *out = bpf_map_lookup_elem(&ifaces, &k);
	if (!out) {
		*verdict = exception(xdp, c, FF_EXC_TABLE);
		return 0;
	}
	if (c->l3_len > out->mtu) {
		*verdict = exception(xdp, c, FF_EXC_MTU);
		return 0;
	}
	if (out->flags & FF_IFACE_PUNT_TX) {
		*verdict = exception(xdp, c, FF_EXC_EGRESS);
		return 0;
	}
	return out;
}

/* TTL / hop limit, L2 rewrite and transmit (stage forward, the rest). */
static __always_inline int transmit(struct xdp_md *xdp, struct ctx *c, struct hop_choice *hc,
				    struct ff_iface *out, int v6)
{
	__u32 tmpl_len = out->tmpl_len;
	__u32 l2_len = 6 + tmpl_len + 2;
	__u32 port = out->port;

	/* Counted now, while the frame's ingress facts are at hand. */
	count_in(c);

	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	/* TTL / hop limit first, at the ingress offsets. */
	__u32 l3 = c->l3;
	if (l3 > 22)
		return XDP_ABORTED;
	__u8 *ip = data + l3;
	if (v6) {
		if ((void *)(ip + 40) > end)
			return XDP_ABORTED;
		ip[7] -= 1;
	} else {
		if ((void *)(ip + 20) > end)
			return XDP_ABORTED;
		__u8 ttl = ip[8];
		__u16 old = ((__u16)ttl << 8) | ip[9];
		__u16 new = ((__u16)(ttl - 1) << 8) | ip[9];
		__u16 sum = csum_update16(be16_at(ip + 10), old, new);
		ip[8] = ttl - 1;
		ip[10] = sum >> 8;
		ip[11] = sum & 0xff;
	}
	/* Ethernet padding past the IP packet is not forwarded. */
	__u32 pkt_end = l3 + c->l3_len;
	if (c->frame_len > pkt_end) {
		if (bpf_xdp_adjust_tail(xdp, -(int)(c->frame_len - pkt_end)))
			return XDP_ABORTED;
	}
	/* The ingress L2 header becomes the egress one. */
	int delta = (int)l3 - (int)l2_len;
	if (delta && bpf_xdp_adjust_head(xdp, delta))
		return XDP_ABORTED;
	data = (void *)(long)xdp->data;
	end = (void *)(long)xdp->data_end;
	__u8 *eth = data;
	if ((void *)(eth + 22) > end)
		return XDP_ABORTED;
	__builtin_memcpy(eth, hc->mac, 6);
	__u16 et = v6 ? bpf_htons(ETH_P_IPV6) : bpf_htons(ETH_P_IP);
	if (tmpl_len == 6) {
		__builtin_memcpy(eth + 6, out->tmpl, 6);
		__builtin_memcpy(eth + 12, &et, 2);
	} else if (tmpl_len == 10) {
		__builtin_memcpy(eth + 6, out->tmpl, 10);
		__builtin_memcpy(eth + 16, &et, 2);
	} else {
		__builtin_memcpy(eth + 6, out->tmpl, 14);
		__builtin_memcpy(eth + 20, &et, 2);
	}
	if (v6)
		c->ctr->forwarded_ipv6++;
	else
		c->ctr->forwarded_ipv4++;
	struct ff_if_counters *oc = if_ctr(c, hc->out_if);
	if (oc) {
		oc->tx_packets++;
		oc->tx_bytes += l2_len + c->l3_len;
	}
	if (c->cfg->flags & FF_CFG_TEST) {
		record(c, FF_OUT_FORWARD, port);
		return XDP_TX;
	}
	int r = bpf_redirect_map(&tx_ports, port, 0);
	if (r != XDP_REDIRECT)
		c->ctr->tx_redirect_failed++;
	return r;
}


#include "conntrack.h"

#include "firewall.h"

static __always_inline int local4_kind(__u32 set, __u32 dst_be)
{
	struct ff_local4_key key = {.addr = dst_be, .set = set};
	__u32 *k = bpf_map_lookup_elem(&local4, &key);
	return k ? *k : 0;
}

static __always_inline int is_local6(__u32 set, __u8 *addr)
{
	struct ff_local6_key key = {.set = set};
	__builtin_memcpy(key.addr, addr, 16);
	return bpf_map_lookup_elem(&local6, &key) != 0;
}

/* What the L2 stage found, packed for the per-family global functions:
 * ingress interface (bits 0-15), port (16-23), L3 offset (24-28), the
 * tables' half read once at the program's entry (bit 29), addressed to
 * the interface's MAC (bit 31). */
#define META(in_if, port, l3, set, unicast) \
	((in_if) | ((port) << 16) | ((l3) << 24) | ((set) << 29) | ((__u32)(unicast) << 31))

/* Rebuilds the per-packet context inside a global function. */
static __always_inline int ctx_from_meta(struct xdp_md *xdp, __u32 meta, struct ctx *c)
{
	__u32 zero = 0;
	c->cfg = bpf_map_lookup_elem(&config, &zero);
	c->ctr = bpf_map_lookup_elem(&counters, &zero);
	if (!c->cfg || !c->ctr)
		return -1;
	/* Not `active` again: a flip since the entry would mix generations. */
	c->set = (meta >> 29) & 1;
	c->in_if = meta & 0xffff;
	c->port = (meta >> 16) & 0xff;
	c->l3 = (meta >> 24) & 0x1f;
	c->unicast = meta >> 31;
	c->frame_len = (__u32)(xdp->data_end - xdp->data);
	c->l3_len = 0;
	return 0;
}

/* Keeps the decision for the firewall (FF_NEED_FW). */
static __always_inline int stash(struct ctx *c, struct hop_choice *hc, int v6)
{
	__u32 zero = 0;
	struct fwd_scratch *fs = bpf_map_lookup_elem(&fwd_scratch, &zero);
	if (!fs)
		return XDP_ABORTED;
	fs->out_if = hc->out_if;
	fs->l3_len = c->l3_len;
	__builtin_memcpy(fs->mac, hc->mac, 6);
	fs->v6 = v6;
	return FF_NEED_FW;
}

/* After the firewall accepted: the forward stage for the stashed decision. */
__noinline int ff_forward(struct xdp_md *xdp, __u32 meta)
{
	struct ctx cc, *c = &cc;
	if (ctx_from_meta(xdp, meta, c))
		return XDP_ABORTED;
	__u32 zero = 0;
	struct fwd_scratch *fs = bpf_map_lookup_elem(&fwd_scratch, &zero);
	if (!fs)
		return XDP_ABORTED;
	struct hop_choice hc = {.out_if = fs->out_if};
	__builtin_memcpy(hc.mac, fs->mac, 6);
	c->l3_len = fs->l3_len;
	int v6 = fs->v6 != 0;
	int verdict = XDP_ABORTED;
	struct ff_iface *out = egress(xdp, c, &hc, &verdict);
	if (!out)
		return verdict;
	return transmit(xdp, c, &hc, out, v6);
}

/* After the lookup: next hop, egress and MTU, then the firewall (through
 * the entry, FF_NEED_FW) or straight to the forward stage. key_hi/key_lo:
 * the destination as the neighbour table keys it. */
static __always_inline int route(struct xdp_md *xdp, struct ctx *c, __u32 nh, int v6, __u64 key_hi,
				 __u64 key_lo)
{
	struct hop_choice hc = {};
	int verdict = XDP_ABORTED;
	if (choose(xdp, c, nh, v6, key_hi, key_lo, &hc, &verdict))
		return verdict;
	struct ff_iface *out = egress(xdp, c, &hc, &verdict);
	if (!out)
		return verdict;
	if (c->cfg->flags & FF_CFG_FIREWALL)
		return stash(c, &hc, v6);
	return transmit(xdp, c, &hc, out, v6);
}

/* The start of both families' input: the packet's context from the L2
 * stage, and its IP header with at least `need` bytes in the frame (else
 * the `truncated` drop). NULL with *verdict set when there is none. */
static __always_inline __u8 *ip_input(struct xdp_md *xdp, __u32 meta, struct ctx *c, __u32 need,
				      __u32 truncated, int *verdict)
{
	if (ctx_from_meta(xdp, meta, c))
		return 0;
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	if (c->l3 > 22)
		return 0;
	__u8 *h = data + c->l3;
	if (c->frame_len - c->l3 < need || (void *)(h + need) > end) {
		*verdict = drop(c, truncated);
		return 0;
	}
	return h;
}

/* Whether one of the prefixes of rule filter `f`, of kind `kind` (v6 * 2
 * + dst) in half `set`, holds the address (hi, lo): host order, IPv4 in
 * the top 32 bits of hi. A clear signature bit answers for most addresses; else each of the
 * filter's lengths is one hash lookup. */
static __always_inline int rule_filter_holds(struct ff_rule_filter *f, __u32 set, __u32 kind,
					     __u64 hi, __u64 lo)
{
	__u32 sig = (kind & 2) ? (__u32)(((hi >> 48) ^ (hi >> 32)) & 0xffff) : (__u32)(hi >> 48);
	if (!((f->sig[(sig >> 6) & (FF_RULE_SIG_WORDS - 1)] >> (sig & 63)) & 1))
		return 0;
	struct ff_rule_key key = {.set = (__u16)set, .kind = (__u8)kind};
	__u32 n = f->n_lens;
	for (int i = 0; i < FF_RULE_LENS; i++) {
		if (i >= n)
			break;
		__u32 len = f->lens[i];
		__u64 mh = hi, ml = lo;
		if (len == 0) {
			mh = 0;
			ml = 0;
		} else if (len < 64) {
			mh = hi & (~0ULL << ((64 - len) & 63));
			ml = 0;
		} else if (len == 64) {
			ml = 0;
		} else if (len < 128) {
			ml = lo & (~0ULL << ((128 - len) & 63));
		}
		__u64 bh = bpf_cpu_to_be64(mh), bl = bpf_cpu_to_be64(ml);
		__builtin_memcpy(key.addr, &bh, 8);
		__builtin_memcpy(key.addr + 8, &bl, 8);
		key.len = (__u8)len;
		if (bpf_map_lookup_elem(&rule_prefixes, &key))
			return 1;
	}
	return 0;
}

/* Policy rules (see ff_rule_filter): 1 when a rule before main's may
 * select the packet (it goes to the pipeline), 0 when main decides it
 * here. `packed`: the half (bit 0), IPv6 (bit 1), the input interface
 * (bits 16-31); the addresses as rule_filter_holds takes them. */
__noinline int ff_rules_select(__u32 packed, __u64 s_hi, __u64 s_lo, __u64 d_hi, __u64 d_lo)
{
	__u32 set = packed & 1, v6 = (packed >> 1) & 1, in_if = packed >> 16;
	__u32 k = (set * 2 + v6) * 2;
	struct ff_rule_filter *f = bpf_map_lookup_elem(&rule_filters, &k);
	if (!f)
		return 1;
	if (!f->enabled)
		return 0;
	if (in_if >= FF_MAX_IFACES)
		return 1;
	__u32 ik = set * FF_MAX_IFACES + in_if;
	struct ff_iface *in = bpf_map_lookup_elem(&ifaces, &ik);
	if (!in || (in->flags & (v6 ? FF_IFACE_RULES6 : FF_IFACE_RULES4)))
		return 1;
	if (rule_filter_holds(f, set, v6 * 2, s_hi, s_lo))
		return 1;
	__u32 dk = k + 1;
	struct ff_rule_filter *d = bpf_map_lookup_elem(&rule_filters, &dk);
	return !d || rule_filter_holds(d, set, v6 * 2 + 1, d_hi, d_lo);
}

/* IPv4 input, route, forward (stages/ipv4.rs, then choose_hop, forward). */
__noinline int ff_ipv4(struct xdp_md *xdp, __u32 meta)
{
	struct ctx cc, *c = &cc;
	int verdict = XDP_ABORTED;
	__u8 *h = ip_input(xdp, meta, c, 20, FF_DROP_IPV4_TRUNCATED, &verdict);
	if (!h)
		return verdict;
	__u32 room = c->frame_len - c->l3;
	if ((h[0] >> 4) != 4)
		return drop(c, FF_DROP_IPV4_BAD_VERSION);
	__u32 ihl = (h[0] & 0x0f) * 4;
	if (ihl < 20)
		return drop(c, FF_DROP_IPV4_BAD_HEADER_LENGTH);
	/* Options: the pipeline checks them (and everything after). */
	if (ihl > 20)
		return exception(xdp, c, FF_EXC_OPTIONS);
	if (room < ihl)
		return drop(c, FF_DROP_IPV4_TRUNCATED);
	__u32 total = be16_at(h + 2);
	if (total < ihl)
		return drop(c, FF_DROP_IPV4_BAD_TOTAL_LENGTH);
	if (total > room)
		return drop(c, FF_DROP_IPV4_TRUNCATED);
	if (!ipv4_checksum_ok(h))
		return drop(c, FF_DROP_IPV4_BAD_CHECKSUM);
	c->l3_len = total;
	__u32 src_be, dst_be;
	__builtin_memcpy(&src_be, h + 12, 4);
	__builtin_memcpy(&dst_be, h + 16, 4);
	__u32 src = bpf_ntohl(src_be), dst = bpf_ntohl(dst_be);
	__u32 sa = src >> 24, da = dst >> 24;
	if (sa == 0 || sa == 127 || sa >= 224) {
		if (src == 0 && dst == 0xffffffff)
			return punt(c, FF_PUNT_BROADCAST);
		return drop(c, FF_DROP_IPV4_MARTIAN_SOURCE);
	}
	if ((dst >> 28) == 0xe) {
		if ((dst >> 8) == 0x00e00000)
			return punt(c, FF_PUNT_MULTICAST);
		return drop(c, FF_DROP_MULTICAST_NOT_ROUTED);
	}
	if (dst == 0xffffffff)
		return punt(c, FF_PUNT_BROADCAST);
	int lk = local4_kind(c->set, dst_be);
	if (lk == FF_LOCAL_UNICAST)
		return punt(c, FF_PUNT_LOCAL_ADDRESS);
	if (lk == FF_LOCAL_BROADCAST)
		return punt(c, FF_PUNT_BROADCAST);
	if (da == 0 || da == 127 || da >= 240)
		return drop(c, FF_DROP_IPV4_MARTIAN_DESTINATION);
	if (!c->unicast)
		return drop(c, FF_DROP_L2_BROADCAST_NOT_FORWARDED);
	if (h[8] <= 1)
		return exception(xdp, c, FF_EXC_TTL);
	if (c->cfg->flags & FF_CFG_EXCEPT_ALL)
		return exception(xdp, c, FF_EXC_ALL);
	if (ff_rules_select(c->set | (c->in_if << 16), (__u64)src << 32, 0, (__u64)dst << 32, 0))
		return exception(xdp, c, FF_EXC_RULES);

	__u32 nh = ff_fib4(c->set, dst, c->cfg->nodes4_half, c->cfg->leaves4_half);
	if (nh == FF_FIB_ERROR)
		return exception(xdp, c, FF_EXC_TABLE);
	return route(xdp, c, nh, 0, 0, 0xffff00000000ULL | dst);
}

static __always_inline int is_never_forwarded6(__u64 hi, __u64 lo)
{
	/* ::, ::1, ::ffff:0:0/96 */
	if (hi != 0)
		return 0;
	return lo == 0 || lo == 1 || (lo >> 32) == 0xffff;
}

/* IPv6 input, route, forward (stages/ipv6.rs, then choose_hop, forward). */
__noinline int ff_ipv6(struct xdp_md *xdp, __u32 meta)
{
	struct ctx cc, *c = &cc;
	int verdict = XDP_ABORTED;
	__u8 *h = ip_input(xdp, meta, c, 40, FF_DROP_IPV6_TRUNCATED, &verdict);
	if (!h)
		return verdict;
	__u32 room = c->frame_len - c->l3;
	if ((h[0] >> 4) != 6)
		return drop(c, FF_DROP_IPV6_BAD_VERSION);
	__u32 total = 40 + be16_at(h + 4);
	if (total > room)
		return drop(c, FF_DROP_IPV6_TRUNCATED);
	c->l3_len = total;
	__u64 s_hi = load_be64(h + 8), s_lo = load_be64(h + 16);
	__u64 d_hi = load_be64(h + 24), d_lo = load_be64(h + 32);
	if ((s_hi >> 56) == 0xff)
		return drop(c, FF_DROP_IPV6_MARTIAN_SOURCE);
	if ((d_hi >> 56) == 0xff) {
		if (((d_hi >> 48) & 0xf) == 2)
			return punt(c, FF_PUNT_MULTICAST);
		return drop(c, FF_DROP_MULTICAST_NOT_ROUTED);
	}
	if (is_local6(c->set, h + 24))
		return punt(c, FF_PUNT_LOCAL_ADDRESS);
	if (is_never_forwarded6(s_hi, s_lo))
		return drop(c, FF_DROP_IPV6_MARTIAN_SOURCE);
	if (is_never_forwarded6(d_hi, d_lo))
		return drop(c, FF_DROP_IPV6_MARTIAN_DESTINATION);
	if ((s_hi >> 54) == 0x3fa || (d_hi >> 54) == 0x3fa)
		return drop(c, FF_DROP_IPV6_LINK_LOCAL);
	if (!c->unicast)
		return drop(c, FF_DROP_L2_BROADCAST_NOT_FORWARDED);
	if (h[7] <= 1)
		return exception(xdp, c, FF_EXC_TTL);
	if (c->cfg->flags & FF_CFG_EXCEPT_ALL)
		return exception(xdp, c, FF_EXC_ALL);
	if (ff_rules_select(c->set | 2 | (c->in_if << 16), s_hi, s_lo, d_hi, d_lo))
		return exception(xdp, c, FF_EXC_RULES);

	__u32 nh = ff_fib6(c->set, d_hi, d_lo, c->cfg->nodes6_half, c->cfg->leaves6_half);
	if (nh == FF_FIB_ERROR)
		return exception(xdp, c, FF_EXC_TABLE);
	return route(xdp, c, nh, 1, d_hi, d_lo);
}

/* ARP (stages/arp.rs): for the host if it targets one of the router's
 * addresses or is gratuitous, else dropped. */
static __always_inline int arp(struct ctx *c, void *data, void *end)
{
	__u32 l3 = c->l3;
	if (l3 > 22)
		return XDP_ABORTED;
	__u8 *a = data + l3;
	if (c->frame_len - l3 < 28 || (void *)(a + 28) > end)
		return drop(c, FF_DROP_ARP_MALFORMED);
	if (a[0] != 0 || a[1] != 1 || a[2] != 8 || a[3] != 0 || a[4] != 6 || a[5] != 4)
		return drop(c, FF_DROP_ARP_MALFORMED);
	__u32 spa, tpa;
	__builtin_memcpy(&spa, a + 14, 4);
	__builtin_memcpy(&tpa, a + 24, 4);
	if (local4_kind(c->set, tpa) == FF_LOCAL_UNICAST || spa == tpa)
		return punt(c, FF_PUNT_ARP);
	return drop(c, FF_DROP_ARP_NOT_FOR_US);
}

/* Host-first (run mode): what the kernel must see, before any check. */
static __always_inline int host_traffic(__u32 set, void *data, void *end, __u32 l3, __u16 et, __u8 *eth)
{
	if (eth[0] & 1)
		return 1;
	if (l3 > 22)
		return 1;
	if (et == bpf_htons(ETH_P_IP)) {
		__u8 *h = data + l3;
		if ((void *)(h + 20) > end)
			return 0;
		__u32 dst_be;
		__builtin_memcpy(&dst_be, h + 16, 4);
		__u32 dst = bpf_ntohl(dst_be);
		if ((dst & 0xf0000000) == 0xe0000000 || dst == 0xffffffff)
			return 1;
		return local4_kind(set, dst_be) != 0;
	}
	if (et == bpf_htons(ETH_P_IPV6)) {
		__u8 *h = data + l3;
		if ((void *)(h + 40) > end)
			return 0;
		if (h[24] == 0xff || (h[24] == 0xfe && (h[25] & 0xc0) == 0x80))
			return 1;
		return is_local6(set, h + 24);
	}
	return 1;
}

SEC("xdp")
int fastfwd_xdp(struct xdp_md *xdp)
{
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	__u32 zero = 0;
	struct ff_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct ff_counters *ctr = bpf_map_lookup_elem(&counters, &zero);
	if (!cfg || !ctr)
		return XDP_PASS;
	struct ctx c = {
		.cfg = cfg,
		.ctr = ctr,
		.set = cfg->active & 1,
		.in_if = FF_NO_IFACE,
		.frame_len = (__u32)(end - data),
	};
	if (cfg->flags & FF_CFG_TEST) {
		/* The test driver names the receiving port in test_out. */
		struct ff_test_out *o = bpf_map_lookup_elem(&test_out, &zero);
		if (!o)
			return XDP_ABORTED;
		c.port = o->detail;
	} else {
		__u32 ifindex = xdp->ingress_ifindex;
		__u32 *port = bpf_map_lookup_elem(&ifindex_port, &ifindex);
		if (!port)
			return to_host(&c);
		c.port = *port & 0xffff;
	}

	/* Ethernet and up to two tags (stages/ethernet.rs). */
	__u8 *eth = data;
	if ((void *)(eth + 14) > end)
		return drop(&c, FF_DROP_FRAME_TOO_SHORT);
	__u16 et = ((__u16 *)eth)[6];
	__u16 outer = 0, inner = 0;
	c.l3 = 14;
	if (et == bpf_htons(ETH_P_8021Q) || et == bpf_htons(ETH_P_8021AD_)) {
		if ((void *)(eth + 18) > end)
			return drop(&c, FF_DROP_FRAME_TOO_SHORT);
		outer = be16_at(eth + 14) & 0x0fff;
		et = ((__u16 *)eth)[8];
		c.l3 = 18;
		if (et == bpf_htons(ETH_P_8021Q) || et == bpf_htons(ETH_P_8021AD_)) {
			if ((void *)(eth + 22) > end)
				return drop(&c, FF_DROP_FRAME_TOO_SHORT);
			inner = be16_at(eth + 18) & 0x0fff;
			et = ((__u16 *)eth)[10];
			c.l3 = 22;
		}
	}
	if ((cfg->flags & FF_CFG_HOST_FIRST) && host_traffic(c.set, data, end, c.l3, et, eth))
		return to_host(&c);

	/* Priority tags (VLAN 0) select no VLAN. */
	if (outer == 0) {
		outer = inner;
		inner = 0;
	}
	if (c.port >= FF_MAX_PORTS)
		return drop(&c, FF_DROP_UNKNOWN_INTERFACE);
	__u32 pk = c.set * FF_MAX_PORTS + c.port;
	struct ff_port *p = bpf_map_lookup_elem(&ports, &pk);
	if (!p)
		return drop(&c, FF_DROP_UNKNOWN_INTERFACE);
	if (outer == 0) {
		c.in_if = p->untagged;
	} else if (p->has_vlans) {
		struct ff_vlan_key vk = {.port = c.port, .outer = outer, .inner = inner, .set = c.set};
		__u32 *id = bpf_map_lookup_elem(&vlans, &vk);
		if (id)
			c.in_if = *id;
	}
	if (c.in_if >= FF_MAX_IFACES) {
		c.in_if = FF_NO_IFACE;
		return drop(&c, FF_DROP_UNKNOWN_INTERFACE);
	}
	__u32 ik = c.set * FF_MAX_IFACES + c.in_if;
	struct ff_iface *in = bpf_map_lookup_elem(&ifaces, &ik);
	if (!in)
		return drop(&c, FF_DROP_UNKNOWN_INTERFACE);
	if (eth[0] == in->mac[0] && eth[1] == in->mac[1] && eth[2] == in->mac[2] &&
	    eth[3] == in->mac[3] && eth[4] == in->mac[4] && eth[5] == in->mac[5])
		c.unicast = 1;
	else if (!(eth[0] & 1))
		return drop(&c, FF_DROP_NOT_OUR_MAC);

	__u32 meta = META(c.in_if & 0xffff, c.port & 0xff, c.l3 & 0x1f, c.set & 1, c.unicast);
	int r;
	if (et == bpf_htons(ETH_P_IP))
		r = ff_ipv4(xdp, meta);
	else if (et == bpf_htons(ETH_P_IPV6))
		r = ff_ipv6(xdp, meta);
	else if (et == bpf_htons(ETH_P_ARP))
		return arp(&c, data, end);
	else
		return drop(&c, FF_DROP_UNKNOWN_ETHERTYPE);
	__u32 v6 = et == bpf_htons(ETH_P_IPV6);
	if (r & FF_NEED_CT)
		return hand_over(xdp, &c, r & 0xff, ff_ct(xdp, meta, v6));
	if (r != FF_NEED_FW)
		return r;
	/* Connection tracking (the firewall's `ct` field), the firewall's
	 * forward chain, then the forward stage. */
	__u32 hint = FF_CT_HINT_NONE;
	if (cfg->flags & FF_CFG_CONNTRACK) {
		hint = ff_ct(xdp, meta, v6);
		if (hint != FF_CT_HINT_ESTABLISHED)
			return hand_over(xdp, &c, FF_EXC_CONNTRACK, hint);
	}
	struct fwd_scratch *fs = bpf_map_lookup_elem(&fwd_scratch, &zero);
	if (!fs)
		return XDP_ABORTED;
	__u32 how = (fs->v6 ? 1 : 0) | (hint == FF_CT_HINT_ESTABLISHED ? 2 : 0);
	int fw = ff_fw(xdp, meta, fs->out_if, fs->l3_len, how);
	if (fw == FW_DROP)
		return drop(&c, FF_DROP_ACL_DENIED);
	if (fw != FW_ACCEPT)
		return hand_over(xdp, &c, FF_EXC_REJECT, hint);
	r = ff_forward(xdp, meta);
	/* (The checks before the firewall passed: never, in practice.) */
	if (r & FF_NEED_CT)
		return hand_over(xdp, &c, r & 0xff, hint);
	return r;
}

/* ---- Redirects the kernel dropped after the program returned ---- */

/* Whether err says the device takes no XDP frames at all (rather than a
 * full ring, or a device that is down): EOPNOTSUPP, no ndo_xdp_xmit;
 * ENXIO, no XDP transmit queue (a veth whose peer has no NAPI, drivers
 * whose XDP rings are not set up). */
static __always_inline int refusal(__s32 err)
{
	return err == -95 || err == -6;
}

static __always_inline void tx_fault(__u32 slot, __u32 dropped, int refused)
{
	struct ff_tx_fault *f = bpf_map_lookup_elem(&tx_faults, &slot);
	if (!f)
		return;
	f->dropped += dropped;
	if (refused)
		f->refused += dropped;
}

/* A redirect that failed when the program returned XDP_REDIRECT
 * (xdp_do_redirect): the driver drops the frame. Counted when the map is
 * this program's `tx_ports` (by port: the map index) or `xsks` (the
 * exception path, FF_MAX_PORTS). */
SEC("tracepoint/xdp/xdp_redirect_err")
int ff_redirect_err(struct ff_tp_redirect_err *t)
{
	__u32 zero = 0;
	struct ff_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return 0;
	__u32 map_id = t->map_id;
	if (map_id == 0)
		return 0;
	if (map_id == cfg->tx_ports_id) {
		__u32 port = t->map_index;
		if (port < FF_MAX_PORTS)
			tx_fault(port, 1, refusal(t->err));
	} else if (map_id == cfg->xsks_id) {
		tx_fault(FF_MAX_PORTS, 1, 0);
	}
	return 0;
}

/* A devmap's bulk queue flushed into a device (ndo_xdp_xmit): `drops` of
 * its frames were not taken. Counted when both devices are ports of this
 * program (the record names them by ifindex only). */
SEC("tracepoint/xdp/xdp_devmap_xmit")
int ff_devmap_xmit(struct ff_tp_devmap_xmit *t)
{
	__s32 drops = t->drops;
	if (drops <= 0)
		return 0;
	__u32 from = t->from_ifindex, to = t->to_ifindex;
	__u32 *port = bpf_map_lookup_elem(&ifindex_port, &to);
	if (!port || !bpf_map_lookup_elem(&ifindex_port, &from))
		return 0;
	__u32 p = *port;
	if (p < FF_MAX_PORTS)
		tx_fault(p, drops, refusal(t->err));
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
