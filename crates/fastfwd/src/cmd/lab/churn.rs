//! `fastfwd lab churn`: a full table withdrawn and reinstalled over BGP
//! (BIRD to BIRD) while traffic flows to prefixes that stay.

use clap::Args as ClapArgs;
use lab::churn::{ChurnConfig, churn_table, run_churn};
use std::path::PathBuf;
use std::time::Duration;

#[derive(ClapArgs)]
pub struct Args {
    /// Withdraw-and-reinstall cycles per contender.
    #[arg(long, default_value_t = 3)]
    cycles: u32,
    /// Offered load through the churn, packets per second.
    #[arg(long, default_value_t = 50_000.0)]
    rate: f64,
    /// Who forwards: kernel, xdp-engine (fastfwd --engine xdp), xdp
    /// (AF_XDP) or packet (AF_PACKET).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kernel,xdp-engine,xdp,packet"
    )]
    contenders: Vec<String>,
    /// Prefix list to announce (default data/full-table-prefixes.txt.gz).
    #[arg(long)]
    table_file: Option<PathBuf>,
    /// Announce at most this many prefixes of each family (default: all).
    #[arg(long)]
    limit: Option<usize>,
    /// Longest wait, in seconds, for one withdraw or reinstall to settle.
    #[arg(long, default_value_t = 120)]
    settle_timeout: u64,
    /// Output folder for churn.json, churn.md, the BIRD configs and logs
    /// (default lab-results/churn-<unix time>).
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// After the cycles, flap a set of extra prefixes (announced, then
    /// withdrawn, every second) for this many seconds, sampling fastfwd's
    /// memory (0: no flap).
    #[arg(long, default_value_t = 0)]
    flap: u64,
    /// IPv4 prefixes in the flapping set (/24s of 100.64.0.0/10, at most
    /// 16,384; a fifth as many IPv6 /48s of 2001:db8::/32).
    #[arg(long, default_value_t = 10_000)]
    flap_prefixes: usize,
    /// IPv4 source rules flapped with the set, each with a route of its
    /// own in table 100 (at most the set's IPv4 prefixes), added and
    /// deleted in dut's kernel with `ip -batch`.
    #[arg(long, default_value_t = 1_000)]
    flap_rules: usize,
    /// IPv6 source rules flapped the same way (at most the set's IPv6
    /// prefixes). Few by default: the kernel walks its whole IPv6 FIB on
    /// every IPv6 rule change (about 95 ms each with the full table here).
    #[arg(long, default_value_t = 5)]
    flap_rules6: usize,
    /// Namespace tag.
    #[arg(long, default_value = "churn")]
    tag: String,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    super::need_root()?;
    lab::bench::install_interrupt_handler()?;
    let out = a.out.unwrap_or_else(|| super::default_out("churn"));
    if !a.rate.is_finite() || a.rate <= 0.0 {
        anyhow::bail!("--rate {}: a positive number of packets per second", a.rate);
    }
    let table = a.table_file.unwrap_or_else(super::default_full_table);
    let mut cfg = ChurnConfig::new(
        std::env::current_exe()?,
        std::fs::canonicalize(".")?.join(&out),
        table,
    );
    if a.cycles == 0 && a.flap == 0 {
        anyhow::bail!("--cycles 0 without --flap: nothing to measure");
    }
    cfg.cycles = a.cycles;
    cfg.flap = Duration::from_secs(a.flap);
    cfg.flap_prefixes = a.flap_prefixes;
    cfg.flap_rules = a.flap_rules;
    cfg.flap_rules6 = a.flap_rules6;
    cfg.rate_pps = a.rate;
    cfg.contenders = a.contenders;
    cfg.limit = a.limit;
    cfg.settle_timeout = Duration::from_secs(a.settle_timeout.max(1));
    cfg.tag = a.tag;
    cfg.verbose = !a.json;
    let report = run_churn(&cfg)?;
    let table = churn_table(&report);
    std::fs::write(out.join("churn.md"), &table)?;
    std::fs::write(
        out.join("churn.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    if a.json {
        super::print_json(&report)?;
    } else {
        print!("{table}");
        println!("\nwritten: {}/churn.md, churn.json", out.display());
    }
    // The kernel is the reference: its loss is reported, not a failure. So
    // are the generator's refusals: those frames never reached the router.
    if let Some(bad) = report.results.iter().find(|r| r.fastfwd && !r.clean()) {
        anyhow::bail!(
            "{}: {} packet(s) lost beyond the generator, or a state that did not settle or did not audit clean",
            bad.contender,
            bad.lost_beyond_generator
        );
    }
    Ok(())
}
