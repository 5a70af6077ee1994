//! `fastfwd fib …`: load a route file into the FIB and query it.
//!
//! Route files hold `prefix [next-hop]` per line (IPv4 and IPv6 mixed,
//! optionally `.gz`); a prefix without a next hop gets one derived from a
//! hash of the prefix (`fib::table::derived_next_hop`, 256 distinct values).
//! The benchmark against the peers is `cargo bench -p fib --bench fib`
//! (see docs/bench-fib.md).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args as ClapArgs, Subcommand};
use fib::poptrie::{Poptrie4, Poptrie6};
use fib::table::read_routes;
use fib::Lookup;

#[derive(Subcommand)]
pub enum Command {
    /// Read addresses on stdin (one per line) and print, for each, the
    /// longest matching prefix and its next hop, or `none`.
    Lookup(TableArgs),
    /// Print prefix counts per length, memory use and build time.
    Stats(TableArgs),
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
