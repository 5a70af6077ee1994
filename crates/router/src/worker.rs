//! The forwarding worker: one thread per configured core, owning its ports.
//!
//! Each round it takes a batch from every port it serves, runs it through
//! the pipeline over the tables snapshot current at the start of the round,
//! queues the forwarded frames and generated packets on their egress ports,
//! holds frames whose neighbour is being resolved (sent again after the next
//! table change, dropped after [`HOLD_NS`]) and reports neighbour misses to
//! the control loop. TX buffers are flushed at the end of every round. It
//! polls while traffic flows and sleeps in `poll(2)` on its ports when idle.
//!
//! Nothing here allocates, locks, reads the clock or makes a syscall per
//! packet: the clock is read once per round (and, with stage timing on,
//! around the stages of one chunk in `pipeline::runtime::TIMED_EVERY`), the report is published under
//! its mutex about every [`REPORT_NS`].

use crate::capture::{CapturePoint, Reason};
use crate::ports::PortChange;
use netio::sys::os;
use netio::{FrameBatch, Port};
use pipeline::{Acl, Counters, PuntReason, Verdict, Worker, WorkerConfig};
use rib::snapshot::Snapshot;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// How long a frame may wait for its neighbour to be resolved.
pub const HOLD_NS: u64 = 1_000_000_000;
/// Empty rounds before a worker sleeps.
const SPIN_ROUNDS: u32 = 64;
/// Longest sleep in poll(2), so stop requests are seen promptly.
const SLEEP_MS: i32 = 100;
/// The idle sleep while frames wait for a neighbour: how late a held frame
/// may leave after its neighbour is learnt.
const HELD_SLEEP_MS: i32 = 1;
/// How often a worker publishes its counters.
pub const REPORT_NS: u64 = 100_000_000;

/// Port counters as the control socket reports them.
pub use control::protocol::reply::Port as PortCounters;

/// What a worker publishes about itself (about every 100 ms).
#[derive(Debug, Clone, Default)]
pub struct WorkerReport {
    /// What `show workers` says of it.
    pub view: control::protocol::reply::Worker,
    /// Pipeline counters.
    pub counters: Counters,
    /// Per-stage calls, packets and time.
    pub runtime: pipeline::RuntimeStats,
    /// The firewall's per-worker state, when the config has rules.
    pub firewall: Option<FirewallReport>,
    /// Packets traced for the trace of this generation (oldest first), and
    /// how many more the worker will trace.
    pub trace: Vec<pipeline::TraceRecord>,
    pub trace_generation: u64,
    pub trace_remaining: usize,
    /// Frames the capture in progress will still copy, for the capture
    /// request of this generation.
    pub capture_remaining: usize,
    pub capture_generation: u64,
}

/// The packet trace asked over the control socket (`trace add`).
#[derive(Debug, Clone, Default)]
pub struct TraceRequest {
    /// Packets to trace per worker (0: none).
    pub count: usize,
    /// Only packets that match.
    pub filter: Option<wire::filter::Filter>,
    /// Only this worker (all without one).
    pub worker: Option<usize>,
}

/// A worker's firewall counters, for the rule set they belong to.
#[derive(Debug, Clone)]
pub struct FirewallReport {
    /// The rule set the counters count (they restart with a new one).
    pub rules: Arc<firewall::Firewall>,
    /// Per-rule packets and bytes.
    pub counters: firewall::RuleCounters,
    /// Rejects rate-limited into drops, rule-set swaps seen.
    pub stats: firewall::WorkerStats,
    /// The connection table, when a rule uses `ct state`.
    pub conntrack: Option<firewall::ConntrackStats>,
}

/// What the workers and the control loop share.
#[derive(Debug)]
pub struct Shared {
    /// The tables the workers read.
    pub snapshot: Snapshot,
    /// Set by the control loop to stop the workers.
    pub stop: AtomicBool,
    /// Set by a worker that panicked: the daemon stops with an error
    /// rather than run on with a queue nobody serves.
    pub worker_failed: AtomicBool,
    /// Each worker's last report, by worker number.
    pub reports: Vec<Mutex<WorkerReport>>,
    /// The packet trace asked for, and its generation (bumped by every
    /// `trace add` and `trace clear`; workers look at it once a round).
    pub trace: Mutex<TraceRequest>,
    pub trace_generation: AtomicU64,
    /// The capture asked for and its generation, as the trace's.
    pub capture: Mutex<Option<crate::capture::CaptureRequest>>,
    pub capture_generation: AtomicU64,
    /// What each worker captured, until `capture_read` takes it.
    pub captures: Vec<Mutex<crate::capture::CaptureBuffer>>,
}

