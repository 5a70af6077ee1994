//! The control loop and its request handler.
//!
//! The control thread follows the kernel over netlink, rebuilds and
//! publishes the tables (and compiles them into the XDP engine's maps),
//! asks the kernel to resolve the neighbours the workers missed, serves the
//! control socket without letting any client stall it, and sums the
//! workers' counters for `show`. See docs/router.md.
//!
//! - [`requests`]: the control socket's requests, answered;
//! - [`engine`]: the XDP engine kept in step with the tables;
//! - [`audit`]: FIB audits, run aside and streamed;
//! - [`metrics`]: every counter as OpenMetrics text (`show_metrics`, the
//!   scrape port).

mod audit;
mod engine;
mod metrics;
mod requests;
#[cfg(test)]
mod tests;

pub(crate) use audit::AuditJob;
pub(crate) use engine::{XdpEngine, set_local_addrs};
use requests::Handling;

use crate::IoBackend;
use crate::batching::ChangeBatcher;
use crate::ports::{Attach, PortChange};
use crate::worker::{FirewallReport, Shared, WorkerReport};
use anyhow::{Result, bail};
use control::kernel::{Delta, KernelLink};
use control::protocol::{HopSpec, Request, Response, reply};
use control::server::{ControlServer, Handler, Reply, StreamCursor, StreamStep};
use netio::sys::os;
use netio::xdp::XdpProgram;
use pipeline::{Counters, PuntReason};
use rib::Router;
use rib::snapshot::Snapshot;
use rib::state::RouterState;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};
use tracing::{error, info, warn};

/// How long a bond port's sockets may take to open again after its
/// members changed: the workers let go of the old ones within their
/// poll's sleep (100 ms).
const REOPEN_WAIT: Duration = Duration::from_millis(500);

/// Everything the daemon owns while it runs.
pub(crate) struct Daemon {
    pub(crate) config_path: PathBuf,
    pub(crate) router: Router,
    pub(crate) kernel: KernelLink,
    pub(crate) shared: Arc<Shared>,
    pub(crate) programs: Vec<XdpProgram>,
    /// The XDP engine, with `--engine xdp`.
    pub(crate) xdp: Option<XdpEngine>,
    pub(crate) backend: IoBackend,
    pub(crate) started: Instant,
    pub(crate) resolver: control::resolve::ResolveLimiter,
    /// How ports are attached and opened (again when an interface is
    /// re-created).
    pub(crate) attach: Attach,
    /// The kernel interface each port's sockets are bound to (None: gone).
    pub(crate) attached: Vec<Option<u32>>,
    /// Each started worker's inbox for new or closed ports.
    pub(crate) to_workers: Vec<Sender<PortChange>>,
    /// A FIB audit running on its own thread, or its result being sent.
    pub(crate) audit: Option<AuditJob>,
    /// Route changes applied (prefixes re-decided) and full rebuilds.
    pub(crate) route_updates: u64,
    pub(crate) rebuilds: u64,
    /// Batches of kernel changes applied, each published once.
    pub(crate) kernel_batches: u64,
    /// What `clear_runtime` saw: when, each worker's stages, the XDP
    /// program's counters; `show_runtime` reports the difference.
    pub(crate) runtime_base: RuntimeBase,
    /// What in the kernel's routing state fastfwd does not mirror, as last
    /// named (`KernelState::unmodelled`).
    pub(crate) unmodelled: Vec<String>,
    /// The links that kernel routes fastfwd leaves out leave through, as
    /// last named (`Router::foreign_links`).
    pub(crate) foreign_links: std::collections::BTreeSet<u32>,
    /// Ports whose MTU lets larger frames in than the engines carry, as
    /// last named (`rib::state::oversized_ports`).
    pub(crate) oversized: Vec<(String, u32)>,
    /// The ports the kernel aggregates or bridges, as last named
    /// (`rib::state::shared_ports`).
    pub(crate) shared_ports: Vec<rib::state::SharedPort>,
    /// Each bond port's devices' transmit drops when the daemon started
    /// (`ports::bond_tx_dropped`); `show_interfaces` reports the growth.
    pub(crate) bond_tx_base: std::collections::HashMap<String, u64>,
}

