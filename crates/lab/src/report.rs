//! The record of a lab run (JSON, serde) and its human-readable forms: a
//! Markdown report and a comparison table in Markdown and plain text.
//!
//! `lab bench` fills a [`LabRun`] (host facts, placement, configuration,
//! every run's raw per-second readings per contender), calls
//! [`LabRun::finish`] to compute each contender's summary and its ministat
//! verdict against the baseline, then writes [`LabRun::to_json`] and
//! [`render_markdown`]. Pure: no file or system access here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::equilibrium::{EquilibriumResult, LatencySummary};
use crate::ministat::{self, Comparison, Confidence, Summary};
use crate::rfc2544::Rfc2544Result;

/// Version of the JSON layout; bump on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Facts about the machine the run was made on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HostInfo {
    /// `uname -r`.
    pub kernel: String,
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// Online CPUs.
    pub cpu_count: u32,
    /// Free-form facts worth keeping (virtualisation, memory, NIC driver).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, String>,
}

/// The fastfwd build that ran the lab.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VersionInfo {
    /// Crate version.
    pub version: String,
    /// `git rev-parse HEAD`, when known.
    pub git_commit: Option<String>,
    /// Whether the work tree had uncommitted changes.
    #[serde(default)]
    pub dirty: bool,
}

/// Which cores a process (or kernel thread) was given, and how busy they were.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CorePlacement {
    /// "generator", "dut forwarding", "d0 NAPI thread", "sink" …
    pub role: String,
    /// Process or thread name and id, when meaningful.
    pub process: Option<String>,
    pub cores: Vec<u32>,
    /// Busy share of those cores during the measurement, percent.
    pub busy_pct: Option<f64>,
}

/// How the run was configured.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunConfig {
    /// Ethernet frame length without FCS, bytes.
    pub frame_len: u16,
    /// IP version of the traffic (4 or 6).
    pub ip_version: u8,
    /// Distinct flows (5-tuples) the generator cycles through.
    pub flows: u64,
    /// Length of each trial, seconds.
    pub trial_s: f64,
    /// Repeats per contender.
    pub trials: u32,
    /// Offered load, packets per second (`None`: as fast as the generator can).
    pub offered_pps: Option<u64>,
    /// Seconds skipped at the start and end of each trial's readings.
    pub warmup_s: u32,
    pub cooldown_s: u32,
    /// Routes loaded into the device under test.
    pub routes: Option<u64>,
    /// Confidence level of the verdicts.
    pub confidence: Confidence,
    /// Everything else (topology, nftables preset, generator options …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, String>,
}

/// One measured run of one contender.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunRecord {
    /// Order in the whole interleaved run (0-based), so drifts show.
    pub sequence: u32,
    pub offered_pps: u64,
    /// The generator's achieved send rate.
    pub generator_pps: u64,
    pub attempted: u64,
    pub received: u64,
    pub lost: u64,
    /// The receiver's per-second readings after warm-up and cool-down.
    pub rx_per_second: Vec<u64>,
    /// The generator's per-second readings, when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tx_per_second: Vec<u64>,
    /// The run's forwarding rate: median of the non-zero per-second
    /// readings (see [`RunRecord::forwarding_pps`]).
    pub forwarding_pps: u64,
    pub latency: Option<LatencySummary>,
    /// Latency histogram: (bucket upper bound in ns, packets), for plots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_histogram: Vec<(u64, u64)>,
    /// The generator could not reach the offered load.
    #[serde(default)]
    pub generator_limited: bool,
}

impl RunRecord {
    /// Median of the non-zero per-second readings, as equilibrium uses;
    /// 0 when there are none.
    pub fn compute_forwarding_pps(rx_per_second: &[u64]) -> u64 {
        crate::equilibrium::median_nonzero(rx_per_second).unwrap_or(0)
    }
}

/// One point of a forwarding rate vs offered load curve.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LoadPoint {
    pub offered_pps: u64,
    pub forwarding_pps: u64,
    pub loss_ratio: f64,
}

/// Statistics over a contender's runs' forwarding rates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateSummary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub avg: f64,
    pub stddev: f64,
    /// `(max - min) / median`, percent.
    pub spread_pct: f64,
}

impl RateSummary {
    /// Summary of some rates; `None` when there are none.
    pub fn of(rates: &[f64]) -> Option<RateSummary> {
        if rates.is_empty() {
            return None;
        }
        let mut v = rates.to_vec();
        v.sort_by(f64::total_cmp);
        let s: Summary = Summary::of(&v);
        Some(RateSummary {
            n: s.n,
            median: s.median,
            min: s.min,
            max: s.max,
            avg: s.avg,
            stddev: s.stddev,
            spread_pct: if s.median != 0.0 {
                (s.max - s.min) / s.median * 100.0
            } else {
                0.0
            },
        })
    }
}

