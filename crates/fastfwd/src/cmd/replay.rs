//! `fastfwd replay`: runs the real forwarding pipeline over pcap files.
//!
//! Each input (classic pcap or pcapng, Ethernet) is tagged with the port it arrives on
//! (`--in d0=gen.pcap`, or `--in gen.pcap --port d0`); inputs are merged by
//! timestamp and fed to one worker in batches of consecutive frames from the
//! same port, each batch with the pcap timestamp of its first frame as
//! `now`. Outputs: `DIR/<port>.pcap` for every port that transmitted
//! (forwarded frames, generated ICMP errors and fragments), `DIR/punt.pcap`
//! (frames for the host), `DIR/drop.pcap` (dropped frames as received), and
//! the counters as a table or, with `--json`, as JSON on stdout.

use anyhow::{anyhow, bail, Context};
use config::Config;
use fib::Lookup;
use netio::pcap;
use pipeline::{Counters, DropReason, PortId, PuntReason, Worker, WorkerConfig};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use xdp_engine::replay::{run_user, run_xdp, BatchResult, FrameResult};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Router configuration (TOML, see docs/config.md).
    #[arg(long, required_unless_present = "demo")]
    pub config: Option<PathBuf>,
    /// Input pcap: `FILE` (arriving on `--port`) or `PORT=FILE`; repeatable.
    #[arg(long = "in", value_name = "[PORT=]FILE")]
    pub inputs: Vec<String>,
    /// Port (or untagged interface name) that bare `--in FILE` inputs arrive on.
    #[arg(long, value_name = "IFNAME")]
    pub port: Option<String>,
    /// Directory for the output pcaps (created if missing).
    #[arg(long, value_name = "DIR", required_unless_present = "demo")]
    pub out: Option<PathBuf>,
    /// Print counters as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Most frames per pipeline call.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub batch: u16,
    /// Route lookup structure: the fast FIB the daemon uses, or the
    /// reference one it is tested against.
    #[arg(long, value_enum, default_value_t = FibKind::Fast)]
    pub fib: FibKind,
    /// Forwarding engine: the user-space pipeline, or the XDP program run
    /// over each frame with BPF_PROG_TEST_RUN (its exceptions through the
    /// pipeline, as in `fastfwd run --engine xdp`; needs root).
    #[arg(long, value_enum, default_value_t = EngineKind::User)]
    pub engine: EngineKind,
    /// Write an example config and a generated pcap of sample traffic into
    /// DIR, then replay it into DIR/out.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["config", "inputs", "out"])]
    pub demo: Option<PathBuf>,
}

/// Which engine forwards.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// The user-space pipeline.
    User,
    /// The in-kernel XDP program, with the pipeline as its exception path.
    Xdp,
}

