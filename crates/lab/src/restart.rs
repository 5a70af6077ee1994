//! Restarts under load: traffic at a fixed rate through the dut while
//! fastfwd is stopped and started again (SIGTERM, then SIGKILL), beside
//! the kernel forwarding the same traffic with nothing restarted. What
//! each restart cost is the frames the sink did not get, and how long the
//! new daemon took to answer (docs/operations.md, "Restarts and
//! upgrades").

use crate::bench::{
    Contender, FastfwdForwarding, InputMode, KernelForwarding, LabError, LabRunner, Traffic,
};
use crate::topo::{FirewallPreset, TopoConfig, TopoGuard, Topology};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// What `run_restarts` does.
#[derive(Debug, Clone)]
pub struct RestartConfig {
    /// Namespace tag.
    pub tag: String,
    /// The `fastfwd` binary.
    pub binary: PathBuf,
    /// Worker cores of the daemon.
    pub cores: String,
    /// Prefix list to load into dut (None: the lab's routes only).
    pub full_table: Option<PathBuf>,
    /// Destinations drawn from it (0: the traffic's own).
    pub dsts: usize,
    /// Offered load, packets per second (None: the generator's maximum).
    pub rate_pps: Option<f64>,
    /// Frame length without FCS.
    pub frame_len: u16,
    /// Seconds of traffic before the first restart, between the two, and
    /// after the second.
    pub phase: Duration,
    /// fastfwd engines: `xdp-engine`, `xdp`, `packet`.
    pub engines: Vec<String>,
}

/// One restart inside a trial.
#[derive(Debug, Clone, Serialize)]
pub struct RestartEvent {
    /// `SIGTERM` or `SIGKILL`.
    pub signal: &'static str,
    /// From the signal until the old daemon was gone, milliseconds.
    pub stop_ms: f64,
    /// From the new daemon's start until it answered on its control
    /// socket (workers and exception path running), milliseconds.
    pub start_ms: f64,
}

/// One contender's trial.
#[derive(Debug, Clone, Serialize)]
pub struct RestartTrial {
    /// Who forwarded.
    pub contender: String,
    /// Offered load, pps.
    pub offered_pps: u64,
    /// Frames the generator sent.
    pub sent: u64,
    /// Frames the sink received.
    pub received: u64,
    /// sent - received.
    pub lost: u64,
    /// The loss as milliseconds of the offered load.
    pub lost_ms: f64,
    /// The restarts in it (none for the kernel).
    pub restarts: Vec<RestartEvent>,
}

/// The run.
#[derive(Debug, Clone, Serialize)]
pub struct RestartRun {
    /// Routes in dut besides the lab's.
    pub routes: u64,
    /// Flows of the traffic.
    pub flows: u64,
    /// How the frames reached the dut.
    pub input: &'static str,
    /// Each contender's trial.
    pub trials: Vec<RestartTrial>,
}

