//! A popcount-compressed multibit trie (after Poptrie, Asai and Ohara,
//! SIGCOMM 2015) with a direct-indexed top level.
//!
//! Layout of the lookup structure:
//!
//! * `top`: one `u32` per value of the first [`TrieKey::DIRECT_BITS`] bits of
//!   the address (2^18 for both families). An entry is either a next
//!   hop (bit 31 clear; `NO_ROUTE` for none) or, with bit 31 set, the index
//!   of the root node of a *chunk*: the sub-trie holding the routes longer
//!   than the direct bits under that entry.
//! * `nodes`: 24-byte nodes, each consuming 6 address bits. `children` has a
//!   bit per 6-bit value that continues to a child node; the children of a
//!   node sit contiguously from `child_base`, so the child for value `v` is
//!   `child_base + popcount(children & bits ≤ v) - 1`. The other values end
//!   in a leaf; `leafvec` marks where a run of equal leaves starts, so equal
//!   neighbours share one stored leaf.
//! * `leaves`: next-hop ids.
//! * *Leaf chunks*: a chunk whose root has no children (under an IPv4 /18,
//!   routes no longer than /24: almost every chunk of a full table) is not
//!   a node. Its `top` entry has bit 30 set too and indexes `leaves`, where
//!   the root's `leafvec` sits in four leaves, followed by its runs. This
//!   saves the 24-byte node and its 8 unused bytes' worth of `children`
//!   and `child_base` (about 1 MiB for a full IPv4 table), and the leaf
//!   usually shares a cache line with the `leafvec` before it.
//!
//! A lookup is one read of `top` and then one node per 6 bits past the direct
//! bits, then one leaf: for a typical IPv4 /24, `top` and then the leaf
//! chunk. The whole full IPv4 table fits in about 3.5 MiB, so most reads hit
//! the CPU caches.
//!
//! Updates are incremental: a route longer than the direct bits rebuilds only
//! its own chunk (a few nodes, from the routes kept per chunk); a shorter
//! route rewrites the `top` entries it covers where it is the longest match
//! and rebuilds only the chunks under them. The structure itself is
//! single-writer; [`crate::shared`] publishes it to readers.

use std::collections::HashMap;

use crate::{Address, Lookup, NextHopId, RouteTable};

mod deep;
use deep::DeepRoutes;

/// The largest next-hop id the trie stores: leaves are 16 bits wide (a
/// router's next-hop ids name its distinct next-hop sets, a few thousand
/// at most), and the all-ones leaf means "no route".
pub const MAX_NEXT_HOP: NextHopId = 0xFFFE;
/// Stored value meaning "no route" (`top` entries and values in flight).
const NO_ROUTE: u32 = 0x7FFF_FFFF;
/// A leaf: a next-hop id, or [`NO_ROUTE_LEAF`].
pub type Leaf = u16;
/// The leaf meaning "no route".
pub const NO_ROUTE_LEAF: Leaf = Leaf::MAX;

/// The leaf for stored value `v` (a next-hop id up to [`MAX_NEXT_HOP`], or
/// `NO_ROUTE`).
#[inline(always)]
fn to_leaf(v: u32) -> Leaf {
    if v > MAX_NEXT_HOP {
        NO_ROUTE_LEAF
    } else {
        v as Leaf
    }
}

/// The stored value of leaf `l`.
#[inline(always)]
pub fn leaf_value(l: Leaf) -> u32 {
    if l == NO_ROUTE_LEAF {
        NO_ROUTE
    } else {
        u32::from(l)
    }
}
/// Marks a `top` entry as a node reference.
const NODE_FLAG: u32 = 0x8000_0000;
/// With [`NODE_FLAG`]: the entry's chunk is one node without children,
/// stored in `leaves` as a *leaf chunk*: its `leafvec` in four leaves
/// (least significant 16 bits first), then its runs.
const LEAF_CHUNK: u32 = 0x4000_0000;
/// Leaves a leaf chunk's `leafvec` takes.
const LEAF_CHUNK_HEADER: u32 = 4;
/// Address bits consumed per node.
const STRIDE: u8 = 6;
/// `best_short_len` value for "no route of at most the direct bits covers".
const NO_LEN: u8 = u8::MAX;
/// Lanes interleaved by the group walk (IPv6 batched lookups): enough that
/// the work on the others covers one lane's wait for memory. A batch of 64
/// is one group (with 32 lanes, in-table lookups over the full table were
/// about 4% slower).
const LANES: usize = 64;

/// Address types the trie can index: fixed-width integers, read from the most
/// significant bit.
pub trait TrieKey: Address + Ord {
    /// Bits resolved by the direct-indexed top level.
    const DIRECT_BITS: u8;
    /// Routes longer than the direct bits are kept for updates in buckets
    /// of this many leading bits: small enough that a bucket is a few cache
    /// lines, large enough that recompiling a node reads one bucket.
    const BUCKET_BITS: u8;
    /// Whether batched lookups walk in interleaved groups (`LANES`
    /// addresses advancing a level at a time, each prefetching its next
    /// node): worth it where walks are deep. Otherwise a batch is looked up
    /// one address after another, which the core's out-of-order window
    /// already overlaps when a walk is a `top` entry and a leaf chunk.
    const GROUP_WALK: bool;
    /// The top-level index: the first `DIRECT_BITS` bits.
    fn top_index(self) -> usize;
    /// The 64 bits starting `offset` bits from the most significant bit,
    /// zero past the end of the address: the group walk's per-lane
    /// window, from which each level takes its six bits with one shift.
    fn window(self, offset: u8) -> u64;
    /// Six bits starting `offset` bits from the most significant bit, zero
    /// past the end of the address: the top of the window there.
    #[inline(always)]
    fn stride_bits(self, offset: u8) -> u32 {
        (self.window(offset) >> (64 - STRIDE)) as u32
    }
    /// The first address of top-level entry `i`.
    fn from_top_index(i: usize) -> Self;
    /// The last address of the prefix `first/len` (`first` masked).
    fn last_of(first: Self, len: u8) -> Self;
}

impl TrieKey for u32 {
    const DIRECT_BITS: u8 = 18;
    // A chunk: 29 routes on average over the full table's routes, 126 at most.
    const BUCKET_BITS: u8 = 18;
    // A full table's IPv4 lookup is a `top` entry and a leaf chunk for all
    // but a few keys.
    const GROUP_WALK: bool = false;
    #[inline(always)]
    fn top_index(self) -> usize {
        (self >> (32 - Self::DIRECT_BITS)) as usize
    }
    #[inline(always)]
    fn window(self, offset: u8) -> u64 {
        (u64::from(self) << 32)
            .checked_shl(u32::from(offset))
            .unwrap_or(0)
    }
    fn from_top_index(i: usize) -> Self {
        (i as u32) << (32 - Self::DIRECT_BITS)
    }
    fn last_of(first: Self, len: u8) -> Self {
        first | !u32::MAX.masked(len)
    }
}

impl TrieKey for u128 {
    // 18 rather than 16: a /48 (nearly half the table) then sits five nodes
    // below `top` instead of six, and a /36 three instead of four; the
    // table's 2000::/3 uses 2^15 of the entries (128 KiB).
    const DIRECT_BITS: u8 = 18;
    // A /40 bucket holds at most 414 of the full table's routes (35 on
    // average over its routes).
    const BUCKET_BITS: u8 = 40;
    // A /48 lies five nodes deep.
    const GROUP_WALK: bool = true;
    #[inline(always)]
    fn top_index(self) -> usize {
        (self >> (128 - Self::DIRECT_BITS)) as usize
    }
    #[inline(always)]
    fn window(self, offset: u8) -> u64 {
        (self.checked_shl(u32::from(offset)).unwrap_or(0) >> 64) as u64
    }
    fn from_top_index(i: usize) -> Self {
        (i as u128) << (128 - Self::DIRECT_BITS)
    }
    fn last_of(first: Self, len: u8) -> Self {
        first | !u128::MAX.masked(len)
    }
}

/// A node with neither children nor leaves.
static EMPTY_NODE: Node = Node {
    children: 0,
    leafvec: 0,
    child_base: 0,
    leaf_base: 0,
};

/// One trie node: 6 address bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Node {
    children: u64,
    leafvec: u64,
    child_base: u32,
    leaf_base: u32,
}

/// The raw arrays of a [`Poptrie`]: `top` (one entry per value of the
/// first [`TrieKey::DIRECT_BITS`] bits; bit 31 set: a node index, else a
/// next hop or [`NO_ROUTE_ENTRY`]), `nodes` and `leaves` (next hops, or
/// [`NO_ROUTE_LEAF`]; [`leaf_value`] widens one to a `top` entry's form).
/// Free slots of `nodes` and `leaves` hold stale data no entry reaches.
#[derive(Debug, Clone, Copy)]
pub struct TrieLayout<'a> {
    /// The direct-indexed top level.
    pub top: &'a [u32],
    /// Trie nodes, each consuming [`STRIDE_BITS`] address bits.
    pub nodes: &'a [Node],
    /// Next-hop ids, 16 bits each.
    pub leaves: &'a [Leaf],
}

