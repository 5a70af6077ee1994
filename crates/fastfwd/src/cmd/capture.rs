//! `fastfwd capture`: frames of the running router's fast path, at one
//! point (received, transmitted, dropped, punted), written to a pcapng
//! file that tcpdump and Wireshark read: one interface per port, the drop
//! or punt reason in each packet's comment (docs/operations.md).

use super::show::{ClientOpts, ask_as};
use anyhow::{Context, Result, bail};
use control::protocol::{Request, reply};
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Point {
    /// As received, before the pipeline.
    Rx,
    /// As transmitted: forwarded frames rewritten, ICMP errors, fragments.
    Tx,
    /// Dropped frames, with the reason.
    Drop,
    /// Frames for the host, with the reason.
    Punt,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to copy frames from.
    #[arg(long, value_enum)]
    point: Point,
    /// Only frames received (or, at tx, sent) on this port.
    #[arg(long)]
    interface: Option<String>,
    /// Only frames that match (tcpdump-like; docs/operations.md).
    #[arg(long)]
    filter: Option<String>,
    /// Frames to write (at most 100,000).
    #[arg(long, short = 'c')]
    count: usize,
    /// The pcapng file to write.
    #[arg(short = 'w')]
    write: PathBuf,
    /// Stop after this many seconds even if fewer frames came.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    #[command(flatten)]
    opts: ClientOpts,
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        bail!("odd hex length");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).context("bad hex"))
        .collect()
}

pub fn run(a: Args) -> Result<()> {
    let sock = &a.opts.socket;
    let point = match a.point {
        Point::Rx => "rx",
        Point::Tx => "tx",
        Point::Drop => "drop",
        Point::Punt => "punt",
    };
    let started: reply::CaptureStarted = ask_as(
        sock,
        &Request::CaptureStart {
            point: point.into(),
            count: a.count,
            interface: a.interface.clone(),
            filter: a.filter.clone(),
        },
    )?;
    let names: Vec<&str> = started.ports.iter().map(String::as_str).collect();
    let file = std::fs::File::create(&a.write)
        .with_context(|| format!("creating {}", a.write.display()))?;
    let mut w = netio::pcap::NgWriter::new(BufWriter::new(file), &names)?;
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout.max(0.1));
    let mut lost = 0;
    let result = (|| -> Result<()> {
        while (w.count() as usize) < a.count {
            let got: reply::Captured = ask_as(sock, &Request::CaptureRead)?;
            lost += got.lost;
            for f in &got.frames {
                if (w.count() as usize) >= a.count {
                    break;
                }
                let comment = f.reason.as_ref().map(|r| format!("{point}: {r}"));
                w.write(
                    u32::from(f.port),
                    f.time_ns,
                    &unhex(&f.data)?,
                    comment.as_deref(),
                )?;
            }
            if got.frames.is_empty() && got.remaining == 0 && !started.workers.is_empty() {
                // Every worker copied what it was asked for.
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    })();
    // Stop the capture whatever happened.
    let _: Result<reply::Cleared> = ask_as(sock, &Request::CaptureStop);
    result?;
    let n = w.count();
    w.finish()?;
    let summary = serde_json::json!({"file": a.write, "frames": n, "lost": lost});
    if a.opts.json {
        println!("{summary}");
    } else {
        eprintln!(
            "{n} frame(s) written to {}{}",
            a.write.display(),
            if lost > 0 {
                format!(" ({lost} lost: the buffers were full)")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
