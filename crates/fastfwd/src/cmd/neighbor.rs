//! `fastfwd neighbor add|del`: static neighbours held by the daemon.

use super::show::{ClientOpts, ask_as};
use anyhow::Result;
use control::protocol::{Request, reply};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Cmd,
    #[command(flatten)]
    pub opts: ClientOpts,
}

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// `neighbor add IP lladdr MAC dev IF`.
    Add {
        /// IP address.
        ip: String,
        /// The word `lladdr`.
        #[arg(value_parser = ["lladdr"])]
        _lladdr: String,
        /// MAC address.
        mac: String,
        /// The word `dev`.
        #[arg(value_parser = ["dev"])]
        _dev: String,
        /// Interface.
        dev: String,
    },
    /// `neighbor del IP dev IF`.
    Del {
        /// IP address.
        ip: String,
        /// The word `dev`.
        #[arg(value_parser = ["dev"])]
        _dev: String,
        /// Interface.
        dev: String,
    },
}

pub fn run(a: Args) -> Result<()> {
    let req = match a.cmd {
        Cmd::Add { ip, mac, dev, .. } => Request::NeighborAdd { dev, ip, mac },
        Cmd::Del { ip, dev, .. } => Request::NeighborDel { dev, ip },
    };
    let v: reply::Applied = ask_as(&a.opts.socket, &req)?;
    if a.opts.json {
        println!("{}", serde_json::to_string(&v)?);
    }
    Ok(())
}
