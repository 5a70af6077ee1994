//! `fastfwd lab equilibrium` and `fastfwd lab rfc2544`: the searches of
//! `lab::equilibrium` and `lab::rfc2544` driven through the lab topology
//! (generator in gen, receiver in sink, dut in between).

use super::topo::TopoOpts;
use clap::Args as ClapArgs;
use lab::bench::{LabRunner, Traffic};
use lab::equilibrium::{self, EquilibriumConfig};
use lab::flows::FlowSet;
use lab::rfc2544::{self, Rfc2544Config};
use lab::topo::{TopoGuard, Topology};
use std::time::Duration;

#[derive(ClapArgs)]
pub struct Common {
    /// Lab tag: a lab of this tag that is up is used as it is; otherwise one
    /// is brought up for this run and removed afterwards.
    #[arg(long, default_value = "lab")]
    tag: String,
    #[command(flatten)]
    topo: TopoOpts,
    /// Load the full routing table into dut when bringing the lab up.
    #[arg(long)]
    full_table: bool,
    /// Source range (pkt-gen style).
    #[arg(short = 's', long)]
    src: Option<String>,
    /// Destination range.
    #[arg(short = 'd', long)]
    dst: Option<String>,
    /// IPv6 traffic.
    #[arg(short = '6')]
    v6: bool,
    /// Seconds of each trial.
    #[arg(short = 't', long, default_value_t = 3.0)]
    trial: f64,
    /// Print each trial's figures.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

struct Lab {
    _guard: Option<TopoGuard>,
    runner: LabRunner,
}

fn lab(c: &Common) -> anyhow::Result<Lab> {
    super::need_root()?;
    lab::bench::install_interrupt_handler()?;
    let existing = Topology::named(&c.tag);
    let (topo, guard) = if existing.status().up {
        let mut t = existing;
        t.placement = c.topo.config(&c.tag)?.placement;
        (t, None)
    } else {
        let g = TopoGuard(Topology::up(&c.topo.config(&c.tag)?)?);
        if c.full_table {
            let l = g.0.load_full_table(&super::default_full_table())?;
            eprintln!(
                "full table: {} + {} routes in {:.1} s",
                l.routes_v4, l.routes_v6, l.seconds
            );
        }
        (g.0.clone(), Some(g))
    };
    let (ds, dd) = super::traffic::default_ranges(c.v6);
    let mut traffic = Traffic::default_v4();
    traffic.flows = FlowSet::parse(
        c.src.as_deref().unwrap_or(ds),
        c.dst.as_deref().unwrap_or(dd),
    )?;
    traffic.warmup_s = 0;
    let mut runner = LabRunner::new(&topo, traffic)?;
    runner.verbose = c.verbose;
    Ok(Lab {
        _guard: guard,
        runner,
    })
}

fn generator_max(runner: &mut LabRunner, len: u16) -> anyhow::Result<f64> {
    let d = runner.trial(None, len, Duration::from_secs(2))?;
    eprintln!(
        "generator maximum (as fast as possible, 2 s): {:.0} pps",
        d.generator.attempted_pps
    );
    Ok(d.generator.attempted_pps)
}

#[derive(ClapArgs)]
pub struct EquilibriumArgs {
    #[command(flatten)]
    common: Common,
    /// Link rate in Kpps (the search starts at half); default: the
    /// generator's measured maximum.
    #[arg(short = 'l', long)]
    link_kpps: Option<u64>,
    /// Tolerance (fraction).
    #[arg(long, default_value_t = 0.01)]
    tolerance: f64,
    /// Frame length without FCS.
    #[arg(long, default_value_t = 60)]
    len: u16,
}

pub fn equilibrium(a: EquilibriumArgs) -> anyhow::Result<()> {
    let mut l = lab(&a.common)?;
    let link_kpps = match a.link_kpps {
        Some(k) => k,
        None => (generator_max(&mut l.runner, a.len)? / 1000.0) as u64,
    };
    let cfg = EquilibriumConfig {
        link_kpps,
        tolerance: a.tolerance,
        trial_s: a.common.trial,
        frame_len: a.len,
        ipv6: a.common.v6,
        ..EquilibriumConfig::default()
    };
    let json = a.common.json;
    let res = equilibrium::search(&cfg, &mut l.runner, |line| {
        if !json {
            println!("{line}");
        }
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if json {
        super::print_json(&res)?;
    }
    Ok(())
}

#[derive(ClapArgs)]
pub struct Rfc2544Args {
    #[command(flatten)]
    common: Common,
    /// Loss ratio accepted (0 = NDR, 0.005 = PDR).
    #[arg(long, default_value_t = 0.005)]
    loss: f64,
    /// Frame sizes with FCS.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,128,256,512,1024,1280,1518"
    )]
    frame_sizes: Vec<u16>,
    /// Link rate, bits/s (for the theoretical maximum).
    #[arg(long, default_value_t = 10_000_000_000)]
    link_bps: u64,
    /// Stop when the search interval is below this many pps.
    #[arg(long, default_value_t = 5_000)]
    resolution: u64,
    /// Trials per frame size at most.
    #[arg(long, default_value_t = 12)]
    max_trials: u32,
}

pub fn rfc2544(a: Rfc2544Args) -> anyhow::Result<()> {
    let mut l = lab(&a.common)?;
    let smallest = a
        .frame_sizes
        .iter()
        .copied()
        .min()
        .unwrap_or(64)
        .saturating_sub(4)
        .max(60);
    let gmax = generator_max(&mut l.runner, smallest)? as u64;
    let cfg = Rfc2544Config {
        link_bps: a.link_bps,
        frame_sizes: a.frame_sizes.clone(),
        loss_ratio: a.loss,
        resolution_pps: a.resolution,
        max_trials: a.max_trials,
        trial_s: a.common.trial,
        max_pps: Some(gmax),
    };
    let json = a.common.json;
    let res = rfc2544::search(&cfg, &mut l.runner, |line| {
        if !json {
            println!("{line}");
        }
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if json {
        super::print_json(&res)?;
    } else {
        println!(
            "note: on veth loss is attempted minus received (a full veth ring refuses with ENOBUFS; no drop counter sees it)"
        );
    }
    Ok(())
}
