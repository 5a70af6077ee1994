//! Trials on the lab topology and the side-by-side benchmark.
//!
//! [`LabRunner`] runs one trial: the receiver thread enters sink and opens
//! its ring on s0, the generator thread enters gen and sends on g0 at the
//! offered load, and the calling thread samples the kernel counters of d0,
//! d1 and s0 every whole second of the generator's run plus the busy share
//! of every core (/proc/stat). It implements the searches'
//! [`TrialRunner`], so `equilibrium::search` and `rfc2544::search` drive
//! real traffic through it.
//!
//! [`run_bench`] brings the topology up, loads the full table into dut,
//! measures the generator's own maximum, then for each [`Contender`] a
//! load curve and an equilibrium search, and fixed-load repeats with the
//! contenders interleaved; it writes report.md, result.json and SVG plots.

use crate::equilibrium::{
    self, EquilibriumConfig, LatencySummary, TrialOutcome, TrialRunner, TrialSpec,
};
use crate::flows::FlowSet;
use crate::generator::{self, FrameBuilder, GenConfig, GenReport};
use crate::recv::{NetDevReader, Receiver, RecvConfig, RecvReport};
use crate::report::{
    self, CorePlacement, HostInfo, LabRun, LoadPoint, RunConfig, RunRecord, VersionInfo,
    falls_past_peak,
};
use crate::sys;
use crate::topo::{
    DUT_IN_MAC, FibLoad, FirewallPreset, GEN_MAC, TopoConfig, TopoError, TopoGuard, Topology,
};
use crate::xdp::{LiveGenerator, XdpReceiver};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Lab errors.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Building or changing the topology failed.
    #[error(transparent)]
    Topo(#[from] TopoError),
    /// The generator failed.
    #[error("generator: {0}")]
    Gen(#[from] generator::GenError),
    /// The receiver failed.
    #[error("receiver: {0}")]
    Recv(#[from] crate::recv::RecvError),
    /// A file or system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system error.
        source: std::io::Error,
    },
    /// Ctrl-C or SIGTERM.
    #[error("interrupted")]
    Interrupted,
    /// Something else (a thread died, a search failed).
    #[error("{0}")]
    Other(String),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}

/// Makes Ctrl-C and SIGTERM stop the lab cleanly (namespaces removed).
pub fn install_interrupt_handler() -> Result<(), LabError> {
    sys::install_interrupt_handler().map_err(io_err("installing the SIGINT/SIGTERM handlers"))
}

/// The flag Ctrl-C and SIGTERM set, for loops that take a stop flag.
pub fn interrupt_flag() -> &'static AtomicBool {
    sys::interrupted()
}

/// Has Ctrl-C or SIGTERM arrived?
pub fn interrupted() -> bool {
    sys::interrupted().load(Ordering::Relaxed)
}

/// Per-core CPU time from /proc/stat: (busy, total) jiffies per core.
#[derive(Debug, Clone, Default)]
pub struct CpuTimes(Vec<(u64, u64)>);

impl CpuTimes {
    /// Reads /proc/stat now.
    pub fn now() -> Self {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        Self(parse_proc_stat(&text))
    }

    /// Busy percentage of each core between `earlier` and `self`.
    pub fn busy_pct_since(&self, earlier: &CpuTimes) -> Vec<f64> {
        self.0
            .iter()
            .zip(&earlier.0)
            .map(|(a, b)| {
                let total = a.1.saturating_sub(b.1);
                if total == 0 {
                    0.0
                } else {
                    a.0.saturating_sub(b.0) as f64 * 100.0 / total as f64
                }
            })
            .collect()
    }
}

fn parse_proc_stat(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(8)
                .filter_map(|f| f.parse().ok())
                .collect();
            let total: u64 = v.iter().sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            (total - idle.min(total), total)
        })
        .collect()
}

/// How the generator's frames reach the device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// XDP frames from the live-frames generator, as a native-XDP NIC
    /// delivers them ([`crate::xdp::run_live`]).
    Live,
    /// Socket buffers from AF_PACKET `sendmmsg` ([`generator::run`]): veth copies
    /// each into an skb before d0's XDP or stack sees it.
    Packet,
}

impl InputMode {
    /// The name reports use.
    pub fn label(self) -> &'static str {
        match self {
            InputMode::Live => "live XDP frames (BPF_PROG_RUN live-frames generator)",
            InputMode::Packet => "socket buffers (AF_PACKET sendmmsg generator)",
        }
    }
}

/// How the sink counts what arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverMode {
    /// Counted, checked and dropped in XDP on s0 ([`crate::xdp::XdpReceiver`]).
    Xdp,
    /// A TPACKET_V3 ring on s0 ([`Receiver`]).
    Packet,
}

/// The traffic every trial sends.
#[derive(Debug, Clone)]
pub struct Traffic {
    /// Flows.
    pub flows: FlowSet,
    /// How frames are sent.
    pub input: InputMode,
    /// How they are received.
    pub receiver: ReceiverMode,
    /// Frames per `sendmmsg`.
    pub batch: usize,
    /// Whole seconds left out of the rates at the start of each trial.
    pub warmup_s: u32,
    /// Whole seconds left out at the end.
    pub cooldown_s: u32,
    /// Longest wait for late packets after the generator stops (the wait
    /// ends sooner once nothing moves, [`DRAIN_QUIET`]).
    pub grace: Duration,
    /// Send one flow in this many with TTL 1 (the exception path's load).
    pub expiring_every: Option<u64>,
}

impl Traffic {
    /// The seed's flows (20 sources x 10 destinations), batch 64, one
    /// warm-up second, 200 ms grace.
    pub fn default_v4() -> Self {
        Self {
            flows: FlowSet::parse(
                "198.18.10.1:2000-198.18.10.20",
                "198.19.10.1:2000-198.19.10.10",
            )
            .unwrap_or_else(|_| unreachable!("constant ranges parse")),
            input: InputMode::Live,
            receiver: ReceiverMode::Xdp,
            batch: 64,
            warmup_s: 1,
            cooldown_s: 0,
            grace: Duration::from_millis(200),
            expiring_every: None,
        }
    }
}

/// Everything measured in one trial.
#[derive(Debug, Clone, Serialize)]
pub struct TrialDetail {
    /// How frames reached the dut.
    pub input: InputMode,
    /// Offered load (pps; 0 = as fast as possible).
    pub offered_pps: u64,
    /// Frame length without FCS.
    pub frame_len: u16,
    /// The generator's report.
    #[serde(rename = "gen")]
    pub generator: GenReport,
    /// The receiver's report.
    pub recv: RecvReport,
    /// dut d0 received packets, per whole second of the generator's run.
    pub dut_in_per_second: Vec<u64>,
    /// dut d1 transmitted packets, per second.
    pub dut_out_per_second: Vec<u64>,
    /// sink s0 received packets, per second (the forwarding rate).
    pub sink_rx_per_second: Vec<u64>,
    /// Packets each member of the dut's egress LAG sent over the trial
    /// (d1a, d1b; empty on a single port).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dut_out_members: Vec<u64>,
    /// Busy share of each core over the trial, percent.
    pub cpu_busy_pct: Vec<f64>,
    /// attempted - received.
    pub lost: u64,
}

/// Runs trials on a topology that is up.
pub struct LabRunner {
    topo: Topology,
    traffic: Traffic,
    d0: NetDevReader,
    d1: NetDevReader,
    s0: NetDevReader,
    /// The egress LAG's members in dut (none on a single port).
    members: Vec<NetDevReader>,
    /// Every trial run so far, in order.
    pub trials: Vec<TrialDetail>,
    /// Print a one-line summary after each trial.
    pub verbose: bool,
    /// The live-frames generator, kept loaded between trials.
    live: Option<LiveGenerator>,
}

impl std::fmt::Debug for LabRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabRunner")
            .field("topo", &self.topo)
            .field("trials", &self.trials.len())
            .finish()
    }
}

fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        // Placement is best effort: a missing core leaves the thread free.
        let _ = sys::pin_to_cpu(0, c);
    }
}

