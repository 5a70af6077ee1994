// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The lab's live-frames generator. The loader runs it with BPF_PROG_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES: the kernel hands it frames built from one
 * template, and every frame it redirects leaves through cfg->ifindex as an
 * XDP frame, as a native-XDP NIC delivers it to the next hop.
 *
 * Per run: take the next sequence number, write flow (seq mod nflows)'s
 * precomputed headers and the stamp, finish the UDP checksum, redirect.
 * Pacing: with a rate, a run ahead of schedule drops its frame instead of
 * sending it (XDP_DROP recycles the page), so frames leave evenly spaced;
 * a generator that fell behind (the CPU was taken from it) catches up by
 * at most max_lag_ps, so it never bursts more than a few frames into the
 * next hop's ring. Pages are recycled without being re-initialised, so
 * every byte that anything downstream may change is written on every run.
 * One caller at a time: the state is updated without atomics.
 *
 * The loader also attaches the program to the interface it sends on, only
 * so that it stays in the kernel's XDP dispatcher: otherwise every
 * BPF_PROG_RUN call adds it and removes it again, two RCU grace periods
 * of silence per call. Frames that really arrive there are passed on.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "lab_xdp.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lab_gen_config);
} gen_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lab_gen_state);
} gen_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LAB_GEN_MAX_FLOWS);
	__type(key, __u32);
	__type(value, struct lab_gen_flow);
} gen_flows SEC(".maps");

/* Frames sent in each second since start_ns. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LAB_GEN_SECONDS);
	__type(key, __u32);
	__type(value, __u64);
} gen_seconds SEC(".maps");

static __always_inline __u32 sum16(const __u8 *p, int n)
{
	__u32 s = 0;
	for (int i = 0; i < n; i += 2)
		s += ((__u32)p[i] << 8) | p[i + 1];
	return s;
}

static __always_inline void put_be64(__u8 *p, __u64 v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = v & 0xff;
		v >>= 8;
	}
}

SEC("xdp")
int lab_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct lab_gen_config *cfg = bpf_map_lookup_elem(&gen_config, &zero);
	struct lab_gen_state *st = bpf_map_lookup_elem(&gen_state, &zero);
	if (!cfg || !st || cfg->nflows == 0)
		return XDP_ABORTED;
	if (ctx->ingress_ifindex == cfg->ifindex)
		return XDP_PASS; /* a frame received on the interface */
	if (st->done)
		goto idle;
	__u64 seq = st->next_seq;
	if (seq >= cfg->count) {
		st->done = 1;
		goto idle;
	}
	__u64 now = bpf_ktime_get_ns();
	if (seq == 0)
		st->start_ns = now; /* the schedule starts with the first frame */
	__u64 since = now - st->start_ns;
	if (since >= cfg->duration_ns) {
		st->done = 1;
		goto idle;
	}
	if (cfg->interval_ps) {
		__u64 now_ps = since * 1000;
		if (now_ps < st->due_ps)
			goto idle;
		__u64 due = st->due_ps + cfg->interval_ps;
		__u64 floor = now_ps > cfg->max_lag_ps ? now_ps - cfg->max_lag_ps : 0;
		st->due_ps = due > floor ? due : floor;
	}

	__u32 idx = seq % cfg->nflows;
	struct lab_gen_flow *fl = bpf_map_lookup_elem(&gen_flows, &idx);
	if (!fl)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__u32 sum = fl->udp_partial;
	__u8 *stamp;
	if (cfg->v6) {
		if (p + LAB_HDR_V6 > (__u8 *)end)
			return XDP_ABORTED;
		__builtin_memcpy(p, fl->hdr, LAB_HDR_V6);
		stamp = p + LAB_HDR_V6;
	} else {
		if (p + LAB_HDR_V4 > (__u8 *)end)
			return XDP_ABORTED;
		__builtin_memcpy(p, fl->hdr, LAB_HDR_V4);
		stamp = p + LAB_HDR_V4;
	}
	if (cfg->stamped) {
		if (stamp + LAB_STAMP_LEN > (__u8 *)end)
			return XDP_ABORTED;
		stamp[0] = LAB_STAMP_MAGIC >> 8;
		stamp[1] = LAB_STAMP_MAGIC & 0xff;
		put_be64(stamp + 2, seq);
		put_be64(stamp + 10, now + cfg->clock_offset);
		sum += sum16(stamp, LAB_STAMP_LEN);
	}
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	__u16 c = ~sum & 0xffff;
	if (c == 0)
		c = 0xffff; /* RFC 768: a computed zero is sent as all ones */
	stamp[-2] = c >> 8;
	stamp[-1] = c & 0xff;

	st->next_seq = seq + 1;
	st->last_ns = now;
	__u32 sec = since / 1000000000ULL;
	if (sec < LAB_GEN_SECONDS) {
		__u64 *n = bpf_map_lookup_elem(&gen_seconds, &sec);
		if (n)
			*n += 1;
	}
	return bpf_redirect(cfg->ifindex, 0);
idle:
	st->idle++;
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual MIT/GPL";