impl Shared {
    /// Shared state for `workers` workers over `snapshot`.
    pub fn new(snapshot: Snapshot, workers: usize) -> Shared {
        Shared {
            snapshot,
            stop: AtomicBool::new(false),
            worker_failed: AtomicBool::new(false),
            reports: (0..workers)
                .map(|_| Mutex::new(WorkerReport::default()))
                .collect(),
            trace: Mutex::new(TraceRequest::default()),
            trace_generation: AtomicU64::new(0),
            capture: Mutex::new(None),
            capture_generation: AtomicU64::new(0),
            captures: (0..workers)
                .map(|_| Mutex::new(crate::capture::CaptureBuffer::default()))
                .collect(),
        }
    }
}

/// One worker's ports and settings.
pub struct WorkerSetup {
    /// Worker number (index into [`Shared::reports`]).
    pub id: usize,
    /// CPU to pin to (None: not pinned, as in tests).
    pub core: Option<usize>,
    /// Keep polling when idle.
    pub busy_poll: bool,
    /// Ports by port id (None: this worker has no socket there).
    pub ports: Vec<Option<Box<dyn Port>>>,
    /// Port names by port id.
    pub port_names: Vec<String>,
    /// Where neighbour misses go (interface, address).
    pub misses: SyncSender<(u16, IpAddr)>,
    /// The kernel receives its own copy of every frame (AF_PACKET): a
    /// punted frame needs no handing over, so it is dropped here without
    /// counting as `punts_discarded` (punts no path carried to the kernel).
    pub punt_to_kernel_copy: bool,
    /// New sockets for a port whose interface was re-created (or None to
    /// close a port whose interface is gone), checked once per round.
    pub port_changes: Option<Receiver<PortChange>>,
    /// The XDP engine's flow table: flows the firewall finds established
    /// on frames the program handed over go there, once per round.
    pub flow_table: Option<xdp_engine::FlowTable>,
    /// This worker's end of the rings between workers (several workers).
    pub handoff: Option<crate::handoff::Handoff>,
}

impl std::fmt::Debug for WorkerSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerSetup")
            .field("id", &self.id)
            .field("core", &self.core)
            .field("port_names", &self.port_names)
            .finish()
    }
}

/// A worker's state between rounds.
pub struct WorkerLoop {
    setup: WorkerSetup,
    worker: Worker,
    batch: FrameBatch,
    held: Vec<FrameBatch>,
    held_since: Vec<u64>,
    report: WorkerReport,
    /// Recently reported misses, so a burst toward one address asks once.
    recent: [(u16, IpAddr, u64); 16],
    recent_at: usize,
    seen_gen: u64,
    /// The trace request generation last applied.
    seen_trace: u64,
    /// The capture in progress, and the generation it came from.
    capture: Option<crate::capture::WorkerCapture>,
    seen_capture: u64,
    /// Test hook: `FASTFWD_TEST_WORKER_PANIC` makes a worker panic on its
    /// first frames (read once at start, never per packet).
    panic_hook: bool,
    /// The ports changed since the poll descriptors were listed.
    ports_changed: bool,
}

impl std::fmt::Debug for WorkerLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerLoop")
            .field("setup", &self.setup)
            .finish()
    }
}

