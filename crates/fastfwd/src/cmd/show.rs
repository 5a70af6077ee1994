//! `fastfwd show …`: read-only questions to the running daemon over its
//! control socket (docs/control-protocol.md).

use anyhow::{Context, Result, bail};
use control::protocol::{DEFAULT_SOCKET, Request, reply};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options every control-socket client takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientOpts {
    /// Print the daemon's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// The daemon's control socket.
    #[arg(long, global = true, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
    #[command(flatten)]
    pub opts: ClientOpts,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Per-interface packets, errors, drops and bytes in and out.
    Interfaces {
        /// Print one line of totals every N seconds, like `netstat -iw N`.
        #[arg(short = 'w', long = "wait")]
        wait: Option<u64>,
        /// With -w: stop after this many lines.
        #[arg(short = 'c', long)]
        count: Option<u64>,
    },
    /// Workers: CPU, ports, loop and sleep counts.
    Workers,
    /// Drops and punts by reason.
    Drops,
    /// Firewall rules with their packet and byte counters, connection table.
    Firewall,
    /// Routes, or the route a prefix or address selects.
    Route {
        /// A prefix or address.
        prefix: Option<String>,
    },
    /// Neighbours (ARP / ND entries in use).
    #[command(alias = "neighbours", alias = "neigh")]
    Neighbors,
    /// Every counter in the OpenMetrics text format (what `run --metrics`
    /// serves to Prometheus).
    Metrics,
    /// Per worker and pipeline stage: calls, packets, vector size and time
    /// per packet since the start or `fastfwd clear runtime` (as VPP's
    /// `show runtime`); the XDP program's exception rate.
    Runtime,
}

/// Sends `req` and returns the result, or the daemon's error.
pub fn ask(socket: &Path, req: &Request) -> Result<Value> {
    let resp = control::server::request(socket, req)?;
    if !resp.ok {
        bail!("{}", resp.error.unwrap_or_else(|| "request failed".into()));
    }
    Ok(resp.result.unwrap_or(Value::Null))
}

/// Sends `req` and reads the result as the reply type `T`.
pub fn ask_as<T: DeserializeOwned>(socket: &Path, req: &Request) -> Result<T> {
    let v = ask(socket, req)?;
    serde_json::from_value(v).with_context(|| format!("the daemon's reply to {req:?}"))
}

fn print_json(v: &impl Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}

/// A route as `ip route` prints one.
fn route_line(r: &reply::RouteView) -> String {
    format!(
        "{} {} proto {}",
        r.prefix,
        r.next_hops.join(" nexthop "),
        r.origin.name()
    )
}

