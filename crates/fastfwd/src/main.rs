//! `fastfwd`: one binary, iproute2-style subcommands.
//!
//! Each subcommand lives in `cmd/<name>.rs` with its own `Args` and `run`.

#![forbid(unsafe_code)]

mod cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "fastfwd", version = env!("FASTFWD_VERSION"), about = "A software IP router forwarding plane and the lab that measures it")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the real pipeline over a pcap file, writing one pcap per output.
    Replay(cmd::replay::Args),
    /// Inspect and benchmark forwarding tables.
    #[command(subcommand)]
    Fib(cmd::fib::Command),
    /// Check, compile and benchmark firewall rule sets.
    #[command(subcommand)]
    Firewall(cmd::firewall::Command),
    /// The forwarding lab: topology, generator, receivers, searches, statistics, benchmark.
    #[command(subcommand)]
    Lab(cmd::lab::Command),
    /// Run the router on the interfaces of a config file.
    Run(cmd::run::Args),
    /// Ask the running router: interfaces, workers, drops, routes, neighbours.
    Show(cmd::show::Args),
    /// Reset the running router's figures (`clear runtime`).
    Clear(cmd::show::ClearArgs),
    /// Trace the next packets through the running router's stages.
    Trace(cmd::trace::Args),
    /// Write frames of the running router's fast path to a pcapng file.
    Capture(cmd::capture::Args),
    /// Add or delete a route in the running router.
    Route(cmd::route::Args),
    /// Add or delete a static neighbour in the running router.
    #[command(alias = "neighbour", alias = "neigh")]
    Neighbor(cmd::neighbor::Args),
    /// Check a config file, or reload the running router's config atomically.
    Config(cmd::config::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_) | Command::Lab(_)) {
        // Commands that print: a closed pipe ends them quietly.
        netio::sys::os::default_sigpipe();
    }
    let result = match cli.command {
        Command::Replay(a) => cmd::replay::run(a),
        Command::Fib(c) => cmd::fib::run(c),
        Command::Firewall(c) => cmd::firewall::run(c),
        Command::Lab(c) => cmd::lab::run(c),
        Command::Run(a) => cmd::run::run(a),
        Command::Show(a) => cmd::show::run(a),
        Command::Clear(a) => cmd::show::clear(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Capture(a) => cmd::capture::run(a),
        Command::Route(a) => cmd::route::run(a),
        Command::Neighbor(a) => cmd::neighbor::run(a),
        Command::Config(a) => cmd::config::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fastfwd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
