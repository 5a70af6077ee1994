//! `fastfwd lab restart` in the lab's namespaces, small: 20 kpps through
//! dut with the lab's own routes while the XDP engine and the user-space
//! engine (AF_XDP) are each stopped and started again twice (SIGTERM,
//! SIGKILL), beside the kernel. The XDP engine must lose nothing; the
//! user-space engine's loss is counted and bounded by its gap (a second a
//! restart at most here; docs/operations.md states it). Needs root; skips
//! otherwise, fails under CI=true.

use serde_json::Value;
use std::process::Command;

#[test]
fn restarts_under_load_lose_nothing_with_the_xdp_engine() {
    if !netio::root_or_skip("the lab restart test") {
        return;
    }
    let out = std::env::temp_dir().join(format!("fastfwd-restart-test-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .args(["lab", "restart", "--no-full-table", "--rate", "20000"])
        .args([
            "--phase",
            "1.5",
            "--engines",
            "xdp-engine,xdp",
            "--tag",
            "rstt",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("restart.json")).unwrap()).unwrap();
    let trials = v["trials"].as_array().unwrap();
    let trial = |name: &str| {
        trials
            .iter()
            .find(|t| t["contender"] == name)
            .unwrap_or_else(|| panic!("no trial {name}: {v}"))
    };
    let engine = trial("fastfwd-xdp-engine");
    assert_eq!(engine["restarts"].as_array().unwrap().len(), 2, "{engine}");
    assert!(engine["sent"].as_u64().unwrap() > 50_000, "{engine}");
    assert_eq!(
        engine["lost"], 0,
        "the XDP engine across two restarts: {engine}\n{stderr}"
    );
    let user = trial("fastfwd-xdp");
    let lost_ms = user["lost_ms"].as_f64().unwrap();
    assert!(
        lost_ms > 0.0 && lost_ms < 2_000.0,
        "AF_XDP loses its gap, and only that: {user}"
    );
    assert_eq!(trial("fastfwd-xdp (not restarted)")["lost"], 0, "{v}");
    assert_eq!(trial("kernel")["lost"], 0, "{v}");
    let _ = std::fs::remove_dir_all(&out);
}