/// A `top` value meaning "no route" (what [`leaf_value`] makes of
/// [`NO_ROUTE_LEAF`]).
pub const NO_ROUTE_ENTRY: u32 = NO_ROUTE;
/// Marks a `top` entry as a node index.
pub const NODE_ENTRY_FLAG: u32 = NODE_FLAG;
/// With [`NODE_ENTRY_FLAG`], marks a `top` entry as the index in `leaves`
/// of a leaf chunk: a chunk that is one node without children, stored as
/// its `leafvec` ([`LEAF_CHUNK_HEADER_LEAVES`] leaves, least significant
/// 16 bits first) followed by its leaf runs.
pub const LEAF_CHUNK_ENTRY_FLAG: u32 = LEAF_CHUNK;
/// Leaves a leaf chunk's `leafvec` takes.
pub const LEAF_CHUNK_HEADER_LEAVES: u32 = LEAF_CHUNK_HEADER;
/// Address bits each node consumes.
pub const STRIDE_BITS: u8 = STRIDE;

impl Node {
    /// Bit `v` set: 6-bit value `v` continues to a child node.
    pub fn children(&self) -> u64 {
        self.children
    }
    /// Bit `v` set: a run of equal leaves starts at value `v`.
    pub fn leafvec(&self) -> u64 {
        self.leafvec
    }
    /// Index of the first child in `nodes`.
    pub fn child_base(&self) -> u32 {
        self.child_base
    }
    /// Index of the first leaf in `leaves`.
    pub fn leaf_base(&self) -> u32 {
        self.leaf_base
    }
}

/// What holds a set of leaf runs being repainted: a node, or the leaf
/// chunk of a top-level entry (a root without children, stored in the
/// leaves).
#[derive(Debug, Clone, Copy)]
enum Holder {
    Node(u32),
    Chunk(usize),
}

/// Number of set bits of `v` at positions `0..=s`. (The group walk takes
/// the same popcount with the shift `63 - s` read straight from its
/// inverted address window.)
#[inline(always)]
fn rank(v: u64, s: u32) -> u32 {
    (v << (63 - s)).count_ones()
}

/// Encodes a node's 64 values as leaves: a run of equal values over the
/// slots without a child is stored once, where `leafvec` marks its start.
/// Returns `leafvec`, the runs' values and their number.
#[inline]
fn encode_leaves(values: &[u32; 64], children: u64) -> (u64, [u32; 64], usize) {
    let leaf = !children;
    // Slots that differ from the slot before them (compared in bulk).
    let mut differs = 1u64;
    for s in 1..64 {
        differs |= u64::from(values[s] != values[s - 1]) << s;
    }
    // A slot after a leaf starts a run where it differs from it; a slot
    // after a child compares with the last leaf before the child, if any.
    let mut leafvec = differs & leaf & !(children << 1);
    let mut after_child = leaf & (children << 1);
    while after_child != 0 {
        let s = after_child.trailing_zeros();
        after_child &= after_child - 1;
        let before = leaf & ((1u64 << s) - 1);
        if before == 0 || values[(63 - before.leading_zeros()) as usize] != values[s as usize] {
            leafvec |= 1u64 << s;
        }
    }
    let mut runs = [0u32; 64];
    let mut nl = 0usize;
    let mut starts = leafvec;
    while starts != 0 {
        runs[nl] = values[starts.trailing_zeros() as usize];
        starts &= starts - 1;
        nl += 1;
    }
    (leafvec, runs, nl)
}

/// Memory use of a trie, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// The lookup structure: top level, nodes and leaves, including free
    /// slots in the node and leaf arrays.
    pub lookup_bytes: usize,
    /// Nodes and leaves currently free for reuse (part of `lookup_bytes`).
    pub free_bytes: usize,
    /// Number of nodes in use.
    pub nodes: usize,
    /// Number of leaves in use.
    pub leaves: usize,
    /// Rough size of the route copy kept for updates (not read by lookups).
    pub control_bytes: usize,
}

/// Longest-prefix-match trie for one address family; see the module docs.
#[derive(Debug, Clone)]
pub struct Poptrie<A: TrieKey> {
    top: Vec<u32>,
    nodes: Vec<Node>,
    leaves: Vec<Leaf>,
    /// Routes of length `0..=DIRECT_BITS`, one map per length.
    short: Vec<HashMap<A, NextHopId, foldhash::fast::RandomState>>,
    /// Per top-level entry: length of the longest short route covering it.
    best_short_len: Vec<u8>,
    /// Per top-level entry: that route's next hop (`NO_ROUTE` for none),
    /// the default a chunk's leaves fall back to, in one read.
    slot_defaults: Vec<u32>,
    /// Routes longer than the direct bits.
    deep: DeepRoutes<A>,
    /// Per node (same index as `nodes`): the default it was compiled with,
    /// the next hop of the longest route no longer than its offset covering
    /// it. A change deeper than a node leaves its default as it is, so an
    /// update finds it here rather than by searching the routes.
    node_defaults: Vec<u32>,
    /// Free node and leaf blocks by size (nodes 1 to 64, leaves 1 to 68).
    free_nodes: Vec<Vec<u32>>,
    free_leaves: Vec<Vec<u32>>,
    free_node_count: usize,
    free_leaf_count: usize,
    /// Next-hop ids refused by [`RouteTable::insert`] for being above
    /// [`MAX_NEXT_HOP`].
    refused: u64,
    scratch: Vec<(A, u8, NextHopId)>,
}

/// IPv4 trie.
pub type Poptrie4 = Poptrie<u32>;
/// IPv6 trie.
pub type Poptrie6 = Poptrie<u128>;

impl<A: TrieKey> Default for Poptrie<A> {
    fn default() -> Self {
        Self::new()
    }
}

/// Error from the checked insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrieError {
    /// The next-hop id does not fit the trie's leaf encoding.
    #[error("next-hop id {0} exceeds the maximum {MAX_NEXT_HOP}")]
    NextHopTooLarge(NextHopId),
}

#[inline(always)]
fn decode(v: u32) -> Option<NextHopId> {
    if v == NO_ROUTE { None } else { Some(v) }
}

impl<A: TrieKey> Poptrie<A> {
    /// An empty trie.
    pub fn new() -> Self {
        let top_len = 1usize << A::DIRECT_BITS;
        Self {
            top: vec![NO_ROUTE; top_len],
            nodes: Vec::new(),
            leaves: Vec::new(),
            short: (0..=A::DIRECT_BITS).map(|_| HashMap::default()).collect(),
            best_short_len: vec![NO_LEN; top_len],
            slot_defaults: vec![NO_ROUTE; top_len],
            deep: DeepRoutes::default(),
            node_defaults: Vec::new(),
            free_nodes: vec![Vec::new(); 65],
            // Leaf blocks: 1 to 64 runs, leaf chunks up to 4 more.
            free_leaves: vec![Vec::new(); 65 + LEAF_CHUNK_HEADER as usize],
            free_node_count: 0,
            free_leaf_count: 0,
            refused: 0,
            scratch: Vec::new(),
        }
    }

    /// Builds a trie from a whole table at once (much faster than inserting
    /// the routes one by one). Later duplicates of a prefix replace earlier
    /// ones; routes with a next hop above [`MAX_NEXT_HOP`] are refused and
    /// counted.
    pub fn from_routes<I: IntoIterator<Item = (A::Prefix, NextHopId)>>(routes: I) -> Self {
        let mut t = Self::new();
        let d = A::DIRECT_BITS;
        let mut deep: Vec<(A, u8, NextHopId)> = Vec::new();
        for (p, nh) in routes {
            if nh > MAX_NEXT_HOP {
                t.refused += 1;
                continue;
            }
            let (addr, len) = A::split(&p);
            if len <= d {
                t.short[len as usize].insert(addr, nh);
            } else {
                deep.push((addr, len, nh));
            }
        }
        // Sort by (address, length), keeping the last of equal prefixes.
        deep.sort_by_key(|r| (r.0, r.1));
        let mut dedup: Vec<(A, u8, NextHopId)> = Vec::with_capacity(deep.len());
        for r in deep {
            match dedup.last_mut() {
                Some(last) if last.0 == r.0 && last.1 == r.1 => *last = r,
                _ => dedup.push(r),
            }
        }
        // Short routes, shortest first, fill the top level.
        for len in 0..=d {
            let rs: Vec<(A, NextHopId)> = t.short[len as usize]
                .iter()
                .map(|(&a, &n)| (a, n))
                .collect();
            for (addr, nh) in rs {
                for s in Self::short_range(addr, len) {
                    t.best_short_len[s] = len;
                    t.slot_defaults[s] = nh;
                    t.top[s] = nh;
                }
            }
        }
        // Compile one chunk per top-level entry holding deep routes.
        let mut i = 0;
        while i < dedup.len() {
            let slot = dedup[i].0.top_index();
            let mut j = i + 1;
            while j < dedup.len() && dedup[j].0.top_index() == slot {
                j += 1;
            }
            let default = t.slot_default(slot);
            let root = t.alloc_nodes(1);
            let node = t.build(&dedup[i..j], A::DIRECT_BITS, default);
            t.put_node(root, node, default);
            t.top[slot] = NODE_FLAG | root;
            t.deflate(slot);
            i = j;
        }
        t.deep = DeepRoutes::from_sorted(dedup);
        t
    }