/// Runs one trial per contender: the kernel (nothing to restart), then
/// each fastfwd engine once as it is and once restarted twice (SIGTERM +
/// start, SIGKILL + start) while the traffic runs.
pub fn run_restarts(
    cfg: &RestartConfig,
    mut progress: impl FnMut(&str),
) -> Result<RestartRun, LabError> {
    let mut tcfg = TopoConfig::new(&cfg.tag);
    tcfg.forwarding = true;
    let guard = TopoGuard(Topology::up(&tcfg)?);
    let topo = guard.0.clone();
    let mut routes = 0;
    let mut traffic = Traffic::default_v4();
    traffic.warmup_s = 0;
    if let Some(path) = &cfg.full_table {
        progress(&format!("full table: loading {}", path.display()));
        let l = topo.load_full_table(path)?;
        routes = l.routes_v4 + l.routes_v6;
        if cfg.dsts > 0 {
            traffic.flows = crate::bench::flows_to_table(&traffic.flows, path, cfg.dsts)?;
        }
    }
    let flows = traffic.flows.len();
    let mut runner = LabRunner::new(&topo, traffic)?;
    // Live XDP frames where this kernel runs them, else socket buffers.
    topo.set_forwarding(false)?;
    let probe = runner.trial(Some(1_000.0), cfg.frame_len, Duration::from_secs(1));
    topo.set_forwarding(true)?;
    if let Err(LabError::Gen(crate::generator::GenError::Live { what, why })) = &probe {
        progress(&format!(
            "the live-frames generator did not run here ({what}: {why}): input falls back to {}",
            InputMode::Packet.label()
        ));
        runner.set_input(InputMode::Packet);
    } else {
        probe?;
    }
    let input = runner.input().label();
    let trial_len = cfg.phase * 3;
    let rate = match cfg.rate_pps {
        Some(r) => r,
        None => {
            topo.set_forwarding(false)?;
            let g = runner.trial(None, cfg.frame_len, Duration::from_secs(2))?;
            topo.set_forwarding(true)?;
            progress(&format!(
                "generator maximum: {:.0} pps",
                g.generator.attempted_pps
            ));
            g.generator.attempted_pps
        }
    };
    let mut trials = Vec::new();
    let mut kernel = KernelForwarding {
        firewall: FirewallPreset::None,
    };
    kernel.activate(&topo)?;
    let d = runner.trial(Some(rate), cfg.frame_len, trial_len)?;
    kernel.deactivate(&topo)?;
    trials.push(trial_of("kernel", rate, &d, Vec::new()));
    progress(&format!("kernel: {}", d.summary_line()));
    for engine in &cfg.engines {
        let dir = std::env::temp_dir().join(format!("fastfwd-lab-{}", cfg.tag));
        let mut c = FastfwdForwarding::new(cfg.binary.clone(), engine, &cfg.cores, dir);
        c.keep_on_exit = true;
        c.activate(&topo)?;
        // The same trial with nothing restarted: what the engine loses at
        // this rate anyway.
        let d = runner.trial(Some(rate), cfg.frame_len, trial_len)?;
        let name = format!("{} (not restarted)", c.name());
        progress(&format!("{name}: {}", d.summary_line()));
        trials.push(trial_of(&name, rate, &d, Vec::new()));
        let phase = cfg.phase;
        let (d, events) = std::thread::scope(|s| {
            let driver = s.spawn(|| -> Result<Vec<RestartEvent>, LabError> {
                let mut events = Vec::new();
                for (signal, kill) in [("SIGTERM", false), ("SIGKILL", true)] {
                    std::thread::sleep(phase);
                    let (stop, start) = c.restart(&topo, kill)?;
                    events.push(RestartEvent {
                        signal,
                        stop_ms: stop.as_secs_f64() * 1e3,
                        start_ms: start.as_secs_f64() * 1e3,
                    });
                }
                Ok(events)
            });
            let d = runner.trial(Some(rate), cfg.frame_len, trial_len);
            let events = driver
                .join()
                .map_err(|_| LabError::Other("the restarting thread panicked".into()));
            (d, events)
        });
        let (d, events) = (d?, events??);
        c.deactivate(&topo)?;
        let name = c.name();
        progress(&format!(
            "{name}: {} (stopped, started: {})",
            d.summary_line(),
            events
                .iter()
                .map(|e| format!("{} {:.0} + {:.0} ms", e.signal, e.stop_ms, e.start_ms))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        trials.push(trial_of(&name, rate, &d, events));
    }
    Ok(RestartRun {
        routes,
        flows,
        input,
        trials,
    })
}

fn trial_of(
    name: &str,
    rate: f64,
    d: &crate::bench::TrialDetail,
    restarts: Vec<RestartEvent>,
) -> RestartTrial {
    let sent = d.generator.sent;
    let received = d.recv.received;
    let lost = sent.saturating_sub(received);
    RestartTrial {
        contender: name.to_string(),
        offered_pps: rate as u64,
        sent,
        received,
        lost,
        lost_ms: lost as f64 * 1e3 / rate.max(1.0),
        restarts,
    }
}

/// The run as a table, one line a contender.
pub fn restart_table(run: &RestartRun) -> String {
    let mut s = String::from(
        "contender | offered pps | sent | received | lost | lost, ms of traffic | restarts (old gone + new answering)\n",
    );
    for t in &run.trials {
        let r: Vec<String> = t
            .restarts
            .iter()
            .map(|e| format!("{} {:.0} + {:.0} ms", e.signal, e.stop_ms, e.start_ms))
            .collect();
        s.push_str(&format!(
            "{} | {} | {} | {} | {} | {:.1} | {}\n",
            t.contender,
            t.offered_pps,
            t.sent,
            t.received,
            t.lost,
            t.lost_ms,
            if r.is_empty() {
                "-".into()
            } else {
                r.join(", ")
            }
        ));
    }
    s
}
