//! The control loop and its request handler.
//!
//! The control thread follows the kernel over netlink, rebuilds and
//! publishes the tables (and compiles them into the XDP engine's maps),
//! asks the kernel to resolve the neighbours the workers missed, serves the
//! control socket without letting any client stall it, and sums the
//! workers' counters for `show`. See docs/router.md.

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

/// The daemon answering its control socket: every request at once, but a
/// whole `show route` streamed a part per round (a full table is never
/// built whole in memory and other clients are served in between).
struct Handling<'a>(&'a mut Daemon);

/// Routes per part of a streamed `show route`.
const ROUTES_PER_PART: usize = 2048;

impl Handler for Handling<'_> {
    fn handle(&mut self, req: Request) -> Reply {
        match req {
            Request::ShowRoute { prefix: None } => Reply::Stream(StreamCursor::Routes {
                after: None,
                sent: 0,
            }),
            Request::FibAudit => match self.0.start_audit() {
                Ok(()) => Reply::Stream(StreamCursor::Audit { sent: 0 }),
                Err(e) => Reply::Now(Response::err(e)),
            },
            req => Reply::Now(self.0.handle(req)),
        }
    }

    fn abandoned(&mut self, cursor: &StreamCursor) {
        if let StreamCursor::Audit { .. } = cursor
            && self.0.audit.take().is_some()
        {
            info!("FIB audit abandoned by its client; another may start");
        }
    }

    fn more(&mut self, cursor: &mut StreamCursor, out: &mut Vec<u8>) -> StreamStep {
        match cursor {
            StreamCursor::Routes { after, sent } => {
                let part = self.0.router.route_views_after(*after, ROUTES_PER_PART);
                for r in &part {
                    if serde_json::to_writer(&mut *out, r).is_ok() {
                        out.push(b'\n');
                        *sent += 1;
                    }
                }
                if let Some(last) = part.last().and_then(|r| r.prefix.parse().ok()) {
                    *after = Some(last);
                }
                if part.len() == ROUTES_PER_PART {
                    StreamStep::More
                } else {
                    StreamStep::Done
                }
            }
            StreamCursor::Audit { sent } => self.0.audit_more(sent, out),
        }
    }
}

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

/// A FIB audit: running, then its lines being streamed.
pub(crate) struct AuditJob {
    result: Receiver<control::audit::AuditResult>,
    lines: Option<std::vec::IntoIter<reply::AuditLine>>,
}

/// Audit lines per part of the stream.
const AUDIT_LINES_PER_PART: usize = 1024;

/// The XDP engine and the tables generation it holds.
pub(crate) struct XdpEngine {
    pub(crate) engine: xdp_engine::Engine,
    /// (snapshot, IPv4 FIB, IPv6 FIB) generations last compiled.
    pub(crate) synced: Option<(u64, u64, u64)>,
    /// After a failed publish: when to try again.
    pub(crate) retry_at: Option<Instant>,
    /// The fast path's flow table, swept of dead flows every
    /// [`FLOW_SWEEP`], and when that last happened.
    pub(crate) sweeper: Option<(xdp_engine::FlowTable, Instant)>,
    /// Why the program last handed every transit packet to the pipeline
    /// instead of evaluating the firewall (logged when it changes).
    pub(crate) except_reason: Option<&'static str>,
    /// The ports that take no frames redirected from XDP (the pipeline
    /// transmits for them).
    pub(crate) egress: crate::egress::EgressWatch,
    /// The kernel's netdev family, where it has one (xdp-features).
    pub(crate) netdev: Option<control::netdev::NetdevLink>,
    /// Whether the tracepoints count the redirected frames the kernel
    /// drops (`Err`: why not).
    pub(crate) faults_counted: std::result::Result<(), String>,
}

/// How often the XDP engine's flow table is swept of expired flows (the
/// program ignores them; sweeping frees their room).
const FLOW_SWEEP: Duration = Duration::from_secs(10);

/// How long after a failed publish (a map write refused) the tables are
/// compiled and written again; meanwhile the pipeline takes every packet.
const PUBLISH_RETRY: Duration = Duration::from_secs(1);

impl XdpEngine {
    /// Compiles the current tables into the program's maps if they changed
    /// since the last time. Tables that do not fit (or a failed map write)
    /// leave the program handing every transit packet to the pipeline,
    /// which has them: slower, never wrong.
    pub(crate) fn sync(&mut self, snapshot: &Snapshot) {
        let tables = snapshot.load();
        let (s4, s6) = (tables.fib4.snapshot(), tables.fib6.snapshot());
        let key = (snapshot.generation(), s4.generation(), s6.generation());
        if self.synced == Some(key) || self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.synced = Some(key);
        let punted = self.egress.punted();
        let r = compile_image(&tables, s4.trie(), s6.trie(), &self.engine.capacity())
            .map_err(xdp_engine::EngineError::from)
            .and_then(|mut image| {
                image.punt_tx(&punted);
                let reason = image.except_reason;
                self.engine.publish(image).map(|()| reason)
            });
        if let Ok(reason) = r
            && reason != self.except_reason
        {
            // Still correct (the pipeline routes and filters them), but
            // every transit packet takes the slow path: say so once, why.
            match reason {
                Some(why) => {
                    warn!(
                        reason = why,
                        "the XDP program hands every transit packet to the pipeline, which routes and filters it"
                    )
                }
                None if self.except_reason.is_some() => {
                    info!("the XDP program routes and filters transit packets again")
                }
                None => {}
            }
            self.except_reason = reason;
        }
        self.retry_at = None;
        if let Err(e) = r {
            warn!(error = %e, "the XDP program hands every transit packet to the pipeline until its tables are written");
            // A map write may fail once (memory) and not again: tried anew
            // (tables that do not fit wait for the next change).
            if matches!(e, xdp_engine::EngineError::Bpf { .. }) {
                self.synced = None;
                self.retry_at = Some(Instant::now() + PUBLISH_RETRY);
            }
            if let Err(e) = self.engine.force_except_all() {
                error!(error = %e, "cannot make the XDP program hand on every packet");
            }
        }
    }
}

impl XdpEngine {
    /// Follows which ports take frames redirected from XDP (see `egress`):
    /// `ports` are each port's name and current ifindex. When the set of
    /// ports the pipeline transmits for changes, the tables are compiled
    /// again at the next `sync`.
    pub(crate) fn watch_egress(&mut self, ports: &[(String, Option<u32>)]) {
        let engine = &self.engine;
        let counted = self.faults_counted.is_ok();
        let netdev = &mut self.netdev;
        let changed = self.egress.check(
            Instant::now(),
            || {
                if !counted {
                    return None;
                }
                match engine.tx_faults() {
                    Ok(f) => Some(f.ports.iter().map(|p| p.refused).collect()),
                    Err(e) => {
                        warn!(error = %e, "reading the XDP program's dropped redirects");
                        None
                    }
                }
            },
            ports,
            |ifindex| {
                let n = netdev.as_mut()?;
                match n.xdp_features(ifindex) {
                    Ok(f) => f.map(control::netdev::XdpFeatures::takes_redirects),
                    Err(e) => {
                        warn!(error = %e, ifindex, "asking the kernel for a port's xdp-features");
                        None
                    }
                }
            },
        );
        if changed {
            self.synced = None;
        }
    }

    /// The redirected frames the kernel dropped, when they are counted.
    pub(crate) fn tx_faults(&self) -> Option<xdp_engine::TxFaults> {
        self.faults_counted.as_ref().ok()?;
        self.engine.tx_faults().ok()
    }
}

impl XdpEngine {
    /// Deletes expired flows and flows of an older epoch from the fast
    /// path's table, at most every [`FLOW_SWEEP`] (off the workers: the
    /// control thread walks the table with map syscalls).
    fn sweep_flows(&mut self, snapshot: &Snapshot) {
        let Some(epoch) = snapshot
            .load()
            .acl
            .as_ref()
            .filter(|a| a.firewall().stateful())
            .map(firewall::PipelineFirewall::epoch)
        else {
            return;
        };
        if self.sweeper.is_none() {
            match self.engine.flow_table() {
                Ok(t) => self.sweeper = Some((t, Instant::now())),
                Err(e) => {
                    warn!(error = %e, "the XDP engine's flow table cannot be swept");
                    return;
                }
            }
        }
        if let Some((table, last)) = self.sweeper.as_mut()
            && last.elapsed() >= FLOW_SWEEP
        {
            *last = Instant::now();
            let (left, gone) = table.sweep(os::monotonic_ns(), epoch);
            tracing::debug!(left, gone, "XDP engine flow table swept");
        }
    }
}

