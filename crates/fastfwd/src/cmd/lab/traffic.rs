//! `fastfwd lab gen`, `lab recv`, `lab udp-sink`.

use anyhow::Context;
use clap::Args as ClapArgs;
use lab::flows::FlowSet;
use lab::generator::{self, FrameBuilder, GenConfig};
use lab::recv::{Receiver, RecvConfig};
use lab::topo::{self, DUT_IN_MAC, GEN_MAC};
use lab::udp_sink::{self, Method, SinkConfig};
use lab::xdp::XdpReceiver;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let parts: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("MAC `{s}`"))?;
    parts
        .try_into()
        .map_err(|_| anyhow::anyhow!("MAC `{s}`: need six bytes"))
}

fn enter(ns: &str, cpu: Option<usize>) -> anyhow::Result<()> {
    if ns != "-" {
        topo::enter_netns(ns).with_context(|| {
            format!("enter namespace {ns} (is the lab up? `fastfwd lab topo up`)")
        })?;
    }
    if let Some(c) = cpu {
        topo::pin_current_thread(c).with_context(|| format!("pin to cpu {c}"))?;
    }
    Ok(())
}

/// `lab gen --mode`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GenMode {
    /// BPF_PROG_RUN with live frames.
    Live,
    /// AF_PACKET sendmmsg.
    Packet,
}

/// `lab recv --mode`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecvMode {
    /// Count and check in an XDP program, then drop.
    Xdp,
    /// An AF_PACKET TPACKET_V3 ring.
    Packet,
}

