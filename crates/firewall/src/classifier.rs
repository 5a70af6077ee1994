//! The compiled classifier for one chain and one address family.
//!
//! Design (recursive flow classification with a memory bound):
//!
//! 1. **Per-field equivalence classes.** For each of the nine fields the
//!    value space is cut into elementary intervals at every rule boundary;
//!    two values are in the same class when exactly the same rules match
//!    them on that field. A packet's class comes from a direct table
//!    (ports, protocol, flags / ICMP type, ct state, interfaces) or from a
//!    range trie (addresses: a 16-bit root stride, 8-bit for the smallest
//!    sets, then 8-bit strides, stopping as soon as a chunk lies in one
//!    interval).
//! 2. **Cross-producting.** Classes of several fields are combined pairwise
//!    through precomputed tables (`class_ab = table[class_a * n_b + class_b]`)
//!    into a "rest" class (ports, protocol, flags, ct, interfaces) and an
//!    "address" class (source × destination); a last table maps
//!    (address, rest) to the outcome: the first matching terminal rule and
//!    the counting rules matched before it.
//! 3. **Bit vectors when the products do not fit.** Cross-product tables
//!    grow with the product of class counts; when one would exceed the
//!    table budget, the rules instead get per-class rule bit vectors on
//!    source, destination and the rest class, whose intersection's first
//!    set bit is the first matching rule (see [`CompileOptions`] for the
//!    trade between the two).
//!
//! A classifier in which no field has two classes answers every packet
//! alike: that answer is taken once, at compile time.
//!
//! Every stage runs over a whole chunk of packets (field by field, step by
//! step, trie level by trie level) so the loads of different packets
//! overlap.

use crate::key::{ClassifyKey, PacketKey};
use crate::rules::{FIELD_COUNT, Family, Field, Intervals, contains};
use std::collections::HashMap;

/// A rule reduced to what the classifier needs: one interval set per field
/// (`None` = any value), whether it ends classification, and its id in the
/// rule set's counter space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatRule {
    pub fields: [Option<Intervals>; FIELD_COUNT],
    pub terminal: bool,
    pub id: u32,
}

impl FlatRule {
    /// Whether the rule matches the packet (the reference definition).
    pub fn matches(&self, key: &PacketKey) -> bool {
        Field::ALL.iter().all(|&f| match &self.fields[f as usize] {
            None => true,
            Some(iv) => contains(iv, key.value(f)),
        })
    }
}

/// Outcome of a lookup: terminal rule id (or [`NO_RULE`]) and the counting
/// rules matched before it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Outcome {
    pub rule: u32,
    pub counted: Vec<u32>,
}

/// No terminal rule matched: the chain policy applies.
pub const NO_RULE: u32 = u32::MAX;

/// Tuning of the compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileOptions {
    /// Upper bound on the entries of one cross-product table (and twice
    /// it on all of them); rule lists whose tables would not fit use the
    /// bit-vector stage.
    pub table_budget: usize,
}

impl Default for CompileOptions {
    /// 4 Mi entries (16 MiB a table, 32 MiB in all): enough for the cross
    /// products over the benchmark's 10,000 generated rules, which run in
    /// about half the per-packet time of the bit-vector stage a 256 Ki
    /// budget left them to (12 MiB of tables against 4.5 MiB).
    fn default() -> Self {
        CompileOptions {
            table_budget: 1 << 22,
        }
    }
}

/// Bit-vector words a compilation may combine (table entries times words
/// per rule bit vector), about a second of work: larger rule lists get a
/// proportionally smaller table budget rather than a long compile that
/// would end in the bit-vector stage anyway.
const COMBINE_WORK: usize = (1 << 22) * 320;
/// Upper bound on the entries of one range trie.
const TRIE_BUDGET: usize = 1 << 27;

/// Address tries with more interval starts than this get a 16-bit root.
/// A packet whose /8 holds a start reads one level fewer under a 16-bit
/// root: with forty prefixes of /17 to /24, two levels instead of three.
/// The 16-bit root's 256 KiB are mostly untouched (a lookup reads one
/// line of it); up to this many starts the 1 KiB root is kept.
const ROOT16_STARTS: usize = 64;

/// Why compilation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("the {0} address trie would exceed {TRIE_BUDGET} entries")]
    TrieTooLarge(&'static str),
}

/// A fast hash for bit vectors (multiply-rotate per word); the compiler
/// hashes millions of them, and they are not attacker-chosen.
#[derive(Default, Clone, Copy)]
struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<WordHasher>>;

/// A set of bit vectors (one per class) over `words` 64-bit words, deduplicated.
struct Classes {
    words: usize,
    data: Vec<u64>,
    index: FastMap<Box<[u64]>, u32>,
}

