//! `fastfwd show …`: read-only questions to the running daemon over its
//! control socket (docs/control-protocol.md).

use anyhow::{bail, Result};
use control::protocol::{Request, DEFAULT_SOCKET};
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
}

/// Sends `req` and returns the result, or the daemon's error.
pub fn ask(socket: &Path, req: &Request) -> Result<Value> {
    let resp = control::server::request(socket, req)?;
    if !resp.ok {
        bail!("{}", resp.error.unwrap_or_else(|| "request failed".into()));
    }
    Ok(resp.result.unwrap_or(Value::Null))
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}
fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A route as `ip route` prints one.
fn route_line(r: &Value) -> String {
    let hops: Vec<&str> = r["next_hops"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    format!(
        "{} {} proto {}",
        s(r, "prefix"),
        hops.join(" nexthop "),
        s(r, "origin")
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
            let v = ask(sock, &Request::ShowInterfaces)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            println!(
                "{:<12} {:<10} {:>12} {:>8} {:>14} {:>12} {:>8} {:>14}",
                "Name", "Port", "Ipkts", "Ierrs", "Ibytes", "Opkts", "Odrops", "Obytes"
            );
            for i in v["interfaces"].as_array().into_iter().flatten() {
                println!(
                    "{:<12} {:<10} {:>12} {:>8} {:>14} {:>12} {:>8} {:>14}",
                    s(i, "name"),
                    s(i, "port"),
                    u(i, "rx_packets"),
                    u(i, "rx_errors"),
                    u(i, "rx_bytes"),
                    u(i, "tx_packets"),
                    u(i, "tx_drops"),
                    u(i, "tx_bytes")
                );
            }
            Ok(())
        }
        What::Workers => {
            let v = ask(sock, &Request::ShowWorkers)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            println!(
                "{:<6} {:<4} {:<7} {:>12} {:>10} {:>8} Ports (rx/tx packets)",
                "Worker", "CPU", "Backend", "BusyRounds", "Sleeps", "Held"
            );
            for w in v.as_array().into_iter().flatten() {
                let ports: Vec<String> = w["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{} {}/{}",
                            s(p, "port"),
                            u(p, "rx_packets"),
                            u(p, "tx_packets")
                        )
                    })
                    .collect();
                println!(
                    "{:<6} {:<4} {:<7} {:>12} {:>10} {:>8} {}",
                    u(w, "id"),
                    u(w, "core"),
                    s(w, "backend"),
                    u(w, "busy_rounds"),
                    u(w, "sleeps"),
                    u(w, "held"),
                    ports.join(", ")
                );
            }
            Ok(())
        }
        What::Drops => {
            let v = ask(sock, &Request::ShowDrops)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            println!("{:<28} {:>12}  Description", "Drop reason", "Count");
            for d in v["drops"].as_array().into_iter().flatten() {
                println!(
                    "{:<28} {:>12}  {}",
                    s(d, "reason"),
                    u(d, "count"),
                    s(d, "description")
                );
            }
            println!("\n{:<28} {:>12}  Description", "Punt reason", "Count");
            for d in v["punts"].as_array().into_iter().flatten() {
                println!(
                    "{:<28} {:>12}  {}",
                    s(d, "reason"),
                    u(d, "count"),
                    s(d, "description")
                );
            }
            println!(
                "\n{:<28} {:>12}  Description",
                "ICMP error not sent", "Count"
            );
            for d in v["icmp_suppressed"].as_array().into_iter().flatten() {
                println!(
                    "{:<28} {:>12}  {}",
                    s(d, "cause"),
                    u(d, "count"),
                    s(d, "description")
                );
            }
            println!(
                "{:<28} {:>12}  ICMP errors over the rate limit",
                "icmp_rate_limited",
                u(&v, "icmp_rate_limited")
            );
            println!(
                "\n{:<28} {:>12}  frames whose neighbour stayed unresolved for 1 s",
                "held_expired",
                u(&v, "held_expired")
            );
            println!(
                "{:<28} {:>12}  TX ring full",
                "tx_ring_full",
                u(&v, "tx_ring_full")
            );
            println!(
                "{:<28} {:>12}  dropped by the kernel before fastfwd saw them",
                "rx_ring_full",
                u(&v, "rx_ring_full")
            );
            println!(
                "{:<28} {:>12}  larger than a frame buffer ({} bytes), dropped on receive",
                "rx_oversize",
                u(&v, "rx_oversize"),
                netio::MAX_FRAME
            );
            Ok(())
        }
        What::Firewall => {
            let v = ask(sock, &Request::ShowFirewall)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            if v["firewall"].is_null() {
                println!("no firewall rules configured: every packet is forwarded");
                return Ok(());
            }
            let fw: firewall::FirewallSummary = serde_json::from_value(v["firewall"].clone())?;
            print!("{fw}");
            if let Ok(ct) =
                serde_json::from_value::<firewall::ConntrackStats>(v["conntrack"].clone())
            {
                println!(
                    "conntrack: {} of {} slots in use, {} inserts, {} insert failures, {} evictions, {} expirations",
                    ct.occupancy, ct.capacity, ct.inserts, ct.insert_failures, ct.evictions, ct.expirations
                );
            }
            println!(
                "rejects rate-limited into drops: {}",
                u(&v, "rejects_rate_limited")
            );
            Ok(())
        }
        What::Route {
            prefix: Some(prefix),
        } => {
            let v = ask(
                sock,
                &Request::ShowRoute {
                    prefix: Some(prefix),
                },
            )?;
            if json {
                println!("{v}");
                return Ok(());
            }
            for r in v.as_array().into_iter().flatten() {
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
                        route_line(&r)
                    };
                    first = false;
                    if failed.is_none() {
                        if let Err(e) = writeln!(out, "{line}") {
                            failed = Some(e);
                        }
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
        What::Metrics => {
            let v = ask(sock, &Request::ShowMetrics)?;
            print!("{}", v.as_str().unwrap_or("# EOF\n"));
            Ok(())
        }
        What::Neighbors => {
            let v = ask(sock, &Request::ShowNeighbors)?;
            if json {
                println!("{v}");
                return Ok(());
            }
            for n in v.as_array().into_iter().flatten() {
                println!(
                    "{} dev {} lladdr {} proto {}",
                    s(n, "ip"),
                    s(n, "interface"),
                    s(n, "mac"),
                    s(n, "origin")
                );
            }
            Ok(())
        }
    }
}

