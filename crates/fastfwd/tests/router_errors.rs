//! Clear start-up errors: missing privileges, interfaces that do not
//! exist, an XDP attach failure (naming the AF_PACKET fallback); and a
//! failed start leaves nothing attached. Needs root; skips otherwise.

mod router_common;

use router_common::{Lab, sh, within};
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

    // The packet backend beside kernel forwarding would forward twice.
    let forwarding = |on: &str| {
        let kv = format!("net.ipv4.ip_forward={on}");
        let _ = sh(&["ip", "netns", "exec", &lab.dut, "sysctl", "-qw", &kv]);
    };
    forwarding("1");
    let fwd_sock = lab.dir.join("fwd.sock").to_string_lossy().into_owned();
    let (okay, err) = run_in(
        &lab.dut,
        &[
            "--config",
            &cfg_s,
            "--backend",
            "packet",
            "--socket",
            &fwd_sock,
        ],
    );
    forwarding("0");
    assert!(!okay && err.contains("kernel forwarding is on"), "{err}");

    // An AF_XDP ring the kernel would refuse: named before anything opens.
    let (okay, err) = run_in(
        &lab.dut,
        &[
            "--config",
            &cfg_s,
            "--xsk-rx-ring",
            "3000",
            "--socket",
            &fwd_sock,
        ],
    );
    assert!(
        !okay && err.contains("--xsk-rx-ring 3000: a power of two from 64 to 65536"),
        "{err}"
    );
    assert!(!lab.dut_has_xdp(), "nothing attached");

    // Real-time workers: a priority SCHED_FIFO does not have, busy polling
    // at a real-time priority, and a process that may not use SCHED_FIFO.
    let (okay, err) = run_in(
        &lab.dut,
        &[
            "--config",
            &cfg_s,
            "--worker-rt-priority",
            "100",
            "--socket",
            &fwd_sock,
        ],
    );
    assert!(
        !okay && err.contains("--worker-rt-priority 100: 0 (ordinary scheduling) or a SCHED_FIFO priority from 1 to 99"),
        "{err}"
    );
    let (okay, err) = run_in(
        &lab.dut,
        &[
            "--config",
            &cfg_s,
            "--busy-poll",
            "--worker-rt-priority",
            "1",
            "--socket",
            &fwd_sock,
        ],
    );
    assert!(
        !okay && err.contains("--busy-poll with --worker-rt-priority 1"),
        "{err}"
    );
    let o = sh(&[
        "setpriv",
        "--bounding-set=-sys_nice",
        "--inh-caps=-sys_nice",
        "ip",
        "netns",
        "exec",
        &lab.dut,
        env!("CARGO_BIN_EXE_fastfwd"),
        "run",
        "--config",
        &cfg_s,
        "--socket",
        &fwd_sock,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains(
                "--worker-rt-priority 1: this process may not run threads under SCHED_FIFO"
            ),
        "{err}"
    );
    assert!(!lab.dut_has_xdp(), "nothing left attached");

    // XDP attach failure: another program holds the interface (the
    // steering program, attached by iproute2).
    let obj = concat!(env!("CARGO_MANIFEST_DIR"), "/../io/bpf/xdp_steer.o");
    router_common::ok(&[
        "ip", "-n", &lab.dut, "link", "set", "dev", "d0", "xdp", "obj", obj, "sec", "xdp",
    ]);
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
    let d1 = router_common::ok(&["ip", "-n", &lab.dut, "link", "show", "d1"]);
    assert!(!d1.contains("xdp"), "left attached on d1: {d1}");
    router_common::ok(&[
        "ip", "-n", &lab.dut, "link", "set", "dev", "d0", "xdp", "off",
    ]);
    assert!(!lab.dut_has_xdp(), "nothing left attached");

    // A killed user-space engine leaves nothing attached: its steering
    // programs hang on BPF links that close with the process.
    let d = lab.start("xdp");
    assert!(lab.dut_has_xdp());
    let _ = sh(&["kill", "-KILL", &d.pid().to_string()]);
    assert!(
        within(Duration::from_secs(3), || !lab.dut_has_xdp()).is_some(),
        "XDP gone after SIGKILL"
    );
    // The XDP engine's program forwards on after a kill, whatever
    // `--on-exit` says (router_restart.rs); removed by hand here.
    let d = lab.start(router_common::XDP_ENGINE);
    let _ = sh(&["kill", "-KILL", &d.pid().to_string()]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(lab.dut_has_xdp(), "the XDP engine stays after SIGKILL");
    for dev in ["d0", "d1"] {
        router_common::ok(&[
            "ip", "-n", &lab.dut, "link", "set", "dev", dev, "xdp", "off",
        ]);
    }
    // And SIGTERM with `--on-exit detach` (what the tests' daemons run
    // with) detaches it.
    let mut d = lab.start(router_common::XDP_ENGINE);
    assert!(lab.dut_has_xdp());
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
    assert!(!lab.dut_has_xdp(), "XDP engine detached on SIGTERM");
}

/// A worker that panics ends the daemon with a failure status and its XDP
/// programs detached; it does not run on with a queue nobody serves.
#[test]
fn a_worker_panic_stops_the_daemon_non_zero_with_xdp_detached() {
    let Some(lab) = Lab::new("wp") else { return };
    let cfg = lab.write_config();
    let mut child = lab
        .run_command(&cfg, "xdp", &lab.socket())
        .env("FASTFWD_TEST_WORKER_PANIC", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        within(Duration::from_secs(5), || lab.dut_has_xdp()).is_some(),
        "attached"
    );
    // Transit traffic reaches the worker, which panics.
    let _ = lab.ping(&lab.generator, router_common::SINK4, 2);
    let mut status = None;
    within(Duration::from_secs(5), || {
        status = child.try_wait().unwrap();
        status.is_some()
    })
    .expect("the daemon stopped by itself");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.unwrap().success(), "non-zero exit: {err}");
    assert!(err.contains("worker thread panicked"), "{err}");
    assert!(!lab.dut_has_xdp(), "XDP detached");
}

/// A client whose output pipe closes ends quietly (no panic message), as
/// `ip` does.
#[test]
fn the_cli_ends_quietly_on_a_closed_pipe() {
    let Some(lab) = Lab::new("pp") else { return };
    let d = lab.start("packet");
    let sock = d.socket.to_string_lossy().into_owned();
    for _ in 0..5 {
        let o = sh(&[
            "sh",
            "-c",
            &format!(
                "{} show drops --socket {sock} | true",
                env!("CARGO_BIN_EXE_fastfwd")
            ),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{err}"
        );
    }
}

/// A second daemon on the ports of a running one is refused, naming the
/// port and the running daemon's pid (over AF_PACKET it would forward
/// every frame a second time); once the first has stopped, one starts.
#[test]
fn a_second_daemon_on_the_same_ports_is_refused() {
    let Some(lab) = Lab::new("2d") else { return };
    let mut first = lab.start("packet");
    let second = lab
        .run_command(&lab.write_config(), "packet", &lab.dir.join("second.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second daemon started: {err}");
    assert!(
        err.contains("port d0 is already forwarded by another fastfwd")
            && err.contains(&format!("pid {}", first.pid())),
        "{err}"
    );
    assert!(lab.ping(&lab.generator, router_common::SINK4, 2).is_some());
    let (clean, log) = first.stop();
    assert!(clean, "{log}");
    let _again = lab.start("packet");
    assert!(lab.ping(&lab.generator, router_common::SINK4, 2).is_some());
}