/// The readings `show_runtime` subtracts.
#[derive(Debug)]
pub(crate) struct RuntimeBase {
    pub(crate) at: Instant,
    pub(crate) workers: Vec<(usize, pipeline::RuntimeStats)>,
    pub(crate) xdp: Option<reply::XdpProgram>,
    /// The XDP program's (finished, forwarded, exceptions) per CPU.
    pub(crate) xdp_cpus: Vec<(u64, u64, u64)>,
}

impl Default for RuntimeBase {
    fn default() -> Self {
        RuntimeBase {
            at: Instant::now(),
            workers: Vec::new(),
            xdp: None,
            xdp_cpus: Vec::new(),
        }
    }
}

impl Daemon {
    pub(crate) fn control_loop(
        &mut self,
        server: &mut ControlServer,
        misses: &Receiver<(u16, IpAddr)>,
    ) -> Result<()> {
        // A burst of kernel changes (a routing daemon loading a table) is
        // applied in batches: see `batching`.
        let mut batcher = ChangeBatcher::default();
        let mut delta = Delta::default();
        while !os::stop_requested() {
            if self.shared.worker_failed.load(Ordering::SeqCst) {
                bail!("a worker thread panicked; stopping (XDP programs detached)");
            }
            let mut fds = server.poll_fds();
            fds.push(self.kernel.events_fd());
            // Awake when the changes waiting may be applied.
            let timeout = batcher
                .wait(Instant::now())
                .map_or(25, |w| w.as_millis().min(25) as i32 + 1);
            os::poll_readable(&fds, timeout)?;
            let (resyncs, resyncing) = (self.kernel.resyncs(), self.kernel.resyncing());
            let (errors, _) = self.kernel.errors();
            self.kernel
                .poll_events(&mut self.router.state.kernel, &mut delta)?;
            if let (n, Some(last)) = self.kernel.errors()
                && n != errors
            {
                warn!(errors = n, error = %last, "netlink error survived; re-reading the kernel's tables");
            }
            if self.kernel.resyncs() != resyncs {
                warn!(
                    resyncs = self.kernel.resyncs(),
                    "netlink broadcasts lost (the event queue overran); re-reading the kernel's tables"
                );
            } else if resyncing && !self.kernel.resyncing() {
                info!("kernel tables re-read; the mirror is complete again");
            }
            if !delta.is_empty() {
                let now = Instant::now();
                batcher.changed(now);
                let quiet = os::poll_readable(&[self.kernel.events_fd()], 0)? == 0;
                if batcher.due(now, quiet) {
                    self.apply(std::mem::take(&mut delta));
                    batcher.applied(Instant::now());
                }
            }
            // Neighbour misses: ask the kernel, within the limiter's caps
            // (per address and overall).
            let now = Instant::now();
            while let Ok((iface, ip)) = misses.try_recv() {
                let Some(ifindex) = self.iface_ifindex(iface) else {
                    continue;
                };
                if self.resolver.should_ask(ifindex, ip, now)
                    && let Err(e) = self.kernel.resolve(ifindex, ip)
                {
                    warn!(error = %e, %ip, ifindex, "neighbour resolution request");
                }
            }
            self.resolver.expire(now);
            // Whatever changed the tables above, the program has them too
            // before any request is answered.
            self.sync_xdp();
            server.serve_pending(&mut Handling(self));
        }
        Ok(())
    }

    /// Gives the XDP program the tables the workers read, if they changed
    /// (before a control-socket change is acknowledged), and sweeps its
    /// flow table now and then.
    fn sync_xdp(&mut self) {
        let ports: Vec<(String, Option<u32>)> = self
            .router
            .ports()
            .iter()
            .cloned()
            .zip(self.attached.iter().copied())
            .collect();
        if let Some(x) = self.xdp.as_mut() {
            x.watch_egress(&ports);
            x.sync(&self.shared.snapshot);
            x.sweep_flows(&self.shared.snapshot);
        }
    }

