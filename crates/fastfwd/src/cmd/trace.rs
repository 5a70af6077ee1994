//! `fastfwd trace add|show|clear`: the path of the next packets through the
//! running router's stages (docs/operations.md, "Packet trace").

use super::show::{ClientOpts, ask_as};
use anyhow::Result;
use control::protocol::{Request, reply};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
    #[command(flatten)]
    pub opts: ClientOpts,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Record the next COUNT packets (per worker) that match the filter;
    /// replaces a trace in progress.
    Add {
        /// Packets to record, per worker (at most 10,000).
        count: usize,
        /// Only packets that match (tcpdump-like: `udp and dst port 53`,
        /// `host 10.0.0.1 or net 2001:db8::/32`; docs/operations.md).
        #[arg(long)]
        filter: Option<String>,
        /// Only on this worker.
        #[arg(long)]
        worker: Option<usize>,
    },
    /// The packets traced so far, stage by stage.
    Show,
    /// Stop tracing and forget the records.
    Clear,
}

pub fn run(a: Args) -> Result<()> {
    let sock = &a.opts.socket;
    match a.what {
        What::Add {
            count,
            filter,
            worker,
        } => {
            let v: reply::TraceArmed = ask_as(
                sock,
                &Request::TraceAdd {
                    count,
                    filter,
                    worker,
                },
            )?;
            if a.opts.json {
                println!("{}", serde_json::to_string(&v)?);
            } else {
                println!(
                    "tracing the next {} packet(s){} on worker(s) {:?}",
                    v.count,
                    v.filter
                        .map(|f| format!(" matching `{f}`"))
                        .unwrap_or_default(),
                    v.workers
                );
            }
        }
        What::Show => {
            let v: reply::Trace = ask_as(sock, &Request::TraceShow)?;
            if a.opts.json {
                println!("{}", serde_json::to_string(&v)?);
            } else {
                print!("{}", router::trace::text(&v.packets));
                println!(
                    "{} packet(s) traced, {} more to trace",
                    v.packets.len(),
                    v.remaining
                );
            }
        }
        What::Clear => {
            let v: reply::Cleared = ask_as(sock, &Request::TraceClear)?;
            if a.opts.json {
                println!("{}", serde_json::to_string(&v)?);
            }
        }
    }
    Ok(())
}