/// The ministat verdict of a contender against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub baseline: String,
    /// Median rate ratio, contender / baseline.
    pub ratio: f64,
    /// `None` when either side has fewer than 3 runs.
    pub comparison: Option<Comparison>,
}

impl Verdict {
    /// "+12.3% ± 4.5% (95%)", "no difference (95%)", or "too few runs".
    pub fn short(&self) -> String {
        match &self.comparison {
            None => "too few runs for a t-test".into(),
            Some(c) if c.proven => format!(
                "{:+.1}% ± {:.1}% ({}%)",
                c.difference_pct,
                c.error_pct,
                c.confidence.percent()
            ),
            Some(c) => format!("no difference proven ({}%)", c.confidence.percent()),
        }
    }
}

/// Everything measured for one contender (kernel forwarding, fastfwd AF_XDP …).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContenderResult {
    /// Short name used in tables and plots ("kernel", "fastfwd-afxdp").
    pub name: String,
    /// What it is and how it was set up.
    pub description: String,
    /// Configuration specific to this contender (firewall preset …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    pub runs: Vec<RunRecord>,
    /// Filled by [`LabRun::finish`].
    pub summary: Option<RateSummary>,
    /// Filled by [`LabRun::finish`]; `None` for the baseline itself.
    pub verdict: Option<Verdict>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_curve: Vec<LoadPoint>,
    pub equilibrium: Option<EquilibriumResult>,
    pub rfc2544: Option<Rfc2544Result>,
    /// Anything worth saying next to the figures ("limited by generator").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ContenderResult {
    /// The runs' forwarding rates, in run order.
    pub fn rates(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.forwarding_pps as f64).collect()
    }
}

