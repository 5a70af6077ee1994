//! `fastfwd lab churn` in the lab's namespaces with real BIRD: 5,000 IPv4
//! and 5,000 IPv6 prefixes of the full table announced over eBGP from
//! sink's BIRD to dut's, withdrawn and reinstalled three times, then 1,000 IPv4
//! and 200 IPv6 prefixes more flapped every second for 10 s, while 10 kpps flow
//! to the lab's own prefixes, for each fastfwd engine and the kernel. Every
//! state must reach dut's kernel and fastfwd's FIB, `fastfwd fib audit`
//! must find nothing after each, and no packet may be lost. (The full
//! table at 50 kpps is `lab churn`'s default; BENCHMARKS.md has its
//! figures.) Needs root and bird2; skips with a message otherwise, fails
//! under CI=true.

use serde_json::Value;
use std::process::Command;

#[test]
fn churn_of_a_table_over_bgp_loses_nothing_and_audits_clean() {
    if !netio::root_or_skip("the lab churn test") {
        return;
    }
    let out = std::env::temp_dir().join(format!("fastfwd-churn-test-{}", std::process::id()));
    let table = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/full-table-prefixes.txt.gz"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args([
            "lab", "churn", "--limit", "5000", "--cycles", "3", "--rate", "10000",
        ])
        .args([
            "--contenders",
            "xdp-engine,xdp,packet,kernel",
            "--tag",
            "churnt",
            "--json",
        ])
        .args(["--flap", "10", "--flap-prefixes", "1000"])
        .args(["--settle-timeout", "60", "--table-file", table, "-o"])
        .arg(&out)
        .output()
        .expect("run fastfwd lab churn");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "lab churn failed: {stderr}\n{stdout}");
    let report: Value = serde_json::from_str(&stdout).expect("lab churn --json prints JSON");
    assert_eq!(report["announced"], serde_json::json!([5000, 5000]));
    let results = report["results"].as_array().expect("results");
    let names: Vec<&str> = results
        .iter()
        .filter_map(|r| r["contender"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "fastfwd-xdp-engine",
            "fastfwd-xdp",
            "fastfwd-packet",
            "kernel"
        ]
    );
    for r in results {
        let name = r["contender"].as_str().unwrap_or("?");
        let fastfwd = r["fastfwd"].as_bool() == Some(true);
        assert_eq!(r["lost"], 0, "{name} lost packets: {r}");
        assert!(r["sent"].as_u64().unwrap_or(0) >= 40_000, "{name}: {r}");
        assert_eq!(r["received"], r["sent"], "{name}");
        let cycles = r["cycles"].as_array().expect("cycles");
        assert_eq!(cycles.len(), 3, "{name}");
        let flap = &r["flap"];
        assert_eq!(flap["prefixes"], serde_json::json!([1000, 200]), "{name}");
        assert!(flap["changes"].as_u64().unwrap_or(0) >= 9, "{name}: {flap}");
        if fastfwd {
            assert!(
                flap["rss_kib"].as_array().is_some_and(|v| v.len() >= 2),
                "{name}: {flap}"
            );
        }
        let states = std::iter::once(&r["initial"])
            .chain(
                cycles
                    .iter()
                    .flat_map(|c| [&c["withdraw"], &c["reinstall"]]),
            )
            .chain(std::iter::once(&flap["after"]));
        for s in states {
            assert!(
                s["kernel_s"].is_number(),
                "{name}: the kernel never got there: {s}"
            );
            if fastfwd {
                assert!(
                    s["fastfwd_s"].is_number(),
                    "{name}: fastfwd's FIB never got there: {s}"
                );
                assert_eq!(s["audit_differences"], 0, "{name}: fib audit: {s}");
            }
        }
        if fastfwd {
            assert!(r["rss_kib"].as_u64().unwrap_or(0) > 0, "{name}");
        }
    }
    std::fs::remove_dir_all(&out).ok();
}
