//! `fastfwd firewall …`: check a rule file, classify a packet against it,
//! and benchmark the compiled classifier against a linear scan and DPDK's
//! rte_acl (`dpdk-test-acl`) on the same rules and trace.

use anyhow::{Context, bail};
use clap::{Args as ClapArgs, Subcommand};
use firewall::{
    Chain, CtState, Firewall, IFACE_NONE, InterfaceMap, PacketKey, RuleCounters, RuleSet, Verdict,
    benchmark, parse_rules, rulegen,
};
use serde::Serialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Subcommand)]
pub enum Command {
    /// Parse and compile a rule file; print what it holds and what it costs.
    Check(CheckArgs),
    /// Classify one packet against a rule file and print the verdict and rule.
    Classify(ClassifyArgs),
    /// Lookups per second vs rule count: compiled, linear scan, dpdk-test-acl.
    Bench(BenchArgs),
    /// Print a generated firewall-like rule set (the benchmark's rules).
    Gen(GenArgs),
}

#[derive(ClapArgs)]
pub struct GenArgs {
    /// Number of rules.
    #[arg(long, default_value_t = 1000)]
    rules: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print ClassBench format (dpdk-test-acl --rulesf) instead.
    #[arg(long)]
    classbench: bool,
}

fn gen_cmd(a: GenArgs) -> anyhow::Result<()> {
    let rules = rulegen::rules(a.rules, a.seed.wrapping_add(a.rules as u64));
    if a.classbench {
        print!("{}", rulegen::to_classbench(&rules));
    } else {
        print!("{}", rulegen::to_rule_text(&rules));
    }
    Ok(())
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Check(a) => check(a),
        Command::Classify(a) => classify(a),
        Command::Bench(a) => bench(a),
        Command::Gen(a) => gen_cmd(a),
    }
}

#[derive(ClapArgs)]
pub struct CheckArgs {
    /// Rule file.
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn load(file: &Path) -> anyhow::Result<RuleSet> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    Ok(parse_rules(&text, &file.display().to_string())?)
}

/// Interface ids for offline use: every name in the rules, in order of appearance.
fn interfaces_of(set: &RuleSet) -> InterfaceMap {
    let mut names: Vec<String> = Vec::new();
    for c in &set.chains {
        for r in &c.rules {
            for m in [&r.iif, &r.oif].into_iter().flatten() {
                for n in &m.names {
                    if !names.contains(n) {
                        names.push(n.clone());
                    }
                }
            }
        }
    }
    names
        .into_iter()
        .enumerate()
        .map(|(i, n)| (n, i as u16))
        .collect()
}

#[derive(Serialize)]
struct CheckReport<'a> {
    source: &'a str,
    forward_rules: usize,
    input_rules: usize,
    stateful: bool,
    compile_ms: f64,
    build: &'a firewall::BuildStats,
}

fn check(a: CheckArgs) -> anyhow::Result<()> {
    let set = load(&a.file)?;
    let t = Instant::now();
    let fw = Firewall::compile(&set, &interfaces_of(&set))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let report = CheckReport {
        source: &set.source,
        forward_rules: set.chain(Chain::Forward).rules.len(),
        input_rules: set.chain(Chain::Input).rules.len(),
        stateful: fw.stateful(),
        compile_ms,
        build: fw.build_stats(),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{}: ok, forward {} rules (policy {:?}), input {} rules (policy {:?}), conntrack {}",
        report.source,
        report.forward_rules,
        set.chain(Chain::Forward).policy,
        report.input_rules,
        set.chain(Chain::Input).policy,
        if report.stateful { "on" } else { "off" }
    );
    println!(
        "compiled in {:.1} ms, {} KiB",
        compile_ms,
        fw.build_stats().bytes / 1024
    );
    for (name, s) in ["forward ip", "forward ip6", "input ip", "input ip6"]
        .iter()
        .zip(&fw.build_stats().classifiers)
    {
        println!(
            "  {name:<12} {:>6} rules {:>3} groups{} {:>8} KiB",
            s.rules,
            s.groups,
            if s.bit_vector { " (bit vectors)" } else { "" },
            s.bytes / 1024
        );
    }
    Ok(())
}