pub fn run(a: Args) -> Result<()> {
    let sock = &a.opts.socket;
    let json = a.opts.json;
    match a.what {
        What::Interfaces {
            wait: Some(secs),
            count,
        } => watch(sock, secs.max(1), count, json),
        What::Interfaces { .. } => {
            let v: reply::Interfaces = ask_as(sock, &Request::ShowInterfaces)?;
            if json {
                return print_json(&v);
            }
            if let Some(on_exit) = &v.on_exit {
                println!("XDP engine; on exit its program: {on_exit}");
            }
            println!(
                "{:<12} {:<10} {:>12} {:>8} {:>14} {:>12} {:>8} {:>14}",
                "Name", "Port", "Ipkts", "Ierrs", "Ibytes", "Opkts", "Odrops", "Obytes"
            );
            for i in &v.interfaces {
                println!(
                    "{:<12} {:<10} {:>12} {:>8} {:>14} {:>12} {:>8} {:>14}",
                    i.name,
                    i.port,
                    i.rx_packets,
                    i.rx_errors,
                    i.rx_bytes,
                    i.tx_packets,
                    i.tx_drops,
                    i.tx_bytes
                );
            }
            for i in &v.interfaces {
                if let Some(why) = &i.pipeline_egress {
                    println!("{}: {why}", i.name);
                }
                if i.kernel_tx_dropped > 0 {
                    println!(
                        "{}: {} frames dropped by the kernel on their way out of bond {} or its members",
                        i.name, i.kernel_tx_dropped, i.port
                    );
                }
            }
            if let Some(why) = v
                .xdp
                .as_ref()
                .and_then(|x| x.redirect_drops_uncounted.as_ref())
            {
                println!(
                    "frames the kernel drops after the XDP program's redirects are not counted: {why}"
                );
            }
            Ok(())
        }
        What::Workers => {
            let v: Vec<reply::Worker> = ask_as(sock, &Request::ShowWorkers)?;
            if json {
                return print_json(&v);
            }
            println!(
                "{:<6} {:<4} {:<7} {:>12} {:>10} {:>8} {:>10} {:>10} Ports (rx/tx packets)",
                "Worker",
                "CPU",
                "Backend",
                "BusyRounds",
                "Sleeps",
                "Held",
                "HandedOff",
                "HandoffDrp"
            );
            for w in &v {
                let ports: Vec<String> = w
                    .ports
                    .iter()
                    .map(|p| {
                        format!(
                            "{} {}/{}",
                            p.port, p.counters.rx_packets, p.counters.tx_packets
                        )
                    })
                    .collect();
                println!(
                    "{:<6} {:<4} {:<7} {:>12} {:>10} {:>8} {:>10} {:>10} {}",
                    w.id,
                    w.core,
                    w.backend,
                    w.busy_rounds,
                    w.sleeps,
                    w.held,
                    w.handed_off,
                    w.handoff_dropped,
                    ports.join(", ")
                );
            }
            Ok(())
        }
        What::Drops => {
            let v: reply::Drops = ask_as(sock, &Request::ShowDrops)?;
            if json {
                return print_json(&v);
            }
            println!("{:<28} {:>12}  Description", "Drop reason", "Count");
            for d in &v.drops {
                println!("{:<28} {:>12}  {}", d.reason, d.count, d.description);
            }
            println!("\n{:<28} {:>12}  Description", "Punt reason", "Count");
            for d in &v.punts {
                println!("{:<28} {:>12}  {}", d.reason, d.count, d.description);
            }
            println!(
                "\n{:<28} {:>12}  Description",
                "ICMP error not sent", "Count"
            );
            for d in &v.icmp_suppressed {
                println!("{:<28} {:>12}  {}", d.cause, d.count, d.description);
            }
            let line = |name: &str, n: u64, what: &str| println!("{name:<28} {n:>12}  {what}");
            line(
                "icmp_rate_limited",
                v.icmp_rate_limited,
                "ICMP errors over the rate limit",
            );
            println!();
            line(
                "held_expired",
                v.held_expired,
                "frames whose neighbour stayed unresolved for 1 s",
            );
            line(
                "neighbour_requests",
                v.neighbour_requests,
                "neighbour resolutions asked of the kernel",
            );
            line(
                "neighbour_requests_capped",
                v.neighbour_requests_capped,
                "neighbour resolutions not asked, over the cap",
            );
            line("tx_ring_full", v.tx_ring_full, "TX ring full");
            line(
                "xdp_redirects_dropped",
                v.xdp_redirects_dropped,
                "dropped by the kernel after the XDP program redirected them (port refused XDP frames, or ring full)",
            );
            line(
                "xdp_exceptions_ring_full",
                v.xdp_exceptions_ring_full,
                "exceptions dropped by the kernel: the AF_XDP socket's ring was full",
            );
            line(
                "bond_tx_dropped",
                v.bond_tx_dropped,
                "dropped by the kernel on their way out of a bond or its members",
            );
            line(
                "handoff_dropped",
                v.handoff_dropped,
                "the ring to the worker that owns their flow was full",
            );
            line(
                "rx_ring_full",
                v.rx_ring_full,
                "dropped by the kernel before fastfwd saw them",
            );
            line(
                "rx_oversize",
                v.rx_oversize,
                &format!(
                    "larger than a frame buffer ({} bytes), dropped on receive",
                    netio::MAX_FRAME
                ),
            );
            Ok(())
        }
        What::Firewall => {
            let v: reply::Firewall = ask_as(sock, &Request::ShowFirewall)?;
            if json {
                return print_json(&v);
            }
            let Some(fw) = &v.firewall else {
                println!("no firewall rules configured: every packet is forwarded");
                return Ok(());
            };
            print!("{fw}");
            if let Some(ct) = &v.conntrack {
                println!(
                    "conntrack: {} of {} slots in use, {} inserts, {} insert failures, {} evictions, {} expirations",
                    ct.occupancy,
                    ct.capacity,
                    ct.inserts,
                    ct.insert_failures,
                    ct.evictions,
                    ct.expirations
                );
            }
            if let Some(f) = &v.fast_path {
                println!(
                    "conntrack in the XDP program: {} flows handed over ({} refused, table full), {} packets finished there, {} handed to the workers with their state",
                    f.handoffs, f.refused, f.program_packets, f.worker_packets
                );
            }
            println!(
                "rejects rate-limited into drops: {}",
                v.rejects_rate_limited
            );
            Ok(())
        }
        What::Route {
            prefix: Some(prefix),
        } => {
            let v: Vec<reply::RouteView> = ask_as(
                sock,
                &Request::ShowRoute {
                    prefix: Some(prefix),
                },
            )?;
            if json {
                return print_json(&v);
            }
            for r in &v {
                println!("{}", route_line(r));
            }
            Ok(())
        }
        What::Route { prefix: None } => {
            // The whole table arrives streamed: printed as it comes.
            use std::io::Write;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut first = true;
            let mut failed = None;
            let resp =
                control::server::request_each(sock, &Request::ShowRoute { prefix: None }, |r| {
                    let line = if json {
                        format!("{}{r}", if first { "[" } else { "," })
                    } else {
                        match serde_json::from_value::<reply::RouteView>(r) {
                            Ok(r) => route_line(&r),
                            Err(e) => format!("(a route the client cannot read: {e})"),
                        }
                    };
                    first = false;
                    if failed.is_none()
                        && let Err(e) = writeln!(out, "{line}")
                    {
                        failed = Some(e);
                    }
                })?;
            if !resp.ok {
                bail!("{}", resp.error.unwrap_or_else(|| "request failed".into()));
            }
            if json {
                writeln!(out, "{}", if first { "[]" } else { "]" })?;
            }
            out.flush()?;
            match failed {
                Some(e) => Err(e.into()),
                None => Ok(()),
            }
        }
        What::Runtime => {
            let v: reply::Runtime = ask_as(sock, &Request::ShowRuntime)?;
            if json {
                return print_json(&v);
            }
            print!("{}", runtime_table(&v));
            Ok(())
        }
        What::Metrics => {
            let text: String = ask_as(sock, &Request::ShowMetrics)?;
            print!("{text}");
            Ok(())
        }
        What::Neighbors => {
            let v: Vec<reply::NeighbourView> = ask_as(sock, &Request::ShowNeighbors)?;
            if json {
                return print_json(&v);
            }
            for n in &v {
                println!(
                    "{} dev {} lladdr {} proto {}",
                    n.ip,
                    n.interface,
                    n.mac,
                    n.origin.name()
                );
            }
            Ok(())
        }
    }
}