    /// The longest matching route itself (prefix and next hop), found from
    /// the route copy rather than the lookup structure: for the control
    /// side and for checking, not for the per-packet path.
    pub fn lookup_route(&self, addr: A) -> Option<(A::Prefix, NextHopId)> {
        if let Some((l, nh)) = self.deep.covering(addr, A::DIRECT_BITS + 1, A::BITS) {
            return Some((A::prefix(addr.masked(l), l), nh));
        }
        let len = *self.best_short_len.get(addr.top_index())?;
        if len == NO_LEN {
            return None;
        }
        let net = addr.masked(len);
        self.short[len as usize]
            .get(&net)
            .map(|&nh| (A::prefix(net, len), nh))
    }

    /// Checked insert: refuses next-hop ids above [`MAX_NEXT_HOP`].
    pub fn try_insert(
        &mut self,
        prefix: A::Prefix,
        next_hop: NextHopId,
    ) -> Result<Option<NextHopId>, TrieError> {
        if next_hop > MAX_NEXT_HOP {
            return Err(TrieError::NextHopTooLarge(next_hop));
        }
        Ok(self.insert_checked(prefix, next_hop))
    }

    /// Number of inserts refused for a next-hop id above [`MAX_NEXT_HOP`].
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Memory used by the lookup structure and by the route copy.
    pub fn memory(&self) -> MemoryUse {
        let node_sz = core::mem::size_of::<Node>();
        let leaf_sz = core::mem::size_of::<Leaf>();
        // A bucket: its key twice (map and order), a vector, map overhead.
        let deep_sz = core::mem::size_of::<(A, u8, NextHopId)>();
        let bucket_sz = 3 * core::mem::size_of::<A>() + 32;
        let short_routes: usize = self.short.iter().map(HashMap::capacity).sum();
        MemoryUse {
            lookup_bytes: self.top.len() * 4
                + self.nodes.len() * node_sz
                + self.leaves.len() * leaf_sz,
            free_bytes: self.free_node_count * node_sz + self.free_leaf_count * leaf_sz,
            nodes: self.nodes.len() - self.free_node_count,
            leaves: self.leaves.len() - self.free_leaf_count,
            control_bytes: self.deep.len() * deep_sz
                + self.deep.buckets() * bucket_sz
                + short_routes * (core::mem::size_of::<A>() + 8)
                + self.best_short_len.len()
                + self.slot_defaults.len() * 4
                + self.node_defaults.len() * 4,
        }
    }

