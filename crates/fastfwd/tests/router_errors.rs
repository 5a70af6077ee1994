//! Clear start-up errors: missing privileges, interfaces that do not
//! exist, an XDP attach failure (naming the AF_PACKET fallback); and a
//! failed start leaves nothing attached. Needs root; skips otherwise.

mod router_common;

use router_common::{sh, within, Lab};
use std::process::Command;
use std::time::Duration;

fn run_in(ns: &str, args: &[&str]) -> (bool, String) {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_fastfwd"), "run"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn startup_errors_are_clear_and_leave_nothing_behind() {
    let Some(lab) = Lab::new("e") else { return };
    let cfg = lab.write_config();
    let cfg_s = cfg.to_string_lossy().into_owned();

    // Without privileges.
    let o = sh(&[
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        env!("CARGO_BIN_EXE_fastfwd"),
        "run",
        "--config",
        &cfg_s,
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("needs root"), "{err}");

    // An interface the namespace does not have.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("name = \"d1\"", "name = \"nosuch1\"");
    let bad = lab.dir.join("missing.toml");
    std::fs::write(&bad, text).unwrap();
    let (okay, err) = run_in(
        &lab.dut,
        &[
            "--config",
            &bad.to_string_lossy(),
            "--socket",
            &lab.dir.join("m.sock").to_string_lossy(),
        ],
    );
    assert!(!okay);
    assert!(
        err.contains("nosuch1") && err.contains("do not exist in this network namespace"),
        "{err}"
    );

    // XDP attach failure: another program holds the interface.
    let d = lab.start("xdp");
    let (okay, err) = run_in(
        &lab.dut,
        &[
            "--config",
            &cfg_s,
            "--socket",
            &lab.dir.join("second.sock").to_string_lossy(),
        ],
    );
    assert!(!okay);
    assert!(
        err.contains("XDP attach failed") && err.contains("--backend packet"),
        "{err}"
    );
    drop(d);
    assert!(!lab.dut_has_xdp(), "nothing left attached");

    // Even a killed daemon leaves nothing attached: the programs hang on
    // BPF links that close with the process.
    let d = lab.start("xdp");
    assert!(lab.dut_has_xdp());
    let _ = sh(&["kill", "-KILL", &d.pid().to_string()]);
    assert!(
        within(Duration::from_secs(3), || !lab.dut_has_xdp()).is_some(),
        "XDP gone after SIGKILL"
    );
}
