//! Fuzz target: the XDP engine's table encoder (`xdp_engine::compile`):
//! the router's poptries encoded into the BPF program's map content, an
//! `Image`, whose `lookup4` / `lookup6` walk the maps as the program does.
//!
//! Input: one flags byte, then route records, each a flags byte (bit 0:
//! IPv6, bit 1: remove instead of insert, bit 2: a next-hop id within two
//! of `fib::poptrie::MAX_NEXT_HOP`, above which the trie refuses ids), a
//! prefix length byte, a 16-bit next-hop id and the address (4 or 16
//! bytes).
//!
//! The first byte's bit 1 picks how the tries are built. Clear: the routes
//! are applied in order, one by one, to a `fib::poptrie::Poptrie` (checked
//! insert, remove) and to a reference FIB (`fib::reference`), as the
//! daemon's FIB writer does, while the cost of the routes no longer than
//! the trie's direct level (each one rewrites `2^(direct bits - length)`
//! top-level entries) stays within a small budget. Set: every route goes to
//! a reference FIB, from which a trie is built at once
//! (`Poptrie::from_routes`). The trie must hold exactly its reference's
//! routes. It is compiled with `Image::compile`, at `FibCapacity::SMALL`
//! (where `CompileError::TooLarge` is an accepted answer) or, by the first
//! byte's bit 0, at `FibCapacity::for_sizes` of the tries (which must fit).
//! Asserted: for
//! every route's address, the first and last address of its prefix, the
//! addresses just outside it, and a few fixed ones, the image finds the
//! same next hop as its trie and its reference FIB, IPv4 and IPv6.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use fib::poptrie::{Poptrie, TrieKey};
use fib::reference::{ReferenceFib, ReferenceFib4, ReferenceFib6};
use fib::{Lookup, RouteTable};
use pipeline::Datapath;
use wire::{Ipv4Cidr, Ipv6Cidr};
use xdp_engine::{CompileError, FibCapacity, Image};

fn datapath() -> &'static Datapath {
    static D: OnceLock<Datapath> = OnceLock::new();
    D.get_or_init(|| {
        pipeline::TablesBuilder::new()
            .build(ReferenceFib4::new(), ReferenceFib6::new())
            .datapath()
    })
}

/// Top-level entries a route of each family may rewrite, in total, in
/// the incrementally built trie (each costs a hash lookup there).
const SHORT_BUDGET: u32 = 1 << 12;

/// The tries of one input, the reference FIBs holding exactly their
/// routes, and the addresses to probe.
struct Fibs {
    t4: Poptrie<u32>,
    t6: Poptrie<u128>,
    r4: ReferenceFib4,
    r6: ReferenceFib6,
    probes4: Vec<u32>,
    probes6: Vec<u128>,
}

/// One family's routes: the reference FIB, and the trie updated route by
/// route beside it (`incremental`, within a budget of short routes) or
/// left empty, to be built from the reference at the end.
struct Family<A: TrieKey> {
    trie: Option<Poptrie<A>>,
    reference: ReferenceFib<A>,
    budget: u32,
}

impl<A: TrieKey> Family<A> {
    fn new(incremental: bool) -> Self {
        Family {
            trie: incremental.then(Poptrie::new),
            reference: ReferenceFib::new(),
            budget: SHORT_BUDGET,
        }
    }

    /// One record: the trie, when updated in place, must accept and refuse
    /// what its checked insert should, and remove what the reference held.
    /// A route no longer than the trie's direct level costs the
    /// `2^(direct bits - length)` top-level entries it rewrites.
    fn apply(&mut self, p: A::Prefix, nh: u32, remove: bool) {
        let valid = nh <= fib::poptrie::MAX_NEXT_HOP;
        let len = A::split(&p).1;
        let cost = match A::DIRECT_BITS.checked_sub(len) {
            Some(d) => 1 << d,
            None => 0,
        };
        let Some(t) = &mut self.trie else {
            if remove {
                self.reference.remove(&p);
            } else if valid {
                self.reference.insert(p, nh);
            }
            return;
        };
        if cost > self.budget {
            return;
        }
        self.budget -= cost;
        if remove {
            assert_eq!(t.remove(&p), self.reference.remove(&p), "remove {p}");
        } else if t.try_insert(p, nh).is_ok() {
            assert!(valid, "{p} -> {nh} accepted");
            self.reference.insert(p, nh);
        } else {
            assert!(!valid, "{p} -> {nh} refused");
        }
    }

    /// The trie, built from the reference's routes if it was not updated
    /// in place, and the reference.
    fn finish(self) -> (Poptrie<A>, ReferenceFib<A>) {
        let trie = self
            .trie
            .unwrap_or_else(|| Poptrie::from_routes(self.reference.iter()));
        (trie, self.reference)
    }
}

