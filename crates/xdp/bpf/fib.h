// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The FIB lookup: the poptrie's walk over the fib4/fib6 maps, the same
 * structure crates/fib/src/poptrie.rs builds and walks (docs/fib.md).
 *
 * Included by fastfwd_xdp.c after its maps and `struct ctx`, which it
 * uses; not a unit of its own.
 */
#ifndef FASTFWD_XDP_FIB_H
#define FASTFWD_XDP_FIB_H

static __always_inline __u32 popcount64(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

/* Set bits of v at positions 0..=s. */
static __always_inline __u32 rank(__u64 v, __u32 s)
{
	return popcount64(v << (63 - s));
}

static __always_inline int leaf_of(void *leaves, __u32 base, __u32 half, __u32 l, __u32 *nh)
{
	if ((l >> 1) >= half)
		return -1;
	__u32 k = base + (l >> 1);
	__u64 *p = bpf_map_lookup_elem(leaves, &k);
	if (!p)
		return -1;
	*nh = (l & 1) ? (__u32)(*p >> 32) : (__u32)*p;
	return 0;
}

static __always_inline int top_of(void *top, __u32 base, __u32 i, __u32 *e)
{
	__u32 k = base + (i >> 1);
	__u64 *p = bpf_map_lookup_elem(top, &k);
	if (!p)
		return -1;
	*e = (i & 1) ? (__u32)(*p >> 32) : (__u32)*p;
	return 0;
}

/* The next hop for 6-bit value s of the leaf chunk at leaf index b: its
 * leafvec from the header's four leaves (the low 16 bits of each, as the
 * maps hold leaves widened to 32 bits), then the run s falls in. */
static __always_inline int chunk_leaf_of(void *leaves, __u32 base, __u32 half, __u32 b, __u32 s,
					 __u32 *nh)
{
	__u64 leafvec = 0;
	for (int i = 0; i < FF_LEAF_CHUNK_HEADER; i++) {
		__u32 w;
		if (leaf_of(leaves, base, half, b + i, &w))
			return -1;
		leafvec |= (__u64)(w & 0xffff) << (16 * i);
	}
	if (!leafvec)
		return -1;
	return leaf_of(leaves, base, half, b + FF_LEAF_CHUNK_HEADER + rank(leafvec, s) - 1, nh);
}

/* Longest-prefix match of an IPv4 destination (host order): the poptrie
 * walk of crates/fib/src/poptrie.rs over half `set` of the maps. Returns
 * the next-hop id (FF_NO_ROUTE: none), or FF_FIB_ERROR when an index falls
 * outside the maps. A global function: verified once, on its own. */
#define FF_FIB_ERROR 0xffffffffu
__noinline __u32 ff_fib4(__u32 set, __u32 addr, __u32 half, __u32 leaf_half)
{
	__u32 e;
	if (set > 1 || top_of(&fib4_top, set * FF_TOP4_PAIRS, addr >> (32 - FF_DIRECT4), &e))
		return FF_FIB_ERROR;
	if (!(e & FF_NODE_FLAG))
		return e;
	if (e & FF_LEAF_CHUNK_FLAG) {
		__u32 nh;
		__u32 s = (__u32)((((__u64)addr) << (32 + FF_DIRECT4)) >> 58);
		if (chunk_leaf_of(&fib4_leaves, set * leaf_half, leaf_half,
				  e & ~(FF_NODE_FLAG | FF_LEAF_CHUNK_FLAG), s, &nh))
			return FF_FIB_ERROR;
		return nh;
	}
	__u32 idx = e & ~FF_NODE_FLAG;
	__u32 off = FF_DIRECT4;
	for (int lvl = 0; lvl < FF_LEVELS4; lvl++) {
		if (idx >= half)
			return FF_FIB_ERROR;
		__u32 k = set * half + idx;
		struct ff_node *n = bpf_map_lookup_elem(&fib4_nodes, &k);
		if (!n)
			return FF_FIB_ERROR;
		__u32 s = (__u32)((((__u64)addr) << ((32 + off) & 63)) >> 58);
		if ((n->children >> s) & 1) {
			idx = n->child_base + rank(n->children, s) - 1;
			off += FF_STRIDE;
			continue;
		}
		__u32 nh;
		if (leaf_of(&fib4_leaves, set * leaf_half, leaf_half, n->leaf_base + rank(n->leafvec, s) - 1, &nh))
			return FF_FIB_ERROR;
		return nh;
	}
	return FF_FIB_ERROR;
}

/* The same for IPv6 (hi, lo: the address's two halves, host order). */
__noinline __u32 ff_fib6(__u32 set, __u64 hi, __u64 lo, __u32 half, __u32 leaf_half)
{
	__u32 e;
	if (set > 1 || top_of(&fib6_top, set * FF_TOP6_PAIRS, (__u32)(hi >> (64 - FF_DIRECT6)), &e))
		return FF_FIB_ERROR;
	if (!(e & FF_NODE_FLAG))
		return e;
	if (e & FF_LEAF_CHUNK_FLAG) {
		__u32 nh;
		__u32 s = (__u32)((hi << FF_DIRECT6) >> 58);
		if (chunk_leaf_of(&fib6_leaves, set * leaf_half, leaf_half,
				  e & ~(FF_NODE_FLAG | FF_LEAF_CHUNK_FLAG), s, &nh))
			return FF_FIB_ERROR;
		return nh;
	}
	__u32 idx = e & ~FF_NODE_FLAG;
	__u32 off = FF_DIRECT6;
	for (int lvl = 0; lvl < FF_LEVELS6; lvl++) {
		if (idx >= half)
			return FF_FIB_ERROR;
		__u32 k = set * half + idx;
		struct ff_node *n = bpf_map_lookup_elem(&fib6_nodes, &k);
		if (!n)
			return FF_FIB_ERROR;
		/* Offsets run 18, 24, ..., 54, 60, 66, ..., 126: the stride at
		 * 60 takes four bits of hi and two of lo (off is never 0 here,
		 * so the right shift is 1 to 46); bits past the end read as
		 * zero. */
		__u32 s;
		if (off < 64)
			s = (__u32)(((hi << (off & 63)) | (lo >> ((64 - off) & 63))) >> 58);
		else
			s = (__u32)((lo << ((off - 64) & 63)) >> 58);
		if ((n->children >> s) & 1) {
			idx = n->child_base + rank(n->children, s) - 1;
			off += FF_STRIDE;
			continue;
		}
		__u32 nh;
		if (leaf_of(&fib6_leaves, set * leaf_half, leaf_half, n->leaf_base + rank(n->leafvec, s) - 1, &nh))
			return FF_FIB_ERROR;
		return nh;
	}
	return FF_FIB_ERROR;
}

#endif /* FASTFWD_XDP_FIB_H */