impl WorkerLoop {
    /// A worker over `setup`'s ports, reading `shared`'s tables.
    pub fn new(setup: WorkerSetup, shared: &Shared) -> WorkerLoop {
        let n = setup.ports.len();
        let report = WorkerReport {
            view: control::protocol::reply::Worker {
                id: setup.id,
                core: setup.core.unwrap_or(0),
                backend: setup
                    .ports
                    .iter()
                    .flatten()
                    .next()
                    .map(|p| p.backend().to_string())
                    .unwrap_or_default(),
                ..Default::default()
            },
            ..WorkerReport::default()
        };
        let mut worker = Worker::new(WorkerConfig {
            max_batch: netio::BATCH,
            ..WorkerConfig::default()
        });
        // `show runtime`: one clock read per stage of one chunk in eight.
        worker.set_stage_clock(Some(os::monotonic_ns));
        WorkerLoop {
            worker,
            batch: FrameBatch::new(),
            held: (0..n).map(|_| FrameBatch::new()).collect(),
            held_since: vec![0; n],
            report,
            recent: [(u16::MAX, IpAddr::from([0u8; 4]), 0); 16],
            recent_at: 0,
            seen_gen: shared.snapshot.generation(),
            seen_trace: 0,
            capture: None,
            seen_capture: 0,
            panic_hook: std::env::var_os("FASTFWD_TEST_WORKER_PANIC").is_some(),
            ports_changed: false,
            setup,
        }
    }

    /// One round at time `now` (ns on the worker's clock): every port's
    /// waiting frames through the pipeline, held frames retried after a
    /// table change or expired, TX flushed. Returns the frames handled.
    pub fn round(&mut self, shared: &Shared, now: u64) -> usize {
        self.take_port_changes();
        self.take_trace_request(shared);
        self.take_capture_request(shared);
        let tables = shared.snapshot.load();
        let generation = shared.snapshot.generation();
        // Both directions of a flow to one connection table (handoff.rs).
        let hand_off = self.setup.handoff.is_some() && tables.acl.keeps_flows();
        let mut got = 0usize;
        for rx in 0..self.setup.ports.len() {
            // Frames waiting for a neighbour go again after a table change,
            // keeping the time they were first held: a stream of table
            // changes does not hold a frame past its deadline.
            let retry_held = generation != self.seen_gen && !self.held[rx].is_empty();
            let first_held = if retry_held { self.held_since[rx] } else { now };
            if retry_held {
                std::mem::swap(&mut self.batch, &mut self.held[rx]);
                self.held[rx].clear();
            } else {
                let Some(port) = self.setup.ports[rx].as_mut() else {
                    continue;
                };
                self.batch.clear();
                if port.rx_batch(&mut self.batch) == 0 {
                    continue;
                }
            }
            self.capture_rx(rx, now);
            got += self.batch.len();
            if self.panic_hook {
                panic!("worker {}: FASTFWD_TEST_WORKER_PANIC is set", self.setup.id);
            }
            if hand_off && !retry_held {
                self.hand_off(rx as u16);
            }
            self.process_batch(&tables, rx, now, first_held);
        }
        // Frames other workers received for flows this one owns; drained
        // whatever the rule set now, so none is left behind.
        while let Some(h) = self.setup.handoff.as_mut() {
            let Some(rx) = h.receive(&mut self.batch) else {
                break;
            };
            got += self.batch.len();
            self.process_batch(&tables, usize::from(rx), now, now);
        }
        self.seen_gen = generation;
        for (rx, h) in self.held.iter_mut().enumerate() {
            if !h.is_empty() && now.saturating_sub(self.held_since[rx]) > HOLD_NS {
                self.report.view.held_expired += h.len() as u64;
                h.clear();
            }
        }
        // TX buffers are flushed at the end of every round: the "timer" is
        // one pass over the ports, a few microseconds when busy.
        for p in self.setup.ports.iter_mut().flatten() {
            p.flush();
        }
        if let Some(h) = self.setup.handoff.as_mut() {
            h.ring();
        }
        self.hand_flows_over(now);
        self.move_captured(shared);
        if got > 0 {
            self.report.view.busy_rounds += 1;
        }
        got
    }

    /// Offers the capture the frames just received, if it takes them there.
    fn capture_rx(&mut self, rx: usize, now: u64) {
        if let Some(c) = self.capture.as_mut()
            && c.point == CapturePoint::Rx
        {
            for i in 0..self.batch.len() {
                c.offer(rx as u16, now, self.batch.frame(i), Reason::None);
            }
        }
    }

