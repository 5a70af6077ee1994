//! Restarts without an outage: the XDP engine's program stays attached
//! when its daemon exits (`--on-exit keep`, the default) or is killed,
//! forwarding with the tables it has, and the next daemon replaces it in
//! one step (docs/operations.md, "Restarts and upgrades"). Traffic runs
//! through dut the whole time and every datagram must arrive. Needs root;
//! skips otherwise (fails under CI).

mod router_common;

use router_common::{Lab, SINK4, XDP_ENGINE, sh, udp_count, udp_count_during, within};
use std::time::Duration;

/// The id of the XDP program attached to `dev` in dut, if any.
fn prog_id(lab: &Lab, dev: &str) -> Option<u64> {
    let out = router_common::ok(&["ip", "-n", &lab.dut, "-j", "link", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0]["xdp"]["prog"]["id"].as_u64()
}

fn kill_9(d: &router_common::Daemon) {
    let _ = sh(&["kill", "-KILL", &d.pid().to_string()]);
    // `ip netns exec` execs fastfwd: the child is the daemon itself.
    within(Duration::from_secs(5), || {
        !std::path::Path::new(&format!("/proc/{}", d.pid())).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", d.pid()))
                .is_ok_and(|s| s.contains(") Z "))
    })
    .expect("the daemon died");
}

/// SIGTERM + start, SIGKILL + start, both under traffic: not one of
/// 4,000 datagrams lost, the program on d0 and d1 replaced each time
/// (new program id) and never absent; the new daemon forwards exceptions
/// again (a ping answered by dut itself after the restarts).
#[test]
fn xdp_engine_restarts_and_survives_a_kill_without_losing_a_packet() {
    let Some(lab) = Lab::new("rk") else { return };
    let keep = ["--on-exit", "keep"];
    let mut first = lab.start_with_args(XDP_ENGINE, "", &keep);
    assert_eq!(first.json(&["show", "interfaces"])["on_exit"], "keep");
    // Neighbours resolved, the path warm.
    assert_eq!(udp_count(&lab, SINK4, 7001, 20), 20);
    let p1 = prog_id(&lab, "d0").expect("attached");
    let (mut p2, mut p3) = (None, None);
    let mut second = None;
    let mut third = None;
    let arrived = udp_count_during(&lab, SINK4, 7002, 4_000, 1.0, || {
        std::thread::sleep(Duration::from_millis(600));
        let (clean, log) = first.stop();
        assert!(clean, "{log}");
        assert_eq!(
            prog_id(&lab, "d0"),
            Some(p1),
            "still forwarding after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(300));
        let d = lab.start_with_args(XDP_ENGINE, "", &keep);
        p2 = prog_id(&lab, "d0");
        assert!(p2.is_some() && p2 != Some(p1), "replaced: {p1} -> {p2:?}");
        std::thread::sleep(Duration::from_millis(600));
        kill_9(&d);
        second = Some(d);
        assert_eq!(prog_id(&lab, "d0"), p2, "still forwarding after SIGKILL");
        std::thread::sleep(Duration::from_millis(300));
        let d = lab.start_with_args(XDP_ENGINE, "", &keep);
        p3 = prog_id(&lab, "d0");
        third = Some(d);
    });
    assert_eq!(arrived, 4_000, "datagrams lost across the restarts");
    assert!(p3.is_some() && p3 != p2, "replaced again: {p2:?} -> {p3:?}");
    assert_eq!(prog_id(&lab, "d1"), p3, "one program on both ports");
    let log = std::fs::read_to_string(&third.as_ref().unwrap().log).unwrap();
    assert!(
        log.contains("took over from the XDP program an earlier fastfwd left running"),
        "{log}"
    );
    // The new daemon's exceptions reach its pipeline: dut answers pings.
    assert!(
        lab.ping(&lab.generator, router_common::DUT_D0, 3).is_some(),
        "the pipeline answers after the restarts"
    );
    drop(second);
    // Stopped with `--on-exit detach`, the interfaces go back to the
    // kernel.
    let (clean, log) = third.take().unwrap().stop();
    assert!(clean, "{log}");
    let mut last = lab.start_with_args(XDP_ENGINE, "", &["--on-exit", "detach"]);
    assert!(prog_id(&lab, "d0").is_some_and(|p| Some(p) != p3));
    let (clean, log) = last.stop();
    assert!(clean, "{log}");
    assert!(!lab.dut_has_xdp(), "detached on exit");
}

/// A user-space engine started where the XDP engine was left forwarding
/// takes the ports over: the program is detached (named in the log) and
/// the steering program attached.
#[test]
fn the_user_engine_takes_over_from_a_kept_xdp_engine() {
    let Some(lab) = Lab::new("ru") else { return };
    let mut d = lab.start_with_args(XDP_ENGINE, "", &["--on-exit", "keep"]);
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
    let kept = prog_id(&lab, "d0").expect("kept");
    let mut user = lab.start("xdp");
    assert!(prog_id(&lab, "d0").is_some_and(|p| p != kept));
    assert_eq!(udp_count(&lab, SINK4, 7003, 50), 50);
    let (clean, log) = user.stop();
    assert!(clean, "{log}");
    assert!(
        log.contains("detached the XDP engine's program an earlier fastfwd left forwarding here"),
        "{log}"
    );
    assert!(!lab.dut_has_xdp(), "nothing left attached");
}

/// A TCP connection open across a restart of the XDP engine under a
/// stateful firewall (new flows only from gen, `policy drop`): its flow,
/// in the program's fast path, is carried into the new daemon's, so its
/// next segments are `established` there, not `invalid`.
#[test]
fn an_open_connection_survives_a_restart_under_ct_state_rules() {
    let Some(lab) = Lab::new("rc") else { return };
    let firewall = router_common::STATEFUL_FIREWALL;
    let keep = ["--on-exit", "keep"];
    let mut first = lab.start_with_args(XDP_ENGINE, firewall, &keep);
    let server = "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('198.19.0.108',7100))\ns.listen(1)\nprint('ready',flush=True)\nc,_=s.accept()\nwhile True:\n  d=c.recv(100)\n  if not d: break\n  c.sendall(d)\n";
    let client = "import socket,sys\nc=socket.create_connection(('198.19.0.108',7100),timeout=5)\nfor i in range(20):\n  c.sendall(b'before');assert c.recv(100)==b'before'\nprint('open',flush=True)\nsys.stdin.readline()\nfor i in range(20):\n  c.sendall(b'after');assert c.recv(100)==b'after'\nprint('after',flush=True)\n";
    let mut srv = KillOnDrop(
        std::process::Command::new("ip")
            .args(["netns", "exec", &lab.sink, "python3", "-c", server])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut srv_out = std::io::BufReader::new(srv.0.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut srv_out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let mut cli = KillOnDrop(
        std::process::Command::new("ip")
            .args(["netns", "exec", &lab.generator, "python3", "-c", client])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(cli.0.stdout.take().unwrap());
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(
        line.trim(),
        "open",
        "the connection opened through the firewall"
    );
    // The flow is in the program's table once a worker handed it over.
    std::thread::sleep(Duration::from_millis(300));
    let (clean, log) = first.stop();
    assert!(clean, "{log}");
    let mut second = lab.start_with_args(XDP_ENGINE, firewall, &keep);
    let log = std::fs::read_to_string(&second.log).unwrap();
    assert!(
        log.contains("carried the established flows") && log.contains("flows=1"),
        "{log}"
    );
    std::io::Write::write_all(cli.0.stdin.as_mut().unwrap(), b"go\n").unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let status = cli.0.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut cli.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        status.success() && line.trim() == "after",
        "the connection after the restart: {line} {err}"
    );
    drop(srv);
    let (clean, log) = second.stop();
    assert!(clean, "{log}");
}

/// A child process killed when the test ends, passing or not (a server
/// left running would hold the test's output open).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--on-exit kernel`: after the daemon is gone, what the kept program
/// would hand to the pipeline goes to the kernel, which (its forwarding
/// on) answers a packet whose TTL expires with ICMP time exceeded; with
/// `keep` the same packet is dropped (counted in the program). Transit
/// traffic goes on in the program either way.
#[test]
fn on_exit_kernel_sends_the_exceptions_to_the_kernel() {
    let Some(lab) = Lab::new("rx") else { return };
    lab.kernel_forwards(true);
    let ttl_exceeded = || {
        let o = sh(&[
            "ip",
            "netns",
            "exec",
            &lab.generator,
            "ping",
            "-n",
            "-c",
            "2",
            "-W",
            "1",
            "-t",
            "1",
            SINK4,
        ]);
        String::from_utf8_lossy(&o.stdout).contains("Time to live exceeded")
    };
    for (on_exit, answered) in [("keep", false), ("kernel", true)] {
        let mut d = lab.start_with_args(XDP_ENGINE, "", &["--on-exit", on_exit]);
        assert_eq!(d.json(&["show", "interfaces"])["on_exit"], on_exit);
        assert!(
            ttl_exceeded(),
            "{on_exit}: the pipeline answers while it runs"
        );
        // The sink's neighbour resolved while the pipeline runs (a miss
        // is an exception too).
        assert_eq!(udp_count(&lab, SINK4, 7200, 20), 20);
        let (clean, log) = d.stop();
        assert!(clean, "{log}");
        assert!(prog_id(&lab, "d0").is_some(), "{on_exit}: kept");
        assert_eq!(
            udp_count(&lab, SINK4, 7201, 50),
            50,
            "{on_exit}: forwarding on"
        );
        assert_eq!(
            ttl_exceeded(),
            answered,
            "{on_exit}: time exceeded after the exit"
        );
        for dev in ["d0", "d1"] {
            router_common::ok(&[
                "ip", "-n", &lab.dut, "link", "set", "dev", dev, "xdp", "off",
            ]);
        }
    }
}