impl LabRunner {
    /// A runner over `topo` sending `traffic`.
    pub fn new(topo: &Topology, traffic: Traffic) -> Result<Self, LabError> {
        Ok(Self {
            d0: NetDevReader::open(Some(&topo.dut_ns), "d0")?,
            d1: NetDevReader::open(Some(&topo.dut_ns), "d1")?,
            s0: NetDevReader::open(Some(&topo.sink_ns), "s0")?,
            members: topo
                .egress
                .dut_members()
                .iter()
                .map(|m| NetDevReader::open(Some(&topo.dut_ns), m))
                .collect::<Result<_, _>>()?,
            topo: topo.clone(),
            traffic,
            trials: Vec::new(),
            verbose: false,
            live: None,
        })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// How frames reach the dut.
    pub fn input(&self) -> InputMode {
        self.traffic.input
    }

    /// Sends the following trials' frames this way.
    pub fn set_input(&mut self, input: InputMode) {
        self.traffic.input = input;
    }

    /// Offers `offered_pps` (None: as fast as possible) of `frame_len`
    /// frames for `duration`.
    pub fn trial(
        &mut self,
        offered_pps: Option<f64>,
        frame_len: u16,
        duration: Duration,
    ) -> Result<TrialDetail, LabError> {
        self.trial_until(offered_pps, frame_len, duration, &AtomicBool::new(false))
    }

    /// After the generator stops: until neither dut's output nor the
    /// sink's input has moved for [`DRAIN_QUIET`] (nothing is left in
    /// flight), at most the traffic's grace.
    fn wait_for_late_packets(&mut self) -> Result<(), LabError> {
        let end = Instant::now() + self.traffic.grace;
        let mut last = (self.d1.read()?.tx_packets, self.s0.read()?.rx_packets);
        let mut still_since = Instant::now();
        while Instant::now() < end && still_since.elapsed() < DRAIN_QUIET {
            std::thread::sleep(Duration::from_millis(5));
            let now = (self.d1.read()?.tx_packets, self.s0.read()?.rx_packets);
            if now != last {
                last = now;
                still_since = Instant::now();
            }
        }
        Ok(())
    }

    /// As [`LabRunner::trial`], ending early when `stop` is set (by a
    /// thread driving something else while the traffic runs).
    pub fn trial_until(
        &mut self,
        offered_pps: Option<f64>,
        frame_len: u16,
        duration: Duration,
        stop: &AtomicBool,
    ) -> Result<TrialDetail, LabError> {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        let mut frames = FrameBuilder::new(
            self.traffic.flows.clone(),
            usize::from(frame_len),
            GEN_MAC,
            DUT_IN_MAC,
        )?;
        if let Some(n) = self.traffic.expiring_every {
            frames = frames.with_expiring_every(n);
        }
        let gcfg = GenConfig {
            ifname: "g0".into(),
            frames,
            rate_pps: offered_pps,
            count: None,
            duration: Some(duration),
            batch: self.traffic.batch,
        };
        let rcfg = RecvConfig {
            ifname: "s0".into(),
            duration: None,
            warmup_s: self.traffic.warmup_s,
            cooldown_s: 0,
            output: None,
            print_rows: false,
        };
        let p = self.topo.placement;
        let (input, receiver_mode) = (self.traffic.input, self.traffic.receiver);
        let (gen_ns, sink_ns) = (self.topo.gen_ns.clone(), self.topo.sink_ns.clone());
        let recv_stop = AtomicBool::new(false);
        let gen_stop = AtomicBool::new(false);
        let whole_seconds = duration.as_secs();
        let cpu0 = CpuTimes::now();
        let members0 = self
            .members
            .iter_mut()
            .map(NetDevReader::read)
            .collect::<Result<Vec<_>, _>>()?;
        let mut ins = Vec::new();
        let mut outs = Vec::new();
        let mut sinks = Vec::new();
        let (gen_rep, recv_rep) =
            std::thread::scope(|s| -> Result<(GenReport, RecvReport), LabError> {
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let recv_stop = &recv_stop;
                let receiver = s.spawn(move || -> Result<RecvReport, LabError> {
                    sys::enter_netns(&sink_ns).map_err(io_err(format!("enter {sink_ns}")))?;
                    pin(p.sink_cpu);
                    match receiver_mode {
                        ReceiverMode::Xdp => {
                            let r = XdpReceiver::open(rcfg);
                            let _ = ready_tx.send(r.is_ok());
                            Ok(r?.run(recv_stop)?)
                        }
                        ReceiverMode::Packet => {
                            let r = Receiver::open(rcfg);
                            let _ = ready_tx.send(r.is_ok());
                            Ok(r?.run(recv_stop)?)
                        }
                    }
                });
                if !ready_rx.recv().unwrap_or(false) {
                    return Err(receiver
                        .join()
                        .map_err(|_| LabError::Other("receiver thread panicked".into()))?
                        .err()
                        .unwrap_or(LabError::Other("receiver did not start".into())));
                }
                let mut live = self.live.take();
                let gen_stop = &gen_stop;
                // The seconds are counted from when the generator is ready
                // to send (loading the live generator may take a second).
                let (go_tx, go_rx) = std::sync::mpsc::channel();
                let generator = s.spawn(
                    move || -> Result<(GenReport, Option<LiveGenerator>), LabError> {
                        sys::enter_netns(&gen_ns).map_err(io_err(format!("enter {gen_ns}")))?;
                        pin(p.gen_cpu);
                        if input == InputMode::Live
                            && !live
                                .as_ref()
                                .is_some_and(|g| g.holds(&gcfg.ifname, &gcfg.frames))
                        {
                            drop(live.take()); // detach the old one first
                            live = Some(LiveGenerator::new(&gcfg.ifname, &gcfg.frames)?);
                        }
                        let _ = go_tx.send(());
                        let rep = match input {
                            InputMode::Live => match &mut live {
                                Some(g) => g.run(&gcfg, gen_stop)?,
                                None => unreachable!("loaded above"),
                            },
                            InputMode::Packet => generator::run(&gcfg, gen_stop)?,
                        };
                        Ok((rep, live))
                    },
                );
                let _ = go_rx.recv();
                let mut prev = (self.d0.read()?, self.d1.read()?, self.s0.read()?);
                let t0 = Instant::now();
                let mut k = 1u64;
                while k <= whole_seconds && !generator.is_finished() {
                    if interrupted() || stop.load(Ordering::Relaxed) {
                        gen_stop.store(true, Ordering::Relaxed);
                    }
                    let tick = t0 + Duration::from_secs(k);
                    let now = Instant::now();
                    if now < tick {
                        std::thread::sleep((tick - now).min(Duration::from_millis(20)));
                        continue;
                    }
                    let cur = (self.d0.read()?, self.d1.read()?, self.s0.read()?);
                    ins.push(cur.0.since(&prev.0).rx_packets);
                    outs.push(cur.1.since(&prev.1).tx_packets);
                    sinks.push(cur.2.since(&prev.2).rx_packets);
                    prev = cur;
                    k += 1;
                }
                let g = generator
                    .join()
                    .map_err(|_| LabError::Other("generator thread panicked".into()));
                if sinks.is_empty() {
                    // No whole second was sampled (a trial under a second,
                    // or a late sampler): one reading scaled to a second.
                    let secs = t0.elapsed().as_secs_f64().max(1e-3);
                    let cur = (self.d0.read()?, self.d1.read()?, self.s0.read()?);
                    let per_s = |n: u64| (n as f64 / secs) as u64;
                    ins.push(per_s(cur.0.since(&prev.0).rx_packets));
                    outs.push(per_s(cur.1.since(&prev.1).tx_packets));
                    sinks.push(per_s(cur.2.since(&prev.2).rx_packets));
                }
                self.wait_for_late_packets()?;
                recv_stop.store(true, Ordering::Relaxed);
                let r = receiver
                    .join()
                    .map_err(|_| LabError::Other("receiver thread panicked".into()))?;
                let (g, live) = g??;
                self.live = live;
                Ok((g, r?))
            })?;
        let cpu_busy_pct = CpuTimes::now().busy_pct_since(&cpu0);
        let dut_out_members = self
            .members
            .iter_mut()
            .zip(&members0)
            .map(|(m, before)| Ok(m.read()?.since(before).tx_packets))
            .collect::<Result<Vec<_>, LabError>>()?;
        let lost = recv_rep.lost(gen_rep.attempted);
        let d = TrialDetail {
            input,
            offered_pps: offered_pps.map_or(0, |r| r as u64),
            frame_len,
            generator: gen_rep,
            recv: recv_rep,
            dut_in_per_second: ins,
            dut_out_per_second: outs,
            sink_rx_per_second: sinks,
            dut_out_members,
            cpu_busy_pct,
            lost,
        };
        if self.verbose {
            eprintln!("{}", d.summary_line());
        }
        self.trials.push(d.clone());
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        Ok(d)
    }
}

impl TrialDetail {
    /// The per-second forwarding rates inside the measured window (all of
    /// them when the window would be empty).
    pub fn measured_rates(&self, warmup_s: u32) -> Vec<u64> {
        let w = (warmup_s as usize).min(self.sink_rx_per_second.len().saturating_sub(1));
        self.sink_rx_per_second[w..].to_vec()
    }

    /// Median of the measured per-second forwarding rates.
    pub fn forwarding_pps(&self, warmup_s: u32) -> u64 {
        equilibrium::median_nonzero(&self.measured_rates(warmup_s)).unwrap_or(0)
    }

    /// Limited by the generator: it fell short of the offered load and the
    /// dut forwarded (nearly) everything it attempted, so the dut's own
    /// limit was not reached.
    pub fn generator_limited(&self, warmup_s: u32, tol: f64) -> bool {
        self.generator.limited(tol)
            && self.forwarding_pps(warmup_s) as f64 >= self.generator.attempted_pps * (1.0 - tol)
    }

    /// One line: offered, sent, forwarded, lost, latency, cores.
    pub fn summary_line(&self) -> String {
        let lat = self.recv.latency.map_or("-".to_string(), |l| {
            format!(
                "{:.1}/{:.1} us",
                l.median_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3
            )
        });
        let cores: Vec<String> = self
            .cpu_busy_pct
            .iter()
            .map(|b| format!("{b:.0}%"))
            .collect();
        format!(
            "  offered {:>8} pps  sent {:>8.0} pps  fwd {:>8} pps  lost {:>8} ({:.2}%)  backpressure {:>7}  latency med/p99.9 {}  cores busy {}",
            if self.offered_pps == 0 {
                "max".to_string()
            } else {
                self.offered_pps.to_string()
            },
            self.generator.sent_pps,
            self.forwarding_pps(0),
            self.lost,
            if self.generator.attempted > 0 {
                self.lost as f64 * 100.0 / self.generator.attempted as f64
            } else {
                0.0
            },
            self.generator.backpressure,
            lat,
            cores.join(" ")
        )
    }

    fn latency_summary(&self) -> Option<LatencySummary> {
        self.recv.latency.map(|l| LatencySummary {
            min_ns: l.min_ns,
            median_ns: l.median_ns,
            p99_ns: l.p99_ns,
            p999_ns: l.p999_ns,
            max_ns: l.max_ns,
            samples: l.samples,
        })
    }

    /// The searches' view of this trial.
    pub fn outcome(&self, warmup_s: u32) -> TrialOutcome {
        TrialOutcome {
            attempted: self.generator.attempted,
            sent: self.generator.sent,
            generator_pps: self.generator.attempted_pps as u64,
            rx_per_second: self.measured_rates(warmup_s),
            received: self.recv.received,
            lost: self.lost,
            duration_s: self.generator.elapsed_s,
            latency: self.latency_summary(),
        }
    }
}

/// A trial runner that answers one trial from a reading already taken at
/// that offered load (the load curve's, within 0.1%), and runs the rest:
/// the equilibrium search's first trial, at half the generator's maximum,
/// is the curve's point there.
struct SeededRunner<'a, R> {
    runner: &'a mut R,
    seed: Option<(u64, TrialOutcome)>,
}

impl<R: TrialRunner> TrialRunner for SeededRunner<'_, R> {
    type Error = R::Error;

    fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, R::Error> {
        let at_seed = self
            .seed
            .as_ref()
            .is_some_and(|(offered, _)| offered.abs_diff(spec.offered_pps) <= offered / 1000);
        match self.seed.take_if(|_| at_seed) {
            Some((_, outcome)) => Ok(outcome),
            None => self.runner.run_trial(spec),
        }
    }
}

impl TrialRunner for LabRunner {
    type Error = LabError;

    fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, LabError> {
        let d = self.trial(
            Some(spec.offered_pps as f64),
            spec.frame_len,
            Duration::from_secs_f64(spec.duration_s.max(0.1)),
        )?;
        Ok(d.outcome(self.traffic.warmup_s))
    }
}