impl Classes {
    fn new(words: usize) -> Self {
        Classes {
            words,
            data: Vec::new(),
            index: FastMap::default(),
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn get(&self, i: usize) -> &[u64] {
        &self.data[i * self.words..(i + 1) * self.words]
    }

    fn intern(&mut self, bits: &[u64]) -> u32 {
        if let Some(&id) = self.index.get(bits) {
            return id;
        }
        let id = self.index.len() as u32;
        self.data.extend_from_slice(bits);
        self.index.insert(bits.into(), id);
        id
    }
}

/// How one field's value becomes its global class.
#[derive(Debug)]
enum FieldLookup {
    /// One class: the field is not looked at.
    Const,
    /// `table[min(value, len - 1)]` (ports, protocol, flags, ct,
    /// interfaces: at most 65,536 classes, so 16-bit entries).
    Direct(Box<[u16]>),
    /// Addresses.
    Trie(RangeTrie),
}

const LEAF: u32 = 1 << 31;

/// A multibit trie over a 32- or 128-bit value space mapping each value to the
/// class of the elementary interval holding it. Entries are `LEAF | class`
/// or the offset of a 256-entry child node.
#[derive(Debug)]
struct RangeTrie {
    width: u32,
    /// 16 bits for all but the smallest sets (one level fewer for every
    /// packet whose /8 holds a start), 8 for those (a root of 1 KiB).
    root_stride: u32,
    nodes: Vec<u32>,
}

impl RangeTrie {
    fn build(
        width: u32,
        starts: &[u128],
        class_of: &[u32],
        name: &'static str,
    ) -> Result<Self, CompileError> {
        let root_stride = if starts.len() > ROOT16_STARTS { 16 } else { 8 };
        let mut t = RangeTrie {
            width,
            root_stride,
            nodes: Vec::new(),
        };
        t.node(0, width - root_stride, root_stride, starts, class_of, name)?;
        Ok(t)
    }

    fn node(
        &mut self,
        base: u128,
        low_bits: u32,
        stride: u32,
        starts: &[u128],
        class_of: &[u32],
        name: &'static str,
    ) -> Result<u32, CompileError> {
        let off = self.nodes.len();
        if off + (1 << stride) > TRIE_BUDGET {
            return Err(CompileError::TrieTooLarge(name));
        }
        self.nodes.resize(off + (1 << stride), 0);
        let span_minus_one = if low_bits == 0 {
            0
        } else {
            (1u128 << low_bits) - 1
        };
        // Index of the elementary interval holding the chunk's first value.
        let mut idx = starts.partition_point(|&s| s <= base) - 1;
        for c in 0..(1u128 << stride) {
            let lo = base + (c << low_bits);
            let hi = lo + span_minus_one;
            while idx + 1 < starts.len() && starts[idx + 1] <= lo {
                idx += 1;
            }
            let mixed = idx + 1 < starts.len() && starts[idx + 1] <= hi;
            let entry = if mixed {
                self.node(lo, low_bits - 8, 8, starts, class_of, name)?
            } else {
                LEAF | class_of[idx]
            };
            self.nodes[off + c as usize] = entry;
        }
        Ok(off as u32)
    }
}

impl FieldLookup {
    fn bytes(&self) -> usize {
        match self {
            FieldLookup::Const => 0,
            FieldLookup::Direct(t) => t.len() * 2,
            FieldLookup::Trie(t) => t.nodes.len() * 4,
        }
    }
}

/// Phase 1 for one field over a chunk, specialised per lookup kind and
/// per field so the inner loop has no dispatch.
#[inline(always)]
fn fill(lookup: &FieldLookup, out: &mut [u32; CHUNK], n: usize, value: impl Fn(usize) -> u128) {
    match lookup {
        FieldLookup::Const => {}
        FieldLookup::Direct(t) => {
            // Values past the table share its last class.
            let Some(last) = t.len().checked_sub(1) else {
                return;
            };
            for (i, o) in out.iter_mut().enumerate().take(n) {
                *o = u32::from(t[(value(i) as usize).min(last)]);
            }
        }
        FieldLookup::Trie(t) if t.width == 32 => {
            let mut v = [0u32; CHUNK];
            t.lookup_levels(
                out,
                n,
                &mut v,
                |i| value(i) as u32,
                |x, s| (x >> s) as usize,
            );
        }
        FieldLookup::Trie(t) => {
            let mut v = [0u128; CHUNK];
            t.lookup_levels(out, n, &mut v, value, |x, s| (x >> s) as usize);
        }
    }
}

impl RangeTrie {
    /// The class of each packet's value over a chunk, one trie level at a
    /// time: every packet still on an inner node reads its next entry in
    /// the same pass, so their cache misses overlap instead of each
    /// packet's walk running to its leaf (a depth that varies from packet
    /// to packet) before the next starts. The packets still walking are
    /// kept packed at the front of a list, so a level reads only theirs:
    /// the deepest packet of a chunk no longer costs every other packet a
    /// pass. Each packet is written to the list and the count advanced by
    /// whether it goes on, so the packing takes no branch. The root pass
    /// keeps each packet's value (`value(i)`) in `v` for the levels below;
    /// `bits(x, shift)` is value `x` shifted right by `shift`.
    #[inline(always)]
    fn lookup_levels<T: Copy>(
        &self,
        out: &mut [u32; CHUNK],
        n: usize,
        v: &mut [T; CHUNK],
        value: impl Fn(usize) -> T,
        bits: impl Fn(T, u32) -> usize,
    ) {
        let root_mask = (1usize << self.root_stride) - 1;
        // The root as a slice of its own (the build always makes it
        // whole): an index masked to its length needs no bounds check.
        let root = &self.nodes[..=root_mask];
        let mut shift = self.width - self.root_stride;
        let mut walking = [0u8; CHUNK];
        let mut m = 0;
        for i in 0..n.min(CHUNK) {
            let x = value(i);
            v[i] = x;
            let e = root[bits(x, shift) & root_mask];
            out[i] = e;
            walking[m % CHUNK] = i as u8;
            m += usize::from(e & LEAF == 0);
        }
        while m > 0 {
            shift = shift.saturating_sub(8);
            let mut still = 0;
            for k in 0..m.min(CHUNK) {
                let i = usize::from(walking[k]) % CHUNK;
                let next = self.nodes[out[i] as usize + (bits(v[i], shift) & 0xff)];
                out[i] = next;
                walking[still % CHUNK] = i as u8;
                still += usize::from(next & LEAF == 0);
            }
            m = still;
        }
        for o in out.iter_mut().take(n) {
            *o &= !LEAF;
        }
    }
}

/// One cross-product step: `acc = table[acc * n + class(field)]`.
#[derive(Debug)]
struct Step {
    field: usize,
    n: u32,
    table: Box<[u32]>,
    /// A chain's first step (`acc` is 0) whose table maps each class of
    /// its field to itself, as it usually does: the chain starts from the
    /// field's classes without reading it.
    starts_at_field: bool,
}

/// Whether a chain's first step (`acc` is 0) maps each class of its field
/// to itself.
fn maps_to_itself(table: &[u32]) -> bool {
    table.iter().enumerate().all(|(i, &v)| v as usize == i)
}

/// Folds each packet's classes through a chain of cross-product steps,
/// step by step over the chunk (the reads of different packets overlap):
/// the chain's combined class of each of the first `n` packets.
#[inline(always)]
fn fold_steps(steps: &[Step], cls: &[[u32; CHUNK]; FIELD_COUNT], n: usize) -> [u32; CHUNK] {
    let mut acc = [0u32; CHUNK];
    let mut steps = steps;
    if let Some((first, rest)) = steps.split_first()
        && first.starts_at_field
    {
        acc = cls[first.field];
        steps = rest;
    }
    for s in steps {
        let (table, width) = (&*s.table, s.n);
        for (a, &ci) in acc.iter_mut().zip(&cls[s.field]).take(n) {
            *a = table[(*a * width + ci) as usize];
        }
    }
    acc
}

/// A contiguous run of rules with its own cross-product tables.
#[derive(Debug)]
enum Group {
    Rfc {
        /// Global class → group class per field (empty for inactive fields).
        remap: [Box<[u32]>; FIELD_COUNT],
        rest: Vec<Step>,
        addr: Vec<Step>,
        n_rest: u32,
        /// `outcome = last[addr * n_rest + rest]`.
        last: LastTable,
    },
    /// For rule sets whose cross products would not fit: the packet's
    /// class on a few dimensions (source, destination, and the rest fields
    /// cross-producted) selects one rule bit vector per dimension; the
    /// first set bit of their intersection is the first matching rule.
    /// Aggregate vectors (one bit per 64-rule word) skip empty words
    /// (the aggregated bit-vector scheme of Baboescu and Varghese).
    BitVector {
        dims: Vec<BvDim>,
        words: usize,
        agg_words: usize,
        /// Local rule index → terminal? and global id.
        terminal: Box<[u64]>,
        ids: Box<[u32]>,
    },
}

/// The last cross-product table's outcome ids, in 16 bits when they fit
/// (the usual case: it is the largest table, read once per packet, and
/// half the bytes keep more of it in cache).
#[derive(Debug)]
enum LastTable {
    Narrow(Box<[u16]>),
    Wide(Box<[u32]>),
}

impl LastTable {
    fn new(ids: Vec<u32>) -> Self {
        if ids.iter().all(|&o| o <= u32::from(u16::MAX)) {
            LastTable::Narrow(ids.iter().map(|&o| o as u16).collect())
        } else {
            LastTable::Wide(ids.into_boxed_slice())
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            LastTable::Narrow(t) => t.len(),
            LastTable::Wide(t) => t.len(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            LastTable::Narrow(t) => t.len() * 2,
            LastTable::Wide(t) => t.len() * 4,
        }
    }

    /// Outcome ids at `at[..n]` into `out`.
    #[inline(always)]
    fn gather(&self, at: &[u32; CHUNK], n: usize, out: &mut [u32; CHUNK]) {
        match self {
            LastTable::Narrow(t) => {
                for (o, &x) in out.iter_mut().zip(at).take(n) {
                    *o = u32::from(t[x as usize]);
                }
            }
            LastTable::Wide(t) => {
                for (o, &x) in out.iter_mut().zip(at).take(n) {
                    *o = t[x as usize];
                }
            }
        }
    }

    fn to_u32(&self) -> std::borrow::Cow<'_, [u32]> {
        match self {
            LastTable::Narrow(t) => t.iter().map(|&o| u32::from(o)).collect(),
            LastTable::Wide(t) => std::borrow::Cow::Borrowed(t),
        }
    }
}

/// One dimension of the bit-vector stage.
#[derive(Debug)]
struct BvDim {
    /// `Some(field)`: the class is the field's global class; `None`: the
    /// class comes from running `steps` (a cross-product chain).
    field: Option<usize>,
    steps: Vec<Step>,
    /// `classes × words` rule bits.
    bits: Box<[u64]>,
    /// `classes × agg_words`: bit `w` set when word `w` of `bits` is non-zero.
    agg: Box<[u64]>,
}

/// Figures about a compiled classifier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassifierStats {
    pub rules: usize,
    pub groups: usize,
    /// Whether the bit-vector stage is used (cross products too large).
    pub bit_vector: bool,
    pub field_classes: [usize; FIELD_COUNT],
    pub bytes: usize,
}

/// Compiled rules of one chain and family.
#[derive(Debug)]
pub struct Classifier {
    fields: [FieldLookup; FIELD_COUNT],
    /// Fields with more than one class, looked up per packet.
    active: Vec<usize>,
    groups: Vec<Group>,
    outcomes: Vec<Outcome>,
    /// Each outcome's terminal rule, read alone when no outcome counts.
    outcome_rules: Box<[u32]>,
    /// Whether some outcome holds counting rules.
    counting: bool,
    /// Outcome of a group that matched nothing.
    empty_outcome: u32,
    /// The answer to every packet when no field is active (no rule of
    /// this chain and family tells two packets apart).
    constant: Option<Outcome>,
    stats: ClassifierStats,
}

/// A classifier's tables ([`Classifier::export`]). Per packet: each
/// field's global class (`fields`), then for each chain of `rest` and
/// `addr`: `acc = step.table[acc * step.n + remap[step.field][class]]`
/// from `acc = 0`; then `outcome = last[addr_acc * n_rest + rest_acc]`.
#[derive(Debug)]
pub struct ClassifierExport<'a> {
    /// Per field, how a value becomes its global class.
    pub fields: [FieldExport<'a>; FIELD_COUNT],
    /// Per field, global class -> group class.
    pub remap: [&'a [u32]; FIELD_COUNT],
    /// The cross-product chain over the non-address fields.
    pub rest: Vec<StepExport<'a>>,
    /// The chain over source and destination.
    pub addr: Vec<StepExport<'a>>,
    /// Classes of the `rest` chain.
    pub n_rest: u32,
    /// (address class, rest class) -> outcome id.
    pub last: std::borrow::Cow<'a, [u32]>,
    /// Outcomes by id.
    pub outcomes: &'a [Outcome],
    /// The outcome "no rule matched".
    pub empty_outcome: u32,
}

/// How one field's value becomes its class.
#[derive(Debug)]
pub enum FieldExport<'a> {
    /// One class (0): the field is not looked at.
    Const,
    /// `table[min(value, len - 1)]`.
    Direct(&'a [u16]),
    /// A range trie: entry `(v >> (width - root_stride)) & (2^root_stride - 1)`
    /// of the root, then while an entry lacks bit 31 it is the offset of a
    /// 256-entry node indexed by the next 8 bits (the shift saturating at
    /// 0); an entry with bit 31 is `LEAF | class`.
    Trie {
        /// 32 or 128.
        width: u32,
        /// 8 or 16.
        root_stride: u32,
        /// All nodes, the root first.
        nodes: &'a [u32],
    },
}

/// One cross-product step.
#[derive(Debug)]
pub struct StepExport<'a> {
    /// The field folded in.
    pub field: usize,
    /// Its group classes.
    pub n: u32,
    /// `acc * n + class` -> new acc.
    pub table: &'a [u32],
}

/// Largest packet batch handled in one pass of phase 1.
pub const CHUNK: usize = 64;

struct OutcomeTable {
    list: Vec<Outcome>,
    index: HashMap<Outcome, u32>,
}

impl OutcomeTable {
    fn intern(&mut self, o: Outcome) -> u32 {
        if let Some(&i) = self.index.get(&o) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(o.clone());
        self.index.insert(o, i);
        i
    }
}

fn words_for(n: usize) -> usize {
    n.div_ceil(64).max(1)
}

fn set_bit(bits: &mut [u64], i: usize) {
    bits[i / 64] |= 1 << (i % 64);
}

fn clear_bit(bits: &mut [u64], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}

/// Elementary intervals of one field: their starts, their class, and the classes.
fn field_classes(
    rules: &[FlatRule],
    f: Field,
    max: u128,
    mask: &[u64],
) -> (Vec<u128>, Vec<u32>, Classes) {
    let words = words_for(rules.len());
    let mut cur = vec![0u64; words];
    let mut scratch = vec![0u64; words];
    let mut intern = |classes: &mut Classes, cur: &[u64]| {
        scratch.copy_from_slice(cur);
        truncate(&mut scratch, mask);
        classes.intern(&scratch)
    };
    let mut events: Vec<(u128, bool, usize)> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        match &r.fields[f as usize] {
            None => set_bit(&mut cur, i),
            Some(iv) => {
                for &(lo, hi) in iv {
                    let hi = hi.min(max);
                    if lo > hi {
                        continue;
                    }
                    events.push((lo, true, i));
                    if hi < max {
                        events.push((hi + 1, false, i));
                    }
                }
            }
        }
    }
    events.sort_unstable();
    let mut classes = Classes::new(words);
    let mut starts = Vec::new();
    let mut class_of = Vec::new();
    let mut k = 0;
    if events.first().is_none_or(|e| e.0 > 0) {
        starts.push(0);
        class_of.push(intern(&mut classes, &cur));
    }
    while k < events.len() {
        let p = events[k].0;
        while k < events.len() && events[k].0 == p {
            let (_, add, i) = events[k];
            if add {
                set_bit(&mut cur, i);
            } else {
                clear_bit(&mut cur, i);
            }
            k += 1;
        }
        let c = intern(&mut classes, &cur);
        if class_of.last() == Some(&c) {
            continue;
        }
        starts.push(p);
        class_of.push(c);
    }
    (starts, class_of, classes)
}

