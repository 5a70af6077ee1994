//! RFC 2544 section 26.1 throughput (and RFC 8219 for IPv6), with a loss
//! ratio allowance as FD.io's NDR (0) and PDR (0.5%) searches use: a binary
//! search for the highest offered rate whose loss ratio
//! `(attempted - received) / attempted` is at most the allowed ratio, for
//! each frame size, with latency and packet delay variation at that rate.
//!
//! On veth a zero-loss rate may not exist (a full 256-slot ring shows up
//! as ENOBUFS at the sender): the result then says that no rate met the
//! ratio instead of inventing one.
//!
//! This module does no I/O: trials run through [`TrialRunner`].

use serde::{Deserialize, Serialize};

pub use crate::equilibrium::{LatencySummary, TrialOutcome, TrialRunner, TrialSpec};

/// Frame sizes of RFC 2544 section 9.1 for Ethernet, FCS included.
pub const RFC2544_FRAME_SIZES: [u16; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// Bytes each frame costs on the wire besides the frame itself: 7 preamble,
/// 1 start delimiter, 12 inter-frame gap.
pub const WIRE_OVERHEAD_BYTES: u64 = 20;

/// Theoretical maximum frame rate of a link of `link_bps` bits per second
/// for `frame_size`-byte frames (FCS included), frames per second.
/// 10 Gbit/s and 64 bytes give 14,880,952.
pub fn theoretical_max_pps(link_bps: u64, frame_size: u16) -> u64 {
    link_bps / ((frame_size as u64 + WIRE_OVERHEAD_BYTES) * 8)
}

/// Inputs of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rfc2544Config {
    /// Link speed, bits per second (10_000_000_000 for 10GbE).
    pub link_bps: u64,
    /// Frame sizes to search, FCS included (64..=1518).
    pub frame_sizes: Vec<u16>,
    /// Highest loss ratio accepted: 0 for NDR, 0.005 for PDR.
    pub loss_ratio: f64,
    /// Stop when the bounds are this close, packets per second.
    pub resolution_pps: u64,
    /// Most trials per frame size.
    pub max_trials: u32,
    /// Length of each trial, seconds (RFC 2544 asks for at least 60).
    pub trial_s: f64,
    /// Highest rate to offer, when lower than the link's theoretical
    /// maximum (the generator's own limit, say), packets per second.
    pub max_pps: Option<u64>,
}

impl Default for Rfc2544Config {
    fn default() -> Self {
        Rfc2544Config {
            link_bps: 10_000_000_000,
            frame_sizes: RFC2544_FRAME_SIZES.to_vec(),
            loss_ratio: 0.0,
            resolution_pps: 1000,
            max_trials: 20,
            trial_s: 60.0,
            max_pps: None,
        }
    }
}

/// One trial of the search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchTrial {
    pub offered_pps: u64,
    pub outcome: TrialOutcome,
    pub loss_ratio: f64,
    pub passed: bool,
    /// The generator sent less than 99% of the offered rate.
    pub generator_limited: bool,
}

/// The measurements at the highest rate that met the loss ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoundRate {
    pub offered_pps: u64,
    /// The generator's achieved send rate.
    pub sent_pps: u64,
    /// Packets received per second over the trial.
    pub received_pps: f64,
    /// Packets attempted minus received.
    pub lost: u64,
    pub loss_ratio: f64,
    pub latency: Option<LatencySummary>,
    /// Packet delay variation: p99.9 minus minimum latency, nanoseconds.
    pub pdv_ns: Option<u64>,
    /// The generator, not the device, set this rate.
    pub generator_limited: bool,
}

/// Result for one frame size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameSizeResult {
    /// Frame size, FCS included.
    pub frame_size: u16,
    pub theoretical_max_pps: u64,
    /// `None` when no rate met the loss ratio.
    pub found: Option<FoundRate>,
    pub trials: Vec<SearchTrial>,
    pub trial_s: f64,
}

/// Result of the whole search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rfc2544Result {
    pub config: Rfc2544Config,
    pub frames: Vec<FrameSizeResult>,
}

/// Errors of the search.
#[derive(Debug, thiserror::Error)]
pub enum Rfc2544Error<E: std::error::Error + 'static> {
    #[error("invalid RFC 2544 configuration: {0}")]
    InvalidConfig(String),
    #[error("trial at {offered_pps} pps with {frame_size}-byte frames failed")]
    Trial {
        frame_size: u16,
        offered_pps: u64,
        #[source]
        source: E,
    },
}