#[derive(ClapArgs)]
pub struct GenArgs {
    /// Lab tag (namespace fflab-TAG-gen, interface g0).
    #[arg(long, default_value = "lab")]
    tag: String,
    /// Namespace to send from (`-` for the current one); default the lab's gen.
    #[arg(long)]
    netns: Option<String>,
    /// Interface.
    #[arg(short = 'i', long, default_value = "g0")]
    ifname: String,
    /// Source range, pkt-gen style: A[:P][-B[:Q]] or [A6][:P][-[B6][:Q]].
    #[arg(short = 's', long)]
    src: Option<String>,
    /// Destination range.
    #[arg(short = 'd', long)]
    dst: Option<String>,
    /// IPv6 (default ranges 2001:2:0:1::1-14 to 2001:2:0:8001::1-64).
    #[arg(short = '6')]
    v6: bool,
    /// Frame length without FCS, 60..1514 (IPv6 from 62; stamps need 80).
    #[arg(short = 'l', long, default_value_t = 60)]
    len: usize,
    /// Rate: pps (`500000`, `500k`, `1.2M`) or a fraction of 10 GbE line rate (`20%`).
    #[arg(short = 'R', long)]
    rate: Option<String>,
    /// Packets to send.
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// Seconds to send.
    #[arg(short = 't', long)]
    duration: Option<f64>,
    /// Frames per sendmmsg.
    #[arg(short = 'b', long, default_value_t = 64)]
    batch: usize,
    /// How frames are sent: `live` (an XDP program in live-frames mode:
    /// the next hop gets XDP frames, as from a native-XDP NIC) or `packet`
    /// (AF_PACKET sendmmsg: the next hop gets socket buffers).
    #[arg(long, value_enum, default_value_t = GenMode::Packet)]
    mode: GenMode,
    /// Destination MAC (default: dut's d0).
    #[arg(short = 'D', long)]
    dst_mac: Option<String>,
    /// Source MAC (default: gen's g0).
    #[arg(short = 'S', long)]
    src_mac: Option<String>,
    /// Core to run on.
    #[arg(long)]
    cpu: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn default_ranges(v6: bool) -> (&'static str, &'static str) {
    if v6 {
        (
            "[2001:2:0:1::1]-[2001:2:0:1::14]",
            "[2001:2:0:8001::1]-[2001:2:0:8001::64]",
        )
    } else {
        (
            "198.18.10.1:2000-198.18.10.20",
            "198.19.10.1:2000-198.19.10.10",
        )
    }
}

pub fn generate(a: GenArgs) -> anyhow::Result<()> {
    super::need_root()?;
    let (ds, dd) = default_ranges(a.v6);
    let flows = FlowSet::parse(
        a.src.as_deref().unwrap_or(ds),
        a.dst.as_deref().unwrap_or(dd),
    )?;
    let dst_mac = a
        .dst_mac
        .as_deref()
        .map(parse_mac)
        .transpose()?
        .unwrap_or(DUT_IN_MAC);
    let src_mac = a
        .src_mac
        .as_deref()
        .map(parse_mac)
        .transpose()?
        .unwrap_or(GEN_MAC);
    let frames = FrameBuilder::new(flows.clone(), a.len, src_mac, dst_mac)?;
    let line = generator::line_rate_pps(10e9, a.len);
    let rate = match &a.rate {
        Some(r) => Some(
            generator::parse_rate(r, line)
                .ok_or_else(|| anyhow::anyhow!("rate `{r}`: expected pps, k/M suffix or N%"))?,
        ),
        None => None,
    };
    if a.count.is_none() && a.duration.is_none() {
        anyhow::bail!("give --count or --duration");
    }
    let cfg = GenConfig {
        ifname: a.ifname.clone(),
        frames,
        rate_pps: rate,
        count: a.count,
        duration: a.duration.map(Duration::from_secs_f64),
        batch: a.batch,
    };
    lab::bench::install_interrupt_handler()?;
    let ns = a
        .netns
        .clone()
        .unwrap_or_else(|| format!("fflab-{}-gen", a.tag));
    enter(&ns, a.cpu)?;
    if !a.json {
        eprintln!(
            "gen: {} flows, {}-byte frames{}, on {} in {}, rate {}",
            flows.len(),
            a.len,
            if cfg.frames.stamped() {
                " (stamped)"
            } else {
                " (too short for stamps)"
            },
            a.ifname,
            ns,
            rate.map_or("max".into(), |r| format!("{r:.0} pps"))
        );
    }
    let rep = match a.mode {
        GenMode::Live => lab::xdp::run_live(&cfg, lab::bench::interrupt_flag())?,
        GenMode::Packet => generator::run(&cfg, lab::bench::interrupt_flag())?,
    };
    if a.json {
        super::print_json(&rep)?;
    } else {
        for (i, s) in rep.per_second_sent.iter().enumerate() {
            println!("{:>4}s {:>10} pps sent", i + 1, s);
        }
        println!(
            "attempted {} sent {} backpressure(ENOBUFS) {} in {:.3} s: attempted {:.0} pps, sent {:.0} pps{}",
            rep.attempted,
            rep.sent,
            rep.backpressure,
            rep.elapsed_s,
            rep.attempted_pps,
            rep.sent_pps,
            if rep.limited(0.01) {
                " (below the offered load: limited by generator)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

#[derive(ClapArgs)]
pub struct RecvArgs {
    /// Lab tag (namespace fflab-TAG-sink, interface s0; output counters of dut's d1).
    #[arg(long, default_value = "lab")]
    tag: String,
    /// Namespace to receive in (`-` for the current one).
    #[arg(long)]
    netns: Option<String>,
    /// Interface.
    #[arg(short = 'i', long, default_value = "s0")]
    ifname: String,
    /// Seconds to run (default: until Ctrl-C).
    #[arg(short = 't', long)]
    duration: Option<f64>,
    /// Seconds skipped at the start (latency and rates).
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// Seconds skipped at the end.
    #[arg(long, default_value_t = 0)]
    cooldown: u32,
    /// The generator's attempted count, to report loss.
    #[arg(long)]
    attempted: Option<u64>,
    /// Core to run on.
    #[arg(long)]
    cpu: Option<usize>,
    /// How frames are received: `xdp` (counted, checked and dropped in an
    /// XDP program on the interface) or `packet` (a TPACKET_V3 ring).
    #[arg(long, value_enum, default_value_t = RecvMode::Packet)]
    mode: RecvMode,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn recv(a: RecvArgs) -> anyhow::Result<()> {
    super::need_root()?;
    lab::bench::install_interrupt_handler()?;
    let ns = a
        .netns
        .clone()
        .unwrap_or_else(|| format!("fflab-{}-sink", a.tag));
    let output = (a.netns.is_none()).then(|| (format!("fflab-{}-dut", a.tag), "d1".to_string()));
    enter(&ns, a.cpu)?;
    let cfg = RecvConfig {
        ifname: a.ifname.clone(),
        duration: a.duration.map(Duration::from_secs_f64),
        warmup_s: a.warmup,
        cooldown_s: a.cooldown,
        output,
        print_rows: !a.json,
    };
    let rep = match a.mode {
        RecvMode::Xdp => XdpReceiver::open(cfg)?.run(lab::bench::interrupt_flag())?,
        RecvMode::Packet => Receiver::open(cfg)?.run(lab::bench::interrupt_flag())?,
    };
    let lost = a.attempted.map(|n| rep.lost(n));
    if a.json {
        super::print_json(&serde_json::json!({"report": rep, "lost": lost}))?;
    } else {
        println!(
            "received {} (unique stamped), reordered {}, duplicates {}, other frames {}, ring drops {}{}",
            rep.received,
            rep.reordered,
            rep.duplicates,
            rep.other_frames,
            rep.ring_drops,
            lost.map_or(String::new(), |l| format!(", lost {l}"))
        );
        if let Some(l) = rep.latency {
            println!(
                "latency us: min {:.1} median {:.1} p99 {:.1} p99.9 {:.1} max {:.1} ({} samples)",
                l.min_ns as f64 / 1e3,
                l.median_ns as f64 / 1e3,
                l.p99_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3,
                l.samples
            );
        }
    }
    Ok(())
}

#[derive(ClapArgs)]
pub struct SinkArgs {
    /// Lab tag (namespace fflab-TAG-sink).
    #[arg(long, default_value = "lab")]
    tag: String,
    /// Namespace (`-` for the current one).
    #[arg(long)]
    netns: Option<String>,
    /// UDP port.
    #[arg(long, default_value_t = 9)]
    port: u16,
    /// Address to bind (default 0.0.0.0, or :: with -6).
    #[arg(long)]
    bind: Option<IpAddr>,
    /// IPv6.
    #[arg(short = '6')]
    v6: bool,
    /// Method (repeatable): recvmmsg, recvmsg, read, recvfrom; default all in turn.
    #[arg(short = 'm', long)]
    method: Vec<String>,
    /// recvmmsg batch size.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// connect() to the sender after the first datagram.
    #[arg(long)]
    connect: bool,
    /// Datagrams per run.
    #[arg(short = 'c', long, default_value_t = 1_000_000)]
    count: u64,
    /// Runs per method.
    #[arg(short = 'r', long, default_value_t = 1)]
    repeat: u32,
    /// Give up after this many idle seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Core to run on.
    #[arg(long)]
    cpu: Option<usize>,
    /// Print rows as JSON.
    #[arg(long)]
    json: bool,
}

pub fn udp_sink(a: SinkArgs) -> anyhow::Result<()> {
    let ns = a
        .netns
        .clone()
        .unwrap_or_else(|| format!("fflab-{}-sink", a.tag));
    enter(&ns, a.cpu)?;
    let methods = if a.method.is_empty() {
        Method::all(a.batch)
    } else {
        a.method
            .iter()
            .map(|m| {
                Method::parse(m, a.batch).ok_or_else(|| {
                    anyhow::anyhow!("method `{m}`: recvmmsg, recvmsg, read or recvfrom")
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let ip = a.bind.unwrap_or(if a.v6 {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    });
    let cfg = SinkConfig {
        bind: SocketAddr::new(ip, a.port),
        methods,
        count: a.count,
        repeat: a.repeat,
        connect: a.connect,
        idle_timeout: Duration::from_secs_f64(a.timeout),
    };
    let sock = udp_sink::bind(&cfg)?;
    if !a.json {
        println!("{}", udp_sink::header());
    }
    let rows = udp_sink::run(&sock, &cfg, |r| {
        if !a.json {
            println!("{}", r.line());
        }
    })?;
    if a.json {
        super::print_json(&rows)?;
    }
    Ok(())
}
