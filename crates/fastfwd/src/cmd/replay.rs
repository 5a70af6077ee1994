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

use anyhow::{Context, anyhow, bail};
use config::Config;
use netio::pcap;
use router::replay::{ReplayEngine, replay};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

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
    /// Print the path of each frame through the stages (the first COUNT,
    /// 10,000 at most, all up to that without a count), as `fastfwd trace
    /// show` does for a running router.
    #[arg(long, value_name = "COUNT", num_args = 0..=1, default_missing_value = "10000")]
    pub trace: Option<usize>,
    /// With --trace: only frames that match (tcpdump-like; docs/operations.md).
    #[arg(long, requires = "trace")]
    pub trace_filter: Option<String>,
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

impl From<EngineKind> for ReplayEngine {
    fn from(e: EngineKind) -> ReplayEngine {
        match e {
            EngineKind::User => ReplayEngine::User,
            EngineKind::Xdp => ReplayEngine::Xdp,
        }
    }
}

impl From<FibKind> for router::replay::FibKind {
    fn from(f: FibKind) -> router::replay::FibKind {
        match f {
            FibKind::Fast => router::replay::FibKind::Fast,
            FibKind::Reference => router::replay::FibKind::Reference,
        }
    }
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
        args.fib.into(),
        args.engine.into(),
        tracer(&args)?,
    )?;
    if args.trace.is_some() && !args.json {
        emit(&router::trace::text(&report.trace))?;
    }
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
        fib.into(),
        ReplayEngine::User,
        None,
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

/// The demo: the lab router of docs/lab.md and a handful of frames
/// arriving from the generator side (d0).
mod demo {
    pub const CONFIG: &str = include_str!("../../../../examples/router.toml");

    const ROUTER_D0: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];
    const GEN: [u8; 6] = [0x02, 0, 0, 0, 0, 0x08];

    use wire::checksum::{checksum, combine, finish, pseudo_header_v4, pseudo_header_v6, sum};

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
        let c = checksum(&h);
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
        let pseudo = pseudo_header_v4(src.into(), dst.into(), 17, len);
        let c = finish(combine(&[pseudo, sum(&u)]));
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
        let pseudo = pseudo_header_v6(&src.into(), &dst.into(), 17, u32::from(len));
        let c = finish(combine(&[pseudo, sum(&u)]));
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
        let c = checksum(&icmp);
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

/// The tracer `--trace` / `--trace-filter` ask for.
fn tracer(args: &Args) -> anyhow::Result<Option<pipeline::Tracer>> {
    let Some(n) = args.trace else {
        return Ok(None);
    };
    let filter = match &args.trace_filter {
        Some(f) => Some(wire::filter::Filter::parse(f)?),
        None => None,
    };
    Ok(Some(pipeline::Tracer::new(n, filter)))
}