    /// Moves the frames of the batch whose flows another worker owns into
    /// the rings to their owners; counts those that found a ring full.
    fn hand_off(&mut self, rx: u16) {
        let Some(h) = self.setup.handoff.as_mut() else {
            return;
        };
        let view = &mut self.report.view;
        self.batch
            .retain(|frame, hint| match h.owner_elsewhere(frame) {
                None => true,
                Some(owner) => {
                    if h.send(owner, rx, hint, frame) {
                        view.handed_off += 1;
                    } else {
                        view.handoff_dropped += 1;
                    }
                    false
                }
            });
    }

    /// Runs the batch, received on port `rx`, through the pipeline and
    /// sends, holds or drops what it decided; `first_held` is when its
    /// frames were first held for a neighbour (now for new frames).
    fn process_batch(&mut self, tables: &rib::RouterTables, rx: usize, now: u64, first_held: u64) {
        if self.batch.is_empty() {
            return;
        }
        let ports = &mut self.setup.ports;
        let worker = &mut self.worker;
        self.batch.with_frames(|frames| {
            worker.process(tables, now, rx as u16, frames);
        });
        let out = self.worker.output();
        if let Some(c) = self.capture.as_mut() {
            capture_outcome(c, out, &self.batch, rx as u16, now);
        }
        for (p, idx) in out.tx_batches() {
            if let Some(Some(port)) = ports.get_mut(usize::from(p)) {
                for &i in idx {
                    port.tx(self.batch.frame(usize::from(i)));
                }
            }
        }
        for (p, _iface, bytes) in out.generated() {
            if let Some(Some(port)) = ports.get_mut(usize::from(p)) {
                port.tx(bytes);
            }
        }
        let Some(held) = self.held.get_mut(rx) else {
            return;
        };
        for (i, v) in out.verdicts().iter().enumerate() {
            match v {
                Verdict::Punt(PuntReason::NeighbourMiss) => {
                    if held.is_empty() {
                        self.held_since[rx] = first_held;
                    }
                    // With its hint: the XDP program has already
                    // advanced the flow of a frame it handed over.
                    let hint = self.batch.ct_hint(i);
                    if held.push_hinted(self.batch.frame(i), hint) {
                        self.report.view.held += 1;
                    } else {
                        self.report.view.held_expired += 1;
                    }
                }
                Verdict::Punt(_) if !self.setup.punt_to_kernel_copy => {
                    self.report.view.punts_discarded += 1
                }
                _ => {}
            }
        }
        for &(iface, ip) in out.neighbour_misses() {
            let fresh = !self
                .recent
                .iter()
                .any(|&(i, a, t)| i == iface && a == ip && now.saturating_sub(t) < 100_000_000);
            if fresh {
                self.recent[self.recent_at] = (iface, ip, now);
                self.recent_at = (self.recent_at + 1) % self.recent.len();
                if let Err(TrySendError::Full(_)) = self.setup.misses.try_send((iface, ip)) {
                    self.report.view.misses_lost += 1;
                }
            }
        }
    }

    /// Starts or stops capturing when the control loop asked (as traces).
    fn take_capture_request(&mut self, shared: &Shared) {
        let generation = shared.capture_generation.load(Ordering::Acquire);
        if generation == self.seen_capture {
            return;
        }
        self.seen_capture = generation;
        let req = shared.capture.lock().ok().and_then(|r| r.clone());
        self.capture = req
            .filter(|r| r.count > 0)
            .map(|r| crate::capture::WorkerCapture::new(&r));
    }

    /// Moves this round's captured frames to the worker's slot, if the
    /// control loop is not reading it (else they wait for the next round).
    fn move_captured(&mut self, shared: &Shared) {
        let Some(c) = self.capture.as_mut() else {
            return;
        };
        if c.buffer.is_empty() && c.buffer.lost == 0 {
            return;
        }
        if let Some(slot) = shared.captures.get(self.setup.id)
            && let Ok(mut g) = slot.try_lock()
        {
            c.buffer.move_into(&mut g);
        }
    }

