//! `cargo bench -p fastfwd-firewall --bench conntrack [-- --flows 4096,49152 --repeat 5 --seconds 0.5]`
//!
//! Connection-table lookups of established UDP flows (the per-packet work
//! of a stateful rule set), in a random order over a 65,536-entry table:
//! nanoseconds per lookup, the median of the repeats. Compare two builds
//! (the hash, the table layout) by running this in each, interleaved.

use firewall::PacketKey;
use firewall::conntrack::Conntrack;
use firewall::rules::ConntrackConfig;
use std::hint::black_box;
use std::time::Instant;

fn key(i: u32, reply: bool) -> PacketKey {
    let (a, b) = (0x0a00_0000 | i, 0xc633_6400 | (i % 251));
    let (sport, dport) = (1024 + (i % 50_000) as u16, 53);
    let mut k = PacketKey {
        proto: 17,
        ..PacketKey::default()
    };
    if reply {
        (k.src, k.dst, k.sport, k.dport) = (u128::from(b), u128::from(a), dport, sport);
    } else {
        (k.src, k.dst, k.sport, k.dport) = (u128::from(a), u128::from(b), sport, dport);
    }
    k
}

fn main() {
    let (mut flows, mut repeat, mut seconds) = (vec![4096u32, 49_152], 5usize, 0.5f64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--flows" => flows = val().split(',').filter_map(|s| s.parse().ok()).collect(),
            "--repeat" => repeat = val().parse().unwrap_or(repeat),
            "--seconds" => seconds = val().parse().unwrap_or(seconds),
            _ => {} // `--bench` and other harness flags
        }
    }
    let load = fastfwd_sys::os::LoadNote::start();
    println!("{}", load.header());
    println!("{:>8} {:>12} {:>12}", "flows", "ns/lookup", "spread");
    for &n in &flows {
        let mut ct = Conntrack::new(ConntrackConfig::default(), 0x5eed_1234_abcd_0001);
        for i in 0..n {
            ct.insert(&key(i, false), 0);
            ct.lookup(&key(i, true), 1);
        }
        // A fixed pseudo-random visiting order (no allocation in the loop).
        let mut order: Vec<u32> = (0..n).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let keys: Vec<PacketKey> = order.iter().map(|&i| key(i, i % 2 == 0)).collect();
        let mut runs = Vec::new();
        for _ in 0..repeat {
            let (start, mut done, mut now) = (Instant::now(), 0u64, 2u64);
            while start.elapsed().as_secs_f64() < seconds {
                for k in &keys {
                    black_box(ct.lookup(black_box(k), now));
                }
                done += keys.len() as u64;
                now += 1;
            }
            runs.push(start.elapsed().as_nanos() as f64 / done as f64);
        }
        runs.sort_by(f64::total_cmp);
        let median = runs[runs.len() / 2];
        let spread = runs[runs.len() - 1] - runs[0];
        println!("{n:>8} {median:>12.2} {spread:>12.2}");
    }
    println!("{}", load.footer());
}