    fn iface_ifindex(&self, iface: u16) -> Option<u32> {
        // A VLAN interface with a kernel device resolves through it (the
        // kernel tags its ARP and ND); others through their port's link.
        if let Some(ifindex) = self.router.link_of_interface(iface) {
            return Some(ifindex);
        }
        let tables = self.shared.snapshot.load();
        let port = tables.interfaces().get(usize::from(iface))?.port;
        let name = self.router.ports().get(usize::from(port))?;
        self.router.state.kernel.ifindex_of(name)
    }

    /// Applies a burst of kernel changes: links and addresses rebuild
    /// everything, routes change only their prefixes, neighbours only the
    /// small tables around the same FIBs.
    fn apply(&mut self, delta: Delta) {
        self.kernel_batches += 1;
        if delta.policy || delta.other || !delta.links.is_empty() {
            self.name_unmodelled();
        }
        if let Some(x) = self.xdp.as_mut() {
            for (p, a) in self.attached.iter().enumerate() {
                if a.is_some_and(|i| delta.links.contains(&i))
                    && let Ok(p) = u16::try_from(p)
                {
                    x.egress.link_changed(p);
                }
            }
        }
        if !delta.links.is_empty() || delta.other {
            self.follow_ports();
            self.name_oversized_ports();
            self.name_shared_ports();
        }
        // A link or address change elsewhere in the namespace (another
        // veth, a VPN) leaves the tables alone.
        if delta.other || delta.links.iter().any(|&i| self.router.concerns_link(i)) {
            self.rebuild();
            return;
        }
        if !delta.routes.is_empty() {
            let prefixes: Vec<wire::Cidr> = delta.routes.into_iter().collect();
            self.route_updates += prefixes.len() as u64;
            self.router.update_routes(&prefixes, &self.shared.snapshot);
        } else if delta.neighbours {
            self.router.refresh_neighbours(&self.shared.snapshot);
        }
        if delta.policy {
            self.router.refresh_policy(&self.shared.snapshot);
        }
        self.name_foreign_links();
    }

    /// Says, at error level, each port whose MTU was raised past what the
    /// engines carry (start refuses it; a running router goes on, dropping
    /// and counting the larger frames as `rx_oversize`), and each back
    /// within it.
    fn name_oversized_ports(&mut self) {
        let now = rib::state::oversized_ports(&self.router.state, netio::MAX_FRAME);
        for (port, mtu) in now.iter().filter(|p| !self.oversized.contains(p)) {
            error!(
                port = %port,
                mtu,
                max_frame = netio::MAX_FRAME,
                "the kernel now takes larger frames on this port than fastfwd carries: they are dropped and counted as rx_oversize"
            );
        }
        for (port, _) in self.oversized.iter().filter(|p| !now.contains(p)) {
            info!(port = %port, "the port's MTU is within what fastfwd carries again");
        }
        self.oversized = now;
    }

    /// Says, at error level, each port that became a link aggregate or
    /// was enslaved to one or to a bridge (start refuses them): the kernel
    /// would send and receive its frames through that device, fastfwd goes
    /// on forwarding on the port itself. And each that is plain again.
    fn name_shared_ports(&mut self) {
        let now = rib::state::shared_ports(&self.router.state);
        for p in now.iter().filter(|p| !self.shared_ports.contains(p)) {
            error!(problem = %p, "the kernel now forwards this port's frames other than fastfwd does");
        }
        for p in self.shared_ports.iter() {
            if !now.iter().any(|n| n.port() == p.port()) {
                info!(port = p.port(), was = %p, "the port is fastfwd's alone again");
            }
        }
        self.shared_ports = now;
    }

