//! `fastfwd lab …`

mod ministat;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {
    /// Compare samples (one number per line per file) like ministat.
    Ministat(ministat::Args),
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Ministat(a) => ministat::run(a),
    }
}
