//! The classifier benchmark: lookups per second vs rule count for the
//! compiled classifier, a linear first-match scan and DPDK's rte_acl
//! (`dpdk-test-acl`), on the same generated rules and trace, measured
//! interleaved in one run. Used by `fastfwd firewall bench` and by
//! `cargo bench -p fastfwd-firewall --bench classifier`.

use crate::{
    Chain, Firewall, InterfaceMap, LinearFirewall, RuleCounters, Verdict, parse_rules, rulegen,
};
use serde::Serialize;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub rules: Vec<usize>,
    pub trace: usize,
    pub repeat: usize,
    pub seconds: f64,
    pub seed: u64,
    /// Path of dpdk-test-acl; empty to skip DPDK.
    pub dpdk: String,
    pub dpdk_alg: Vec<String>,
    pub workdir: PathBuf,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            rules: vec![1, 100, 1000, 10000],
            trace: 65536,
            repeat: 5,
            seconds: 0.5,
            seed: 1,
            dpdk: "dpdk-test-acl".into(),
            dpdk_alg: dpdk_algs_for_this_cpu(),
            workdir: std::env::temp_dir().join("fastfwd-bench-firewall"),
        }
    }
}

/// The `dpdk-test-acl --alg` methods this CPU can run: the peer is its best
/// one, not only the scalar one.
pub fn dpdk_algs_for_this_cpu() -> Vec<String> {
    let mut algs = vec!["scalar".to_string()];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.1") {
            algs.push("sse".into());
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            algs.push("avx2".into());
        }
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            algs.push("avx512x16".into());
            algs.push("avx512x32".into());
        }
    }
    #[cfg(target_arch = "aarch64")]
    algs.push("neon".into());
    algs
}

impl BenchRow {
    /// DPDK's fastest method on this row and its rate (Mpps).
    pub fn dpdk_best(&self) -> Option<(&str, f64)> {
        self.dpdk_mpps
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(alg, r)| (alg.as_str(), *r))
    }
}