    /// The lookup structure as it is laid out in memory, for engines that
    /// walk the same trie elsewhere (the XDP engine copies it into BPF
    /// maps). See the module docs for the encoding.
    pub fn layout(&self) -> TrieLayout<'_> {
        TrieLayout {
            top: &self.top,
            nodes: &self.nodes,
            leaves: &self.leaves,
        }
    }

    /// Every route, in no particular order.
    pub fn routes(&self) -> impl Iterator<Item = (A::Prefix, NextHopId)> + '_ {
        let short = self
            .short
            .iter()
            .enumerate()
            .flat_map(|(len, m)| m.iter().map(move |(&a, &nh)| (A::prefix(a, len as u8), nh)));
        let deep = self.deep.iter().map(|&(a, l, nh)| (A::prefix(a, l), nh));
        short.chain(deep)
    }

    /// The stored value for `addr` (`NO_ROUTE` when none).
    #[inline(always)]
    fn lookup_raw(&self, addr: A) -> u32 {
        let e = match self.top.get(addr.top_index()) {
            Some(&e) => e,
            None => return NO_ROUTE,
        };
        if e & NODE_FLAG == 0 {
            return e;
        }
        if e & LEAF_CHUNK != 0 {
            let b = e & !(NODE_FLAG | LEAF_CHUNK);
            let l = self.chunk_leaf(b, addr.stride_bits(A::DIRECT_BITS));
            return self.leaves.get(l).map_or(NO_ROUTE, |&v| leaf_value(v));
        }
        let mut idx = (e & !NODE_FLAG) as usize;
        let mut off = A::DIRECT_BITS;
        loop {
            let node = match self.nodes.get(idx) {
                Some(n) => *n,
                None => return NO_ROUTE,
            };
            let s = addr.stride_bits(off);
            if (node.children >> s) & 1 != 0 {
                idx = (node.child_base + rank(node.children, s) - 1) as usize;
                off += STRIDE;
            } else {
                let l = (node.leaf_base + rank(node.leafvec, s) - 1) as usize;
                return self.leaves.get(l).map_or(NO_ROUTE, |&v| leaf_value(v));
            }
        }
    }

    /// The `leafvec` of the leaf chunk at `leaves[b..]` (zero when the
    /// chunk's header lies outside the array).
    #[inline(always)]
    fn chunk_leafvec(&self, b: u32) -> u64 {
        let b = b as usize;
        match self.leaves.get(b..b + LEAF_CHUNK_HEADER as usize) {
            Some(h) => {
                u64::from(h[0])
                    | u64::from(h[1]) << 16
                    | u64::from(h[2]) << 32
                    | u64::from(h[3]) << 48
            }
            None => 0,
        }
    }

    /// The index in `leaves` of slot `s`'s leaf in the leaf chunk at `b`
    /// (out of range when the chunk is: a malformed chunk finds no route).
    #[inline(always)]
    fn chunk_leaf(&self, b: u32, s: u32) -> usize {
        let leafvec = self.chunk_leafvec(b);
        if leafvec == 0 {
            return usize::MAX;
        }
        (b + LEAF_CHUNK_HEADER) as usize + rank(leafvec, s) as usize - 1
    }

    /// Turns top-level entry `slot`'s leaf chunk, if it has one, back into
    /// a root node, so the update paths see every chunk as nodes.
    fn inflate(&mut self, slot: usize) {
        let e = self.top[slot];
        if e & (NODE_FLAG | LEAF_CHUNK) != NODE_FLAG | LEAF_CHUNK {
            return;
        }
        let b = e & !(NODE_FLAG | LEAF_CHUNK);
        let leafvec = self.chunk_leafvec(b);
        let nl = leafvec.count_ones();
        let leaf_base = if nl > 0 { self.alloc_leaves(nl) } else { 0 };
        let from = (b + LEAF_CHUNK_HEADER) as usize;
        self.leaves
            .copy_within(from..from + nl as usize, leaf_base as usize);
        let size = LEAF_CHUNK_HEADER + nl;
        self.free_leaves[size as usize].push(b);
        self.free_leaf_count += size as usize;
        let root = self.alloc_nodes(1);
        let node = Node {
            children: 0,
            leafvec,
            child_base: 0,
            leaf_base,
        };
        // A root's default is always its slot's (see `refresh_default`).
        let default = self.slot_default(slot);
        self.put_node(root, node, default);
        self.top[slot] = NODE_FLAG | root;
    }

    /// Writes a leaf chunk's `leafvec` at `leaves[b..]`.
    fn write_chunk_header(&mut self, b: u32, leafvec: u64) {
        let at = b as usize;
        for (k, leaf) in self.leaves[at..at + LEAF_CHUNK_HEADER as usize]
            .iter_mut()
            .enumerate()
        {
            *leaf = (leafvec >> (16 * k)) as Leaf;
        }
    }

    /// Stores top-level entry `slot`'s chunk as a leaf chunk if its root
    /// has no children.
    fn deflate(&mut self, slot: usize) {
        let e = self.top[slot];
        if e & (NODE_FLAG | LEAF_CHUNK) != NODE_FLAG {
            return;
        }
        let root = e & !NODE_FLAG;
        let node = self.nodes[root as usize];
        if node.children != 0 {
            return;
        }
        let nl = node.leafvec.count_ones();
        let b = self.alloc_leaves(LEAF_CHUNK_HEADER + nl);
        let at = b as usize;
        self.write_chunk_header(b, node.leafvec);
        let from = node.leaf_base as usize;
        self.leaves
            .copy_within(from..from + nl as usize, at + LEAF_CHUNK_HEADER as usize);
        if nl > 0 {
            self.free_leaves[nl as usize].push(node.leaf_base);
            self.free_leaf_count += nl as usize;
        }
        self.free_nodes[1].push(root);
        self.free_node_count += 1;
        self.top[slot] = NODE_FLAG | LEAF_CHUNK | b;
    }

    /// The node `h` is, or the root node its leaf chunk stands for (no
    /// children; `leaf_base` at its first run).
    #[inline]
    fn holder_node(&self, h: Holder) -> Node {
        match h {
            Holder::Node(idx) => self.nodes[idx as usize],
            Holder::Chunk(slot) => {
                let b = self.top[slot] & !(NODE_FLAG | LEAF_CHUNK);
                Node {
                    children: 0,
                    leafvec: self.chunk_leafvec(b),
                    child_base: 0,
                    leaf_base: b + LEAF_CHUNK_HEADER,
                }
            }
        }
    }

    /// The default `h` was compiled with (a chunk root's is its slot's).
    #[inline]
    fn holder_default(&self, h: Holder) -> u32 {
        match h {
            Holder::Node(idx) => self.node_defaults[idx as usize],
            Holder::Chunk(slot) => self.slot_default(slot),
        }
    }

    /// The default for top-level entry `slot`: the longest short route
    /// covering it.
    #[inline]
    fn slot_default(&self, slot: usize) -> u32 {
        self.slot_defaults[slot]
    }

    /// Whether any route longer than `len` lies under `addr/len`.
    fn has_longer(&self, addr: A, len: u8) -> bool {
        self.deep.any_under(addr.masked(len), len)
    }

    fn alloc_nodes(&mut self, n: u32) -> u32 {
        if let Some(start) = self.free_nodes[n as usize].pop() {
            self.free_node_count -= n as usize;
            return start;
        }
        let start = self.nodes.len() as u32;
        self.nodes
            .resize(self.nodes.len() + n as usize, Node::default());
        self.node_defaults.resize(self.nodes.len(), NO_ROUTE);
        start
    }

    /// Writes a node and the default it was compiled with.
    #[inline]
    fn put_node(&mut self, idx: u32, node: Node, default: u32) {
        self.nodes[idx as usize] = node;
        self.node_defaults[idx as usize] = default;
    }

    fn alloc_leaves(&mut self, n: u32) -> u32 {
        if let Some(start) = self.free_leaves[n as usize].pop() {
            self.free_leaf_count -= n as usize;
            return start;
        }
        let start = self.leaves.len() as u32;
        self.leaves
            .resize(self.leaves.len() + n as usize, NO_ROUTE_LEAF);
        start
    }

    /// Frees the blocks below `node` (its children, recursively, and its
    /// leaves), not the slot `node` itself sits in.
    fn free_below(&mut self, node: Node) {
        let nc = node.children.count_ones();
        for k in 0..nc {
            let child = self.nodes[(node.child_base + k) as usize];
            self.free_below(child);
        }
        if nc > 0 {
            self.free_nodes[nc as usize].push(node.child_base);
            self.free_node_count += nc as usize;
        }
        let nl = node.leafvec.count_ones();
        if nl > 0 {
            self.free_leaves[nl as usize].push(node.leaf_base);
            self.free_leaf_count += nl as usize;
        }
    }

    /// Compiles a node for `routes` (sorted by address then length, all
    /// under the node's prefix; those of length `<= offset` are ignored),
    /// consuming bits `offset..offset + 6`. `default` is the next hop of the
    /// longest route of length `<= offset` covering the node. Children and
    /// leaves get blocks of their own.
    fn build(&mut self, routes: &[(A, u8, NextHopId)], offset: u8, default: u32) -> Node {
        let end = offset + STRIDE;
        let mut values = [default; 64];
        let mut children = 0u64;
        // Covering routes come before covered ones, so later fills are longer.
        for &(addr, len, nh) in routes {
            if len <= offset {
                continue;
            }
            let slot = addr.stride_bits(offset) as usize;
            if len <= end {
                let n = 1usize << (end - len);
                values[slot..slot + n].fill(nh);
            } else {
                children |= 1u64 << slot;
            }
        }
        let (leafvec, runs, nl) = encode_leaves(&values, children);
        let leaf_base = if nl > 0 {
            let b = self.alloc_leaves(nl as u32);
            self.write_leaves(b, &runs[..nl]);
            b
        } else {
            0
        };
        let nc = children.count_ones();
        let child_base = if nc > 0 { self.alloc_nodes(nc) } else { 0 };
        // Deep routes of one 6-bit value are contiguous in address order.
        let mut k = 0;
        let mut i = 0;
        while i < routes.len() {
            let slot = routes[i].0.stride_bits(offset);
            let mut j = i + 1;
            while j < routes.len() && routes[j].0.stride_bits(offset) == slot {
                j += 1;
            }
            if (children >> slot) & 1 != 0 {
                let child = self.build(&routes[i..j], end, values[slot as usize]);
                self.put_node(child_base + k, child, values[slot as usize]);
                k += 1;
            }
            i = j;
        }
        Node {
            children,
            leafvec,
            child_base,
            leaf_base,
        }
    }

    /// Recompiles, in place, the node at `idx` whose prefix is
    /// `addr/offset`, and everything below it.
    fn rebuild_at(&mut self, idx: u32, addr: A, offset: u8, default: u32) {
        let old = self.nodes[idx as usize];
        // This copy has no readers (see `shared`): blocks are reused at once.
        self.free_below(old);
        let mut routes = core::mem::take(&mut self.scratch);
        routes.clear();
        self.deep
            .collect_under(addr.masked(offset), offset, &mut routes);
        let node = self.build(&routes, offset, default);
        self.put_node(idx, node, default);
        self.scratch = routes;
    }

    /// Points top-level entry `slot` at its new default: recompiles its
    /// chunk if it has one (its leaves hold the default), else rewrites the
    /// entry.
    fn refresh_default(&mut self, slot: usize) {
        let default = self.slot_default(slot);
        self.inflate(slot);
        let e = self.top[slot];
        if e & NODE_FLAG != 0 {
            self.rebuild_at(
                e & !NODE_FLAG,
                A::from_top_index(slot),
                A::DIRECT_BITS,
                default,
            );
            self.deflate(slot);
        } else {
            self.top[slot] = default;
        }
    }

    /// Recompiles the whole chunk of top-level entry `slot` after its routes
    /// changed, creating or deleting the chunk as needed.
    fn rebuild_slot(&mut self, slot: usize) {
        let default = self.slot_default(slot);
        let e = self.top[slot];
        let base = A::from_top_index(slot);
        let wanted = self.has_longer(base, A::DIRECT_BITS);
        if e & NODE_FLAG != 0 {
            let root = e & !NODE_FLAG;
            if wanted {
                self.rebuild_at(root, base, A::DIRECT_BITS, default);
                return;
            }
            let node = self.nodes[root as usize];
            self.free_below(node);
            self.free_nodes[1].push(root);
            self.free_node_count += 1;
            self.top[slot] = default;
        } else if wanted {
            let root = self.alloc_nodes(1);
            self.nodes[root as usize] = Node::default();
            self.rebuild_at(root, base, A::DIRECT_BITS, default);
            self.top[slot] = NODE_FLAG | root;
        } else {
            self.top[slot] = default;
        }
    }

    /// Brings the compiled trie up to date after the route `addr/len`
    /// (longer than the direct bits) was added, changed or removed: only
    /// the subtree of the deepest node on its path that must still exist
    /// is recompiled. `next_hop` is the route's after an insert or change,
    /// `None` after a delete.
    fn update_deep(&mut self, addr: A, len: u8, next_hop: Option<NextHopId>) {
        let slot = addr.top_index();
        // A route ending in a leaf chunk's root (an IPv4 /19 to /24) that
        // keeps the chunk: repaint its runs where they are.
        let e = self.top[slot];
        if e & (NODE_FLAG | LEAF_CHUNK) == NODE_FLAG | LEAF_CHUNK
            && len <= A::DIRECT_BITS + STRIDE
            && (next_hop.is_some() || self.has_longer(addr, A::DIRECT_BITS))
            && self.patch_leaves(Holder::Chunk(slot), addr, A::DIRECT_BITS, len, next_hop)
        {
            return;
        }
        self.inflate(slot);
        self.update_chunk(addr, len, next_hop);
        self.deflate(slot);
    }

    /// [`Self::update_deep`] on a chunk whose root, if any, is a node.
    fn update_chunk(&mut self, addr: A, len: u8, next_hop: Option<NextHopId>) {
        let slot = addr.top_index();
        let e = self.top[slot];
        if e & NODE_FLAG == 0 {
            self.rebuild_slot(slot);
            return;
        }
        // Walk down to the node the route ends in, or to the deepest node
        // on its path.
        let mut path = [(0u32, 0u8); 24];
        let mut depth = 0;
        let mut idx = e & !NODE_FLAG;
        let mut off = A::DIRECT_BITS;
        loop {
            path[depth] = (idx, off);
            depth += 1;
            if len <= off + STRIDE || depth == path.len() {
                break;
            }
            let node = self.nodes[idx as usize];
            let s = addr.stride_bits(off);
            if (node.children >> s) & 1 == 0 {
                break;
            }
            idx = node.child_base + rank(node.children, s) - 1;
            off += STRIDE;
        }
        // Most changes touch one node: a route ending in a node that stays
        // (the root while the slot has deep routes, a deeper node while
        // routes longer than its offset remain under it) changes its leaves;
        // a delete that empties a subtree takes one child from the deepest
        // node that stays; an insert below the last node on its path adds
        // one child there. The rest recompile a subtree.
        let (idx, off) = path[depth - 1];
        if len <= off + STRIDE {
            // An inserted route keeps its node; after a delete, ask.
            if next_hop.is_some() || self.has_longer(addr, off) {
                if self.patch_leaves(Holder::Node(idx), addr, off, len, next_hop) {
                    return;
                }
            } else {
                for d in (0..depth - 1).rev() {
                    let (parent, parent_off) = path[d];
                    if self.has_longer(addr, parent_off) {
                        self.remove_child(parent, addr, parent_off);
                        return;
                    }
                }
                self.rebuild_slot(slot);
                return;
            }
        } else if depth < path.len() && next_hop.is_some() {
            self.add_child(idx, addr, off);
            return;
        }
        for d in (1..depth).rev() {
            let (idx, off) = path[d];
            if self.has_longer(addr, off) {
                let default = self.node_defaults[idx as usize];
                self.rebuild_at(idx, addr, off, default);
                return;
            }
        }
        self.rebuild_slot(slot);
    }

    /// Repaints the leaves of the node at `idx` (prefix `addr/off`) where
    /// the route `addr/len` ends (`off < len <= off + STRIDE`), when no
    /// child lies under the route: the children and the defaults they were
    /// built with stay as they are. `next_hop` as for
    /// [`Self::update_deep`]. Returns false, having changed nothing, when
    /// the node must be recompiled instead.
    fn patch_leaves(
        &mut self,
        at: Holder,
        addr: A,
        off: u8,
        len: u8,
        next_hop: Option<NextHopId>,
    ) -> bool {
        let end = off + STRIDE;
        let node = self.holder_node(at);
        let first = addr.stride_bits(off) as usize;
        let n = 1usize << (end - len);
        if node.children & (((1u64 << n) - 1) << first) != 0 {
            return false;
        }
        // Under the route: the route itself, or after a delete the longest
        // shorter route covering it (ending in this node or above); then
        // the longer routes ending in this node, if the route covers more
        // than one slot.
        let under = match next_hop {
            Some(nh) => nh,
            None => match self.deep.covering(addr, off + 1, len - 1) {
                Some((_, nh)) => nh,
                None => self.holder_default(at),
            },
        };
        if n == 1 {
            self.set_slot(at, first as u32, under);
            return true;
        }
        let mut values = self.node_values(&node);
        values[first..first + n].fill(under);
        if len < end {
            let Some(routes) = self.deep.within(addr.masked(len), len) else {
                return false;
            };
            for &(a, l, nh) in routes {
                if l > len && l <= end {
                    let s = a.stride_bits(off) as usize;
                    values[s..s + (1usize << (end - l))].fill(nh);
                }
            }
        }
        self.set_leaves(at, &values, node.children);
        true
    }

    /// The node's 64 values as its leaves hold them (child slots hold no
    /// meaningful value).
    fn node_values(&self, node: &Node) -> [u32; 64] {
        let mut values = [NO_ROUTE; 64];
        let base = node.leaf_base as usize;
        let Some(runs) = self
            .leaves
            .get(base..base + node.leafvec.count_ones() as usize)
        else {
            return values;
        };
        if runs.is_empty() {
            return values;
        }
        // Each run fills the slots from its start to the next run's; child
        // slots get the run around them, and slots before the first run the
        // first (callers skip child slots).
        let mut starts = node.leafvec;
        let mut from = 0usize;
        for &run in runs {
            let run = leaf_value(run);
            starts &= starts - 1;
            let to = if starts == 0 {
                64
            } else {
                starts.trailing_zeros() as usize
            };
            values[from..to].fill(run);
            from = to;
        }
        values
    }

    /// Gives the node at `idx` the leaves for `values` (child slots
    /// skipped), reusing its leaf block when the number of runs is the same.
    fn set_leaves(&mut self, at: Holder, values: &[u32; 64], children: u64) {
        let (leafvec, runs, nl) = encode_leaves(values, children);
        self.store_runs(at, leafvec, &runs[..nl]);
    }

    /// Sets leaf slot `s` of the node at `idx` to `v`, working on the runs
    /// alone: only the runs at `s` and at the next leaf slot can start or
    /// stop, so the node's 64 values are never expanded.
    fn set_slot(&mut self, at: Holder, s: u32, v: u32) {
        let node = self.holder_node(at);
        let base = node.leaf_base as usize;
        let leaves = &self.leaves;
        // Every leaf slot has a run start at or before it.
        let old = |b: u32| leaf_value(leaves[base + rank(node.leafvec, b) as usize - 1]);
        if old(s) == v {
            return;
        }
        let leaf = !node.children;
        let below = leaf & ((1u64 << s) - 1);
        let above = if s == 63 {
            0
        } else {
            leaf & (u64::MAX << (s + 1))
        };
        let mut leafvec = node.leafvec & !(1u64 << s);
        if below == 0 || old(63 - below.leading_zeros()) != v {
            leafvec |= 1u64 << s;
        }
        if above != 0 {
            let t = above.trailing_zeros();
            leafvec &= !(1u64 << t);
            if old(t) != v {
                leafvec |= 1u64 << t;
            }
        }
        let mut runs = [0u32; 64];
        let mut nl = 0;
        let mut starts = leafvec;
        while starts != 0 {
            let b = starts.trailing_zeros();
            runs[nl] = if b == s { v } else { old(b) };
            starts &= starts - 1;
            nl += 1;
        }
        self.store_runs(at, leafvec, &runs[..nl]);
    }

    /// Stores the values `runs` as the leaves from index `base` on.
    fn write_leaves(&mut self, base: u32, runs: &[u32]) {
        let b = base as usize;
        for (leaf, &v) in self.leaves[b..b + runs.len()].iter_mut().zip(runs) {
            *leaf = to_leaf(v);
        }
    }

    /// Gives the node at `idx` the leaf runs `runs` starting where
    /// `leafvec` says, reusing its leaf block when the number of runs is
    /// the same.
    fn store_runs(&mut self, at: Holder, leafvec: u64, runs: &[u32]) {
        let idx = match at {
            Holder::Node(idx) => idx,
            Holder::Chunk(slot) => return self.store_chunk_runs(slot, leafvec, runs),
        };
        let node = self.nodes[idx as usize];
        let nl = runs.len();
        let old_nl = node.leafvec.count_ones();
        let leaf_base = if nl as u32 == old_nl {
            node.leaf_base
        } else {
            if old_nl > 0 {
                self.free_leaves[old_nl as usize].push(node.leaf_base);
                self.free_leaf_count += old_nl as usize;
            }
            if nl > 0 {
                self.alloc_leaves(nl as u32)
            } else {
                0
            }
        };
        self.write_leaves(leaf_base, runs);
        let node = &mut self.nodes[idx as usize];
        node.leafvec = leafvec;
        node.leaf_base = leaf_base;
    }

    /// [`Self::store_runs`] for top-level entry `slot`'s leaf chunk: in
    /// place when the number of runs is the same, else in a new block.
    fn store_chunk_runs(&mut self, slot: usize, leafvec: u64, runs: &[u32]) {
        let flags = NODE_FLAG | LEAF_CHUNK;
        let old = self.top[slot] & !flags;
        let old_size = LEAF_CHUNK_HEADER + self.chunk_leafvec(old).count_ones();
        let size = LEAF_CHUNK_HEADER + runs.len() as u32;
        let b = if size == old_size {
            old
        } else {
            self.free_leaves[old_size as usize].push(old);
            self.free_leaf_count += old_size as usize;
            self.alloc_leaves(size)
        };
        self.write_chunk_header(b, leafvec);
        self.write_leaves(b + LEAF_CHUNK_HEADER, runs);
        self.top[slot] = flags | b;
    }

    /// Moves the node at `idx`'s children to a new block for the child set
    /// `children`, with `new_child` (if any) at its place; the children's own
    /// blocks stay where they are. Returns the new block's base.
    fn move_children(
        &mut self,
        idx: u32,
        children: u64,
        new_child: Option<(u32, Node, u32)>,
    ) -> u32 {
        let node = self.nodes[idx as usize];
        let old_nc = node.children.count_ones();
        let nc = children.count_ones();
        let base = if nc > 0 { self.alloc_nodes(nc) } else { 0 };
        let mut k = 0;
        for s in 0..64u32 {
            if (children >> s) & 1 == 0 {
                continue;
            }
            let (child, default) = match new_child {
                Some((slot, c, d)) if slot == s => (c, d),
                _ => {
                    let i = (node.child_base + rank(node.children, s) - 1) as usize;
                    (self.nodes[i], self.node_defaults[i])
                }
            };
            self.put_node(base + k, child, default);
            k += 1;
        }
        if old_nc > 0 {
            self.free_nodes[old_nc as usize].push(node.child_base);
            self.free_node_count += old_nc as usize;
        }
        base
    }

    /// Adds the child under the node at `idx` (prefix `addr/off`) that the
    /// newly inserted route `addr/len` (`len > off + STRIDE`) needs: builds
    /// its subtree and moves the siblings' entries; nothing else below is
    /// recompiled.
    fn add_child(&mut self, idx: u32, addr: A, off: u8) {
        let end = off + STRIDE;
        let node = self.nodes[idx as usize];
        let s = addr.stride_bits(off);
        let mut values = self.node_values(&node);
        let mut routes = core::mem::take(&mut self.scratch);
        routes.clear();
        self.deep.collect_under(addr.masked(end), end, &mut routes);
        let child = self.build(&routes, end, values[s as usize]);
        self.scratch = routes;
        let children = node.children | (1u64 << s);
        let base = self.move_children(idx, children, Some((s, child, values[s as usize])));
        values[s as usize] = NO_ROUTE;
        self.set_leaves(Holder::Node(idx), &values, children);
        let node = &mut self.nodes[idx as usize];
        node.children = children;
        node.child_base = base;
    }

    /// Removes the child on `addr`'s path under the node at `idx` (prefix
    /// `addr/off`), whose subtree a delete left without routes; the slot
    /// becomes a leaf again.
    fn remove_child(&mut self, idx: u32, addr: A, off: u8) {
        let node = self.nodes[idx as usize];
        let s = addr.stride_bits(off);
        let child = self.nodes[(node.child_base + rank(node.children, s) - 1) as usize];
        self.free_below(child);
        let children = node.children & !(1u64 << s);
        let base = self.move_children(idx, children, None);
        let mut values = self.node_values(&node);
        values[s as usize] = match self.deep.covering(addr, off + 1, off + STRIDE) {
            Some((_, nh)) => nh,
            None => self.node_defaults[idx as usize],
        };
        self.set_leaves(Holder::Node(idx), &values, children);
        let node = &mut self.nodes[idx as usize];
        node.children = children;
        node.child_base = base;
    }

    /// The range of top-level entries a short prefix covers.
    fn short_range(addr: A, len: u8) -> core::ops::Range<usize> {
        let first = addr.top_index();
        first..first + (1usize << (A::DIRECT_BITS - len))
    }

    /// Starts fetching the root node of `addr`'s chunk, so that the walk an
    /// update makes after changing the route copy does not begin with a
    /// cache miss: the two chains of reads overlap.
    #[inline]
    fn prefetch_chunk(&self, addr: A) {
        let Some(&e) = self.top.get(addr.top_index()) else {
            return;
        };
        if e & (NODE_FLAG | LEAF_CHUNK) == NODE_FLAG | LEAF_CHUNK {
            if let Some(l) = self.leaves.get((e & !(NODE_FLAG | LEAF_CHUNK)) as usize) {
                prefetch(l);
            }
        } else if e & NODE_FLAG != 0
            && let Some(n) = self.nodes.get((e & !NODE_FLAG) as usize)
        {
            prefetch(n);
        }
    }

    fn insert_checked(&mut self, prefix: A::Prefix, nh: NextHopId) -> Option<NextHopId> {
        let (addr, len) = A::split(&prefix);
        if len <= A::DIRECT_BITS {
            let old = self.short[len as usize].insert(addr, nh);
            if old == Some(nh) {
                return old;
            }
            for s in Self::short_range(addr, len) {
                let b = self.best_short_len[s];
                if b == NO_LEN || b <= len {
                    self.best_short_len[s] = len;
                    self.slot_defaults[s] = nh;
                    self.refresh_default(s);
                }
            }
            old
        } else {
            self.prefetch_chunk(addr);
            let old = self.deep.insert(addr, len, nh);
            if old == Some(nh) {
                return old;
            }
            self.update_deep(addr, len, Some(nh));
            old
        }
    }

    fn remove_route(&mut self, prefix: &A::Prefix) -> Option<NextHopId> {
        let (addr, len) = A::split(prefix);
        if len <= A::DIRECT_BITS {
            let old = self.short[len as usize].remove(&addr)?;
            // The covering routes shorter than `len` are the same for every
            // entry in the range: find the longest one once.
            let repl = (0..len)
                .rev()
                .find(|&l| self.short[l as usize].contains_key(&addr.masked(l)))
                .unwrap_or(NO_LEN);
            let repl_nh = match repl {
                NO_LEN => NO_ROUTE,
                l => self.short[l as usize]
                    .get(&addr.masked(l))
                    .copied()
                    .unwrap_or(NO_ROUTE),
            };
            for s in Self::short_range(addr, len) {
                if self.best_short_len[s] == len {
                    self.best_short_len[s] = repl;
                    self.slot_defaults[s] = repl_nh;
                    self.refresh_default(s);
                }
            }
            Some(old)
        } else {
            self.prefetch_chunk(addr);
            let old = self.deep.remove(addr, len)?;
            self.update_deep(addr, len, None);
            Some(old)
        }
    }
}

