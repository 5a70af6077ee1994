//! Replay: the router's pipeline (or the XDP engine, its exceptions
//! through the pipeline) over pcap files, with the tables `fastfwd run`
//! builds, through the same builder.
//!
//! Each input (classic pcap or pcapng, Ethernet) is tagged with the port it
//! arrives on; inputs are merged by timestamp and fed to one worker in
//! batches of consecutive frames from the same port, each batch with the
//! pcap timestamp of its first frame as `now`. Outputs: `DIR/<port>.pcap`
//! for every port that transmitted (forwarded frames, generated ICMP errors
//! and fragments), `DIR/punt.pcap` (frames for the host), `DIR/drop.pcap`
//! (dropped frames as received), and a [`Report`] of the counters.

use anyhow::{Context, anyhow, bail};
use config::{Config, ConfigAcl};
use fib::RouteTable;
use fib::poptrie::{Poptrie4, Poptrie6};
use fib::reference::{ReferenceFib4, ReferenceFib6};
use netio::pcap;
use pipeline::{Counters, DropReason, PortId, PuntReason, Tables, Worker, WorkerConfig};
use rib::state::RouterState;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xdp_engine::replay::{BatchResult, FrameResult, run_user, run_xdp};

/// The output file of a port.
fn port_name(ports: &[String], port: PortId) -> String {
    format!(
        "{}.pcap",
        ports
            .get(usize::from(port))
            .map_or("unknown-port", String::as_str)
    )
}

/// What one replay did.
#[derive(Debug)]
pub struct Report {
    /// The worker's counters, plus the XDP program's with `--engine xdp`.
    pub counters: Counters,
    /// Frames written per output file name (`d1.pcap`, `punt.pcap`, ...).
    pub outputs: BTreeMap<String, u64>,
    /// Per-rule counters of the config's firewall, when it has one.
    pub firewall: Option<firewall::FirewallSummary>,
    /// With `--engine xdp`: what the program finished and handed on.
    pub xdp: Option<xdp_engine::EngineCounters>,
    /// With a tracer: the traced packets, stage by stage (with `--engine
    /// xdp`, among the frames the program handed to the pipeline).
    pub trace: Vec<control::protocol::reply::TracePacket>,
}

/// One input stream, with its next record read ahead.
struct Input {
    port: PortId,
    path: PathBuf,
    reader: pcap::AnyReader<BufReader<File>>,
    next: Option<(u64, Vec<u8>)>,
}

impl Input {
    fn advance(&mut self) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        let rec = self
            .reader
            .next_into(&mut buf)
            .with_context(|| format!("{}", self.path.display()))?;
        self.next = rec.map(|r| (r.ts_nanos, buf));
        Ok(())
    }
}

/// The output pcaps, opened on first use.
struct Outputs {
    dir: PathBuf,
    files: BTreeMap<String, pcap::Writer<BufWriter<File>>>,
}

impl Outputs {
    fn write(&mut self, name: &str, ts: u64, frame: &[u8]) -> anyhow::Result<()> {
        if !self.files.contains_key(name) {
            let path = self.dir.join(name);
            let f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            self.files
                .insert(name.to_owned(), pcap::Writer::new(BufWriter::new(f))?);
        }
        if let Some(w) = self.files.get_mut(name) {
            w.write(ts, frame)
                .with_context(|| format!("writing {}", self.dir.join(name).display()))?;
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut counts = BTreeMap::new();
        for (name, w) in self.files {
            counts.insert(name, w.count());
            w.finish()?;
        }
        Ok(counts)
    }
}

/// Resolves a port or untagged interface name to a port id.
fn resolve_port(cfg: &Config, ports: &[String], name: &str) -> anyhow::Result<PortId> {
    if let Some(i) = ports.iter().position(|p| p == name) {
        return Ok(i as PortId);
    }
    if let Some(i) = cfg.interface(name) {
        if i.vlan.is_none()
            && let Some(p) = ports.iter().position(|p| *p == i.port)
        {
            return Ok(p as PortId);
        }
        bail!(
            "{name} is a VLAN sub-interface; give its port {:?} (frames carry their tags)",
            i.port
        );
    }
    bail!(
        "unknown port {name:?}; the config has ports {}",
        ports.join(", ")
    )
}

/// Which FIB the replayed pipeline looks routes up in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FibKind {
    /// `fib::poptrie`, as `fastfwd run` uses.
    Fast,
    /// `fib::reference`, simple and obviously correct.
    Reference,
}