/// The whole record of a lab run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LabRun {
    pub schema_version: u32,
    /// Title of the report.
    pub title: String,
    /// When the run started, RFC 3339 (the caller reads the clock).
    pub started: String,
    /// How long it took, seconds.
    pub duration_s: f64,
    pub host: HostInfo,
    pub fastfwd: VersionInfo,
    pub placement: Vec<CorePlacement>,
    pub config: RunConfig,
    /// The generator's own maximum rate into a sink with nothing in
    /// between, packets per second.
    pub generator_max_pps: Option<u64>,
    /// Name of the contender the others are compared with (the kernel).
    pub baseline: String,
    pub contenders: Vec<ContenderResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl LabRun {
    /// An empty record with the current schema version.
    pub fn new(title: impl Into<String>) -> LabRun {
        LabRun {
            schema_version: SCHEMA_VERSION,
            title: title.into(),
            ..LabRun::default()
        }
    }

    /// Compute every contender's summary and its verdict against the baseline.
    pub fn finish(&mut self) {
        let confidence = self.config.confidence;
        for c in &mut self.contenders {
            c.summary = RateSummary::of(&c.rates());
        }
        let base = self
            .contenders
            .iter()
            .find(|c| c.name == self.baseline)
            .map(|c| (c.rates(), c.summary));
        for c in &mut self.contenders {
            c.verdict = None;
            if c.name == self.baseline {
                continue;
            }
            let Some((base_rates, Some(base_summary))) = &base else {
                continue;
            };
            let Some(summary) = c.summary else { continue };
            let comparison = if base_rates.len() >= ministat::MIN_VALUES
                && c.runs.len() >= ministat::MIN_VALUES
            {
                let mut a = c.rates();
                a.sort_by(f64::total_cmp);
                let mut b = base_rates.clone();
                b.sort_by(f64::total_cmp);
                Some(ministat::compare(
                    &Summary::of(&a),
                    &Summary::of(&b),
                    confidence,
                ))
            } else {
                None
            };
            c.verdict = Some(Verdict {
                baseline: self.baseline.clone(),
                ratio: if base_summary.median != 0.0 {
                    summary.median / base_summary.median
                } else {
                    f64::NAN
                },
                comparison,
            });
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    pub fn from_json(text: &str) -> Result<LabRun, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Column values of the comparison table, one row per contender.
fn table_rows(run: &LabRun) -> Vec<[String; 7]> {
    run.contenders
        .iter()
        .map(|c| {
            let (median, range, spread) = match &c.summary {
                Some(s) => (
                    kpps(s.median),
                    format!("{}-{}", kpps(s.min), kpps(s.max)),
                    format!("{:.1}%", s.spread_pct),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let (ratio, verdict) = match &c.verdict {
                Some(v) => (format!("{:.2}x", v.ratio), v.short()),
                None if c.name == run.baseline => ("1.00x".into(), "baseline".into()),
                None => ("-".into(), "-".into()),
            };
            [
                c.name.clone(),
                c.runs.len().to_string(),
                median,
                range,
                spread,
                ratio,
                verdict,
            ]
        })
        .collect()
}

const TABLE_HEAD: [&str; 7] = [
    "contender",
    "runs",
    "median Kpps",
    "min-max Kpps",
    "spread",
    "vs baseline",
    "verdict",
];

fn kpps(pps: f64) -> String {
    format!("{:.1}", pps / 1000.0)
}

/// The comparison table in Markdown.
pub fn comparison_table_markdown(run: &LabRun) -> String {
    let mut s = format!("| {} |\n", TABLE_HEAD.join(" | "));
    s.push_str("|---|---:|---:|---:|---:|---:|---|\n");
    for row in table_rows(run) {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    s
}

/// The comparison table in plain text, columns aligned.
pub fn comparison_table_text(run: &LabRun) -> String {
    let rows = table_rows(run);
    let mut widths: Vec<usize> = TABLE_HEAD.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            // Names and verdicts left-aligned, numbers right-aligned.
            if i == 0 || i == cells.len() - 1 {
                l.push_str(cell);
                l.push_str(&" ".repeat(pad));
            } else {
                l.push_str(&" ".repeat(pad));
                l.push_str(cell);
            }
            if i + 1 < cells.len() {
                l.push_str("  ");
            }
        }
        l.trim_end().to_string() + "\n"
    };
    let head: Vec<String> = TABLE_HEAD.iter().map(|h| h.to_string()).collect();
    let mut s = line(&head);
    let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    s.push_str(&"-".repeat(total));
    s.push('\n');
    for row in &rows {
        s.push_str(&line(row));
    }
    s
}

/// Image files the Markdown report links to, relative to the report.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReportFigures {
    pub rate_vs_load: Option<String>,
    pub latency: Option<String>,
    pub repeated_runs: Option<String>,
}

/// The Markdown report: setup, comparison table, per-contender details,
/// figures and raw readings.
pub fn render_markdown(run: &LabRun, figures: &ReportFigures) -> String {
    let mut s = String::new();
    s.push_str(&format!("# {}\n\n", run.title));
    s.push_str("## Setup\n\n");
    let commit = run.fastfwd.git_commit.as_deref().unwrap_or("unknown");
    s.push_str(&format!(
        "- fastfwd {} (commit {}{})\n",
        run.fastfwd.version,
        commit,
        if run.fastfwd.dirty {
            ", uncommitted changes"
        } else {
            ""
        }
    ));
    s.push_str(&format!(
        "- started {}, took {:.0} s\n",
        run.started, run.duration_s
    ));
    s.push_str(&format!("- kernel {}\n", run.host.kernel));
    s.push_str(&format!(
        "- CPU {} x {}\n",
        run.host.cpu_count, run.host.cpu_model
    ));
    for (k, v) in &run.host.extra {
        s.push_str(&format!("- {k}: {v}\n"));
    }
    let c = &run.config;
    s.push_str(&format!(
        "- IPv{} traffic, {}-byte frames (without FCS), {} flows\n",
        c.ip_version, c.frame_len, c.flows
    ));
    s.push_str(&format!(
        "- {} runs per contender of {} s each (skipping {} s warm-up, {} s cool-down), interleaved\n",
        c.trials, c.trial_s, c.warmup_s, c.cooldown_s
    ));
    match c.offered_pps {
        Some(p) => s.push_str(&format!("- offered load {} Kpps\n", kpps(p as f64))),
        None => s.push_str("- offered load: as fast as the generator can send\n"),
    }
    if let Some(r) = c.routes {
        s.push_str(&format!("- {r} routes in the device under test\n"));
    }
    match run.generator_max_pps {
        Some(g) => s.push_str(&format!(
            "- generator's own maximum: {} Kpps\n",
            kpps(g as f64)
        )),
        None => s.push_str("- generator's own maximum: not measured\n"),
    }
    for (k, v) in &c.extra {
        s.push_str(&format!("- {k}: {v}\n"));
    }
    if !run.placement.is_empty() {
        s.push_str("\n| role | process | cores | busy |\n|---|---|---|---:|\n");
        for p in &run.placement {
            let cores: Vec<String> = p.cores.iter().map(u32::to_string).collect();
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                p.role,
                p.process.as_deref().unwrap_or("-"),
                cores.join(","),
                p.busy_pct.map_or("-".into(), |b| format!("{b:.0}%"))
            ));
        }
    }
    s.push_str(&format!(
        "\n## Results\n\nForwarding rate per run: median of the receiver's non-zero per-second readings. \
         Verdicts: Student's t against `{}` at {}% confidence.\n\n",
        run.baseline,
        c.confidence.percent()
    ));
    s.push_str(&comparison_table_markdown(run));
    if let Some(g) = run.generator_max_pps {
        let limited: Vec<&str> = run
            .contenders
            .iter()
            .filter(|k| {
                k.runs.iter().any(|r| r.generator_limited)
                    || k.summary.is_some_and(|m| m.max >= 0.99 * g as f64)
            })
            .map(|k| k.name.as_str())
            .collect();
        if !limited.is_empty() {
            s.push_str(&format!(
                "\nLimited by generator (at or near its own maximum): {}.\n",
                limited.join(", ")
            ));
        }
    }
    for note in &run.notes {
        s.push_str(&format!("\n{note}\n"));
    }
    let figs = [
        ("Forwarding rate vs offered load", &figures.rate_vs_load),
        ("Latency distribution", &figures.latency),
        ("Repeated runs", &figures.repeated_runs),
    ];
    if figs.iter().any(|(_, f)| f.is_some()) {
        s.push_str("\n## Figures\n\n");
        for (title, f) in figs {
            if let Some(path) = f {
                s.push_str(&format!("![{title}]({path})\n\n"));
            }
        }
    }
    s.push_str("\n## Contenders\n");
    for k in &run.contenders {
        s.push_str(&format!("\n### {}\n\n{}\n\n", k.name, k.description));
        for (key, v) in &k.config {
            s.push_str(&format!("- {key}: {v}\n"));
        }
        if let Some(v) = &k.verdict {
            if let Some(cmp) = &v.comparison {
                s.push_str("\n```\n");
                s.push_str(&cmp.render());
                s.push_str("```\n");
            }
        }
        if let Some(e) = &k.equilibrium {
            s.push_str(&format!(
                "\nEquilibrium: {} Kpps (maximum seen {} Kpps, {} iterations)\n",
                e.estimated_kpps,
                e.max_seen_kpps,
                e.iterations.len()
            ));
        }
        if let Some(r) = &k.rfc2544 {
            s.push_str(&rfc2544_table_markdown(r));
        }
        for n in &k.notes {
            s.push_str(&format!("\n{n}\n"));
        }
        if !k.runs.is_empty() {
            s.push_str("\n| run | offered Kpps | sent Kpps | forwarded Kpps | lost | latency p50 / p99.9 µs | per-second Kpps |\n");
            s.push_str("|---:|---:|---:|---:|---:|---:|---|\n");
            for r in &k.runs {
                let lat = r.latency.map_or("-".into(), |l| {
                    format!(
                        "{:.1} / {:.1}",
                        l.median_ns as f64 / 1e3,
                        l.p999_ns as f64 / 1e3
                    )
                });
                let per_s: Vec<String> = r
                    .rx_per_second
                    .iter()
                    .map(|v| format!("{:.0}", *v as f64 / 1e3))
                    .collect();
                s.push_str(&format!(
                    "| {} | {} | {}{} | {} | {} | {} | {} |\n",
                    r.sequence,
                    kpps(r.offered_pps as f64),
                    kpps(r.generator_pps as f64),
                    if r.generator_limited {
                        " (gen-limited)"
                    } else {
                        ""
                    },
                    kpps(r.forwarding_pps as f64),
                    r.lost,
                    lat,
                    per_s.join(" ")
                ));
            }
        }
    }
    s
}

/// An RFC 2544 result as a Markdown table, one row per frame size.
pub fn rfc2544_table_markdown(r: &Rfc2544Result) -> String {
    let mut s = format!(
        "\nRFC 2544 throughput at loss ratio <= {}:\n\n| frame | link max Kpps | offered Kpps | sent Kpps | received Kpps | lost | latency p50 / p99.9 µs | PDV µs | trials |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        r.config.loss_ratio
    );
    for f in &r.frames {
        let trials = format!("{} x {} s", f.trials.len(), f.trial_s);
        match &f.found {
            Some(x) => {
                let lat = x.latency.map_or("-".into(), |l| {
                    format!(
                        "{:.1} / {:.1}",
                        l.median_ns as f64 / 1e3,
                        l.p999_ns as f64 / 1e3
                    )
                });
                let pdv = x
                    .pdv_ns
                    .map_or("-".into(), |p| format!("{:.1}", p as f64 / 1e3));
                s.push_str(&format!(
                    "| {} | {} | {} | {}{} | {} | {} | {} | {} | {} |\n",
                    f.frame_size,
                    kpps(f.theoretical_max_pps as f64),
                    kpps(x.offered_pps as f64),
                    kpps(x.sent_pps as f64),
                    if x.generator_limited {
                        " (gen-limited)"
                    } else {
                        ""
                    },
                    kpps(x.received_pps),
                    x.lost,
                    lat,
                    pdv,
                    trials
                ));
            }
            None => s.push_str(&format!(
                "| {} | {} | no rate met the loss ratio | | | | | | {} |\n",
                f.frame_size,
                kpps(f.theoretical_max_pps as f64),
                trials
            )),
        }
    }
    s
}
