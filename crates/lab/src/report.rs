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
use crate::plot::{
    BoxChart, Distribution, DistributionKind, Group, LatencyChart, LineChart, Series,
};
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
    /// The receiver's per-second readings, every whole second of the run
    /// (warm-up included; `forwarding_pps` leaves it out).
    pub rx_per_second: Vec<u64>,
    /// The generator's per-second readings, when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tx_per_second: Vec<u64>,
    /// The run's forwarding rate: median of the non-zero per-second
    /// readings (see [`RunRecord::compute_forwarding_pps`]).
    pub forwarding_pps: u64,
    pub latency: Option<LatencySummary>,
    /// Latency histogram: (bucket upper bound in ns, packets), for plots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_histogram: Vec<(u64, u64)>,
    /// The generator could not reach the offered load (see
    /// [`RunRecord::limited_by_generator`] for what that means for the result).
    #[serde(default)]
    pub generator_limited: bool,
    /// The machine's speed on the forwarding core just before this run
    /// ([`crate::probe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_probe: Option<crate::probe::SpeedProbe>,
    /// Packets each member of the dut's egress LAG sent in this run (the
    /// `lag` scenario; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub member_tx: Vec<u64>,
}

impl RunRecord {
    /// Median of the non-zero per-second readings, as equilibrium uses;
    /// 0 when there are none.
    pub fn compute_forwarding_pps(rx_per_second: &[u64]) -> u64 {
        crate::equilibrium::median_nonzero(rx_per_second).unwrap_or(0)
    }

    /// The generator, not the device, set this run's rate: it fell short of
    /// the offered load and the device forwarded (within 1%) all it sent,
    /// the equilibrium search's rule. A device that drops part of what a
    /// short generator sends is still the limit.
    pub fn limited_by_generator(&self) -> bool {
        self.generator_limited && self.forwarding_pps as f64 >= 0.99 * self.generator_pps as f64
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
    /// "+12.3% ± 4.5% (95%)", "no difference proven (95%)", or "too few
    /// runs for a t-test".
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
    /// The forwarding core's cost per packet at a load every contender
    /// sustains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_packet: Option<CpuPerPacket>,
    /// Control-socket round trips during a trial at the generator's
    /// maximum (fastfwd contenders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_latency: Option<ControlLatency>,
    /// Receive livelock, checked on medians of repeated trials at the load
    /// curve's peak and at the highest offered load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub livelock: Option<LivelockCheck>,
    /// Fixed-load runs on the run's other input (the input-mode matrix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_input: Option<InputRuns>,
    /// Anything worth saying next to the figures ("limited by generator").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Round trips of control-socket requests while the router is flooded.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ControlLatency {
    /// Requests answered.
    pub requests: usize,
    /// The request each was (`show_interfaces`).
    pub request: String,
    /// Median, 99th percentile and largest round trip, µs.
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// The flood: offered and forwarded during the trial, pps.
    pub offered_pps: u64,
    pub forwarded_pps: u64,
}

impl ControlLatency {
    /// From the round trips of one trial.
    pub fn new(
        request: &str,
        mut trips_us: Vec<f64>,
        offered_pps: u64,
        forwarded_pps: u64,
    ) -> Self {
        trips_us.sort_by(f64::total_cmp);
        let q = |f: f64| {
            trips_us
                .get(((trips_us.len() as f64 * f).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        Self {
            requests: trips_us.len(),
            request: request.into(),
            p50_us: q(0.5),
            p99_us: q(0.99),
            max_us: trips_us.last().copied().unwrap_or(0.0),
            offered_pps,
            forwarded_pps,
        }
    }
}

/// The forwarding core's busy share over the packets it forwarded, at a
/// fixed offered load: holds where the generator, not the router, tops out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuPerPacket {
    /// Offered load, pps.
    pub offered_pps: u64,
    /// Forwarded (received at the sink), pps: the median trial's.
    pub forwarded_pps: u64,
    /// The forwarding core's busy share, percent: the median trial's.
    pub busy_pct: f64,
    /// busy share x 1e9 / forwarded pps: the median trial's.
    pub ns_per_packet: f64,
    /// Each trial, in the order they ran (one per activation of the
    /// contender, spread over the run).
    #[serde(default)]
    pub trials: Vec<CpuTrial>,
}

/// One CPU-per-packet trial.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuTrial {
    pub forwarded_pps: u64,
    pub busy_pct: f64,
    pub ns_per_packet: f64,
}

impl CpuPerPacket {
    /// From one trial's readings; `None` when nothing was forwarded.
    pub fn new(offered_pps: u64, forwarded_pps: u64, busy_pct: f64) -> Option<Self> {
        let mut c = Self {
            offered_pps,
            ..Self::default()
        };
        c.add(forwarded_pps, busy_pct).then_some(c)
    }

    /// Adds a later trial at the same offered load; the figures become
    /// the median trial's (with an even count, the lower of the middle
    /// two). False (and nothing added) when the trial forwarded nothing.
    pub fn add(&mut self, forwarded_pps: u64, busy_pct: f64) -> bool {
        if forwarded_pps == 0 {
            return false;
        }
        self.trials.push(CpuTrial {
            forwarded_pps,
            busy_pct,
            ns_per_packet: busy_pct / 100.0 * 1e9 / forwarded_pps as f64,
        });
        let mut order = self.trials.clone();
        order.sort_by(|a, b| a.ns_per_packet.total_cmp(&b.ns_per_packet));
        let mid = order[(order.len() - 1) / 2];
        (self.forwarded_pps, self.busy_pct, self.ns_per_packet) =
            (mid.forwarded_pps, mid.busy_pct, mid.ns_per_packet);
        true
    }

    /// ns per packet of each trial.
    pub fn trials_ns(&self) -> Vec<f64> {
        self.trials.iter().map(|t| t.ns_per_packet).collect()
    }

