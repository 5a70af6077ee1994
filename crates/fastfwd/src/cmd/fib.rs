//! `fastfwd fib …`: load a route file into the FIB and query it.
//!
//! Route files hold `prefix [next-hop]` per line (IPv4 and IPv6 mixed,
//! optionally `.gz`); a prefix without a next hop gets one derived from a
//! hash of the prefix (`fib::table::derived_next_hop`, 256 distinct values).
//! The benchmark against the peers is `cargo bench -p fastfwd-fib --bench fib`
//! (see docs/notebook/2026-11-30-to-12-06-fib-benchmark.md).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args as ClapArgs, Subcommand};
use fib::Lookup;
use fib::poptrie::{Poptrie4, Poptrie6};
use fib::table::read_routes;

#[derive(Subcommand)]
pub enum Command {
    /// Read addresses on stdin (one per line) and print, for each, the
    /// longest matching prefix and its next hop, or `none`.
    Lookup(TableArgs),
    /// Print prefix counts per length, memory use and build time.
    Stats(TableArgs),
    /// Check the running router's tables: its kernel mirror against the
    /// kernel now, its installed routes against a full build, its FIB
    /// against the installed routes. Prints every difference; exits 1 if
    /// there is one.
    Audit(AuditArgs),
}

#[derive(ClapArgs)]
pub struct AuditArgs {
    /// Control socket of the running router.
    #[arg(long, default_value = control::protocol::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// One JSON object per line (the differences, then the summary).
    #[arg(long)]
    json: bool,
}

#[derive(ClapArgs)]
pub struct TableArgs {
    /// Route file: `prefix [next-hop]` per line, `.gz` allowed.
    #[arg(long)]
    table: PathBuf,
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Lookup(a) => lookup(a),
        Command::Stats(a) => stats(a),
        Command::Audit(a) => audit(a),
    }
}

fn lookup(args: TableArgs) -> anyhow::Result<()> {
    let file = read_routes(&args.table)?;
    let t4 = Poptrie4::from_routes(file.v4.iter().copied());
    let t6 = Poptrie6::from_routes(file.v6.iter().copied());
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (i, line) in stdin.lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let addr: IpAddr = text
            .parse()
            .with_context(|| format!("stdin:{}: address: {text:?} is not an IP address", i + 1))?;
        // The fast structure answers; the route copy names the prefix.
        let (nh, route) = match addr {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                (t4.lookup(a), t4.lookup_route(a).map(|(p, _)| p.to_string()))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                (t6.lookup(a), t6.lookup_route(a).map(|(p, _)| p.to_string()))
            }
        };
        match (nh, route) {
            (Some(nh), Some(p)) => writeln!(out, "{addr} {p} {nh}")?,
            _ => writeln!(out, "{addr} none")?,
        }
    }
    out.flush()?;
    Ok(())
}

fn stats(args: TableArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let file = read_routes(&args.table)?;
    let read = start.elapsed();
    let start = Instant::now();
    let t4 = Poptrie4::from_routes(file.v4.iter().copied());
    let build4 = start.elapsed();
    let start = Instant::now();
    let t6 = Poptrie6::from_routes(file.v6.iter().copied());
    let build6 = start.elapsed();
    println!(
        "{}: {} IPv4 and {} IPv6 routes ({} next hops derived from the prefix), {} distinct next hops, read in {:.3} s",
        args.table.display(),
        file.v4.len(),
        file.v6.len(),
        file.derived,
        file.distinct_next_hops(),
        read.as_secs_f64()
    );
    for (family, lens, mem, nodes, leaves, ctrl, build) in [
        {
            let m = t4.memory();
            let lens: BTreeMap<u8, usize> =
                file.v4.iter().fold(BTreeMap::new(), |mut m, (p, _)| {
                    *m.entry(p.prefix_len()).or_default() += 1;
                    m
                });
            (
                "IPv4",
                lens,
                m.lookup_bytes,
                m.nodes,
                m.leaves,
                m.control_bytes,
                build4,
            )
        },
        {
            let m = t6.memory();
            let lens: BTreeMap<u8, usize> =
                file.v6.iter().fold(BTreeMap::new(), |mut m, (p, _)| {
                    *m.entry(p.prefix_len()).or_default() += 1;
                    m
                });
            (
                "IPv6",
                lens,
                m.lookup_bytes,
                m.nodes,
                m.leaves,
                m.control_bytes,
                build6,
            )
        },
    ] {
        println!(
            "{family}: build {:.3} s; lookup structure {:.2} MiB ({nodes} nodes, {leaves} leaves); route copy for updates ~{:.1} MiB",
            build.as_secs_f64(),
            mem as f64 / 1048576.0,
            ctrl as f64 / 1048576.0
        );
        let per_len: Vec<String> = lens.iter().map(|(l, n)| format!("/{l}:{n}")).collect();
        println!("{family} prefixes per length: {}", per_len.join(" "));
    }
    Ok(())
}

fn audit(a: AuditArgs) -> anyhow::Result<()> {
    use control::protocol::reply::AuditLine;
    let mut out = std::io::stdout().lock();
    let mut differences = 0u64;
    let mut summary = None;
    let mut error = None;
    let resp = control::server::request_each(&a.socket, &control::Request::FibAudit, |v| {
        let parsed = match serde_json::from_value::<AuditLine>(v.clone()) {
            Ok(p) => p,
            Err(e) => {
                error = Some(format!("a line the client cannot read ({e}): {v}"));
                return;
            }
        };
        let line = match &parsed {
            _ if a.json => v.to_string(),
            AuditLine::Summary { summary: s } => {
                let c = &s.checked;
                let engine = match &c.engine {
                    None => String::new(),
                    Some(e) => match &e.skipped {
                        Some(why) => format!("; {} engine's maps not checked: {why}", e.engine),
                        None => format!(
                            "; {} engine's maps (generation {}): {} elements, {} lookups",
                            e.engine, e.generation, e.elements, e.lookups
                        ),
                    },
                };
                format!(
                    "{} difference(s); checked {} kernel routes, {} installed routes, {} FIB lookups{engine}",
                    s.differences, c.kernel_routes, c.routes, c.lookups
                )
            }
            AuditLine::Error { error: e } => format!("audit failed: {e}"),
            AuditLine::Difference(d) => format!(
                "{:<7} {:<9} {}  want: {}  have: {}",
                d.layer, d.kind, d.item, d.want, d.have
            ),
        };
        match parsed {
            AuditLine::Summary { summary: s } => summary = Some(s),
            AuditLine::Error { error: e } => error = Some(e),
            AuditLine::Difference(_) => differences += 1,
        }
        let _ = writeln!(out, "{line}");
    })?;
    if !resp.ok {
        anyhow::bail!("{}", resp.error.unwrap_or_else(|| "request failed".into()));
    }
    if let Some(e) = error {
        anyhow::bail!("the audit failed: {e}");
    }
    if summary.is_none() {
        anyhow::bail!("the audit ended without a summary");
    }
    if differences > 0 {
        anyhow::bail!(
            "{differences} difference(s) between the running tables and what they are built from"
        );
    }
    Ok(())
}