/// Run the search for every configured frame size. A line per trial and
/// per frame size is passed to `out` as soon as it is known.
pub fn search<R: TrialRunner>(
    cfg: &Rfc2544Config,
    runner: &mut R,
    mut out: impl FnMut(&str),
) -> Result<Rfc2544Result, Rfc2544Error<R::Error>> {
    validate(cfg)?;
    let mut frames = Vec::with_capacity(cfg.frame_sizes.len());
    for &frame_size in &cfg.frame_sizes {
        frames.push(search_frame_size(cfg, frame_size, runner, &mut out)?);
    }
    Ok(Rfc2544Result {
        config: cfg.clone(),
        frames,
    })
}

fn validate<E: std::error::Error>(cfg: &Rfc2544Config) -> Result<(), Rfc2544Error<E>> {
    let bad = |m: String| Err(Rfc2544Error::InvalidConfig(m));
    if cfg.frame_sizes.is_empty() {
        return bad("no frame size given".into());
    }
    if let Some(f) = cfg.frame_sizes.iter().find(|&&f| !(64..=1518).contains(&f)) {
        return bad(format!("frame size {f} is outside 64..=1518"));
    }
    if !(0.0..1.0).contains(&cfg.loss_ratio) {
        return bad(format!("loss ratio {} is outside [0, 1)", cfg.loss_ratio));
    }
    if cfg.resolution_pps == 0 {
        return bad("resolution must be at least 1 pps".into());
    }
    if cfg.max_trials == 0 {
        return bad("at least one trial is needed".into());
    }
    if !(cfg.trial_s > 0.0 && cfg.trial_s.is_finite()) {
        return bad(format!("trial length {} s is not positive", cfg.trial_s));
    }
    if cfg.link_bps == 0 {
        return bad("link speed is 0 bit/s".into());
    }
    Ok(())
}

/// The trial with the lowest loss ratio (the lowest rate among equals):
/// what to quote when no rate met the allowed ratio.
pub fn lowest_loss(trials: &[SearchTrial]) -> Option<&SearchTrial> {
    trials.iter().min_by(|a, b| {
        a.loss_ratio
            .total_cmp(&b.loss_ratio)
            .then(a.offered_pps.cmp(&b.offered_pps))
    })
}