/// A forwarder the bench measures. The kernel is one; fastfwd's daemon
/// (AF_XDP, AF_PACKET) is added as another implementation.
pub trait Contender {
    /// Short unique name (the first contender is the baseline).
    fn name(&self) -> String;
    /// One line for the report.
    fn description(&self) -> String;
    /// Settings worth recording.
    fn config(&self) -> BTreeMap<String, String>;
    /// Makes dut forward with this contender; called before each of its
    /// trials (cheap when already active).
    fn activate(&mut self, topo: &Topology) -> Result<(), LabError>;
    /// Undoes `activate` before another contender's turn.
    fn deactivate(&mut self, topo: &Topology) -> Result<(), LabError>;
    /// Whether it runs firewall rules (the CPU-per-packet load is set by
    /// the forwarders without rules, so that it stays a load the kernel
    /// forwards well below its limit).
    fn filters(&self) -> bool {
        false
    }
    /// Its control socket, if it has one (its latency is measured under
    /// the max-rate flood).
    fn control_socket(&self) -> Option<PathBuf> {
        None
    }
    /// One flow in N sent with TTL / hop limit 1 during its trials (the
    /// exception path's cost), whatever the run's traffic says.
    fn expiring_every(&self) -> Option<u64> {
        None
    }
}

/// Requests per control-latency measurement.
pub const CONTROL_REQUESTS: usize = 1000;

/// Sends `n` `show_interfaces` requests, one after the other, over one
/// connection to a fastfwd control socket; the round trip of each, µs.
/// Stops early (with what it has) when `stop` is set.
pub fn control_round_trips(
    socket: &Path,
    n: usize,
    stop: &AtomicBool,
) -> Result<Vec<f64>, LabError> {
    use std::io::{BufRead, Write};
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(io_err(format!("connect {}", socket.display())))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io_err("control socket timeout"))?;
    let mut writer = stream.try_clone().map_err(io_err("control socket"))?;
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    let mut trips = Vec::with_capacity(n);
    for _ in 0..n {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let t = Instant::now();
        writer
            .write_all(b"{\"op\":\"show_interfaces\"}\n")
            .map_err(io_err("control request"))?;
        line.clear();
        reader
            .read_line(&mut line)
            .map_err(io_err("control reply"))?;
        trips.push(t.elapsed().as_secs_f64() * 1e6);
        let ok = serde_json::from_str::<serde_json::Value>(&line)
            .is_ok_and(|v| v["ok"] == serde_json::Value::Bool(true));
        if !ok {
            return Err(LabError::Other(format!("control reply: {}", line.trim())));
        }
    }
    Ok(trips)
}

/// The kernel's own forwarding with an nftables preset.
#[derive(Debug, Clone)]
pub struct KernelForwarding {
    /// Rules in the forward hook.
    pub firewall: FirewallPreset,
}

impl Contender for KernelForwarding {
    fn name(&self) -> String {
        match self.firewall {
            FirewallPreset::None => "kernel".into(),
            f => format!("kernel+nft-{}", f.label()),
        }
    }
    fn description(&self) -> String {
        match self.firewall {
            FirewallPreset::None => "Linux forwarding, no firewall rules".into(),
            FirewallPreset::Linear(n) => {
                format!("Linux forwarding, {n} non-matching nftables rules in the forward hook")
            }
            FirewallPreset::Set(n) => {
                format!("Linux forwarding, one nftables rule against a set of {n} addresses")
            }
        }
    }
    fn config(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("forwarding".into(), "kernel".into()),
            ("nftables".into(), self.firewall.label()),
        ])
    }
    fn filters(&self) -> bool {
        self.firewall != FirewallPreset::None
    }

    fn activate(&mut self, topo: &Topology) -> Result<(), LabError> {
        topo.set_forwarding(true)?;
        topo.set_firewall(self.firewall)?;
        Ok(())
    }
    fn deactivate(&mut self, topo: &Topology) -> Result<(), LabError> {
        topo.set_firewall(FirewallPreset::None)?;
        Ok(())
    }
}

/// fastfwd's router daemon (`fastfwd run`) forwarding in dut, with the
/// kernel's forwarding off so every forwarded packet crossed fastfwd. It
/// mirrors dut's kernel routes (the full table) and neighbours itself.
#[derive(Debug)]
pub struct FastfwdForwarding {
    /// The `fastfwd` binary.
    pub binary: PathBuf,
    /// `xdp-engine` (fastfwd's XDP program, `--engine xdp`), or a backend
    /// of the user-space engine: `xdp` (AF_XDP) or `packet` (AF_PACKET).
    pub backend: String,
    /// Worker cores (`--cores`), the forwarding core.
    pub cores: String,
    /// Folder for the config, socket and log.
    pub dir: PathBuf,
    /// Firewall rules in fastfwd's own language, the same work as a
    /// kernel preset.
    pub firewall: FirewallPreset,
    /// One flow in N with TTL 1 (ICMP time exceeded from the pipeline).
    pub expiring_every: Option<u64>,
    /// Workers under ordinary scheduling (`--worker-rt-priority 0`)
    /// instead of the daemon's default SCHED_FIFO: the receive livelock
    /// the default avoids, measured.
    pub ordinary_workers: bool,
    /// Leave the XDP engine's program forwarding when the daemon stops
    /// (`--on-exit keep`, for the restart measurements) instead of
    /// detaching it (`detach`, so the next contender meets the kernel).
    pub keep_on_exit: bool,
    child: Option<std::process::Child>,
}

/// The suffix of a `--backends` name asking for workers under ordinary
/// scheduling: `xdp-ordinary`, `packet-ordinary`, `xdp-engine-ordinary`.
pub const ORDINARY_SUFFIX: &str = "-ordinary";

impl FastfwdForwarding {
    /// A contender running `binary run --backend backend --cores cores`
    /// (`backend` with [`ORDINARY_SUFFIX`]: its workers under ordinary
    /// scheduling).
    pub fn new(binary: PathBuf, backend: &str, cores: &str, dir: PathBuf) -> Self {
        let (backend, ordinary_workers) = match backend.strip_suffix(ORDINARY_SUFFIX) {
            Some(b) => (b, true),
            None => (backend, false),
        };
        Self {
            binary,
            backend: backend.into(),
            cores: cores.into(),
            dir,
            firewall: FirewallPreset::None,
            expiring_every: None,
            ordinary_workers,
            keep_on_exit: false,
            child: None,
        }
    }

    /// Stops the daemon (SIGTERM, or SIGKILL with `kill`) and starts it
    /// again; returns how long the old one took to exit and the new one
    /// to answer on its control socket (its workers, and so its exception
    /// path, are running by then).
    pub fn restart(
        &mut self,
        topo: &Topology,
        kill: bool,
    ) -> Result<(Duration, Duration), LabError> {
        let t = Instant::now();
        if kill {
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        } else {
            self.stop();
        }
        let stopped = t.elapsed();
        self.activate(topo)?;
        Ok((stopped, t.elapsed() - stopped))
    }

    /// The same contender sent one flow in `n` with TTL 1.
    pub fn with_expiring_every(mut self, n: u64) -> Self {
        self.expiring_every = Some(n.max(1));
        self
    }

    /// The same contender with `firewall`'s rules in its config.
    pub fn with_firewall(mut self, firewall: FirewallPreset) -> Self {
        self.firewall = firewall;
        self
    }

