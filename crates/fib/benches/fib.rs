//! The FIB benchmark: fastfwd's poptrie against its peers, in one run, on
//! the same full table and the same lookup keys.
//!
//! `cargo bench -p fastfwd-fib --bench fib` (or `scripts/fib-bench.sh`, which also
//! installs DPDK's test tools and sets the compiler flags used for the
//! published figures). Environment:
//!
//! * `FIB_BENCH_TABLE`: route file (default: the full table in `data/`);
//! * `FIB_BENCH_KEYS`: keys per key set (default 1,048,576);
//! * `FIB_BENCH_REPEAT`: repetitions of each measurement (median taken, 5);
//! * `FIB_BENCH_INSERTS=N`: only the single-route insert comparison,
//!   fastfwd and dpdk-test-fib alternated N times;
//! * `FIB_BENCH_LOOKUPS=N`: only the batched lookup comparison, fastfwd
//!   and dpdk-test-fib alternated N times per family and key set (with
//!   `FIB_BENCH_NO_DPDK=1`, fastfwd's N rounds alone: for alternating the
//!   bench binaries of two commits);
//! * `FIB_BENCH_DPDK_EAL`: EAL arguments for `dpdk-test-fib` (default
//!   `-l 0 --no-pci --no-huge -m 3072`); `FIB_BENCH_NO_DPDK=1` skips it;
//! * `FIB_BENCH_DIR`: where route and key files for DPDK are written.
//!
//! DPDK is measured at its best on this CPU: rte_fib / rte_fib6 run once
//! per lookup variant (entry size and lookup function, AVX-512 included;
//! see `DPDK_LOOKUPS4` / `DPDK_LOOKUPS6`) and the fastest counts.
//!
//! Measured for each structure: lookups/s (single and batched) for keys
//! inside table prefixes and for uniform random keys, IPv4 and IPv6; memory;
//! full-table build time; single-route inserts into an empty table in file
//! order (what dpdk-test-fib times as "FIB add") and random deletes and
//! re-adds on the full table; and, for fastfwd, the lookup rate while
//! another thread streams updates at 100k routes/s, published every 50 and
//! every 10 ms (the daemon's spacings of kernel changes) and every 1 ms.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fib::poptrie::{Poptrie, TrieKey};
use fib::shared::FibWriter;
use fib::table::read_routes;
use fib::{Address, Ipv4Cidr, Ipv6Cidr, Lookup, RouteTable};
use ip_network::{Ipv4Network, Ipv6Network};
use ip_network_table::IpNetworkTable;
use prefix_trie::PrefixMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BATCH: usize = 64;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// On-CPU time of the calling thread, from the scheduler's accounting
/// (`/proc/thread-self/schedstat`); wall time if that is unavailable. The
/// machine is shared: time spent waiting for a CPU is not the code's.
fn cpu_time() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map(Duration::from_nanos)
        .unwrap_or_else(|| {
            static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            START.get_or_init(Instant::now).elapsed()
        })
}

/// Runs `body` (which does `n` operations) until it has had 0.2 s of CPU,
/// and returns operations per CPU-second; the median of `repeat` such runs.
fn rate(repeat: usize, n: usize, mut body: impl FnMut()) -> f64 {
    let runs = (0..repeat)
        .map(|_| {
            let start = cpu_time();
            let wall = Instant::now();
            let mut ops = 0usize;
            loop {
                body();
                ops += n;
                let used = cpu_time().saturating_sub(start);
                if used >= Duration::from_millis(200) || wall.elapsed() > Duration::from_secs(10) {
                    break ops as f64 / used.as_secs_f64().max(1e-9);
                }
            }
        })
        .collect();
    median(runs)
}

/// One row of the result table.
#[derive(Default, Clone)]
struct Row {
    name: String,
    single_in: Option<f64>,
    batch_in: Option<f64>,
    single_rand: Option<f64>,
    batch_rand: Option<f64>,
    memory: Option<f64>,
    memory_note: &'static str,
    build_s: Option<f64>,
    /// Routes inserted one at a time into an empty table, in route-file
    /// order: the workload of dpdk-test-fib's "FIB add".
    inserts: Option<f64>,
    /// Random table routes deleted and added back, one change at a time
    /// (changes per second).
    updates: Option<f64>,
}

/// Keys: inside table prefixes (a random route, a random address in it) and
/// uniform random.
fn keys_inside<A: TrieKey>(
    routes: &[(A::Prefix, u32)],
    n: usize,
    rng: &mut StdRng,
    pick: impl Fn(&mut StdRng, A, A) -> A,
    last: impl Fn(&A::Prefix) -> A,
) -> Vec<A> {
    (0..n)
        .map(|_| {
            let (p, _) = &routes[rng.random_range(0..routes.len())];
            pick(rng, A::split(p).0, last(p))
        })
        .collect()
}

/// A batched lookup: answers `out[i]` for `keys[i]`.
type BatchFn<'a, A> = dyn Fn(&[A], &mut [Option<u32>]) + 'a;

fn measure_lookup<A: Copy>(
    repeat: usize,
    keys: &[A],
    single: impl Fn(A) -> Option<u32>,
    batch: Option<&BatchFn<'_, A>>,
) -> (f64, Option<f64>) {
    let s = rate(repeat, keys.len(), || {
        let mut acc = 0u32;
        for &k in keys {
            acc = acc.wrapping_add(single(k).unwrap_or(0));
        }
        black_box(acc);
    });
    let b = batch.map(|f| batched_rate(repeat, keys, f));
    (s, b)
}

/// Lookups/s of `batch` over `keys` in chunks of [`BATCH`].
fn batched_rate<A: Copy>(repeat: usize, keys: &[A], batch: &BatchFn<'_, A>) -> f64 {
    let mut out = vec![None; BATCH];
    rate(repeat, keys.len(), || {
        let mut acc = 0u32;
        for chunk in keys.chunks(BATCH) {
            batch(chunk, &mut out);
            acc = acc.wrapping_add(out[0].unwrap_or(0));
        }
        black_box(acc);
    })
}

/// Update workload: delete then re-add `n` table routes (2n operations).
fn update_sample<P: Copy>(routes: &[(P, u32)], n: usize, rng: &mut StdRng) -> Vec<(P, u32)> {
    (0..n)
        .map(|_| {
            let (p, nh) = routes[rng.random_range(0..routes.len())];
            (p, nh)
        })
        .collect()
}

struct Family<'a, A: TrieKey> {
    label: &'static str,
    routes: &'a [(A::Prefix, u32)],
    keys_in: &'a [A],
    keys_rand: &'a [A],
}

