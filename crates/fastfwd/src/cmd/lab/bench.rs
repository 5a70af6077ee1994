//! `fastfwd lab bench`: the README's main command.

use clap::Args as ClapArgs;
use lab::bench::{BenchConfig, Contender, FastfwdForwarding, KernelForwarding};
use lab::topo::FirewallPreset;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Input {
    Live,
    Packet,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Receiver {
    Xdp,
    Packet,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// gen -> dut -> sink over one veth pair each side.
    TwoPort,
    /// The dut's egress a two-member LAG (balance-xor, layer3+4) to a
    /// bonded sink; needs the kernel's bonding driver.
    Lag,
}

impl Scenario {
    fn egress(self) -> lab::topo::Egress {
        match self {
            Scenario::TwoPort => lab::topo::Egress::Port,
            Scenario::Lag => lab::topo::Egress::Lag,
        }
    }
}

#[derive(ClapArgs)]
pub struct Args {
    /// A short run (about five minutes on two cores with the full table):
    /// 2 s trials, 3 repeats, two load points, short searches.
    #[arg(long)]
    quick: bool,
    /// Output folder (default lab-results/bench-<unix time>).
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// Skip loading the full routing table into dut.
    #[arg(long)]
    no_full_table: bool,
    /// Prefix list to load (default data/full-table-prefixes.txt.gz).
    #[arg(long)]
    table_file: Option<PathBuf>,
    /// Fixed-load repeats per contender.
    #[arg(long)]
    repeats: Option<u32>,
    /// Seconds per trial.
    #[arg(long)]
    trial: Option<f64>,
    /// Skip the equilibrium searches.
    #[arg(long)]
    no_equilibrium: bool,
    /// Firewall size for the nftables contenders.
    #[arg(long, default_value_t = 1000)]
    rules: u32,
    /// Leave out the fastfwd contenders (kernel only).
    #[arg(long)]
    kernel_only: bool,
    /// fastfwd engines to measure: xdp-engine (the XDP program, exceptions
    /// over AF_XDP), or the user-space pipeline on xdp (AF_XDP) or packet
    /// (AF_PACKET); with `-ordinary` (`xdp-ordinary`), its workers under
    /// ordinary scheduling instead of SCHED_FIFO 1.
    #[arg(long, value_delimiter = ',', default_value = "xdp-engine,xdp,packet")]
    backends: Vec<String>,
    /// How frames reach the dut: `live` (XDP frames from the live-frames
    /// generator, as from a native-XDP NIC; falls back to `packet` where
    /// it cannot run, saying so) or `packet` (AF_PACKET socket buffers).
    #[arg(long, value_enum, default_value_t = Input::Live)]
    input: Input,
    /// How the sink counts: `xdp` (in an XDP program, the cheapest) or
    /// `packet` (an AF_PACKET ring).
    #[arg(long, value_enum, default_value_t = Receiver::Xdp)]
    receiver: Receiver,
    /// Destinations drawn from the full table's prefixes (0: the seed's 10
    /// addresses, 200 flows: the few-flows case where lookups stay in cache).
    #[arg(long, default_value_t = lab::bench::DEFAULT_DSTS)]
    dsts: usize,
    /// IPv6 traffic (80-byte frames, room for the stamp) instead of IPv4.
    #[arg(short = '6', long = "ipv6")]
    v6: bool,
    /// Frame length without FCS (default 60, or 80 with IPv6).
    #[arg(short = 'l', long)]
    len: Option<u16>,
    /// Percent of packets sent with TTL / hop limit 1 (one flow in
    /// 100/PCT), to measure the exception path's cost: `--ttl-expiring 1`.
    #[arg(long)]
    ttl_expiring: Option<f64>,
    /// A contender more: the XDP engine with this percent of packets sent
    /// with TTL 1 (its exception path's cost, beside the clean run); 0
    /// leaves it out.
    #[arg(long, default_value_t = 1.0)]
    exception_share: f64,
    /// Scenarios, run one after the other in the order given, each a whole
    /// bench with the same contenders (a name may repeat, to alternate):
    /// `two-port`, or `lag` (the dut's egress a two-member LAG). With more
    /// than one, each writes to its own folder under the output folder and a
    /// table of each contender's rate per scenario, with ratios to the
    /// first, ends the run (scenarios.txt).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "two-port")]
    scenario: Vec<Scenario>,
    /// Namespace tag.
    #[arg(long, default_value = "bench")]
    tag: String,
    /// Print the result record as JSON at the end instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    super::need_root()?;
    lab::bench::install_interrupt_handler()?;
    let out = a.out.unwrap_or_else(|| super::default_out("bench"));
    let table = (!a.no_full_table).then(|| a.table_file.unwrap_or_else(super::default_full_table));
    let mut cfg = BenchConfig::new(a.quick, out.clone(), table);
    cfg.tag = a.tag;
    if let Some(r) = a.repeats {
        cfg.repeats = r.max(1);
    }
    if let Some(t) = a.trial {
        cfg.trial = Duration::from_secs_f64(t.max(1.0));
    }
    cfg.dsts = a.dsts;
    if let Some(p) = a.ttl_expiring {
        if !(p > 0.0 && p <= 100.0) {
            anyhow::bail!("--ttl-expiring {p}: a percentage above 0, at most 100");
        }
        cfg.traffic.expiring_every = Some((100.0 / p).round().max(1.0) as u64);
    }
    if a.v6 {
        let (src, dst) = super::traffic::default_ranges(true);
        cfg.traffic.flows = lab::flows::FlowSet::parse(src, dst)?;
        cfg.frame_len = 80;
    }
    if let Some(l) = a.len {
        let min = if a.v6 { 80 } else { 60 };
        if !(min..=1514).contains(&l) {
            anyhow::bail!("--len {l}: frames are {min}..=1514 bytes here (room for the stamp)");
        }
        cfg.frame_len = l;
    }
    cfg.traffic.input = match a.input {
        Input::Live => lab::bench::InputMode::Live,
        Input::Packet => lab::bench::InputMode::Packet,
    };
    cfg.traffic.receiver = match a.receiver {
        Receiver::Xdp => lab::bench::ReceiverMode::Xdp,
        Receiver::Packet => lab::bench::ReceiverMode::Packet,
    };
    if a.no_equilibrium {
        cfg.equilibrium_trial = None;
    }
    let mut contenders: Vec<Box<dyn Contender>> = vec![
        Box::new(KernelForwarding {
            firewall: FirewallPreset::None,
        }),
        Box::new(KernelForwarding {
            firewall: FirewallPreset::Linear(a.rules),
        }),
        Box::new(KernelForwarding {
            firewall: FirewallPreset::Set(a.rules),
        }),
    ];
    if !a.kernel_only {
        let exe = std::env::current_exe()?;
        let fwd = lab::topo::Placement::two_core_default()
            .fwd_cpu
            .unwrap_or(0)
            .to_string();
        let dir = std::env::temp_dir().join(format!("fastfwd-lab-{}", cfg.tag));
        for b in &a.backends {
            let engine = b.strip_suffix(lab::bench::ORDINARY_SUFFIX).unwrap_or(b);
            if !["xdp-engine", "xdp", "packet"].contains(&engine) {
                anyhow::bail!(
                    "--backends {b}: xdp-engine, xdp or packet, each optionally with {}",
                    lab::bench::ORDINARY_SUFFIX
                );
            }
        }
        for b in &a.backends {
            contenders.push(Box::new(FastfwdForwarding::new(
                exe.clone(),
                b,
                &fwd,
                dir.clone(),
            )));
        }
        if a.exception_share > 0.0 && a.backends.iter().any(|b| b == "xdp-engine") {
            if a.exception_share > 100.0 {
                anyhow::bail!(
                    "--exception-share {}: a percentage, at most 100",
                    a.exception_share
                );
            }
            let every = (100.0 / a.exception_share).round().max(1.0) as u64;
            contenders.push(Box::new(
                FastfwdForwarding::new(exe.clone(), "xdp-engine", &fwd, dir.clone())
                    .with_expiring_every(every),
            ));
        }
        // Each fastfwd engine with the kernel's linear rules, in its own language.
        if a.rules > 0 {
            for b in &a.backends {
                contenders.push(Box::new(
                    FastfwdForwarding::new(exe.clone(), b, &fwd, dir.clone())
                        .with_firewall(FirewallPreset::Linear(a.rules)),
                ));
            }
        }
    }
    let start = Instant::now();
    let json = a.json;
    let progress = |line: &str| {
        let t = start.elapsed().as_secs();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "[{:>2}:{:02}] {line}", t / 60, t % 60);
    };
    let many = a.scenario.len() > 1;
    let mut done = Vec::new();
    for (i, sc) in a.scenario.iter().enumerate() {
        let mut cfg = cfg.clone();
        cfg.egress = sc.egress();
        if many {
            cfg.out_dir = out.join(format!("{}-{}", i + 1, cfg.egress.label()));
            progress(&format!(
                "scenario {} of {}: {}",
                i + 1,
                a.scenario.len(),
                cfg.egress.label()
            ));
        }
        let res = lab::bench::run_bench(&cfg, &mut contenders, env!("FASTFWD_VERSION"), progress)?;
        if !json {
            print_result(&res);
        }
        done.push((cfg.egress.label().to_string(), res));
    }
    if json {
        // One record, or an array of them in the scenarios' order.
        let records: Vec<&lab::report::LabRun> = done.iter().map(|(_, r)| &r.run).collect();
        match records.as_slice() {
            [one] => println!("{}", one.to_json()?),
            all => println!("{}", serde_json::to_string_pretty(all)?),
        }
    }
    if many {
        let runs: Vec<(String, &lab::report::LabRun)> =
            done.iter().map(|(l, r)| (l.clone(), &r.run)).collect();
        let table = lab::report::scenario_table_text(&runs);
        let path = out.join("scenarios.txt");
        std::fs::write(&path, &table)?;
        if !json {
            println!();
            print!("{table}");
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn print_result(res: &lab::bench::BenchOutput) {
    println!();
    print!("{}", lab::report::comparison_table_text(&res.run));
    for c in &res.run.contenders {
        if let Some(e) = &c.equilibrium {
            println!(
                "{}: equilibrium {} Kpps (max seen {} Kpps)",
                c.name, e.estimated_kpps, e.max_seen_kpps
            );
        }
        for n in &c.notes {
            println!("{}: {n}", c.name);
        }
    }
    println!(
        "generator maximum: {} pps",
        res.run.generator_max_pps.unwrap_or(0)
    );
    println!("wrote:");
    for f in &res.files {
        println!("  {}", f.display());
    }
}
