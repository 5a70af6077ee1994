//! `fastfwd fib …`

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {}
}