/// Which FIB the replayed pipeline looks routes up in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FibKind {
    /// `fib::poptrie`, as `fastfwd run` uses.
    Fast,
    /// `fib::reference`, simple and obviously correct.
    Reference,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(dir) = &args.demo {
        return run_demo(dir, args.json, args.fib);
    }
    let config_path = args
        .config
        .clone()
        .ok_or_else(|| anyhow!("--config is required"))?;
    let out = args
        .out
        .clone()
        .ok_or_else(|| anyhow!("--out is required"))?;
    let cfg = Config::load(&config_path).map_err(|e| anyhow!("{e}"))?;
    let inputs = parse_inputs(&args.inputs, args.port.as_deref())?;
    let report = replay(
        &cfg,
        &inputs,
        &out,
        usize::from(args.batch),
        args.fib,
        args.engine,
    )?;
    if args.json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.to_json(&cfg))?
        ))
    } else {
        emit(&report.table(&cfg))
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Splits `--in` values into (port or interface name, file).
fn parse_inputs(values: &[String], port: Option<&str>) -> anyhow::Result<Vec<(String, PathBuf)>> {
    if values.is_empty() {
        bail!("give at least one --in [PORT=]FILE");
    }
    values
        .iter()
        .map(|v| match v.split_once('=') {
            Some((p, f)) if !p.is_empty() && !f.is_empty() => Ok((p.to_owned(), PathBuf::from(f))),
            Some(_) => bail!("--in {v}: expected PORT=FILE"),
            None => match port {
                Some(p) => Ok((p.to_owned(), PathBuf::from(v))),
                None => bail!(
                    "--in {v}: say which port it arrives on (--port IFNAME or --in IFNAME={v})"
                ),
            },
        })
        .collect()
}

/// What one replay did.
#[derive(Debug)]
pub struct Report {
    /// The worker's counters.
    pub counters: Counters,
    /// Frames written per output file name (`d1.pcap`, `punt.pcap`, ...).
    pub outputs: BTreeMap<String, u64>,
    /// Per-rule counters of the config's firewall, when it has one.
    pub firewall: Option<firewall::FirewallSummary>,
    /// With `--engine xdp`: what the program finished and handed on.
    pub xdp: Option<xdp_engine::EngineCounters>,
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
        if i.vlan.is_none() {
            if let Some(p) = ports.iter().position(|p| *p == i.port) {
                return Ok(p as PortId);
            }
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

/// Runs the pipeline over `inputs` (port or interface name, pcap file),
/// writing the output pcaps into `out`.
pub fn replay(
    cfg: &Config,
    inputs: &[(String, PathBuf)],
    out: &Path,
    batch: usize,
    fib: FibKind,
    engine: EngineKind,
) -> anyhow::Result<Report> {
    let worker_cfg = WorkerConfig {
        max_batch: batch,
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(worker_cfg);
    match (engine, fib) {
        (EngineKind::User, FibKind::Fast) => {
            let rt = cfg.build_fast_tables().map_err(|e| anyhow!("{e}"))?;
            let report = replay_with(cfg, &rt, inputs, out, batch, &mut |port, now, frames| {
                Ok(run_user(&mut worker, &rt.tables, now, port, frames))
            })?;
            Ok(finish(report, &rt, &worker, None, None))
        }
        (EngineKind::User, FibKind::Reference) => {
            let rt = cfg.build_reference_tables().map_err(|e| anyhow!("{e}"))?;
            let report = replay_with(cfg, &rt, inputs, out, batch, &mut |port, now, frames| {
                Ok(run_user(&mut worker, &rt.tables, now, port, frames))
            })?;
            Ok(finish(report, &rt, &worker, None, None))
        }
        (EngineKind::Xdp, FibKind::Reference) => {
            bail!("--engine xdp walks the fast FIB in BPF maps; --fib reference is for the user-space engine")
        }
        (EngineKind::Xdp, FibKind::Fast) => {
            let rt = cfg.build_fast_tables().map_err(|e| anyhow!("{e}"))?;
            let t = &rt.tables;
            let (n4, l4) = (t.fib4.layout().nodes.len(), t.fib4.layout().leaves.len());
            let (n6, l6) = (t.fib6.layout().nodes.len(), t.fib6.layout().leaves.len());
            let cap = xdp_engine::FibCapacity::for_sizes(n4, l4, n6, l6);
            let mut engine = xdp_engine::Engine::load(xdp_engine::Mode::Test, cap)?;
            let fw = t.acl.as_ref().map(firewall::PipelineFirewall::firewall);
            engine.publish(xdp_engine::Image::compile(
                &t.datapath(),
                &t.fib4,
                &t.fib6,
                fw,
                &cap,
            )?)?;
            let report = replay_with(cfg, &rt, inputs, out, batch, &mut |port, now, frames| {
                Ok(run_xdp(&mut engine, &mut worker, t, now, port, frames)?)
            })?;
            let counters = engine.counters(t.interfaces().len())?;
            let rules = match t.acl.as_ref() {
                Some(acl) => engine.firewall_counters(acl.firewall())?,
                None => None,
            };
            Ok(finish(report, &rt, &worker, Some(counters), rules))
        }
    }
}

/// One batch through the chosen engine.
type RunBatch<'a> = dyn FnMut(PortId, u64, &[&[u8]]) -> anyhow::Result<BatchResult> + 'a;

fn replay_with<F4: Lookup<u32>, F6: Lookup<u128>>(
    cfg: &Config,
    rt: &config::Runtime<F4, F6>,
    inputs: &[(String, PathBuf)],
    out: &Path,
    batch: usize,
    run: &mut RunBatch<'_>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut streams = Vec::new();
    for (port, path) in inputs {
        let port = resolve_port(cfg, &rt.ports, port)?;
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
            write_batch(rt, &pending, &result, &mut outputs)?;
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
    outputs: BTreeMap<String, u64>,
    rt: &config::Runtime<F4, F6>,
    worker: &Worker,
    xdp: Option<xdp_engine::EngineCounters>,
    xdp_rules: Option<firewall::RuleCounters>,
) -> Report {
    let firewall = rt.tables.acl.as_ref().map(|acl| {
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
    }
}

/// Writes one batch's results: each frame in input order, then the
/// generated packets.
fn write_batch<F4, F6>(
    rt: &config::Runtime<F4, F6>,
    pending: &[(u64, Vec<u8>)],
    result: &BatchResult,
    outputs: &mut Outputs,
) -> anyhow::Result<()> {
    let now = pending.first().map_or(0, |p| p.0);
    for ((ts, data), r) in pending.iter().zip(&result.frames) {
        match r {
            FrameResult::Forward(port, bytes) => {
                let name = format!("{}.pcap", rt.port_name(*port).unwrap_or("unknown-port"));
                outputs.write(&name, *ts, bytes)?;
            }
            FrameResult::Punt(_) => outputs.write("punt.pcap", *ts, data)?,
            FrameResult::Drop(_) => outputs.write("drop.pcap", *ts, data)?,
            FrameResult::Consumed => {}
        }
    }
    for (port, bytes) in &result.generated {
        let name = format!("{}.pcap", rt.port_name(*port).unwrap_or("unknown-port"));
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
            obj.insert("xdp".into(), xdp_json(x));
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

/// The XDP program's own counters as JSON: frames it finished, exceptions
/// by cause.
pub fn xdp_json(x: &xdp_engine::EngineCounters) -> serde_json::Value {
    let exceptions: serde_json::Map<String, serde_json::Value> = xdp_engine::layout::EXCEPTIONS
        .iter()
        .map(|&(i, name)| (name.to_string(), x.exceptions[i as usize].into()))
        .collect();
    serde_json::json!({
        "finished": x.counters.rx_frames,
        "forwarded": x.counters.forwarded_ipv4 + x.counters.forwarded_ipv6,
        "to_host": x.to_host,
        "exceptions": exceptions,
        "exceptions_lost": x.exceptions_lost,
        "tx_redirect_failed": x.tx_redirect_failed,
    })
}

/// Writes the example config and a pcap of sample traffic into `dir`, then
/// replays it into `dir/out`.
fn run_demo(dir: &Path, json: bool, fib: FibKind) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let config_path = dir.join("router.toml");
    std::fs::write(&config_path, demo::CONFIG)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let input = dir.join("gen.pcap");
    let mut w = pcap::Writer::new(BufWriter::new(
        File::create(&input).with_context(|| format!("creating {}", input.display()))?,
    ))?;
    for (n, frame) in demo::frames().iter().enumerate() {
        w.write(1_700_000_000_000_000_000 + n as u64 * 1_000_000, frame)?;
    }
    w.finish()?;
    let cfg = Config::load(&config_path).map_err(|e| anyhow!("{e}"))?;
    let out = dir.join("out");
    let report = replay(
        &cfg,
        &[("d0".to_owned(), input.clone())],
        &out,
        32,
        fib,
        EngineKind::User,
    )?;
    if json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.to_json(&cfg))?
        ))
    } else {
        emit(&format!(
            "fastfwd replay --config {} --in d0={} --out {}\n\n{}\ninspect with: tcpdump -enr {}\n",
            config_path.display(),
            input.display(),
            out.display(),
            report.table(&cfg),
            out.join("d1.pcap").display()
        ))
    }
}

/// The demo: the lab router of docs/lab-methods.md and a handful of frames
/// arriving from the generator side (d0).
mod demo {
    pub const CONFIG: &str = include_str!("../../../../examples/router.toml");

    const ROUTER_D0: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];
    const GEN: [u8; 6] = [0x02, 0, 0, 0, 0, 0x08];

    /// RFC 1071 checksum of `data` folded with `sum`.
    fn checksum(mut sum: u32, data: &[u8]) -> u16 {
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            sum += u32::from(w);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn ethernet(dst: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(14 + payload.len());
        f.extend_from_slice(&dst);
        f.extend_from_slice(&GEN);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn ipv4(src: [u8; 4], dst: [u8; 4], ttl: u8, proto: u8, payload: &[u8]) -> Vec<u8> {
        let len = (20 + payload.len()) as u16;
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&[0x12, 0x34, 0x40, 0, ttl, proto, 0, 0]);
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        let c = checksum(0, &h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(payload);
        h
    }

    fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, ttl: u8) -> Vec<u8> {
        let data = b"fastfwd demo payload";
        let len = (8 + data.len()) as u16;
        let mut u = Vec::new();
        u.extend_from_slice(&sport.to_be_bytes());
        u.extend_from_slice(&dport.to_be_bytes());
        u.extend_from_slice(&len.to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(data);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src);
        pseudo.extend_from_slice(&dst);
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&len.to_be_bytes());
        let sum: u32 = pseudo
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        let c = checksum(sum, &u);
        u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        ethernet(ROUTER_D0, 0x0800, &ipv4(src, dst, ttl, 17, &u))
    }

    fn udp6(src: [u8; 16], dst: [u8; 16], hop_limit: u8) -> Vec<u8> {
        let data = b"fastfwd demo payload";
        let len = (8 + data.len()) as u16;
        let mut u = Vec::new();
        u.extend_from_slice(&4000u16.to_be_bytes());
        u.extend_from_slice(&5000u16.to_be_bytes());
        u.extend_from_slice(&len.to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(data);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src);
        pseudo.extend_from_slice(&dst);
        pseudo.extend_from_slice(&u32::from(len).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
        let sum: u32 = pseudo
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        let c = checksum(sum, &u);
        u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&len.to_be_bytes());
        ip.extend_from_slice(&[17, hop_limit]);
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        ip.extend_from_slice(&u);
        ethernet(ROUTER_D0, 0x86dd, &ip)
    }

    fn arp_request(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&GEN);
        a.extend_from_slice(&sender);
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&target);
        let mut f = ethernet([0xff; 6], 0x0806, &a);
        f.resize(60, 0);
        f
    }

    fn echo_request(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut icmp = vec![8, 0, 0, 0, 0, 1, 0, 1];
        icmp.extend_from_slice(b"ping");
        let c = checksum(0, &icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        ethernet(ROUTER_D0, 0x0800, &ipv4(src, dst, 64, 1, &icmp))
    }

    /// A few frames of each kind: forwarded flows, a TTL expiry, a bad
    /// checksum, no route, ARP and ping for the router.
    pub fn frames() -> Vec<Vec<u8>> {
        let gen4 = [198, 18, 0, 108];
        let mut v = Vec::new();
        for i in 0..8u8 {
            v.push(udp4(
                [198, 18, 10, 1 + i],
                [198, 19, 10, 1 + i % 4],
                2000 + u16::from(i),
                3000,
                64,
            ));
        }
        let mut gen6 = [0u8; 16];
        gen6[..4].copy_from_slice(&[0x20, 0x01, 0, 2]);
        gen6[15] = 0x08;
        // 2001:2:0:8001::1, behind the sink's router.
        let mut sink6 = gen6;
        sink6[6] = 0x80;
        sink6[7] = 0x01;
        sink6[15] = 0x01;
        v.push(udp6(gen6, sink6, 64));
        v.push(udp4(gen4, [198, 19, 10, 1], 2000, 3000, 1));
        let mut bad = udp4(gen4, [198, 19, 10, 1], 2000, 3000, 64);
        bad[24] ^= 0xff;
        v.push(bad);
        v.push(udp4(gen4, [203, 0, 113, 1], 2000, 3000, 64));
        v.push(arp_request(gen4, [198, 18, 0, 10]));
        v.push(echo_request(gen4, [198, 18, 0, 10]));
        v
    }
}