impl XdpEngine {
    /// The XDP layer of a FIB audit of the current tables: the program's
    /// maps, read back on the audit thread, against a fresh compile of the
    /// snapshot they were published from, and looked up at every installed
    /// prefix as the fib layer is.
    pub(crate) fn audit(&mut self, snapshot: &Snapshot) -> control::audit::EngineAudit {
        use control::audit::EngineChecked;
        self.sync(snapshot);
        let skipped = |why: String| -> control::audit::EngineAudit {
            Box::new(move |_, _, _| EngineChecked {
                engine: "xdp".into(),
                skipped: Some(why),
                ..EngineChecked::default()
            })
        };
        if self.engine.except_all() {
            return skipped(
                "the program hands every transit packet to the pipeline (firewall rules it cannot evaluate, or tables that do not fit its maps)".into(),
            );
        }
        let reader = match self.engine.map_reader() {
            Ok(Some(r)) => r,
            Ok(None) => return skipped("nothing published yet".into()),
            Err(e) => return skipped(format!("opening the maps: {e}")),
        };
        let tables = snapshot.load();
        let (s4, s6) = (
            Arc::clone(&*tables.fib4.snapshot()),
            Arc::clone(&*tables.fib6.snapshot()),
        );
        let cap = self.engine.capacity();
        Box::new(move |installed, tables, out| {
            let mut checked = EngineChecked {
                engine: "xdp".into(),
                generation: reader.generation(),
                ..EngineChecked::default()
            };
            let back = match reader.read() {
                Ok(Some(b)) => b,
                Ok(None) => {
                    checked.skipped = Some("the tables changed while the maps were read".into());
                    return checked;
                }
                Err(e) => {
                    checked.skipped = Some(format!("reading the maps: {e}"));
                    return checked;
                }
            };
            match compile_image(tables, s4.trie(), s6.trie(), &cap) {
                Ok(fresh) => {
                    let (diffs, n) = xdp_engine::audit::compare(&back, &fresh);
                    checked.elements = n;
                    out.extend(diffs.into_iter().map(|d| control::audit::Difference {
                        layer: "xdp".into(),
                        item: format!("map {}", d.map),
                        kind: "different".into(),
                        want: format!("{} elements as the tables compile", d.want),
                        have: format!("{} differ, the first at {}", d.differing, d.first),
                    }));
                }
                Err(e) => checked.skipped = Some(format!("compiling the tables: {e}")),
            }
            checked.lookups = control::audit::compare_lookups(
                "xdp",
                installed,
                tables,
                |a| back.fib4.lookup4(a),
                |a| back.fib6.lookup6(a),
                out,
            );
            checked
        })
    }
}

/// One snapshot of the tables (`fib4`/`fib6`: its tries) as the XDP
/// program's map content.
fn compile_image(
    tables: &rib::RouterTables,
    fib4: &fib::poptrie::Poptrie<u32>,
    fib6: &fib::poptrie::Poptrie<u128>,
    cap: &xdp_engine::FibCapacity,
) -> Result<xdp_engine::Image, xdp_engine::CompileError> {
    xdp_engine::Image::compile(&tables.datapath(), fib4, fib6, tables.acl.as_ref(), cap)
}

