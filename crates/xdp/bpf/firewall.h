// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The firewall's forward chain (FF_CFG_FIREWALL): the compiled
 * classifier of crates/firewall/src/classifier.rs read from fw_data
 * (docs/firewall.md).
 *
 * Included by fastfwd_xdp.c after its maps and `struct ctx`, which it
 * uses; not a unit of its own.
 */
#ifndef FASTFWD_XDP_FIREWALL_H
#define FASTFWD_XDP_FIREWALL_H


#define FW_ACCEPT 0
#define FW_DROP 1
#define FW_EXCEPTION 2

/* Entry i of half `set` of fw_data. */
static __always_inline int fw_get(__u32 set, __u32 half, __u32 i, __u32 *v)
{
	if ((i >> 1) >= half || set > 1)
		return -1;
	__u32 k = set * half + (i >> 1);
	__u64 *p = bpf_map_lookup_elem(&fw_data, &k);
	if (!p)
		return -1;
	*v = (i & 1) ? (__u32)(*p >> 32) : (__u32)*p;
	return 0;
}

/* The classifier's range trie over an address (hi, lo; IPv4 in lo). */
static __always_inline int fw_trie(__u32 set, __u32 half, struct ff_fw_field *f, __u64 hi, __u64 lo,
				   int v6, __u32 *cls)
{
	__u32 rs = f->root_stride == 16 ? 16 : 8;
	__u32 width = v6 ? 128 : 32;
	__u32 shift = width - rs;
	__u32 root;
	if (v6)
		root = (__u32)(hi >> (64 - rs)) & ((1u << rs) - 1);
	else
		root = (__u32)(lo >> (32 - rs)) & ((1u << rs) - 1);
	__u32 e;
	if (fw_get(set, half, f->off + root, &e))
		return -1;
	for (int i = 0; i < FF_FW_TRIE_LEVELS; i++) {
		if (e & FF_FW_TRIE_LEAF) {
			*cls = e & ~FF_FW_TRIE_LEAF;
			return 0;
		}
		shift = shift >= 8 ? shift - 8 : 0;
		__u32 byte;
		if (shift >= 64)
			byte = (__u32)(hi >> ((shift - 64) & 63)) & 0xff;
		else
			byte = (__u32)(lo >> (shift & 63)) & 0xff;
		if (fw_get(set, half, f->off + e + byte, &e))
			return -1;
	}
	return -1;
}

/* One cross-product chain: acc = table[acc * n + remap[field][class]]. */
static __always_inline int fw_chain(__u32 set, __u32 half, struct ff_fw_meta *m, struct ff_fw_step *steps,
				    __u32 n_steps, __u32 *cls, __u32 *acc_out)
{
	__u32 acc = 0;
	for (int i = 0; i < FF_FW_MAX_STEPS; i++) {
		if (i >= n_steps)
			break;
		struct ff_fw_step *st = &steps[i];
		__u32 f = st->field;
		if (f >= FF_FW_FIELDS)
			return -1;
		f &= 15;
		struct ff_fw_field *fd = &m->fields[f < FF_FW_FIELDS ? f : 0];
		__u32 ci = cls[f];
		if (ci >= fd->remap_len)
			return -1;
		__u32 rc;
		if (fw_get(set, half, fd->remap_off + ci, &rc))
			return -1;
		__u64 at = (__u64)acc * st->n + rc;
		if (at >= st->len)
			return -1;
		if (fw_get(set, half, st->off + (__u32)at, &acc))
			return -1;
	}
	*acc_out = acc;
	return 0;
}

/* Classifies the packet at c->l3 (forward chain, family: bit 0 of
 * `how`) toward out_if, counts the rules it matched, and says accept,
 * drop, or hand it to the pipeline (a reject, or anything outside the
 * tables: nothing is counted then, the pipeline classifies it again).
 * Bit 1 of `how`: connection tracking found the flow established. A
 * global function, verified on its own. */
