// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * Connection tracking's fast path (FF_CFG_CONNTRACK): the flows table
 * the program reads and refreshes, as crates/firewall/src/conntrack.rs
 * tracks them (docs/xdp-engine.md).
 *
 * Included by fastfwd_xdp.c after its maps and `struct ctx`, which it
 * uses; not a unit of its own.
 */
#ifndef FASTFWD_XDP_CONNTRACK_H
#define FASTFWD_XDP_CONNTRACK_H


static __always_inline __u64 ct_now(struct ff_config *cfg)
{
	if (cfg->flags & FF_CFG_TEST) {
		__u32 zero = 0;
		__u64 *t = bpf_map_lookup_elem(&test_clock, &zero);
		return t ? *t : 0;
	}
	return bpf_ktime_get_ns();
}

/* The flow of the packet at l3 (from meta; IPv6 if v6) in `ct_flows`,
 * advanced by the packet as the pipeline's table advances it
 * (Conntrack::lookup): FIN or RST closes it, and it lives for its
 * timeout from now. Returns FF_CT_HINT_ESTABLISHED when the table holds
 * it live, else FF_CT_HINT_ABSENT (an expired or older-epoch entry is
 * deleted). The flow key is the pipeline's (stages flow_key, then the
 * firewall's packet_key); a packet too short for it is ABSENT (the
 * pipeline drops it before its firewall). A global function. */
__noinline int ff_ct(struct xdp_md *xdp, __u32 meta, __u32 v6)
{
	__u32 zero = 0;
	struct ff_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct ff_counters *ctr = bpf_map_lookup_elem(&counters, &zero);
	if (!cfg || !ctr)
		return FF_CT_HINT_ABSENT;
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	__u32 l3 = (meta >> 24) & 0x1f;
	if (l3 > 22)
		return FF_CT_HINT_ABSENT;
	__u8 *h = data + l3;
	__u32 room = (__u32)(end - data) - l3;
	__u64 s_hi = 0, s_lo, d_hi = 0, d_lo;
	__u32 proto, l4, l3_len, ports_valid;
	if (v6) {
		if ((void *)(h + 40) > end)
			return FF_CT_HINT_ABSENT;
		l3_len = 40 + be16_at(h + 4);
		if (l3_len > room)
			return FF_CT_HINT_ABSENT;
		s_hi = load_be64(h + 8);
		s_lo = load_be64(h + 16);
		d_hi = load_be64(h + 24);
		d_lo = load_be64(h + 32);
		__u64 u = ff_upper6(xdp, l3, l3_len);
		proto = u & 0xff;
		l4 = (u >> 8) & 0xffffff;
		ports_valid = !(u & (1ULL << 33));
	} else {
		if ((void *)(h + 20) > end)
			return FF_CT_HINT_ABSENT;
		l3_len = be16_at(h + 2);
		l4 = (h[0] & 0x0f) * 4;
		if (l3_len > room || l4 < 20 || l3_len < l4)
			return FF_CT_HINT_ABSENT;
		__u32 a, b;
		__builtin_memcpy(&a, h + 12, 4);
		__builtin_memcpy(&b, h + 16, 4);
		s_lo = bpf_ntohl(a);
		d_lo = bpf_ntohl(b);
		proto = h[9];
		ports_valid = (be16_at(h + 6) & 0x1fff) == 0;
	}
	__u32 sp = 0, dp = 0, flags = 0;
	int icmp = v6 ? proto == 58 : proto == 1;
	if (ports_valid && l4 <= 4096) {
		__u8 *p = data + l3 + l4;
		__u32 left = l3_len > l4 ? l3_len - l4 : 0;
		if (proto == 6 || proto == 17 || proto == 132 || proto == 136) {
			if (left >= 4 && (void *)(p + 4) <= end) {
				sp = be16_at(p);
				dp = be16_at(p + 2);
				if (proto == 6 && left >= 14 && (void *)(p + 14) <= end)
					flags = p[13];
			}
		} else if (icmp) {
			/* The identifier, as both ports (an echo's reply has the
			 * same one). */
			if (left >= 6 && (void *)(p + 6) <= end)
				sp = be16_at(p + 4);
			dp = sp;
		}
	}
	/* Endpoints in order: (address, port) of a, then of b. */
	int from_a = s_hi < d_hi || (s_hi == d_hi && (s_lo < d_lo || (s_lo == d_lo && sp <= dp)));
	struct ff_ct_key k = {.proto = proto, .v6 = v6 ? 1 : 0};
	if (from_a) {
		k.a_hi = s_hi;
		k.a_lo = s_lo;
		k.pa = sp;
		k.b_hi = d_hi;
		k.b_lo = d_lo;
		k.pb = dp;
	} else {
		k.a_hi = d_hi;
		k.a_lo = d_lo;
		k.pa = dp;
		k.b_hi = s_hi;
		k.b_lo = s_lo;
		k.pb = sp;
	}
	struct ff_ct_value *e = bpf_map_lookup_elem(&ct_flows, &k);
	if (!e)
		return FF_CT_HINT_ABSENT;
	__u64 now = ct_now(cfg);
	if (e->epoch != cfg->ct_epoch || e->expires <= now) {
		bpf_map_delete_elem(&ct_flows, &k);
		return FF_CT_HINT_ABSENT;
	}
	if (proto == 6 && (flags & 0x05))
		e->phase = FF_CT_CLOSING;
	e->expires = now + (e->phase == FF_CT_CLOSING ? e->timeout_closing : e->timeout_open);
	ctr->ct_established++;
	return FF_CT_HINT_ESTABLISHED;
}

#endif /* FASTFWD_XDP_CONNTRACK_H */
