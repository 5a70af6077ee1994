//! The control socket's requests, answered.

use super::*;

/// The daemon answering its control socket: every request at once, but a
/// whole `show route` streamed a part per round (a full table is never
/// built whole in memory and other clients are served in between).
pub(super) struct Handling<'a>(pub(super) &'a mut Daemon);

/// Routes per part of a streamed `show route`.
pub(super) const ROUTES_PER_PART: usize = 2048;

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

impl Daemon {
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
    pub(super) fn candidate(
        &self,
        path: &std::path::Path,
        named: bool,
    ) -> Result<RouterState, String> {
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
    pub(super) fn reply_after_change(
        &mut self,
        r: Result<(), String>,
        route: Option<wire::Cidr>,
    ) -> Response {
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
    pub(super) fn match_route(&self, q: &str) -> Result<Vec<rib::state::RouteView>, String> {
        let want: wire::Cidr = q.parse().map_err(|e| format!("{q}: {e}"))?;
        Ok(self.router.longest_match(want).into_iter().collect())
    }

    /// Arms a packet trace on the workers (replacing one in progress).
    pub(super) fn trace_add(
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

    pub(super) fn set_trace(&mut self, req: crate::worker::TraceRequest) {
        if let Ok(mut g) = self.shared.trace.lock() {
            *g = req;
        }
        self.shared.trace_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Starts copying frames at `point` (replacing a capture in progress
    /// and whatever it had not delivered).
    pub(super) fn capture_start(
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

    pub(super) fn set_capture(&mut self, req: Option<crate::capture::CaptureRequest>) {
        if let Ok(mut g) = self.shared.capture.lock() {
            *g = req;
        }
        self.shared
            .capture_generation
            .fetch_add(1, Ordering::AcqRel);
    }

    /// Takes what the workers captured since the last read, with
    /// wall-clock times.
    pub(super) fn capture_read(&self) -> reply::Captured {
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
    pub(super) fn trace_show(&self) -> reply::Trace {
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
    pub(super) fn show_firewall(&self) -> reply::Firewall {
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

    /// The frames the kernel dropped on their way out of bond port
    /// `port` since the start: its and its members' `tx_dropped` growth
    /// (0 for a port that is no bond).
    pub(super) fn bond_tx_dropped(&self, port: &str) -> u64 {
        crate::ports::bond_tx_dropped(port)
            .unwrap_or_default()
            .iter()
            .map(|(d, n)| n.saturating_sub(self.bond_tx_base.get(d).copied().unwrap_or(0)))
            .sum()
    }

    pub(super) fn show_interfaces(&self) -> reply::Interfaces {
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
                let kernel_tx_dropped = if untagged {
                    self.bond_tx_dropped(&port)
                } else {
                    0
                };
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
                    kernel_tx_dropped,
                    rx_ring_drops,
                    pipeline_egress,
                }
            })
            .collect();
        reply::Interfaces {
            engine: if self.xdp.is_some() { "xdp" } else { "user" }.into(),
            on_exit: self.xdp.as_ref().map(|x| x.on_exit.label().into()),
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

    pub(super) fn show_runtime(&self) -> reply::Runtime {
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
    pub(super) fn xdp_per_cpu(&self) -> Vec<(u64, u64, u64)> {
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

    pub(super) fn show_drops(&self) -> reply::Drops {
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
            handoff_dropped: reps.iter().map(|r| r.view.handoff_dropped).sum(),
            bond_tx_dropped: self
                .router
                .ports()
                .iter()
                .map(|p| self.bond_tx_dropped(p))
                .sum(),
        }
    }
}
