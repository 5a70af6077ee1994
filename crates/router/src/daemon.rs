//! The control loop and its request handler.
//!
//! The control thread follows the kernel over netlink, rebuilds and
//! publishes the tables (and compiles them into the XDP engine's maps),
//! asks the kernel to resolve the neighbours the workers missed, serves the
//! control socket without letting any client stall it, and sums the
//! workers' counters for `show`. See docs/router.md.

use crate::ports::{Attach, PortChange};
use crate::worker::{FirewallReport, Shared, WorkerReport};
use crate::IoBackend;
use anyhow::{bail, Result};
use control::kernel::{Delta, KernelLink};
use control::protocol::{HopSpec, Request, Response};
use control::server::{ControlServer, Handler, Reply, StreamCursor, StreamStep};
use control::snapshot::Snapshot;
use control::state::{ApiRoute, RouterState};
use control::Router;
use netio::sys::os;
use netio::xdp::XdpProgram;
use pipeline::{Counters, PuntReason};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
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
}

/// A FIB audit: running, then its lines being streamed.
pub(crate) struct AuditJob {
    result: Receiver<control::audit::AuditResult>,
    lines: Option<std::vec::IntoIter<serde_json::Value>>,
}

/// Audit lines per part of the stream.
const AUDIT_LINES_PER_PART: usize = 1024;

/// The XDP engine and the tables generation it holds.
pub(crate) struct XdpEngine {
    pub(crate) engine: xdp_engine::Engine,
    /// (snapshot, IPv4 FIB, IPv6 FIB) generations last compiled.
    pub(crate) synced: Option<(u64, u64, u64)>,
}