    /// Starts or stops tracing when the control loop asked (one atomic
    /// load a round; the request is read under its lock only when it
    /// changed).
    fn take_trace_request(&mut self, shared: &Shared) {
        let generation = shared.trace_generation.load(Ordering::Acquire);
        if generation == self.seen_trace {
            return;
        }
        self.seen_trace = generation;
        let req = shared.trace.lock().map(|r| r.clone()).unwrap_or_default();
        let mine = req.count > 0 && req.worker.is_none_or(|w| w == self.setup.id);
        self.worker
            .set_tracer(mine.then(|| pipeline::Tracer::new(req.count, req.filter)));
    }

    /// Gives the XDP engine's fast path the flows this round's firewall
    /// found established (one map update per new flow, none per packet).
    fn hand_flows_over(&mut self, now: u64) {
        let Some(table) = self.setup.flow_table.as_mut() else {
            return;
        };
        if let Some(fw) = firewall::pipeline_acl::worker_state(&mut self.worker) {
            let epoch = fw.epoch();
            fw.hand_over(now, |f| table.give(f, epoch));
        }
    }

    /// Puts in the sockets the control loop opened for a re-created
    /// interface (dropping, so closing, the old ones).
    fn take_port_changes(&mut self) {
        let Some(rx) = &self.setup.port_changes else {
            return;
        };
        while let Ok((p, port)) = rx.try_recv() {
            if let (Some(slot), Some(held)) = (self.setup.ports.get_mut(p), self.held.get_mut(p)) {
                *slot = port;
                held.clear();
                self.ports_changed = true;
            }
        }
    }

    fn poll_fds(&self) -> Vec<i32> {
        self.setup
            .ports
            .iter()
            .flatten()
            .flat_map(|p| p.poll_fds())
            .chain(self.setup.handoff.as_ref().map(|h| h.wakeup_fd()))
            .collect()
    }

    /// Whether frames are held for a neighbour.
    pub fn holds_frames(&self) -> bool {
        self.held.iter().any(|h| !h.is_empty())
    }

    /// Copies the counters into the worker's slot of `shared.reports`.
    pub fn publish(&mut self, shared: &Shared) {
        let report = &mut self.report;
        report.counters = self.worker.counters().clone();
        report.runtime = *self.worker.runtime();
        report.firewall = self
            .worker
            .acl_state::<<config::ConfigAcl as pipeline::Acl>::State>()
            .and_then(Option::as_ref)
            .map(|fw| FirewallReport {
                rules: Arc::clone(fw.firewall()),
                counters: fw.counters().clone(),
                stats: fw.stats(),
                conntrack: fw.conntrack_stats(),
            });
        report.view.ports = self
            .setup
            .ports
            .iter()
            .zip(&self.setup.port_names)
            .filter_map(|(p, name)| {
                let s = p.as_ref()?.stats();
                Some(PortCounters {
                    port: name.clone(),
                    counters: s,
                })
            })
            .collect();
        let traced = self.worker.take_trace();
        report.trace_remaining = self.worker.tracer().map_or(0, |t| t.remaining());
        report.capture_remaining = self.capture.as_ref().map_or(0, |c| c.remaining());
        report.capture_generation = self.seen_capture;
        if let Some(slot) = shared.reports.get(report.view.id)
            && let Ok(mut g) = slot.lock()
        {
            // The trace records accumulate in the slot (not copied each
            // time); a new trace generation starts them again.
            let mut trace = std::mem::take(&mut g.trace);
            if g.trace_generation != self.seen_trace {
                trace.clear();
            }
            trace.extend(traced);
            *g = report.clone();
            g.trace = trace;
            g.trace_generation = self.seen_trace;
        }
    }