use fastfwd_sys::cpu::{prefetch, prefetch_address};

impl<A: TrieKey> Poptrie<A> {
    /// Batched lookups by the group walk, whatever
    /// [`TrieKey::GROUP_WALK`] says: what [`Lookup::lookup_batch`] does for
    /// IPv6, for tests and benchmarks of either family.
    pub fn lookup_batch_grouped(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        if let Some(first) = addrs.get(..LANES.min(addrs.len())) {
            self.prefetch_tops(first);
        }
        let mut groups = addrs.chunks(LANES).zip(out.chunks_mut(LANES)).peekable();
        while let Some((a, o)) = groups.next() {
            // The next group's `top` entries load while this group walks.
            if let Some((next, _)) = groups.peek() {
                self.prefetch_tops(next);
            }
            self.lookup_group(a, o);
        }
    }

    /// Prefetches the `top` entries of `addrs`.
    #[inline(always)]
    fn prefetch_tops(&self, addrs: &[A]) {
        for a in addrs {
            if let Some(e) = self.top.get(a.top_index()) {
                prefetch(e);
            }
        }
    }

    /// Looks up up to `LANES` addresses in stages (group prefetching): every
    /// lane's `top` entry has been prefetched (by the caller, before this
    /// group or while the group before it walked), then each level
    /// reads the nodes the level before prefetched and prefetches the next
    /// node or the leaf, and the leaves are read last. The group waits for
    /// memory about once per level rather than once per level per address:
    /// on a machine whose caches do not hold the table, a lone lookup is
    /// three misses in a row.
    #[inline(always)]
    fn lookup_group(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        let n = addrs.len().min(out.len()).min(LANES);
        let (addrs, out) = (&addrs[..n], &mut out[..n]);
        // The lanes still walking, kept packed at the front: walker `k` is
        // lane `lane[k]`, at node `node_at[k]`, with the address bits from
        // the current level on, inverted, in `win[k]` (so a level's six
        // bits are one shift; a variable shift of a `u128` is half a dozen
        // instructions). A level reads and rewrites them in order, with no
        // indirection through the lane number.
        let mut lane = [0u8; LANES];
        let mut node_at = [0u32; LANES];
        let mut win = [0u64; LANES];
        let mut nwalk = 0;
        // Lanes whose leaf is prefetched, and the leaf's index.
        let mut leafy = [0u8; LANES];
        let mut leaf_at = [0u32; LANES];
        let mut nleaf = 0;
        // Lanes whose chunk is a leaf chunk, and its index in `leaves`.
        let mut chunked = [0u8; LANES];
        let mut chunk_at = [0u32; LANES];
        let mut nchunk = 0;
        for (i, a) in addrs.iter().enumerate() {
            let e = self.top.get(a.top_index()).copied().unwrap_or(NO_ROUTE);
            if e & NODE_FLAG == 0 {
                out[i] = decode(e);
            } else if e & LEAF_CHUNK != 0 {
                let b = e & !(NODE_FLAG | LEAF_CHUNK);
                if let Some(h) = self.leaves.get(b as usize) {
                    prefetch(h);
                }
                chunked[nchunk] = i as u8;
                chunk_at[nchunk] = b;
                nchunk += 1;
            } else {
                let idx = e & !NODE_FLAG;
                if let Some(node) = self.nodes.get(idx as usize) {
                    prefetch(node);
                }
                lane[nwalk] = i as u8;
                node_at[nwalk] = idx;
                win[nwalk] = !a.window(A::DIRECT_BITS);
                nwalk += 1;
            }
        }
        for (&i, &b) in chunked[..nchunk].iter().zip(&chunk_at) {
            let l = self.chunk_leaf(b, addrs[i as usize].stride_bits(A::DIRECT_BITS));
            if let Some(leaf) = self.leaves.get(l) {
                prefetch(leaf);
            }
            leafy[nleaf] = i;
            leaf_at[nleaf] = l as u32;
            nleaf += 1;
        }
        // Valid bits left in the windows.
        let mut fresh = 64;
        let mut off = A::DIRECT_BITS;
        while nwalk > 0 {
            if fresh < u32::from(STRIDE) {
                for k in 0..nwalk {
                    let i = usize::from(lane[k % LANES]);
                    win[k % LANES] = !addrs.get(i).map_or(0, |a| a.window(off));
                }
                fresh = 64;
            }
            let mut still = 0;
            // Walker numbers and counts stay below `LANES`; the bound says
            // so to the compiler, so the reads need no check.
            for k in 0..nwalk.min(LANES) {
                let i = lane[k];
                let w = win[k];
                // A node index out of range (none is) reads as an empty
                // node, whose leaf index is out of range too: no route.
                let node = self.nodes.get(node_at[k] as usize).unwrap_or(&EMPTY_NODE);
                // The window is kept inverted, so its top bits are `63 - s`
                // for slot `s`: shifted left by them, a bitmap has slot `s`
                // in its sign bit and the slots up to `s` are its popcount.
                let up = (w >> (64 - STRIDE)) as u32;
                let children = node.children << up;
                if (children as i64) < 0 {
                    let idx = (node.child_base + children.count_ones()).wrapping_sub(1);
                    prefetch_address(self.nodes.as_ptr().wrapping_add(idx as usize));
                    let at = still % LANES;
                    lane[at] = i;
                    node_at[at] = idx;
                    win[at] = w << STRIDE;
                    still += 1;
                } else {
                    let l = (node.leaf_base + (node.leafvec << up).count_ones()).wrapping_sub(1);
                    prefetch_address(self.leaves.as_ptr().wrapping_add(l as usize));
                    let f = nleaf % LANES;
                    leafy[f] = i;
                    leaf_at[f] = l;
                    nleaf += 1;
                }
            }
            nwalk = still;
            off += STRIDE;
            fresh -= u32::from(STRIDE);
        }
        for (&i, &l) in leafy[..nleaf].iter().zip(&leaf_at) {
            if let Some(o) = out.get_mut(usize::from(i)) {
                *o = decode(
                    self.leaves
                        .get(l as usize)
                        .map_or(NO_ROUTE, |&v| leaf_value(v)),
                );
            }
        }
    }
}