/// Run the binary search for one frame size.
pub fn search_frame_size<R: TrialRunner>(
    cfg: &Rfc2544Config,
    frame_size: u16,
    runner: &mut R,
    out: &mut impl FnMut(&str),
) -> Result<FrameSizeResult, Rfc2544Error<R::Error>> {
    validate(cfg)?;
    let theoretical = theoretical_max_pps(cfg.link_bps, frame_size);
    let top = cfg.max_pps.map_or(theoretical, |m| m.min(theoretical));
    let mut trials: Vec<SearchTrial> = Vec::new();
    let mut best: Option<usize> = None;
    // Invariant: `lo` passed (or is 0), `hi` failed (or is the top, untried).
    let mut lo = 0u64;
    let mut hi = top;
    let mut rate = top;
    while (trials.len() as u32) < cfg.max_trials && rate > 0 {
        let spec = TrialSpec {
            offered_pps: rate,
            frame_len: frame_size - 4,
            duration_s: cfg.trial_s,
        };
        let outcome = runner
            .run_trial(&spec)
            .map_err(|source| Rfc2544Error::Trial {
                frame_size,
                offered_pps: rate,
                source,
            })?;
        let loss_ratio = outcome.loss_ratio();
        let passed = outcome.attempted > 0 && loss_ratio <= cfg.loss_ratio;
        let generator_limited = (outcome.generator_pps as f64) < rate as f64 * 0.99;
        out(&format!(
            "  {frame_size} B trial {}: offered {rate} pps, sent {} pps, received {:.0} pps, loss {:.3}% -> {}{}",
            trials.len() + 1,
            outcome.generator_pps,
            outcome.receive_pps(),
            loss_ratio * 100.0,
            if passed { "pass" } else { "fail" },
            if generator_limited {
                " (limited by generator)"
            } else {
                ""
            },
        ));
        trials.push(SearchTrial {
            offered_pps: rate,
            outcome,
            loss_ratio,
            passed,
            generator_limited,
        });
        if passed {
            best = Some(trials.len() - 1);
            lo = rate;
            if rate == top {
                break;
            }
        } else {
            hi = rate;
        }
        if hi - lo <= cfg.resolution_pps {
            break;
        }
        rate = lo + (hi - lo) / 2;
    }
    let found = best.map(|i| {
        let t = &trials[i];
        FoundRate {
            offered_pps: t.offered_pps,
            sent_pps: t.outcome.generator_pps,
            received_pps: t.outcome.receive_pps(),
            lost: t.outcome.attempted.saturating_sub(t.outcome.received),
            loss_ratio: t.loss_ratio,
            latency: t.outcome.latency,
            pdv_ns: t.outcome.latency.map(|l| l.pdv_ns()),
            generator_limited: t.generator_limited,
        }
    });
    match &found {
        Some(f) => out(&format!(
            "{frame_size} B: throughput {} pps at loss ratio <= {} ({} trials)",
            f.offered_pps,
            cfg.loss_ratio,
            trials.len()
        )),
        None => {
            let lowest = lowest_loss(&trials).map_or(String::new(), |t| {
                format!(
                    ", lowest loss {:.3}% at {} pps",
                    t.loss_ratio * 100.0,
                    t.offered_pps
                )
            });
            out(&format!(
                "{frame_size} B: no rate met loss ratio <= {} ({} trials{lowest})",
                cfg.loss_ratio,
                trials.len()
            ))
        }
    }
    Ok(FrameSizeResult {
        frame_size,
        theoretical_max_pps: theoretical,
        found,
        trials,
        trial_s: cfg.trial_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("simulated failure")]
    struct SimError;

    /// A device that forwards up to `capacity(frame_len)` pps without loss
    /// and drops the excess; `base_loss` more is lost at any rate (veth
    /// scheduling stalls); the generator tops out at `generator_max_pps`.
    struct SimDevice {
        capacity: fn(u16) -> u64,
        base_loss: f64,
        generator_max_pps: u64,
        specs: Vec<TrialSpec>,
        fail_at: Option<usize>,
    }

    impl SimDevice {
        fn new(capacity: fn(u16) -> u64) -> Self {
            SimDevice {
                capacity,
                base_loss: 0.0,
                generator_max_pps: u64::MAX,
                specs: Vec::new(),
                fail_at: None,
            }
        }
    }

    impl TrialRunner for SimDevice {
        type Error = SimError;
        fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, SimError> {
            if self.fail_at == Some(self.specs.len()) {
                return Err(SimError);
            }
            self.specs.push(*spec);
            let secs = spec.duration_s;
            let sent_pps = spec.offered_pps.min(self.generator_max_pps);
            let fwd_pps = sent_pps.min((self.capacity)(spec.frame_len));
            let attempted = (sent_pps as f64 * secs) as u64;
            let received = ((fwd_pps as f64 * secs) * (1.0 - self.base_loss)) as u64;
            // Latency grows as the device nears saturation.
            let load = sent_pps as f64 / (self.capacity)(spec.frame_len) as f64;
            let base = 20_000 + (load.min(1.0) * 30_000.0) as u64;
            Ok(TrialOutcome {
                attempted,
                sent: attempted,
                generator_pps: sent_pps,
                rx_per_second: vec![fwd_pps; secs as usize],
                received,
                lost: attempted - received,
                duration_s: secs,
                latency: Some(LatencySummary {
                    min_ns: base / 2,
                    median_ns: base,
                    p99_ns: base * 2,
                    p999_ns: base * 3,
                    max_ns: base * 5,
                    samples: received,
                }),
            })
        }
    }

    fn cfg() -> Rfc2544Config {
        Rfc2544Config {
            link_bps: 1_000_000_000,
            frame_sizes: vec![64],
            loss_ratio: 0.0,
            resolution_pps: 1000,
            max_trials: 30,
            trial_s: 2.0,
            max_pps: None,
        }
    }

    #[test]
    fn theoretical_rates() {
        assert_eq!(theoretical_max_pps(10_000_000_000, 64), 14_880_952);
        assert_eq!(theoretical_max_pps(1_000_000_000, 64), 1_488_095);
        assert_eq!(theoretical_max_pps(1_000_000_000, 1518), 81_274);
        assert_eq!(theoretical_max_pps(100_000_000_000, 64), 148_809_523);
    }

    #[test]
    fn ndr_finds_the_lossless_capacity() {
        let mut dev = SimDevice::new(|_| 451_000);
        let mut lines = Vec::new();
        let r = search(&cfg(), &mut dev, |l| lines.push(l.to_string())).unwrap();
        let f = &r.frames[0];
        assert_eq!(f.theoretical_max_pps, 1_488_095);
        let found = f.found.as_ref().unwrap();
        assert!(found.offered_pps <= 451_000, "{found:?}");
        assert!(found.offered_pps > 451_000 - 1000, "{found:?}");
        assert_eq!(found.lost, 0);
        assert_eq!(found.loss_ratio, 0.0);
        assert!(!found.generator_limited);
        // First trial at the link's maximum, then halving.
        assert_eq!(dev.specs[0].offered_pps, 1_488_095);
        assert_eq!(dev.specs[1].offered_pps, 744_047);
        assert_eq!(dev.specs[0].frame_len, 60);
        // log2(1488095 / 1000) rounds up to 11 halvings, plus the first trial.
        assert!(f.trials.len() <= 12, "{} trials", f.trials.len());
        assert_eq!(
            found.latency.unwrap().p999_ns,
            found.pdv_ns.unwrap() + found.latency.unwrap().min_ns
        );
        assert!(lines.iter().any(|l| l.starts_with("64 B: throughput ")));
        assert!(lines[0].contains("trial 1: offered 1488095 pps"));
    }

    #[test]
    fn pdr_allows_the_stated_loss() {
        let mut dev = SimDevice::new(|_| 400_000);
        let c = Rfc2544Config {
            loss_ratio: 0.005,
            resolution_pps: 100,
            ..cfg()
        };
        let r = search(&c, &mut dev, |_| {}).unwrap();
        let found = r.frames[0].found.as_ref().unwrap();
        // Loss (x - 400000)/x <= 0.005 up to x = 400000 / 0.995 = 402010.
        assert!(found.offered_pps <= 402_010, "{found:?}");
        assert!(found.offered_pps > 402_010 - 100, "{found:?}");
        assert!(found.loss_ratio > 0.0 && found.loss_ratio <= 0.005);
    }

    #[test]
    fn no_lossless_rate_on_a_lossy_link() {
        let mut dev = SimDevice::new(|_| 400_000);
        dev.base_loss = 0.001;
        let mut lines = Vec::new();
        let r = search(&cfg(), &mut dev, |l| lines.push(l.to_string())).unwrap();
        assert!(r.frames[0].found.is_none());
        assert!(r.frames[0].trials.iter().all(|t| !t.passed));
        assert!(
            lines
                .last()
                .unwrap()
                .contains("no rate met loss ratio <= 0")
        );
        // The line quotes the trial with the least loss.
        let trials = &r.frames[0].trials;
        let lowest = lowest_loss(trials).unwrap();
        assert!(trials.iter().all(|t| t.loss_ratio >= lowest.loss_ratio));
        assert!(lowest.loss_ratio >= 0.001 - 1e-9);
        let last = lines.last().unwrap();
        let want = format!(
            "lowest loss {:.3}% at {} pps",
            lowest.loss_ratio * 100.0,
            lowest.offered_pps
        );
        assert!(last.contains(&want), "{last}");
        // A 0.5% allowance finds a rate.
        let c = Rfc2544Config {
            loss_ratio: 0.005,
            ..cfg()
        };
        let mut dev = SimDevice::new(|_| 400_000);
        dev.base_loss = 0.001;
        assert!(
            search(&c, &mut dev, |_| {}).unwrap().frames[0]
                .found
                .is_some()
        );
    }

    #[test]
    fn every_frame_size_and_the_trial_cap() {
        // 600 Kpps whatever the size: below the link's rate for 64 and 128
        // bytes, above it from 256 bytes on.
        let mut dev = SimDevice::new(|_| 600_000);
        let c = Rfc2544Config {
            frame_sizes: RFC2544_FRAME_SIZES.to_vec(),
            max_trials: 6,
            ..cfg()
        };
        let r = search(&c, &mut dev, |_| {}).unwrap();
        assert_eq!(r.frames.len(), 7);
        for f in &r.frames {
            assert!(f.trials.len() <= 6);
            let cap = 600_000;
            match &f.found {
                // Large frames: the device outruns the link, which is the limit.
                Some(x) if cap >= f.theoretical_max_pps => {
                    assert_eq!(x.offered_pps, f.theoretical_max_pps);
                    assert_eq!(f.trials.len(), 1);
                }
                Some(x) => assert!(x.offered_pps <= cap),
                None => panic!("{} B found nothing", f.frame_size),
            }
        }
        // Small frames hit the trial cap before the resolution.
        assert_eq!(r.frames[0].trials.len(), 6);
        assert_eq!(r.frames[1].trials.len(), 6);
        assert_eq!(r.frames[2].trials.len(), 1);
    }

    #[test]
    fn generator_limited_rates_are_flagged() {
        let mut dev = SimDevice::new(|_| 5_000_000);
        dev.generator_max_pps = 620_000;
        let r = search(&cfg(), &mut dev, |_| {}).unwrap();
        let found = r.frames[0].found.as_ref().unwrap();
        assert!(found.generator_limited);
        assert_eq!(found.sent_pps, 620_000);
        assert!(r.frames[0].trials[0].generator_limited);
    }

    #[test]
    fn max_pps_caps_the_search() {
        let mut dev = SimDevice::new(|_| 5_000_000);
        let c = Rfc2544Config {
            max_pps: Some(300_000),
            ..cfg()
        };
        let r = search(&c, &mut dev, |_| {}).unwrap();
        assert_eq!(dev.specs[0].offered_pps, 300_000);
        assert_eq!(r.frames[0].found.as_ref().unwrap().offered_pps, 300_000);
    }

    #[test]
    fn errors() {
        for bad in [
            Rfc2544Config {
                frame_sizes: vec![],
                ..cfg()
            },
            Rfc2544Config {
                frame_sizes: vec![63],
                ..cfg()
            },
            Rfc2544Config {
                frame_sizes: vec![1519],
                ..cfg()
            },
            Rfc2544Config {
                loss_ratio: 1.0,
                ..cfg()
            },
            Rfc2544Config {
                loss_ratio: -0.1,
                ..cfg()
            },
            Rfc2544Config {
                resolution_pps: 0,
                ..cfg()
            },
            Rfc2544Config {
                max_trials: 0,
                ..cfg()
            },
            Rfc2544Config {
                trial_s: f64::NAN,
                ..cfg()
            },
            Rfc2544Config {
                link_bps: 0,
                ..cfg()
            },
        ] {
            let mut dev = SimDevice::new(|_| 1);
            assert!(matches!(
                search(&bad, &mut dev, |_| {}).unwrap_err(),
                Rfc2544Error::InvalidConfig(_)
            ));
            assert!(dev.specs.is_empty());
        }
        let mut dev = SimDevice::new(|_| 100_000);
        dev.fail_at = Some(2);
        let e = search(&cfg(), &mut dev, |_| {}).unwrap_err();
        assert!(matches!(e, Rfc2544Error::Trial { frame_size: 64, .. }));
    }

    #[test]
    fn loss_is_attempted_minus_received() {
        let o = TrialOutcome {
            attempted: 1000,
            received: 990,
            duration_s: 2.0,
            ..TrialOutcome::default()
        };
        assert!((o.loss_ratio() - 0.01).abs() < 1e-12);
        assert_eq!(o.receive_pps(), 495.0);
        // Duplicates never make loss negative.
        let dup = TrialOutcome {
            attempted: 10,
            received: 12,
            ..TrialOutcome::default()
        };
        assert_eq!(dup.loss_ratio(), 0.0);
        assert_eq!(TrialOutcome::default().loss_ratio(), 0.0);
    }

    proptest::proptest! {
        /// With enough trials the search ends within the resolution below
        /// a lossless capacity, having offered only rates up to the top.
        #[test]
        fn finds_any_capacity_within_resolution(
            capacity in 1_000u64..1_488_095,
            resolution in 1u64..5_000,
        ) {
            thread_local!(static CAP: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
            CAP.with(|c| c.set(capacity));
            let mut dev = SimDevice::new(|_| CAP.with(|c| c.get()));
            let c = Rfc2544Config { resolution_pps: resolution, max_trials: 64, ..cfg() };
            let r = search(&c, &mut dev, |_| {}).unwrap();
            let f = &r.frames[0];
            let found = f.found.as_ref().map_or(0, |x| x.offered_pps);
            proptest::prop_assert!(found <= capacity);
            proptest::prop_assert!(capacity - found <= resolution.max(1), "capacity {} found {}", capacity, found);
            proptest::prop_assert!(dev.specs.iter().all(|s| s.offered_pps <= 1_488_095));
            // Binary search: about log2(top / resolution) trials, plus one.
            let bound = (1_488_095f64 / resolution as f64).log2().ceil() as usize + 2;
            proptest::prop_assert!(f.trials.len() <= bound, "{} trials > {}", f.trials.len(), bound);
        }
    }
}