    /// The worker thread's body: rounds until `shared.stop`, sleeping in
    /// poll(2) when idle unless busy polling.
    pub fn run(mut self, shared: Arc<Shared>) {
        let _flag = PanicFlag(Arc::clone(&shared));
        if let Some(core) = self.setup.core
            && let Err(e) = os::pin_current_thread(core)
        {
            tracing::warn!(worker = self.setup.id, cpu = core, error = %e, "cannot pin to the CPU");
        }
        let mut fds = self.poll_fds();
        let mut last_report = 0u64;
        let mut idle_rounds = 0u32;
        while !shared.stop.load(Ordering::Relaxed) {
            // CLOCK_MONOTONIC, the clock the XDP program reads too (its
            // connection table's expiry times are the firewall's).
            let now = os::monotonic_ns();
            let got = self.round(&shared, now);
            if std::mem::take(&mut self.ports_changed) {
                fds = self.poll_fds();
            }
            if got > 0 {
                idle_rounds = 0;
            } else {
                idle_rounds = idle_rounds.saturating_add(1);
            }
            if now.saturating_sub(last_report) > REPORT_NS {
                last_report = now;
                self.publish(&shared);
            }
            // Frames handed over by a peer wake it too (handoff.rs): it
            // does not sleep with some waiting.
            if !self.setup.busy_poll
                && idle_rounds > SPIN_ROUNDS
                && self.setup.handoff.as_ref().is_none_or(|h| h.may_sleep())
            {
                self.report.view.sleeps += 1;
                // Counters are current whenever the worker sleeps.
                if now.saturating_sub(last_report) > 10_000_000 {
                    last_report = now;
                    self.publish(&shared);
                }
                // Frames held for a neighbour go again when the tables
                // change, which no descriptor signals: wake up soon to look.
                // A short sleep, not a spin: a real-time worker spinning
                // would keep its CPU from the threads that resolve the
                // neighbour (the kernel's receive, the control thread).
                let timeout = if self.holds_frames() {
                    HELD_SLEEP_MS
                } else {
                    SLEEP_MS
                };
                let _ = os::poll_readable(&fds, timeout);
                if let Some(h) = &self.setup.handoff {
                    h.woke();
                }
            }
        }
        self.publish(&shared);
    }
}

/// Offers the capture the frames of one processed batch that its point
/// takes: transmitted (forwarded and generated), dropped or punted.
fn capture_outcome(
    c: &mut crate::capture::WorkerCapture,
    out: &pipeline::BatchOutput,
    batch: &FrameBatch,
    rx: u16,
    now: u64,
) {
    match c.point {
        CapturePoint::Rx => {}
        CapturePoint::Tx => {
            for (p, idx) in out.tx_batches() {
                for &i in idx {
                    c.offer(p, now, batch.frame(usize::from(i)), Reason::None);
                }
            }
            for (p, _iface, bytes) in out.generated() {
                c.offer(p, now, bytes, Reason::None);
            }
        }
        CapturePoint::Drop | CapturePoint::Punt => {
            for (i, v) in out.verdicts().iter().enumerate() {
                let reason = match (c.point, *v) {
                    (CapturePoint::Drop, Verdict::Drop(d)) => Reason::Drop(d),
                    (CapturePoint::Punt, Verdict::Punt(p)) => Reason::Punt(p),
                    _ => continue,
                };
                c.offer(rx, now, batch.frame(i), reason);
            }
        }
    }
}

/// Marks the daemon failed if the worker thread unwinds.
struct PanicFlag(Arc<Shared>);

