//! Property tests: the poptrie against the reference FIB on random tables
//! with nested and overlapping prefixes, default routes, host routes, and
//! deletes of covering and covered prefixes.

use fib::poptrie::{Poptrie, TrieKey};
use fib::reference::ReferenceFib;
use fib::{Address, Lookup, RouteTable};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op<A> {
    Insert(A, u8, u32),
    Remove(A, u8),
}

/// Addresses clustered around a few bases so prefixes nest and overlap.
fn clustered<A>(base: A, noise: A, bits: u8) -> A
where
    A: TrieKey + core::ops::BitXor<Output = A> + core::ops::Shr<u32, Output = A>,
{
    if bits == 0 {
        return base;
    }
    base ^ (noise >> (A::BITS - bits) as u32)
}

fn ops4() -> impl Strategy<Value = Vec<Op<u32>>> {
    let bases = prop::sample::select(vec![
        0x0a00_0000u32,
        0x0a01_0200,
        0xc0a8_0000,
        0,
        0xffff_ffff,
    ]);
    let op = (
        bases,
        any::<u32>(),
        0u8..=24,
        0u8..=32,
        0u32..1000,
        any::<bool>(),
    )
        .prop_map(|(base, noise, spread, len, nh, ins)| {
            let a = clustered(base, noise, spread);
            let a = a.masked(len);
            if ins {
                Op::Insert(a, len, nh)
            } else {
                Op::Remove(a, len)
            }
        });
    prop::collection::vec(op, 1..120)
}

fn ops6() -> impl Strategy<Value = Vec<Op<u128>>> {
    let bases = prop::sample::select(vec![
        0x2001_0db8_0000_0000_0000_0000_0000_0000u128,
        0x2001_0db8_0001_0002_0000_0000_0000_0000,
        0x2a00_0000_0000_0000_0000_0000_0000_0000,
        0,
        u128::MAX,
    ]);
    let len = prop_oneof![0u8..=128, 16u8..=64, Just(128u8), Just(0u8)];
    let op = (
        bases,
        any::<u128>(),
        0u8..=80,
        len,
        0u32..1000,
        any::<bool>(),
    )
        .prop_map(|(base, noise, spread, len, nh, ins)| {
            let a = clustered(base, noise, spread.max(1));
            let a = a.masked(len);
            if ins {
                Op::Insert(a, len, nh)
            } else {
                Op::Remove(a, len)
            }
        });
    prop::collection::vec(op, 1..120)
}

/// Addresses worth probing: the edges of every prefix ever used, their
/// neighbours, and the random extras.
fn probes<A>(ops: &[Op<A>], extra: &[A]) -> Vec<A>
where
    A: TrieKey + core::ops::Not<Output = A> + core::ops::BitOr<Output = A> + WrappingStep,
{
    let mut v: Vec<A> = extra.to_vec();
    for op in ops {
        let (a, len) = match op {
            Op::Insert(a, l, _) | Op::Remove(a, l) => (*a, *l),
        };
        let last = a | !A::prefix_mask(len);
        v.extend([a, last, a.step_down(), last.step_up()]);
    }
    v
}

trait WrappingStep: Sized {
    fn step_up(self) -> Self;
    fn step_down(self) -> Self;
    fn prefix_mask(len: u8) -> Self;
}
impl WrappingStep for u32 {
    fn step_up(self) -> Self {
        self.wrapping_add(1)
    }
    fn step_down(self) -> Self {
        self.wrapping_sub(1)
    }
    fn prefix_mask(len: u8) -> Self {
        u32::MAX.masked(len)
    }
}
impl WrappingStep for u128 {
    fn step_up(self) -> Self {
        self.wrapping_add(1)
    }
    fn step_down(self) -> Self {
        self.wrapping_sub(1)
    }
    fn prefix_mask(len: u8) -> Self {
        u128::MAX.masked(len)
    }
}

fn check<A>(ops: &[Op<A>], extra: &[A]) -> Result<(), TestCaseError>
where
    A: TrieKey
        + core::ops::Not<Output = A>
        + core::ops::BitOr<Output = A>
        + WrappingStep
        + core::fmt::LowerHex,
{
    let mut t: Poptrie<A> = Poptrie::new();
    let mut r: ReferenceFib<A> = ReferenceFib::new();
    let addrs = probes(ops, extra);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(a, l, nh) => {
                let p = A::prefix(a, l);
                prop_assert_eq!(t.insert(p, nh), r.insert(p, nh));
            }
            Op::Remove(a, l) => {
                let mut p = A::prefix(a, l);
                if r.get(&p).is_none() && !r.is_empty() {
                    // Mostly delete a route that exists (covering or covered
                    // ones alike), chosen deterministically.
                    let mut all: Vec<_> = r.iter().map(|(p, _)| p).collect();
                    all.sort();
                    if l % 4 != 0 {
                        p = all[(l as usize * 7 + i) % all.len()];
                    }
                }
                prop_assert_eq!(t.remove(&p), r.remove(&p));
            }
        }
        prop_assert_eq!(t.len(), r.len());
        // Check everything every few steps and at the end.
        if i % 8 == 7 || i + 1 == ops.len() {
            for &a in &addrs {
                prop_assert_eq!(t.lookup(a), r.lookup(a), "addr {:x} after op {}", a, i);
            }
            let mut out = vec![None; addrs.len()];
            t.lookup_batch(&addrs, &mut out);
            for (a, o) in addrs.iter().zip(&out) {
                prop_assert_eq!(*o, r.lookup(*a), "batched addr {:x}", a);
            }
            t.lookup_batch_grouped(&addrs, &mut out);
            for (a, o) in addrs.iter().zip(&out) {
                prop_assert_eq!(*o, r.lookup(*a), "group walk addr {:x}", a);
            }
        }
    }
    // A bulk build of the final routes answers the same.
    let bulk = Poptrie::<A>::from_routes(r.iter());
    prop_assert_eq!(bulk.len(), r.len());
    for &a in &addrs {
        prop_assert_eq!(bulk.lookup(a), r.lookup(a), "bulk addr {:x}", a);
    }
    for (p, nh) in r.iter() {
        prop_assert_eq!(t.get(&p), Some(nh));
    }
    // Incremental updates leave the same shape as a fresh build: no node or
    // leaf is left behind by deletes.
    let (mt, mb) = (t.memory(), bulk.memory());
    prop_assert_eq!((mt.nodes, mt.leaves), (mb.nodes, mb.leaves));
    Ok(())
}

proptest! {
    // Fewer cases in unoptimised builds, where each one is slow.
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 48 } else { 256 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn ipv4_matches_reference(ops in ops4(), extra in prop::collection::vec(any::<u32>(), 0..64)) {
        check(&ops, &extra)?;
    }

    #[test]
    fn ipv6_matches_reference(ops in ops6(), extra in prop::collection::vec(any::<u128>(), 0..64)) {
        check(&ops, &extra)?;
    }
}