    fn socket(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.name()))
    }

    /// The daemon's control socket (while it runs).
    pub fn control_socket(&self) -> PathBuf {
        self.socket()
    }

    /// The daemon's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// The XDP engine rather than the user-space one.
    fn is_xdp_engine(&self) -> bool {
        self.backend == "xdp-engine"
    }

    /// GRO on the sink's veths: the XDP engine redirects frames into d1
    /// (or its LAG members), which veth delivers only to a peer running
    /// NAPI (as a NIC does).
    fn sink_gro(&self, topo: &Topology, on: bool) -> Result<(), LabError> {
        for link in topo.egress.sink_links() {
            let st = std::process::Command::new("ip")
                .args(["netns", "exec", &topo.sink_ns, "ethtool", "-K", link, "gro"])
                .arg(if on { "on" } else { "off" })
                .status()
                .map_err(io_err(format!("ethtool -K {link} gro")))?;
            if !st.success() {
                return Err(LabError::Other(format!("ethtool -K {link} gro: {st}")));
            }
        }
        Ok(())
    }

    fn log(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name()))
    }

    fn control_ok(&self) -> bool {
        std::process::Command::new(&self.binary)
            .args(["show", "workers", "--socket"])
            .arg(self.socket())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for FastfwdForwarding {
    fn drop(&mut self) {
        self.stop();
    }
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Contender for FastfwdForwarding {
    fn name(&self) -> String {
        let suffix = if self.ordinary_workers {
            ORDINARY_SUFFIX
        } else {
            ""
        };
        let base = match self.firewall {
            FirewallPreset::None => format!("fastfwd-{}{suffix}", self.backend),
            f => format!("fastfwd-{}{suffix}+fw-{}", self.backend, f.label()),
        };
        match self.expiring_every {
            Some(n) => format!("{base}+ttl1-1in{n}"),
            None => base,
        }
    }
    fn expiring_every(&self) -> Option<u64> {
        self.expiring_every
    }
    fn description(&self) -> String {
        let io = match self.backend.as_str() {
            "xdp-engine" => "XDP program in d0's receive path, exceptions over AF_XDP",
            "xdp" => "AF_XDP",
            _ => "AF_PACKET",
        };
        let rules = match self.firewall {
            FirewallPreset::None => String::new(),
            FirewallPreset::Linear(n) => {
                format!(", {n} non-matching rules in fastfwd's forward chain")
            }
            FirewallPreset::Set(n) => format!(", one fastfwd rule against a set of {n} addresses"),
        };
        let how = if self.is_xdp_engine() {
            "--engine xdp".to_string()
        } else {
            format!("--backend {}", self.backend)
        };
        let expiring = match self.expiring_every {
            Some(n) => format!(
                ", one flow in {n} sent with TTL 1 (ICMP time exceeded from the exception path)"
            ),
            None => String::new(),
        };
        let sched = if self.ordinary_workers {
            "SCHED_OTHER (--worker-rt-priority 0)"
        } else {
            "SCHED_FIFO 1"
        };
        format!(
            "fastfwd run {how} ({io}), worker on core {} under {sched}, kernel forwarding off{rules}{expiring}",
            self.cores
        )
    }
    fn config(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("forwarding".into(), "fastfwd".into()),
            ("backend".into(), self.backend.clone()),
            ("cores".into(), self.cores.clone()),
            (
                "worker_scheduling".into(),
                if self.ordinary_workers {
                    "other".into()
                } else {
                    "fifo-1".into()
                },
            ),
            ("firewall".into(), self.firewall.label()),
            (
                "ttl_expiring_every".into(),
                self.expiring_every.map_or("none".into(), |n| n.to_string()),
            ),
        ])
    }
    fn filters(&self) -> bool {
        self.firewall != FirewallPreset::None
    }
    fn control_socket(&self) -> Option<PathBuf> {
        Some(self.socket())
    }

    fn activate(&mut self, topo: &Topology) -> Result<(), LabError> {
        if let Some(c) = &mut self.child {
            if matches!(c.try_wait(), Ok(None)) {
                return Ok(());
            }
            self.child = None;
        }
        topo.set_forwarding(false)?;
        topo.set_firewall(FirewallPreset::None)?;
        if self.is_xdp_engine() {
            self.sink_gro(topo, true)?;
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(io_err(format!("create {}", self.dir.display())))?;
        let text = format!(
            "[[interfaces]]\nname = \"d0\"\nmac = \"{}\"\naddresses = [\"198.18.0.10/24\", \"2001:2::10/64\"]\n\n\
             [[interfaces]]\nname = \"d1\"\nmac = \"{}\"\naddresses = [\"198.19.0.10/24\", \"2001:2:0:8000::10/64\"]\n",
            mac_str(crate::topo::DUT_IN_MAC),
            mac_str(crate::topo::DUT_OUT_MAC)
        );
        let mut text = text;
        if self.firewall != FirewallPreset::None {
            let rules = self.dir.join(format!("{}.rules", self.name()));
            std::fs::write(&rules, self.firewall.fastfwd_rules())
                .map_err(io_err(format!("write {}", rules.display())))?;
            text.push_str(&format!("\n[firewall]\nfile = \"{}\"\n", rules.display()));
        }
        let cfg = self.dir.join(format!("{}.toml", self.name()));
        std::fs::write(&cfg, text).map_err(io_err(format!("write {}", cfg.display())))?;
        let _ = std::fs::remove_file(self.socket());
        let log = std::fs::File::create(self.log())
            .map_err(io_err(format!("create {}", self.log().display())))?;
        let child = std::process::Command::new("ip")
            .args(["netns", "exec", &topo.dut_ns])
            .arg(&self.binary)
            .args(["run", "--config"])
            .arg(&cfg)
            .args([
                "--engine",
                if self.is_xdp_engine() { "xdp" } else { "user" },
                "--backend",
                if self.is_xdp_engine() {
                    "xdp"
                } else {
                    &self.backend
                },
                "--cores",
                &self.cores,
                "--worker-rt-priority",
                if self.ordinary_workers { "0" } else { "1" },
                // The next contender (the kernel, say) must not meet the
                // XDP engine left forwarding.
                "--on-exit",
                if self.keep_on_exit { "keep" } else { "detach" },
                "--socket",
            ])
            .arg(self.socket())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io_err(format!("start {} run", self.binary.display())))?;
        self.child = Some(child);
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            if self.socket().exists() && self.control_ok() {
                return Ok(());
            }
            if let Some(c) = &mut self.child
                && let Ok(Some(st)) = c.try_wait()
            {
                self.child = None;
                let log = std::fs::read_to_string(self.log()).unwrap_or_default();
                return Err(LabError::Other(format!(
                    "fastfwd run exited ({st}): {}",
                    log.trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        Err(LabError::Other(
            "fastfwd run did not answer on its control socket within 60 s".into(),
        ))
    }
    fn deactivate(&mut self, topo: &Topology) -> Result<(), LabError> {
        self.stop();
        if self.keep_on_exit && self.is_xdp_engine() {
            // The kept program goes too: the next contender forwards alone.
            for dev in ["d0", "d1"] {
                let _ = std::process::Command::new("ip")
                    .args(["-n", &topo.dut_ns, "link", "set", "dev", dev, "xdp", "off"])
                    .status();
            }
        }
        if self.is_xdp_engine() {
            self.sink_gro(topo, false)?;
        }
        topo.set_forwarding(true)?;
        Ok(())
    }
}

/// The bench's settings.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Namespace tag.
    pub tag: String,
    /// Output folder.
    pub out_dir: PathBuf,
    /// Prefix list to load into dut (None: skip).
    pub full_table: Option<PathBuf>,
    /// Frame length without FCS.
    pub frame_len: u16,
    /// Traffic.
    pub traffic: Traffic,
    /// Length of each fixed-load and load-curve trial.
    pub trial: Duration,
    /// Fixed-load repeats per contender (interleaved).
    pub repeats: u32,
    /// Load-curve points as fractions of the generator's maximum.
    pub load_points: Vec<f64>,
    /// Run an equilibrium search per contender, with this trial length.
    pub equilibrium_trial: Option<Duration>,
    /// Equilibrium tolerance.
    pub tolerance: f64,
    /// Most trials an equilibrium search may take.
    pub equilibrium_max_iterations: u32,
    /// Destinations drawn from the full table's prefixes (0, or no table:
    /// the traffic's own destination range).
    pub dsts: usize,
    /// Offered load of the CPU-per-packet trials (0: 80% of the slowest
    /// contender's equilibrium, a load every contender sustains).
    pub cpu_load_pps: u64,
    /// Their length (zero: skip them).
    pub cpu_trial: Duration,
    /// Trials at the load curve's peak that the receive-livelock check
    /// judges the peak by, in place of the curve's own reading there (0:
    /// that reading alone): one in each activation of the contender (the
    /// rest in its last), so that they spread over the run as its readings
    /// at the highest load do (the curve's, the control-socket trial's and
    /// the fixed-load repeats').
    pub livelock_peak_trials: u32,
    /// Activations of each contender after its first (at least one), which
    /// share the fixed-load repeats after the first in turn and take one
    /// CPU-per-packet trial each; each visits every contender in turn, so
    /// the trials of one contender are spread over the run.
    pub later_passes: u32,
    /// Fixed-load repeats on the other input (socket buffers when the run's
    /// input is live XDP frames), each beside one of the repeats, at that
    /// input's own generator maximum: the input-mode matrix (0: none).
    pub other_input_repeats: u32,
    /// The dut's link toward the sink: one port (the `two-port`
    /// scenario), or a two-member LAG (`lag`).
    pub egress: crate::topo::Egress,
}

/// How long dut's output and the sink's input must stand still after a
/// trial before its receiver stops: longer than a worker's sleep (1 ms) or
/// an AF_PACKET block's timeout, far shorter than the grace.
pub const DRAIN_QUIET: Duration = Duration::from_millis(30);

/// Destinations across the full table in the default run: enough that
/// route lookups miss the caches, as a router's do.
pub const DEFAULT_DSTS: usize = 65_536;

/// A median rate at the highest offered load this much below the median at
/// the load curve's best point beneath it is flagged as receive livelock.
pub const LIVELOCK_TOLERANCE: f64 = 0.10;

impl BenchConfig {
    /// The default run or `--quick`, sized to take at most 25 and 5 minutes
    /// on two cores with the full table and the ten default contenders:
    /// 4 s trials, 5 repeats (3 of them on socket buffers too), 4 load points,
    /// equilibrium trials of 2 s, three later passes, each with a 4 s
    /// CPU-per-packet trial and a livelock trial at the peak; quick: 2 s
    /// trials, 3 repeats (2), 2 load points, 1 s equilibrium trials, the
    /// livelock check from the curve's and the repeats' readings alone, one
    /// later pass with a 1 s CPU-per-packet trial.
    pub fn new(quick: bool, out_dir: PathBuf, full_table: Option<PathBuf>) -> Self {
        let mut traffic = Traffic::default_v4();
        if quick {
            traffic.warmup_s = 0;
        }
        Self {
            tag: "bench".into(),
            out_dir,
            full_table,
            frame_len: 60,
            traffic,
            trial: Duration::from_secs(if quick { 2 } else { 4 }),
            repeats: if quick { 3 } else { 5 },
            // Half the generator's maximum is also the equilibrium
            // search's first trial (taken from the curve).
            load_points: if quick {
                vec![0.5, 1.0]
            } else {
                vec![0.25, 0.5, 0.75, 1.0]
            },
            equilibrium_trial: Some(Duration::from_secs(if quick { 1 } else { 2 })),
            tolerance: 0.01,
            equilibrium_max_iterations: if quick { 5 } else { 16 },
            dsts: DEFAULT_DSTS,
            cpu_load_pps: 0,
            cpu_trial: Duration::from_secs(if quick { 1 } else { 4 }),
            livelock_peak_trials: if quick { 0 } else { 4 },
            later_passes: if quick { 1 } else { 3 },
            other_input_repeats: if quick { 2 } else { 3 },
            egress: crate::topo::Egress::Port,
        }
    }
}

/// What `run_bench` wrote.
#[derive(Debug, Clone)]
pub struct BenchOutput {
    /// The record.
    pub run: LabRun,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Full-table load, if any.
    pub fib: Option<FibLoad>,
}

fn host_info() -> HostInfo {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let cpu_count = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let mut extra = BTreeMap::new();
    if let Ok(v) = std::fs::read_to_string("/proc/sys/kernel/version") {
        extra.insert("kernel_build".into(), v.trim().to_string());
    }
    if let Some(mhz) = crate::udp_sink::cpu_mhz() {
        extra.insert("cpu_mhz".into(), format!("{mhz:.0}"));
    }
    HostInfo {
        kernel,
        cpu_model,
        cpu_count,
        extra,
    }
}

/// Parses `0.1.0 (abc123def456-dirty)` as the binary's version string.
pub fn version_info(version: &str) -> VersionInfo {
    let commit = version
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(c, _)| c.to_string());
    let dirty = commit.as_deref().is_some_and(|c| c.ends_with("-dirty"));
    VersionInfo {
        version: version.to_string(),
        git_commit: commit
            .map(|c| c.trim_end_matches("-dirty").to_string())
            .filter(|c| c != "unknown"),
        dirty,
    }
}

fn record(seq: u32, d: &TrialDetail, warmup_s: u32, tol: f64) -> RunRecord {
    RunRecord {
        sequence: seq,
        offered_pps: d.offered_pps,
        generator_pps: d.generator.attempted_pps as u64,
        attempted: d.generator.attempted,
        received: d.recv.received,
        lost: d.lost,
        rx_per_second: d.sink_rx_per_second.clone(),
        tx_per_second: d.generator.per_second_sent.clone(),
        forwarding_pps: d.forwarding_pps(warmup_s),
        latency: d.latency_summary(),
        latency_histogram: d.recv.latency_histogram.clone(),
        generator_limited: d.generator_limited(warmup_s, tol),
        machine_probe: None,
        member_tx: d.dut_out_members.clone(),
    }
}

/// `flows` sent to `dsts` destinations drawn (seeded) from the prefixes
/// of the table at `path`, of the flows' family, from as many of their
/// sources as keep the flows within what the live generator holds.
pub fn flows_to_table(flows: &FlowSet, path: &Path, dsts: usize) -> Result<FlowSet, LabError> {
    let addrs = crate::topo::table_destinations(path, dsts, flows.is_v6(), 1)?;
    let mut src = flows.src;
    let keep = (crate::xdp::MAX_FLOWS / (dsts as u64 * src.port_count())).max(1);
    src.truncate_addrs(keep);
    FlowSet::with_destinations(src, addrs, flows.dst.port_first)
        .map_err(|e| LabError::Other(format!("destinations: {e}")))
}

/// How the fixed-load runs' frames left over the egress LAG's members:
/// each member's share of what they sent together (`None` on a single
/// port, or when nothing was sent).
fn member_share_note<'a>(
    egress: crate::topo::Egress,
    runs: impl Iterator<Item = &'a RunRecord>,
) -> Option<String> {
    let names = egress.dut_members();
    let mut sent = vec![0u64; names.len()];
    for r in runs {
        for (total, n) in sent.iter_mut().zip(&r.member_tx) {
            *total += n;
        }
    }
    let all: u64 = sent.iter().sum();
    if names.is_empty() || all == 0 {
        return None;
    }
    let shares: Vec<String> = names
        .iter()
        .zip(&sent)
        .map(|(m, n)| format!("{m} {:.1}%", *n as f64 * 100.0 / all as f64))
        .collect();
    Some(format!(
        "LAG members over the fixed-load runs: {} of {all} frames",
        shares.join(", ")
    ))
}

/// The spread of the machine-speed probe over the readings of some runs
/// (those that carry one; at least two), beside which a contender's spread
/// is read. Range and spread as the report's [`report::RateSummary`].
fn machine_probe_note<'a>(runs: impl Iterator<Item = &'a RunRecord>) -> Option<String> {
    let (alu, mem): (Vec<f64>, Vec<f64>) = runs
        .filter_map(|r| r.machine_probe)
        .map(|p| (p.alu_ns, p.mem_ns))
        .unzip();
    if alu.len() < 2 {
        return None;
    }
    let alu = report::RateSummary::of(&alu)?;
    let mem = report::RateSummary::of(&mem)?;
    Some(format!(
        "machine speed on the forwarding core before each repeat ({} readings): multiply-add chain {:.2}-{:.2} ns (spread {:.1}%), 4 MiB pointer chase {:.2}-{:.2} ns (spread {:.1}%)",
        alu.n, alu.min, alu.max, alu.spread_pct, mem.min, mem.max, mem.spread_pct
    ))
}