    /// Says, at warn level, each link that kernel routes now leave through
    /// without fastfwd forwarding on it (their traffic takes a shorter
    /// route in fastfwd, or none), and each that no longer has any.
    fn name_foreign_links(&mut self) {
        let now = self.router.foreign_links();
        if now == self.foreign_links {
            return;
        }
        for line in self
            .router
            .foreign_routes_via(now.difference(&self.foreign_links))
        {
            warn!(routes = %line, "kernel routes fastfwd does not forward with");
        }
        for ifindex in self.foreign_links.difference(&now) {
            info!(
                ifindex,
                "no kernel route fastfwd leaves out leaves through this link any more"
            );
        }
        self.foreign_links = now;
    }

    /// Says, at error level, each piece of the kernel's routing state that
    /// has become one fastfwd does not mirror (it goes on forwarding with
    /// the main table: a running router is not stopped by an `ip rule`),
    /// and each that is gone.
    fn name_unmodelled(&mut self) {
        let now = self.router.state.kernel.unmodelled();
        for item in now.iter().filter(|i| !self.unmodelled.contains(i)) {
            error!(item = %item, "the kernel would now forward other than fastfwd: its routing state holds what fastfwd does not mirror");
        }
        for item in self.unmodelled.iter().filter(|i| !now.contains(i)) {
            info!(item = %item, "no longer in the kernel's routing state");
        }
        self.unmodelled = now;
    }

    /// Keeps every port's sockets on the kernel interface of its name: an
    /// interface that is gone has its sockets closed (the workers drop
    /// them); one that is back under a new index is attached again and its
    /// new sockets handed to the workers, without a restart. A failed
    /// attach is retried at the interface's next change.
    fn follow_ports(&mut self) {
        let names = self.router.ports().to_vec();
        for (p, name) in names.iter().enumerate() {
            let now = self.router.state.kernel.ifindex_of(name);
            if self.attached.get(p).copied().flatten() == now {
                if let Some(ifindex) = now {
                    self.follow_bond_members(p, name, ifindex);
                }
                continue;
            }
            if let Some(old) = self.attached.get_mut(p).and_then(Option::take) {
                warn!(port = %name, ifindex = old, "interface gone; its sockets are closed until it is back");
                self.hand_to_workers(p, (0..self.attach.workers).map(|_| None).collect());
            }
            let Some(ifindex) = now else {
                continue;
            };
            if let (Some(x), Ok(p)) = (self.xdp.as_mut(), u16::try_from(p)) {
                x.egress.link_changed(p);
            }
            match self
                .attach
                .open(p, name, ifindex, &mut self.programs, self.xdp.as_mut())
            {
                Ok(per_worker) => {
                    self.hand_to_workers(p, per_worker);
                    if let Some(a) = self.attached.get_mut(p) {
                        *a = Some(ifindex);
                    }
                    info!(port = %name, ifindex, "interface back: attached again");
                }
                Err(e) => error!(
                    port = %name,
                    ifindex,
                    error = format!("{e:#}"),
                    "cannot attach; trying again at the interface's next change"
                ),
            }
        }
    }