/// Keeps every program's local-address map equal to all of the router's
/// addresses: a packet to d1's address arriving on d0 is for the host too.
pub(crate) fn set_local_addrs(
    programs: &mut [XdpProgram],
    new: &[(u16, IpAddr)],
    old: &[(u16, IpAddr)],
) {
    for &(_, addr) in old {
        if !new.iter().any(|&(_, a)| a == addr) {
            for p in programs.iter_mut() {
                let _ = p.remove_local(addr);
            }
        }
    }
    for &(_, addr) in new {
        for p in programs.iter_mut() {
            if let Err(e) = p.add_local(addr) {
                warn!(error = %e, "local address map");
            }
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
        let engine = if self.xdp.is_some() {
            crate::Engine::Xdp
        } else {
            crate::Engine::User
        };
        let bonds = crate::start::bonds_forwarded(engine, self.backend);
        let now = rib::state::shared_ports(&self.router.state, bonds);
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

    /// Starts a FIB audit on its own thread over copies of the state, the
    /// installed routes and the live tables (one at a time).
    fn start_audit(&mut self) -> Result<(), String> {
        if self.audit.is_some() {
            return Err("a FIB audit is already running".into());
        }
        let engine = self.xdp.as_mut().map(|x| x.audit(&self.shared.snapshot));
        let rx = control::audit::start(
            self.router.state.clone(),
            self.router.installed(),
            Arc::clone(&self.shared.snapshot.load()),
            engine,
            self.kernel.background_cpus(),
        );
        self.audit = Some(AuditJob {
            result: rx,
            lines: None,
        });
        Ok(())
    }

    /// The next part of the running audit's answer: its differences, one
    /// per line, then `{"summary": {...}}`; an error ends it with
    /// `{"error": ...}`.
    fn audit_more(&mut self, sent: &mut u64, out: &mut Vec<u8>) -> StreamStep {
        let Some(job) = self.audit.as_mut() else {
            return StreamStep::Done;
        };
        if job.lines.is_none() {
            let values: Vec<reply::AuditLine> = match job.result.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => return StreamStep::Pending,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => vec![reply::AuditLine::Error {
                    error: "the audit thread ended without a result".into(),
                }],
                Ok(Err(e)) => vec![reply::AuditLine::Error {
                    error: e.to_string(),
                }],
                Ok(Ok((diffs, checked))) => {
                    if !diffs.is_empty() {
                        warn!(differences = diffs.len(), "FIB audit found differences");
                    }
                    let differences = diffs.len();
                    diffs
                        .into_iter()
                        .map(reply::AuditLine::Difference)
                        .chain(std::iter::once(reply::AuditLine::Summary {
                            summary: reply::AuditSummary {
                                differences,
                                checked,
                            },
                        }))
                        .collect()
                }
            };
            job.lines = Some(values.into_iter());
        }
        let Some(lines) = job.lines.as_mut() else {
            return StreamStep::Done;
        };
        for v in lines.by_ref().take(AUDIT_LINES_PER_PART) {
            if serde_json::to_writer(&mut *out, &v).is_ok() {
                out.push(b'\n');
                *sent += 1;
            }
        }
        if lines.len() == 0 {
            self.audit = None;
            return StreamStep::Done;
        }
        StreamStep::More
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

    pub(crate) fn handle(&mut self, req: Request) -> Response {
        match req {
            Request::ShowInterfaces => Response::ok(self.show_interfaces()),
            Request::ShowWorkers => Response::ok(
                self.reports()
                    .iter()
                    .map(|r| r.view.clone())
                    .collect::<Vec<_>>(),
            ),
            Request::ShowDrops => Response::ok(self.show_drops()),
            Request::ShowFirewall => Response::ok(self.show_firewall()),
            Request::ShowMetrics => Response::ok(self.metrics_text()),
            Request::ShowRuntime => Response::ok(self.show_runtime()),
            Request::ClearRuntime => {
                let reps = self.reports();
                self.runtime_base = RuntimeBase {
                    at: Instant::now(),
                    workers: reps
                        .iter()
                        .filter(|r| r.view.xdp.is_none())
                        .map(|r| (r.view.id, r.runtime))
                        .collect(),
                    xdp: reps.iter().find_map(|r| r.view.xdp.clone()),
                    xdp_cpus: self.xdp_per_cpu(),
                };
                Response::ok(reply::Cleared { cleared: true })
            }
            Request::TraceAdd {
                count,
                filter,
                worker,
            } => match self.trace_add(count, filter, worker) {
                Ok(r) => Response::ok(r),
                Err(e) => Response::err(e),
            },
            Request::TraceShow => Response::ok(self.trace_show()),
            Request::CaptureStart {
                point,
                count,
                interface,
                filter,
            } => match self.capture_start(&point, count, interface, filter) {
                Ok(r) => Response::ok(r),
                Err(e) => Response::err(e),
            },
            Request::CaptureRead => Response::ok(self.capture_read()),
            Request::CaptureStop => {
                self.set_capture(None);
                Response::ok(reply::Cleared { cleared: true })
            }
            Request::TraceClear => {
                self.set_trace(crate::worker::TraceRequest::default());
                Response::ok(reply::Cleared { cleared: true })
            }
            // Streamed by the socket's handler (`Handling`); here only when
            // called directly.
            Request::FibAudit => Response::err("a FIB audit is answered as a stream"),
            Request::ShowRoute { prefix } => match prefix {
                None => Response::ok(self.router.route_views()),
                Some(p) => match self.match_route(&p) {
                    Ok(r) => Response::ok(r),
                    Err(e) => Response::err(e),
                },
            },
            Request::ShowNeighbors => Response::ok(self.router.neighbours()),
            Request::RouteAdd { prefix, next_hops } => {
                let hops: Vec<_> = next_hops.iter().map(HopSpec::request).collect();
                let r = self
                    .router
                    .api_route_add(&prefix, &hops, &self.shared.snapshot);
                self.reply_after_change(r.map(drop), prefix.parse().ok())
            }
            Request::RouteDel { prefix } => {
                let r = self.router.api_route_del(&prefix);
                self.reply_after_change(r.map(drop), prefix.parse().ok())
            }
            Request::NeighborAdd { dev, ip, mac } => {
                let r = self.router.api_neighbour_add(&dev, &ip, &mac);
                self.reply_after_change(r, None)
            }
            Request::NeighborDel { dev, ip } => {
                let r = self.router.api_neighbour_del(&dev, &ip);
                self.reply_after_change(r, None)
            }
            Request::ConfigCheck { path } => {
                let named = path.is_some();
                let path = path
                    .map(PathBuf::from)
                    .unwrap_or_else(|| self.config_path.clone());
                match self.candidate(&path, named) {
                    Ok(_) => Response::ok(reply::ConfigFile {
                        file: path.display().to_string(),
                        valid: Some(true),
                        applied: None,
                    }),
                    Err(e) => Response::err(e),
                }
            }
            Request::ConfigReload { path } => {
                let named = path.is_some();
                let path = path
                    .map(PathBuf::from)
                    .unwrap_or_else(|| self.config_path.clone());
                match self.candidate(&path, named) {
                    Ok(next) => {
                        self.router.state = next;
                        self.config_path = path.clone();
                        match self.rebuild() {
                            None => Response::ok(reply::ConfigFile {
                                file: path.display().to_string(),
                                valid: None,
                                applied: Some(true),
                            }),
                            Some(e) => Response::err(e),
                        }
                    }
                    Err(e) => Response::err(e),
                }
            }
        }
    }

    /// A state with the config at `path`, validated and built but not
    /// applied. A path the client `named` (and its rules file) must lie in
    /// the running configuration's directory.
    fn candidate(&self, path: &std::path::Path, named: bool) -> Result<RouterState, String> {
        let cfg = if named {
            let root = self
                .config_path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| std::path::Path::new("."));
            config::Config::load_within(path, root)
        } else {
            config::Config::load(path)
        }
        .map_err(|e| e.to_string())?;
        if cfg.ports() != self.router.state.config.ports() {
            return Err(format!(
                "{}: the set of interfaces changed ({} -> {}); restart fastfwd to attach to different interfaces",
                path.display(),
                self.router.state.config.ports().join(","),
                cfg.ports().join(",")
            ));
        }
        let mut next = self.router.state.clone();
        next.config = cfg;
        next.build().map_err(|e| e.to_string())?;
        Ok(next)
    }

    /// Publishes a control-socket change: the routes of `route`'s prefix,
    /// or (None) the neighbours.
    fn reply_after_change(&mut self, r: Result<(), String>, route: Option<wire::Cidr>) -> Response {
        match r {
            Ok(()) => {
                match route {
                    Some(p) => self.router.update_routes(&[p], &self.shared.snapshot),
                    None => self.router.refresh_neighbours(&self.shared.snapshot),
                }
                self.sync_xdp();
                Response::ok(reply::Applied { applied: true })
            }
            Err(e) => Response::err(e),
        }
    }

    /// The route a prefix or address selects (longest match).
    fn match_route(&self, q: &str) -> Result<Vec<rib::state::RouteView>, String> {
        let want: wire::Cidr = q.parse().map_err(|e| format!("{q}: {e}"))?;
        Ok(self.router.longest_match(want).into_iter().collect())
    }

    /// Arms a packet trace on the workers (replacing one in progress).
    fn trace_add(
        &mut self,
        count: usize,
        filter: Option<String>,
        worker: Option<usize>,
    ) -> Result<reply::TraceArmed, String> {
        if count == 0 || count > pipeline::trace::MAX_TRACE {
            return Err(format!(
                "trace add {count}: between 1 and {} packets",
                pipeline::trace::MAX_TRACE
            ));
        }
        let compiled = match &filter {
            Some(f) => Some(wire::filter::Filter::parse(f).map_err(|e| e.to_string())?),
            None => None,
        };
        let running: Vec<usize> = self.reports().iter().map(|r| r.view.id).collect();
        let workers: Vec<usize> = match worker {
            Some(w) if running.contains(&w) => vec![w],
            Some(w) => return Err(format!("no worker {w} (workers: {running:?})")),
            None => running,
        };
        self.set_trace(crate::worker::TraceRequest {
            count,
            filter: compiled,
            worker,
        });
        Ok(reply::TraceArmed {
            workers,
            count,
            filter,
        })
    }

    fn set_trace(&mut self, req: crate::worker::TraceRequest) {
        if let Ok(mut g) = self.shared.trace.lock() {
            *g = req;
        }
        self.shared.trace_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Starts copying frames at `point` (replacing a capture in progress
    /// and whatever it had not delivered).
    fn capture_start(
        &mut self,
        point: &str,
        count: usize,
        interface: Option<String>,
        filter: Option<String>,
    ) -> Result<reply::CaptureStarted, String> {
        use crate::capture::{CapturePoint, CaptureRequest, MAX_CAPTURE};
        let point = CapturePoint::parse(point)
            .ok_or_else(|| format!("capture point {point:?}: rx, tx, drop or punt"))?;
        if count == 0 || count > MAX_CAPTURE {
            return Err(format!(
                "capture {count}: between 1 and {MAX_CAPTURE} frames"
            ));
        }
        let ports = self.router.ports().to_vec();
        let port = match &interface {
            Some(name) => Some(
                ports
                    .iter()
                    .position(|p| p == name)
                    .ok_or_else(|| format!("no port {name:?} (ports: {})", ports.join(", ")))?
                    as u16,
            ),
            None => None,
        };
        let filter = match &filter {
            Some(f) => Some(wire::filter::Filter::parse(f).map_err(|e| e.to_string())?),
            None => None,
        };
        // The slots' room: what the client reads every 100 ms at most.
        let room = count.min(crate::capture::ROUND_FRAMES * 16);
        for slot in &self.shared.captures {
            if let Ok(mut g) = slot.lock() {
                *g = crate::capture::CaptureBuffer::with_room(room);
            }
        }
        self.set_capture(Some(CaptureRequest {
            point,
            count,
            port,
            filter,
        }));
        Ok(reply::CaptureStarted {
            workers: self.reports().iter().map(|r| r.view.id).collect(),
            ports,
        })
    }

    fn set_capture(&mut self, req: Option<crate::capture::CaptureRequest>) {
        if let Ok(mut g) = self.shared.capture.lock() {
            *g = req;
        }
        self.shared
            .capture_generation
            .fetch_add(1, Ordering::AcqRel);
    }

    /// Takes what the workers captured since the last read, with
    /// wall-clock times.
    fn capture_read(&self) -> reply::Captured {
        // The workers' round clock is CLOCK_MONOTONIC.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let offset = wall.saturating_sub(os::monotonic_ns());
        let ports = self.router.ports();
        let mut out = reply::Captured {
            frames: Vec::new(),
            lost: 0,
            remaining: 0,
        };
        for slot in &self.shared.captures {
            let Ok(mut g) = slot.lock() else { continue };
            for (f, data) in g.frames() {
                let mut hex = String::with_capacity(2 * data.len());
                for b in data {
                    let _ = write!(hex, "{b:02x}");
                }
                out.frames.push(reply::CapturedFrame {
                    port: f.port,
                    interface: ports.get(usize::from(f.port)).cloned().unwrap_or_default(),
                    time_ns: f.time_ns + offset,
                    data: hex,
                    reason: f.reason.name().map(str::to_string),
                });
            }
            out.lost += g.lost;
            g.clear();
        }
        // A worker that has not taken the request yet will copy all of it.
        let generation = self.shared.capture_generation.load(Ordering::Acquire);
        let asked = self
            .shared
            .capture
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(|r| r.count))
            .unwrap_or(0);
        out.remaining = self
            .reports()
            .iter()
            .map(|r| {
                if r.capture_generation == generation {
                    r.capture_remaining
                } else {
                    asked
                }
            })
            .sum();
        out
    }

    /// The packets the workers traced for the current `trace add`, in
    /// words (with the XDP engine: the packets the program handed over).
    fn trace_show(&self) -> reply::Trace {
        let generation = self.shared.trace_generation.load(Ordering::Acquire);
        let tables = self.shared.snapshot.load();
        let fw = self
            .router
            .state
            .config
            .firewall
            .as_ref()
            .map(|f| &*f.compiled);
        let route_of = |a: IpAddr| {
            let host = match a {
                IpAddr::V4(x) => wire::Cidr::V4(wire::Ipv4Cidr::new(u32::from(x), 32)?),
                IpAddr::V6(x) => wire::Cidr::V6(wire::Ipv6Cidr::new(u128::from(x), 128)?),
            };
            let v = self.router.longest_match(host)?;
            Some(format!("{} {}", v.prefix, v.next_hops.join(", ")))
        };
        let mut packets = Vec::new();
        let mut remaining = 0;
        for slot in &self.shared.reports {
            let Ok(g) = slot.lock() else { continue };
            if g.trace_generation != generation {
                continue;
            }
            remaining += g.trace_remaining;
            for r in &g.trace {
                packets.push(crate::trace::describe(
                    g.view.id,
                    r,
                    &tables,
                    self.router.ports(),
                    &route_of,
                    fw,
                ));
            }
        }
        reply::Trace { remaining, packets }
    }

    /// The running rule set's counters summed over the workers that use it
    /// (a worker still on an older rule set after a reload is left out
    /// until it picks up the new one).
    fn show_firewall(&self) -> reply::Firewall {
        let Some(fw) = &self.router.state.config.firewall else {
            return reply::Firewall {
                firewall: None,
                conntrack: None,
                rejects_rate_limited: 0,
                fast_path: None,
            };
        };
        let reps = self.reports();
        let current: Vec<&FirewallReport> = reps
            .iter()
            .filter_map(|r| r.firewall.as_ref())
            .filter(|f| Arc::ptr_eq(&f.rules, &fw.compiled))
            .collect();
        // The XDP program counts the rules it evaluates itself.
        let in_program = self
            .xdp
            .as_ref()
            .and_then(|x| x.engine.firewall_counters(&fw.compiled).ok().flatten());
        let summary = fw.compiled.summary(
            current
                .iter()
                .map(|f| &f.counters)
                .chain(in_program.as_ref()),
        );
        let mut ct: Option<firewall::ConntrackStats> = None;
        for c in current.iter().filter_map(|f| f.conntrack.as_ref()) {
            ct.get_or_insert_with(Default::default).accumulate(c);
        }
        let fast_path = match &self.xdp {
            Some(x) if fw.compiled.stateful() => {
                let program = x.engine.counters(0).map(|c| c.ct_established).unwrap_or(0);
                let sum = |f: fn(&firewall::WorkerStats) -> u64| {
                    current.iter().map(|r| f(&r.stats)).sum::<u64>()
                };
                let worker_packets = sum(|s| s.fast_path_established);
                Some(reply::ConntrackFastPath {
                    handoffs: sum(|s| s.fast_path_handoffs),
                    refused: sum(|s| s.fast_path_refused),
                    program_packets: program.saturating_sub(worker_packets),
                    worker_packets,
                })
            }
            _ => None,
        };
        reply::Firewall {
            firewall: Some(summary),
            conntrack: ct,
            rejects_rate_limited: current.iter().map(|f| f.stats.rejects_rate_limited).sum(),
            fast_path,
        }
    }

    /// Every counter as OpenMetrics text (see [`crate::metrics`]).
    fn metrics_text(&self) -> String {
        let mut m = crate::metrics::Scrape::new();
        let reps = self.reports();
        let total = Counters::sum(reps.iter().map(|r| &r.counters));
        let tables = self.shared.snapshot.load();
        for (i, iface) in tables.interfaces().iter().enumerate() {
            let c = total.interfaces.get(i).copied().unwrap_or_default();
            let l = [("interface", iface.name.as_str())];
            m.counter(
                "interface_rx_packets",
                "Frames received on the interface.",
                &l,
                c.rx_packets,
            );
            m.counter(
                "interface_rx_bytes",
                "Bytes received on the interface.",
                &l,
                c.rx_bytes,
            );
            m.counter(
                "interface_rx_dropped",
                "Frames received and dropped (any reason).",
                &l,
                c.rx_dropped,
            );
            m.counter(
                "interface_tx_packets",
                "Frames sent out of the interface.",
                &l,
                c.tx_packets,
            );
            m.counter(
                "interface_tx_bytes",
                "Bytes sent out of the interface.",
                &l,
                c.tx_bytes,
            );
        }
        if let Some(x) = &self.xdp {
            let faults = x.tx_faults();
            for (p, name) in self.router.ports().iter().enumerate() {
                let l = [("port", name.as_str())];
                if let Some(f) = faults.as_ref().and_then(|f| f.ports.get(p)) {
                    m.counter(
                        "xdp_port_redirects_dropped",
                        "Frames the kernel dropped after the XDP program redirected them into the port (refused, or its ring full).",
                        &l,
                        f.dropped,
                    );
                }
                let punted = u16::try_from(p).is_ok_and(|p| x.egress.reason(p).is_some());
                m.gauge(
                    "xdp_port_pipeline_egress",
                    "1 while the port takes no frames redirected from XDP and the pipeline transmits its traffic.",
                    &l,
                    u64::from(punted),
                );
            }
        }
        for r in pipeline::DropReason::ALL {
            m.counter(
                "drops",
                "Frames dropped, by reason (show drops).",
                &[("reason", r.name())],
                total.drop_count(*r),
            );
        }
        for r in PuntReason::ALL {
            m.counter(
                "punts",
                "Frames handed to the host, by reason.",
                &[("reason", r.name())],
                total.punt_count(*r),
            );
        }
        for c in pipeline::IcmpSuppressed::ALL {
            m.counter(
                "icmp_suppressed",
                "ICMP errors not sent, by cause.",
                &[("cause", c.name())],
                total.icmp_suppressed_by[c.index()],
            );
        }
        m.counter(
            "icmp_sent",
            "ICMP and ICMPv6 errors sent.",
            &[],
            total.icmp_sent,
        );
        m.counter(
            "icmp_rate_limited",
            "ICMP errors over the rate limit.",
            &[],
            total.icmp_rate_limited,
        );
        m.counter(
            "forwarded",
            "Packets forwarded, by family.",
            &[("family", "ipv4")],
            total.forwarded_ipv4,
        );
        m.counter(
            "forwarded",
            "Packets forwarded, by family.",
            &[("family", "ipv6")],
            total.forwarded_ipv6,
        );
        for r in &reps {
            let w = r.view.id.to_string();
            let engine = if r.view.backend == "xdp-program" {
                "xdp-program"
            } else {
                "pipeline"
            };
            let l = [("worker", w.as_str()), ("engine", engine)];
            m.counter(
                "worker_rx_frames",
                "Frames a worker (or the XDP program) processed.",
                &l,
                r.counters.rx_frames,
            );
            m.counter(
                "worker_busy_rounds",
                "Worker loop rounds that found frames.",
                &l,
                r.view.busy_rounds,
            );
            m.counter(
                "worker_sleeps",
                "Times a worker slept in poll(2).",
                &l,
                r.view.sleeps,
            );
            m.counter(
                "worker_held_expired",
                "Frames dropped after waiting 1 s for their neighbour.",
                &l,
                r.view.held_expired,
            );
            for p in &r.view.ports {
                let l = [("worker", w.as_str()), ("port", p.port.as_str())];
                m.counter(
                    "port_rx_ring_full",
                    "Frames the kernel dropped before fastfwd saw them.",
                    &l,
                    p.counters.rx_dropped,
                );
                m.counter(
                    "port_tx_ring_full",
                    "Frames that found the TX ring full.",
                    &l,
                    p.counters.tx_dropped,
                );
                m.counter(
                    "port_rx_oversize",
                    "Frames larger than a frame buffer, dropped on receive.",
                    &l,
                    p.counters.rx_oversize,
                );
            }
            if let Some(x) = &r.view.xdp {
                for (cause, n) in &x.exceptions {
                    m.counter(
                        "xdp_exceptions",
                        "Packets the XDP program handed to the pipeline, by cause.",
                        &[("cause", cause.as_str())],
                        *n,
                    );
                }
                m.counter(
                    "xdp_exceptions_ring_full",
                    "Exceptions the kernel dropped: the AF_XDP socket's ring was full.",
                    &[],
                    x.exceptions_ring_full,
                );
            }
        }
        let fw = self.show_firewall();
        for chain in fw.firewall.iter().flat_map(|f| &f.chains) {
            let name = chain.chain.name();
            for rule in &chain.rules {
                let line = rule.line.to_string();
                let l = [("chain", name), ("line", line.as_str())];
                m.counter(
                    "firewall_rule_packets",
                    "Packets that matched a firewall rule (by its config line).",
                    &l,
                    rule.packets,
                );
                m.counter(
                    "firewall_rule_bytes",
                    "Bytes that matched a firewall rule.",
                    &l,
                    rule.bytes,
                );
            }
        }
        if let Some(ct) = &fw.conntrack {
            m.gauge(
                "conntrack_entries",
                "Connection-table slots in use.",
                &[],
                ct.occupancy,
            );
            m.gauge(
                "conntrack_capacity",
                "Connection-table slots.",
                &[],
                ct.capacity,
            );
            m.counter("conntrack_inserts", "Connections added.", &[], ct.inserts);
            m.counter(
                "conntrack_evictions",
                "Connections evicted to make room.",
                &[],
                ct.evictions,
            );
        }
        let (v4, v6) = self.router.route_counts();
        m.gauge(
            "fib_routes",
            "Routes installed, by family.",
            &[("family", "ipv4")],
            v4 as u64,
        );
        m.gauge(
            "fib_routes",
            "Routes installed, by family.",
            &[("family", "ipv6")],
            v6 as u64,
        );
        let kernel = &self.router.state.kernel;
        for (family, v6) in [("ipv4", false), ("ipv6", true)] {
            m.gauge(
                "kernel_rules",
                "Policy rules (ip rule) mirrored from the kernel, by family.",
                &[("family", family)],
                kernel.rules.iter().filter(|r| r.v6 == v6).count() as u64,
            );
            m.gauge(
                "kernel_table_routes",
                "Routes mirrored from the kernel's tables other than main and local, by family.",
                &[("family", family)],
                kernel
                    .tables
                    .values()
                    .flat_map(|t| t.keys())
                    .filter(|(p, _)| matches!(p, wire::Cidr::V6(_)) == v6)
                    .count() as u64,
            );
        }
        m.counter(
            "route_updates",
            "Route prefixes re-decided after kernel or control-socket changes.",
            &[],
            self.route_updates,
        );
        m.counter(
            "kernel_change_batches",
            "Batches of kernel changes applied to the tables, each published to the workers once.",
            &[],
            self.kernel_batches,
        );
        m.counter(
            "table_rebuilds",
            "Full rebuilds of the tables (links, addresses, config).",
            &[],
            self.rebuilds,
        );
        m.gauge(
            "kernel_unmodelled",
            "Pieces of the kernel's routing state fastfwd does not mirror (policy rules, VRFs, source-specific, TOS or encapsulated routes): while nonzero the kernel would forward some packets other than fastfwd does. Named in the log and by fib audit.",
            &[],
            self.unmodelled.len() as u64,
        );
        m.counter(
            "kernel_resyncs",
            "Full re-reads of the kernel's tables after lost netlink broadcasts.",
            &[],
            self.kernel.resyncs(),
        );
        m.counter(
            "kernel_netlink_errors",
            "Netlink errors the daemon survived (event socket reads, its drop counter, re-reads that could not start or failed), each answered with a re-read of the kernel's tables.",
            &[],
            self.kernel.errors().0,
        );
        m.counter(
            "kernel_netlink_rejected",
            "Netlink messages dropped: broadcasts of a kind fastfwd follows that it could not decode, and datagrams not sent by the kernel.",
            &[],
            self.kernel.rejected(),
        );
        m.counter(
            "neighbour_requests",
            "Neighbour resolutions asked of the kernel (ARP / ND requests it sends).",
            &[],
            self.resolver.requested,
        );
        m.counter(
            "neighbour_requests_capped",
            "Neighbour resolutions not asked, over the cap.",
            &[],
            self.resolver.capped,
        );
        m.encode()
    }

    fn show_interfaces(&self) -> reply::Interfaces {
        let reps = self.reports();
        let total = Counters::sum(reps.iter().map(|r| &r.counters));
        let tables = self.shared.snapshot.load();
        let faults = self.xdp.as_ref().and_then(XdpEngine::tx_faults);
        let interfaces = tables
            .interfaces()
            .iter()
            .enumerate()
            .map(|(i, iface)| {
                let c = total.interfaces.get(i).copied().unwrap_or_default();
                let port = self
                    .router
                    .ports()
                    .get(usize::from(iface.port))
                    .cloned()
                    .unwrap_or_default();
                let of_port = |f: fn(&netio::PortStats) -> u64| -> u64 {
                    reps.iter()
                        .flat_map(|r| r.view.ports.iter())
                        .filter(|p| p.port == port && iface.vlan == pipeline::Vlan::Untagged)
                        .map(|p| f(&p.counters))
                        .sum()
                };
                let untagged = iface.vlan == pipeline::Vlan::Untagged;
                let redirects_dropped = faults
                    .as_ref()
                    .and_then(|f| f.ports.get(usize::from(iface.port)))
                    .filter(|_| untagged)
                    .map_or(0, |f| f.dropped);
                let tx_drops = of_port(|c| c.tx_dropped) + redirects_dropped;
                let rx_ring_drops = of_port(|c| c.rx_dropped + c.rx_oversize);
                let pipeline_egress = self.xdp.as_ref().and_then(|x| x.egress.reason(iface.port));
                reply::Interface {
                    name: iface.name.clone(),
                    port,
                    mac: iface.mac.to_string(),
                    mtu: iface.mtu,
                    rx_packets: c.rx_packets,
                    rx_bytes: c.rx_bytes,
                    rx_errors: c.rx_dropped,
                    tx_packets: c.tx_packets,
                    tx_bytes: c.tx_bytes,
                    tx_drops,
                    rx_ring_drops,
                    pipeline_egress,
                }
            })
            .collect();
        reply::Interfaces {
            engine: if self.xdp.is_some() { "xdp" } else { "user" }.into(),
            xdp: reps.iter().find_map(|r| r.view.xdp.clone()),
            backend: match self.backend {
                IoBackend::AfXdp => "afxdp",
                IoBackend::Packet => "packet",
            }
            .into(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            interfaces,
        }
    }

    fn show_runtime(&self) -> reply::Runtime {
        let reps = self.reports();
        let base = &self.runtime_base;
        let workers = reps
            .iter()
            .filter(|r| r.view.xdp.is_none())
            .map(|r| {
                let since = base
                    .workers
                    .iter()
                    .find(|(id, _)| *id == r.view.id)
                    .map_or(r.runtime, |(_, b)| r.runtime.since(b));
                reply::WorkerRuntime {
                    id: r.view.id,
                    core: r.view.core,
                    backend: r.view.backend.clone(),
                    stages: pipeline::Stage::ALL
                        .iter()
                        .map(|st| {
                            let c = since.stages[st.index()];
                            let per =
                                |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
                            reply::StageRuntime {
                                stage: st.name().into(),
                                calls: c.calls,
                                packets: c.packets,
                                timed_packets: c.timed_packets,
                                ns: c.ns,
                                vectors_per_call: per(c.packets, c.calls),
                                ns_per_packet: c.ns_per_packet(),
                            }
                        })
                        .collect(),
                }
            })
            .collect();
        let xdp = reps.iter().find_map(|r| r.view.xdp.clone()).map(|now| {
            let program = match &base.xdp {
                None => now,
                Some(b) => reply::XdpProgram {
                    finished: now.finished.saturating_sub(b.finished),
                    forwarded: now.forwarded.saturating_sub(b.forwarded),
                    to_host: now.to_host.saturating_sub(b.to_host),
                    exceptions: now
                        .exceptions
                        .iter()
                        .map(|(k, v)| {
                            let was = b.exceptions.get(k).copied().unwrap_or(0);
                            (k.clone(), v.saturating_sub(was))
                        })
                        .collect(),
                    exceptions_lost: now.exceptions_lost.saturating_sub(b.exceptions_lost),
                    tx_redirect_failed: now.tx_redirect_failed.saturating_sub(b.tx_redirect_failed),
                    ct_established: now.ct_established.saturating_sub(b.ct_established),
                    meta_failed: now.meta_failed.saturating_sub(b.meta_failed),
                    redirects_dropped: now.redirects_dropped.saturating_sub(b.redirects_dropped),
                    exceptions_ring_full: now
                        .exceptions_ring_full
                        .saturating_sub(b.exceptions_ring_full),
                    redirect_drops_uncounted: now.redirect_drops_uncounted.clone(),
                },
            };
            let exceptions: u64 = program.exceptions.values().sum();
            let seen = program.finished + exceptions;
            let ratio = |e: u64, seen: u64| {
                if seen == 0 {
                    0.0
                } else {
                    e as f64 / seen as f64
                }
            };
            let per_cpu = self
                .xdp_per_cpu()
                .iter()
                .enumerate()
                .map(|(cpu, &(f, fw, e))| {
                    let (bf, bfw, be) = base.xdp_cpus.get(cpu).copied().unwrap_or_default();
                    let (f, e) = (f.saturating_sub(bf), e.saturating_sub(be));
                    reply::XdpCpu {
                        cpu,
                        finished: f,
                        forwarded: fw.saturating_sub(bfw),
                        exceptions: e,
                        exception_ratio: ratio(e, f + e),
                    }
                })
                .collect();
            reply::XdpRuntime {
                per_cpu,
                exception_ratio: if seen == 0 {
                    0.0
                } else {
                    exceptions as f64 / seen as f64
                },
                exceptions,
                program,
            }
        });
        reply::Runtime {
            seconds: base.at.elapsed().as_secs_f64(),
            workers,
            xdp,
        }
    }

    /// The XDP program's (finished, forwarded, exceptions) per CPU, as
    /// counted since it was loaded; empty without the XDP engine.
    fn xdp_per_cpu(&self) -> Vec<(u64, u64, u64)> {
        let Some(x) = &self.xdp else {
            return Vec::new();
        };
        x.engine
            .counters_per_cpu(0)
            .map(|v| {
                v.iter()
                    .map(|c| {
                        (
                            c.counters.rx_frames,
                            c.counters.forwarded_ipv4 + c.counters.forwarded_ipv6,
                            c.total_exceptions(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn show_drops(&self) -> reply::Drops {
        let reps = self.reports();
        let total = Counters::sum(reps.iter().map(|r| &r.counters));
        let ports = || reps.iter().flat_map(|r| r.view.ports.iter());
        reply::Drops {
            drops: pipeline::DropReason::ALL
                .iter()
                .map(|r| reply::ReasonCount {
                    reason: r.name().into(),
                    count: total.drop_count(*r),
                    description: r.description().into(),
                })
                .collect(),
            punts: PuntReason::ALL
                .iter()
                .map(|r| reply::ReasonCount {
                    reason: r.name().into(),
                    count: total.punt_count(*r),
                    description: r.description().into(),
                })
                .collect(),
            icmp_suppressed: pipeline::IcmpSuppressed::ALL
                .iter()
                .map(|c| reply::CauseCount {
                    cause: c.name().into(),
                    count: total.icmp_suppressed_by[c.index()],
                    description: c.description().into(),
                })
                .collect(),
            icmp_rate_limited: total.icmp_rate_limited,
            held_expired: reps.iter().map(|r| r.view.held_expired).sum(),
            punts_discarded: reps.iter().map(|r| r.view.punts_discarded).sum(),
            neighbour_requests: self.resolver.requested,
            neighbour_requests_capped: self.resolver.capped,
            tx_ring_full: ports().map(|p| p.counters.tx_dropped).sum(),
            rx_ring_full: ports().map(|p| p.counters.rx_dropped).sum(),
            rx_oversize: ports().map(|p| p.counters.rx_oversize).sum(),
            xdp_redirects_dropped: reps
                .iter()
                .filter_map(|r| r.view.xdp.as_ref())
                .map(|x| x.redirects_dropped)
                .sum(),
            xdp_exceptions_ring_full: reps
                .iter()
                .filter_map(|r| r.view.xdp.as_ref())
                .map(|x| x.exceptions_ring_full)
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::Shared;

    use crate::TEST_CONFIG as CFG;

    /// A daemon over the config alone: no workers, no ports, a netlink
    /// socket that is never read.
    fn daemon(dir: &std::path::Path) -> Daemon {
        let path = dir.join("router.toml");
        std::fs::write(&path, CFG).unwrap();
        let cfg = config::Config::load(&path).unwrap();
        let (router, tables) = Router::new(RouterState::new(cfg)).unwrap();
        Daemon {
            config_path: path,
            router,
            kernel: KernelLink::open().unwrap(),
            shared: Arc::new(Shared::new(Snapshot::new(tables), 0)),
            programs: Vec::new(),
            xdp: None,
            backend: IoBackend::AfXdp,
            started: Instant::now(),
            resolver: Default::default(),
            attach: Attach {
                engine: crate::Engine::User,
                backend: IoBackend::AfXdp,
                native: None,
                workers: 0,
                xsk: Default::default(),
            },
            attached: vec![None, None],
            to_workers: Vec::new(),
            audit: None,
            route_updates: 0,
            rebuilds: 0,
            kernel_batches: 0,
            runtime_base: RuntimeBase::default(),
            unmodelled: Vec::new(),
            foreign_links: Default::default(),
            oversized: Vec::new(),
            shared_ports: Vec::new(),
        }
    }

    /// Every reply type, as the daemon sends it, against its golden file
    /// in `crates/router/tests/golden/` (`FASTFWD_BLESS=1` rewrites them):
    /// a change to a reply's shape shows up as a diff there, and the
    /// client's types must read each file back.
    #[test]
    fn every_reply_matches_its_golden_file() {
        let dir = tmp("golden");
        let mut d = daemon(&dir);
        let path = dir.join("router.toml");
        std::fs::write(
            &path,
            format!("{CFG}\n[firewall]\nrules = \"\"\"\nchain forward {{\n    udp dport 9 counter drop\n    accept\n}}\n\"\"\"\n"),
        )
        .unwrap();
        let cfg = config::Config::load(&path).unwrap();
        let (router, tables) = Router::new(RouterState::new(cfg)).unwrap();
        d.router = router;
        d.shared = Arc::new(Shared::new(Snapshot::new(tables), 1));
        // One worker's report with counts in it.
        {
            let mut r = d.shared.reports[0].lock().unwrap();
            r.view.id = 0;
            r.view.core = 1;
            r.view.backend = "afxdp".into();
            r.view.busy_rounds = 7;
            r.view.ports = vec![crate::worker::PortCounters {
                port: "d0".into(),
                counters: netio::PortStats {
                    rx_packets: 5,
                    rx_bytes: 320,
                    tx_packets: 4,
                    tx_bytes: 256,
                    ..Default::default()
                },
            }];
            r.counters = Counters::new(2);
            r.counters.interfaces[0].rx_packets = 5;
            r.counters.interfaces[0].rx_bytes = 320;
            r.counters.interfaces[1].tx_packets = 4;
            r.counters.interfaces[1].tx_bytes = 256;
            r.counters.drops[pipeline::DropReason::TtlExpired.index()] = 3;
            r.runtime.stages[pipeline::Stage::Input.index()] = pipeline::StageCounters {
                calls: 2,
                packets: 70,
                timed_packets: 64,
                ns: 1280,
            };
            // A packet the worker traced for the trace `trace_add` arms
            // below (generation 1): forwarded to 203.0.113.9 by rule 0.
            let mut head = [0u8; pipeline::trace::TRACE_HEAD];
            let frame = [
                &[2, 0, 0, 0, 0, 0x10, 2, 0, 0, 0, 0, 8, 8, 0][..],
                &[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 108],
                &[203, 0, 113, 9, 0x9c, 0x40, 0x23, 0x28, 0, 8, 0, 0],
            ]
            .concat();
            head[..frame.len()].copy_from_slice(&frame);
            r.trace = vec![pipeline::TraceRecord {
                seq: 0,
                port: 0,
                len: 60,
                head,
                head_len: frame.len() as u16,
                in_if: Some(0),
                destination: Some("203.0.113.9".parse().unwrap()),
                next_hop_set: Some(Some(1)),
                hop: Some((1, Some("198.19.0.108".parse().unwrap()))),
                acl: Some((pipeline::AclAction::Accept, Some(1))),
                decided_by: pipeline::Stage::Forward,
                verdict: pipeline::Verdict::Forward {
                    interface: 1,
                    port: 1,
                },
            }];
            r.trace_generation = 1;
            r.trace_remaining = 4;
        }
        // A frame a capture at `drop` copied (read before any capture
        // starts, which would empty the slot).
        {
            let mut c = d.shared.captures[0].lock().unwrap();
            *c = crate::capture::CaptureBuffer::with_room(4);
            c.push(
                0,
                0,
                &[2, 0, 0, 0, 0, 0x10, 2, 0, 0, 0, 0, 8, 0x88, 0xcc],
                crate::capture::Reason::Drop(pipeline::DropReason::UnknownEthertype),
            );
        }
        let hop = |via: &str| HopSpec {
            via: Some(via.into()),
            dev: None,
        };
        let cases = [
            ("show_interfaces", Request::ShowInterfaces),
            ("show_workers", Request::ShowWorkers),
            ("show_drops", Request::ShowDrops),
            ("show_firewall", Request::ShowFirewall),
            ("show_route", Request::ShowRoute { prefix: None }),
            (
                "show_route_match",
                Request::ShowRoute {
                    prefix: Some("203.0.113.9".into()),
                },
            ),
            ("show_neighbors", Request::ShowNeighbors),
            (
                "route_add",
                Request::RouteAdd {
                    prefix: "198.51.100.0/24".into(),
                    next_hops: vec![hop("198.19.0.108")],
                },
            ),
            (
                "route_del",
                Request::RouteDel {
                    prefix: "198.51.100.0/24".into(),
                },
            ),
            (
                "route_del_error",
                Request::RouteDel {
                    prefix: "198.51.100.0/24".into(),
                },
            ),
            (
                "neighbor_add",
                Request::NeighborAdd {
                    dev: "d0".into(),
                    ip: "198.18.0.99".into(),
                    mac: "02:00:00:00:00:99".into(),
                },
            ),
            (
                "neighbor_del",
                Request::NeighborDel {
                    dev: "d0".into(),
                    ip: "198.18.0.99".into(),
                },
            ),
            ("config_check", Request::ConfigCheck { path: None }),
            ("config_reload", Request::ConfigReload { path: None }),
            ("show_metrics", Request::ShowMetrics),
            ("show_runtime", Request::ShowRuntime),
            ("clear_runtime", Request::ClearRuntime),
            (
                "trace_add",
                Request::TraceAdd {
                    count: 5,
                    filter: Some("udp and dst port 9000".into()),
                    worker: None,
                },
            ),
            ("trace_show", Request::TraceShow),
            ("trace_clear", Request::TraceClear),
            ("capture_read", Request::CaptureRead),
            (
                "capture_start",
                Request::CaptureStart {
                    point: "drop".into(),
                    count: 10,
                    interface: Some("d0".into()),
                    filter: Some("not ip".into()),
                },
            ),
            ("capture_stop", Request::CaptureStop),
            (
                "capture_start_error",
                Request::CaptureStart {
                    point: "rx".into(),
                    count: 10,
                    interface: Some("d9".into()),
                    filter: None,
                },
            ),
            (
                "trace_add_error",
                Request::TraceAdd {
                    count: 5,
                    filter: Some("udp and".into()),
                    worker: None,
                },
            ),
        ];
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        let bless = std::env::var_os("FASTFWD_BLESS").is_some();
        let mut wrong = Vec::new();
        // Every request has a golden case: this match has no catch-all, so
        // a new request does not compile until it is given a name here,
        // and the assertion below fails until a case of that name exists.
        fn golden_name(r: &Request) -> &'static str {
            match r {
                Request::ShowInterfaces => "show_interfaces",
                Request::ShowWorkers => "show_workers",
                Request::ShowDrops => "show_drops",
                Request::ShowFirewall => "show_firewall",
                Request::ShowRoute { .. } => "show_route",
                Request::ShowNeighbors => "show_neighbors",
                Request::RouteAdd { .. } => "route_add",
                Request::RouteDel { .. } => "route_del",
                Request::NeighborAdd { .. } => "neighbor_add",
                Request::NeighborDel { .. } => "neighbor_del",
                Request::ConfigCheck { .. } => "config_check",
                Request::ConfigReload { .. } => "config_reload",
                Request::ShowMetrics => "show_metrics",
                Request::ShowRuntime => "show_runtime",
                Request::ClearRuntime => "clear_runtime",
                Request::TraceAdd { .. } => "trace_add",
                Request::TraceShow => "trace_show",
                Request::TraceClear => "trace_clear",
                Request::CaptureStart { .. } => "capture_start",
                Request::CaptureRead => "capture_read",
                Request::CaptureStop => "capture_stop",
                // A stream (its lines are `reply::AuditLine`s), checked
                // below from a given audit result: a real audit's lines
                // depend on the machine's kernel.
                Request::FibAudit => "fib_audit",
            }
        }
        for (name, req) in &cases {
            let want = golden_name(req);
            assert!(name.starts_with(want), "case {name} for a {want} request");
        }
        const ALL: [&str; 22] = [
            "show_interfaces",
            "show_workers",
            "show_drops",
            "show_firewall",
            "show_route",
            "show_neighbors",
            "route_add",
            "route_del",
            "neighbor_add",
            "neighbor_del",
            "config_check",
            "config_reload",
            "show_metrics",
            "show_runtime",
            "clear_runtime",
            "trace_add",
            "trace_show",
            "trace_clear",
            "capture_start",
            "capture_read",
            "capture_stop",
            "fib_audit",
        ];
        for want in ALL.iter().filter(|w| **w != "fib_audit") {
            assert!(
                cases.iter().any(|(n, _)| n == want),
                "no golden case for {want}"
            );
        }
        for (name, req) in cases {
            let resp = d.handle(req.clone());
            assert_eq!(resp.version, control::protocol::PROTOCOL_VERSION);
            let mut v = serde_json::to_value(&resp).unwrap();
            // The metrics text's samples come in no fixed order within a
            // family: sorted here so the file compares.
            if let Some(serde_json::Value::String(text)) = v.pointer_mut("/result")
                && name == "show_metrics"
            {
                let mut lines: Vec<&str> = text.lines().collect();
                lines.sort_unstable();
                *text = lines.join("\n");
            }
            // What varies from run to run: the uptime and the temporary
            // directory.
            for t in ["/result/uptime_s", "/result/seconds"] {
                if let Some(u) = v.pointer_mut(t) {
                    *u = serde_json::json!(0.0);
                }
            }
            if let Some(u) = v.pointer_mut("/result/frames/0/time_ns") {
                *u = serde_json::json!(0);
            }
            let text = serde_json::to_string_pretty(&v)
                .unwrap()
                .replace(&dir.display().to_string(), "DIR")
                + "\n";
            let file = golden.join(format!("{name}.json"));
            if bless {
                std::fs::create_dir_all(&golden).unwrap();
                std::fs::write(&file, &text).unwrap();
            } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
                wrong.push(format!("{name}:\n{text}"));
            }
            // The client's types read the reply back.
            let result = resp.result.clone().unwrap_or_default();
            let read = match &req {
                Request::ShowInterfaces => {
                    serde_json::from_value::<reply::Interfaces>(result).map(drop)
                }
                Request::ShowWorkers => {
                    serde_json::from_value::<Vec<reply::Worker>>(result).map(drop)
                }
                Request::ShowDrops => serde_json::from_value::<reply::Drops>(result).map(drop),
                Request::ShowFirewall => {
                    serde_json::from_value::<reply::Firewall>(result).map(drop)
                }
                Request::ShowRoute { .. } => {
                    serde_json::from_value::<Vec<reply::RouteView>>(result).map(drop)
                }
                Request::ShowNeighbors => {
                    serde_json::from_value::<Vec<reply::NeighbourView>>(result).map(drop)
                }
                Request::ConfigCheck { .. } | Request::ConfigReload { .. } => {
                    serde_json::from_value::<reply::ConfigFile>(result).map(drop)
                }
                Request::ShowMetrics => serde_json::from_value::<String>(result).map(drop),
                Request::ShowRuntime => serde_json::from_value::<reply::Runtime>(result).map(drop),
                Request::ClearRuntime | Request::TraceClear => {
                    serde_json::from_value::<reply::Cleared>(result).map(drop)
                }
                Request::TraceAdd { .. } if resp.ok => {
                    serde_json::from_value::<reply::TraceArmed>(result).map(drop)
                }
                Request::TraceShow => serde_json::from_value::<reply::Trace>(result).map(drop),
                Request::CaptureStart { .. } if resp.ok => {
                    serde_json::from_value::<reply::CaptureStarted>(result).map(drop)
                }
                Request::CaptureRead => serde_json::from_value::<reply::Captured>(result).map(drop),
                Request::CaptureStop => serde_json::from_value::<reply::Cleared>(result).map(drop),
                _ if !resp.ok => Ok(()),
                _ => serde_json::from_value::<reply::Applied>(result).map(drop),
            };
            assert!(read.is_ok(), "{name}: {read:?}");
        }
        // The audit's stream as `audit_more` writes it, one array element
        // per line: a result with a difference in two layers (a real
        // audit's lines depend on the machine's kernel).
        {
            use control::audit::{Checked, Difference, EngineChecked};
            let diff = |layer: &str, item: &str, kind: &str, want: &str, have: &str| Difference {
                layer: layer.into(),
                item: item.into(),
                kind: kind.into(),
                want: want.into(),
                have: have.into(),
            };
            let (tx, rx) = std::sync::mpsc::channel();
            tx.send(Ok((
                vec![
                    diff(
                        "kernel",
                        "198.51.100.0/24 metric 0",
                        "missing",
                        "via 198.19.0.108 dev d1",
                        "",
                    ),
                    diff(
                        "xdp",
                        "198.51.100.7",
                        "different",
                        "via 198.19.0.108 dev d1",
                        "via 198.18.0.1 dev d0",
                    ),
                ],
                Checked {
                    kernel_routes: 3,
                    routes: 9,
                    lookups: 18,
                    engine: Some(EngineChecked {
                        engine: "xdp".into(),
                        generation: 4,
                        elements: 100,
                        lookups: 18,
                        skipped: None,
                    }),
                },
            )))
            .unwrap();
            d.audit = Some(AuditJob {
                result: rx,
                lines: None,
            });
            let (mut sent, mut out) = (0u64, Vec::new());
            let mut parts = 0;
            loop {
                parts += 1;
                match d.audit_more(&mut sent, &mut out) {
                    StreamStep::More => assert!(parts < 100),
                    StreamStep::Done => break,
                    StreamStep::Pending => panic!("a sent result is pending"),
                }
            }
            let lines: Vec<serde_json::Value> = out
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).unwrap())
                .collect();
            assert_eq!(sent as usize, lines.len());
            assert_eq!(lines.len(), 3, "two differences and the summary");
            for l in &lines {
                let back = serde_json::from_value::<reply::AuditLine>(l.clone());
                assert!(back.is_ok(), "{l}: {back:?}");
            }
            assert!(matches!(
                serde_json::from_value::<reply::AuditLine>(lines[2].clone()),
                Ok(reply::AuditLine::Summary { .. })
            ));
            let text = serde_json::to_string_pretty(&lines).unwrap() + "\n";
            let file = golden.join("fib_audit.json");
            if bless {
                std::fs::write(&file, &text).unwrap();
            } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
                wrong.push(format!("fib_audit:\n{text}"));
            }
        }
        std::fs::remove_dir_all(&dir).ok();
        // docs/control-protocol.md names every field of every reply.
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/control-protocol.md"),
        )
        .unwrap();
        fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        out.insert(k.clone());
                        keys(v, out);
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
                _ => {}
            }
        }
        let mut all = std::collections::BTreeSet::new();
        for e in std::fs::read_dir(&golden).unwrap() {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            keys(&serde_json::from_str(&text).unwrap(), &mut all);
        }
        let undocumented: Vec<&String> = all
            .iter()
            .filter(|k| !doc.contains(&format!("\"{k}\"")))
            .collect();
        assert!(
            undocumented.is_empty(),
            "fields of the replies that docs/control-protocol.md does not name: {undocumented:?}"
        );
        assert!(
            wrong.is_empty(),
            "replies differ from crates/router/tests/golden (FASTFWD_BLESS=1 rewrites them after a deliberate change):\n{}",
            wrong.join("\n")
        );
    }

    fn hop(via: Option<&str>, dev: Option<&str>) -> HopSpec {
        HopSpec {
            via: via.map(str::to_owned),
            dev: dev.map(str::to_owned),
        }
    }

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("fastfwd-daemon-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn route_add_refuses_more_next_hops_than_the_ecmp_width() {
        let dir = tmp("wide");
        let mut d = daemon(&dir);
        let gws: Vec<String> = (0..=pipeline::MAX_ECMP)
            .map(|i| format!("198.19.0.{}", 20 + i))
            .collect();
        let r = d.handle(Request::RouteAdd {
            prefix: "198.51.100.0/24".into(),
            next_hops: gws.iter().map(|g| hop(Some(g), None)).collect(),
        });
        assert!(!r.ok);
        assert!(
            r.error.as_deref().is_some_and(|e| e.contains("ECMP width")),
            "{:?}",
            r.error
        );
        assert!(d.router.state.api_routes.is_empty());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn route_add_is_published_before_the_answer_and_del_removes_it() {
        let dir = tmp("route");
        let mut d = daemon(&dir);
        let r = d.handle(Request::RouteAdd {
            prefix: "198.51.100.0/24".into(),
            next_hops: vec![hop(Some("198.19.0.108"), None)],
        });
        assert!(r.ok, "{:?}", r.error);
        // The workers' snapshot routes it already, out of d1 (found from
        // the gateway's subnet).
        let t = d.shared.snapshot.load();
        let nh = fib::Lookup::lookup(&t.fib4, u32::from_be_bytes([198, 51, 100, 7])).unwrap();
        let hops = t.next_hops(nh).unwrap();
        assert_eq!(hops[0].interface, 1);
        drop(t);
        let shown = d.handle(Request::ShowRoute {
            prefix: Some("198.51.100.7".into()),
        });
        let text = shown.result.unwrap().to_string();
        assert!(
            text.contains("198.51.100.0/24") && text.contains("198.19.0.108"),
            "{text}"
        );
        let r = d.handle(Request::RouteDel {
            prefix: "198.51.100.0/24".into(),
        });
        assert!(r.ok);
        let t = d.shared.snapshot.load();
        assert!(fib::Lookup::lookup(&t.fib4, u32::from_be_bytes([198, 51, 100, 7])).is_none());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_whole_table_is_streamed_in_parts_in_prefix_order() {
        let dir = tmp("stream");
        let mut d = daemon(&dir);
        for i in 0..5_000u32 {
            let p = format!("10.{}.{}.0/24", i / 256, i % 256);
            let r = d.handle(Request::RouteAdd {
                prefix: p,
                next_hops: vec![hop(Some("198.19.0.108"), None)],
            });
            assert!(r.ok, "{:?}", r.error);
        }
        let all = d.router.route_views();
        let mut h = Handling(&mut d);
        let Reply::Stream(mut cursor) = h.handle(Request::ShowRoute { prefix: None }) else {
            panic!("show route of the whole table is not streamed");
        };
        let (mut out, mut parts) = (Vec::new(), 0);
        while h.more(&mut cursor, &mut out) == StreamStep::More {
            parts += 1;
            assert!(out.len() < 256 * 1024 * parts, "a part is bounded");
        }
        assert!(parts >= 5_000 / ROUTES_PER_PART);
        let lines: Vec<serde_json::Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), all.len());
        assert_eq!(
            cursor,
            StreamCursor::Routes {
                after: all.last().map(|r| r.prefix.parse().unwrap()),
                sent: all.len() as u64
            }
        );
        for (l, r) in lines.iter().zip(&all) {
            assert_eq!(l["prefix"], r.prefix.as_str());
        }
        // A prefix asked for is answered at once.
        let Reply::Now(r) = h.handle(Request::ShowRoute {
            prefix: Some("10.1.2.3".into()),
        }) else {
            panic!("one route is not streamed");
        };
        assert!(r.result.unwrap().to_string().contains("10.1.2.0/24"));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn bad_requests_are_refused_and_change_nothing() {
        let dir = tmp("bad");
        let mut d = daemon(&dir);
        let generation = d.shared.snapshot.generation();
        for (req, says) in [
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![],
                },
                "at least one next hop",
            ),
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![hop(Some("2001:3::1"), None)],
                },
                "family",
            ),
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![hop(Some("192.0.2.1"), None)],
                },
                "not on any connected subnet",
            ),
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![hop(None, Some("eth9"))],
                },
                "unknown interface \"eth9\"",
            ),
            // The config's checks, by the one resolver.
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![hop(Some("224.0.0.5"), Some("d1"))],
                },
                "multicast addresses cannot be used",
            ),
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![hop(Some("198.19.0.10"), None)],
                },
                "the router's own address",
            ),
            (
                Request::RouteAdd {
                    prefix: "203.0.113.0/24".into(),
                    next_hops: vec![hop(Some("198.18.0.1"), Some("d1"))],
                },
                "not on a subnet of interface \"d1\"",
            ),
            (
                Request::RouteDel {
                    prefix: "198.51.100.0/24".into(),
                },
                "no route",
            ),
            (
                Request::NeighborAdd {
                    dev: "d1".into(),
                    ip: "198.19.0.1".into(),
                    mac: "not-a-mac".into(),
                },
                "not-a-mac",
            ),
        ] {
            let r = d.handle(req);
            assert!(!r.ok);
            let e = r.error.unwrap_or_default();
            assert!(e.contains(says), "{e:?} should say {says:?}");
        }
        assert_eq!(
            d.shared.snapshot.generation(),
            generation,
            "a refused request published tables"
        );
        assert!(d.router.state.api_routes.is_empty() && d.router.state.api_neighbours.is_empty());
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_reload_that_fails_names_the_line_and_keeps_the_running_config() {
        let dir = tmp("reload");
        let mut d = daemon(&dir);
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, CFG.replace("198.19.0.10/24", "198.19.0.300/24")).unwrap();
        let r = d.handle(Request::ConfigReload {
            path: Some(bad.display().to_string()),
        });
        assert!(!r.ok);
        let e = r.error.unwrap_or_default();
        assert!(
            e.contains("bad.toml:10:") && e.contains("interfaces[1].addresses[0]"),
            "{e}"
        );
        assert_eq!(d.config_path, dir.join("router.toml"));
        // A good one with another address is applied whole.
        let good = dir.join("good.toml");
        std::fs::write(&good, CFG.replace("198.19.0.10/24", "198.19.0.20/24")).unwrap();
        let r = d.handle(Request::ConfigReload {
            path: Some(good.display().to_string()),
        });
        assert!(r.ok, "{:?}", r.error);
        let t = d.shared.snapshot.load();
        assert_eq!(
            t.interfaces()[1].ipv4[0].addr,
            std::net::Ipv4Addr::new(198, 19, 0, 20)
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