impl Drop for PanicFlag {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.worker_failed.store(true, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memport::{MemoryPort, MemoryWire};
    use rib::Router;
    use rib::state::RouterState;
    use std::sync::mpsc::{Receiver, sync_channel};
    use std::time::Instant;

    use crate::TEST_CONFIG as CFG;

    struct Rig {
        router: Router,
        shared: Arc<Shared>,
        worker: WorkerLoop,
        wires: Vec<Arc<Mutex<MemoryWire>>>,
        misses: Receiver<(u16, IpAddr)>,
    }

    fn rig() -> Rig {
        let cfg = config::Config::parse("t.toml", CFG).unwrap();
        let (router, tables) = Router::new(RouterState::new(cfg)).unwrap();
        let shared = Arc::new(Shared::new(Snapshot::new(tables), 1));
        let (p0, w0) = MemoryPort::new();
        let (p1, w1) = MemoryPort::new();
        let (tx, misses) = sync_channel(16);
        let worker = WorkerLoop::new(
            WorkerSetup {
                id: 0,
                core: None,
                busy_poll: false,
                ports: vec![Some(Box::new(p0)), Some(Box::new(p1))],
                port_names: vec!["d0".into(), "d1".into()],
                misses: tx,
                punt_to_kernel_copy: false,
                port_changes: None,
                flow_table: None,
                handoff: None,
            },
            &shared,
        );
        Rig {
            router,
            shared,
            worker,
            wires: vec![w0, w1],
            misses,
        }
    }

    /// A UDP datagram from the generator side to `dst`, arriving on d0.
    fn udp_to(dst: [u8; 4], ttl: u8) -> Vec<u8> {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 8], [2, 0, 0, 0, 0, 0x10])
            .ipv4([198, 18, 0, 108], dst, ttl)
            .udp(4000, 5000)
            .write(&mut f, b"worker loop test")
            .unwrap();
        f
    }

    fn sent(w: &Arc<Mutex<MemoryWire>>) -> Vec<Vec<u8>> {
        std::mem::take(&mut w.lock().unwrap().sent)
    }

    #[test]
    fn forwards_a_batch_to_its_egress_port_and_reports_counters() {
        let mut r = rig();
        for i in 0..3u8 {
            r.wires[0]
                .lock()
                .unwrap()
                .incoming
                .push_back(udp_to([203, 0, 113, 1 + i], 64));
        }
        assert_eq!(r.worker.round(&r.shared, 1_000), 3);
        let out = sent(&r.wires[1]);
        assert_eq!(out.len(), 3);
        assert!(sent(&r.wires[0]).is_empty());
        for (i, f) in out.iter().enumerate() {
            let p = etherparse::SlicedPacket::from_ethernet(f).unwrap();
            let Some(etherparse::LinkSlice::Ethernet2(eth)) = p.link else {
                panic!("not Ethernet");
            };
            assert_eq!(eth.destination(), [2, 0, 0, 0, 1, 8]);
            assert_eq!(eth.source(), [2, 0, 0, 0, 1, 0x10]);
            let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else {
                panic!("not IPv4");
            };
            assert_eq!(ip.header().ttl(), 63);
            assert_eq!(ip.header().destination(), [203, 0, 113, 1 + i as u8]);
        }
        r.worker.publish(&r.shared);
        let rep = r.shared.reports[0].lock().unwrap().clone();
        assert_eq!(rep.view.backend, "memory");
        assert_eq!(rep.counters.forwarded_ipv4, 3);
        assert_eq!(rep.view.busy_rounds, 1);
        assert_eq!(rep.view.ports.len(), 2);
        assert_eq!(
            (
                rep.view.ports[0].counters.rx_packets,
                rep.view.ports[1].counters.tx_packets
            ),
            (3, 3)
        );
    }

    #[test]
    fn a_frame_waits_for_its_neighbour_and_goes_after_the_table_change() {
        let mut r = rig();
        // 198.19.0.55 is on d1's subnet with no neighbour entry yet.
        r.wires[0]
            .lock()
            .unwrap()
            .incoming
            .push_back(udp_to([198, 19, 0, 55], 64));
        r.worker.round(&r.shared, 1_000);
        assert!(sent(&r.wires[1]).is_empty());
        assert!(r.worker.holds_frames());
        let (iface, ip) = r.misses.try_recv().expect("a neighbour miss reported");
        assert_eq!((iface, ip), (1, IpAddr::from([198, 19, 0, 55])));
        // Rounds without a table change keep holding it, asking once.
        r.worker.round(&r.shared, 2_000);
        assert!(r.worker.holds_frames() && r.misses.try_recv().is_err());
        // The neighbour is learnt: the held frame leaves in the next round.
        r.router
            .state
            .api_neighbours
            .insert(("d1".into(), ip), [2, 0, 0, 0, 1, 0x55]);
        r.router.refresh_neighbours(&r.shared.snapshot);
        r.worker.round(&r.shared, 3_000);
        let out = sent(&r.wires[1]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][..6], [2, 0, 0, 0, 1, 0x55]);
        assert!(!r.worker.holds_frames());
        r.worker.publish(&r.shared);
        let rep = r.shared.reports[0].lock().unwrap().clone();
        assert_eq!((rep.view.held, rep.view.held_expired), (1, 0));
    }

    #[test]
    fn a_running_worker_sleeps_while_it_holds_frames_and_sends_them_once_the_neighbour_is_learnt() {
        let Rig {
            mut router,
            shared,
            worker,
            wires,
            misses,
        } = rig();
        wires[0]
            .lock()
            .unwrap()
            .incoming
            .push_back(udp_to([198, 19, 0, 57], 64));
        let running = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || worker.run(shared))
        };
        let (_, ip) = misses
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("a neighbour miss reported");
        // Holding the frame, the worker sleeps between rounds (a spinning
        // real-time worker would starve the threads that resolve it).
        let wait_for = |what: &str, f: &dyn Fn() -> bool| {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !f() {
                assert!(std::time::Instant::now() < end, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        wait_for("no sleep while holding a frame", &|| {
            shared.reports[0].lock().unwrap().view.sleeps >= 5
        });
        assert!(sent(&wires[1]).is_empty());
        router
            .state
            .api_neighbours
            .insert(("d1".into(), ip), [2, 0, 0, 0, 1, 0x57]);
        router.refresh_neighbours(&shared.snapshot);
        wait_for("the held frame was not sent", &|| {
            !wires[1].lock().unwrap().sent.is_empty()
        });
        shared.stop.store(true, Ordering::Relaxed);
        running.join().unwrap();
        assert_eq!(sent(&wires[1])[0][..6], [2, 0, 0, 0, 1, 0x57]);
    }

    #[test]
    fn held_frames_expire_after_the_hold_time() {
        let mut r = rig();
        r.wires[0]
            .lock()
            .unwrap()
            .incoming
            .push_back(udp_to([198, 19, 0, 56], 64));
        r.worker.round(&r.shared, 1_000);
        assert!(r.worker.holds_frames());
        r.worker.round(&r.shared, 1_000 + HOLD_NS / 2);
        assert!(r.worker.holds_frames());
        r.worker.round(&r.shared, 2_000 + HOLD_NS);
        assert!(!r.worker.holds_frames());
        assert!(sent(&r.wires[1]).is_empty());
        r.worker.publish(&r.shared);
        assert_eq!(r.shared.reports[0].lock().unwrap().view.held_expired, 1);
    }

    /// Every table change retries a held frame; its deadline stays the one
    /// it got when first held.
    #[test]
    fn table_changes_do_not_extend_a_held_frames_deadline() {
        let mut r = rig();
        r.wires[0]
            .lock()
            .unwrap()
            .incoming
            .push_back(udp_to([198, 19, 0, 58], 64));
        r.worker.round(&r.shared, 1_000);
        assert!(r.worker.holds_frames());
        let step = HOLD_NS / 4;
        for k in 1..=4 {
            // A neighbour elsewhere changes: new tables, the frame retried
            // and held again.
            r.router.state.api_neighbours.insert(
                ("d0".into(), IpAddr::from([198, 18, 0, k as u8])),
                [2, 0, 0, 0, 0, k as u8],
            );
            r.router.refresh_neighbours(&r.shared.snapshot);
            r.worker.round(&r.shared, 1_000 + k * step);
        }
        r.worker.round(&r.shared, 2_000 + HOLD_NS);
        assert!(!r.worker.holds_frames(), "held past its deadline");
        assert!(sent(&r.wires[1]).is_empty());
        r.worker.publish(&r.shared);
        assert_eq!(r.shared.reports[0].lock().unwrap().view.held_expired, 1);
    }

    #[test]
    fn the_thread_stops_when_asked_and_publishes_its_last_counters() {
        let r = rig();
        r.wires[0]
            .lock()
            .unwrap()
            .incoming
            .push_back(udp_to([203, 0, 113, 9], 64));
        let shared = Arc::clone(&r.shared);
        let h = std::thread::spawn(move || r.worker.run(shared));
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while r.wires[1].lock().unwrap().sent.is_empty() {
            assert!(Instant::now() < deadline, "the worker forwarded nothing");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        r.shared.stop.store(true, Ordering::SeqCst);
        h.join().unwrap();
        assert!(!r.shared.worker_failed.load(Ordering::SeqCst));
        let rep = r.shared.reports[0].lock().unwrap().clone();
        assert_eq!(rep.counters.forwarded_ipv4, 1);
    }
}