fn bench_ours<A: TrieKey>(f: &Family<'_, A>, repeat: usize, rng: &mut StdRng) -> (Row, Poptrie<A>) {
    let build = median(
        (0..3)
            .map(|_| {
                let start = cpu_time();
                let t = Poptrie::<A>::from_routes(f.routes.iter().copied());
                let s = (cpu_time() - start).as_secs_f64();
                black_box(t.len());
                s
            })
            .collect(),
    );
    let inserts = median(
        (0..repeat.min(3))
            .map(|_| {
                let start = cpu_time();
                let mut t = Poptrie::<A>::new();
                for &(p, nh) in f.routes {
                    t.insert(p, nh);
                }
                let s = (cpu_time() - start).as_secs_f64();
                black_box(t.len());
                f.routes.len() as f64 / s
            })
            .collect(),
    );
    let mut t = Poptrie::<A>::from_routes(f.routes.iter().copied());
    let mem = t.memory();
    let batch = |k: &[A], o: &mut [Option<u32>]| t.lookup_batch(k, o);
    let (si, bi) = measure_lookup(repeat, f.keys_in, |a| t.lookup(a), Some(&batch));
    let (sr, br) = measure_lookup(repeat, f.keys_rand, |a| t.lookup(a), Some(&batch));
    let sample = update_sample(f.routes, 100_000, rng);
    let updates = median(
        (0..repeat.min(3))
            .map(|_| {
                let start = cpu_time();
                for &(p, nh) in &sample {
                    t.remove(&p);
                    t.insert(p, nh);
                }
                (2 * sample.len()) as f64 / (cpu_time() - start).as_secs_f64()
            })
            .collect(),
    );
    let row = Row {
        name: format!("fastfwd poptrie {}", f.label),
        single_in: Some(si),
        batch_in: bi,
        single_rand: Some(sr),
        batch_rand: br,
        memory: Some(mem.lookup_bytes as f64),
        memory_note: "exact",
        build_s: Some(build),
        inserts: Some(inserts),
        updates: Some(updates),
    };
    (row, t)
}