/// `show runtime` as text: one block per worker, a line per stage.
pub fn runtime_table(v: &reply::Runtime) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "Time {:.1} s", v.seconds);
    for w in &v.workers {
        let _ = writeln!(s, "Worker {} (cpu {}, {})", w.id, w.core, w.backend);
        let _ = writeln!(
            s,
            "  {:<10} {:>12} {:>14} {:>13} {:>12}",
            "Stage", "Calls", "Packets", "Vectors/Call", "ns/Packet"
        );
        for st in &w.stages {
            let _ = writeln!(
                s,
                "  {:<10} {:>12} {:>14} {:>13.2} {:>12.1}",
                st.stage, st.calls, st.packets, st.vectors_per_call, st.ns_per_packet
            );
        }
        let total: f64 = w.stages.iter().map(|st| st.ns as f64).sum();
        let packets = w.stages.first().map_or(0, |st| st.packets);
        if packets > 0 {
            let _ = writeln!(
                s,
                "  {:<10} {:>12} {:>14} {:>13} {:>12.1}",
                "all",
                "",
                packets,
                "",
                total / packets as f64
            );
        }
    }
    if let Some(x) = &v.xdp {
        let _ = writeln!(
            s,
            "XDP program: {} finished ({} forwarded, {} to the host), {} exceptions to the pipeline ({:.3}%), {} lost",
            x.program.finished,
            x.program.forwarded,
            x.program.to_host,
            x.exceptions,
            x.exception_ratio * 100.0,
            x.program.exceptions_lost
        );
        for (cause, n) in x.program.exceptions.iter().filter(|(_, n)| **n > 0) {
            let _ = writeln!(s, "  {cause:<24} {n:>12}");
        }
        let _ = writeln!(
            s,
            "  {:<10} {:>12} {:>12} {:>12} {:>12}",
            "CPU", "Finished", "Forwarded", "Exceptions", "Exception %"
        );
        for c in x.per_cpu.iter().filter(|c| c.finished + c.exceptions > 0) {
            let _ = writeln!(
                s,
                "  {:<10} {:>12} {:>12} {:>12} {:>12.3}",
                c.cpu,
                c.finished,
                c.forwarded,
                c.exceptions,
                c.exception_ratio * 100.0
            );
        }
    }
    s
}

