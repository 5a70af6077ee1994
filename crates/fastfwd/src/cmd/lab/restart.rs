//! `fastfwd lab restart`: fastfwd stopped and started again under load,
//! beside the kernel.

use clap::Args as ClapArgs;
use lab::restart::{RestartConfig, restart_table, run_restarts};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(ClapArgs)]
pub struct Args {
    /// Offered load, packets per second (default: the generator's maximum).
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of traffic before the SIGTERM restart, between it and the
    /// SIGKILL restart, and after.
    #[arg(long, default_value_t = 2.0)]
    phase: f64,
    /// fastfwd engines: xdp-engine, xdp (AF_XDP), packet (AF_PACKET).
    #[arg(long, value_delimiter = ',', default_value = "xdp-engine,xdp")]
    engines: Vec<String>,
    /// Skip loading the full routing table into dut.
    #[arg(long)]
    no_full_table: bool,
    /// Prefix list to load (default data/full-table-prefixes.txt.gz).
    #[arg(long)]
    table_file: Option<PathBuf>,
    /// Destinations drawn from the table's prefixes.
    #[arg(long, default_value_t = lab::bench::DEFAULT_DSTS)]
    dsts: usize,
    /// Output folder for restart.json and restart.txt (default
    /// lab-results/restart-<unix time>).
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// Namespace tag.
    #[arg(long, default_value = "restart")]
    tag: String,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    super::need_root()?;
    lab::bench::install_interrupt_handler()?;
    for e in &a.engines {
        if !["xdp-engine", "xdp", "packet"].contains(&e.as_str()) {
            anyhow::bail!("--engines {e}: xdp-engine, xdp or packet");
        }
    }
    if !(a.phase >= 0.5 && a.phase <= 60.0) {
        anyhow::bail!("--phase {}: 0.5 to 60 seconds", a.phase);
    }
    let out = a.out.unwrap_or_else(|| super::default_out("restart"));
    let cfg = RestartConfig {
        tag: a.tag,
        binary: std::env::current_exe()?,
        cores: lab::topo::Placement::two_core_default()
            .fwd_cpu
            .unwrap_or(0)
            .to_string(),
        full_table: (!a.no_full_table)
            .then(|| a.table_file.unwrap_or_else(super::default_full_table)),
        dsts: a.dsts,
        rate_pps: a.rate,
        frame_len: 60,
        phase: Duration::from_secs_f64(a.phase),
        engines: a.engines,
    };
    let start = Instant::now();
    let run = run_restarts(&cfg, |line| {
        let t = start.elapsed().as_secs();
        let _ = writeln!(std::io::stderr(), "[{:>2}:{:02}] {line}", t / 60, t % 60);
    })?;
    std::fs::create_dir_all(&out)?;
    let table = restart_table(&run);
    std::fs::write(out.join("restart.txt"), &table)?;
    std::fs::write(
        out.join("restart.json"),
        serde_json::to_string_pretty(&run)?,
    )?;
    print!("{table}");
    println!("wrote {}", out.display());
    Ok(())
}