#[derive(ClapArgs)]
pub struct ClassifyArgs {
    /// Rule file.
    file: PathBuf,
    #[arg(long, default_value = "forward")]
    chain: String,
    #[arg(long)]
    src: IpAddr,
    #[arg(long)]
    dst: IpAddr,
    /// Protocol name or number (tcp, udp, icmp, icmpv6, 47 …).
    #[arg(long, default_value = "tcp")]
    proto: String,
    #[arg(long, default_value_t = 0)]
    sport: u16,
    #[arg(long, default_value_t = 0)]
    dport: u16,
    /// Input interface name.
    #[arg(long)]
    iif: Option<String>,
    /// Output interface name.
    #[arg(long)]
    oif: Option<String>,
    /// TCP flags, comma separated (syn,ack).
    #[arg(long, default_value = "")]
    flags: String,
    /// ICMP / ICMPv6 type number.
    #[arg(long, default_value_t = 0)]
    icmp_type: u8,
    /// Connection-tracking state the packet has.
    #[arg(long, default_value = "untracked")]
    ct: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct ClassifyReport {
    verdict: Verdict,
    rule: Option<firewall::RuleInfo>,
}

fn classify(a: ClassifyArgs) -> anyhow::Result<()> {
    let set = load(&a.file)?;
    let ifaces = interfaces_of(&set);
    let fw = Firewall::compile(&set, &ifaces)?;
    let chain = match a.chain.as_str() {
        "forward" => Chain::Forward,
        "input" => Chain::Input,
        c => bail!("unknown chain `{c}` (forward, input)"),
    };
    let proto = match a.proto.as_str() {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" => 58,
        "sctp" => 132,
        p => p
            .parse()
            .with_context(|| format!("unknown protocol `{p}`"))?,
    };
    let (src, dst, is_v6) = match (a.src, a.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (u32::from(s) as u128, u32::from(d) as u128, false),
        (IpAddr::V6(s), IpAddr::V6(d)) => (u128::from(s), u128::from(d), true),
        _ => bail!("--src and --dst must be of the same family"),
    };
    let mut tcp_flags = 0u8;
    for f in a.flags.split(',').filter(|f| !f.is_empty()) {
        tcp_flags |= match f {
            "fin" => 0x01,
            "syn" => 0x02,
            "rst" => 0x04,
            "psh" => 0x08,
            "ack" => 0x10,
            "urg" => 0x20,
            "ecn" => 0x40,
            "cwr" => 0x80,
            _ => bail!("unknown TCP flag `{f}`"),
        };
    }
    let iface = |n: &Option<String>| {
        n.as_deref()
            .map_or(IFACE_NONE, |n| ifaces.get(n).unwrap_or(IFACE_NONE - 1))
    };
    let key = PacketKey {
        src,
        dst,
        sport: a.sport,
        dport: a.dport,
        iif: iface(&a.iif),
        oif: iface(&a.oif),
        len: 0,
        proto,
        tcp_flags,
        icmp_type: a.icmp_type,
        icmp_code: 0,
        ct: CtState::from_word(&a.ct).with_context(|| format!("unknown ct state `{}`", a.ct))?,
        is_v6,
        ct_hint: Default::default(),
    };
    let mut out = [Verdict::default()];
    fw.classify_batch(chain, &[key], &mut out, &mut RuleCounters::default());
    let report = ClassifyReport {
        verdict: out[0],
        rule: fw.rule_info(out[0].rule).cloned(),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        match &report.rule {
            Some(r) => println!(
                "{:?} by {}:{}: {}",
                report.verdict.action, set.source, r.line, r.text
            ),
            None => println!("{:?} by the {chain} policy", report.verdict.action),
        }
    }
    Ok(())
}

#[derive(ClapArgs)]
pub struct BenchArgs {
    /// Rule counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000,10000")]
    rules: Vec<usize>,
    /// Packets in the trace.
    #[arg(long, default_value_t = 65536)]
    trace: usize,
    /// Measurements per figure (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Seconds per measurement, roughly.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Path of dpdk-test-acl; empty to skip DPDK.
    #[arg(long, default_value = "dpdk-test-acl")]
    dpdk: String,
    /// DPDK classify methods to run (default: every one this CPU can run;
    /// the ratio is against the fastest).
    #[arg(long, value_delimiter = ',')]
    dpdk_alg: Vec<String>,
    /// Directory for the generated rule and trace files.
    #[arg(long, default_value = "/tmp/fastfwd-bench-firewall")]
    workdir: PathBuf,
    /// Write the results as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let cfg = benchmark::BenchConfig {
        rules: a.rules,
        trace: a.trace,
        repeat: a.repeat,
        seconds: a.seconds,
        seed: a.seed,
        dpdk: a.dpdk,
        dpdk_alg: if a.dpdk_alg.is_empty() {
            benchmark::dpdk_algs_for_this_cpu()
        } else {
            a.dpdk_alg
        },
        workdir: a.workdir,
    };
    let load = netio::sys::os::LoadNote::start();
    println!("{}", load.header());
    benchmark::print_header();
    let rows = benchmark::run(&cfg, benchmark::print_row)?;
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        println!(
            "fastfwd at {} rules runs at {:.2}x its rate at {} rules{}",
            last.rules,
            last.compiled_mpps / first.compiled_mpps,
            first.rules,
            load.ratio_flag()
        );
    }
    println!("{}", load.footer());
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}
