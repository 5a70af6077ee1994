//! The full Internet table (901,899 IPv4 and 160,147 IPv6 prefixes) in the
//! poptrie, checked against the reference FIB on millions of addresses:
//! inside every prefix, at and just past both edges of every prefix, and
//! uniformly random; then again after deleting and re-adding routes.
//!
//! Slow without optimisation, so it runs in release builds only
//! (`cargo test --workspace --release`).

use std::path::PathBuf;

use fib::poptrie::{Poptrie, TrieKey};
use fib::reference::ReferenceFib;
use fib::table::{RouteFile, read_routes};
use fib::{Address, Lookup, RouteTable};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn full_table() -> RouteFile {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/full-table-prefixes.txt.gz");
    read_routes(&path).expect("full table readable")
}

/// Addresses inside, at the edges of and just outside every prefix.
fn probes<A: TrieKey>(
    routes: &[(A::Prefix, u32)],
    rng: &mut StdRng,
    random_host: impl Fn(&mut StdRng, A, A) -> A,
    step: impl Fn(A, bool) -> A,
    last: impl Fn(&A::Prefix) -> A,
) -> Vec<A> {
    let mut v = Vec::with_capacity(routes.len() * 5);
    for (p, _) in routes {
        let (first, _) = A::split(p);
        let l = last(p);
        v.extend([
            first,
            l,
            step(first, false),
            step(l, true),
            random_host(rng, first, l),
        ]);
    }
    v
}

fn check_all<A: TrieKey + core::fmt::LowerHex>(
    t: &Poptrie<A>,
    r: &ReferenceFib<A>,
    addrs: &[A],
    what: &str,
) {
    let mut out = vec![None; addrs.len()];
    t.lookup_batch(addrs, &mut out);
    let mut grouped = vec![None; addrs.len()];
    t.lookup_batch_grouped(addrs, &mut grouped);
    let mut inside = 0usize;
    for ((a, o), g) in addrs.iter().zip(&out).zip(&grouped) {
        let want = r.lookup(*a);
        assert_eq!(t.lookup(*a), want, "{what}: single lookup of {a:x}");
        assert_eq!(*o, want, "{what}: batched lookup of {a:x}");
        assert_eq!(*g, want, "{what}: group walk of {a:x}");
        inside += want.is_some() as usize;
    }
    // The probes must exercise real matches, not only misses.
    assert!(
        inside > addrs.len() / 4,
        "{what}: only {inside} of {} matched",
        addrs.len()
    );
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimised; runs with --release")]
fn full_ipv4_table_matches_reference() {
    let table = full_table();
    assert_eq!(table.v4.len(), 901_899);
    assert!(table.distinct_next_hops() > 200);
    let mut rng = StdRng::seed_from_u64(4);
    let mut r = ReferenceFib::<u32>::new();
    for &(p, nh) in &table.v4 {
        r.insert(p, nh);
    }
    let mut t = Poptrie::<u32>::from_routes(table.v4.iter().copied());
    assert_eq!(t.len(), r.len());
    let mut addrs = probes::<u32>(
        &table.v4,
        &mut rng,
        |rng, a, b| rng.random_range(a..=b),
        |a, up| {
            if up {
                a.wrapping_add(1)
            } else {
                a.wrapping_sub(1)
            }
        },
        |p| p.last(),
    );
    addrs.extend((0..1_000_000).map(|_| rng.random::<u32>()));
    check_all(&t, &r, &addrs, "bulk-built IPv4");

    // Churn: delete 50,000 random routes (short covering ones included),
    // re-add half of them with new next hops, and add new more-specifics.
    for i in 0..50_000usize {
        let (p, _) = table.v4[rng.random_range(0..table.v4.len())];
        assert_eq!(t.remove(&p), r.remove(&p));
        if i % 2 == 0 {
            let nh = rng.random_range(0..1000);
            assert_eq!(t.insert(p, nh), r.insert(p, nh));
        }
        if i % 5 == 0 {
            let (q, _) = table.v4[rng.random_range(0..table.v4.len())];
            let len = (q.prefix_len() + rng.random_range(1..=8)).min(32);
            let sub = u32::prefix(q.addr() | (rng.random::<u32>() & !q.addr()), len);
            let nh = rng.random_range(0..1000);
            assert_eq!(t.insert(sub, nh), r.insert(sub, nh));
        }
    }
    assert_eq!(t.len(), r.len());
    let sample: Vec<u32> = addrs.iter().step_by(3).copied().collect();
    check_all(&t, &r, &sample, "IPv4 after churn");
    let m = t.memory();
    assert!(
        m.lookup_bytes < 16 << 20,
        "lookup structure {} bytes",
        m.lookup_bytes
    );
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow unoptimised; runs with --release")]
fn full_ipv6_table_matches_reference_built_incrementally() {
    let table = full_table();
    assert_eq!(table.v6.len(), 160_147);
    let mut rng = StdRng::seed_from_u64(6);
    let mut r = ReferenceFib::<u128>::new();
    let mut t = Poptrie::<u128>::new();
    // Built route by route, to exercise the incremental path at scale.
    for &(p, nh) in &table.v6 {
        assert_eq!(t.insert(p, nh), r.insert(p, nh));
    }
    assert_eq!(t.len(), r.len());
    let mut addrs = probes::<u128>(
        &table.v6,
        &mut rng,
        |rng, a, b| rng.random_range(a..=b),
        |a, up| {
            if up {
                a.wrapping_add(1)
            } else {
                a.wrapping_sub(1)
            }
        },
        |p| p.last(),
    );
    // Uniform over the whole space (mostly misses) and over 2000::/3.
    addrs.extend((0..200_000).map(|_| rng.random::<u128>()));
    addrs.extend((0..800_000).map(|_| (rng.random::<u128>() >> 3) | (1u128 << 125)));
    check_all(&t, &r, &addrs, "incrementally built IPv6");

    let bulk = Poptrie::<u128>::from_routes(table.v6.iter().copied());
    check_all(&bulk, &r, &addrs, "bulk-built IPv6");

    for _ in 0..20_000 {
        let (p, _) = table.v6[rng.random_range(0..table.v6.len())];
        assert_eq!(t.remove(&p), r.remove(&p));
    }
    let sample: Vec<u128> = addrs.iter().step_by(2).copied().collect();
    check_all(&t, &r, &sample, "IPv6 after deletes");
}
