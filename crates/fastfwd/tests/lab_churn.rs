//! `fastfwd lab churn` in the lab's namespaces with real BIRD: 5,000 IPv4
//! and 5,000 IPv6 prefixes of the full table announced over eBGP from
//! sink's BIRD to dut's, withdrawn and reinstalled three times, then 1,000 IPv4
//! and 200 IPv6 prefixes more flapped every second for 10 s with 500 IPv4 and
//! 100 IPv6 source rules (each with a route in table 100), while 10 kpps flow
//! to the lab's own prefixes, for each fastfwd engine and the kernel. Every
//! state must reach dut's kernel and fastfwd's FIB, `fastfwd fib audit`
//! must find nothing after each, and no packet may be lost beyond the
//! generator's own interface. What the generator's transmit path refused
//! never reached the router: it is printed, and bounded for fastfwd. The
//! kernel is the baseline: its figures are printed, its loss is not a
//! verdict on fastfwd (the routes reaching it are asserted). (The full
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
        .args([
            "--flap",
            "10",
            "--flap-prefixes",
            "1000",
            "--flap-rules",
            "500",
            "--flap-rules6",
            "100",
        ])
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
    let figure = |r: &Value, key: &str| r[key].as_u64().unwrap_or_else(|| panic!("{key}: {r}"));
    for r in results {
        eprintln!(
            "{}: sent {}, received {}, lost beyond the generator {}, refused by the generator {}, interface drops {}",
            r["contender"],
            r["sent"],
            r["received"],
            r["lost_beyond_generator"],
            r["generator_refused"],
            r["interface_drops"]
        );
    }
    for r in results {
        let name = r["contender"].as_str().unwrap_or("?");
        let fastfwd = r["fastfwd"].as_bool() == Some(true);
        let (sent, received, lost) = (figure(r, "sent"), figure(r, "received"), figure(r, "lost"));
        let refused = figure(r, "generator_refused");
        let beyond = figure(r, "lost_beyond_generator");
        assert!(sent >= 40_000, "{name}: {r}");
        assert_eq!(beyond, lost.saturating_sub(refused), "{name}: {r}");
        assert!(
            received + lost >= sent,
            "{name}: sent frames unaccounted for: {r}"
        );
        if fastfwd {
            assert_eq!(beyond, 0, "{name} lost packets beyond the generator: {r}");
            assert!(
                refused * 100 < sent,
                "{name}: the generator's interface refused {refused} of {sent} (d0's ring full: the forwarding core stalled): {r}"
            );
        }
        let cycles = r["cycles"].as_array().expect("cycles");
        assert_eq!(cycles.len(), 3, "{name}");
        let flap = &r["flap"];
        assert_eq!(flap["prefixes"], serde_json::json!([1000, 200]), "{name}");
        assert_eq!(flap["rules"], serde_json::json!([500, 100]), "{name}");
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
            .chain([&flap["in_place"], &flap["after"]]);
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
