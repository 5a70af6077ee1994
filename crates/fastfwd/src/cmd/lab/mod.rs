//! `fastfwd lab …`: topology, generator, receivers, searches, statistics
//! and the side-by-side benchmark. Everything that sends traffic runs
//! inside the lab's own namespaces (root needed).

mod bench;
mod churn;
mod ministat;
mod restart;
mod search;
mod topo;
mod traffic;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {
    /// Compare samples (one number per line per file) like ministat.
    Ministat(ministat::Args),
    /// The gen -> dut -> sink namespaces: up, down, status.
    #[command(subcommand)]
    Topo(topo::Command),
    /// pkt-gen-like UDP generator (AF_PACKET, sendmmsg, qdisc bypass).
    Gen(traffic::GenArgs),
    /// Receiver: per-second counters, loss, reordering, latency.
    Recv(traffic::RecvArgs),
    /// UDP socket receive benchmark (recvmmsg, recvmsg, read, recvfrom).
    UdpSink(traffic::SinkArgs),
    /// BSDRP's equilibrium throughput search through dut.
    Equilibrium(search::EquilibriumArgs),
    /// RFC 2544 throughput search (NDR, or PDR with --loss 0.005).
    Rfc2544(search::Rfc2544Args),
    /// The side-by-side benchmark: kernel forwarding (none / 1,000 nftables
    /// rules / a 1,000-address set), report, JSON and plots.
    Bench(bench::Args),
    /// A full table withdrawn and reinstalled over BGP (BIRD to BIRD) N
    /// times while traffic flows to prefixes that stay: loss, rate, and how
    /// long the kernel and fastfwd take to follow.
    Churn(churn::Args),
    /// fastfwd stopped and started again under load (SIGTERM, then
    /// SIGKILL), beside the kernel: what each restart loses.
    Restart(restart::Args),
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Ministat(a) => ministat::run(a),
        Command::Topo(c) => topo::run(c),
        Command::Gen(a) => traffic::generate(a),
        Command::Recv(a) => traffic::recv(a),
        Command::UdpSink(a) => traffic::udp_sink(a),
        Command::Equilibrium(a) => search::equilibrium(a),
        Command::Rfc2544(a) => search::rfc2544(a),
        Command::Bench(a) => bench::run(a),
        Command::Churn(a) => churn::run(a),
        Command::Restart(a) => restart::run(a),
    }
}

/// Fails with a clear message unless running as root.
fn need_root() -> anyhow::Result<()> {
    if !lab::topo::is_root() {
        anyhow::bail!("the lab creates network namespaces: run it as root");
    }
    Ok(())
}

/// The full-table prefix list: `data/` of the source tree, else of the
/// current directory.
fn default_full_table() -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/full-table-prefixes.txt.gz");
    if built.exists() {
        built
    } else {
        std::path::PathBuf::from("data/full-table-prefixes.txt.gz")
    }
}

/// The default output folder of a lab run: `lab-results/<kind>-<unix time>`.
fn default_out(kind: &str) -> std::path::PathBuf {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::path::PathBuf::from(format!("lab-results/{kind}-{t}"))
}

/// Prints `value` as pretty JSON.
fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