/// Lookup rate through a reader while a writer thread streams updates at
/// `target` routes/s, publishing every `tick_ms` milliseconds, against the
/// idle rate through the same reader. Idle and busy readings alternate,
/// `repeat` of each, so that a drift in the machine's speed (this VM's
/// varies by tens of percent between minutes) falls on both; returns the
/// medians of idle, busy and of each round's busy / idle, and the rate
/// the writer achieved while streaming.
fn bench_under_updates<A: TrieKey>(
    f: &Family<'_, A>,
    repeat: usize,
    target: u64,
    tick_ms: u64,
) -> (f64, f64, f64, f64, f64)
where
    A::Prefix: Send,
{
    let (mut writer, reader) = FibWriter::<A>::from_routes(f.routes.iter().copied());
    let keys = f.keys_in;
    let lookups = |reader: &fib::shared::FibReader<A>| {
        let mut out = vec![None; BATCH];
        rate(1, keys.len(), || {
            let mut acc = 0u32;
            for chunk in keys.chunks(BATCH) {
                let snap = reader.snapshot();
                snap.lookup_batch(chunk, &mut out);
                acc = acc.wrapping_add(out[0].unwrap_or(0));
            }
            black_box(acc);
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let streaming = Arc::new(AtomicBool::new(false));
    let routes: Vec<(A::Prefix, u32)> = f.routes.to_vec();
    let handle = {
        let stop = Arc::clone(&stop);
        let streaming = Arc::clone(&streaming);
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(99);
            let per_tick = (target * tick_ms / 1000).max(1);
            let (mut n, mut total, mut secs) = (0u64, 0u64, 0f64);
            let mut start: Option<Instant> = None;
            while !stop.load(Ordering::Relaxed) {
                if !streaming.load(Ordering::Relaxed) {
                    if let Some(t) = start.take() {
                        secs += t.elapsed().as_secs_f64();
                        total += n;
                        n = 0;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let t0 = *start.get_or_insert_with(Instant::now);
                // Ticks of `tick_ms`: apply the tick's changes, publish once.
                for _ in 0..per_tick {
                    let (p, nh) = routes[rng.random_range(0..routes.len())];
                    writer.insert(p, (nh + 1 + n as u32 % 7) % 256);
                    n += 1;
                }
                writer.publish();
                let due = Duration::from_micros(n * 1_000_000 / target);
                if let Some(wait) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            if let Some(t) = start {
                secs += t.elapsed().as_secs_f64();
                total += n;
            }
            total as f64 / secs.max(1e-9)
        })
    };
    let (mut idle, mut busy, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeat {
        streaming.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        let i = lookups(&reader);
        streaming.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        let b = lookups(&reader);
        idle.push(i);
        busy.push(b);
        ratio.push(b / i);
    }
    stop.store(true, Ordering::Relaxed);
    let achieved = handle.join().unwrap_or(0.0);
    // Published single-route update rate: every change applied to both
    // copies, published every 1,000 changes.
    let (mut w2, _r2) = FibWriter::<A>::from_routes(f.routes.iter().copied());
    let mut rng = StdRng::seed_from_u64(5);
    let sample = update_sample(f.routes, 100_000, &mut rng);
    let start = cpu_time();
    for (i, &(p, nh)) in sample.iter().enumerate() {
        w2.remove(&p);
        w2.insert(p, nh);
        if i % 500 == 499 {
            w2.publish();
        }
    }
    w2.publish();
    w2.len();
    let published = (2 * sample.len()) as f64 / (cpu_time() - start).as_secs_f64();
    (
        median(idle),
        median(busy),
        median(ratio),
        achieved,
        published,
    )
}

/// A peer's route table, as the benchmark drives it.
trait PeerTable<A: TrieKey> {
    /// What the table keys a route by.
    type Key: Copy;
    /// The key of a prefix (`None`: the table cannot hold it).
    fn key(p: &A::Prefix) -> Option<Self::Key>;
    fn insert(&mut self, k: Self::Key, nh: u32);
    fn remove(&mut self, k: Self::Key);
    /// The longest-prefix match.
    fn lookup(&self, a: A) -> Option<u32>;
}

impl<A: TrieKey> PeerTable<A> for PrefixMap<(A, u8), u32>
where
    (A, u8): prefix_trie::Prefix,
{
    type Key = (A, u8);
    fn key(p: &A::Prefix) -> Option<(A, u8)> {
        Some(A::split(p))
    }
    fn insert(&mut self, k: (A, u8), nh: u32) {
        PrefixMap::insert(self, k, nh);
    }
    fn remove(&mut self, k: (A, u8)) {
        PrefixMap::remove(self, &k);
    }
    fn lookup(&self, a: A) -> Option<u32> {
        self.get_lpm(&(a, A::BITS)).map(|(_, v)| *v)
    }
}

impl PeerTable<u32> for IpNetworkTable<u32> {
    type Key = Ipv4Network;
    fn key(p: &Ipv4Cidr) -> Option<Ipv4Network> {
        Ipv4Network::new(Ipv4Addr::from(p.addr()), p.prefix_len()).ok()
    }
    fn insert(&mut self, k: Ipv4Network, nh: u32) {
        IpNetworkTable::insert(self, k, nh);
    }
    fn remove(&mut self, k: Ipv4Network) {
        IpNetworkTable::remove(self, k);
    }
    fn lookup(&self, a: u32) -> Option<u32> {
        self.longest_match_ipv4(Ipv4Addr::from(a)).map(|(_, v)| *v)
    }
}

impl PeerTable<u128> for IpNetworkTable<u32> {
    type Key = Ipv6Network;
    fn key(p: &Ipv6Cidr) -> Option<Ipv6Network> {
        Ipv6Network::new(Ipv6Addr::from(p.addr()), p.prefix_len()).ok()
    }
    fn insert(&mut self, k: Ipv6Network, nh: u32) {
        IpNetworkTable::insert(self, k, nh);
    }
    fn remove(&mut self, k: Ipv6Network) {
        IpNetworkTable::remove(self, k);
    }
    fn lookup(&self, a: u128) -> Option<u32> {
        self.longest_match_ipv6(Ipv6Addr::from(a)).map(|(_, v)| *v)
    }
}

/// A peer's row: the table `t` (empty) built from the family's routes one
/// at a time in file order, its single lookups, and 50,000 single-route
/// updates (a remove and an insert each).
fn bench_peer<A: TrieKey, T: PeerTable<A>>(
    mut t: T,
    name: &str,
    f: &Family<'_, A>,
    repeat: usize,
    rng: &mut StdRng,
) -> Row {
    let start = cpu_time();
    for (p, nh) in f.routes {
        if let Some(k) = T::key(p) {
            t.insert(k, *nh);
        }
    }
    let build = (cpu_time() - start).as_secs_f64();
    let single = |a: A| t.lookup(a);
    let (si, _) = measure_lookup(repeat, f.keys_in, single, None);
    let (sr, _) = measure_lookup(repeat, f.keys_rand, single, None);
    let sample = update_sample(f.routes, 50_000, rng);
    let start = cpu_time();
    for (p, nh) in &sample {
        if let Some(k) = T::key(p) {
            t.remove(k);
            t.insert(k, *nh);
        }
    }
    let updates = (2 * sample.len()) as f64 / (cpu_time() - start).as_secs_f64();
    Row {
        name: format!("{name} {}", f.label),
        single_in: Some(si),
        single_rand: Some(sr),
        // The peers' memory is not measured: an RSS delta after other
        // structures were freed reads mostly reused pages.
        memory: None,
        build_s: Some(build),
        inserts: Some(f.routes.len() as f64 / build),
        updates: Some(updates),
        ..Row::default()
    }
}

/// What one `dpdk-test-fib` run printed.
#[derive(Debug, Default, Clone)]
struct DpdkRun {
    tsc_hz: f64,
    fib_add_cycles: Vec<f64>,
    fib_lookup_cycles: Option<f64>,
    lpm_add_cycles: Vec<f64>,
    lpm_lookup_cycles: Option<f64>,
}

fn run_dpdk(eal: &[String], args: &[&str]) -> Result<DpdkRun, String> {
    use std::io::BufRead as _;
    // Through `sh -c 'exec … 2>&1'` so the EAL log (TSC frequency) and the
    // results arrive on one pipe, from the same process.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(if std::env::var("FIB_BENCH_DPDK_CHRT").is_ok() {
            // SCHED_FIFO: DPDK times its lookups with the TSC over 64-key
            // bursts, so every preemption on a busy machine is charged to it;
            // a real-time priority keeps other tasks off its core.
            "exec chrt -f 1 dpdk-test-fib \"$@\" 2>&1"
        } else {
            "exec dpdk-test-fib \"$@\" 2>&1"
        })
        .arg("sh")
        .args(eal)
        // DPDK caps its vector code at 256 bits unless told otherwise, so
        // its AVX-512 lookups run only when asked for.
        .args(
            (!eal
                .iter()
                .any(|a| a.starts_with("--force-max-simd-bitwidth")))
            .then_some("--force-max-simd-bitwidth=512"),
        )
        .arg("--log-level=lib.eal:debug")
        .arg("--")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("dpdk-test-fib: {e}"))?;
    let want_lpm = args.contains(&"-c");
    let mut text = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            text.push_str(&line);
            text.push('\n');
            // Everything after the lookups (the comparison and the deletes,
            // slow for rte_lpm) is not measured here: stop the tool.
            let done = if want_lpm {
                line.starts_with("AVG LPM lookup")
            } else {
                line.starts_with("AVG FIB lookup")
            };
            if done {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut r = DpdkRun::default();
    for line in text.lines() {
        let num = |s: &str| {
            s.split_whitespace()
                .last()
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let Some(rest) = line.split("TSC frequency is ~").nth(1) {
            r.tsc_hz = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
                * 1000.0;
        } else if line.starts_with("AVG FIB add") {
            r.fib_add_cycles.extend(num(line));
        } else if line.starts_with("AVG FIB lookup") {
            r.fib_lookup_cycles = num(line);
        } else if line.starts_with("AVG LPM add") {
            r.lpm_add_cycles.extend(num(line));
        } else if line.starts_with("AVG LPM lookup") {
            r.lpm_lookup_cycles = num(line);
        }
    }
    if r.tsc_hz == 0.0 || r.fib_lookup_cycles.is_none() {
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        return Err(format!(
            "dpdk-test-fib {args:?} failed: {}",
            tail.join(" | ")
        ));
    }
    Ok(r)
}

/// DPDK's ways of looking up, each an entry size (`-e`) and a lookup
/// function (`-v`); every comparison takes the best of them on this CPU.
/// dir24_8: 2-byte entries (fastfwd's next hops are 16-bit too) and the
/// default 4, with each lookup function (three scalar, one AVX-512).
/// trie: 4-byte entries (2-byte ones cannot number the full IPv6 table's
/// tbl8 groups: the tool stops with ENOSPC), scalar and AVX-512 lookups.
const DPDK_LOOKUPS4: &[(&str, &str)] = &[
    ("2", "s1"),
    ("2", "s2"),
    ("2", "s3"),
    ("2", "v"),
    ("4", "s1"),
    ("4", "s2"),
    ("4", "s3"),
    ("4", "v"),
];
const DPDK_LOOKUPS6: &[(&str, &str)] = &[("4", "s"), ("4", "v")];

/// Operations/s from dpdk-test-fib's per-batch cycle averages.
fn mean_rate(tsc_hz: f64, cycles: &[f64]) -> Option<f64> {
    (!cycles.is_empty()).then(|| tsc_hz * cycles.len() as f64 / cycles.iter().sum::<f64>())
}

/// The best of DPDK's lookup variants on one key set.
#[derive(Debug, Default, Clone)]
struct DpdkBest {
    /// Lookups/s of the fastest variant, and its entry size and lookup
    /// function.
    fib: f64,
    variant: (&'static str, &'static str),
    /// rte_lpm / rte_lpm6 lookups/s and adds/s, when asked for.
    lpm: Option<f64>,
    lpm_add: Option<f64>,
    /// The fastest variant's single-route adds/s.
    add: Option<f64>,
    /// Every variant that ran, with its lookups/s.
    rates: Vec<(String, f64)>,
    /// Variants that did not run (the CPU lacks the instructions or the
    /// table does not fit).
    refused: Vec<String>,
}

/// Runs dpdk-test-fib once per lookup variant of the family (`args` holds
/// the family, routes, keys, algorithm and tbl8 groups) and keeps the
/// fastest; with `lpm`, the first variant that runs also times rte_lpm /
/// rte_lpm6 (`-c`).
/// Fails only when no variant runs.
fn dpdk_best(eal: &[String], args: &[&str], v6: bool, lpm: bool) -> Result<DpdkBest, String> {
    let mut best = DpdkBest::default();
    let mut first_error = None;
    for &(entry, lookup) in if v6 { DPDK_LOOKUPS6 } else { DPDK_LOOKUPS4 } {
        let mut a = args.to_vec();
        a.extend(["-e", entry, "-v", lookup]);
        let with_lpm = lpm && best.lpm.is_none();
        if with_lpm {
            a.push("-c");
        }
        let name = format!("-e {entry} -v {lookup}");
        match run_dpdk(eal, &a) {
            Ok(r) => {
                let rate = r.fib_lookup_cycles.map_or(0.0, |c| r.tsc_hz / c);
                if with_lpm {
                    best.lpm = r.lpm_lookup_cycles.map(|c| r.tsc_hz / c);
                    best.lpm_add = mean_rate(r.tsc_hz, &r.lpm_add_cycles);
                }
                if rate > best.fib {
                    best.fib = rate;
                    best.variant = (entry, lookup);
                    best.add = mean_rate(r.tsc_hz, &r.fib_add_cycles);
                }
                best.rates.push((name, rate));
            }
            Err(e) => {
                best.refused.push(name);
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) if best.rates.is_empty() => Err(e),
        _ => Ok(best),
    }
}

fn write_lines(path: &Path, lines: impl Iterator<Item = String>) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for l in lines {
        writeln!(f, "{l}")?;
    }
    f.flush()
}

/// Runs DPDK's FIB and LPM (rte_fib dir24_8 / rte_lpm for IPv4, rte_fib6
/// trie / rte_lpm6 for IPv6) on the same routes and keys, `repeat` times
/// (at most 3), rte_fib's every lookup variant each time; returns (fib row,
/// lpm row, a line naming each variant's median rates). The fib row holds,
/// per key set, the median over repetitions of the fastest variant's rate,
/// and `fib_memory` of the entry size (bytes) of the variant that won on
/// in-table keys most often.
#[allow(clippy::too_many_arguments)]
fn bench_dpdk(
    eal: &[String],
    v6: bool,
    routes: &Path,
    keys_in: &Path,
    keys_rand: &Path,
    repeat: usize,
    fib_memory: impl Fn(usize) -> f64,
) -> Result<(Row, Row, String), String> {
    let mut fib_in = Vec::new();
    let mut fib_rand = Vec::new();
    let mut lpm_in = Vec::new();
    let mut lpm_rand = Vec::new();
    let mut fib_add = Vec::new();
    let mut lpm_add = Vec::new();
    // Per key set: variant -> its rates over the repetitions; the winners.
    let mut by_variant: [BTreeMap<String, Vec<f64>>; 2] = Default::default();
    let mut winners: [Vec<(&str, &str)>; 2] = Default::default();
    let mut refused = Vec::new();
    let (family, algo, tbl8) = if v6 {
        (vec!["-6"], "trie", "400000")
    } else {
        (vec![], "dir", "100000")
    };
    for rep in 0..repeat.min(3) {
        for (set, keys, fib_out, lpm_out) in [
            (0, keys_in, &mut fib_in, &mut lpm_in),
            (1, keys_rand, &mut fib_rand, &mut lpm_rand),
        ] {
            let mut args: Vec<&str> = family.clone();
            let routes_s = routes.to_str().unwrap_or_default();
            let keys_s = keys.to_str().unwrap_or_default();
            args.extend(["-f", routes_s, "-t", keys_s, "-b", algo, "-g", tbl8]);
            // The LPM comparison (-c) is slow to tear down (rte_lpm deletes
            // scan the rules): once per key set.
            let r = dpdk_best(eal, &args, v6, rep == 0)?;
            fib_out.push(r.fib);
            lpm_out.extend(r.lpm);
            fib_add.extend(r.add);
            lpm_add.extend(r.lpm_add);
            for (name, rate) in r.rates {
                by_variant[set].entry(name).or_default().push(rate);
            }
            winners[set].push(r.variant);
            refused = r.refused;
        }
    }
    let med = |v: Vec<f64>| if v.is_empty() { None } else { Some(median(v)) };
    let fam = if v6 { "IPv6" } else { "IPv4" };
    // The variant that won most often on in-table keys names the row.
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for &w in &winners[0] {
        *counts.entry(w).or_default() += 1;
    }
    let (top_entry, top_lookup) = counts
        .iter()
        .max_by_key(|&(_, n)| *n)
        .map_or(("4", "-"), |(&w, _)| w);
    let top = format!("-e {top_entry} -v {top_lookup}");
    let fib = Row {
        name: if v6 {
            format!("DPDK rte_fib6 trie IPv6 (best lookup: {top})")
        } else {
            format!("DPDK rte_fib dir24_8 IPv4 (best lookup: {top})")
        },
        batch_in: med(fib_in),
        batch_rand: med(fib_rand),
        memory: Some(fib_memory(top_entry.parse().unwrap_or(4))),
        memory_note: "tables in use",
        build_s: None,
        inserts: med(fib_add),
        ..Row::default()
    };
    let lpm = Row {
        name: format!("DPDK rte_lpm{} {fam}", if v6 { "6" } else { "" }),
        batch_in: med(lpm_in),
        batch_rand: med(lpm_rand),
        inserts: med(lpm_add),
        ..Row::default()
    };
    let mut line = format!(
        "{} {fam} lookup variants, median M/s in-table / random:",
        if v6 {
            "rte_fib6 trie"
        } else {
            "rte_fib dir24_8"
        }
    );
    for (name, rates) in &by_variant[0] {
        let rand = by_variant[1].get(name).cloned().map(median).unwrap_or(0.0);
        let _ = write!(
            line,
            " `{name}` {:.1} / {:.1};",
            median(rates.clone()) / 1e6,
            rand / 1e6
        );
    }
    if !refused.is_empty() {
        let _ = write!(line, " refused here: {}", refused.join(", "));
    }
    Ok((fib, lpm, line))
}

/// DPDK's EAL arguments and the directory for its route and key files.
fn dpdk_settings() -> (Vec<String>, PathBuf) {
    let eal = std::env::var("FIB_BENCH_DPDK_EAL")
        .unwrap_or_else(|_| "-l 0 --no-pci --no-huge -m 3072".into())
        .split_whitespace()
        .map(String::from)
        .collect();
    let dir = std::env::var("FIB_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("fastfwd-fib-bench"));
    (eal, dir)
}

/// Inserts one at a time into an empty trie in file order (routes/s).
fn file_order_inserts<A: TrieKey>(routes: &[(A::Prefix, u32)]) -> f64 {
    let start = cpu_time();
    let mut t = Poptrie::<A>::new();
    for &(p, nh) in routes {
        t.insert(p, nh);
    }
    let s = (cpu_time() - start).as_secs_f64();
    black_box(t.len());
    routes.len() as f64 / s
}

/// `FIB_BENCH_INSERTS=N`: the insert comparison alone, fastfwd and
/// dpdk-test-fib's "FIB add" alternated `rounds` times per family. The
/// machine's speed drifts between the phases of a full run; pairs taken
/// seconds apart compare better. Reports each pair and the median ratio.
fn inserts_alternated(
    rounds: usize,
    table: &fib::table::RouteFile,
    flag: &str,
    report: &mut String,
) {
    let (eal, dir) = dpdk_settings();
    let r4 = dir.join("routes4.txt");
    let r6 = dir.join("routes6.txt");
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| write_lines(&r4, table.v4.iter().map(|(p, nh)| format!("{p} {nh}"))))
        .and_then(|()| write_lines(&r6, table.v6.iter().map(|(p, nh)| format!("{p} {nh}"))));
    if let Err(e) = written {
        let _ = writeln!(report, "writing {}: {e}", dir.display());
        return;
    }
    table_head(
        report,
        &format!(
            "Inserts into an empty table in file order, alternated with dpdk-test-fib {} ({rounds} rounds)",
            eal.join(" ")
        ),
        &["family"],
        &[
            "round",
            "fastfwd (M/s)",
            "DPDK rte_fib / rte_fib6 add (M/s)",
            "ratio",
        ],
    );
    for (v6, routes) in [(false, &r4), (true, &r6)] {
        let mut ratios = Vec::new();
        for round in 1..=rounds {
            let ours = if v6 {
                file_order_inserts::<u128>(&table.v6)
            } else {
                file_order_inserts::<u32>(&table.v4)
            };
            let mut args: Vec<&str> = if v6 { vec!["-6"] } else { vec![] };
            let routes_s = routes.to_str().unwrap_or_default();
            // A short generated key set: only the adds are read here.
            args.extend(["-f", routes_s, "-l", "65536"]);
            args.extend(if v6 {
                ["-b", "trie", "-g", "400000"]
            } else {
                ["-b", "dir", "-g", "100000"]
            });
            let dpdk = match run_dpdk(&eal, &args) {
                Ok(r) if !r.fib_add_cycles.is_empty() => {
                    let c = r.fib_add_cycles.iter().sum::<f64>() / r.fib_add_cycles.len() as f64;
                    r.tsc_hz / c
                }
                Ok(_) => {
                    let _ = writeln!(report, "dpdk-test-fib printed no FIB add figure");
                    return;
                }
                Err(e) => {
                    let _ = writeln!(report, "{e}");
                    return;
                }
            };
            ratios.push(ours / dpdk);
            let _ = writeln!(
                report,
                "| IPv{} | {round} | {:.2} | {:.2} | {:.2}x |",
                if v6 { 6 } else { 4 },
                ours / 1e6,
                dpdk / 1e6,
                ours / dpdk
            );
        }
        let _ = writeln!(
            report,
            "| IPv{} | median | | | **{:.2}x**{flag} |",
            if v6 { 6 } else { 4 },
            median(ratios)
        );
    }
}

/// The key sets dpdk-test-fib reads, as files beside the route files.
struct DpdkKeys<'a> {
    v4_in: &'a [u32],
    v4_rand: &'a [u32],
    v6_in: &'a [u128],
    v6_rand: &'a [u128],
}

/// Writes `routes4.txt`, `routes6.txt` and `keys{4,6}-{in,rand}.txt` to `dir`.
fn write_dpdk_files(
    dir: &Path,
    table: &fib::table::RouteFile,
    keys: &DpdkKeys<'_>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    write_lines(
        &dir.join("routes4.txt"),
        table.v4.iter().map(|(p, nh)| format!("{p} {nh}")),
    )?;
    write_lines(
        &dir.join("routes6.txt"),
        table.v6.iter().map(|(p, nh)| format!("{p} {nh}")),
    )?;
    for (name, k) in [
        ("keys4-in.txt", keys.v4_in),
        ("keys4-rand.txt", keys.v4_rand),
    ] {
        write_lines(
            &dir.join(name),
            k.iter().map(|a| Ipv4Addr::from(*a).to_string()),
        )?;
    }
    for (name, k) in [
        ("keys6-in.txt", keys.v6_in),
        ("keys6-rand.txt", keys.v6_rand),
    ] {
        write_lines(
            &dir.join(name),
            k.iter().map(|a| Ipv6Addr::from(*a).to_string()),
        )?;
    }
    Ok(())
}

/// `FIB_BENCH_LOOKUPS=N`: the lookup comparison alone, fastfwd's batched
/// lookups and dpdk-test-fib's alternated `rounds` times per family and
/// key set (rte_fib dir24_8 for IPv4; for IPv6 the better of rte_fib6 trie
/// and rte_lpm6; rte_fib's fastest lookup variant, each round). A full run measures every structure in turn
/// over minutes while this VM's speed drifts by tens of percent; a pair
/// taken seconds apart sees nearly the same machine. Reports each pair, the
/// median ratio and the ratios' spread.
fn lookups_alternated(
    rounds: usize,
    table: &fib::table::RouteFile,
    keys: &DpdkKeys<'_>,
    flag: &str,
    report: &mut String,
) {
    let (eal, dir) = dpdk_settings();
    let with_dpdk = std::env::var("FIB_BENCH_NO_DPDK").is_err();
    if with_dpdk {
        if let Err(e) = write_dpdk_files(&dir, table, keys) {
            let _ = writeln!(report, "writing {}: {e}", dir.display());
            return;
        }
        table_head(
            report,
            &format!(
                "Batched lookups, alternated with dpdk-test-fib {} ({rounds} rounds)",
                eal.join(" ")
            ),
            &["family", "keys"],
            &["round", "fastfwd (M/s)", "DPDK (M/s)", "ratio"],
        );
    } else {
        table_head(
            report,
            &format!("Batched lookups, fastfwd alone ({rounds} rounds)"),
            &["family", "keys"],
            &["round", "fastfwd (M/s)"],
        );
    }
    let t4 = Poptrie::<u32>::from_routes(table.v4.iter().copied());
    let t6 = Poptrie::<u128>::from_routes(table.v6.iter().copied());
    let b4 = |k: &[u32], o: &mut [Option<u32>]| t4.lookup_batch(k, o);
    let b6 = |k: &[u128], o: &mut [Option<u32>]| t6.lookup_batch(k, o);
    let sets: [(bool, &str, &str, &dyn Fn() -> f64); 4] = [
        (false, "in-table", "keys4-in.txt", &|| {
            batched_rate(3, keys.v4_in, &b4)
        }),
        (false, "random", "keys4-rand.txt", &|| {
            batched_rate(3, keys.v4_rand, &b4)
        }),
        (true, "in-table", "keys6-in.txt", &|| {
            batched_rate(3, keys.v6_in, &b6)
        }),
        (true, "random", "keys6-rand.txt", &|| {
            batched_rate(3, keys.v6_rand, &b6)
        }),
    ];
    let mut summary = Vec::new();
    // Lookup variants dpdk-test-fib refused (this CPU lacks the vector
    // instructions, or the table does not fit), by family.
    let mut refused: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
    for (v6, label, key_file, ours) in sets {
        let fam = if v6 { "IPv6" } else { "IPv4" };
        let routes = dir.join(if v6 { "routes6.txt" } else { "routes4.txt" });
        let key_path = dir.join(key_file);
        let mut ratios = Vec::new();
        let mut rates = Vec::new();
        for round in 1..=rounds {
            let our = ours();
            if !with_dpdk {
                rates.push(our);
                let _ = writeln!(report, "| {fam} | {label} | {round} | {:.1} |", our / 1e6);
                continue;
            }
            let mut args: Vec<&str> = if v6 { vec!["-6"] } else { vec![] };
            let routes_s = routes.to_str().unwrap_or_default();
            let keys_s = key_path.to_str().unwrap_or_default();
            args.extend(["-f", routes_s, "-t", keys_s]);
            args.extend(if v6 {
                ["-b", "trie", "-g", "400000"]
            } else {
                ["-b", "dir", "-g", "100000"]
            });
            // rte_lpm6 too for IPv6: the goal is against the better of the two.
            let r = match dpdk_best(&eal, &args, v6, v6) {
                Ok(r) => r,
                Err(e) => {
                    let _ = writeln!(report, "{e}");
                    return;
                }
            };
            refused
                .entry(if v6 { "rte_fib6" } else { "rte_fib" })
                .or_default()
                .extend(r.refused.iter().cloned());
            let lpm = r.lpm.unwrap_or(0.0);
            let (peer, which) = if lpm > r.fib {
                (lpm, "rte_lpm6".to_string())
            } else if v6 {
                (
                    r.fib,
                    format!("rte_fib6 `-e {} -v {}`", r.variant.0, r.variant.1),
                )
            } else {
                (
                    r.fib,
                    format!("rte_fib `-e {} -v {}`", r.variant.0, r.variant.1),
                )
            };
            ratios.push(our / peer);
            let _ = writeln!(
                report,
                "| {fam} | {label} | {round} | {:.1} | {which} {:.1} | {:.2}x |",
                our / 1e6,
                peer / 1e6,
                our / peer
            );
        }
        if !with_dpdk {
            let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rates.iter().copied().fold(0.0, f64::max);
            summary.push(format!(
                "| {fam} | {label} | median | **{:.1}** (rounds {:.1}-{:.1}) |",
                median(rates) / 1e6,
                lo / 1e6,
                hi / 1e6
            ));
            continue;
        }
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        let med = median(ratios);
        summary.push(format!(
            "| {fam} | {label} | median | | | **{med:.2}x**{flag} (rounds {lo:.2}-{hi:.2}x, spread {:.0}%) |",
            (hi - lo) / med * 100.0
        ));
    }
    for line in summary {
        let _ = writeln!(report, "{line}");
    }
    for (peer, variants) in refused {
        if !variants.is_empty() {
            let mut v: Vec<String> = variants.into_iter().collect();
            v.sort();
            let _ = writeln!(
                report,
                "{peer}: lookup variants refused here: {}",
                v.join(", ")
            );
        }
    }
}

/// A markdown section title and table header: `left` columns aligned
/// left, then `right` columns aligned right.
fn table_head(report: &mut String, title: &str, left: &[&str], right: &[&str]) {
    let _ = writeln!(report, "\n### {title}\n");
    let names: Vec<&str> = left.iter().chain(right).copied().collect();
    let _ = writeln!(report, "| {} |", names.join(" | "));
    let rules: Vec<&str> = left
        .iter()
        .map(|_| "---")
        .chain(right.iter().map(|_| "---:"))
        .collect();
    let _ = writeln!(report, "| {} |", rules.join(" | "));
}

fn fmt_rate(v: Option<f64>) -> String {
    v.map(|x| format!("{:.1}", x / 1e6))
        .unwrap_or_else(|| "-".into())
}

fn fmt_mib(v: Option<f64>) -> String {
    v.map(|x| format!("{:.1}", x / (1024.0 * 1024.0)))
        .unwrap_or_else(|| "-".into())
}

fn print_table(title: &str, rows: &[Row], out: &mut String) {
    let _ = writeln!(out, "\n### {title}\n");
    let _ = writeln!(
        out,
        "| structure | single, in-table (M/s) | batched, in-table (M/s) | single, random (M/s) | batched, random (M/s) | memory (MiB) | build (s) | inserts, file order (M/s) | delete + re-add (M/s) |"
    );
    let _ = writeln!(
        out,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} {} | {} | {} | {} |",
            r.name,
            fmt_rate(r.single_in),
            fmt_rate(r.batch_in),
            fmt_rate(r.single_rand),
            fmt_rate(r.batch_rand),
            fmt_mib(r.memory),
            if r.memory.is_some() {
                format!("({})", r.memory_note)
            } else {
                String::new()
            },
            r.build_s
                .map(|s| format!("{s:.3}"))
                .unwrap_or_else(|| "-".into()),
            fmt_rate(r.inserts),
            fmt_rate(r.updates),
        );
    }
}