/// Trials an equilibrium search usually takes here (for the ETA only).
const TYPICAL_EQUILIBRIUM_TRIALS: usize = 8;

/// ` (ETA m:ss)` from the time per trial so far, including set-up.
fn eta(started: Instant, done: usize, total: usize) -> String {
    if done == 0 {
        return String::new();
    }
    let per = started.elapsed().as_secs_f64() / done as f64;
    let left = (per * total.saturating_sub(done) as f64) as u64;
    format!(" (ETA {}:{:02})", left / 60, left % 60)
}

/// The 1-, 5- and 15-minute load averages ("?" where unreadable).
fn load_average() -> String {
    match netio::sys::os::load_average() {
        Ok(l) => format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]),
        Err(_) => "?".into(),
    }
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The receive-livelock check of one load curve: the highest offered load
/// against the best rate the curve reached below it (its peak, unless the
/// curve still rises), judged on `peak_trials` fresh trials at the peak's
/// load (`trial` runs one at an offered load and answers the forwarding
/// rate) against the curve's own reading at the highest load and
/// `more_at_max` (trials already run there; the bench adds its fixed-load
/// repeats, which run there too, before judging). The curve's reading at
/// the peak chose the peak as the largest of several noisy readings, so it
/// is biased upwards and is not one of the samples unless there are no
/// fresh ones (`peak_trials` 0); the reading at the highest load was chosen
/// by its offered load alone and counts. Run whatever the single readings
/// say, so that noise neither hides a fall nor makes one. `None` for an
/// empty curve; a one-point curve is compared with itself.
fn livelock_check(
    curve: &[LoadPoint],
    more_at_max: Vec<u64>,
    peak_trials: u32,
    mut trial: impl FnMut(u64) -> Result<u64, LabError>,
) -> Result<Option<report::LivelockCheck>, LabError> {
    let Some(last) = curve.iter().max_by_key(|p| p.offered_pps) else {
        return Ok(None);
    };
    let mut at_max = vec![last.forwarding_pps];
    at_max.extend(more_at_max);
    // The first of equal peaks: the lowest load that reaches it.
    let Some(peak) = curve
        .iter()
        .filter(|p| p.offered_pps < last.offered_pps)
        .rev()
        .max_by_key(|p| p.forwarding_pps)
    else {
        return Ok(Some(report::LivelockCheck {
            peak_offered_pps: last.offered_pps,
            max_offered_pps: last.offered_pps,
            at_peak_pps: at_max.clone(),
            at_max_pps: at_max,
        }));
    };
    let at_peak_pps = if peak_trials == 0 {
        vec![peak.forwarding_pps]
    } else {
        (0..peak_trials)
            .map(|_| trial(peak.offered_pps))
            .collect::<Result<_, _>>()?
    };
    Ok(Some(report::LivelockCheck {
        peak_offered_pps: peak.offered_pps,
        max_offered_pps: last.offered_pps,
        at_peak_pps,
        at_max_pps: at_max,
    }))
}

/// One note for the CPU-per-packet trials that forwarded less than 95% of
/// their offered load `cpu_load` (`forwarded` holds every trial's rate);
/// `None` when each kept up.
fn unsustained_cpu_load_note(forwarded: &[u64], cpu_load: u64) -> Option<String> {
    let short: Vec<String> = forwarded
        .iter()
        .filter(|&&f| f < cpu_load * 95 / 100)
        .map(|f| f.to_string())
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "did not sustain the CPU-per-packet load in {} of {} trials: {} of {cpu_load} pps forwarded",
            short.len(),
            forwarded.len(),
            short.join(", ")
        )
    })
}