/// Clears every bit after the first bit set in both `bits` and `mask`.
///
/// `mask` holds the terminal rules that match every packet on all fields
/// not yet folded into `bits`: once such a rule is in a class, every packet
/// of the class matches it, so no later rule can decide (or be counted).
/// Dropping those bits merges classes that differ only there.
fn truncate(bits: &mut [u64], mask: &[u64]) {
    let Some(w) = bits.iter().zip(mask).position(|(b, m)| b & m != 0) else {
        return;
    };
    let first = (bits[w] & mask[w]).trailing_zeros();
    bits[w] &= if first == 63 {
        !0
    } else {
        (1u64 << (first + 1)) - 1
    };
    bits[w + 1..].fill(0);
}

/// Rules that match every value of `f`.
fn matches_all(rules: &[FlatRule], f: Field, max: u128) -> Vec<u64> {
    let mut bits = vec![0u64; words_for(rules.len())];
    for (i, r) in rules.iter().enumerate() {
        let all = match &r.fields[f as usize] {
            None => true,
            Some(iv) => iv.first().is_some_and(|&(lo, hi)| lo == 0 && hi >= max),
        };
        if all {
            set_bit(&mut bits, i);
        }
    }
    bits
}

/// Truncation masks: terminal rules matching everything outside a field set.
struct Masks {
    terminal: Vec<u64>,
    all: Vec<Vec<u64>>,
}

impl Masks {
    /// The mask for classes that already fold in `inside`, over rules `[from, to)`.
    fn excluding(&self, inside: &[Field], from: usize, to: usize) -> Vec<u64> {
        let mut m = self.terminal.clone();
        for f in Field::ALL {
            if !inside.contains(&f) {
                for (x, a) in m.iter_mut().zip(&self.all[f as usize]) {
                    *x &= a;
                }
            }
        }
        if from == 0 && to >= m.len() * 64 {
            return m;
        }
        let mut out = vec![0u64; words_for(to - from)];
        slice_bits(&m, from, to, &mut out);
        out
    }
}

/// Copies bits `[from, to)` of `src` into the start of `dst`.
fn slice_bits(src: &[u64], from: usize, to: usize, dst: &mut [u64]) {
    dst.fill(0);
    for i in from..to {
        if src[i / 64] >> (i % 64) & 1 == 1 {
            let j = i - from;
            dst[j / 64] |= 1 << (j % 64);
        }
    }
}

struct TooBig;