    /// Spread of the trials (max - min over the median), percent; `None`
    /// with fewer than two.
    pub fn spread_pct(&self) -> Option<f64> {
        if self.trials.len() < 2 {
            return None;
        }
        RateSummary::of(&self.trials_ns()).map(|s| s.spread_pct)
    }
}

/// Fixed-load runs of a contender on an input other than the run's own,
/// at that input's generator maximum.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct InputRuns {
    /// How frames reached the dut.
    pub input: String,
    /// The offered load (that input's generator maximum).
    pub offered_pps: u64,
    pub runs: Vec<RunRecord>,
}

impl InputRuns {
    /// Summary of the runs' forwarding rates.
    pub fn summary(&self) -> Option<RateSummary> {
        let r: Vec<f64> = self.runs.iter().map(|r| r.forwarding_pps as f64).collect();
        RateSummary::of(&r)
    }
}

/// The input-mode matrix: every contender's median rate on the run's input
/// and on the other, each with its spread and its ratio to the baseline on
/// the same input (a ratio is never taken across inputs). Empty when no
/// contender ran on another input.
pub fn input_matrix_markdown(run: &LabRun) -> String {
    let Some(other) = run.contenders.iter().find_map(|k| k.other_input.as_ref()) else {
        return String::new();
    };
    let main = run
        .config
        .extra
        .get("input")
        .cloned()
        .unwrap_or_else(|| "the run's input".into());
    let base = run.contenders.iter().find(|k| k.name == run.baseline);
    let base_main = base.and_then(|b| b.summary).map(|m| m.median);
    let base_other = base
        .and_then(|b| b.other_input.as_ref())
        .and_then(InputRuns::summary)
        .map(|m| m.median);
    // A median within 10% of what its input's generator offers is that
    // generator's limit, not the contender's: marked.
    let cell = |m: Option<RateSummary>, base: Option<f64>, offered: Option<u64>| match m {
        None => "- | - |".to_string(),
        Some(m) => format!(
            "{:.1}{} ({:.1}%, {}) | {} |",
            m.median / 1e3,
            if offered.is_some_and(|o| m.median >= 0.9 * o as f64) {
                " †"
            } else {
                ""
            },
            m.spread_pct,
            m.n,
            base.filter(|b| *b > 0.0)
                .map_or("-".into(), |b| format!("{:.2}x", m.median / b))
        ),
    };
    let mut s = format!(
        "\n## Input-mode matrix\n\n\
         Each contender on both inputs, at each input's own generator maximum \
         (overload), in the same activations: A = {main}; B = {} ({:.1} Kpps \
         offered). Median Kpps (spread, runs); ratios only against `{}` on \
         the same input. † at the generator's limit (within 10% of what it \
         offers): a lower bound, and so is a ratio against it.\n\n\
         | contender | A: median Kpps | A: vs {} | B: median Kpps | B: vs {} |\n\
         | --- | ---: | ---: | ---: | ---: |\n",
        other.input,
        other.offered_pps as f64 / 1e3,
        run.baseline,
        run.baseline,
        run.baseline
    );
    for k in &run.contenders {
        s.push_str(&format!(
            "| {} | {} {}\n",
            k.name,
            cell(k.summary, base_main, run.generator_max_pps),
            cell(
                k.other_input.as_ref().and_then(InputRuns::summary),
                base_other,
                Some(other.offered_pps)
            )
        ));
    }
    s
}

/// The receive-livelock check of one contender: the forwarding rate at the
/// highest offered load against the rate at the offered load where its load
/// curve did best below that, each over several trials. The curve's own two
/// readings are one trial each; on a shared two-core machine one trial's
/// noise (10-30%) is as large as the fall looked for, and the curve's peak
/// is the largest of several noisy readings, biased upwards, so the verdict
/// is taken on medians of interleaved trials at the two loads, the peak's
/// without the reading that chose it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LivelockCheck {
    /// The offered load of the curve's best rate below its highest load.
    pub peak_offered_pps: u64,
    /// The highest offered load (the generator's maximum).
    pub max_offered_pps: u64,
    /// Forwarding rates of the trials at the peak's offered load: fresh
    /// trials, not the curve's reading that chose the peak (that reading
    /// alone when no trial was run).
    pub at_peak_pps: Vec<u64>,
    /// Forwarding rates of the trials at the highest offered load (the
    /// curve's reading first).
    pub at_max_pps: Vec<u64>,
}

impl LivelockCheck {
    /// Median rate at the highest offered load over the median at the
    /// peak's offered load (1 for a one-point curve).
    pub fn ratio(&self) -> Option<f64> {
        let at = |v: &[u64]| median_u64(v).filter(|m| *m > 0.0);
        if self.peak_offered_pps == self.max_offered_pps {
            return at(&self.at_max_pps).map(|_| 1.0);
        }
        Some(at(&self.at_max_pps).unwrap_or(0.0) / at(&self.at_peak_pps)?)
    }

    /// Receive livelock: the median rate at the highest offered load is
    /// more than `tol` below the median at the peak's offered load.
    pub fn livelock(&self, tol: f64) -> bool {
        self.ratio().is_some_and(|r| r < 1.0 - tol)
    }
}

fn median_u64(v: &[u64]) -> Option<f64> {
    let rates: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    RateSummary::of(&rates).map(|s| s.median)
}

