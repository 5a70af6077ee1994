//! `fastfwd config check|reload`.
//!
//! `check FILE` validates a file here, without a daemon (file, line and
//! field in every error); `check` with no file asks the daemon to check its
//! own file against the live state; `reload [FILE]` makes the daemon apply
//! a file as a whole, or keep the running config if anything is wrong.

use super::show::{ClientOpts, ask_as};
use anyhow::Result;
use control::protocol::{Request, reply};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Cmd,
    #[command(flatten)]
    pub opts: ClientOpts,
}

#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Validates a config file (locally when FILE is given).
    Check {
        /// The file to check.
        file: Option<PathBuf>,
    },
    /// Applies a config file atomically in the running daemon.
    Reload {
        /// The file (the daemon's current file when absent).
        file: Option<PathBuf>,
    },
}

pub fn run(a: Args) -> Result<()> {
    match a.cmd {
        Cmd::Check { file: Some(f) } => {
            let cfg = config::Config::load(&f).map_err(|e| anyhow::anyhow!("{e}"))?;
            // Building the tables catches limits the pipeline enforces.
            rib::state::RouterState::new(cfg.clone()).build()?;
            if a.opts.json {
                println!(
                    "{}",
                    serde_json::json!({"file": f.display().to_string(), "valid": true, "interfaces": cfg.interfaces.len(), "routes": cfg.routes.len()})
                );
            } else {
                println!(
                    "{}: ok ({} interfaces, {} routes, {} neighbours)",
                    f.display(),
                    cfg.interfaces.len(),
                    cfg.routes.len(),
                    cfg.neighbours.len()
                );
            }
            Ok(())
        }
        Cmd::Check { file: None } => {
            let v: reply::ConfigFile =
                ask_as(&a.opts.socket, &Request::ConfigCheck { path: None })?;
            print(&v, a.opts.json, "ok");
            Ok(())
        }
        Cmd::Reload { file } => {
            let path = file.map(|f| std::fs::canonicalize(&f).unwrap_or(f).display().to_string());
            let v: reply::ConfigFile = ask_as(&a.opts.socket, &Request::ConfigReload { path })?;
            print(&v, a.opts.json, "applied");
            Ok(())
        }
    }
}

fn print(v: &reply::ConfigFile, json: bool, word: &str) {
    if json {
        println!("{}", serde_json::to_string(v).unwrap_or_default());
    } else {
        println!("{}: {word}", v.file);
    }
}