/// `show interfaces -w N`: totals over every interface, one line per
/// interval, as differences, like `netstat -iw`.
fn watch(sock: &Path, secs: u64, count: Option<u64>, json: bool) -> Result<()> {
    let totals = |v: &Value| {
        let mut t = [0u64; 6];
        for i in v["interfaces"].as_array().into_iter().flatten() {
            for (k, key) in [
                "rx_packets",
                "rx_errors",
                "rx_bytes",
                "tx_packets",
                "tx_drops",
                "tx_bytes",
            ]
            .iter()
            .enumerate()
            {
                t[k] += u(i, key);
            }
        }
        t
    };
    let mut prev = totals(&ask(sock, &Request::ShowInterfaces)?);
    if !json {
        println!("{:>24} {:>32}", "input   (Total)", "output");
        println!(
            "{:>10} {:>6} {:>14} {:>10} {:>6} {:>14}",
            "packets", "errs", "bytes", "packets", "drops", "bytes"
        );
    }
    let mut lines = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs(secs));
        let now = totals(&ask(sock, &Request::ShowInterfaces)?);
        let d: Vec<u64> = now
            .iter()
            .zip(prev.iter())
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        if json {
            println!(
                "{}",
                serde_json::json!({"interval_s": secs, "rx_packets": d[0], "rx_errors": d[1], "rx_bytes": d[2], "tx_packets": d[3], "tx_drops": d[4], "tx_bytes": d[5]})
            );
        } else {
            println!(
                "{:>10} {:>6} {:>14} {:>10} {:>6} {:>14}",
                d[0], d[1], d[2], d[3], d[4], d[5]
            );
        }
        prev = now;
        lines += 1;
        if count.is_some_and(|c| lines >= c) {
            return Ok(());
        }
    }
}