/// Combines two class sets into their cross product.
fn combine(
    a: &Classes,
    b: &Classes,
    budget: usize,
    mask: &[u64],
) -> Result<(Box<[u32]>, Classes), TooBig> {
    let n = a.len().checked_mul(b.len()).ok_or(TooBig)?;
    if n > budget {
        return Err(TooBig);
    }
    let words = a.words;
    let mut out = Classes::new(words);
    let mut table = vec![0u32; n];
    let mut scratch = vec![0u64; words];
    for i in 0..a.len() {
        let ai = a.get(i);
        for j in 0..b.len() {
            let bj = b.get(j);
            for w in 0..words {
                scratch[w] = ai[w] & bj[w];
            }
            truncate(&mut scratch, mask);
            table[i * b.len() + j] = out.intern(&scratch);
        }
    }
    Ok((table.into_boxed_slice(), out))
}

impl Classifier {
    /// Compiles rules (in priority order) for one address family.
    pub fn build(
        rules: &[FlatRule],
        family: Family,
        opts: &CompileOptions,
    ) -> Result<Self, CompileError> {
        let mut per_field: Vec<(Vec<u128>, Vec<u32>, Classes)> = Vec::with_capacity(FIELD_COUNT);
        let mut fields: Vec<FieldLookup> = Vec::with_capacity(FIELD_COUNT);
        let mut stats = ClassifierStats {
            rules: rules.len(),
            ..ClassifierStats::default()
        };
        let mut terminal = vec![0u64; words_for(rules.len())];
        for (i, r) in rules.iter().enumerate() {
            if r.terminal {
                set_bit(&mut terminal, i);
            }
        }
        let masks = Masks {
            terminal,
            all: Field::ALL
                .iter()
                .map(|&f| matches_all(rules, f, f.max_value(family)))
                .collect(),
        };
        for f in Field::ALL {
            let max = f.max_value(family);
            let mask = masks.excluding(&[f], 0, rules.len());
            let (starts, class_of, classes) = field_classes(rules, f, max, &mask);
            stats.field_classes[f as usize] = classes.len();
            let lookup = if classes.len() <= 1 {
                FieldLookup::Const
            } else if matches!(f, Field::Src | Field::Dst) {
                let name = if f == Field::Src {
                    "source"
                } else {
                    "destination"
                };
                FieldLookup::Trie(RangeTrie::build(family.bits(), &starts, &class_of, name)?)
            } else {
                let len = (*starts.last().unwrap_or(&0) as usize) + 1;
                let mut t = vec![0u16; len];
                for (k, &s) in starts.iter().enumerate() {
                    let end = starts.get(k + 1).map_or(len, |&e| e as usize);
                    // At most 65,536 intervals in a 16-bit field: ids fit.
                    t[s as usize..end].fill(class_of[k] as u16);
                }
                FieldLookup::Direct(t.into_boxed_slice())
            };
            fields.push(lookup);
            per_field.push((starts, class_of, classes));
        }
        let active: Vec<usize> = (0..FIELD_COUNT)
            .filter(|&f| !matches!(fields[f], FieldLookup::Const))
            .collect();
        let mut outcomes = OutcomeTable {
            list: Vec::new(),
            index: HashMap::new(),
        };
        let empty_outcome = outcomes.intern(Outcome {
            rule: NO_RULE,
            counted: Vec::new(),
        });
        let global: Vec<&Classes> = per_field.iter().map(|p| &p.2).collect();
        let budget = opts
            .table_budget
            .min(COMBINE_WORK / words_for(rules.len()))
            .max(1);
        let group = match build_group(
            rules,
            0,
            rules.len(),
            &global,
            budget,
            &masks,
            &mut outcomes,
        ) {
            Ok(g) => g,
            Err(TooBig) => build_bit_vector(rules, &global, budget, &masks),
        };
        // One group over every rule: its classes are the global ones, which
        // the lookup relies on (it skips `remap`).
        if let Group::Rfc { remap, .. } = &group {
            debug_assert!(
                remap
                    .iter()
                    .all(|r| r.iter().enumerate().all(|(i, &c)| c == i as u32)),
                "a group over every rule keeps the global classes"
            );
        }
        let groups = vec![group];
        let fields: [FieldLookup; FIELD_COUNT] = fields
            .try_into()
            .unwrap_or_else(|_| unreachable!("one lookup per field"));
        stats.groups = groups.len();
        stats.bit_vector = groups.iter().any(|g| matches!(g, Group::BitVector { .. }));
        stats.bytes = fields.iter().map(FieldLookup::bytes).sum::<usize>()
            + groups.iter().map(group_bytes).sum::<usize>();
        let mut c = Classifier {
            fields,
            active,
            groups,
            outcome_rules: outcomes.list.iter().map(|o| o.rule).collect(),
            counting: outcomes.list.iter().any(|o| !o.counted.is_empty()),
            outcomes: outcomes.list,
            empty_outcome,
            constant: None,
            stats,
        };
        if c.active.is_empty() {
            // Every packet has the same classes, so the same answer: take
            // it once from the tables (the lookup reads no field of the key).
            let mut rule = [NO_RULE; CHUNK];
            let mut counted = Vec::new();
            c.classify_chunk(&[PacketKey::default()], &mut rule, |id, _| counted.push(id));
            c.constant = Some(Outcome {
                rule: rule[0],
                counted,
            });
        }
        Ok(c)
    }