/// Receive livelock (the load curve's rate at the highest offered load
/// against its peak, one reading each, then the medians of the repeated
/// check) and control-socket latency under that flood, per contender;
/// empty when there is no load curve.
pub fn livelock_markdown(contenders: &[ContenderResult]) -> String {
    let rows: Vec<String> = contenders
        .iter()
        .filter_map(|k| {
            let peak = k.load_curve.iter().map(|p| p.forwarding_pps).max()?;
            let last = k.load_curve.last()?;
            let checked = k.livelock.as_ref().map_or("- | -".to_string(), |c| {
                let med = |v: &[u64]| median_u64(v).unwrap_or(0.0) / 1e3;
                format!(
                    "{:.1} @ {:.0} / {:.1} ({} + {} trials) | {}",
                    med(&c.at_peak_pps),
                    c.peak_offered_pps as f64 / 1e3,
                    med(&c.at_max_pps),
                    c.at_peak_pps.len(),
                    c.at_max_pps.len(),
                    c.ratio().map_or("-".into(), |r| format!("{r:.2}"))
                )
            });
            let control = k.control_latency.as_ref().map_or("-".to_string(), |c| {
                format!(
                    "{:.2} / {:.2} / {:.2} ({} requests)",
                    c.p50_us / 1e3,
                    c.p99_us / 1e3,
                    c.max_us / 1e3,
                    c.requests
                )
            });
            Some(format!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {} |\n",
                k.name,
                peak as f64 / 1e3,
                last.offered_pps as f64 / 1e3,
                last.forwarding_pps as f64 / 1e3,
                if peak > 0 {
                    last.forwarding_pps as f64 / peak as f64
                } else {
                    0.0
                },
                checked,
                control
            ))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\n## Receive livelock and control latency at the generator's maximum\n\n\
         One reading per load-curve point first; then the check: the median \
         rate of the trials at the peak's offered load (fresh trials spread \
         over the run, not the curve's reading that chose the peak, unless \
         none ran) and of those at the highest (the curve's, the \
         control-socket trial's and the fixed-load repeats'), and their \
         ratio (receive livelock below 0.90).\n\n\
         | contender | load-curve peak kpps | highest offered kpps | forwarded there kpps | there / peak | checked: median kpps at peak @ offered / at highest (trials) | median ratio | control round trip p50 / p99 / max ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        s.push_str(&r);
    }
    s
}

