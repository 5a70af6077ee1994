//! Readers look up continuously while a writer applies random route changes,
//! publishes them in batches of random size and now and then replaces the
//! whole table. Every answer a reader got is checked afterwards against the
//! reference FIB replayed to the exact generation the reader's snapshot had,
//! so a torn or stale-mixed answer fails the test. At the end no snapshot is
//! left alive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread;

use fib::poptrie::MAX_NEXT_HOP;
use fib::reference::ReferenceFib4;
use fib::shared::{FibWriter, Snapshot};
use fib::{Address, Ipv4Cidr, Lookup, RouteTable};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone)]
enum Event {
    Insert(Ipv4Cidr, u32),
    Remove(Ipv4Cidr),
    /// A publication: readers may now see generation `.0`.
    Publish(u64),
    /// A whole-table replacement, published as generation `.0`.
    Replace(u64, Vec<(Ipv4Cidr, u32)>),
}

/// Prefixes clustered so that they nest: a few /8s with /16s, /24s and
/// host routes under them, plus the default route.
fn random_prefix(rng: &mut StdRng) -> Ipv4Cidr {
    let base = [0x0a00_0000u32, 0x0b00_0000, 0xc0a8_0000][rng.random_range(0..3)];
    // The default route is rare, as in real tables: changing it recompiles
    // every chunk it is the default of.
    let len = if rng.random_range(0..200) == 0 {
        0
    } else {
        [8u8, 12, 16, 18, 20, 22, 24, 25, 28, 32][rng.random_range(0..10)]
    };
    u32::prefix(
        base | (rng.random::<u32>() & 0x00ff_ffff & !0xff00_fc00),
        len,
    )
}

fn random_table(rng: &mut StdRng, n: usize) -> Vec<(Ipv4Cidr, u32)> {
    (0..n)
        .map(|_| (random_prefix(rng), rng.random_range(0..=MAX_NEXT_HOP)))
        .collect()
}

struct Sample {
    generation: u64,
    addr: u32,
    answer: Option<u32>,
}

#[test]
fn readers_only_see_published_states_and_nothing_leaks() {
    let mut rng = StdRng::seed_from_u64(7);
    let initial = random_table(&mut rng, 3000);
    let (mut writer, reader) = FibWriter::<u32>::from_routes(initial.clone());
    // Probe addresses: inside the clusters, where the changes happen.
    let probes: Arc<Vec<u32>> = Arc::new(
        (0..4096)
            .map(|_| {
                let base = [0x0a00_0000u32, 0x0b00_0000, 0xc0a8_0000][rng.random_range(0..3)];
                base | (rng.random::<u32>() & 0x00ff_ffff & !0xff00_fc00)
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for id in 0..2u64 {
        let reader = reader.clone();
        let probes = Arc::clone(&probes);
        let stop = Arc::clone(&stop);
        handles.push(thread::spawn(move || {
            let mut samples = Vec::new();
            let mut seen: Vec<Weak<Snapshot<u32>>> = Vec::new();
            let mut last_gen = u64::MAX;
            // Samples recorded for the current generation (bounded, so the
            // check covers every generation, not just the last second).
            let mut in_gen = 0usize;
            let mut out = [None; 32];
            let mut i = id as usize * 977;
            while !stop.load(Ordering::Relaxed) {
                let snap = reader.snapshot();
                let generation = snap.generation();
                if generation != last_gen {
                    seen.push(Arc::downgrade(&*snap));
                    last_gen = generation;
                    in_gen = 0;
                }
                let start = i % (probes.len() - 32);
                let batch = &probes[start..start + 32];
                snap.lookup_batch(batch, &mut out);
                let a = probes[(i * 7) % probes.len()];
                let single = snap.lookup(a);
                drop(snap);
                if in_gen < 512 {
                    for (a, o) in batch.iter().zip(out) {
                        samples.push(Sample {
                            generation,
                            addr: *a,
                            answer: o,
                        });
                    }
                    samples.push(Sample {
                        generation,
                        addr: a,
                        answer: single,
                    });
                    in_gen += 33;
                }
                i += 33;
            }
            (samples, seen)
        }));
    }

    let mut log = Vec::new();
    let mut published = 0u64;
    for round in 0..1200u32 {
        if round % 300 == 299 {
            let table = random_table(&mut rng, 2000 + round as usize);
            let g = writer.replace_all(table.clone());
            log.push(Event::Replace(g, table));
            published = g;
            continue;
        }
        for _ in 0..rng.random_range(1..20) {
            let p = random_prefix(&mut rng);
            if rng.random_range(0..3) == 0 {
                writer.remove(&p);
                log.push(Event::Remove(p));
            } else {
                let nh = rng.random_range(0..=MAX_NEXT_HOP);
                writer.insert(p, nh);
                log.push(Event::Insert(p, nh));
            }
        }
        let g = writer.publish();
        assert_eq!(g, published + 1);
        published = g;
        log.push(Event::Publish(g));
        if round % 64 == 0 {
            thread::yield_now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    let mut seen = Vec::new();
    for h in handles {
        let (s, w) = h.join().expect("reader thread");
        samples.extend(s);
        seen.extend(w);
    }
    assert!(
        samples.len() > 10_000,
        "readers made only {} lookups",
        samples.len()
    );
    let generations: std::collections::BTreeSet<u64> =
        samples.iter().map(|s| s.generation).collect();
    assert!(
        generations.len() > 10,
        "readers saw only {} generations",
        generations.len()
    );

    eprintln!(
        "{} samples over {} generations",
        samples.len(),
        generations.len()
    );
    // Replay the log and check each sample against its generation.
    samples.sort_by_key(|s| s.generation);
    let mut reference = ReferenceFib4::new();
    for &(p, nh) in &initial {
        reference.insert(p, nh);
    }
    let mut next = 0;
    let check = |reference: &ReferenceFib4, g: u64, next: &mut usize| {
        while *next < samples.len() && samples[*next].generation == g {
            let s = &samples[*next];
            assert_eq!(
                s.answer,
                reference.lookup(s.addr),
                "generation {g}, address {:#x}",
                s.addr
            );
            *next += 1;
        }
    };
    check(&reference, 0, &mut next);
    for ev in log {
        match ev {
            Event::Insert(p, nh) => {
                reference.insert(p, nh);
            }
            Event::Remove(p) => {
                reference.remove(&p);
            }
            Event::Publish(g) => check(&reference, g, &mut next),
            Event::Replace(g, table) => {
                reference = ReferenceFib4::new();
                for (p, nh) in table {
                    reference.insert(p, nh);
                }
                check(&reference, g, &mut next);
            }
        }
    }
    assert_eq!(next, samples.len(), "samples from unknown generations");

    // Only the published copy and the one being drained may still live;
    // after the handles go, nothing does.
    let alive = seen.iter().filter(|w| w.upgrade().is_some()).count();
    assert!(alive <= 2, "{alive} snapshots still alive");
    drop(writer);
    drop(reader);
    let alive = seen.iter().filter(|w| w.upgrade().is_some()).count();
    assert_eq!(alive, 0, "snapshots leaked");
}