/// The whole benchmark: topology up, full table, generator maximum, each
/// contender's load curve and equilibrium, interleaved fixed-load repeats,
/// then the report. `progress` gets a line per step.
pub fn run_bench(
    cfg: &BenchConfig,
    contenders: &mut [Box<dyn Contender>],
    version: &str,
    mut progress: impl FnMut(&str),
) -> Result<BenchOutput, LabError> {
    let started = Instant::now();
    let started_wall = sys::realtime_ns() / 1_000_000_000;
    let load_before = load_average();
    let load_note = netio::sys::os::LoadNote::start();
    let mut tcfg = TopoConfig::new(&cfg.tag);
    tcfg.forwarding = true;
    tcfg.egress = cfg.egress;
    progress(&format!(
        "topology: up (namespaces fflab-{}-gen/dut/sink)",
        cfg.tag
    ));
    let guard = TopoGuard(Topology::up(&tcfg)?);
    let topo = guard.0.clone();
    let fib = match &cfg.full_table {
        Some(p) => {
            progress(&format!(
                "full table: loading {} into dut over netlink",
                p.display()
            ));
            let l = topo.load_full_table(p)?;
            progress(&format!(
                "full table: {} IPv4 + {} IPv6 routes over {} next hops in {:.1} s ({} skipped: lab ranges)",
                l.routes_v4, l.routes_v6, l.next_hops, l.seconds, l.skipped
            ));
            Some(l)
        }
        None => None,
    };
    let mut traffic = cfg.traffic.clone();
    if let (Some(path), true) = (&cfg.full_table, cfg.dsts > 0) {
        let v6 = traffic.flows.is_v6();
        traffic.flows = flows_to_table(&traffic.flows, path, cfg.dsts)?;
        progress(&format!(
            "destinations: {} drawn from the table's IPv{} prefixes, {} flows",
            cfg.dsts,
            if v6 { 6 } else { 4 },
            traffic.flows.len()
        ));
    }
    let mut runner = LabRunner::new(&topo, traffic)?;
    let warm = cfg.traffic.warmup_s;

    // The generator's own maximum: the dut only receives and drops.
    progress("generator maximum: dut forwarding off, sending as fast as possible");
    topo.set_forwarding(false)?;
    let mut input_note = None;
    let gmax = match runner.trial(None, cfg.frame_len, cfg.trial) {
        Err(LabError::Gen(generator::GenError::Live { what, why }))
            if runner.traffic.input == InputMode::Live =>
        {
            let note = format!(
                "the live-frames generator did not run here ({what}: {why}): input falls back to {}",
                InputMode::Packet.label()
            );
            progress(&note);
            input_note = Some(note);
            runner.traffic.input = InputMode::Packet;
            runner.trial(None, cfg.frame_len, cfg.trial)?
        }
        r => r?,
    };
    // The other input's own maximum, for the input-mode matrix: socket
    // buffers beside live XDP frames (none where live frames fell back).
    let main_input = runner.traffic.input;
    let other_input =
        (cfg.other_input_repeats > 0 && main_input == InputMode::Live).then_some(InputMode::Packet);
    let other_max = match other_input {
        Some(o) => {
            runner.traffic.input = o;
            let d = runner.trial(None, cfg.frame_len, cfg.trial);
            runner.traffic.input = main_input;
            let d = d?;
            progress(&format!(
                "generator maximum on {}: {:.0} pps attempted, {:.0} pps taken by the kernel",
                o.label(),
                d.generator.attempted_pps,
                d.generator.sent_pps
            ));
            d.generator.attempted_pps.max(1.0)
        }
        None => 0.0,
    };
    topo.set_forwarding(true)?;
    let gen_max = gmax.generator.attempted_pps.max(1.0);
    progress(&format!(
        "generator maximum: {:.0} pps attempted, {:.0} pps taken by the kernel ({} backpressure), cores busy {:?}",
        gmax.generator.attempted_pps,
        gmax.generator.sent_pps,
        gmax.generator.backpressure,
        gmax.cpu_busy_pct
            .iter()
            .map(|b| b.round())
            .collect::<Vec<_>>()
    ));

    let mut results: Vec<report::ContenderResult> = contenders
        .iter()
        .map(|c| report::ContenderResult {
            name: c.name(),
            description: c.description(),
            config: c.config(),
            ..Default::default()
        })
        .collect();
    let mut fwd_busy: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    // Each CPU-per-packet trial's forwarded rate, per contender.
    let mut cpu_fwd: Vec<Vec<u64>> = vec![Vec::new(); contenders.len()];
    let mut gen_busy: Vec<f64> = Vec::new();
    let p = topo.placement;

    // Trials still to run, for the ETA (timed from here, past the table
    // load): per contender the load curve, a typical equilibrium search,
    // the CPU trial, the livelock check (where the curve falls) and the
    // repeats, and the receiver's cost trial.
    let eta_from = Instant::now();
    let eta_base = runner.trials.len();
    let expected_trials = eta_base
        + 1
        + contenders.len()
            * (cfg.load_points.len()
                + cfg.equilibrium_trial.map_or(0, |_| {
                    TYPICAL_EQUILIBRIUM_TRIALS.min(cfg.equilibrium_max_iterations as usize)
                })
                + cfg.later_passes.max(1) as usize
                + cfg.livelock_peak_trials as usize
                + cfg.repeats as usize
                + other_input.map_or(0, |_| cfg.other_input_repeats.min(cfg.repeats) as usize));
    // Load curves and equilibrium, one contender at a time.
    let mut failed = vec![false; contenders.len()];
    let mut receiver_ns: Option<f64> = None;
    let run_expiring = runner.traffic.expiring_every;
    // One fixed-load repeat of the contender that is active: a trial at the
    // generator's maximum and, for the input-mode matrix, one on the other
    // input at its own maximum. Answers the forwarding and generator cores'
    // busy shares.
    let tolerance = cfg.tolerance;
    let (frame_len, trial_len, other_repeats) = (cfg.frame_len, cfg.trial, cfg.other_input_repeats);
    let repeats = cfg.repeats;
    // The machine's own speed on the forwarding core before each repeat.
    let prober = crate::probe::Prober::new();
    let prober = &prober;
    // One livelock trial at the load curve's peak: its forwarding rate.
    let peak_trial = move |offered: u64,
                           runner: &mut LabRunner,
                           progress: &mut dyn FnMut(&str)|
          -> Result<u64, LabError> {
        let d = runner.trial(Some(offered as f64), frame_len, trial_len)?;
        progress(&format!("  livelock check: {}", d.summary_line()));
        Ok(d.forwarding_pps(warm))
    };
    let repeat_at = move |rep: u32,
                          name: &str,
                          runner: &mut LabRunner,
                          result: &mut report::ContenderResult,
                          progress: &mut dyn FnMut(&str)|
          -> Result<(Option<f64>, Option<f64>), LabError> {
        progress(&format!(
            "repeat {}/{repeats}: {name}{}",
            rep + 1,
            eta(
                eta_from,
                runner.trials.len() - eta_base,
                expected_trials - eta_base
            )
        ));
        let probe = std::thread::scope(|s| {
            s.spawn(|| {
                pin(p.fwd_cpu);
                prober.measure()
            })
            .join()
            .ok()
        });
        let d = runner.trial(Some(gen_max), frame_len, trial_len)?;
        progress(&d.summary_line());
        let busy = (
            p.fwd_cpu.and_then(|c| d.cpu_busy_pct.get(c).copied()),
            p.gen_cpu.and_then(|c| d.cpu_busy_pct.get(c).copied()),
        );
        result.runs.push(RunRecord {
            machine_probe: probe,
            ..record(rep, &d, warm, tolerance)
        });
        if let Some(o) = other_input.filter(|_| rep < other_repeats) {
            runner.traffic.input = o;
            let d = runner.trial(Some(other_max), frame_len, trial_len);
            runner.traffic.input = main_input;
            let d = d?;
            progress(&format!("  on {}: {}", o.label(), d.summary_line()));
            result
                .other_input
                .get_or_insert_with(|| report::InputRuns {
                    input: o.label().into(),
                    offered_pps: other_max as u64,
                    runs: Vec::new(),
                })
                .runs
                .push(RunRecord {
                    machine_probe: probe,
                    ..record(rep, &d, warm, tolerance)
                });
        }
        Ok(busy)
    };
    for (i, c) in contenders.iter_mut().enumerate() {
        runner.traffic.expiring_every = c.expiring_every().or(run_expiring);
        if let Err(e) = c.activate(&topo) {
            if interrupted() {
                return Err(LabError::Interrupted);
            }
            progress(&format!("{}: could not start, left out: {e}", c.name()));
            results[i]
                .notes
                .push(format!("could not start, left out of the run: {e}"));
            failed[i] = true;
            let _ = c.deactivate(&topo);
            continue;
        }
        progress(&format!(
            "{}: load curve ({} points of {:.1} s){}",
            c.name(),
            cfg.load_points.len(),
            cfg.trial.as_secs_f64(),
            eta(
                eta_from,
                runner.trials.len() - eta_base,
                expected_trials - eta_base
            )
        ));
        let mut seed = None;
        for &f in &cfg.load_points {
            let offered = gen_max * f;
            let d = runner.trial(Some(offered), cfg.frame_len, cfg.trial)?;
            progress(&d.summary_line());
            if f == 0.5 {
                seed = Some((offered as u64, d.outcome(warm)));
            }
            results[i].load_curve.push(LoadPoint {
                offered_pps: offered as u64,
                forwarding_pps: d.forwarding_pps(warm),
                loss_ratio: if d.generator.attempted > 0 {
                    d.lost as f64 / d.generator.attempted as f64
                } else {
                    0.0
                },
            });
        }
        // Rates of trials at the generator's maximum beyond the curve's own.
        let mut more_at_max = Vec::new();
        if let Some(sock) = c.control_socket() {
            // The control socket under the flood: one trial at the
            // generator's maximum while a client sends request after request.
            let stop = AtomicBool::new(false);
            let (trips, d) = std::thread::scope(|s| {
                let client = s.spawn(|| {
                    // Into the trial's steady part first.
                    std::thread::sleep(Duration::from_millis(500));
                    control_round_trips(&sock, CONTROL_REQUESTS, &stop)
                });
                let d = runner.trial(Some(gen_max), cfg.frame_len, cfg.trial);
                stop.store(true, Ordering::Relaxed);
                (client.join(), d)
            });
            let d = d?;
            more_at_max.push(d.forwarding_pps(warm));
            match trips {
                Ok(Ok(t)) => {
                    let c = report::ControlLatency::new(
                        "show_interfaces",
                        t,
                        gen_max as u64,
                        d.forwarding_pps(warm),
                    );
                    progress(&format!(
                        "  control socket under the flood: {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                        c.requests,
                        c.p50_us / 1e3,
                        c.p99_us / 1e3,
                        c.max_us / 1e3
                    ));
                    results[i].control_latency = Some(c);
                }
                Ok(Err(e)) => results[i]
                    .notes
                    .push(format!("control latency not measured: {e}")),
                Err(_) => results[i]
                    .notes
                    .push("control latency not measured: the client thread panicked".into()),
            }
        }
        // The peak's first fresh trial; the later activations take the rest.
        let check = livelock_check(
            &results[i].load_curve,
            more_at_max,
            cfg.livelock_peak_trials.min(1),
            |offered| peak_trial(offered, &mut runner, &mut progress),
        )?;
        // Judged at the end, when the fixed-load repeats have added their
        // readings at the highest load.
        results[i].livelock = check;
        if let Some(et) = cfg.equilibrium_trial {
            progress(&format!(
                "{}: equilibrium search ({:.1} s trials){}",
                c.name(),
                et.as_secs_f64(),
                eta(
                    eta_from,
                    runner.trials.len() - eta_base,
                    expected_trials - eta_base
                )
            ));
            let ecfg = EquilibriumConfig {
                link_kpps: (gen_max / 1000.0) as u64,
                tolerance: cfg.tolerance,
                trial_s: et.as_secs_f64(),
                frame_len: cfg.frame_len,
                ipv6: runner.traffic.flows.is_v6(),
                max_iterations: cfg.equilibrium_max_iterations,
            };
            let saved = runner.traffic.warmup_s;
            runner.traffic.warmup_s = 0;
            if seed.is_some() {
                progress(
                    "  (iteration 1 at half the generator's maximum: the load curve's trial there)",
                );
            }
            let mut seeded = SeededRunner {
                runner: &mut runner,
                seed,
            };
            let r = equilibrium::search(&ecfg, &mut seeded, |line| progress(line));
            runner.traffic.warmup_s = saved;
            match r {
                Ok(e) => results[i].equilibrium = Some(e),
                Err(e) => {
                    if interrupted() {
                        return Err(LabError::Interrupted);
                    }
                    results[i]
                        .notes
                        .push(format!("equilibrium search failed: {e}"));
                }
            }
        }
        // The first fixed-load repeat, in this activation.
        let busy = repeat_at(0, &c.name(), &mut runner, &mut results[i], &mut progress)?;
        fwd_busy[i].extend(busy.0);
        gen_busy.extend(busy.1);
        c.deactivate(&topo)?;
    }

    // CPU per packet at one offered load: 80% of the slowest equilibrium
    // (or best load-curve rate) among the forwarders without rules, so
    // that it is a load the kernel forwards well below its limit (a
    // contender with rules that cannot sustain it is noted as such).
    let any_plain = contenders.iter().any(|c| !c.filters());
    let sustained = results
        .iter()
        .zip(&failed)
        .zip(contenders.iter().map(|c| !any_plain || !c.filters()))
        .filter(|((_, f), plain)| !**f && *plain)
        .filter_map(|((r, _), _)| {
            r.equilibrium
                .as_ref()
                .map(|e| e.estimated_kpps * 1000)
                .or_else(|| r.load_curve.iter().map(|p| p.forwarding_pps).max())
        })
        .min()
        .unwrap_or(0);
    let cpu_load = if cfg.cpu_load_pps > 0 {
        cfg.cpu_load_pps
    } else {
        (sustained * 8 / 10).max(10_000)
    };
    // Fixed offered load at the generator's maximum, contenders interleaved
    // (the first repeat ran in the first pass), the later repeats dealt in
    // turn to the later passes; in each of them a CPU-per-packet trial and
    // a livelock trial at the peak's offered load, so that a contender's
    // trials of each kind spread over the run alike and the machine's
    // slow and fast phases (its neighbours) fall on all of them.
    let passes = cfg.later_passes.max(1) as usize;
    let mut peak_trials_left = cfg.livelock_peak_trials.saturating_sub(1);
    for pass in 0..passes {
        let reps: Vec<u32> = (1..cfg.repeats)
            .filter(|r| (*r as usize - 1) % passes == pass)
            .collect();
        let peak_trials = if pass + 1 == passes {
            peak_trials_left
        } else {
            peak_trials_left.min(1)
        };
        peak_trials_left -= peak_trials;
        for (i, c) in contenders.iter_mut().enumerate() {
            if failed[i] {
                continue;
            }
            runner.traffic.expiring_every = c.expiring_every().or(run_expiring);
            c.activate(&topo)?;
            if !cfg.cpu_trial.is_zero() {
                progress(&format!(
                    "{}: CPU per packet at {cpu_load} pps offered",
                    c.name()
                ));
                let d = runner.trial(Some(cpu_load as f64), cfg.frame_len, cfg.cpu_trial)?;
                progress(&d.summary_line());
                let busy = p.fwd_cpu.and_then(|c| d.cpu_busy_pct.get(c).copied());
                let fwd = d.forwarding_pps(warm);
                if let Some(b) = busy {
                    match &mut results[i].cpu_per_packet {
                        Some(cpp) => {
                            cpp.add(fwd, b);
                        }
                        None => {
                            results[i].cpu_per_packet = report::CpuPerPacket::new(cpu_load, fwd, b);
                        }
                    }
                }
                cpu_fwd[i].push(fwd);
            }
            if let Some(check) = &mut results[i].livelock
                && check.peak_offered_pps < check.max_offered_pps
            {
                for _ in 0..peak_trials {
                    let rate = peak_trial(check.peak_offered_pps, &mut runner, &mut progress)?;
                    check.at_peak_pps.push(rate);
                }
            }
            if pass == 0 && i == 0 && runner.traffic.receiver == ReceiverMode::Xdp {
                // The XDP receiver's own cost, at overload, behind the first
                // contender (the kernel: no BPF program of its own). BPF run
                // statistics cost every program two clock reads, so they
                // are on for this extra trial only.
                progress(&format!(
                    "{}: the XDP receiver's own cost at overload (BPF run statistics on)",
                    c.name()
                ));
                let stats = crate::xdp::bpf_run_statistics().ok();
                let d = runner.trial(Some(gen_max), cfg.frame_len, cfg.cpu_trial)?;
                drop(stats);
                receiver_ns = d.recv.program_ns_per_frame;
                progress(&d.summary_line());
            }
            for &rep in &reps {
                let busy = repeat_at(rep, &c.name(), &mut runner, &mut results[i], &mut progress)?;
                fwd_busy[i].extend(busy.0);
                gen_busy.extend(busy.1);
            }
            c.deactivate(&topo)?;
        }
    }

    for (i, r) in results.iter_mut().enumerate() {
        if let Some(note) = unsustained_cpu_load_note(&cpu_fwd[i], cpu_load) {
            r.notes.push(note);
        }
        if let Some(check) = &mut r.livelock {
            // The fixed-load repeats ran at the highest offered load too.
            check.at_max_pps.extend(
                r.runs
                    .iter()
                    .filter(|x| x.offered_pps == check.max_offered_pps)
                    .map(|x| x.forwarding_pps),
            );
            if check.livelock(LIVELOCK_TOLERANCE) {
                r.notes.push(format!(
                    "receive livelock: the median rate at the highest offered load is more than {:.0}% below the median at the peak's offered load",
                    LIVELOCK_TOLERANCE * 100.0
                ));
            } else if falls_past_peak(&r.load_curve, LIVELOCK_TOLERANCE) {
                r.notes.push(format!(
                    "the load curve's last reading is more than {:.0}% below its peak, the medians of the repeated trials are not (ratio {:.2})",
                    LIVELOCK_TOLERANCE * 100.0,
                    check.ratio().unwrap_or(0.0)
                ));
            }
        }
        if let Some(note) = machine_probe_note(r.runs.iter()) {
            r.notes.push(note);
        }
        if let Some(note) = member_share_note(topo.egress, r.runs.iter()) {
            r.notes.push(note);
        }
        if let Some(b) = median(&fwd_busy[i]) {
            r.notes.push(format!(
                "forwarding core busy (median over repeats): {b:.0}%"
            ));
            let refused = r
                .runs
                .iter()
                .map(|x| x.lost as f64 / x.attempted.max(1) as f64)
                .fold(0.0, f64::max);
            if b < 90.0 && refused > 0.01 {
                r.notes.push(format!(
                    "forwarding core not saturated while the dut refused or lost up to {:.0}% of the offered frames: the limit is in its receive path (ring size, NAPI scheduling), not the generator",
                    refused * 100.0
                ));
            } else if b < 90.0 {
                r.notes.push(
                    "forwarding core not saturated: this result may be limited by the generator"
                        .into(),
                );
            }
        }
        if r.runs.iter().any(|x| x.generator_limited) {
            r.notes.push(
                "limited by generator: it sent less than the offered load in some runs".into(),
            );
        }
    }

    let mut run = LabRun::new("fastfwd lab bench: forwarding through dut, side by side");
    run.started = format!("unix time {started_wall}");
    run.host = host_info();
    run.fastfwd = version_info(version);
    let busy_all = |cpu: Option<usize>| -> Option<f64> {
        let c = cpu?;
        median(
            &runner
                .trials
                .iter()
                .filter(|t| t.offered_pps > 0)
                .filter_map(|t| t.cpu_busy_pct.get(c).copied())
                .collect::<Vec<_>>(),
        )
    };
    let cores = |c: Option<usize>| c.map(|c| vec![c as u32]).unwrap_or_default();
    run.placement = vec![
        CorePlacement {
            role: "generator".into(),
            process: Some("fastfwd lab (thread in gen)".into()),
            cores: cores(p.gen_cpu),
            busy_pct: median(&gen_busy).or(busy_all(p.gen_cpu)),
        },
        CorePlacement {
            role: "forwarder".into(),
            process: Some(format!(
                "napi/d0 kernel thread{}",
                topo.napi_pid
                    .map_or(String::new(), |p| format!(" (pid {p})"))
            )),
            cores: cores(p.fwd_cpu),
            busy_pct: busy_all(p.fwd_cpu),
        },
        CorePlacement {
            role: "receiver".into(),
            process: Some("fastfwd lab (thread in sink)".into()),
            cores: cores(p.sink_cpu),
            busy_pct: busy_all(p.sink_cpu),
        },
    ];
    let flows = &runner.traffic.flows;
    run.config = RunConfig {
        frame_len: cfg.frame_len,
        ip_version: if flows.is_v6() { 6 } else { 4 },
        flows: flows.len(),
        trial_s: cfg.trial.as_secs_f64(),
        trials: cfg.repeats,
        offered_pps: Some(gen_max as u64),
        warmup_s: warm,
        cooldown_s: cfg.traffic.cooldown_s,
        routes: fib.as_ref().map(|f| f.routes_v4 + f.routes_v6),
        ..RunConfig::default()
    };
    run.config.extra.insert(
        "topology".into(),
        match cfg.egress {
            crate::topo::Egress::Port => {
                format!("gen -> dut -> sink, veth, namespaces fflab-{}-*", cfg.tag)
            }
            crate::topo::Egress::Lag => format!(
                "gen -> dut -> sink, veth, namespaces fflab-{}-*; dut -> sink a two-member LAG \
                 (bonds d1 and s0, {})",
                cfg.tag,
                crate::topo::LAG_BOND_OPTIONS.join(" ")
            ),
        },
    );
    run.config
        .extra
        .insert("scenario".into(), cfg.egress.label().into());
    run.config
        .extra
        .insert("input".into(), runner.traffic.input.label().into());
    run.config.extra.insert(
        "destinations".into(),
        if cfg.full_table.is_some() && cfg.dsts > 0 {
            format!(
                "{} addresses drawn (seeded) from the full table's prefixes, {} distinct flows",
                cfg.dsts,
                runner.traffic.flows.len()
            )
        } else {
            format!(
                "{} addresses of the lab's range, {} flows",
                runner.traffic.flows.destinations(),
                runner.traffic.flows.len()
            )
        },
    );
    run.config.extra.insert(
        "receiver".into(),
        match runner.traffic.receiver {
            ReceiverMode::Xdp => "XDP program on s0 (counts, checks, drops)",
            ReceiverMode::Packet => "AF_PACKET TPACKET_V3 ring on s0",
        }
        .into(),
    );
    if let Some(n) = &input_note {
        run.config.extra.insert("input_fallback".into(), n.clone());
    }
    if let Some(n) = run_expiring {
        run.config.extra.insert(
            "ttl_expiring".into(),
            format!("one flow in {n} sent with TTL / hop limit 1 (ICMP time exceeded expected)"),
        );
    }
    if let Some(ns) = receiver_ns {
        // Against the forwarding core's time per packet at overload (the
        // repeats): busy share / forwarded rate.
        let shares: Vec<String> = results
            .iter()
            .zip(&fwd_busy)
            .filter_map(|(r, busy)| {
                let rate = median(&r.rates())?;
                let per_packet = median(busy)? / 100.0 * 1e9 / rate.max(1.0);
                Some(format!(
                    "{} {:.0}% of {per_packet:.0} ns",
                    r.name,
                    ns * 100.0 / per_packet
                ))
            })
            .collect();
        run.config.extra.insert(
            "receiver_cost".into(),
            format!(
                "{ns:.0} ns per frame in the XDP receiver's program (kernel BPF statistics), as a share of each contender's forwarding-core time per packet at overload: {}",
                shares.join(", ")
            ),
        );
    }
    run.config.extra.insert(
        "napi".into(),
        format!(
            "threaded on d0 (TSO off on g0, GRO on d0): {}",
            p.napi_threaded
        ),
    );
    if let Some(f) = &fib {
        run.config.extra.insert(
            "full_table".into(),
            format!(
                "{} v4 + {} v6 routes, {} next hops, loaded in {:.1} s",
                f.routes_v4, f.routes_v6, f.next_hops, f.seconds
            ),
        );
    }
    run.config.extra.insert(
        "generator".into(),
        match runner.traffic.input {
            InputMode::Live => "XDP program run with BPF_F_TEST_XDP_LIVE_FRAMES, redirecting out of g0, paced in the program",
            InputMode::Packet => "AF_PACKET sendmmsg, PACKET_QDISC_BYPASS, batch 64",
        }
        .into(),
    );
    run.config.extra.insert(
        "fixed_load".into(),
        "repeats offer the generator's maximum (overload)".into(),
    );
    run.config.extra.insert(
        "cpu_per_packet".into(),
        format!("the forwarding core's busy share x 1e9 / forwarded pps, the median of {} trials of {:.0} s per contender (one in each later activation, spread over the run) at {cpu_load} pps offered (80% of the slowest equilibrium among the contenders without firewall rules)", cfg.later_passes.max(1), cfg.cpu_trial.as_secs_f64()),
    );
    run.config.extra.insert(
        "load_average".into(),
        format!(
            "before {load_before}, after {} (1, 5 and 15 minutes; the bench itself keeps both cores busy)",
            load_average()
        ),
    );
    run.config.extra.insert(
        "all_trials".into(),
        "every trial's per-second readings are in trials.json".into(),
    );
    run.generator_max_pps = Some(gen_max as u64);
    run.baseline = contenders.first().map(|c| c.name()).unwrap_or_default();
    run.contenders = results;
    run.notes.push(format!(
        "Loss is counted as packets the generator attempted minus unique packets the sink's ring saw (veth refuses with ENOBUFS rather than counting drops). Generator maximum measured with dut forwarding off: {:.0} pps.",
        gen_max
    ));
    if let Some(note) = machine_probe_note(run.contenders.iter().flat_map(|c| &c.runs)) {
        run.notes.push(format!(
            "The whole run: {note}. A contender's spread no larger than this is the machine's."
        ));
    }
    if !load_note.quiet() {
        run.notes.push(format!(
            "{}: the ratios of this run are not quiet figures.",
            load_note.header()
        ));
    }
    run.duration_s = started.elapsed().as_secs_f64();
    run.finish();

    let files = write_outputs(&cfg.out_dir, &run, &runner.trials)?;
    drop(guard);
    Ok(BenchOutput { run, files, fib })
}