impl<A: TrieKey> Lookup<A> for Poptrie<A> {
    #[inline]
    fn lookup(&self, addr: A) -> Option<NextHopId> {
        decode(self.lookup_raw(addr))
    }

    fn lookup_len(&self, addr: A) -> Option<(NextHopId, u8)> {
        self.lookup_route(addr).map(|(p, nh)| (nh, A::split(&p).1))
    }

    fn lookup_batch(&self, addrs: &[A], out: &mut [Option<NextHopId>]) {
        if A::GROUP_WALK {
            self.lookup_batch_grouped(addrs, out);
        } else {
            for (&a, o) in addrs.iter().zip(out.iter_mut()) {
                *o = self.lookup(a);
            }
        }
    }
}

impl<A: TrieKey> RouteTable<A> for Poptrie<A> {
    /// Inserts or replaces a route. A next-hop id above [`MAX_NEXT_HOP`] is
    /// refused (nothing changes, [`Poptrie::refused`] counts it); use
    /// [`Poptrie::try_insert`] to get an error instead.
    fn insert(&mut self, prefix: A::Prefix, next_hop: NextHopId) -> Option<NextHopId> {
        if next_hop > MAX_NEXT_HOP {
            self.refused += 1;
            return None;
        }
        self.insert_checked(prefix, next_hop)
    }