__noinline int ff_fw(struct xdp_md *xdp, __u32 meta, __u32 out_if, __u32 l3_len, __u32 how)
{
	__u32 v6 = how & 1, tracked = (how >> 1) & 1;
	__u32 zero = 0;
	struct ff_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return FW_EXCEPTION;
	/* The half the packet's entry read (see META), not `active` again. */
	__u32 set = (meta >> 29) & 1, half = cfg->fw_data_half;
	__u32 mk = set * 2 + (v6 ? 1 : 0);
	struct ff_fw_meta *m = bpf_map_lookup_elem(&fw_meta, &mk);
	if (!m || !m->enabled)
		return FW_EXCEPTION;
	void *data = (void *)(long)xdp->data;
	void *end = (void *)(long)xdp->data_end;
	__u32 l3 = (meta >> 24) & 0x1f;
	if (l3 > 22)
		return FW_EXCEPTION;
	__u8 *h = data + l3;

	/* The flow key as the pipeline builds it (stages flow_key, then the
	 * firewall's packet_key). */
	__u64 s_hi = 0, s_lo, d_hi = 0, d_lo;
	__u32 proto, l4, ports_valid;
	if (v6) {
		if ((void *)(h + 40) > end)
			return FW_EXCEPTION;
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
			return FW_EXCEPTION;
		__u32 a, b;
		__builtin_memcpy(&a, h + 12, 4);
		__builtin_memcpy(&b, h + 16, 4);
		s_lo = bpf_ntohl(a);
		d_lo = bpf_ntohl(b);
		proto = h[9];
		l4 = 20;
		ports_valid = (be16_at(h + 6) & 0x1fff) == 0;
	}
	__u32 src_port = 0, dst_port = 0, flags = 0, icmp_type = 0;
	if (ports_valid && l4 <= 4096) {
		__u8 *p = data + l3 + l4;
		__u32 room = l3_len > l4 ? l3_len - l4 : 0;
		if (proto == 6 || proto == 17 || proto == 132 || proto == 136) {
			if (room >= 4 && (void *)(p + 4) <= end) {
				src_port = be16_at(p);
				dst_port = be16_at(p + 2);
				if (proto == 6 && room >= 14 && (void *)(p + 14) <= end)
					flags = p[13];
			}
		} else if (proto == 1 || proto == 58) {
			if (room >= 2 && (void *)(p + 2) <= end) {
				icmp_type = p[0];
				src_port = be16_at(p);
				if (room >= 6 && (void *)(p + 6) <= end)
					dst_port = be16_at(p + 4);
			}
		}
	}
	int icmp = v6 ? proto == 58 : proto == 1;
	struct fw_scratch *sc = bpf_map_lookup_elem(&fw_scratch, &zero);
	if (!sc)
		return FW_EXCEPTION;
	__u32 *value = sc->value, *cls = sc->cls;
	value[2] = icmp ? dst_port : src_port;
	value[3] = icmp ? 0 : dst_port;
	value[4] = proto;
	value[5] = proto == 6 ? flags : (proto == 1 || proto == 58) ? icmp_type : 0;
	value[6] = tracked ? FF_CT_STATE_ESTABLISHED : m->ct_value;
	value[7] = meta & 0xffff;
	value[8] = out_if;

	for (int f = 0; f < 16; f++)
		cls[f] = 0;
	for (int f = 0; f < FF_FW_FIELDS; f++) {
		struct ff_fw_field *fd = &m->fields[f];
		if (fd->kind == FF_FW_CONST)
			continue;
		if (fd->kind == FF_FW_TRIE) {
			if (f == 0 && fw_trie(set, half, fd, s_hi, s_lo, v6, &cls[f]))
				return FW_EXCEPTION;
			if (f == 1 && fw_trie(set, half, fd, d_hi, d_lo, v6, &cls[f]))
				return FW_EXCEPTION;
			if (f > 1)
				return FW_EXCEPTION;
			continue;
		}
		if (f < 2 || fd->len == 0)
			return FW_EXCEPTION;
		__u32 v = value[f];
		if (v > fd->len - 1)
			v = fd->len - 1;
		if (fw_get(set, half, fd->off + v, &cls[f]))
			return FW_EXCEPTION;
	}
	__u32 r, a;
	if (fw_chain(set, half, m, m->rest, m->n_rest_steps, cls, &r) ||
	    fw_chain(set, half, m, m->addr, m->n_addr_steps, cls, &a))
		return FW_EXCEPTION;
	__u64 at = (__u64)a * m->n_rest + r;
	if (at >= m->last_len)
		return FW_EXCEPTION;
	__u32 o;
	if (fw_get(set, half, m->last_off + (__u32)at, &o) || o >= m->n_outcomes)
		return FW_EXCEPTION;
	__u32 base = m->outcome_off + o * FF_FW_OUTCOME_WORDS;
	__u32 rule, n_counted;
	if (fw_get(set, half, base, &rule) || fw_get(set, half, base + 1, &n_counted) ||
	    n_counted > FF_FW_MAX_COUNTED)
		return FW_EXCEPTION;
	__u32 slot, verdict;
	if (rule == FF_FW_NO_RULE) {
		slot = m->policy_slot;
		verdict = m->policy_drop ? FW_DROP : FW_ACCEPT;
	} else {
		if (rule >= FF_FW_MAX_SLOTS)
			return FW_EXCEPTION;
		__u32 ak = set * FF_FW_MAX_SLOTS + rule;
		__u32 *act = bpf_map_lookup_elem(&fw_actions, &ak);
		if (!act)
			return FW_EXCEPTION;
		if (*act == FF_FW_REJECT)
			return FW_EXCEPTION;
		slot = rule;
		verdict = *act == FF_FW_ACCEPT ? FW_ACCEPT : FW_DROP;
	}
	if (slot >= FF_FW_MAX_SLOTS)
		return FW_EXCEPTION;
	/* Decided: count the counting rules matched first, then the verdict's
	 * (the loader checked every id is below FF_FW_MAX_SLOTS). */
	__u64 len = l3_len > 0xffff ? 0xffff : l3_len;
	for (int i = 0; i < FF_FW_MAX_COUNTED; i++) {
		if (i >= n_counted)
			break;
		__u32 id;
		if (fw_get(set, half, base + 2 + i, &id))
			break;
		__u32 ck = set * FF_FW_MAX_SLOTS + (id & (FF_FW_MAX_SLOTS - 1));
		struct ff_fw_counter *fc = bpf_map_lookup_elem(&fw_counters, &ck);
		if (fc) {
			fc->packets++;
			fc->bytes += len;
		}
	}
	__u32 ck = set * FF_FW_MAX_SLOTS + slot;
	struct ff_fw_counter *fc = bpf_map_lookup_elem(&fw_counters, &ck);
	if (fc) {
		fc->packets++;
		fc->bytes += len;
	}
	return verdict;
}

#endif /* FASTFWD_XDP_FIREWALL_H */
