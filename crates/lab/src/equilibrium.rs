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
//! A trial passes when the forwarding rate is at least the offered load
//! less the tolerance (both rounded down to whole Kpps). The seed's IPv6
//! run follows this rule line for line (see the tests); its IPv4 run
//! matches a comparison against the full offered load instead (5434 Kpps
//! forwarded at 5469 offered counted as a failure there), as the tool's
//! versions before the tolerance was added to this test did.
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
    /// The generator's own achieved send rate, packets per second. Must be
    /// filled: the searches compare it with the offered load to tell a
    /// generator-limited result (0 reads as "the generator sent nothing").
    pub generator_pps: u64,
    /// The receiver's packet count for each second of the trial, in order,
    /// without the warm-up and cool-down seconds the runner skips. Zero
    /// readings (the trial's edges) are left out of the median.
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

/// Highest link rate accepted, Kpps (a trillion packets per second keeps
/// every offered load, in pps, far from overflow).
pub const MAX_LINK_KPPS: u64 = 1_000_000_000;

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
    if !(4..=MAX_LINK_KPPS).contains(&cfg.link_kpps) {
        return Err(EquilibriumError::InvalidConfig(format!(
            "link rate {} Kpps is outside 4..={MAX_LINK_KPPS} Kpps",
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// A device that forwards at most `capacity_pps` every second, fed by a
    /// generator that sends at most `generator_max_pps`; optional per-second
    /// noise on the capacity.
    struct SimDevice {
        capacity_pps: u64,
        generator_max_pps: u64,
        noise: Option<(rand::rngs::StdRng, f64)>,
        offered: Vec<u64>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("simulated failure")]
    struct SimError;

    impl SimDevice {
        fn fixed(capacity_pps: u64) -> Self {
            SimDevice {
                capacity_pps,
                generator_max_pps: u64::MAX,
                noise: None,
                offered: Vec::new(),
            }
        }
    }

    impl TrialRunner for SimDevice {
        type Error = SimError;
        fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, SimError> {
            self.offered.push(spec.offered_pps);
            let secs = spec.duration_s.round() as usize;
            let sent_ps = spec.offered_pps.min(self.generator_max_pps);
            let mut rx = Vec::with_capacity(secs);
            for _ in 0..secs {
                let cap = match &mut self.noise {
                    Some((rng, frac)) => {
                        let f: f64 = rng.random_range(-*frac..=*frac);
                        (self.capacity_pps as f64 * (1.0 + f)) as u64
                    }
                    None => self.capacity_pps,
                };
                rx.push(sent_ps.min(cap));
            }
            let received: u64 = rx.iter().sum();
            let attempted = spec.offered_pps * secs as u64;
            Ok(TrialOutcome {
                attempted,
                sent: sent_ps * secs as u64,
                generator_pps: sent_ps,
                rx_per_second: rx,
                received,
                lost: attempted.saturating_sub(received),
                duration_s: spec.duration_s,
                latency: None,
            })
        }
    }

    /// Replays the forwarding rates a real run measured, one per trial.
    struct Replay {
        measured_kpps: Vec<u64>,
        next: usize,
    }

    impl TrialRunner for Replay {
        type Error = SimError;
        fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, SimError> {
            let m = *self.measured_kpps.get(self.next).ok_or(SimError)?;
            self.next += 1;
            Ok(TrialOutcome {
                generator_pps: spec.offered_pps,
                rx_per_second: vec![m * 1000; 3],
                duration_s: 3.0,
                ..TrialOutcome::default()
            })
        }
    }

    fn cfg(link_kpps: u64) -> EquilibriumConfig {
        EquilibriumConfig {
            link_kpps,
            trial_s: 5.0,
            ..EquilibriumConfig::default()
        }
    }

    fn steps(r: &EquilibriumResult) -> Vec<(u64, u64)> {
        r.iterations
            .iter()
            .map(|i| (i.offered_kpps, i.step_kpps))
            .collect()
    }

    #[test]
    fn reproduces_the_seed_ipv6_run() {
        // The seed's IPv6 run: link 10000 Kpps, 62-byte frames; replaying
        // its measured rates must print its output line for line.
        let want = "\
Benchmark tool using equilibrium throughput method
- Benchmark mode: Throughput (pps) for Router
- UDP load = 0B, IPv6 packet size=48B, Ethernet frame size=62B
- Link rate = 10000 Kpps
- Tolerance = 0.01
Iteration 1
  - Offering load = 5000 Kpps
  - Step = 2500 Kpps
  - Measured forwarding rate = 2681 Kpps
Iteration 2
  - Offering load = 2500 Kpps
  - Step = 2500 Kpps
  - Trend = decreasing
  - Measured forwarding rate = 2499 Kpps
Iteration 3
  - Offering load = 3750 Kpps
  - Step = 1250 Kpps
  - Trend = increasing
  - Measured forwarding rate = 2682 Kpps
Iteration 4
  - Offering load = 3125 Kpps
  - Step = 625 Kpps
  - Trend = decreasing
  - Measured forwarding rate = 2681 Kpps
Iteration 5
  - Offering load = 2813 Kpps
  - Step = 312 Kpps
  - Trend = decreasing
  - Measured forwarding rate = 2681 Kpps
Iteration 6
  - Offering load = 2657 Kpps
  - Step = 156 Kpps
  - Trend = decreasing
  - Measured forwarding rate = 2657 Kpps
Iteration 7
  - Offering load = 2735 Kpps
  - Step = 78 Kpps
  - Trend = increasing
  - Measured forwarding rate = 2680 Kpps
Iteration 8
  - Offering load = 2696 Kpps
  - Step = 39 Kpps
  - Trend = decreasing
  - Measured forwarding rate = 2679 Kpps
Estimated Equilibrium Ethernet throughput= 2679 Kpps (maximum value seen: 2682 Kpps)
";
        let mut dev = Replay {
            measured_kpps: vec![2681, 2499, 2682, 2681, 2681, 2657, 2680, 2679],
            next: 0,
        };
        let c = EquilibriumConfig {
            link_kpps: 10000,
            frame_len: 62,
            ipv6: true,
            ..cfg(10000)
        };
        let mut streamed = String::new();
        let r = search(&c, &mut dev, |l| {
            streamed.push_str(l);
            streamed.push('\n');
        })
        .unwrap();
        assert_eq!(streamed, want);
        assert_eq!(r.render(), want);
        assert_eq!(r.stop, StopReason::Converged);
        assert_eq!((r.estimated_kpps, r.max_seen_kpps), (2679, 2682));
        assert_eq!(dev.next, 8, "stops after the eighth trial");
    }

    #[test]
    fn fixed_capacity_follows_the_seed_pattern() {
        // A device that forwards exactly 2681 Kpps goes through the same
        // offered loads and steps as the seed's IPv6 run.
        let mut dev = SimDevice::fixed(2_681_000);
        let r = search(&cfg(10000), &mut dev, |_| {}).unwrap();
        assert_eq!(
            steps(&r),
            vec![
                (5000, 2500),
                (2500, 2500),
                (3750, 1250),
                (3125, 625),
                (2813, 312),
                (2657, 156),
                (2735, 78),
                (2696, 39),
            ]
        );
        let trends: Vec<Option<Trend>> = r.iterations.iter().map(|i| i.trend).collect();
        use Trend::*;
        assert_eq!(
            trends,
            vec![
                None,
                Some(Decreasing),
                Some(Increasing),
                Some(Decreasing),
                Some(Decreasing),
                Some(Decreasing),
                Some(Increasing),
                Some(Decreasing)
            ]
        );
        let passed: Vec<bool> = r.iterations.iter().map(|i| i.passed).collect();
        assert_eq!(
            passed,
            [false, true, false, false, false, true, false, true]
        );
        assert_eq!(r.stop, StopReason::Converged);
        assert_eq!((r.estimated_kpps, r.max_seen_kpps), (2681, 2681));
        // Each trial offered OLOAD in pps for the configured length.
        assert_eq!(dev.offered[0], 5_000_000);
        assert_eq!(r.iterations[0].outcome.rx_per_second.len(), 5);
    }

    #[test]
    fn fixed_capacity_above_the_first_load() {
        // Starts with a pass, so the step stays 2500 until the first
        // failure (as in the seed's IPv4 run's first five iterations).
        let mut dev = SimDevice::fixed(5_440_000);
        let r = search(&cfg(10000), &mut dev, |_| {}).unwrap();
        assert_eq!(
            steps(&r),
            vec![
                (5000, 2500),
                (7500, 2500),
                (6250, 1250),
                (5625, 625),
                (5313, 312),
                (5469, 156),
                (5547, 78),
            ]
        );
        // 5547 fails; the next step, 39, is within 1% of 5508: stop.
        assert_eq!(r.estimated_kpps, 5440);
        assert_eq!(r.stop, StopReason::Converged);
        // Capped at the offered load when the device forwards more.
        assert_eq!(r.iterations[0].forwarding_kpps, 5000);
        assert_eq!(r.iterations[0].measured_kpps, 5000);
    }

    #[test]
    fn noisy_capacity_converges_near_the_true_rate() {
        for seed in 0..20u64 {
            let mut dev = SimDevice {
                capacity_pps: 451_000,
                generator_max_pps: u64::MAX,
                noise: Some((rand::rngs::StdRng::seed_from_u64(seed), 0.03)),
                offered: Vec::new(),
            };
            let r = search(&cfg(1488), &mut dev, |_| {}).unwrap();
            assert_eq!(r.stop, StopReason::Converged, "seed {seed}");
            // The median of 5 noisy seconds stays within the noise band,
            // and the final offered load brackets the capacity.
            assert!(
                (437..=465).contains(&r.estimated_kpps),
                "seed {seed}: {}",
                r.render()
            );
            assert!(r.iterations.len() <= 16);
        }
    }

    #[test]
    fn generator_limited_stops_and_says_so() {
        let mut dev = SimDevice {
            capacity_pps: 10_000_000,
            generator_max_pps: 600_000,
            noise: None,
            offered: Vec::new(),
        };
        let r = search(&cfg(1488), &mut dev, |_| {}).unwrap();
        assert_eq!(r.stop, StopReason::GeneratorLimited);
        assert_eq!(r.iterations.len(), 1);
        assert_eq!(r.estimated_kpps, 600);
        let text = r.render();
        assert!(text.contains("  - Warning: Generated only 600Kpps in place of 744Kpps\n"));
        assert!(text.contains(
            "  - Measured forwarding rate = 600 Kpps which is the maximum supported by generator\n"
        ));
        assert!(text.contains("limited by generator"));
    }

    #[test]
    fn slow_generator_but_slower_device_keeps_searching() {
        let mut dev = SimDevice {
            capacity_pps: 450_000,
            generator_max_pps: 600_000,
            noise: None,
            offered: Vec::new(),
        };
        let r = search(&cfg(1488), &mut dev, |_| {}).unwrap();
        assert_eq!(r.stop, StopReason::Converged);
        assert_eq!(r.estimated_kpps, 450);
        assert!(r.render().contains("Warning: Generated only 600Kpps"));
    }

    #[test]
    fn first_failure_far_below_the_step_restarts_from_the_measured_rate() {
        let mut dev = SimDevice::fixed(1_000_000);
        let r = search(&cfg(14880), &mut dev, |_| {}).unwrap();
        let s = steps(&r);
        assert_eq!(s[0], (7440, 3720));
        assert_eq!(s[1], (1000, 500), "{}", r.render());
        assert!(
            r.iterations[0]
                .lines
                .iter()
                .any(|l| l.contains("forcing OLOAD=FWRATE and STEP=FWRATE/2"))
        );
        assert_eq!(r.estimated_kpps, 1000);
        assert_eq!(r.stop, StopReason::Converged);
    }

    #[test]
    fn offered_load_reaching_zero_is_an_error() {
        let mut dev = SimDevice::fixed(1_000);
        let e = search(&cfg(100), &mut dev, |_| {}).unwrap_err();
        assert!(matches!(e, EquilibriumError::OfferedLoadReachedZero), "{e}");
    }

    #[test]
    fn iteration_cap() {
        // A device faster than any offered load, a generator that keeps up:
        // every trial passes and the step never shrinks.
        let mut dev = SimDevice::fixed(u64::MAX / 4);
        let c = EquilibriumConfig {
            max_iterations: 16,
            ..cfg(1000)
        };
        let r = search(&c, &mut dev, |_| {}).unwrap();
        assert_eq!(r.stop, StopReason::IterationLimit);
        assert_eq!(r.iterations.len(), 16);
        assert_eq!(r.iterations[15].offered_kpps, 500 + 15 * 250);
        assert!(r.render().contains("stopped after 16 iterations"));
    }

    #[test]
    fn errors() {
        let mut dev = SimDevice::fixed(0);
        assert!(matches!(
            search(&cfg(1000), &mut dev, |_| {}).unwrap_err(),
            EquilibriumError::NothingReceived { offered_kpps: 500 }
        ));
        let mut dev = Replay {
            measured_kpps: vec![],
            next: 0,
        };
        let e = search(&cfg(1000), &mut dev, |_| {}).unwrap_err();
        assert!(matches!(
            e,
            EquilibriumError::Trial {
                offered_kpps: 500,
                ..
            }
        ));
        assert!(std::error::Error::source(&e).is_some());
        for bad in [
            EquilibriumConfig {
                link_kpps: 3,
                ..cfg(3)
            },
            cfg(u64::MAX),
            EquilibriumConfig {
                tolerance: 0.0,
                ..cfg(1000)
            },
            EquilibriumConfig {
                tolerance: 1.0,
                ..cfg(1000)
            },
            EquilibriumConfig {
                trial_s: 0.0,
                ..cfg(1000)
            },
            EquilibriumConfig {
                max_iterations: 0,
                ..cfg(1000)
            },
        ] {
            let mut dev = SimDevice::fixed(1);
            assert!(matches!(
                search(&bad, &mut dev, |_| {}).unwrap_err(),
                EquilibriumError::InvalidConfig(_)
            ));
            assert!(dev.offered.is_empty());
        }
    }

    #[test]
    fn ipv4_header_lines_match_the_seed() {
        let c = EquilibriumConfig {
            link_kpps: 10000,
            ..EquilibriumConfig::default()
        };
        assert_eq!(
            header_lines(&c),
            [
                "Benchmark tool using equilibrium throughput method",
                "- Benchmark mode: Throughput (pps) for Router",
                "- UDP load = 18B, IPv4 packet size=46B, Ethernet frame size=60B",
                "- Link rate = 10000 Kpps",
                "- Tolerance = 0.01",
            ]
        );
    }

    #[test]
    fn medians_and_decimal_tolerance() {
        assert_eq!(median_nonzero(&[0, 5, 0, 3, 9]), Some(5));
        assert_eq!(median_nonzero(&[4, 0, 7]), Some(5));
        assert_eq!(median_nonzero(&[u64::MAX, u64::MAX]), Some(u64::MAX));
        assert_eq!(median_nonzero(&[0, 0]), None);
        let ppm = tol_ppm(0.01);
        assert_eq!(below_by_tol(5000, ppm), 4950);
        assert_eq!(below_by_tol(5469, ppm), 5414);
        assert_eq!(share_of(5430, ppm), 54);
    }

    #[test]
    fn result_round_trips_through_json() {
        let mut dev = SimDevice::fixed(2_681_000);
        let r = search(&cfg(10000), &mut dev, |_| {}).unwrap();
        let j = serde_json::to_string(&r).unwrap();
        assert!(j.contains("\"stop\":\"converged\""));
        let back: EquilibriumResult = serde_json::from_str(&j).unwrap();
        assert_eq!(back, r);
    }

    proptest::proptest! {
        /// On any fixed-capacity device below the link rate the search
        /// converges within 16 iterations to a rate within a few steps
        /// below the capacity, and every move follows the rules: the step
        /// is fixed until the first change of direction, then halves.
        #[test]
        fn converges_on_any_fixed_capacity(
            link_kpps in 100u64..20_000,
            share in 0.02f64..0.9,
        ) {
            let capacity_kpps = ((link_kpps as f64 * share) as u64).max(10);
            let mut dev = SimDevice::fixed(capacity_kpps * 1000);
            let r = search(&cfg(link_kpps), &mut dev, |_| {}).unwrap();
            proptest::prop_assert_eq!(r.stop, StopReason::Converged);
            proptest::prop_assert!(r.iterations.len() <= 16);
            proptest::prop_assert!(r.estimated_kpps <= capacity_kpps);
            proptest::prop_assert!(
                r.estimated_kpps as f64 >= capacity_kpps as f64 * 0.95,
                "capacity {} estimated {}\n{}", capacity_kpps, r.estimated_kpps, r.render()
            );
            let mut changed = false;
            for w in r.iterations.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                if a.trend.is_some() && b.trend != a.trend {
                    changed = true;
                }
                let forced = a.lines.iter().any(|l| l.contains("forcing OLOAD"));
                if forced {
                    proptest::prop_assert_eq!(b.offered_kpps, a.forwarding_kpps);
                    continue;
                }
                if changed {
                    proptest::prop_assert_eq!(b.step_kpps, a.step_kpps / 2);
                } else {
                    proptest::prop_assert_eq!(b.step_kpps, a.step_kpps);
                }
                let expected = if a.passed {
                    a.offered_kpps + b.step_kpps
                } else {
                    a.offered_kpps - b.step_kpps
                };
                proptest::prop_assert_eq!(b.offered_kpps, expected);
            }
        }
    }
}