    fn remove(&mut self, prefix: &A::Prefix) -> Option<NextHopId> {
        self.remove_route(prefix)
    }

    fn get(&self, prefix: &A::Prefix) -> Option<NextHopId> {
        let (addr, len) = A::split(prefix);
        if len <= A::DIRECT_BITS {
            self.short[len as usize].get(&addr).copied()
        } else {
            self.deep.get(addr, len)
        }
    }

    fn len(&self) -> usize {
        self.short.iter().map(HashMap::len).sum::<usize>() + self.deep.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{ReferenceFib4, ReferenceFib6};
    use wire::{Ipv4Cidr, Ipv6Cidr};

    fn p4(s: &str) -> Ipv4Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn stride_bits_read_from_the_top_with_zero_padding() {
        assert_eq!(0xFC00_0000u32.stride_bits(0), 63);
        assert_eq!(0x0000_0003u32.stride_bits(30), 0b110000);
        assert_eq!(0xFFFF_FFFFu32.stride_bits(30), 0b110000);
        assert_eq!((3u128).stride_bits(126), 0b110000);
        assert_eq!((u128::MAX).stride_bits(16), 63);
        assert_eq!(0x0000_4000u32.top_index(), 1);
    }

    #[test]
    fn windows_hold_the_bits_from_the_offset_on() {
        assert_eq!(0x8000_0001u32.window(0), 0x8000_0001_0000_0000);
        assert_eq!(0x8000_0001u32.window(18), 0x0004_0000_0000_0000);
        assert_eq!(0x8000_0001u32.window(32), 0);
        let a = 0x2001_0db8_0001_0002_0003_0004_0005_0006u128;
        assert_eq!(a.window(0), 0x2001_0db8_0001_0002);
        assert_eq!(a.window(16), 0x0db8_0001_0002_0003);
        assert_eq!(a.window(64), 0x0003_0004_0005_0006);
        assert_eq!(a.window(100), 0x5_0006 << 36);
        // Each level's six bits, taken from the window as the batched
        // lookup takes them, are the ones `stride_bits` reads.
        for off in (18..=120u8).step_by(6) {
            let mut w = a.window(off);
            for k in 0..(64 / 6) {
                let o = off + 6 * k;
                if o < 128 {
                    assert_eq!((w >> 58) as u32, a.stride_bits(o), "offset {o}");
                }
                w <<= 6;
            }
        }
    }

    #[test]
    fn nested_routes_and_deletes_fall_back() {
        let mut t = Poptrie4::new();
        assert_eq!(t.lookup(0x0a00_0001), None);
        t.insert(p4("0.0.0.0/0"), 1);
        t.insert(p4("10.0.0.0/8"), 2);
        t.insert(p4("10.1.0.0/16"), 3);
        t.insert(p4("10.1.2.0/24"), 5);
        t.insert(p4("10.1.2.3/32"), 4);
        assert_eq!(t.lookup(0x0a01_0203), Some(4));
        assert_eq!(t.lookup(0x0a01_0204), Some(5));
        assert_eq!(t.lookup(0x0a01_0304), Some(3));
        assert_eq!(t.lookup(0x0a02_0000), Some(2));
        assert_eq!(t.lookup(0x0b00_0000), Some(1));
        assert_eq!(t.remove(&p4("10.1.0.0/16")), Some(3));
        assert_eq!(t.remove(&p4("10.1.0.0/16")), None);
        assert_eq!(t.lookup(0x0a01_0304), Some(2));
        assert_eq!(t.lookup(0x0a01_0204), Some(5));
        assert_eq!(t.insert(p4("10.0.0.0/8"), 9), Some(2));
        assert_eq!(t.lookup(0x0a01_0304), Some(9));
        assert_eq!(t.remove(&p4("10.1.2.0/24")), Some(5));
        assert_eq!(t.lookup(0x0a01_0204), Some(9));
        assert_eq!(t.lookup(0x0a01_0203), Some(4));
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&p4("10.1.2.3/32")), Some(4));
        assert_eq!(t.remove(&p4("0.0.0.0/0")), Some(1));
        assert_eq!(t.lookup(0x0b00_0000), None);
    }

    #[test]
    fn one_slot_changes_match_a_fresh_build() {
        // One chunk (10.0.0.0/18): /24s at its edges, around a child (the
        // /25 under slot 5) and equal to their neighbours or not.
        let s24 = |slot: u32| Ipv4Cidr::new(0x0a00_0000 | (slot << 8), 24).unwrap();
        let mut t = Poptrie4::new();
        let mut routes: std::collections::BTreeMap<Ipv4Cidr, u32> = Default::default();
        let mut apply = |t: &mut Poptrie4, p: Ipv4Cidr, nh: Option<u32>| {
            match nh {
                Some(nh) => {
                    t.insert(p, nh);
                    routes.insert(p, nh);
                }
                None => {
                    t.remove(&p);
                    routes.remove(&p);
                }
            }
            let fresh = Poptrie4::from_routes(routes.iter().map(|(&p, &n)| (p, n)));
            for slot in 0..64u32 {
                for a in [0x0a00_0000 | (slot << 8), 0x0a00_0000 | (slot << 8) | 0xff] {
                    assert_eq!(t.lookup(a), fresh.lookup(a), "{a:x} after {p} {nh:?}");
                }
            }
            let (m, f) = (t.memory(), fresh.memory());
            assert_eq!((m.nodes, m.leaves), (f.nodes, f.leaves), "after {p} {nh:?}");
        };
        apply(&mut t, p4("10.0.0.0/16"), Some(1));
        apply(&mut t, p4("10.0.5.0/25"), Some(2));
        for (slot, nh) in [
            (0, Some(3)),
            (63, Some(3)),
            (62, Some(3)),
            (4, Some(1)),
            (6, Some(1)),
            (4, Some(7)),
            (6, Some(7)),
            (5, Some(7)),
            (1, Some(3)),
            (0, None),
            (63, None),
            (6, None),
            (4, None),
            (62, Some(1)),
            (62, None),
            (5, None),
            (1, None),
        ] {
            apply(&mut t, s24(slot), nh);
        }
    }

    #[test]
    fn oversized_next_hops_are_refused() {
        let mut t = Poptrie4::new();
        assert_eq!(
            t.try_insert(p4("10.0.0.0/8"), MAX_NEXT_HOP + 1),
            Err(TrieError::NextHopTooLarge(MAX_NEXT_HOP + 1))
        );
        assert_eq!(t.insert(p4("10.0.0.0/8"), u32::MAX), None);
        assert_eq!(t.refused(), 1);
        assert_eq!(t.lookup(0x0a00_0000), None);
        assert_eq!(t.try_insert(p4("10.0.0.0/8"), MAX_NEXT_HOP), Ok(None));
        assert_eq!(t.lookup(0x0a00_0000), Some(MAX_NEXT_HOP));
        // The largest id in 16-bit leaves too, beside "no route" and 0.
        assert_eq!(t.try_insert(p4("10.1.0.0/24"), MAX_NEXT_HOP), Ok(None));
        assert_eq!(t.try_insert(p4("10.1.0.128/25"), 0), Ok(None));
        assert_eq!(t.try_insert(p4("11.0.0.0/24"), MAX_NEXT_HOP - 1), Ok(None));
        assert_eq!(t.lookup(0x0a01_0001), Some(MAX_NEXT_HOP));
        assert_eq!(t.lookup(0x0a01_0081), Some(0));
        assert_eq!(t.lookup(0x0b00_0001), Some(MAX_NEXT_HOP - 1));
        assert_eq!(t.lookup(0x0b00_0101), None);
        // 10.1.0.0/18: a root node with one run beside the child for
        // 10.1.0.0/24, which has two; 11.0.0.0/18: a leaf chunk, its
        // `leafvec` in four leaves, then the /24 and "no route" after it.
        assert_eq!((t.memory().nodes, t.memory().leaves), (2, 9));
        let top = t.layout().top;
        assert_eq!(top[0x0a01_0000 >> 14] & (NODE_FLAG | LEAF_CHUNK), NODE_FLAG);
        let e = top[0x0b00_0000 >> 14];
        assert_eq!(e & (NODE_FLAG | LEAF_CHUNK), NODE_FLAG | LEAF_CHUNK);
        let b = (e & !(NODE_FLAG | LEAF_CHUNK)) as usize;
        assert_eq!(
            &t.layout().leaves[b..b + 6],
            &[0b11, 0, 0, 0, MAX_NEXT_HOP as Leaf - 1, NO_ROUTE_LEAF]
        );
    }

    #[test]
    fn chunks_become_leaf_chunks_and_back_as_children_come_and_go() {
        let mut t = Poptrie4::new();
        let chunk = |t: &Poptrie4| t.layout().top[0x0a00_0000 >> 14] & (NODE_FLAG | LEAF_CHUNK);
        t.insert(p4("10.0.0.0/24"), 5);
        assert_eq!(chunk(&t), NODE_FLAG | LEAF_CHUNK);
        assert_eq!((t.memory().nodes, t.memory().leaves), (0, 6));
        // Repainted in place (same runs), then with one run more.
        t.insert(p4("10.0.0.0/24"), 1);
        assert_eq!(t.lookup(0x0a00_0005), Some(1));
        t.insert(p4("10.0.2.0/23"), 4);
        assert_eq!(t.lookup(0x0a00_0305), Some(4));
        assert_eq!((t.memory().nodes, t.memory().leaves), (0, 8));
        t.remove(&p4("10.0.2.0/23"));
        assert_eq!(t.lookup(0x0a00_0305), None);
        assert_eq!(t.lookup(0x0a00_0005), Some(1));
        assert_eq!((t.memory().nodes, t.memory().leaves), (0, 6));
        // A /25 needs a child: the chunk is a root node again.
        t.insert(p4("10.0.1.0/25"), 2);
        assert_eq!(chunk(&t), NODE_FLAG);
        assert_eq!(t.lookup(0x0a00_0105), Some(2));
        assert_eq!(t.lookup(0x0a00_0005), Some(1));
        // A covering short route changes the chunk's default in both forms.
        t.insert(p4("10.0.0.0/16"), 3);
        assert_eq!(t.lookup(0x0a00_0205), Some(3));
        t.remove(&p4("10.0.1.0/25"));
        assert_eq!(chunk(&t), NODE_FLAG | LEAF_CHUNK);
        assert_eq!(t.lookup(0x0a00_0105), Some(3));
        t.remove(&p4("10.0.0.0/16"));
        assert_eq!(t.lookup(0x0a00_0105), None);
        assert_eq!(t.lookup(0x0a00_0005), Some(1));
        assert_eq!((t.memory().nodes, t.memory().leaves), (0, 6));
        t.remove(&p4("10.0.0.0/24"));
        assert_eq!(t.layout().top[0x0a00_0000 >> 14], NO_ROUTE);
        assert_eq!((t.memory().nodes, t.memory().leaves), (0, 0));
        let fresh = Poptrie4::from_routes([(p4("10.0.0.0/24"), 1)]);
        assert_eq!(
            fresh.layout().top[0x0a00_0000 >> 14] & LEAF_CHUNK,
            LEAF_CHUNK
        );
    }

    #[test]
    fn memory_is_reused_after_churn() {
        let mut t = Poptrie4::new();
        for i in 0..1000u32 {
            t.insert(Ipv4Cidr::new(0x0a00_0000 | (i << 8), 24).unwrap(), i);
        }
        let before = t.memory().lookup_bytes;
        for round in 0..5u32 {
            for i in 0..1000u32 {
                t.insert(
                    Ipv4Cidr::new(0x0a00_0000 | (i << 8), 24).unwrap(),
                    i + round,
                );
            }
        }
        assert!(t.memory().lookup_bytes <= before * 2);
    }

    #[test]
    fn bulk_build_matches_reference_and_batched_lookups_agree() {
        let mut r = ReferenceFib6::new();
        let routes: Vec<(Ipv6Cidr, u32)> = [
            ("::/0", 1),
            ("2001:db8::/32", 2),
            ("2001:db8:1::/48", 3),
            ("2001:db8:1::1/128", 4),
            ("2001:db8:1:2::/64", 5),
            ("2000::/3", 6),
            ("2001::/16", 7),
        ]
        .iter()
        .map(|(s, n)| (s.parse().unwrap(), *n))
        .collect();
        for (p, n) in &routes {
            r.insert(*p, *n);
        }
        let t = Poptrie6::from_routes(routes.iter().copied());
        let mut addrs = Vec::new();
        for (p, _) in &routes {
            addrs.extend([
                p.addr(),
                p.last(),
                p.addr().wrapping_sub(1),
                p.last().wrapping_add(1),
            ]);
        }
        let mut out = vec![None; addrs.len()];
        t.lookup_batch(&addrs, &mut out);
        for (a, o) in addrs.iter().zip(&out) {
            assert_eq!(t.lookup(*a), r.lookup(*a), "{a:x}");
            assert_eq!(t.lookup_route(*a), r.lookup_prefix(*a), "{a:x}");
            assert_eq!(*o, r.lookup(*a), "{a:x}");
        }
        let _ = ReferenceFib4::new();
    }
}