/// Ratios of fastfwd's row (first) against each peer, on every column both
/// have. Lookup ratios use fastfwd's batched rate when the peer's figure is
/// a batched one (DPDK) and its single rate otherwise. `flag` follows each
/// peer's name (empty on a quiet machine).
fn print_ratios(ours: &Row, peers: &[Row], flag: &str, out: &mut String) {
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "\n| fastfwd vs | in-table | random | memory (peer/ours) | inserts | delete + re-add |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | ---: |");
    for p in peers {
        let (oi, orr, pi, pr) = if p.single_in.is_some() {
            (ours.single_in, ours.single_rand, p.single_in, p.single_rand)
        } else {
            (ours.batch_in, ours.batch_rand, p.batch_in, p.batch_rand)
        };
        let _ = writeln!(
            out,
            "| {}{flag} | {} | {} | {} | {} | {} |",
            p.name,
            ratio(oi, pi),
            ratio(orr, pr),
            ratio(p.memory, ours.memory),
            ratio(ours.inserts, p.inserts),
            ratio(ours.updates, p.updates),
        );
    }
}

/// The dir24_8 tables a full table needs at `entry`-byte entries: the
/// 2^24-entry first level plus one 256-entry group per /24 holding longer
/// prefixes. (DPDK reserves all `-g` groups up front; this is the smaller
/// figure.)
fn dir24_8_memory(routes: &[(Ipv4Cidr, u32)], entry: usize) -> f64 {
    let groups: HashSet<u32> = routes
        .iter()
        .filter(|(p, _)| p.prefix_len() > 24)
        .map(|(p, _)| p.addr() >> 8)
        .collect();
    (((1usize << 24) + groups.len() * 256) * entry) as f64
}

