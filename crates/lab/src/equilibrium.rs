//! The equilibrium throughput search (BSD Router Project's `equilibrium`),
//! and the trial interface shared with [`crate::rfc2544`].
//!
//! The search offers a load for one trial, measures the forwarding rate as
//! the median of the receiver's non-zero per-second readings, and moves the
//! offered load up on a pass and down on a failure, halving the step after
//! the first change of direction, until the step is within the tolerance of
//! the offered load. All arithmetic is in whole Kpps, as the original tool
//! does, so a fixed-capacity device gives the same sequence of offered loads
//! and steps as the tool's published runs.
//!
//! This module does no I/O: the lab drives real trials through
//! [`TrialRunner`]; tests drive simulated devices.

use serde::{Deserialize, Serialize};

/// One trial the search asks for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrialSpec {
    /// Offered load, packets per second.
    pub offered_pps: u64,
    /// Ethernet frame length without FCS, as the generator writes it
    /// (60..=1514; the RFC 2544 frame size is this plus 4).
    pub frame_len: u16,
    /// How long the generator sends, seconds.
    pub duration_s: f64,
}

/// Latency over one trial, from the generator's timestamps, nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min_ns: u64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// Packets the figures were computed from.
    pub samples: u64,
}

impl LatencySummary {
    /// Packet delay variation as RFC 5481 reports it for benchmarks:
    /// the 99.9th percentile minus the minimum.
    pub fn pdv_ns(&self) -> u64 {
        self.p999_ns.saturating_sub(self.min_ns)
    }
}

/// What one trial measured.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TrialOutcome {
    /// Packets the generator tried to send, including those its transmit
    /// path refused (ENOBUFS on a full veth ring).
    pub attempted: u64,
    /// Packets the generator's transmit path accepted.
    pub sent: u64,
    /// The generator's own achieved send rate, packets per second.
    pub generator_pps: u64,
    /// The receiver's packet count for each second of the trial, in order.
    pub rx_per_second: Vec<u64>,
    /// Packets the receiver counted over the trial, late packets included.
    pub received: u64,
    /// Packets lost: `attempted - received` (never negative).
    pub lost: u64,
    /// How long the generator sent, seconds.
    pub duration_s: f64,
    /// Latency over the trial, when the receiver measured it.
    pub latency: Option<LatencySummary>,
}

impl TrialOutcome {
    /// Loss ratio `(attempted - received) / attempted`; 0 when nothing
    /// was attempted.
    pub fn loss_ratio(&self) -> f64 {
        if self.attempted == 0 {
            return 0.0;
        }
        self.attempted.saturating_sub(self.received) as f64 / self.attempted as f64
    }

    /// Receive rate over the trial, packets per second.
    pub fn receive_pps(&self) -> f64 {
        if self.duration_s > 0.0 {
            self.received as f64 / self.duration_s
        } else {
            0.0
        }
    }

    /// Median of the non-zero per-second receiver readings (mean of the
    /// two middle readings when their count is even, rounded down), or
    /// `None` when the receiver saw nothing.
    pub fn forwarding_pps(&self) -> Option<u64> {
        median_nonzero(&self.rx_per_second)
    }
}

/// Median of the non-zero values, integer (even counts average the two
/// middle values, rounded down).
pub fn median_nonzero(values: &[u64]) -> Option<u64> {
    let mut v: Vec<u64> = values.iter().copied().filter(|&x| x != 0).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        // Average without overflow.
        v[n / 2 - 1] / 2 + v[n / 2] / 2 + (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2
    })
}

/// Runs trials on a real lab or a simulated device.
pub trait TrialRunner {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Offer `spec.offered_pps` for `spec.duration_s` seconds, wait for
    /// late packets, and report what was sent and received.
    fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, Self::Error>;
}