impl XdpEngine {
    /// Compiles the current tables into the program's maps if they changed
    /// since the last time. Tables that do not fit (or a failed map write)
    /// leave the program handing every transit packet to the pipeline,
    /// which has them: slower, never wrong.
    pub(crate) fn sync(&mut self, snapshot: &Snapshot) {
        let tables = snapshot.load();
        let (s4, s6) = (tables.fib4.snapshot(), tables.fib6.snapshot());
        let key = (snapshot.generation(), s4.generation(), s6.generation());
        if self.synced == Some(key) {
            return;
        }
        self.synced = Some(key);
        let fw = tables
            .acl
            .as_ref()
            .map(firewall::PipelineFirewall::firewall);
        let cap = self.engine.capacity();
        let r = xdp_engine::Image::compile(&tables.datapath(), s4.trie(), s6.trie(), fw, &cap)
            .map_err(xdp_engine::EngineError::from)
            .and_then(|image| self.engine.publish(image));
        if let Err(e) = r {
            warn!(error = %e, "the XDP program hands every transit packet to the pipeline until the tables fit");
            if let Err(e) = self.engine.force_except_all() {
                error!(error = %e, "cannot make the XDP program hand on every packet");
            }
        }
    }
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
        // applied with one rebuild when it pauses, or every 100 ms while it lasts.
        let mut dirty_since: Option<Instant> = None;
        let mut delta = Delta::default();
        while !os::stop_requested() {
            if self.shared.worker_failed.load(Ordering::SeqCst) {
                bail!("a worker thread panicked; stopping (XDP programs detached)");
            }
            let mut fds = server.poll_fds();
            fds.push(self.kernel.events_fd());
            os::poll_readable(&fds, 25)?;
            let (resyncs, resyncing) = (self.kernel.resyncs(), self.kernel.resyncing());
            self.kernel
                .poll_events(&mut self.router.state.kernel, &mut delta)?;
            if self.kernel.resyncs() != resyncs {
                warn!(
                    resyncs = self.kernel.resyncs(),
                    "netlink broadcasts lost (the event queue overran); re-reading the kernel's tables"
                );
            } else if resyncing && !self.kernel.resyncing() {
                info!("kernel tables re-read; the mirror is complete again");
            }
            if !delta.is_empty() {
                dirty_since.get_or_insert_with(Instant::now);
            }
            if let Some(since) = dirty_since {
                let quiet = os::poll_readable(&[self.kernel.events_fd()], 0)? == 0;
                if quiet || since.elapsed() >= Duration::from_millis(100) {
                    self.apply(std::mem::take(&mut delta));
                    dirty_since = None;
                }
            }
            // Neighbour misses: ask the kernel, within the limiter's caps
            // (per address and overall).
            let now = Instant::now();
            while let Ok((iface, ip)) = misses.try_recv() {
                let Some(ifindex) = self.iface_ifindex(iface) else {
                    continue;
                };
                if self.resolver.should_ask(ifindex, ip, now) {
                    if let Err(e) = self.kernel.resolve(ifindex, ip) {
                        warn!(error = %e, %ip, ifindex, "neighbour resolution request");
                    }
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
    /// (before a control-socket change is acknowledged).
    fn sync_xdp(&mut self) {
        if let Some(x) = self.xdp.as_mut() {
            x.sync(&self.shared.snapshot);
        }
    }

    fn iface_ifindex(&self, iface: u16) -> Option<u32> {
        let tables = self.shared.snapshot.load();
        let port = tables.interfaces().get(usize::from(iface))?.port;
        let name = self.router.ports().get(usize::from(port))?;
        self.router.state.kernel.ifindex_of(name)
    }

    /// Applies a burst of kernel changes: links and addresses rebuild
    /// everything, routes change only their prefixes, neighbours only the
    /// small tables around the same FIBs.
    fn apply(&mut self, delta: Delta) {
        if !delta.links.is_empty() || delta.other {
            self.follow_ports();
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
        let rx = control::audit::start(
            self.router.state.clone(),
            self.router.installed(),
            Arc::clone(&self.shared.snapshot.load()),
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
            let values: Vec<serde_json::Value> = match job.result.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => return StreamStep::Pending,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    vec![serde_json::json!({"error": "the audit thread ended without a result"})]
                }
                Ok(Err(e)) => vec![serde_json::json!({"error": e.to_string()})],
                Ok(Ok((diffs, checked))) => {
                    if !diffs.is_empty() {
                        warn!(differences = diffs.len(), "FIB audit found differences");
                    }
                    let n = diffs.len();
                    diffs
                        .into_iter()
                        .filter_map(|d| serde_json::to_value(d).ok())
                        .chain(std::iter::once(
                            serde_json::json!({"summary": {"differences": n, "checked": checked}}),
                        ))
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
            .filter_map(|m| m.lock().ok().map(|r| r.clone()))
            .filter(|r| !r.backend.is_empty())
            .collect();
        // The XDP program counts what it finishes itself, on every CPU.
        if let Some(x) = &self.xdp {
            let n = self.shared.snapshot.load().interfaces().len();
            match x.engine.counters(n) {
                Ok(c) => reps.push(WorkerReport {
                    id: reps.len(),
                    backend: "xdp-program".into(),
                    xdp: Some(crate::replay::xdp_json(&c)),
                    counters: c.counters,
                    ..WorkerReport::default()
                }),
                Err(e) => warn!(error = %e, "reading the XDP program's counters"),
            }
        }
        reps
    }

    pub(crate) fn handle(&mut self, req: Request) -> Response {
        match req {
            Request::ShowInterfaces => Response::ok(self.show_interfaces()),
            Request::ShowWorkers => Response::ok(self.reports()),
            Request::ShowDrops => {
                let total = Counters::sum(self.reports().iter().map(|r| &r.counters));
                let drops: Vec<_> = pipeline::DropReason::ALL
                    .iter()
                    .map(|r| serde_json::json!({"reason": r.name(), "count": total.drop_count(*r), "description": r.description()}))
                    .collect();
                let punts: Vec<_> = PuntReason::ALL
                    .iter()
                    .map(|r| serde_json::json!({"reason": r.name(), "count": total.punt_count(*r), "description": r.description()}))
                    .collect();
                let suppressed: Vec<_> = pipeline::IcmpSuppressed::ALL
                    .iter()
                    .map(|c| serde_json::json!({"cause": c.name(), "count": total.icmp_suppressed_by[c.index()], "description": c.description()}))
                    .collect();
                let reps = self.reports();
                Response::ok(serde_json::json!({
                    "drops": drops,
                    "punts": punts,
                    "icmp_suppressed": suppressed,
                    "icmp_rate_limited": total.icmp_rate_limited,
                    "held_expired": reps.iter().map(|r| r.held_expired).sum::<u64>(),
                    "punts_discarded": reps.iter().map(|r| r.punts_discarded).sum::<u64>(),
                    "neighbour_requests_capped": self.resolver.capped,
                    "tx_ring_full": reps.iter().flat_map(|r| r.ports.iter()).map(|p| p.tx_dropped).sum::<u64>(),
                    "rx_ring_full": reps.iter().flat_map(|r| r.ports.iter()).map(|p| p.rx_dropped).sum::<u64>(),
                    "rx_oversize": reps.iter().flat_map(|r| r.ports.iter()).map(|p| p.rx_oversize).sum::<u64>(),
                }))
            }
            Request::ShowFirewall => Response::ok(self.show_firewall()),
            Request::ShowMetrics => Response::ok(self.metrics_text()),
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
                let r = self.route_add(&prefix, &next_hops);
                self.reply_after_change(r, prefix.parse().ok())
            }
            Request::RouteDel { prefix } => {
                let r = match prefix.parse::<wire::Cidr>() {
                    Ok(p) if self.router.state.api_routes.remove(&p).is_some() => Ok(()),
                    Ok(p) => Err(format!("no route {p} was added through the control socket")),
                    Err(e) => Err(format!("{prefix}: {e}")),
                };
                self.reply_after_change(r, prefix.parse().ok())
            }
            Request::NeighborAdd { dev, ip, mac } => {
                let r = (|| {
                    let ip: IpAddr = ip.parse().map_err(|e| format!("{ip}: {e}"))?;
                    let mac: config::MacAddr = mac.parse().map_err(|e| format!("{mac}: {e}"))?;
                    if self.router.state.config.interface(&dev).is_none() {
                        return Err(format!("no interface {dev}"));
                    }
                    self.router
                        .state
                        .api_neighbours
                        .insert((dev.clone(), ip), mac.0);
                    Ok(())
                })();
                self.reply_after_change(r, None)
            }
            Request::NeighborDel { dev, ip } => {
                let r = match ip.parse::<IpAddr>() {
                    Ok(a)
                        if self
                            .router
                            .state
                            .api_neighbours
                            .remove(&(dev.clone(), a))
                            .is_some() =>
                    {
                        Ok(())
                    }
                    Ok(a) => Err(format!(
                        "no neighbour {a} on {dev} was added through the control socket"
                    )),
                    Err(e) => Err(format!("{ip}: {e}")),
                };
                self.reply_after_change(r, None)
            }
            Request::ConfigCheck { path } => {
                let path = path
                    .map(PathBuf::from)
                    .unwrap_or_else(|| self.config_path.clone());
                match self.candidate(&path) {
                    Ok(_) => Response::ok(
                        serde_json::json!({"file": path.display().to_string(), "valid": true}),
                    ),
                    Err(e) => Response::err(e),
                }
            }
            Request::ConfigReload { path } => {
                let path = path
                    .map(PathBuf::from)
                    .unwrap_or_else(|| self.config_path.clone());
                match self.candidate(&path) {
                    Ok(next) => {
                        self.router.state = next;
                        self.config_path = path.clone();
                        match self.rebuild() {
                            None => Response::ok(
                                serde_json::json!({"file": path.display().to_string(), "applied": true}),
                            ),
                            Some(e) => Response::err(e),
                        }
                    }
                    Err(e) => Response::err(e),
                }
            }
        }
    }

    /// A state with the config at `path`, validated and built but not applied.
    fn candidate(&self, path: &std::path::Path) -> Result<RouterState, String> {
        let cfg = config::Config::load(path).map_err(|e| e.to_string())?;
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
                Response::ok(serde_json::json!({"applied": true}))
            }
            Err(e) => Response::err(e),
        }
    }

    fn route_add(&mut self, prefix: &str, hops: &[HopSpec]) -> Result<(), String> {
        let p: wire::Cidr = prefix.parse().map_err(|e| format!("{prefix}: {e}"))?;
        if hops.is_empty() {
            return Err("a route needs at least one next hop (via GW and/or dev IFACE)".into());
        }
        let mut next_hops = Vec::new();
        for h in hops {
            let via: Option<IpAddr> = match &h.via {
                Some(v) => Some(v.parse().map_err(|e| format!("{v}: {e}"))?),
                None => None,
            };
            if via.is_some_and(|v| v.is_ipv4() != matches!(p, wire::Cidr::V4(_))) {
                return Err(format!(
                    "next hop {} is not of the prefix's family",
                    h.via.as_deref().unwrap_or("")
                ));
            }
            let dev = match (&h.dev, via) {
                (Some(d), _) => {
                    if self.router.state.config.interface(d).is_none() {
                        return Err(format!("no interface {d}"));
                    }
                    d.clone()
                }
                (None, Some(v)) => self
                    .shared
                    .snapshot
                    .load()
                    .interfaces()
                    .iter()
                    .find(|i| match v {
                        IpAddr::V4(a) => i.ipv4.iter().any(|x| {
                            wire::Ipv4Cidr::new(u32::from(x.addr), x.prefix_len)
                                .is_some_and(|c| c.contains(u32::from(a)))
                        }),
                        IpAddr::V6(a) => i.ipv6.iter().any(|x| {
                            wire::Ipv6Cidr::new(u128::from(x.addr), x.prefix_len)
                                .is_some_and(|c| c.contains(u128::from(a)))
                        }),
                    })
                    .map(|i| i.name.clone())
                    .ok_or_else(|| {
                        format!("{v} is not on any connected subnet; name the interface with dev")
                    })?,
                (None, None) => return Err("a next hop needs via or dev".into()),
            };
            next_hops.push(config::NextHop {
                interface: dev,
                via,
            });
        }
        self.router
            .state
            .api_routes
            .insert(p, ApiRoute { next_hops });
        Ok(())
    }

    /// The route a prefix or address selects (longest match).
    fn match_route(&self, q: &str) -> Result<Vec<control::state::RouteView>, String> {
        let want: wire::Cidr = q.parse().map_err(|e| format!("{q}: {e}"))?;
        Ok(self.router.longest_match(want).into_iter().collect())
    }

    /// The running rule set's counters summed over the workers that use it
    /// (a worker still on an older rule set after a reload is left out
    /// until it picks up the new one).
    fn show_firewall(&self) -> serde_json::Value {
        let Some(fw) = &self.router.state.config.firewall else {
            return serde_json::json!({ "firewall": null });
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
        serde_json::json!({
            "firewall": summary,
            "conntrack": ct,
            "rejects_rate_limited": current.iter().map(|f| f.stats.rejects_rate_limited).sum::<u64>(),
        })
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
            let w = r.id.to_string();
            let engine = if r.backend == "xdp-program" {
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
                r.busy_rounds,
            );
            m.counter(
                "worker_sleeps",
                "Times a worker slept in poll(2).",
                &l,
                r.sleeps,
            );
            m.counter(
                "worker_held_expired",
                "Frames dropped after waiting 1 s for their neighbour.",
                &l,
                r.held_expired,
            );
            for p in &r.ports {
                let l = [("worker", w.as_str()), ("port", p.port.as_str())];
                m.counter(
                    "port_rx_ring_full",
                    "Frames the kernel dropped before fastfwd saw them.",
                    &l,
                    p.rx_dropped,
                );
                m.counter(
                    "port_tx_ring_full",
                    "Frames that found the TX ring full.",
                    &l,
                    p.tx_dropped,
                );
                m.counter(
                    "port_rx_oversize",
                    "Frames larger than a frame buffer, dropped on receive.",
                    &l,
                    p.rx_oversize,
                );
            }
            if let Some(x) = r
                .xdp
                .as_ref()
                .and_then(|x| x.get("exceptions"))
                .and_then(|e| e.as_object())
            {
                for (cause, n) in x {
                    m.counter(
                        "xdp_exceptions",
                        "Packets the XDP program handed to the pipeline, by cause.",
                        &[("cause", cause.as_str())],
                        n.as_u64().unwrap_or(0),
                    );
                }
            }
        }
        let fw = self.show_firewall();
        for chain in fw["firewall"]["chains"].as_array().into_iter().flatten() {
            let name = chain["chain"].as_str().unwrap_or("");
            for rule in chain["rules"].as_array().into_iter().flatten() {
                let line = rule["line"].to_string();
                let l = [("chain", name), ("line", line.as_str())];
                m.counter(
                    "firewall_rule_packets",
                    "Packets that matched a firewall rule (by its config line).",
                    &l,
                    rule["packets"].as_u64().unwrap_or(0),
                );
                m.counter(
                    "firewall_rule_bytes",
                    "Bytes that matched a firewall rule.",
                    &l,
                    rule["bytes"].as_u64().unwrap_or(0),
                );
            }
        }
        if let Some(ct) = fw["conntrack"].as_object() {
            let g = |k: &str| ct.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
            m.gauge(
                "conntrack_entries",
                "Connection-table slots in use.",
                &[],
                g("occupancy"),
            );
            m.gauge(
                "conntrack_capacity",
                "Connection-table slots.",
                &[],
                g("capacity"),
            );
            m.counter("conntrack_inserts", "Connections added.", &[], g("inserts"));
            m.counter(
                "conntrack_evictions",
                "Connections evicted to make room.",
                &[],
                g("evictions"),
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
        m.counter(
            "route_updates",
            "Route prefixes re-decided after kernel or control-socket changes.",
            &[],
            self.route_updates,
        );
        m.counter(
            "table_rebuilds",
            "Full rebuilds of the tables (links, addresses, config).",
            &[],
            self.rebuilds,
        );
        m.counter(
            "kernel_resyncs",
            "Full re-reads of the kernel's tables after lost netlink broadcasts.",
            &[],
            self.kernel.resyncs(),
        );
        m.counter(
            "neighbour_requests_capped",
            "Neighbour resolutions not asked, over the cap.",
            &[],
            self.resolver.capped,
        );
        m.encode()
    }

    fn show_interfaces(&self) -> serde_json::Value {
        let reps = self.reports();
        let total = Counters::sum(reps.iter().map(|r| &r.counters));
        let tables = self.shared.snapshot.load();
        let ifaces: Vec<_> = tables
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
                let tx_dropped: u64 = reps
                    .iter()
                    .flat_map(|r| r.ports.iter())
                    .filter(|p| p.port == port && iface.vlan == pipeline::Vlan::Untagged)
                    .map(|p| p.tx_dropped)
                    .sum();
                serde_json::json!({
                    "name": iface.name,
                    "port": port,
                    "mac": iface.mac.to_string(),
                    "mtu": iface.mtu,
                    "rx_packets": c.rx_packets,
                    "rx_bytes": c.rx_bytes,
                    "rx_errors": c.rx_dropped,
                    "tx_packets": c.tx_packets,
                    "tx_bytes": c.tx_bytes,
                    "tx_drops": tx_dropped,
                })
            })
            .collect();
        serde_json::json!({
            "engine": if self.xdp.is_some() { "xdp" } else { "user" },
            "xdp": reps.iter().find_map(|r| r.xdp.clone()),
            "backend": match self.backend { IoBackend::AfXdp => "afxdp", IoBackend::Packet => "packet" },
            "uptime_s": self.started.elapsed().as_secs_f64(),
            "interfaces": ifaces,
        })
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
            },
            attached: vec![None, None],
            to_workers: Vec::new(),
            audit: None,
            route_updates: 0,
            rebuilds: 0,
        }
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
        let gen = d.shared.snapshot.generation();
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
                "no interface eth9",
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
            gen,
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