/// rte_fib6 trie tables in use at `entry`-byte entries: the 2^24-entry
/// first level plus one 256-entry group per distinct 8-bit step past /24
/// that holds longer prefixes.
fn trie6_memory(routes: &[(Ipv6Cidr, u32)], entry: usize) -> f64 {
    let mut groups: HashSet<(u128, u8)> = HashSet::new();
    for (p, _) in routes {
        let mut level = 24u8;
        while level < p.prefix_len() {
            groups.insert((p.addr().masked(level), level));
            level += 8;
        }
    }
    (((1usize << 24) + groups.len() * 256) * entry) as f64
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is expected.
    let repeat = env_usize("FIB_BENCH_REPEAT", 5).max(1);
    let nkeys = env_usize("FIB_BENCH_KEYS", 1 << 20).max(BATCH) / BATCH * BATCH;
    let table_path = std::env::var("FIB_BENCH_TABLE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/full-table-prefixes.txt.gz")
        });
    let table = match read_routes(&table_path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fib bench: {e}");
            std::process::exit(1);
        }
    };
    let mut report = String::new();
    let load = fastfwd_sys::os::LoadNote::start();
    eprintln!("{}", load.header());
    let _ = writeln!(report, "{}", load.header());
    let _ = writeln!(
        report,
        "table {}: {} IPv4 + {} IPv6 routes, {} next hops derived, {} distinct next hops",
        table_path.display(),
        table.v4.len(),
        table.v6.len(),
        table.derived,
        table.distinct_next_hops()
    );
    let mut rng = StdRng::seed_from_u64(2024);
    let v4_in = keys_inside::<u32>(
        &table.v4,
        nkeys,
        &mut rng,
        |r, a, b| r.random_range(a..=b),
        |p| p.last(),
    );
    let v4_rand: Vec<u32> = (0..nkeys).map(|_| rng.random()).collect();
    let v6_in = keys_inside::<u128>(
        &table.v6,
        nkeys,
        &mut rng,
        |r, a, b| r.random_range(a..=b),
        |p| p.last(),
    );
    let v6_rand: Vec<u128> = (0..nkeys).map(|_| rng.random()).collect();
    let _ = writeln!(
        report,
        "keys: {nkeys} per set; in-table = a random address inside a random table prefix; random = uniform over the whole address space; each rate is the median of {repeat} runs"
    );

    let f4 = Family {
        label: "IPv4",
        routes: &table.v4,
        keys_in: &v4_in,
        keys_rand: &v4_rand,
    };
    let f6 = Family {
        label: "IPv6",
        routes: &table.v6,
        keys_in: &v6_in,
        keys_rand: &v6_rand,
    };

    if let Some(rounds) = std::env::var("FIB_BENCH_INSERTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        inserts_alternated(rounds.max(1), &table, load.ratio_flag(), &mut report);
        let _ = writeln!(report, "{}", load.footer());
        print!("{report}");
        return;
    }

    if let Some(rounds) = std::env::var("FIB_BENCH_LOOKUPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let keys = DpdkKeys {
            v4_in: &v4_in,
            v4_rand: &v4_rand,
            v6_in: &v6_in,
            v6_rand: &v6_rand,
        };
        lookups_alternated(rounds.max(1), &table, &keys, load.ratio_flag(), &mut report);
        let _ = writeln!(report, "{}", load.footer());
        print!("{report}");
        return;
    }

    eprintln!("fastfwd IPv4 ...");
    let (ours4, trie4) = bench_ours(&f4, repeat, &mut rng);
    eprintln!("fastfwd IPv6 ...");
    let (ours6, trie6) = bench_ours(&f6, repeat, &mut rng);

    eprintln!("prefix-trie, ip_network_table ...");
    let pt4 = bench_peer(
        PrefixMap::<(u32, u8), u32>::new(),
        "prefix-trie 0.10",
        &f4,
        repeat,
        &mut rng,
    );
    let pt6 = bench_peer(
        PrefixMap::<(u128, u8), u32>::new(),
        "prefix-trie 0.10",
        &f6,
        repeat,
        &mut rng,
    );
    let int4 = bench_peer(
        IpNetworkTable::new(),
        "ip_network_table 0.2",
        &f4,
        repeat,
        &mut rng,
    );
    let int6 = bench_peer(
        IpNetworkTable::new(),
        "ip_network_table 0.2",
        &f6,
        repeat,
        &mut rng,
    );

    // The peers must agree with fastfwd on the answers.
    {
        let mut m4: PrefixMap<(u32, u8), u32> = PrefixMap::new();
        for (p, nh) in &table.v4 {
            m4.insert((p.addr(), p.prefix_len()), *nh);
        }
        let bad = v4_in
            .iter()
            .chain(&v4_rand)
            .step_by(97)
            .filter(|&&a| m4.get_lpm(&(a, 32)).map(|(_, v)| *v) != trie4.lookup(a))
            .count();
        let mut m6: PrefixMap<(u128, u8), u32> = PrefixMap::new();
        for (p, nh) in &table.v6 {
            m6.insert((p.addr(), p.prefix_len()), *nh);
        }
        let bad6 = v6_in
            .iter()
            .chain(&v6_rand)
            .step_by(97)
            .filter(|&&a| m6.get_lpm(&(a, 128)).map(|(_, v)| *v) != trie6.lookup(a))
            .count();
        let _ = writeln!(
            report,
            "cross-check against prefix-trie: {bad} IPv4 and {bad6} IPv6 disagreements"
        );
    }

    eprintln!("lookups under updates ...");
    // Published every 50 and every 10 ms, the daemon's spacings of the
    // kernel's changes under a long stream and at its start
    // (crates/router/src/batching.rs), then every 1 ms: what the readers
    // lose follows publications more than changes.
    let under = [
        ("IPv4", 50, bench_under_updates(&f4, repeat, 100_000, 50)),
        ("IPv6", 50, bench_under_updates(&f6, repeat, 100_000, 50)),
        ("IPv4", 10, bench_under_updates(&f4, repeat, 100_000, 10)),
        ("IPv6", 10, bench_under_updates(&f6, repeat, 100_000, 10)),
        ("IPv4", 1, bench_under_updates(&f4, repeat, 100_000, 1)),
        ("IPv6", 1, bench_under_updates(&f6, repeat, 100_000, 1)),
    ];

    let mut rows4 = vec![ours4.clone(), pt4, int4];
    let mut rows6 = vec![ours6.clone(), pt6, int6];
    if std::env::var("FIB_BENCH_NO_DPDK").is_err() {
        eprintln!("DPDK dpdk-test-fib ...");
        let (eal, dir) = dpdk_settings();
        let keys = DpdkKeys {
            v4_in: &v4_in,
            v4_rand: &v4_rand,
            v6_in: &v6_in,
            v6_rand: &v6_rand,
        };
        let files = write_dpdk_files(&dir, &table, &keys);
        match files {
            Err(e) => {
                let _ = writeln!(report, "DPDK skipped: writing {}: {e}", dir.display());
            }
            Ok(()) => {
                let _ = writeln!(
                    report,
                    "DPDK: dpdk-test-fib {} (route and key files in {})",
                    eal.join(" "),
                    dir.display()
                );
                match bench_dpdk(
                    &eal,
                    false,
                    &dir.join("routes4.txt"),
                    &dir.join("keys4-in.txt"),
                    &dir.join("keys4-rand.txt"),
                    repeat,
                    |entry| dir24_8_memory(&table.v4, entry),
                ) {
                    Ok((f, l, variants)) => {
                        rows4.extend([f, l]);
                        let _ = writeln!(report, "{variants}");
                    }
                    Err(e) => {
                        let _ = writeln!(report, "DPDK IPv4 failed: {e}");
                    }
                }
                match bench_dpdk(
                    &eal,
                    true,
                    &dir.join("routes6.txt"),
                    &dir.join("keys6-in.txt"),
                    &dir.join("keys6-rand.txt"),
                    repeat,
                    |entry| trie6_memory(&table.v6, entry),
                ) {
                    Ok((f, l, variants)) => {
                        rows6.extend([f, l]);
                        let _ = writeln!(report, "{variants}");
                    }
                    Err(e) => {
                        let _ = writeln!(report, "DPDK IPv6 failed: {e}");
                    }
                }
            }
        }
    }

    print_table("IPv4", &rows4, &mut report);
    print_ratios(&ours4, &rows4[1..], load.ratio_flag(), &mut report);
    print_table("IPv6", &rows6, &mut report);
    print_ratios(&ours6, &rows6[1..], load.ratio_flag(), &mut report);
    let _ = writeln!(
        report,
        "\n### fastfwd under updates (reader snapshot per 64-key batch, in-table keys; {repeat} rounds of an idle reading then one while updating)\n"
    );
    let _ = writeln!(
        report,
        "| family | idle (M/s) | while updating (M/s) | ratio (median of the rounds) | updates achieved (routes/s) | published updates, both copies (M routes/s) |"
    );
    let _ = writeln!(report, "| --- | ---: | ---: | ---: | ---: | ---: |");
    for (fam, tick, (idle, busy, ratio, ach, publ)) in under {
        let why = match tick {
            50 => " (the daemon's spacing under a long stream)",
            10 => " (the daemon's first spacing)",
            _ => "",
        };
        let _ = writeln!(
            report,
            "| {fam}, published every {tick} ms{why}{} | {:.1} | {:.1} | {:.2} | {:.0} | {:.2} |",
            load.ratio_flag(),
            idle / 1e6,
            busy / 1e6,
            ratio,
            ach,
            publ / 1e6
        );
    }
    let m4 = trie4.memory();
    let m6 = trie6.memory();
    let _ = writeln!(
        report,
        "\nfastfwd memory: IPv4 lookup {:.2} MiB ({} nodes, {} leaves) + route copy ~{:.1} MiB; IPv6 lookup {:.2} MiB ({} nodes, {} leaves) + route copy ~{:.1} MiB; a shared FIB keeps two copies",
        m4.lookup_bytes as f64 / 1048576.0,
        m4.nodes,
        m4.leaves,
        m4.control_bytes as f64 / 1048576.0,
        m6.lookup_bytes as f64 / 1048576.0,
        m6.nodes,
        m6.leaves,
        m6.control_bytes as f64 / 1048576.0
    );
    let lengths: BTreeMap<u8, usize> = table.v4.iter().fold(BTreeMap::new(), |mut m, (p, _)| {
        *m.entry(p.prefix_len()).or_default() += 1;
        m
    });
    let _ = writeln!(report, "IPv4 prefix lengths: {lengths:?}");
    let _ = writeln!(report, "{}", load.footer());
    println!("{report}");
}