/// Inputs of the equilibrium search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EquilibriumConfig {
    /// Link rate, Kpps. The search starts at half of it, step a quarter.
    pub link_kpps: u64,
    /// Measurement tolerance as a fraction (0.01 = 1%).
    pub tolerance: f64,
    /// Length of each trial, seconds (the original tool uses 30).
    pub trial_s: f64,
    /// Ethernet frame length without FCS (60 for the smallest IPv4 UDP frame).
    pub frame_len: u16,
    /// Whether the frames carry IPv6 (only changes the header lines).
    pub ipv6: bool,
    /// Iteration cap (the original tool stops after 16).
    pub max_iterations: u32,
}

impl Default for EquilibriumConfig {
    fn default() -> Self {
        EquilibriumConfig {
            link_kpps: 1488,
            tolerance: 0.01,
            trial_s: 30.0,
            frame_len: 60,
            ipv6: false,
            max_iterations: 16,
        }
    }
}

/// Direction of the move that led to an iteration's offered load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trend {
    Increasing,
    Decreasing,
}

impl Trend {
    fn as_str(self) -> &'static str {
        match self {
            Trend::Increasing => "increasing",
            Trend::Decreasing => "decreasing",
        }
    }
}

/// One iteration of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    /// 1-based.
    pub number: u32,
    pub offered_kpps: u64,
    pub step_kpps: u64,
    /// `None` on the first iteration.
    pub trend: Option<Trend>,
    /// The generator's achieved rate, Kpps.
    pub generator_kpps: u64,
    /// Median of the receiver's non-zero per-second readings, Kpps, before capping.
    pub measured_kpps: u64,
    /// The forwarding rate used by the search: measured, capped at the offered load.
    pub forwarding_kpps: u64,
    /// Whether the forwarding rate reached the offered load within tolerance.
    pub passed: bool,
    /// The printed lines of this iteration, as the original tool prints them.
    pub lines: Vec<String>,
    /// The raw trial measurements.
    pub outcome: TrialOutcome,
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The step fell within the tolerance of the offered load.
    Converged,
    /// The device forwarded everything the generator could send, and the
    /// generator could not reach the offered load: the result is limited
    /// by the generator, not the device.
    GeneratorLimited,
    /// The iteration cap was reached first.
    IterationLimit,
}

/// Result of an equilibrium search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EquilibriumResult {
    pub config: EquilibriumConfig,
    pub iterations: Vec<Iteration>,
    /// The last forwarding rate measured, Kpps.
    pub estimated_kpps: u64,
    /// The highest forwarding rate measured (after capping), Kpps.
    pub max_seen_kpps: u64,
    pub stop: StopReason,
}

impl EquilibriumResult {
    /// The whole report in the original tool's form: header, iterations,
    /// final line.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for l in header_lines(&self.config) {
            s.push_str(&l);
            s.push('\n');
        }
        for it in &self.iterations {
            for l in &it.lines {
                s.push_str(l);
                s.push('\n');
            }
        }
        for l in self.final_lines() {
            s.push_str(&l);
            s.push('\n');
        }
        s
    }

    /// "Estimated Equilibrium Ethernet throughput= N Kpps (maximum value
    /// seen: M Kpps)", followed by a note when the generator was the limit.
    pub fn final_lines(&self) -> Vec<String> {
        let mut v = vec![format!(
            "Estimated Equilibrium Ethernet throughput= {} Kpps (maximum value seen: {} Kpps)",
            self.estimated_kpps, self.max_seen_kpps
        )];
        match self.stop {
            StopReason::GeneratorLimited => {
                v.push("  - limited by generator: the device forwarded all it was sent".into())
            }
            StopReason::IterationLimit => v.push(format!(
                "  - stopped after {} iterations without converging",
                self.iterations.len()
            )),
            StopReason::Converged => {}
        }
        v
    }
}