/// Does a load curve fall past its peak (receive livelock)? True when the
/// rate at the highest offered load is below `1 - tol` of the best rate.
pub fn falls_past_peak(curve: &[LoadPoint], tol: f64) -> bool {
    let Some(last) = curve.iter().max_by_key(|p| p.offered_pps) else {
        return false;
    };
    let peak = curve.iter().map(|p| p.forwarding_pps).max().unwrap_or(0);
    (last.forwarding_pps as f64) < peak as f64 * (1.0 - tol)
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

/// The comparison table's header and rows, one row per contender. The
/// equilibrium and latency columns appear when some contender has them.
fn table(run: &LabRun) -> (Vec<String>, Vec<Vec<String>>) {
    let with_eq = run.contenders.iter().any(|c| c.equilibrium.is_some());
    let with_lat = run
        .contenders
        .iter()
        .any(|c| c.runs.iter().any(|r| r.latency.is_some()));
    let mut head: Vec<String> = [
        "contender",
        "runs",
        "median Kpps",
        "median Gbit/s",
        "min-max Kpps",
        "spread",
    ]
    .map(String::from)
    .to_vec();
    if with_eq {
        head.push("equilibrium Kpps".into());
    }
    if with_lat {
        head.push("p50 / p99.9 µs".into());
    }
    let cpu_at = run
        .contenders
        .iter()
        .find_map(|c| c.cpu_per_packet.as_ref().map(|x| x.offered_pps));
    if let Some(at) = cpu_at {
        head.push(format!("CPU ns/pkt @{} Kpps", at / 1000));
    }
    head.extend(["vs baseline", "verdict"].map(String::from));
    let rows = run
        .contenders
        .iter()
        .map(|c| {
            let mut row = vec![c.name.clone(), c.runs.len().to_string()];
            match &c.summary {
                Some(s) => row.extend([
                    kpps(s.median),
                    format!("{:.2}", frame_gbps(s.median, run.config.frame_len)),
                    format!("{}-{}", kpps(s.min), kpps(s.max)),
                    format!("{:.1}%", s.spread_pct),
                ]),
                None => row.extend(["-", "-", "-", "-"].map(String::from)),
            }
            if with_eq {
                row.push(c.equilibrium.as_ref().map_or("-".into(), |e| {
                    let limited = if e.stop == crate::equilibrium::StopReason::GeneratorLimited {
                        " (gen-limited)"
                    } else {
                        ""
                    };
                    format!("{}{limited}", e.estimated_kpps)
                }));
            }
            if with_lat {
                // Medians over the runs of each run's p50 and p99.9.
                let med = |f: fn(&LatencySummary) -> u64| -> Option<f64> {
                    let v: Vec<f64> = c
                        .runs
                        .iter()
                        .filter_map(|r| r.latency.as_ref().map(|l| f(l) as f64))
                        .collect();
                    RateSummary::of(&v).map(|s| s.median / 1e3)
                };
                row.push(match (med(|l| l.median_ns), med(|l| l.p999_ns)) {
                    (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
                    _ => "-".into(),
                });
            }
            if cpu_at.is_some() {
                row.push(
                    c.cpu_per_packet
                        .as_ref()
                        .map_or("-".into(), |x| match x.spread_pct() {
                            Some(sp) => format!(
                                "{:.0} ({} trials, spread {sp:.0}%)",
                                x.ns_per_packet,
                                x.trials.len()
                            ),
                            None => format!("{:.0}", x.ns_per_packet),
                        }),
                );
            }
            let (ratio, verdict) = match &c.verdict {
                Some(v) if v.ratio.is_finite() => (format!("{:.2}x", v.ratio), v.short()),
                Some(v) => ("-".into(), v.short()),
                None if c.name == run.baseline => ("1.00x".into(), "baseline".into()),
                None => ("-".into(), "-".into()),
            };
            row.extend([ratio, verdict]);
            row
        })
        .collect();
    (head, rows)
}

fn kpps(pps: f64) -> String {
    format!("{:.1}", pps / 1000.0)
}

/// Gbit/s of `pps` frames of `frame_len` bytes (without FCS), counting
/// the frame and its 4-byte FCS (not the preamble and inter-frame gap,
/// which a veth has none of).
pub fn frame_gbps(pps: f64, frame_len: u16) -> f64 {
    pps * f64::from(frame_len + 4) * 8.0 / 1e9
}

/// The comparison table in Markdown.
pub fn comparison_table_markdown(run: &LabRun) -> String {
    let (head, rows) = table(run);
    let mut s = format!("| {} |\n|", head.join(" | "));
    for i in 0..head.len() {
        // Names and verdicts left-aligned, numbers right-aligned.
        s.push_str(if i == 0 || i + 1 == head.len() {
            "---|"
        } else {
            "---:|"
        });
    }
    s.push('\n');
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        s.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    s
}

/// Each contender's median forwarding rate in each scenario of a
/// multi-scenario bench (`runs`: scenario label and its run, in the order
/// run; a label that appears more than once has its runs' fixed-load rates
/// pooled), and its ratio to the first scenario's, one line a contender:
/// what a LAG, say, costs an engine against one port, measured in the
/// same invocation.
pub fn scenario_table_text(runs: &[(String, &LabRun)]) -> String {
    let mut labels: Vec<&str> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (label, run) in runs {
        if !labels.contains(&label.as_str()) {
            labels.push(label);
        }
        for c in &run.contenders {
            if !names.contains(&c.name.as_str()) {
                names.push(&c.name);
            }
        }
    }
    let rates = |label: &str, name: &str| -> Vec<f64> {
        runs.iter()
            .filter(|(l, _)| l == label)
            .flat_map(|(_, run)| run.contenders.iter().filter(|c| c.name == name))
            .flat_map(ContenderResult::rates)
            .collect()
    };
    let mut s = String::from("contender");
    for l in &labels {
        s.push_str(&format!(" | {l} kpps (median, spread)"));
    }
    for l in labels.iter().skip(1) {
        s.push_str(&format!(" | {l} / {}", labels[0]));
    }
    s.push('\n');
    for name in &names {
        s.push_str(name);
        let medians: Vec<Option<f64>> = labels
            .iter()
            .map(|l| RateSummary::of(&rates(l, name)))
            .map(|r| {
                if let Some(r) = r {
                    s.push_str(&format!(
                        " | {:.1} ({:.1}%, n={})",
                        r.median / 1e3,
                        r.spread_pct,
                        r.n
                    ));
                } else {
                    s.push_str(" | -");
                }
                r.map(|r| r.median)
            })
            .collect();
        for m in medians.iter().skip(1) {
            match (medians[0], m) {
                (Some(base), Some(m)) if base > 0.0 => s.push_str(&format!(" | {:.2}x", m / base)),
                _ => s.push_str(" | -"),
            }
        }
        s.push('\n');
    }
    s
}

/// The comparison table in plain text, columns aligned.
pub fn comparison_table_text(run: &LabRun) -> String {
    let (head, rows) = table(run);
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
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
                k.runs.iter().any(RunRecord::limited_by_generator)
                    || k.summary.is_some_and(|m| m.max >= 0.99 * g as f64)
            })
            .map(|k| k.name.as_str())
            .collect();
        if !limited.is_empty() {
            s.push_str(&format!(
                "\nLimited by generator (forwarded all it sent, or within 1% of its own maximum): {}.\n",
                limited.join(", ")
            ));
        }
    }
    for note in &run.notes {
        s.push_str(&format!("\n{note}\n"));
    }
    s.push_str(&input_matrix_markdown(run));
    s.push_str(&livelock_markdown(&run.contenders));
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
        if let Some(v) = &k.verdict
            && let Some(cmp) = &v.comparison
        {
            s.push_str("\n```\n");
            s.push_str(&cmp.render());
            s.push_str("```\n");
        }
        if let Some(e) = &k.equilibrium {
            s.push_str(&format!(
                "\nEquilibrium: {} Kpps (maximum seen {} Kpps, {} iterations)\n",
                e.estimated_kpps,
                e.max_seen_kpps,
                e.iterations.len()
            ));
            s.push_str("\n<details><summary>equilibrium search</summary>\n\n```\n");
            s.push_str(&e.render());
            s.push_str("```\n\n</details>\n");
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
                    if r.limited_by_generator() {
                        " (gen-limited)"
                    } else if r.generator_limited {
                        " (short of offered)"
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
    // Sections above each open with a blank line; keep at most one.
    while s.contains("\n\n\n") {
        s = s.replace("\n\n\n", "\n\n");
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
            None => {
                let lowest = crate::rfc2544::lowest_loss(&f.trials).map_or(String::new(), |t| {
                    format!(
                        " (lowest loss {:.3}% at {} Kpps)",
                        t.loss_ratio * 100.0,
                        kpps(t.offered_pps as f64)
                    )
                });
                s.push_str(&format!(
                    "| {} | {} | no rate met the loss ratio{lowest} | | | | | | {} |\n",
                    f.frame_size,
                    kpps(f.theoretical_max_pps as f64),
                    trials
                ))
            }
        }
    }
    s
}

/// The report's charts, built from the record.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCharts {
    /// From each contender's load curve, or its equilibrium iterations when
    /// it has no curve; `None` when no contender has either.
    pub rate_vs_load: Option<LineChart>,
    /// From the runs' latency histograms (summed per contender); `None`
    /// when no run has one.
    pub latency: Option<LatencyChart>,
    /// Every run's forwarding rate per contender.
    pub repeated_runs: BoxChart,
}

