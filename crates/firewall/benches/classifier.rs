//! `cargo bench -p fastfwd-firewall --bench classifier [-- --rules 1,100,1000,10000 --repeat 5 --seconds 0.5 --no-dpdk]`
//!
//! The same benchmark as `fastfwd firewall bench`: compiled classifier vs a
//! linear first-match scan vs dpdk-test-acl, interleaved in one run.

use firewall::benchmark::{BenchConfig, print_header, print_row, run};

fn main() {
    let mut cfg = BenchConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--rules" => cfg.rules = val().split(',').filter_map(|s| s.parse().ok()).collect(),
            "--repeat" => cfg.repeat = val().parse().unwrap_or(cfg.repeat),
            "--seconds" => cfg.seconds = val().parse().unwrap_or(cfg.seconds),
            "--trace" => cfg.trace = val().parse().unwrap_or(cfg.trace),
            "--dpdk-alg" => cfg.dpdk_alg = val().split(',').map(String::from).collect(),
            "--no-dpdk" => cfg.dpdk.clear(),
            _ => {} // `--bench` and other harness flags
        }
    }
    let load = fastfwd_sys::os::LoadNote::start();
    println!("{}", load.header());
    print_header();
    if let Err(e) = run(&cfg, print_row) {
        eprintln!("classifier bench: {e}");
        std::process::exit(1);
    }
    println!("{}", load.footer());
}