/// Errors of the equilibrium search.
#[derive(Debug, thiserror::Error)]
pub enum EquilibriumError<E: std::error::Error + 'static> {
    #[error("invalid equilibrium configuration: {0}")]
    InvalidConfig(String),
    #[error("trial at {offered_kpps} Kpps failed")]
    Trial {
        offered_kpps: u64,
        #[source]
        source: E,
    },
    #[error("no packet received at {offered_kpps} Kpps: check the topology and routes")]
    NothingReceived { offered_kpps: u64 },
    #[error("forwarding rate below 1 Kpps at {offered_kpps} Kpps offered, cannot continue")]
    RateBelowOneKpps { offered_kpps: u64 },
    #[error("offered load reached 0 Kpps (too many packets dropped?), cannot continue")]
    OfferedLoadReachedZero,
}

/// The header lines the original tool prints before the first iteration.
pub fn header_lines(cfg: &EquilibriumConfig) -> Vec<String> {
    let (af, ip_hdr) = if cfg.ipv6 { (6, 48u16) } else { (4, 28u16) };
    let packet = cfg.frame_len.saturating_sub(14);
    let udp_load = packet.saturating_sub(ip_hdr);
    vec![
        "Benchmark tool using equilibrium throughput method".into(),
        "- Benchmark mode: Throughput (pps) for Router".into(),
        format!(
            "- UDP load = {udp_load}B, IPv{af} packet size={packet}B, Ethernet frame size={}B",
            cfg.frame_len
        ),
        format!("- Link rate = {} Kpps", cfg.link_kpps),
        format!("- Tolerance = {}", cfg.tolerance),
    ]
}

/// `value * (1 - tol)` and `value * tol`, rounded down, in exact decimal
/// arithmetic on parts per million so that 5000 x 0.99 is 4950, not 4949.
fn tol_ppm(tol: f64) -> u64 {
    (tol * 1e6).round() as u64
}
fn below_by_tol(value: u64, ppm: u64) -> u64 {
    ((value as u128 * (1_000_000 - ppm as u128)) / 1_000_000) as u64
}
fn share_of(value: u64, ppm: u64) -> u64 {
    ((value as u128 * ppm as u128) / 1_000_000) as u64
}