    /// Under the XDP engine a bond port's exceptions arrive on its
    /// members' queues: when a member joins or leaves, the port's sockets
    /// are opened again over the new members (the old ones closed first:
    /// a queue takes one socket, so the workers must have let go of them,
    /// which they do within their poll's sleep).
    fn follow_bond_members(&mut self, p: usize, name: &str, ifindex: u32) {
        let Some(x) = self.xdp.as_ref() else {
            return;
        };
        let Ok(port) = u16::try_from(p) else {
            return;
        };
        let kernel = &self.router.state.kernel;
        if kernel.links.get(&ifindex).and_then(|l| l.kind.as_deref()) != Some("bond") {
            return;
        }
        let mut members: Vec<u32> = kernel.members_of(ifindex);
        let mut had = x.engine.receivers(port).to_vec();
        members.sort_unstable();
        had.sort_unstable();
        if members == had || !x.egress.is_native(port) {
            return;
        }
        info!(port = %name, members = ?members, was = ?had, "bond members changed: opening the port's sockets again");
        self.hand_to_workers(p, (0..self.attach.workers).map(|_| None).collect());
        let deadline = Instant::now() + REOPEN_WAIT;
        loop {
            match self
                .attach
                .open(p, name, ifindex, &mut self.programs, self.xdp.as_mut())
            {
                Ok(per_worker) => {
                    self.hand_to_workers(p, per_worker);
                    return;
                }
                Err(e) if Instant::now() >= deadline => {
                    error!(
                        port = %name,
                        error = format!("{e:#}"),
                        "cannot open the bond's sockets again; its exceptions are counted as lost until its next change"
                    );
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Gives worker w `per_worker[w]` as its port `p`.
    fn hand_to_workers(&self, p: usize, per_worker: crate::ports::PerWorker) {
        for (w, port) in per_worker.into_iter().enumerate() {
            match self.to_workers.get(w) {
                Some(tx) => {
                    // A worker that is gone has stopped the daemon already.
                    let _ = tx.send((p, port));
                }
                None if port.is_some() => {
                    warn!(
                        worker = w,
                        port = p,
                        "worker not running: a queue of the port is not served"
                    );
                }
                None => {}
            }
        }
    }

    /// Rebuilds all tables from the current state and publishes them.
    fn rebuild(&mut self) -> Option<String> {
        self.rebuilds += 1;
        let old = self.router.local_addrs().to_vec();
        match self.router.rebuild_all(&self.shared.snapshot) {
            Ok(()) => {
                set_local_addrs(&mut self.programs, self.router.local_addrs(), &old);
                self.sync_xdp();
                None
            }
            Err(e) => {
                warn!(error = %e, "keeping the previous tables");
                Some(e.to_string())
            }
        }
    }

    fn reports(&self) -> Vec<WorkerReport> {
        let mut reps: Vec<WorkerReport> = self
            .shared
            .reports
            .iter()
            .filter_map(|m| {
                // Without the trace records (`trace show` reads them).
                m.lock().ok().map(|mut g| {
                    let trace = std::mem::take(&mut g.trace);
                    let r = g.clone();
                    g.trace = trace;
                    r
                })
            })
            .filter(|r| !r.view.backend.is_empty())
            .collect();
        // The XDP program counts what it finishes itself, on every CPU.
        if let Some(x) = &self.xdp {
            let tables = self.shared.snapshot.load();
            let n = tables.interfaces().len();
            match x.engine.counters(n) {
                Ok(mut c) => {
                    let mut program = crate::replay::xdp_program(&c);
                    match (&x.faults_counted, x.tx_faults()) {
                        (Ok(()), Some(f)) => {
                            // What the kernel dropped after the redirect
                            // was counted as output by the program: it is
                            // not (the port's untagged interface, else its
                            // first, carries the difference).
                            for (p, fault) in f.ports.iter().enumerate() {
                                let on_port = |i: &&pipeline::Interface| usize::from(i.port) == p;
                                let ifaces = tables.interfaces();
                                let target = ifaces
                                    .iter()
                                    .position(|i| on_port(&i) && i.vlan == pipeline::Vlan::Untagged)
                                    .or_else(|| ifaces.iter().position(|i| on_port(&i)));
                                if let Some(ic) =
                                    target.and_then(|t| c.counters.interfaces.get_mut(t))
                                {
                                    ic.tx_packets = ic.tx_packets.saturating_sub(fault.dropped);
                                }
                            }
                            program.redirects_dropped = f.ports.iter().map(|p| p.dropped).sum();
                            program.exceptions_ring_full = f.exceptions.dropped;
                        }
                        (Err(why), _) => program.redirect_drops_uncounted = Some(why.clone()),
                        (Ok(()), None) => {
                            program.redirect_drops_uncounted =
                                Some("reading the tracepoints' counters failed".into())
                        }
                    }
                    reps.push(WorkerReport {
                        view: reply::Worker {
                            id: reps.len(),
                            backend: "xdp-program".into(),
                            xdp: Some(program),
                            ..reply::Worker::default()
                        },
                        counters: c.counters,
                        ..WorkerReport::default()
                    })
                }
                Err(e) => warn!(error = %e, "reading the XDP program's counters"),
            }
        }
        reps
    }
}