fn apply(data: &[u8], incremental: bool) -> Fibs {
    let mut f4 = Family::<u32>::new(incremental);
    let mut f6 = Family::<u128>::new(incremental);
    let mut probes4 = vec![0, u32::MAX, 0x0a00_0001, 0xc000_0201];
    let mut probes6 = vec![0, u128::MAX, 0x2001_0db8 << 96 | 1];
    let mut at = 0;
    while at + 4 <= data.len() {
        let flags = data[at];
        let v6 = flags & 1 != 0;
        let remove = flags & 2 != 0;
        let mut nh = u32::from(u16::from_le_bytes([data[at + 2], data[at + 3]]));
        if flags & 4 != 0 {
            // MAX_NEXT_HOP - 1 ..= MAX_NEXT_HOP + 2.
            nh = fib::poptrie::MAX_NEXT_HOP - 1 + (nh & 3);
        }
        let alen = if v6 { 16 } else { 4 };
        let Some(a) = data.get(at + 4..at + 4 + alen) else {
            break;
        };
        if v6 {
            let addr = u128::from_be_bytes(a.try_into().unwrap());
            let len = data[at + 1] % 129;
            let p = Ipv6Cidr::new(addr, len).unwrap();
            f6.apply(p, nh, remove);
            let net = p.addr();
            probes6.extend([
                addr,
                net,
                p.last(),
                net.wrapping_sub(1),
                p.last().wrapping_add(1),
            ]);
        } else {
            let addr = u32::from_be_bytes(a.try_into().unwrap());
            let len = data[at + 1] % 33;
            let p = Ipv4Cidr::new(addr, len).unwrap();
            f4.apply(p, nh, remove);
            let net = p.addr();
            probes4.extend([
                addr,
                net,
                p.last(),
                net.wrapping_sub(1),
                p.last().wrapping_add(1),
            ]);
        }
        at += 4 + alen;
    }
    let ((t4, r4), (t6, r6)) = (f4.finish(), f6.finish());
    Fibs {
        t4,
        t6,
        r4,
        r6,
        probes4,
        probes6,
    }
}

fn check_image(img: &Image, what: &str, f: &Fibs) {
    for &a in &f.probes4 {
        let want = f.r4.lookup(a);
        assert_eq!(f.t4.lookup(a), want, "{what}: trie, IPv4 {a:#010x}");
        assert_eq!(img.lookup4(a), want, "{what}: image, IPv4 {a:#010x}");
    }
    for &a in &f.probes6 {
        let want = f.r6.lookup(a);
        assert_eq!(f.t6.lookup(a), want, "{what}: trie, IPv6 {a:#034x}");
        assert_eq!(img.lookup6(a), want, "{what}: image, IPv6 {a:#034x}");
    }
}

fn capacity(t4: &Poptrie<u32>, t6: &Poptrie<u128>) -> FibCapacity {
    let (l4, l6) = (t4.layout(), t6.layout());
    FibCapacity::for_sizes(
        l4.nodes.len(),
        l4.leaves.len(),
        l6.nodes.len(),
        l6.leaves.len(),
    )
}

fn check(what: &str, f: &Fibs, sized: bool) {
    // The trie holds exactly the reference's routes.
    let routes4: BTreeMap<_, _> = f.t4.routes().collect();
    let routes6: BTreeMap<_, _> = f.t6.routes().collect();
    assert_eq!(routes4, f.r4.iter().collect::<BTreeMap<_, _>>(), "{what}");
    assert_eq!(routes6, f.r6.iter().collect::<BTreeMap<_, _>>(), "{what}");
    assert_eq!((f.t4.len(), f.t6.len()), (f.r4.len(), f.r6.len()), "{what}");
    let cap = if sized {
        capacity(&f.t4, &f.t6)
    } else {
        FibCapacity::SMALL
    };
    match Image::compile(datapath(), &f.t4, &f.t6, None, &cap) {
        Ok(img) => {
            assert!(!img.except_all() && img.firewall.is_none());
            check_image(&img, what, f);
        }
        Err(CompileError::TooLarge { .. }) if !sized => {}
        Err(e) => panic!("{what}: tries sized for the maps did not fit: {e}"),
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, records)) = data.split_first() else {
        return;
    };
    let sized = mode & 1 != 0;
    let incremental = mode & 2 == 0;
    let f = apply(records, incremental);
    let what = if incremental {
        "incremental"
    } else {
        "from_routes"
    };
    check(what, &f, sized);
});