    /// The compiled tables as they are, for engines that classify
    /// elsewhere (the XDP engine copies them into BPF maps). `None` when
    /// the classifier uses the bit-vector stage, which is not exported.
    pub fn export(&self) -> Option<ClassifierExport<'_>> {
        let [
            Group::Rfc {
                remap,
                rest,
                addr,
                n_rest,
                last,
            },
        ] = self.groups.as_slice()
        else {
            return None;
        };
        let fields = std::array::from_fn(|f| match &self.fields[f] {
            FieldLookup::Const => FieldExport::Const,
            FieldLookup::Direct(t) => FieldExport::Direct(t),
            FieldLookup::Trie(t) => FieldExport::Trie {
                width: t.width,
                root_stride: t.root_stride,
                nodes: &t.nodes,
            },
        });
        fn steps(v: &[Step]) -> Vec<StepExport<'_>> {
            v.iter()
                .map(|s| StepExport {
                    field: s.field,
                    n: s.n,
                    table: &s.table,
                })
                .collect()
        }
        Some(ClassifierExport {
            fields,
            remap: std::array::from_fn(|f| &remap[f][..]),
            rest: steps(rest),
            addr: steps(addr),
            n_rest: *n_rest,
            last: last.to_u32(),
            outcomes: &self.outcomes,
            empty_outcome: self.empty_outcome,
        })
    }

    /// Figures about the compiled structure.
    pub fn stats(&self) -> ClassifierStats {
        self.stats
    }

    /// The outcome with this id.
    #[inline]
    pub fn outcome(&self, id: u32) -> &Outcome {
        &self.outcomes[id as usize]
    }

    /// The outcome of every packet when no field is active, if so.
    #[inline]
    pub fn constant(&self) -> Option<&Outcome> {
        self.constant.as_ref()
    }

    /// Classifies each of `keys` (at most [`CHUNK`]; the rest are left
    /// alone), writing the terminal rule id (or [`NO_RULE`]) to
    /// `rule_out[i]` and calling `count(rule id, key)` for every counting
    /// rule the packet matched before it. The keys are contiguous so that
    /// each field's pass reads them in order, with no index between.
    #[inline]
    pub fn classify_chunk<K: ClassifyKey>(
        &self,
        keys: &[K],
        rule_out: &mut [u32],
        mut count: impl FnMut(u32, &K),
    ) {
        let n = keys.len().min(CHUNK).min(rule_out.len());
        let keys = &keys[..n];
        if let Some(c) = &self.constant {
            for (k, r) in keys.iter().zip(rule_out.iter_mut()) {
                *r = c.rule;
                for &id in &c.counted {
                    count(id, k);
                }
            }
            return;
        }
        let mut cls = [[0u32; CHUNK]; FIELD_COUNT];
        // Phase 1, batched: field by field over the chunk.
        for &f in &self.active {
            let out = &mut cls[f];
            let lookup = &self.fields[f];
            let keys_at = |i: usize| &keys[i];
            match Field::ALL[f] {
                Field::Src => fill(lookup, out, n, |i| keys_at(i).value(Field::Src)),
                Field::Dst => fill(lookup, out, n, |i| keys_at(i).value(Field::Dst)),
                Field::Sport => fill(lookup, out, n, |i| keys_at(i).value(Field::Sport)),
                Field::Dport => fill(lookup, out, n, |i| keys_at(i).value(Field::Dport)),
                Field::Proto => fill(lookup, out, n, |i| keys_at(i).value(Field::Proto)),
                Field::Aux => fill(lookup, out, n, |i| keys_at(i).value(Field::Aux)),
                Field::Ct => fill(lookup, out, n, |i| keys_at(i).value(Field::Ct)),
                Field::Iif => fill(lookup, out, n, |i| keys_at(i).value(Field::Iif)),
                Field::Oif => fill(lookup, out, n, |i| keys_at(i).value(Field::Oif)),
            }
        }
        // Phases 2 and 3, still stage by stage over the chunk so the table
        // reads of different packets overlap.
        let mut rule = [NO_RULE; CHUNK];
        for (gi, g) in self.groups.iter().enumerate() {
            match g {
                Group::Rfc {
                    rest,
                    addr,
                    n_rest,
                    last,
                    ..
                } => {
                    // The group holds every rule, so its classes are the
                    // global ones (`remap` is the identity; see `build`).
                    // The address chain first: its table is the large one,
                    // and the rest chain's small tables keep the core busy
                    // while the address reads are still out.
                    let mut at = fold_steps(addr, &cls, n);
                    let r = fold_steps(rest, &cls, n);
                    for (x, &ri) in at.iter_mut().zip(&r).take(n) {
                        *x = *x * n_rest + ri;
                    }
                    let mut outcome = [0u32; CHUNK];
                    last.gather(&at, n, &mut outcome);
                    if gi == 0 && !self.counting {
                        // Nothing decided yet and nothing to count: each
                        // outcome's rule is the answer (the empty outcome's
                        // is NO_RULE).
                        for (r, &o) in rule.iter_mut().zip(&outcome).take(n) {
                            *r = self.outcome_rules[o as usize];
                        }
                        continue;
                    }
                    for i in 0..n {
                        if rule[i] != NO_RULE {
                            continue;
                        }
                        let o = outcome[i];
                        if o == self.empty_outcome {
                            continue;
                        }
                        let out = &self.outcomes[o as usize];
                        let key = &keys[i];
                        for &c in &out.counted {
                            count(c, key);
                        }
                        rule[i] = out.rule;
                    }
                }
                Group::BitVector {
                    dims,
                    words,
                    agg_words,
                    terminal,
                    ids,
                } => {
                    let dims_n = dims.len().min(FIELD_COUNT);
                    let mut dcls = [[0u32; CHUNK]; FIELD_COUNT];
                    for (d, dim) in dims.iter().enumerate().take(dims_n) {
                        match dim.field {
                            Some(f) => dcls[d] = cls[f],
                            None => dcls[d] = fold_steps(&dim.steps, &cls, n),
                        }
                    }
                    // The first aggregate word and the first candidate word of
                    // every packet, batched: most scans end there.
                    let mut a0 = [0u64; CHUNK];
                    let mut x0 = [0u64; CHUNK];
                    for i in 0..n {
                        let mut a = !0u64;
                        for d in 0..dims_n {
                            a &= dims[d].agg[dcls[d][i] as usize * agg_words];
                        }
                        a0[i] = a;
                    }
                    for i in 0..n {
                        if a0[i] != 0 {
                            let w = a0[i].trailing_zeros() as usize;
                            let mut x = !0u64;
                            for d in 0..dims_n {
                                x &= dims[d].bits[dcls[d][i] as usize * words + w];
                            }
                            x0[i] = x;
                        }
                    }
                    for i in 0..n {
                        if rule[i] != NO_RULE {
                            continue;
                        }
                        let key = &keys[i];
                        'scan: for aw in 0..*agg_words {
                            let mut a = a0[i];
                            if aw > 0 {
                                a = !0u64;
                                for d in 0..dims_n {
                                    a &= dims[d].agg[dcls[d][i] as usize * agg_words + aw];
                                }
                            }
                            let mut first = aw == 0;
                            while a != 0 {
                                let w = aw * 64 + a.trailing_zeros() as usize;
                                a &= a - 1;
                                let mut x = x0[i];
                                if !first {
                                    x = !0u64;
                                    for d in 0..dims_n {
                                        x &= dims[d].bits[dcls[d][i] as usize * words + w];
                                    }
                                }
                                first = false;
                                while x != 0 {
                                    let r = w * 64 + x.trailing_zeros() as usize;
                                    x &= x - 1;
                                    if terminal[r / 64] >> (r % 64) & 1 == 1 {
                                        rule[i] = ids[r];
                                        break 'scan;
                                    }
                                    count(ids[r], key);
                                }
                            }
                        }
                    }
                }
            }
        }
        rule_out[..n].copy_from_slice(&rule[..n]);
    }
}

fn group_bytes(g: &Group) -> usize {
    match g {
        Group::Rfc {
            remap,
            rest,
            addr,
            last,
            ..
        } => {
            remap.iter().map(|r| r.len() * 4).sum::<usize>()
                + rest
                    .iter()
                    .chain(addr.iter())
                    .map(|s| s.table.len() * 4)
                    .sum::<usize>()
                + last.bytes()
        }
        Group::BitVector {
            dims,
            ids,
            terminal,
            ..
        } => {
            dims.iter()
                .map(|d| {
                    (d.bits.len() + d.agg.len()) * 8
                        + d.steps.iter().map(|s| s.table.len() * 4).sum::<usize>()
                })
                .sum::<usize>()
                + ids.len() * 4
                + terminal.len() * 8
        }
    }
}

const REST_FIELDS: [Field; 7] = [
    Field::Proto,
    Field::Aux,
    Field::Ct,
    Field::Iif,
    Field::Oif,
    Field::Sport,
    Field::Dport,
];
const ADDR_FIELDS: [Field; 2] = [Field::Src, Field::Dst];

