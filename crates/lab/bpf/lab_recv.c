// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The lab's XDP receiver, attached to the sink's interface: counts every
 * frame, reads the generator's stamp, tracks sequence numbers in a bitmap
 * (unique, reordered, duplicates), records the latency of one packet in
 * LAB_LAT_EVERY (now - send time, both CLOCK_REALTIME on this host) in a
 * log-linear histogram, and drops the
 * frame: the cheapest end a frame can have, so the receiver costs the
 * forwarding core as little as possible (veth runs the sink's receive on
 * the core that transmitted into it). Every other frame (ARP, ND, the BGP
 * session of `lab churn`) is counted and goes on to the sink's stack.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lab_xdp.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lab_recv_config);
} recv_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lab_recv_counters);
} recv_counters SEC(".maps");

/* Highest sequence number seen plus one (0: none yet). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} recv_max SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LAB_RECV_SEQ_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} recv_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LAB_LAT_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} recv_latency SEC(".maps");

/* One unaligned 64-bit load (x86-64 and arm64 allow them on packet data). */
static __always_inline __u64 get_be64(const __u8 *p)
{
	return __builtin_bswap64(*(const __u64 *)p);
}

/* Index of the highest set bit of v > 0. */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline __u32 lat_bucket(__u64 v)
{
	if (v < 64)
		return v;
	__u32 exp = log2_u64(v); /* >= 6 */
	__u32 sub = (v >> (exp - 5)) & (LAB_LAT_SUB - 1);
	return 64 + (exp - 6) * LAB_LAT_SUB + sub;
}

SEC("xdp")
int lab_recv(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct lab_recv_counters *c = bpf_map_lookup_elem(&recv_counters, &zero);
	struct lab_recv_config *cfg = bpf_map_lookup_elem(&recv_config, &zero);
	__u64 *max = bpf_map_lookup_elem(&recv_max, &zero);
	if (!c || !cfg || !max)
		return XDP_DROP;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	c->frames++;
	c->bytes += (__u64)(end - data);
	if (p + 14 > (__u8 *)end)
		goto other;
	__u16 proto = ((__u16)p[12] << 8) | p[13];
	__u8 *stamp;
	if (proto == ETH_P_IP) {
		if (p + 34 > (__u8 *)end || p[23] != 17)
			goto other;
		__u32 ihl = (p[14] & 0x0f) * 4;
		if (ihl < 20)
			goto other;
		stamp = p + 14 + ihl + 8;
	} else if (proto == ETH_P_IPV6) {
		if (p + LAB_HDR_V6 > (__u8 *)end || p[20] != 17)
			goto other;
		stamp = p + LAB_HDR_V6;
	} else {
		goto other;
	}
	if (stamp + LAB_STAMP_LEN > (__u8 *)end)
		goto other;
	if (stamp[0] != (LAB_STAMP_MAGIC >> 8) || stamp[1] != (LAB_STAMP_MAGIC & 0xff))
		goto other;
	__u64 seq = get_be64(stamp + 2);
	__u64 ts = get_be64(stamp + 10);

	if (seq < LAB_RECV_SEQ_BITS) {
		__u32 w = seq / 64;
		__u64 bit = 1ULL << (seq % 64);
		__u64 *word = bpf_map_lookup_elem(&recv_seen, &w);
		if (!word)
			return XDP_DROP;
		if (__sync_fetch_and_or(word, bit) & bit) {
			c->duplicates++;
			return XDP_DROP;
		}
	} else {
		c->unchecked++;
	}
	if (seq < *max)
		c->reordered++;
	else
		*max = seq + 1;
	c->received++;
	/* Latency of one packet in LAB_LAT_EVERY: a clock read per frame would
	 * double the receiver's cost. */
	if ((seq & (LAB_LAT_EVERY - 1)) == 0 && ts >= cfg->lat_from_ns) {
		__u64 now = bpf_ktime_get_ns() + cfg->clock_offset;
		__u64 lat = now > ts ? now - ts : 0;
		__u32 b = lat_bucket(lat);
		__u64 *n = bpf_map_lookup_elem(&recv_latency, &b);
		if (n)
			*n += 1;
		c->lat_samples++;
		if (c->lat_min_plus1 == 0 || lat + 1 < c->lat_min_plus1)
			c->lat_min_plus1 = lat + 1;
		if (lat > c->lat_max)
			c->lat_max = lat;
	}
	return XDP_DROP;
other:
	c->other++;
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