/// `fastfwd clear runtime`.
#[derive(Debug, clap::Args)]
pub struct ClearArgs {
    #[command(subcommand)]
    pub what: ClearWhat,
    #[command(flatten)]
    pub opts: ClientOpts,
}

#[derive(Debug, clap::Subcommand)]
pub enum ClearWhat {
    /// Start `show runtime`'s figures again from zero.
    Runtime,
}

pub fn clear(a: ClearArgs) -> Result<()> {
    match a.what {
        ClearWhat::Runtime => {
            let v: reply::Cleared = ask_as(&a.opts.socket, &Request::ClearRuntime)?;
            if a.opts.json {
                print_json(&v)?;
            }
            Ok(())
        }
    }
}

/// `show interfaces -w N`: totals over every interface, one line per
/// interval, as differences, like `netstat -iw`.
fn watch(sock: &Path, secs: u64, count: Option<u64>, json: bool) -> Result<()> {
    // errs: lost before the pipeline (RX ring full, oversize); idrops:
    // dropped by the pipeline (every drop reason); out drops: TX ring full.
    let totals = |v: &reply::Interfaces| {
        let mut t = [0u64; 7];
        for i in &v.interfaces {
            for (k, n) in [
                i.rx_packets,
                i.rx_ring_drops,
                i.rx_errors,
                i.rx_bytes,
                i.tx_packets,
                i.tx_drops,
                i.tx_bytes,
            ]
            .into_iter()
            .enumerate()
            {
                t[k] += n;
            }
        }
        t
    };
    let mut prev = totals(&ask_as(sock, &Request::ShowInterfaces)?);
    if !json {
        println!("{:>31} {:>32}", "input   (Total)", "output");
        println!(
            "{:>10} {:>6} {:>6} {:>14} {:>10} {:>6} {:>14}",
            "packets", "errs", "idrops", "bytes", "packets", "drops", "bytes"
        );
    }
    let mut lines = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs(secs));
        let now = totals(&ask_as(sock, &Request::ShowInterfaces)?);
        let d: Vec<u64> = now
            .iter()
            .zip(prev.iter())
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        if json {
            println!(
                "{}",
                serde_json::json!({"interval_s": secs, "rx_packets": d[0], "rx_errors": d[1], "rx_idrops": d[2], "rx_bytes": d[3], "tx_packets": d[4], "tx_drops": d[5], "tx_bytes": d[6]})
            );
        } else {
            println!(
                "{:>10} {:>6} {:>6} {:>14} {:>10} {:>6} {:>14}",
                d[0], d[1], d[2], d[3], d[4], d[5], d[6]
            );
        }
        prev = now;
        lines += 1;
        if count.is_some_and(|c| lines >= c) {
            return Ok(());
        }
    }
}