/// Which engine forwards the replayed frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayEngine {
    /// The user-space pipeline.
    User,
    /// The in-kernel XDP program (BPF_PROG_TEST_RUN, needs root), its
    /// exceptions through the pipeline as in `fastfwd run --engine xdp`.
    Xdp,
}

/// The tables `fastfwd run` would build from `cfg` alone (no kernel
/// routes, neighbours or control-socket additions), over the given FIBs,
/// with the firewall's connection table keyed by a fixed seed so that a
/// replay is reproducible. Returns them with the port names by port id.
pub fn tables<F4, F6>(
    cfg: &Config,
    fib4: F4,
    fib6: F6,
) -> anyhow::Result<(Tables<F4, F6, ConfigAcl>, Vec<String>)>
where
    F4: RouteTable<u32>,
    F6: RouteTable<u128>,
{
    let built = RouterState::new(cfg.clone())
        .build_over(fib4, fib6)
        .map_err(|e| anyhow!("{}: {e}", cfg.file))?;
    let t = built.tables;
    let acl = cfg
        .firewall
        .as_ref()
        .map(|f| firewall::PipelineFirewall::new(Arc::clone(&f.compiled), config::FIREWALL_SEED));
    let tables = t.to_builder().build_with_acl(t.fib4, t.fib6, acl);
    Ok((tables, built.ports))
}