fn build_group(
    rules: &[FlatRule],
    from: usize,
    to: usize,
    global: &[&Classes],
    budget: usize,
    masks: &Masks,
    outcomes: &mut OutcomeTable,
) -> Result<Group, TooBig> {
    let nbits = to - from;
    let words = words_for(nbits);
    let mut scratch = vec![0u64; words];
    // Group classes per field, and the remap from global classes.
    let mut local: Vec<Classes> = Vec::with_capacity(FIELD_COUNT);
    let mut remap: Vec<Box<[u32]>> = Vec::with_capacity(FIELD_COUNT);
    for g in global {
        let mut cl = Classes::new(words);
        let mut map = Vec::with_capacity(g.len());
        for c in 0..g.len() {
            slice_bits(g.get(c), from, to, &mut scratch);
            map.push(cl.intern(&scratch));
        }
        remap.push(map.into_boxed_slice());
        local.push(cl);
    }
    let (mut rest, rest_classes) = chain(&REST_FIELDS, &local, words, budget, masks, from, to)?;
    let (mut addr, addr_classes) = chain(&ADDR_FIELDS, &local, words, budget, masks, from, to)?;
    let n_rest = rest_classes.len();
    let n = addr_classes.len().checked_mul(n_rest).ok_or(TooBig)?;
    // Each table within the budget, and all of them within twice it: a
    // rule list whose products fill several tables takes the bit vectors'
    // memory instead.
    let entries = rest
        .iter()
        .chain(&addr)
        .map(|s| s.table.len())
        .sum::<usize>()
        + n;
    if n > budget || entries > budget.saturating_mul(2) {
        return Err(TooBig);
    }
    let group_rules = &rules[from..to];
    let mut terminal = vec![0u64; words];
    let mut any_count = false;
    for (i, r) in group_rules.iter().enumerate() {
        if r.terminal {
            set_bit(&mut terminal, i);
        } else {
            any_count = true;
        }
    }
    let mut last = vec![0u32; n];
    let mut memo: HashMap<u32, u32> = HashMap::new();
    for a in 0..addr_classes.len() {
        let ab = addr_classes.get(a);
        for r in 0..n_rest {
            let rb = rest_classes.get(r);
            for w in 0..words {
                scratch[w] = ab[w] & rb[w];
            }
            let first_terminal = scratch
                .iter()
                .zip(&terminal)
                .enumerate()
                .find(|(_, (s, t))| *s & *t != 0)
                .map(|(w, (s, t))| w * 64 + (s & t).trailing_zeros() as usize);
            let o = if !any_count {
                let key = first_terminal.map_or(NO_RULE, |i| i as u32);
                *memo.entry(key).or_insert_with(|| {
                    outcomes.intern(Outcome {
                        rule: first_terminal.map_or(NO_RULE, |i| group_rules[i].id),
                        counted: Vec::new(),
                    })
                })
            } else {
                let limit = first_terminal.unwrap_or(nbits);
                let counted = (0..limit)
                    .filter(|&i| scratch[i / 64] >> (i % 64) & 1 == 1)
                    .map(|i| group_rules[i].id)
                    .collect();
                outcomes.intern(Outcome {
                    rule: first_terminal.map_or(NO_RULE, |i| group_rules[i].id),
                    counted,
                })
            };
            last[a * n_rest + r] = o;
        }
    }
    let (last, n_rest) = merge_equal_lines(&last, addr_classes.len(), n_rest, &mut addr, &mut rest);
    let remap: [Box<[u32]>; FIELD_COUNT] = remap
        .try_into()
        .unwrap_or_else(|_| unreachable!("one remap per field"));
    Ok(Group::Rfc {
        remap,
        rest,
        addr,
        n_rest: n_rest as u32,
        last: LastTable::new(last),
    })
}

/// The last table with its equal rows merged, then its equal columns:
/// address classes are sets of matching rules, and two sets can share
/// every first match and count (the full table of the benchmark's 10,000
/// rules has 10,945 rows of which 2,119 differ), so one row serves both;
/// likewise for rest classes. The last step of `row_steps` (the address
/// chain) and of `col_steps` (the rest chain) is rewritten to answer the
/// merged classes. `last` is `rows` x `cols`, row by row; returns the new
/// table and its column count.
fn merge_equal_lines(
    last: &[u32],
    rows: usize,
    cols: usize,
    row_steps: &mut [Step],
    col_steps: &mut [Step],
) -> (Vec<u32>, usize) {
    // The first of each distinct line, and each line's merged index.
    fn distinct<T: std::hash::Hash + Eq>(lines: impl Iterator<Item = T>) -> (Vec<usize>, Vec<u32>) {
        let mut seen: HashMap<T, u32> = HashMap::new();
        let (mut kept, mut of) = (Vec::new(), Vec::new());
        for (i, line) in lines.enumerate() {
            let next = seen.len() as u32;
            let id = *seen.entry(line).or_insert(next);
            if id == next {
                kept.push(i);
            }
            of.push(id);
        }
        (kept, of)
    }
    let (kept_rows, row_of) = distinct(last.chunks(cols).take(rows));
    let (kept_cols, col_of) = distinct((0..cols).map(|c| {
        kept_rows
            .iter()
            .map(|&r| last[r * cols + c])
            .collect::<Vec<u32>>()
    }));
    // A chain without steps has one class, so nothing merged.
    for (steps, of) in [(row_steps, &row_of), (col_steps, &col_of)] {
        if let Some(step) = steps.last_mut() {
            for e in step.table.iter_mut() {
                *e = of[*e as usize];
            }
            // A chain of one step may no longer map classes to themselves.
            step.starts_at_field &= maps_to_itself(&step.table);
        }
    }
    let table = kept_rows
        .iter()
        .flat_map(|&r| kept_cols.iter().map(move |&c| last[r * cols + c]))
        .collect();
    (table, kept_cols.len())
}

/// Cross-products `fields` (in order) into one class set. Fields with a
/// single class fold into the starting vector.
#[allow(clippy::too_many_arguments)]
fn chain(
    fields: &[Field],
    local: &[Classes],
    words: usize,
    budget: usize,
    masks: &Masks,
    from: usize,
    to: usize,
) -> Result<(Vec<Step>, Classes), TooBig> {
    let mut start = vec![!0u64; words];
    let mut steps_fields = Vec::new();
    let mut inside = Vec::new();
    for &f in fields {
        let cl = &local[f as usize];
        if cl.len() == 1 {
            for (w, b) in start.iter_mut().zip(cl.get(0)) {
                *w &= b;
            }
            inside.push(f);
        } else {
            steps_fields.push(f);
        }
    }
    truncate(&mut start, &masks.excluding(&inside, from, to));
    let mut acc = Classes::new(words);
    acc.intern(&start);
    let mut steps = Vec::new();
    for f in steps_fields {
        let cl = &local[f as usize];
        inside.push(f);
        let mask = masks.excluding(&inside, from, to);
        let (table, next) = combine(&acc, cl, budget, &mask)?;
        let starts_at_field = steps.is_empty() && maps_to_itself(&table);
        steps.push(Step {
            field: f as usize,
            n: cl.len() as u32,
            table,
            starts_at_field,
        });
        acc = next;
    }
    Ok((steps, acc))
}

fn bv_dim(field: Option<usize>, steps: Vec<Step>, classes: &Classes, agg_words: usize) -> BvDim {
    let words = classes.words;
    let mut agg = vec![0u64; classes.len() * agg_words];
    for c in 0..classes.len() {
        for (w, &x) in classes.get(c).iter().enumerate() {
            if x != 0 {
                agg[c * agg_words + w / 64] |= 1 << (w % 64);
            }
        }
    }
    BvDim {
        field,
        steps,
        bits: classes.data[..classes.len() * words].into(),
        agg: agg.into_boxed_slice(),
    }
}

