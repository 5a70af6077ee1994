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
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(a) => cmd::replay::run(a),
        Command::Fib(c) => cmd::fib::run(c),
        Command::Firewall(c) => cmd::firewall::run(c),
        Command::Lab(c) => cmd::lab::run(c),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fastfwd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