/// Build the report's charts from a record.
pub fn charts(run: &LabRun) -> RunCharts {
    let frame = format!(
        "IPv{}, {}-byte frames, {} flows",
        run.config.ip_version, run.config.frame_len, run.config.flows
    );
    let series: Vec<Series> = run
        .contenders
        .iter()
        .filter_map(|c| {
            let points: Vec<(f64, f64)> = if !c.load_curve.is_empty() {
                c.load_curve
                    .iter()
                    .map(|p| (p.offered_pps as f64, p.forwarding_pps as f64))
                    .collect()
            } else if let Some(e) = &c.equilibrium {
                e.iterations
                    .iter()
                    .map(|i| (i.offered_kpps as f64 * 1e3, i.measured_kpps as f64 * 1e3))
                    .collect()
            } else {
                return None;
            };
            Some(Series {
                name: c.name.clone(),
                points,
            })
        })
        .collect();
    let rate_vs_load = (!series.is_empty()).then(|| {
        LineChart::rate_vs_load(format!("Forwarding rate vs offered load ({frame})"), series)
    });
    let dists: Vec<Distribution> = run
        .contenders
        .iter()
        .filter_map(|c| {
            let mut merged: BTreeMap<u64, u64> = BTreeMap::new();
            for r in &c.runs {
                for &(ub, n) in &r.latency_histogram {
                    *merged.entry(ub).or_default() += n;
                }
            }
            (!merged.is_empty()).then(|| Distribution {
                name: c.name.clone(),
                buckets: merged
                    .into_iter()
                    .map(|(ub, n)| (ub as f64 / 1e3, n))
                    .collect(),
            })
        })
        .collect();
    let latency = (!dists.is_empty()).then(|| LatencyChart {
        title: format!("Latency distribution ({frame})"),
        x_label: "latency (µs)".into(),
        log_x: true,
        // The tail view keeps p99 and p99.9 readable next to the median.
        kind: DistributionKind::Tail,
        series: dists,
    });
    let repeated_runs = BoxChart::repeated_rates(
        format!("Forwarding rate of repeated runs ({frame})"),
        run.contenders
            .iter()
            .map(|c| Group {
                name: c.name.clone(),
                values: c.rates(),
            })
            .collect(),
    );
    RunCharts {
        rate_vs_load,
        latency,
        repeated_runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_latency_quantiles_and_the_livelock_table() {
        let trips: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let c = ControlLatency::new("show_interfaces", trips, 1_000_000, 900_000);
        assert_eq!(
            (c.requests, c.p50_us, c.p99_us, c.max_us),
            (1000, 500.0, 990.0, 1000.0)
        );
        let k = ContenderResult {
            name: "fastfwd-xdp".into(),
            load_curve: vec![
                LoadPoint {
                    offered_pps: 500_000,
                    forwarding_pps: 400_000,
                    loss_ratio: 0.0,
                },
                LoadPoint {
                    offered_pps: 1_000_000,
                    forwarding_pps: 300_000,
                    loss_ratio: 0.7,
                },
            ],
            control_latency: Some(c),
            ..Default::default()
        };
        let md = livelock_markdown(&[k.clone(), ContenderResult::default()]);
        assert!(
            md.contains("| fastfwd-xdp | 400.0 | 1000.0 | 300.0 | 0.75 | - | - | 0.50 / 0.99 / 1.00 (1000 requests) |"),
            "{md}"
        );
        // The repeated check, where there is one: medians and their ratio.
        let checked = ContenderResult {
            name: "fastfwd-xdp-engine".into(),
            livelock: Some(LivelockCheck {
                peak_offered_pps: 500_000,
                max_offered_pps: 1_000_000,
                at_peak_pps: vec![400_000, 380_000, 390_000],
                at_max_pps: vec![300_000, 370_000, 380_000],
            }),
            ..k.clone()
        };
        let md = livelock_markdown(std::slice::from_ref(&checked));
        assert!(
            md.contains("| 0.75 | 390.0 @ 500 / 370.0 (3 + 3 trials) | 0.95 | 0.50"),
            "{md}"
        );
        assert_eq!(
            md.lines()
                .filter(|l| l.starts_with("| ")
                    && !l.starts_with("| contender")
                    && !l.starts_with("| ---"))
                .count(),
            1,
            "a contender without a load curve has no row: {md}"
        );
        assert_eq!(livelock_markdown(&[]), "");
    }

    #[test]
    fn cpu_per_packet_and_livelock() {
        let c = CpuPerPacket::new(200_000, 200_000, 50.0).unwrap();
        assert!((c.ns_per_packet - 2500.0).abs() < 1e-9);
        assert!(CpuPerPacket::new(200_000, 0, 50.0).is_none());
        // Later trials: the figures are the median trial's; one that
        // forwarded nothing is not a reading.
        let mut c = c;
        assert!(c.add(100_000, 50.0));
        assert!(!c.add(0, 50.0));
        assert!(c.add(200_000, 20.0));
        assert_eq!(c.trials_ns(), [2500.0, 5000.0, 1000.0]);
        assert_eq!(
            (c.ns_per_packet, c.forwarded_pps, c.busy_pct),
            (2500.0, 200_000, 50.0)
        );
        assert!((c.spread_pct().unwrap() - 160.0).abs() < 1e-9);
        let p = |o, f| LoadPoint {
            offered_pps: o,
            forwarding_pps: f,
            loss_ratio: 0.0,
        };
        assert!(!falls_past_peak(
            &[p(100, 100), p(200, 190), p(300, 195)],
            0.1
        ));
        assert!(falls_past_peak(
            &[p(100, 100), p(200, 190), p(300, 150)],
            0.1
        ));
        assert!(!falls_past_peak(&[], 0.1));
    }

    #[test]
    fn the_input_mode_matrix_takes_ratios_within_an_input() {
        let mut run = sample_run();
        run.config
            .extra
            .insert("input".into(), "live XDP frames".into());
        assert_eq!(input_matrix_markdown(&run), "", "no other input, no matrix");
        let other = |rates: &[&[u64]]| InputRuns {
            input: "socket buffers".into(),
            offered_pps: 1_500_000,
            runs: rates
                .iter()
                .enumerate()
                .map(|(i, r)| run_record(i as u32, r))
                .collect(),
        };
        run.contenders[0].other_input = Some(other(&[&[200_000], &[210_000], &[190_000]]));
        run.contenders[1].other_input = Some(other(&[&[100_000], &[100_000], &[110_000]]));
        run.finish();
        let md = input_matrix_markdown(&run);
        assert!(
            md.contains("A = live XDP frames; B = socket buffers (1500.0 Kpps offered)"),
            "{md}"
        );
        assert!(
            md.contains("| kernel | 451.0 (20.8%, 5) | 1.00x | 200.0 (10.0%, 3) | 1.00x |"),
            "{md}"
        );
        // fastfwd-afxdp: 605 against 451 on A (within 10% of the
        // generator's 650: marked), 100 against 200 on B.
        assert!(md.contains("| fastfwd-afxdp | 605.0 † (5.0%, 5) |"), "{md}");
        assert!(md.contains("| 1.34x | 100.0 (10.0%, 3) | 0.50x |"), "{md}");
        // At the generator's limit (1,500 Kpps offered on B).
        run.contenders[1].other_input = Some(other(&[&[1_400_000], &[1_450_000], &[1_420_000]]));
        run.finish();
        let md = input_matrix_markdown(&run);
        assert!(md.contains("| 1420.0 † (3.5%, 3) | 7.10x |"), "{md}");
        // A contender without the other input says so.
        run.contenders[1].other_input = None;
        assert!(input_matrix_markdown(&run).contains("| - | - |"));
        // And the report carries the table.
        run.contenders[1].other_input = Some(other(&[&[100_000]]));
        assert!(render_markdown(&run, &ReportFigures::default()).contains("## Input-mode matrix"));
    }

    #[test]
    fn the_livelock_check_decides_on_medians() {
        let check = |peak: &[u64], max: &[u64]| LivelockCheck {
            peak_offered_pps: 1_000,
            max_offered_pps: 3_000,
            at_peak_pps: peak.to_vec(),
            at_max_pps: max.to_vec(),
        };
        // One high reading at the peak (the curve's) does not make livelock.
        let c = check(&[900, 700, 720], &[680, 700, 690]);
        assert!((c.ratio().unwrap() - 690.0 / 720.0).abs() < 1e-9);
        assert!(!c.livelock(0.1));
        // A fall every trial shows is livelock.
        let c = check(&[900, 880, 910], &[600, 650, 700]);
        assert!(c.livelock(0.1), "{:?}", c.ratio());
        // Even counts take the middle two.
        assert_eq!(check(&[100, 200], &[150]).ratio(), Some(1.0));
        // Nothing forwarded at the maximum: ratio 0, livelock.
        assert_eq!(check(&[100], &[0, 0]).ratio(), Some(0.0));
        // Nothing at the peak's load: no ratio, no verdict.
        assert_eq!(check(&[0], &[10]).ratio(), None);
        assert!(!check(&[], &[10]).livelock(0.1));
        // A curve that peaks at its highest load.
        let top = LivelockCheck {
            peak_offered_pps: 3_000,
            max_offered_pps: 3_000,
            at_peak_pps: vec![700],
            at_max_pps: vec![700],
        };
        assert_eq!(top.ratio(), Some(1.0));
    }

    fn run_record(seq: u32, rates: &[u64]) -> RunRecord {
        let fwd = RunRecord::compute_forwarding_pps(rates);
        let received: u64 = rates.iter().sum();
        RunRecord {
            sequence: seq,
            offered_pps: 1_000_000,
            generator_pps: 640_000,
            attempted: 640_000 * rates.len() as u64,
            received,
            lost: (640_000 * rates.len() as u64).saturating_sub(received),
            rx_per_second: rates.to_vec(),
            forwarding_pps: fwd,
            latency: Some(LatencySummary {
                min_ns: 8_000,
                median_ns: 20_000,
                p99_ns: 60_000,
                p999_ns: 90_000,
                max_ns: 200_000,
                samples: received,
            }),
            latency_histogram: vec![(10_000, 5), (20_000, 50), (40_000, 30), (80_000, 2)],
            ..RunRecord::default()
        }
    }

    fn contender(name: &str, runs: &[&[u64]]) -> ContenderResult {
        ContenderResult {
            name: name.into(),
            description: format!("{name} forwarding between gen and sink"),
            runs: runs
                .iter()
                .enumerate()
                .map(|(i, r)| run_record(i as u32, r))
                .collect(),
            ..ContenderResult::default()
        }
    }

    fn sample_run() -> LabRun {
        let mut run = LabRun::new("fastfwd vs kernel forwarding");
        run.started = "2026-11-30T16:00:00Z".into();
        run.duration_s = 312.0;
        run.host = HostInfo {
            kernel: "6.12.0-test".into(),
            cpu_model: "Example CPU @ 2.0GHz".into(),
            cpu_count: 2,
            extra: BTreeMap::new(),
        };
        run.fastfwd = VersionInfo {
            version: "0.1.0".into(),
            git_commit: Some("abc1234".into()),
            dirty: false,
        };
        run.placement = vec![CorePlacement {
            role: "generator".into(),
            process: Some("fastfwd lab gen".into()),
            cores: vec![0],
            busy_pct: Some(99.0),
        }];
        run.config = RunConfig {
            frame_len: 60,
            ip_version: 4,
            flows: 1000,
            trial_s: 10.0,
            trials: 5,
            routes: Some(901_899),
            ..RunConfig::default()
        };
        run.generator_max_pps = Some(650_000);
        run.baseline = "kernel".into();
        run.contenders = vec![
            contender(
                "kernel",
                &[
                    &[451_000, 449_000, 0, 452_000],
                    &[419_000, 420_000, 418_000],
                    &[513_000, 512_000, 514_000],
                    &[440_000, 441_000, 439_000],
                    &[470_000, 471_000, 469_000],
                ],
            ),
            contender(
                "fastfwd-afxdp",
                &[
                    &[600_000, 601_000, 599_000],
                    &[610_000, 611_000, 609_000],
                    &[590_000, 589_000, 591_000],
                    &[620_000, 621_000, 619_000],
                    &[605_000, 604_000, 606_000],
                ],
            ),
            contender("fastfwd-afpacket", &[&[240_000], &[250_000]]),
        ];
        run
    }

    #[test]
    fn finish_computes_summaries_and_verdicts() {
        let mut run = sample_run();
        run.finish();
        let k = &run.contenders[0];
        let s = k.summary.unwrap();
        // The zero second is skipped: run 0 is median(449k, 451k, 452k).
        assert_eq!(k.runs[0].forwarding_pps, 451_000);
        assert_eq!(
            (s.n, s.median, s.min, s.max),
            (5, 451_000.0, 419_000.0, 513_000.0)
        );
        assert!((s.spread_pct - 94_000.0 / 451_000.0 * 100.0).abs() < 1e-9);
        assert!(k.verdict.is_none(), "the baseline has no verdict");

        let x = &run.contenders[1];
        let v = x.verdict.as_ref().unwrap();
        assert!((v.ratio - 605_000.0 / 451_000.0).abs() < 1e-12);
        let c = v.comparison.unwrap();
        // By hand: averages 605000 and 458600, d = 146400; variances
        // 1.25e8 and 1.2653e9, pooled s = sqrt(6.9515e8) = 26365.7;
        // t(0.975, 8) = 2.306004 gives e = 2.306004 * 26365.7 * sqrt(0.4)
        // = 38452.9, that is 31.92% +/- 8.385% of 458600.
        assert!((c.difference - 146_400.0).abs() < 1e-6);
        assert!((c.pooled_s - 26_365.7).abs() < 0.1, "{}", c.pooled_s);
        assert!((c.error - 38_452.9).abs() < 0.1, "{}", c.error);
        assert!(c.proven);
        assert_eq!(v.short(), "+31.9% ± 8.4% (95%)");

        let few = run.contenders[2].verdict.as_ref().unwrap();
        assert!(few.comparison.is_none());
        assert_eq!(few.short(), "too few runs for a t-test");
    }

    #[test]
    fn tables_list_every_contender() {
        let mut run = sample_run();
        run.finish();
        let md = comparison_table_markdown(&run);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(
            lines[0],
            "| contender | runs | median Kpps | median Gbit/s | min-max Kpps | spread | p50 / p99.9 µs | vs baseline | verdict |"
        );
        assert_eq!(lines[1], "|---|---:|---:|---:|---:|---:|---:|---:|---|");
        assert_eq!(
            lines[2],
            "| kernel | 5 | 451.0 | 0.23 | 419.0-513.0 | 20.8% | 20.0 / 90.0 | 1.00x | baseline |"
        );
        assert_eq!(
            lines[3],
            "| fastfwd-afxdp | 5 | 605.0 | 0.31 | 590.0-620.0 | 5.0% | 20.0 / 90.0 | 1.34x | +31.9% ± 8.4% (95%) |"
        );
        let text = comparison_table_text(&run);
        let tl: Vec<&str> = text.lines().collect();
        assert_eq!(tl.len(), 5);
        // Columns line up: "runs" header and values end in the same column.
        let end = tl[0].find("runs").unwrap() + 4;
        for row in [tl[2], tl[3], tl[4]] {
            assert!(row[..end].ends_with(|c: char| c.is_ascii_digit()), "{row}");
        }
    }

    #[test]
    fn optional_columns_follow_the_data() {
        let mut run = sample_run();
        for c in &mut run.contenders {
            for r in &mut c.runs {
                r.latency = None;
            }
        }
        run.contenders[1].equilibrium = Some(EquilibriumResult {
            config: crate::equilibrium::EquilibriumConfig::default(),
            iterations: vec![],
            estimated_kpps: 640,
            max_seen_kpps: 640,
            stop: crate::equilibrium::StopReason::GeneratorLimited,
        });
        run.finish();
        let md = comparison_table_markdown(&run);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| contender | runs | median Kpps | median Gbit/s | min-max Kpps | spread | equilibrium Kpps | vs baseline | verdict |"
        );
        assert!(lines[2].contains("| 20.8% | - | 1.00x |"), "{}", lines[2]);
        assert!(
            lines[3].contains("| 5.0% | 640 (gen-limited) | 1.34x |"),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn markdown_report_has_setup_results_and_raw_readings() {
        let mut run = sample_run();
        run.contenders[0].equilibrium = Some(EquilibriumResult {
            config: crate::equilibrium::EquilibriumConfig::default(),
            iterations: vec![],
            estimated_kpps: 451,
            max_seen_kpps: 460,
            stop: crate::equilibrium::StopReason::Converged,
        });
        run.finish();
        let figures = ReportFigures {
            rate_vs_load: Some("rate-vs-load.svg".into()),
            latency: None,
            repeated_runs: Some("runs.svg".into()),
        };
        let md = render_markdown(&run, &figures);
        for needle in [
            "# fastfwd vs kernel forwarding",
            "- fastfwd 0.1.0 (commit abc1234)",
            "- kernel 6.12.0-test",
            "- CPU 2 x Example CPU @ 2.0GHz",
            "60-byte frames (without FCS), 1000 flows",
            "- 901899 routes in the device under test",
            "- generator's own maximum: 650.0 Kpps",
            "| generator | fastfwd lab gen | 0 | 99% |",
            "![Forwarding rate vs offered load](rate-vs-load.svg)",
            "![Repeated runs](runs.svg)",
            "Difference at 95.0% confidence",
            "| 0 | 1000.0 | 640.0 | 451.0 |",
            "451 449 0 452",
            "### fastfwd-afpacket",
            "Equilibrium: 451 Kpps (maximum seen 460 Kpps, 0 iterations)",
            "- Link rate = 1488 Kpps\n",
            "Estimated Equilibrium Ethernet throughput= 451 Kpps (maximum value seen: 460 Kpps)\n```",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in\n{md}");
        }
        assert!(!md.contains("Latency distribution"));
    }

    #[test]
    fn generator_limited_contenders_are_named() {
        let mut run = sample_run();
        // Short of the offered load, but the device dropped most of it: the
        // device is the limit.
        run.contenders[0].runs[1].generator_limited = true;
        // Short of the offered load and everything forwarded: the generator is.
        let r = &mut run.contenders[1].runs[0];
        r.generator_limited = true;
        r.generator_pps = 600_500;
        assert!(r.limited_by_generator());
        assert!(!run.contenders[0].runs[1].limited_by_generator());
        run.finish();
        let md = render_markdown(&run, &ReportFigures::default());
        assert!(md.contains("Limited by generator (forwarded all it sent, or within 1% of its own maximum): fastfwd-afxdp."));
        assert!(
            md.contains("| 0 | 1000.0 | 600.5 (gen-limited) | 600.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | 1000.0 | 640.0 (short of offered) | 419.0 |"),
            "{md}"
        );
    }

    #[test]
    fn json_round_trip() {
        let mut run = sample_run();
        run.finish();
        let j = run.to_json().unwrap();
        let back = LabRun::from_json(&j).unwrap();
        // Floats may come back one ulp off, nothing else may change.
        fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
            use serde_json::Value::*;
            match (a, b) {
                (Number(x), Number(y)) => {
                    let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                    (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
                }
                (Array(x), Array(y)) => {
                    x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
                }
                (Object(x), Object(y)) => {
                    x.len() == y.len()
                        && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
                }
                _ => a == b,
            }
        }
        let again: serde_json::Value = serde_json::from_str(&back.to_json().unwrap()).unwrap();
        let first: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert!(same(&first, &again));
        assert_eq!(back.contenders[1].runs, run.contenders[1].runs);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["host"]["kernel"], "6.12.0-test");
        assert_eq!(v["contenders"][0]["runs"][0]["rx_per_second"][2], 0);
        assert_eq!(v["config"]["confidence"], "95");
    }

    #[test]
    fn rfc2544_table() {
        use crate::rfc2544::{FoundRate, FrameSizeResult, Rfc2544Config, Rfc2544Result};
        let r = Rfc2544Result {
            config: Rfc2544Config {
                loss_ratio: 0.005,
                ..Rfc2544Config::default()
            },
            frames: vec![
                FrameSizeResult {
                    frame_size: 64,
                    theoretical_max_pps: 14_880_952,
                    found: Some(FoundRate {
                        offered_pps: 450_000,
                        sent_pps: 449_000,
                        received_pps: 447_500.0,
                        lost: 15_000,
                        loss_ratio: 0.0033,
                        latency: Some(LatencySummary {
                            min_ns: 8_000,
                            median_ns: 20_000,
                            p999_ns: 90_000,
                            ..LatencySummary::default()
                        }),
                        pdv_ns: Some(82_000),
                        generator_limited: false,
                    }),
                    trials: vec![],
                    trial_s: 10.0,
                },
                FrameSizeResult {
                    frame_size: 1518,
                    theoretical_max_pps: 812_743,
                    found: None,
                    trials: [(800_000, 0.02), (400_000, 0.004), (200_000, 0.004)]
                        .into_iter()
                        .map(|(offered_pps, loss_ratio)| crate::rfc2544::SearchTrial {
                            offered_pps,
                            outcome: crate::equilibrium::TrialOutcome::default(),
                            loss_ratio,
                            passed: false,
                            generator_limited: false,
                        })
                        .collect(),
                    trial_s: 10.0,
                },
            ],
        };
        let t = rfc2544_table_markdown(&r);
        assert!(
            t.contains(
                "| 64 | 14881.0 | 450.0 | 449.0 | 447.5 | 15000 | 20.0 / 90.0 | 82.0 | 0 x 10 s |"
            ),
            "{t}"
        );
        assert!(t.contains(
            "| 1518 | 812.7 | no rate met the loss ratio (lowest loss 0.400% at 200.0 Kpps) |"
        ));
    }

    #[test]
    fn charts_from_the_record() {
        let mut run = sample_run();
        run.contenders[0].load_curve = vec![
            LoadPoint {
                offered_pps: 100_000,
                forwarding_pps: 100_000,
                loss_ratio: 0.0,
            },
            LoadPoint {
                offered_pps: 600_000,
                forwarding_pps: 451_000,
                loss_ratio: 0.25,
            },
        ];
        run.finish();
        let c = charts(&run);
        let line = c.rate_vs_load.unwrap();
        assert_eq!(line.series.len(), 1);
        assert_eq!(
            line.series[0].points,
            vec![(100_000.0, 100_000.0), (600_000.0, 451_000.0)]
        );
        let lat = c.latency.unwrap();
        assert_eq!(lat.series.len(), 3);
        assert_eq!(lat.kind, DistributionKind::Tail);
        // Five runs' histograms summed, bounds in µs.
        assert_eq!(lat.series[0].buckets[1], (20.0, 250));
        assert_eq!(c.repeated_runs.groups[1].values.len(), 5);
        for svg in [line.to_svg(), lat.to_svg(), c.repeated_runs.to_svg()] {
            assert!(svg.starts_with("<?xml") && svg.ends_with("</svg>\n"));
        }
    }

    /// Writes the sample report, JSON and charts to `$FASTFWD_PLOT_DIR`
    /// for a look; does nothing without it.
    #[test]
    fn write_sample_report_when_asked() {
        let Some(dir) = std::env::var_os("FASTFWD_PLOT_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut run = sample_run();
        run.contenders[0].load_curve = vec![
            LoadPoint {
                offered_pps: 100_000,
                forwarding_pps: 100_000,
                loss_ratio: 0.0,
            },
            LoadPoint {
                offered_pps: 300_000,
                forwarding_pps: 299_000,
                loss_ratio: 0.003,
            },
            LoadPoint {
                offered_pps: 600_000,
                forwarding_pps: 451_000,
                loss_ratio: 0.25,
            },
        ];
        run.finish();
        let c = charts(&run);
        let figures = ReportFigures {
            rate_vs_load: Some("report-rate.svg".into()),
            latency: Some("report-latency.svg".into()),
            repeated_runs: Some("report-runs.svg".into()),
        };
        std::fs::write(
            dir.join("report-rate.svg"),
            c.rate_vs_load.unwrap().to_svg(),
        )
        .unwrap();
        std::fs::write(dir.join("report-latency.svg"), c.latency.unwrap().to_svg()).unwrap();
        std::fs::write(dir.join("report-runs.svg"), c.repeated_runs.to_svg()).unwrap();
        std::fs::write(dir.join("report.md"), render_markdown(&run, &figures)).unwrap();
        std::fs::write(dir.join("report.txt"), comparison_table_text(&run)).unwrap();
        std::fs::write(dir.join("report.json"), run.to_json().unwrap()).unwrap();
    }
}