/// The bit-vector stage over all rules: source, destination and the rest
/// fields cross-producted (or, if even that is too large, each rest field
/// on its own).
fn build_bit_vector(
    rules: &[FlatRule],
    global: &[&Classes],
    budget: usize,
    masks: &Masks,
) -> Group {
    let n = rules.len();
    let words = words_for(n);
    let agg_words = words_for(words);
    let mut dims = Vec::new();
    // Single-class fields fold into this vector, applied to the first dimension.
    let mut constant = vec![!0u64; words];
    let fold = |f: Field, constant: &mut Vec<u64>| {
        for (w, b) in constant.iter_mut().zip(global[f as usize].get(0)) {
            *w &= b;
        }
    };
    for f in ADDR_FIELDS {
        if global[f as usize].len() > 1 {
            dims.push(bv_dim(
                Some(f as usize),
                Vec::new(),
                global[f as usize],
                agg_words,
            ));
        } else {
            fold(f, &mut constant);
        }
    }
    let owned: Vec<Classes> = global
        .iter()
        .map(|g| {
            let mut c = Classes::new(words);
            for i in 0..g.len() {
                c.intern(g.get(i));
            }
            c
        })
        .collect();
    match chain(&REST_FIELDS, &owned, words, budget, masks, 0, n) {
        Ok((steps, classes)) => dims.push(bv_dim(None, steps, &classes, agg_words)),
        Err(TooBig) => {
            for f in REST_FIELDS {
                if global[f as usize].len() > 1 {
                    dims.push(bv_dim(
                        Some(f as usize),
                        Vec::new(),
                        global[f as usize],
                        agg_words,
                    ));
                } else {
                    fold(f, &mut constant);
                }
            }
        }
    }
    if dims.is_empty() {
        let mut c = Classes::new(words);
        c.intern(&constant);
        dims.push(bv_dim(None, Vec::new(), &c, agg_words));
    } else {
        // Apply the folded fields to every class of the first dimension.
        let d = &mut dims[0];
        for (row, agg) in d.bits.chunks_mut(words).zip(d.agg.chunks_mut(agg_words)) {
            agg.fill(0);
            for (w, (x, c)) in row.iter_mut().zip(&constant).enumerate() {
                *x &= c;
                if *x != 0 {
                    agg[w / 64] |= 1 << (w % 64);
                }
            }
        }
    }
    let mut terminal = vec![0u64; words];
    for (i, r) in rules.iter().enumerate() {
        if r.terminal {
            set_bit(&mut terminal, i);
        }
    }
    Group::BitVector {
        dims,
        words,
        agg_words,
        terminal: terminal.into_boxed_slice(),
        ids: rules.iter().map(|r| r.id).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rulegen::SplitMix;

    /// The class of `v` by binary search over the elementary intervals.
    fn reference(starts: &[u128], class_of: &[u32], v: u128) -> u32 {
        class_of[starts.partition_point(|&s| s <= v) - 1]
    }

    /// Interval starts that send values down every depth of the trie:
    /// boundaries on /8, /16, /24 and host bits, some clustered so one
    /// root entry holds nodes several levels deep.
    fn starts(rng: &mut SplitMix, width: u32, n: usize) -> Vec<u128> {
        let top = |x: u64| {
            if width == 32 {
                (x >> 32) as u128
            } else {
                (x as u128) << 64
            }
        };
        let mut s = vec![0u128];
        let cluster = top(rng.next_u64());
        for i in 0..n {
            let r = rng.next_u64();
            let v = match i % 4 {
                0 => top(r) & !((1u128 << (width - 8)) - 1),
                1 => top(r) & !((1u128 << (width - 16)) - 1),
                2 => cluster ^ (r as u128 & 0xffff),
                _ => top(r),
            };
            s.push(v);
        }
        s.sort_unstable();
        s.dedup();
        s
    }

    #[test]
    fn the_level_walk_finds_each_values_interval() {
        let mut rng = SplitMix::new(7);
        for (width, n) in [(32, 40), (32, 3000), (128, 40), (128, 3000)] {
            let st = starts(&mut rng, width, n);
            let class_of: Vec<u32> = (0..st.len() as u32).map(|c| c * 3 + 1).collect();
            let trie = RangeTrie::build(width, &st, &class_of, "test").unwrap();
            // Both roots are walked: 8 bits for the small sets, 16 above
            // the threshold.
            let expect_root = if st.len() > ROOT16_STARTS { 16 } else { 8 };
            assert_eq!(trie.root_stride, expect_root, "{} starts", st.len());
            let root = 1usize << trie.root_stride;
            assert!(
                trie.nodes.len() >= root + 3 * 256,
                "the trie has inner levels"
            );
            let lookup = FieldLookup::Trie(trie);
            // Chunks mixing values on and next to boundaries (deep leaves)
            // with random ones (shallow leaves).
            for round in 0..200 {
                let mut vals = [0u128; CHUNK];
                for v in vals.iter_mut() {
                    let b = st[rng.below(st.len() as u64) as usize];
                    *v = match rng.below(3) {
                        0 => b,
                        1 => b.wrapping_sub(1),
                        _ => {
                            let r = ((rng.next_u64() as u128) << 64) | rng.next_u64() as u128;
                            if width == 32 { r & 0xffff_ffff } else { r }
                        }
                    };
                    if width == 32 {
                        *v &= 0xffff_ffff;
                    }
                }
                let n = 1 + round % CHUNK;
                // Entries past the chunk's packets are left alone.
                let mut out = [u32::MAX; CHUNK];
                fill(&lookup, &mut out, n, |i| vals[i]);
                for i in 0..n {
                    assert_eq!(
                        out[i],
                        reference(&st, &class_of, vals[i]),
                        "width {width}, value {:#x}",
                        vals[i]
                    );
                }
                assert!(out[n..].iter().all(|&c| c == u32::MAX));
            }
        }
        // At the threshold the 8-bit root is kept; one start more gets the
        // 16-bit one.
        for (k, root) in [(ROOT16_STARTS, 8), (ROOT16_STARTS + 1, 16)] {
            let st: Vec<u128> = (0..k as u128).map(|i| i << 20).collect();
            let class_of: Vec<u32> = (0..k as u32).collect();
            let trie = RangeTrie::build(32, &st, &class_of, "test").unwrap();
            assert_eq!(trie.root_stride, root, "{k} starts");
        }
    }

    #[test]
    fn direct_values_past_the_table_share_its_last_class() {
        // Values 0-9 in class 0, 10 in class 1, 11 and on in class 2: the
        // table ends at the last interval's start.
        let lookup = FieldLookup::Direct(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2].into());
        let vals: [u128; 6] = [0, 9, 10, 11, 12, 65535];
        let mut out = [u32::MAX; CHUNK];
        fill(&lookup, &mut out, vals.len(), |i| vals[i]);
        assert_eq!(&out[..vals.len()], &[0, 0, 1, 2, 2, 2]);
        assert!(out[vals.len()..].iter().all(|&c| c == u32::MAX));
    }

    /// Cross-product table sizes of a classifier without bit vectors.
    fn tables(c: &Classifier) -> Option<Vec<usize>> {
        match c.groups.as_slice() {
            [
                Group::Rfc {
                    rest, addr, last, ..
                },
            ] => Some(
                rest.iter()
                    .chain(addr)
                    .map(|s| s.table.len())
                    .chain([last.len()])
                    .collect(),
            ),
            _ => None,
        }
    }

    /// `k` rules on each of protocol, flags, source port and destination
    /// port, one value each, interleaved: each step of the chain over them
    /// multiplies about `k` classes by `k`, and the first match leaves
    /// about `k` more, so the later steps' tables are of similar size.
    fn one_field_rules(k: u32) -> Vec<FlatRule> {
        let fields = [Field::Proto, Field::Aux, Field::Sport, Field::Dport];
        (0..k * 4)
            .map(|i| {
                let mut f: [Option<Intervals>; FIELD_COUNT] = Default::default();
                let v = u128::from(1 + i / 4 * 7);
                f[fields[(i % 4) as usize] as usize] = Some(vec![(v, v)]);
                FlatRule {
                    fields: f,
                    terminal: true,
                    id: i,
                }
            })
            .collect()
    }

    /// A rule under another's source (the same port, a narrower prefix)
    /// never answers first, so the address classes it tells apart have the
    /// same outcomes: the last table keeps one row for each distinct line
    /// of outcomes (4 of the 6 address classes here), and still answers
    /// every packet like the rules.
    #[test]
    fn address_classes_with_equal_outcomes_share_a_row() {
        let rule = |id: u32, src: Option<(u128, u128)>, dst: Option<(u128, u128)>, port: u128| {
            let mut f: [Option<Intervals>; FIELD_COUNT] = Default::default();
            f[Field::Src as usize] = src.map(|iv| vec![iv]);
            f[Field::Dst as usize] = dst.map(|iv| vec![iv]);
            f[Field::Dport as usize] = Some(vec![(port, port)]);
            FlatRule {
                fields: f,
                terminal: true,
                id,
            }
        };
        let (ten, ten_one) = ((0x0a00_0000, 0x0aff_ffff), (0x0a01_0000, 0x0a01_ffff));
        let doc = (0xc000_0200, 0xc000_02ff);
        let rules = vec![
            rule(0, Some(ten), None, 80),
            rule(1, Some(ten_one), None, 80),
            rule(2, None, Some(doc), 443),
        ];
        let c = Classifier::build(&rules, Family::V4, &CompileOptions::default()).unwrap();
        let [Group::Rfc { n_rest, last, .. }] = c.groups.as_slice() else {
            panic!("one group of cross products");
        };
        // Rest classes: port 80, port 443, any other port.
        assert_eq!(*n_rest, 3);
        assert_eq!(
            last.len(),
            4 * 3,
            "rows: {{0, 1, 2}} = {{0, 2}}, {{0, 1}} = {{0}}, {{2}}, {{}}"
        );
        answers_like_the_rules(
            &c,
            &rules,
            &[0x0a01_0203, 0x0a02_0203, 0x0b00_0001],
            &[0xc000_0201, 0xc000_0301],
            &[80, 443, 22],
        );
    }

    /// `c` answers every TCP packet from each of `srcs` to each of `dsts`
    /// and `dports` with the first of `rules` (all terminal) it matches.
    fn answers_like_the_rules(
        c: &Classifier,
        rules: &[FlatRule],
        srcs: &[u128],
        dsts: &[u128],
        dports: &[u16],
    ) {
        let keys: Vec<PacketKey> = srcs
            .iter()
            .flat_map(|&src| dsts.iter().map(move |&dst| (src, dst)))
            .flat_map(|(src, dst)| {
                dports.iter().map(move |&dport| PacketKey {
                    src,
                    dst,
                    dport,
                    proto: 6,
                    ..PacketKey::default()
                })
            })
            .collect();
        assert!(keys.len() <= CHUNK);
        let mut out = [NO_RULE; CHUNK];
        c.classify_chunk(&keys, &mut out, |_, _| {});
        for (k, &got) in keys.iter().zip(&out) {
            let want = rules
                .iter()
                .find(|r| r.matches(k))
                .map_or(NO_RULE, |r| r.id);
            assert_eq!(got, want, "{k:?}");
        }
    }

    /// Chains of a single step (the source alone, the port alone) whose
    /// only step both starts the chain and is rewritten by the merge: the
    /// lookup reads the rewritten table rather than the field's classes.
    /// Rule 1 lies under rule 0 (a narrower source, one of its ports), so
    /// ports 80 and 81 answer alike, and so do the two sources.
    #[test]
    fn single_step_chains_read_their_merged_tables() {
        let rule = |id: u32, src: (u128, u128), ports: (u128, u128)| {
            let mut f: [Option<Intervals>; FIELD_COUNT] = Default::default();
            f[Field::Src as usize] = Some(vec![src]);
            f[Field::Dport as usize] = Some(vec![ports]);
            FlatRule {
                fields: f,
                terminal: true,
                id,
            }
        };
        let rules = vec![
            rule(0, (0x0a00_0000, 0x0aff_ffff), (80, 81)),
            rule(1, (0x0a01_0000, 0x0a01_ffff), (81, 81)),
        ];
        let c = Classifier::build(&rules, Family::V4, &CompileOptions::default()).unwrap();
        let [
            Group::Rfc {
                rest,
                addr,
                n_rest,
                last,
                ..
            },
        ] = c.groups.as_slice()
        else {
            panic!("one group of cross products");
        };
        assert_eq!((rest.len(), addr.len()), (1, 1), "one step a chain");
        // Three port classes and three source classes, two of each alike.
        assert_eq!((*n_rest, last.len()), (2, 4));
        assert!(!rest[0].starts_at_field && !addr[0].starts_at_field);
        answers_like_the_rules(
            &c,
            &rules,
            &[0x0a01_0001, 0x0a02_0001, 0x0b00_0001],
            &[0],
            &[79, 80, 81, 82],
        );
    }

    #[test]
    fn a_classifier_that_reads_no_field_answers_every_packet_alike() {
        let any = |id, terminal| FlatRule {
            fields: Default::default(),
            terminal,
            id,
        };
        let cases = [
            (
                vec![any(0, false), any(3, false), any(1, true)],
                1,
                vec![0, 3],
            ),
            (vec![any(5, false)], NO_RULE, vec![5]),
            (vec![], NO_RULE, vec![]),
        ];
        let keys: Vec<PacketKey> = (0..40u16)
            .map(|i| PacketKey {
                src: u128::from(i) << 100,
                dport: i,
                proto: [6, 17, 58][usize::from(i % 3)],
                is_v6: true,
                ..PacketKey::default()
            })
            .collect();
        for (rules, rule, counted) in cases {
            let c = Classifier::build(&rules, Family::V6, &CompileOptions::default()).unwrap();
            assert!(c.constant.is_some(), "{rules:?}: no field is active");
            for chunk in keys.chunks(CHUNK) {
                let mut out = [0; CHUNK];
                let mut seen = Vec::new();
                c.classify_chunk(chunk, &mut out, |id, k| seen.push((id, k.dport)));
                assert!(out[..chunk.len()].iter().all(|&r| r == rule), "{rules:?}");
                let want: Vec<(u32, u16)> = chunk
                    .iter()
                    .flat_map(|k| counted.iter().map(move |&id| (id, k.dport)))
                    .collect();
                assert_eq!(
                    seen, want,
                    "{rules:?}: every packet counts the counting rules"
                );
            }
        }
    }

    #[test]
    fn cross_products_stay_within_the_budget_or_give_way_to_bit_vectors() {
        let mut rng = SplitMix::new(11);
        let rules = one_field_rules(12);
        let build = |budget| {
            Classifier::build(
                &rules,
                Family::V4,
                &CompileOptions {
                    table_budget: budget,
                },
            )
            .unwrap()
        };
        let unbounded = tables(&build(1 << 24)).expect("cross products");
        let largest = *unbounded.iter().max().unwrap();
        let total: usize = unbounded.iter().sum();
        assert!(total > 2 * largest, "several large tables: {unbounded:?}");
        // Every table fits a budget of the largest, but not all of them
        // within twice it: bit vectors.
        assert!(tables(&build(largest)).is_none());
        assert!(tables(&build(largest - 1)).is_none());
        // Half the total: the same tables.
        assert_eq!(tables(&build(total.div_ceil(2))), Some(unbounded.clone()));
        // Both stages answer like the rules.
        // Packets on the rules' values and beside them.
        let value = |rng: &mut SplitMix| 1 + 7 * rng.below(13) as u8 + rng.below(2) as u8;
        let keys: Vec<PacketKey> = (0..200)
            .map(|_| PacketKey {
                proto: if rng.percent(50) { 6 } else { value(&mut rng) },
                tcp_flags: value(&mut rng),
                sport: u16::from(value(&mut rng)),
                dport: u16::from(value(&mut rng)),
                ..PacketKey::default()
            })
            .collect();
        for budget in [largest, total.div_ceil(2)] {
            let c = build(budget);
            for chunk in keys.chunks(CHUNK) {
                let mut out = [NO_RULE; CHUNK];
                c.classify_chunk(chunk, &mut out, |_, _| {});
                for (k, &got) in chunk.iter().zip(&out) {
                    let want = rules
                        .iter()
                        .find(|r| r.terminal && r.matches(k))
                        .map_or(NO_RULE, |r| r.id);
                    assert_eq!(got, want, "budget {budget}");
                }
            }
        }
    }

    #[test]
    fn the_last_table_narrows_only_ids_that_fit_16_bits() {
        for top in [u32::from(u16::MAX), u32::from(u16::MAX) + 1] {
            let ids: Vec<u32> = (0..1000u32)
                .map(|i| i * 7919 % (top + 1))
                .chain([top])
                .collect();
            let t = LastTable::new(ids.clone());
            assert_eq!(
                matches!(t, LastTable::Narrow(_)),
                top <= u32::from(u16::MAX)
            );
            assert_eq!(t.to_u32().as_ref(), &ids[..]);
            let at: [u32; CHUNK] = std::array::from_fn(|i| (i * 31 % ids.len()) as u32);
            let mut out = [0u32; CHUNK];
            t.gather(&at, CHUNK, &mut out);
            for i in 0..CHUNK {
                assert_eq!(out[i], ids[at[i] as usize]);
            }
        }
    }
}