/// Writes result.json, trials.json, the SVG plots and report.md into `dir`.
pub fn write_outputs(
    dir: &Path,
    run: &LabRun,
    trials: &[TrialDetail],
) -> Result<Vec<PathBuf>, LabError> {
    std::fs::create_dir_all(dir).map_err(io_err(format!("create {}", dir.display())))?;
    let mut files = Vec::new();
    let mut write = |name: &str, text: &str| -> Result<(), LabError> {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(io_err(format!("write {}", p.display())))?;
        files.push(p);
        Ok(())
    };
    let json = run
        .to_json()
        .map_err(|e| LabError::Other(format!("result.json: {e}")))?;
    write("result.json", &json)?;
    let tj = serde_json::to_string_pretty(trials)
        .map_err(|e| LabError::Other(format!("trials.json: {e}")))?;
    write("trials.json", &tj)?;
    let charts = report::charts(run);
    let mut figures = report::ReportFigures::default();
    if let Some(c) = &charts.rate_vs_load {
        write("rate-vs-load.svg", &c.to_svg())?;
        figures.rate_vs_load = Some("rate-vs-load.svg".into());
    }
    if let Some(c) = &charts.latency {
        write("latency.svg", &c.to_svg())?;
        figures.latency = Some("latency.svg".into());
    }
    write("repeated-runs.svg", &charts.repeated_runs.to_svg())?;
    figures.repeated_runs = Some("repeated-runs.svg".into());
    write("report.md", &report::render_markdown(run, &figures))?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trips against a socket that answers as the daemon does (a
    /// protocol version first), and one that refuses.
    #[test]
    fn control_round_trips_read_the_daemons_replies() {
        use std::io::{BufRead, Write};
        let dir = std::env::temp_dir().join(format!("fastfwd-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, reply, ok) in [
            ("ok.sock", r#"{"version":1,"ok":true,"result":{}}"#, true),
            (
                "err.sock",
                r#"{"version":1,"ok":false,"error":"no"}"#,
                false,
            ),
        ] {
            let path = dir.join(name);
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            let server = std::thread::spawn(move || {
                let (s, _) = listener.accept().unwrap();
                let mut w = s.try_clone().unwrap();
                for line in std::io::BufReader::new(s).lines() {
                    if line.is_err() || writeln!(w, "{reply}").is_err() {
                        break;
                    }
                }
            });
            let r = control_round_trips(&path, 5, &AtomicBool::new(false));
            assert_eq!(
                r.as_ref().map(Vec::len).ok(),
                ok.then_some(5),
                "{name}: {r:?}"
            );
            drop(r);
            server.join().unwrap();
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn proc_stat_busy_share() {
        let a = parse_proc_stat(
            "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1\n",
        );
        let b = parse_proc_stat(
            "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 55 0 5 90 0 0 0 0 0 0\ncpu1 5 0 105 40 0 0 0 0 0 0\n",
        );
        assert_eq!(a.len(), 2);
        let busy = CpuTimes(b).busy_pct_since(&CpuTimes(a));
        assert_eq!(busy, vec![50.0, 100.0]);
    }

    #[test]
    fn version_string_parses() {
        let v = version_info("0.1.0 (abc123def456-dirty)");
        assert_eq!(
            (v.git_commit.as_deref(), v.dirty),
            (Some("abc123def456"), true)
        );
        assert_eq!(version_info("0.1.0 (unknown)").git_commit, None);
    }

    #[test]
    fn one_note_names_the_cpu_trials_that_fell_behind() {
        assert_eq!(unsustained_cpu_load_note(&[200, 196, 190], 200), None);
        assert_eq!(
            unsustained_cpu_load_note(&[60, 200, 58], 200).as_deref(),
            Some(
                "did not sustain the CPU-per-packet load in 2 of 3 trials: 60, 58 of 200 pps forwarded"
            )
        );
    }

    #[test]
    fn the_livelock_check_repeats_the_peak_beside_the_readings_at_the_maximum() {
        let p = |o, f| LoadPoint {
            offered_pps: o,
            forwarding_pps: f,
            loss_ratio: 0.0,
        };
        // Peaks at 200 (the first of two equal peaks), falls at 300.
        let curve = [p(100, 90), p(200, 180), p(250, 180), p(300, 120)];
        let mut asked = Vec::new();
        let check = livelock_check(&curve, vec![170, 175, 175], 2, |o| {
            asked.push(o);
            Ok(185)
        })
        .unwrap()
        .unwrap();
        // Only the peak is repeated: the maximum has its readings already.
        // The curve's reading at the peak chose it, so the peak is judged
        // by the fresh trials alone.
        assert_eq!(asked, [200, 200]);
        assert_eq!((check.peak_offered_pps, check.max_offered_pps), (200, 300));
        assert_eq!(check.at_peak_pps, [185, 185]);
        assert_eq!(check.at_max_pps, [120, 170, 175, 175]);
        assert!(!check.livelock(LIVELOCK_TOLERANCE));
        // A curve that still rises is checked all the same, against its
        // best point below the highest load: the median may show a fall
        // the single readings did not.
        let rising = [p(100, 90), p(200, 150), p(300, 200)];
        let check = livelock_check(&rising, vec![100, 100], 2, |o| {
            assert_eq!(o, 200);
            Ok(150)
        })
        .unwrap()
        .unwrap();
        assert_eq!((check.peak_offered_pps, check.at_peak_pps.len()), (200, 2));
        assert_eq!(check.at_max_pps, [200, 100, 100]);
        assert!(check.livelock(LIVELOCK_TOLERANCE));
        // A lucky reading at the peak does not make a fall: 1.00 of the
        // peak's fresh trials, where the curve's reading alone gave 0.75.
        let lucky = [p(100, 90), p(200, 240), p(300, 180)];
        let check = livelock_check(&lucky, vec![180, 180], 3, |_| Ok(180))
            .unwrap()
            .unwrap();
        assert_eq!(check.at_peak_pps, [180, 180, 180]);
        assert_eq!(check.ratio(), Some(1.0));
        // Without fresh trials the curve's reading is all there is.
        let check = livelock_check(&lucky, vec![180, 180], 0, |_| panic!("no trial"))
            .unwrap()
            .unwrap();
        assert_eq!(check.at_peak_pps, [240]);
        assert!(check.livelock(LIVELOCK_TOLERANCE));
        // One point: compared with itself, no trial.
        let one = [p(300, 200)];
        let check = livelock_check(&one, vec![190], 2, |_| panic!("no trial"))
            .unwrap()
            .unwrap();
        assert_eq!(check.ratio(), Some(1.0));
        assert_eq!(check.at_peak_pps, check.at_max_pps);
        // A trial's error is the check's.
        assert!(livelock_check(&curve, vec![], 1, |_| Err(LabError::Interrupted)).is_err());
        assert!(livelock_check(&[], vec![], 1, |_| Ok(0)).unwrap().is_none());
    }

    #[test]
    fn a_seeded_runner_answers_one_trial_at_the_seeds_load_and_runs_the_rest() {
        struct Counting(Vec<u64>);
        impl TrialRunner for Counting {
            type Error = LabError;
            fn run_trial(&mut self, spec: &TrialSpec) -> Result<TrialOutcome, LabError> {
                self.0.push(spec.offered_pps);
                Ok(TrialOutcome {
                    generator_pps: spec.offered_pps,
                    ..Default::default()
                })
            }
        }
        let seed = TrialOutcome {
            generator_pps: 7,
            ..Default::default()
        };
        let mut inner = Counting(Vec::new());
        let mut r = SeededRunner {
            runner: &mut inner,
            seed: Some((2_567_269, seed)),
        };
        let spec = |offered_pps| TrialSpec {
            offered_pps,
            frame_len: 60,
            duration_s: 1.0,
        };
        // Another load first: run; then the seed's load (rounded to Kpps
        // by the search): the seed, once; then run again.
        assert_eq!(
            r.run_trial(&spec(1_000_000)).unwrap().generator_pps,
            1_000_000
        );
        assert_eq!(r.run_trial(&spec(2_567_000)).unwrap().generator_pps, 7);
        assert_eq!(
            r.run_trial(&spec(2_567_000)).unwrap().generator_pps,
            2_567_000
        );
        assert_eq!(inner.0, [1_000_000, 2_567_000]);
        // A load 1% away is not the seed's.
        let mut inner = Counting(Vec::new());
        let mut r = SeededRunner {
            runner: &mut inner,
            seed: Some((2_567_269, TrialOutcome::default())),
        };
        r.run_trial(&spec(2_541_000)).unwrap();
        assert_eq!(inner.0, [2_541_000]);
    }

    #[test]
    fn the_machine_probe_note_gives_range_and_spread_over_median() {
        let run = |alu, mem| RunRecord {
            machine_probe: Some(crate::probe::SpeedProbe {
                alu_ns: alu,
                mem_ns: mem,
            }),
            ..RunRecord::default()
        };
        assert_eq!(machine_probe_note([run(0.15, 100.0)].iter()), None);
        let runs = [
            run(0.15, 100.0),
            run(0.20, 250.0),
            run(0.16, 110.0),
            RunRecord::default(),
        ];
        let note = machine_probe_note(runs.iter()).unwrap();
        assert!(note.contains("(3 readings)"), "{note}");
        assert!(note.contains("0.15-0.20 ns (spread 31.3%)"), "{note}");
        assert!(note.contains("100.00-250.00 ns (spread 136.4%)"), "{note}");
    }

    #[test]
    fn kernel_contender_names() {
        assert_eq!(
            KernelForwarding {
                firewall: FirewallPreset::None
            }
            .name(),
            "kernel"
        );
        assert_eq!(
            KernelForwarding {
                firewall: FirewallPreset::Set(1000)
            }
            .name(),
            "kernel+nft-set-1000"
        );
    }
}