/// Runs `engine` over `inputs` (port or interface name, pcap file), writing
/// the output pcaps into `out`.
#[allow(clippy::too_many_arguments)]
pub fn replay(
    cfg: &Config,
    inputs: &[(String, PathBuf)],
    out: &Path,
    batch: usize,
    fib: FibKind,
    engine: ReplayEngine,
    tracer: Option<pipeline::Tracer>,
) -> anyhow::Result<Report> {
    let worker_cfg = WorkerConfig {
        max_batch: batch,
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(worker_cfg);
    worker.set_tracer(tracer);
    match (engine, fib) {
        (ReplayEngine::User, FibKind::Fast) => {
            let (t, ports) = tables(cfg, Poptrie4::new(), Poptrie6::new())?;
            let report = replay_with(cfg, &ports, inputs, out, batch, &mut |port, now, frames| {
                Ok(run_user(&mut worker, &t, now, port, frames))
            })?;
            Ok(finish((cfg, &ports), report, &t, &worker, None, None))
        }
        (ReplayEngine::User, FibKind::Reference) => {
            let (t, ports) = tables(cfg, ReferenceFib4::new(), ReferenceFib6::new())?;
            let report = replay_with(cfg, &ports, inputs, out, batch, &mut |port, now, frames| {
                Ok(run_user(&mut worker, &t, now, port, frames))
            })?;
            Ok(finish((cfg, &ports), report, &t, &worker, None, None))
        }
        (ReplayEngine::Xdp, FibKind::Reference) => {
            bail!(
                "--engine xdp walks the fast FIB in BPF maps; --fib reference is for the user-space engine"
            )
        }
        (ReplayEngine::Xdp, FibKind::Fast) => {
            let (t, ports) = tables(cfg, Poptrie4::new(), Poptrie6::new())?;
            let (n4, l4) = (t.fib4.layout().nodes.len(), t.fib4.layout().leaves.len());
            let (n6, l6) = (t.fib6.layout().nodes.len(), t.fib6.layout().leaves.len());
            let cap = xdp_engine::FibCapacity::for_sizes(n4, l4, n6, l6);
            let mut engine = xdp_engine::Engine::load(xdp_engine::Mode::Test, cap)?;
            engine.publish(xdp_engine::Image::compile(
                &t.datapath(),
                &t.fib4,
                &t.fib6,
                t.acl.as_ref(),
                &cap,
            )?)?;
            let report = replay_with(cfg, &ports, inputs, out, batch, &mut |port, now, frames| {
                Ok(run_xdp(&mut engine, &mut worker, &t, now, port, frames)?)
            })?;
            let counters = engine.counters(t.interfaces().len())?;
            let rules = match t.acl.as_ref() {
                Some(acl) => engine.firewall_counters(acl.firewall())?,
                None => None,
            };
            Ok(finish(
                (cfg, &ports),
                report,
                &t,
                &worker,
                Some(counters),
                rules,
            ))
        }
    }
}

/// One batch through the chosen engine.
type RunBatch<'a> = dyn FnMut(PortId, u64, &[&[u8]]) -> anyhow::Result<BatchResult> + 'a;

fn replay_with(
    cfg: &Config,
    ports: &[String],
    inputs: &[(String, PathBuf)],
    out: &Path,
    batch: usize,
    run: &mut RunBatch<'_>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut streams = Vec::new();
    for (port, path) in inputs {
        let port = resolve_port(cfg, ports, port)?;
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let reader =
            pcap::open(BufReader::new(f)).with_context(|| format!("{}", path.display()))?;
        let mut s = Input {
            port,
            path: path.clone(),
            reader,
            next: None,
        };
        s.advance()?;
        streams.push(s);
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut outputs = Outputs {
        dir: out.to_owned(),
        files: BTreeMap::new(),
    };

    // Merge the inputs by timestamp (ties: the earlier-named input first),
    // collecting runs of frames from one port into batches.
    let mut pending: Vec<(u64, Vec<u8>)> = Vec::with_capacity(batch);
    let mut pending_port: PortId = 0;
    loop {
        let next = streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.next.as_ref().map(|(ts, _)| (*ts, i)))
            .min();
        let flush = match next {
            None => true,
            Some((_, i)) => {
                !pending.is_empty() && (streams[i].port != pending_port || pending.len() == batch)
            }
        };
        if flush && !pending.is_empty() {
            let now = pending[0].0;
            let frames: Vec<&[u8]> = pending.iter().map(|(_, d)| d.as_slice()).collect();
            let result = run(pending_port, now, &frames)?;
            write_batch(ports, &pending, &result, &mut outputs)?;
            pending.clear();
        }
        let Some((_, i)) = next else { break };
        if let Some(rec) = streams[i].next.take() {
            pending_port = streams[i].port;
            pending.push(rec);
        }
        streams[i].advance()?;
    }
    outputs.finish()
}

/// The report of a finished replay: the worker's counters, plus the XDP
/// program's for what it finished.
fn finish<F4, F6>(
    (cfg, ports): (&Config, &[String]),
    outputs: BTreeMap<String, u64>,
    tables: &Tables<F4, F6, ConfigAcl>,
    worker: &Worker,
    xdp: Option<xdp_engine::EngineCounters>,
    xdp_rules: Option<firewall::RuleCounters>,
) -> Report {
    let records = worker.tracer().map_or(&[][..], pipeline::Tracer::records);
    let mut trace = Vec::new();
    if !records.is_empty() {
        // The routes the traced packets matched, from the same state.
        let router = rib::Router::new(RouterState::new(cfg.clone()))
            .ok()
            .map(|(r, _)| r);
        let route_of = |a: std::net::IpAddr| {
            let host = match a {
                std::net::IpAddr::V4(x) => wire::Cidr::V4(wire::Ipv4Cidr::new(u32::from(x), 32)?),
                std::net::IpAddr::V6(x) => wire::Cidr::V6(wire::Ipv6Cidr::new(u128::from(x), 128)?),
            };
            let v = router.as_ref()?.longest_match(host)?;
            Some(format!("{} {}", v.prefix, v.next_hops.join(", ")))
        };
        let fw = cfg.firewall.as_ref().map(|f| &*f.compiled);
        trace = records
            .iter()
            .map(|r| crate::trace::describe(0, r, tables, ports, &route_of, fw))
            .collect();
    }
    let firewall = tables.acl.as_ref().map(|acl| {
        let state = worker
            .acl_state::<<config::ConfigAcl as pipeline::Acl>::State>()
            .and_then(Option::as_ref);
        // The rules the pipeline counted, and those the XDP program did.
        let parts = state
            .map(firewall::FirewallWorker::counters)
            .into_iter()
            .chain(xdp_rules.as_ref());
        acl.firewall().summary(parts)
    });
    let mut counters = worker.counters().clone();
    if let Some(x) = &xdp {
        counters.add(&x.counters);
    }
    Report {
        counters,
        outputs,
        firewall,
        xdp,
        trace,
    }
}

/// Writes one batch's results: each frame in input order, then the
/// generated packets.
fn write_batch(
    ports: &[String],
    pending: &[(u64, Vec<u8>)],
    result: &BatchResult,
    outputs: &mut Outputs,
) -> anyhow::Result<()> {
    let now = pending.first().map_or(0, |p| p.0);
    for ((ts, data), r) in pending.iter().zip(&result.frames) {
        match r {
            FrameResult::Forward(port, bytes) => {
                let name = port_name(ports, *port);
                outputs.write(&name, *ts, bytes)?;
            }
            FrameResult::Punt(_) => outputs.write("punt.pcap", *ts, data)?,
            FrameResult::Drop(_) => outputs.write("drop.pcap", *ts, data)?,
            FrameResult::Consumed => {}
        }
    }
    for (port, bytes) in &result.generated {
        let name = port_name(ports, *port);
        outputs.write(&name, now, bytes)?;
    }
    Ok(())
}

impl Report {
    /// Counters as a JSON value: the worker's counters (drops and punts by
    /// reason name), per-interface counters with names, output file counts.
    pub fn to_json(&self, cfg: &Config) -> serde_json::Value {
        let mut counters = serde_json::to_value(&self.counters).unwrap_or_default();
        if let Some(list) = counters
            .get_mut("interfaces")
            .and_then(|v| v.as_array_mut())
        {
            for (i, v) in list.iter_mut().enumerate() {
                if let (Some(obj), Some(iface)) = (v.as_object_mut(), cfg.interfaces.get(i)) {
                    obj.insert("name".into(), iface.name.clone().into());
                    obj.insert("port".into(), iface.port.clone().into());
                }
            }
        }
        let mut v = serde_json::json!({
            "config": cfg.file,
            "counters": counters,
            "outputs": self.outputs,
        });
        if let (Some(fw), Some(obj)) = (&self.firewall, v.as_object_mut()) {
            obj.insert(
                "firewall".into(),
                serde_json::to_value(fw).unwrap_or_default(),
            );
        }
        if let (Some(x), Some(obj)) = (&self.xdp, v.as_object_mut()) {
            obj.insert(
                "xdp".into(),
                serde_json::to_value(xdp_program(x)).unwrap_or_default(),
            );
        }
        if let (false, Some(obj)) = (self.trace.is_empty(), v.as_object_mut()) {
            obj.insert(
                "trace".into(),
                serde_json::to_value(&self.trace).unwrap_or_default(),
            );
        }
        v
    }

    /// Counters as text tables.
    pub fn table(&self, cfg: &Config) -> String {
        use std::fmt::Write;
        let c = &self.counters;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<16} {:<10} {:>10} {:>12} {:>10} {:>10} {:>12}",
            "interface", "port", "rx_pkts", "rx_bytes", "rx_drop", "tx_pkts", "tx_bytes"
        );
        for (i, iface) in cfg.interfaces.iter().enumerate() {
            let ic = c.interfaces.get(i).cloned().unwrap_or_default();
            let _ = writeln!(
                s,
                "{:<16} {:<10} {:>10} {:>12} {:>10} {:>10} {:>12}",
                iface.name,
                iface.port,
                ic.rx_packets,
                ic.rx_bytes,
                ic.rx_dropped,
                ic.tx_packets,
                ic.tx_bytes
            );
        }
        let _ = writeln!(
            s,
            "\nframes {}  forwarded ipv4 {} ipv6 {}  icmp errors sent {} (rate limited {}, suppressed {})  fragments sent {}  tcp resets sent {} (suppressed {})",
            c.rx_frames,
            c.forwarded_ipv4,
            c.forwarded_ipv6,
            c.icmp_sent,
            c.icmp_rate_limited,
            c.icmp_suppressed,
            c.fragments_sent,
            c.tcp_resets_sent,
            c.tcp_resets_suppressed
        );
        if c.icmp_suppressed > 0 {
            let _ = writeln!(s, "\nicmp errors suppressed ({} total)", c.icmp_suppressed);
            for r in pipeline::IcmpSuppressed::ALL {
                let n = c.icmp_suppressed_by[r.index()];
                if n > 0 {
                    let _ = writeln!(s, "  {:<28} {:>8}  {}", r.name(), n, r.description());
                }
            }
        }
        let _ = writeln!(s, "\ndrops ({} total)", c.total_drops());
        for r in DropReason::ALL {
            let n = c.drop_count(*r);
            if n > 0 {
                let _ = writeln!(s, "  {:<28} {:>8}  {}", r.name(), n, r.description());
            }
        }
        let _ = writeln!(s, "\npunts ({} total)", c.total_punts());
        for r in PuntReason::ALL {
            let n = c.punt_count(*r);
            if n > 0 {
                let _ = writeln!(s, "  {:<28} {:>8}  {}", r.name(), n, r.description());
            }
        }
        if let Some(fw) = &self.firewall {
            let _ = write!(s, "\n{fw}");
        }
        if let Some(x) = &self.xdp {
            let _ = writeln!(
                s,
                "\nxdp engine: the program finished {} frames (forwarded {}) and handed {} to the pipeline",
                x.counters.rx_frames,
                x.counters.forwarded_ipv4 + x.counters.forwarded_ipv6,
                x.total_exceptions()
            );
            for (i, name) in xdp_engine::layout::EXCEPTIONS {
                let n = x.exceptions[i as usize];
                if n > 0 {
                    let _ = writeln!(s, "  {name:<28} {n:>8}");
                }
            }
        }
        let _ = writeln!(s, "\noutputs");
        for (name, n) in &self.outputs {
            let _ = writeln!(s, "  {name:<28} {n:>8} frames");
        }
        s
    }
}

/// The XDP program's own counters as the control protocol reports them:
/// frames it finished, exceptions by cause.
pub fn xdp_program(x: &xdp_engine::EngineCounters) -> control::protocol::reply::XdpProgram {
    control::protocol::reply::XdpProgram {
        finished: x.counters.rx_frames,
        forwarded: x.counters.forwarded_ipv4 + x.counters.forwarded_ipv6,
        to_host: x.to_host,
        exceptions: xdp_engine::layout::EXCEPTIONS
            .iter()
            .map(|&(i, name)| (name.to_string(), x.exceptions[i as usize]))
            .collect(),
        exceptions_lost: x.exceptions_lost,
        tx_redirect_failed: x.tx_redirect_failed,
        ct_established: x.ct_established,
        meta_failed: x.meta_failed,
        ..Default::default()
    }
}