/// Run the equilibrium search. Each printed line is passed to `out` as
/// soon as it is known (trials are long); the same lines are kept in the
/// result.
pub fn search<R: TrialRunner>(
    cfg: &EquilibriumConfig,
    runner: &mut R,
    mut out: impl FnMut(&str),
) -> Result<EquilibriumResult, EquilibriumError<R::Error>> {
    if cfg.link_kpps < 4 {
        return Err(EquilibriumError::InvalidConfig(format!(
            "link rate {} Kpps is below 4 Kpps",
            cfg.link_kpps
        )));
    }
    if !(cfg.tolerance > 0.0 && cfg.tolerance < 1.0) {
        return Err(EquilibriumError::InvalidConfig(format!(
            "tolerance {} is not between 0 and 1 (exclusive)",
            cfg.tolerance
        )));
    }
    if !(cfg.trial_s > 0.0 && cfg.trial_s.is_finite()) {
        return Err(EquilibriumError::InvalidConfig(format!(
            "trial length {} s is not positive",
            cfg.trial_s
        )));
    }
    if cfg.max_iterations == 0 {
        return Err(EquilibriumError::InvalidConfig(
            "at most 0 iterations allowed".into(),
        ));
    }
    let ppm = tol_ppm(cfg.tolerance);
    for l in header_lines(cfg) {
        out(&l);
    }

    let mut oload = cfg.link_kpps / 2;
    let mut step = cfg.link_kpps / 4;
    let mut trend: Option<Trend> = None;
    let mut peak = false;
    let mut max_seen = 0u64;
    let mut iterations = Vec::new();
    let mut stop = StopReason::IterationLimit;
    let mut fwrate = 0u64;

    for number in 1..=cfg.max_iterations {
        let mut lines = Vec::new();
        let mut emit = |lines: &mut Vec<String>, l: String| {
            out(&l);
            lines.push(l);
        };
        emit(&mut lines, format!("Iteration {number}"));
        emit(&mut lines, format!("  - Offering load = {oload} Kpps"));
        emit(&mut lines, format!("  - Step = {step} Kpps"));
        if let Some(t) = trend {
            emit(&mut lines, format!("  - Trend = {}", t.as_str()));
        }
        let spec = TrialSpec {
            offered_pps: oload * 1000,
            frame_len: cfg.frame_len,
            duration_s: cfg.trial_s,
        };
        let outcome = runner
            .run_trial(&spec)
            .map_err(|source| EquilibriumError::Trial {
                offered_kpps: oload,
                source,
            })?;
        let measured = outcome
            .forwarding_pps()
            .ok_or(EquilibriumError::NothingReceived {
                offered_kpps: oload,
            })?
            / 1000;
        let generator = outcome.generator_pps / 1000;
        let oload_tol = below_by_tol(oload, ppm);

        let mut generator_limited = false;
        if generator < oload_tol {
            emit(
                &mut lines,
                format!("  - Warning: Generated only {generator}Kpps in place of {oload}Kpps"),
            );
            // The device kept up with everything the generator managed
            // (equal within the tolerance): the generator is the limit.
            if measured >= below_by_tol(generator, ppm) {
                generator_limited = true;
            }
        }
        if generator_limited {
            emit(
                &mut lines,
                format!(
                    "  - Measured forwarding rate = {measured} Kpps which is the maximum supported by generator"
                ),
            );
        } else {
            emit(
                &mut lines,
                format!("  - Measured forwarding rate = {measured} Kpps"),
            );
        }
        fwrate = measured;
        if fwrate > oload {
            emit(
                &mut lines,
                "  - forwarding rate greater than offering load! (forcing FWRATE=OLOAD)".into(),
            );
            fwrate = oload;
        }
        if !generator_limited && fwrate < 1 {
            return Err(EquilibriumError::RateBelowOneKpps {
                offered_kpps: oload,
            });
        }
        max_seen = max_seen.max(fwrate);
        let passed = fwrate >= oload_tol;
        let mut record = Iteration {
            number,
            offered_kpps: oload,
            step_kpps: step,
            trend,
            generator_kpps: generator,
            measured_kpps: measured,
            forwarding_kpps: fwrate,
            passed,
            lines: Vec::new(),
            outcome,
        };
        if generator_limited {
            record.lines = lines;
            iterations.push(record);
            stop = StopReason::GeneratorLimited;
            break;
        }

        if passed {
            if trend == Some(Trend::Decreasing) {
                peak = true;
            }
            if peak {
                step /= 2;
            }
            oload += step;
            trend = Some(Trend::Increasing);
        } else {
            if trend == Some(Trend::Increasing) {
                peak = true;
            }
            if peak {
                step /= 2;
            }
            oload = oload.saturating_sub(step);
            // Starting far above the device's rate would drive the next
            // offered load to zero: restart from what it forwarded.
            if trend.is_none() && fwrate < step {
                emit(
                    &mut lines,
                    "  - Forwarded rate too low, forcing OLOAD=FWRATE and STEP=FWRATE/2".into(),
                );
                step = fwrate / 2;
                oload = fwrate;
            }
            trend = Some(Trend::Decreasing);
        }
        if oload <= 1 {
            if step < 2 {
                return Err(EquilibriumError::OfferedLoadReachedZero);
            }
            emit(
                &mut lines,
                "  - Too big initial value, need to reduce STEP".into(),
            );
            step /= 2;
            oload += step;
        }
        record.lines = lines;
        iterations.push(record);
        if step <= share_of(oload, ppm) {
            stop = StopReason::Converged;
            break;
        }
    }

    let result = EquilibriumResult {
        config: cfg.clone(),
        iterations,
        estimated_kpps: fwrate,
        max_seen_kpps: max_seen,
        stop,
    };
    for l in result.final_lines() {
        out(&l);
    }
    Ok(result)
}