/// Why the benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("generated rules do not parse: {0}")]
    Rules(#[from] crate::RuleError),
    #[error("compile: {0}")]
    Compile(#[from] crate::CompileError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("dpdk-test-acl: {0}")]
    Dpdk(String),
}

/// Figures for one rule count (rates are medians).
#[derive(Debug, Serialize, Default, Clone)]
pub struct BenchRow {
    pub rules: usize,
    pub compile_ms: f64,
    pub memory_kib: usize,
    pub bit_vector: bool,
    pub compiled_mpps: f64,
    pub compiled_ns: f64,
    pub linear_mpps: f64,
    /// (method, Mpps) per DPDK classify method.
    pub dpdk_mpps: Vec<(String, f64)>,
    pub dpdk_agree: Option<bool>,
    pub linear_agree: bool,
    /// Share of trace packets that matched a rule (not the policy).
    pub trace_hits: f64,
    /// Every measurement, in order, for ministat.
    pub compiled_samples: Vec<f64>,
    pub linear_samples: Vec<f64>,
    pub dpdk_samples: Vec<Vec<f64>>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Packets per second of `f` run over `keys` repeatedly for about `secs`.
fn rate(keys: usize, secs: f64, mut f: impl FnMut() -> u64) -> f64 {
    let t = Instant::now();
    let mut done = 0u64;
    let mut sink = 0u64;
    while done == 0 || t.elapsed().as_secs_f64() < secs {
        sink = sink.wrapping_add(f());
        done += keys as u64;
    }
    black_box(sink);
    done as f64 / t.elapsed().as_secs_f64()
}

#[allow(clippy::too_many_arguments)]
fn run_dpdk(
    bin: &str,
    alg: &str,
    rules_file: &Path,
    trace_file: &Path,
    rules: usize,
    trace: usize,
    iters: usize,
    verbose: u32,
) -> Result<String, BenchError> {
    let mut cmd = Command::new(bin);
    cmd.args(["-l", "0", "--no-pci", "--no-huge", "-m", "1024"])
        .arg(format!("--file-prefix=fastfwd-fw-{}", std::process::id()))
        .arg("--log-level=lib.eal:error");
    // EAL caps vector width at 256 bits unless told otherwise, and then
    // refuses to set up the AVX-512 classify methods.
    if alg.starts_with("avx512") {
        cmd.arg("--force-max-simd-bitwidth=512");
    }
    let out = cmd
        .arg("--")
        .arg(format!("--rulesf={}", rules_file.display()))
        .arg(format!("--tracef={}", trace_file.display()))
        .arg(format!("--rulenum={}", rules.max(1)))
        .arg(format!("--tracenum={trace}"))
        .arg(format!("--iter={iters}"))
        .arg(format!("--alg={alg}"))
        .arg(format!("--verbose={verbose}"))
        .output()
        .map_err(|e| BenchError::Dpdk(format!("running {bin}: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(BenchError::Dpdk(format!(
            "{bin} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(stdout)
}

fn dpdk_pps(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .find(|l| l.contains("search_ip5tuples") && l.contains("pkt/sec"))
        .and_then(|l| l.trim_end().strip_suffix("pkt/sec"))
        .and_then(|l| l.rsplit(", ").next())
        .and_then(|v| v.trim().parse().ok())
}

/// Prints the table header [`print_row`] fills.
pub fn print_header() {
    println!(
        "{:>6} {:>9} {:>9} {:>4} {:>10} {:>7} {:>10} {:>17} {:>8} {:>8} {:>6}",
        "rules",
        "build ms",
        "mem KiB",
        "bv",
        "fastfwd",
        "ns/pkt",
        "linear",
        "dpdk (best alg)",
        "vs lin",
        "vs dpdk",
        "agree"
    );
}

/// Prints one row with the ratios; the DPDK column is its best method.
pub fn print_row(row: &BenchRow) {
    let (alg, d) = row.dpdk_best().unwrap_or(("", 0.0));
    println!(
        "{:>6} {:>9.1} {:>9} {:>4} {:>8.2} M {:>7.1} {:>8.3} M {:>17} {:>7.1}x {:>8} {:>6}",
        row.rules,
        row.compile_ms,
        row.memory_kib,
        if row.bit_vector { "yes" } else { "no" },
        row.compiled_mpps,
        row.compiled_ns,
        row.linear_mpps,
        if d > 0.0 {
            format!("{d:.2} M {alg}")
        } else {
            "-".into()
        },
        row.compiled_mpps / row.linear_mpps,
        if d > 0.0 {
            format!("{:.2}x", row.compiled_mpps / d)
        } else {
            "-".into()
        },
        match (row.linear_agree, row.dpdk_agree) {
            (true, Some(true)) | (true, None) => "yes",
            _ => "NO",
        }
    );
    if row.dpdk_mpps.len() > 1 {
        let each: Vec<String> = row
            .dpdk_mpps
            .iter()
            .map(|(alg, r)| format!("{alg} {r:.2} M"))
            .collect();
        println!("{:>6} dpdk-test-acl by method: {}", "", each.join(", "));
    }
}

/// Runs the benchmark, calling `on_row` as each rule count finishes.
pub fn run(
    cfg: &BenchConfig,
    mut on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, BenchError> {
    std::fs::create_dir_all(&cfg.workdir)?;
    let mut rows = Vec::new();
    for &n in &cfg.rules {
        let gen_rules = rulegen::rules(n, cfg.seed.wrapping_add(n as u64));
        let set = parse_rules(&rulegen::to_rule_text(&gen_rules), "generated")?;
        let ifaces = InterfaceMap::new();
        let t = Instant::now();
        let fw = Firewall::compile(&set, &ifaces)?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let lin = LinearFirewall::new(&set, &ifaces);
        let keys = rulegen::trace(&gen_rules, cfg.trace, cfg.seed ^ 0x5eed);
        let mut out = vec![Verdict::default(); keys.len()];
        let mut counters = RuleCounters::default();

        // Agreement with the linear scan over the whole trace.
        fw.classify_batch(Chain::Forward, &keys, &mut out, &mut counters);
        let linear_agree = keys
            .iter()
            .zip(&out)
            .all(|(k, v)| lin.first_match(Chain::Forward, k) == v.rule);
        let hits = out.iter().filter(|v| (v.rule as usize) < n).count() as f64 / keys.len() as f64;
        // The linear scan gets a slice of the trace sized to its speed.
        let lin_keys = &keys[..keys.len().min((2_000_000 / n.max(1)).max(256))];
        let mut row = BenchRow {
            rules: n,
            compile_ms,
            memory_kib: fw.build_stats().bytes / 1024,
            bit_vector: fw.build_stats().classifiers[0].bit_vector,
            linear_agree,
            trace_hits: hits,
            ..BenchRow::default()
        };
        let files = if cfg.dpdk.is_empty() {
            None
        } else {
            let rf = cfg.workdir.join(format!("rules-{n}.cb"));
            let tf = cfg.workdir.join(format!("trace-{n}.cb"));
            std::fs::write(&rf, rulegen::to_classbench(&gen_rules))?;
            std::fs::write(&tf, rulegen::to_classbench_trace(&keys))?;
            // Check DPDK's answers against ours on the first packets.
            let sample = keys.len().min(4096);
            let sf = cfg.workdir.join(format!("trace-{n}-sample.cb"));
            std::fs::write(&sf, rulegen::to_classbench_trace(&keys[..sample]))?;
            let v = run_dpdk(&cfg.dpdk, "scalar", &rf, &sf, n, sample, 1, 3)?;
            let got: Vec<u32> = v
                .lines()
                .filter(|l| l.starts_with("ipv4_5tuple:"))
                .filter_map(|l| l.rsplit("result: ").next()?.trim().parse().ok())
                .collect();
            let agree = got.len() == sample
                && got.iter().zip(&out[..sample]).all(|(&d, ours)| {
                    let ours = if (ours.rule as usize) < n {
                        ours.rule
                    } else {
                        u32::MAX
                    };
                    d == ours
                });
            row.dpdk_agree = Some(agree);
            Some((rf, tf))
        };
        // Measurements interleaved so the peers share the machine's noise.
        row.dpdk_samples = vec![Vec::new(); cfg.dpdk_alg.len()];
        for _ in 0..cfg.repeat {
            row.compiled_samples.push(rate(keys.len(), cfg.seconds, || {
                let mut s = 0u64;
                for (kb, ob) in keys.chunks(64).zip(out.chunks_mut(64)) {
                    fw.classify_batch(Chain::Forward, kb, ob, &mut counters);
                    s = s.wrapping_add(ob[0].rule as u64);
                }
                s
            }));
            row.linear_samples
                .push(rate(lin_keys.len(), cfg.seconds, || {
                    lin_keys.iter().fold(0u64, |s, k| {
                        s.wrapping_add(lin.first_match(Chain::Forward, k) as u64)
                    })
                }));
            if let Some((rf, tf)) = &files {
                // Iterations so a run lasts about `seconds` at ~5 Mpps.
                let iters = ((cfg.seconds * 5e6) / keys.len() as f64).ceil().max(1.0) as usize;
                for (alg, r) in cfg.dpdk_alg.iter().zip(row.dpdk_samples.iter_mut()) {
                    let s = run_dpdk(&cfg.dpdk, alg, rf, tf, n, keys.len(), iters, 1)?;
                    r.push(
                        dpdk_pps(&s)
                            .ok_or_else(|| BenchError::Dpdk(format!("no rate in output:\n{s}")))?,
                    );
                }
            }
        }
        let compiled = median(&row.compiled_samples);
        row.compiled_mpps = compiled / 1e6;
        row.compiled_ns = 1e9 / compiled;
        row.linear_mpps = median(&row.linear_samples) / 1e6;
        row.dpdk_mpps = cfg
            .dpdk_alg
            .iter()
            .zip(&row.dpdk_samples)
            .filter(|(_, r)| !r.is_empty())
            .map(|(alg, r)| (alg.clone(), median(r) / 1e6))
            .collect();
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}
