//! The shipped unit (`dist/fastfwd.service`) started by a real systemd:
//! systemd runs as PID 1 of its own PID, mount and cgroup namespaces
//! inside dut's network namespace, with the unit as shipped but for the
//! paths of the binary and the configuration (both copied under /run,
//! since the unit hides /tmp and /home) and one drop-in: no default
//! dependencies (the container does not boot: nothing of sysinit.target
//! may run, its tmpfiles would empty the host's /tmp) and output to a
//! file. Every boot service that could touch the host is masked besides,
//! and /tmp and /var/tmp are the container's own. The daemon must start
//! under every hardening setting of the unit, forward, keep only
//! CAP_NET_ADMIN and CAP_NET_RAW with NO_NEW_PRIVS on every thread, and
//! stop cleanly with nothing left attached. Needs root and
//! /lib/systemd/systemd (scripts/install-deps); skips without root,
//! fails under CI.

mod router_common;

use router_common::{Lab, SINK4, ok, sh};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SYSTEMD: &str = "/lib/systemd/systemd";

/// A systemd running as PID 1 of its own namespaces; killed on drop
/// (which ends every process of its PID namespace).
struct Systemd {
    child: Child,
    /// Its PID here (1 in its own namespace).
    pid: u32,
}

impl Drop for Systemd {
    fn drop(&mut self) {
        let _ = sh(&["kill", "-9", &self.pid.to_string()]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Systemd {
    /// `systemctl ARGS` against this systemd (in its mount namespace,
    /// where its private socket is).
    fn systemctl(&self, args: &[&str]) -> std::process::Output {
        let pid = self.pid.to_string();
        let mut all = vec![
            "timeout",
            "60",
            "nsenter",
            "-t",
            &pid,
            "-m",
            "-p",
            "systemctl",
        ];
        all.extend_from_slice(args);
        sh(&all)
    }

    fn property(&self, unit: &str, name: &str) -> String {
        let o = self.systemctl(&["show", "-p", name, "--value", unit]);
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// A path of its mount namespace, seen from here.
    fn path(&self, inside: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{inside}", self.pid))
    }
}

/// The shipped unit with the binary and configuration under `/run/ff`.
fn unit() -> String {
    let shipped = include_str!("../../../dist/fastfwd.service");
    let mut text = shipped.to_string();
    for (from, to) in [
        ("/usr/local/bin/fastfwd", "/run/ff/fastfwd"),
        ("/etc/fastfwd/router.toml", "/run/ff/router.toml"),
        ("ReadOnlyPaths=/etc/fastfwd", "ReadOnlyPaths=/run/ff"),
    ] {
        assert!(text.contains(from), "the shipped unit has no {from}");
        text = text.replace(from, to);
    }
    text
}

/// Units of a booting system that must not run in the container: they
/// would act on the host (its /tmp, devices, sysctls, modules).
const MASKED: [&str; 12] = [
    "network-online.target",
    "sysinit.target",
    "systemd-tmpfiles-setup.service",
    "systemd-tmpfiles-setup-dev.service",
    "systemd-tmpfiles-clean.timer",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-sysctl.service",
    "systemd-modules-load.service",
    "systemd-journald.socket",
];

/// Starts systemd in dut's network namespace with `unit` installed as
/// fastfwd.service (its output appended to /run/ff/daemon.log) and waits
/// until it is up.
fn start_systemd(lab: &Lab, unit: &str) -> Systemd {
    let dir = &lab.dir;
    std::fs::write(dir.join("fastfwd.service"), unit).unwrap();
    std::fs::write(
        dir.join("test.conf"),
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n\
         StandardOutput=append:/run/ff/daemon.log\nStandardError=append:/run/ff/daemon.log\n",
    )
    .unwrap();
    let masks: String = MASKED
        .iter()
        .map(|u| format!("ln -s /dev/null /run/systemd/system/{u}\n"))
        .collect();
    std::fs::write(dir.join("idle.target"), "[Unit]\nDescription=idle\n").unwrap();
    let script = format!(
        "set -e\n\
         mount -t tmpfs tmpfs /run\n\
         mkdir -p /run/ff /run/systemd/system/fastfwd.service.d\n\
         cp {bin} /run/ff/fastfwd\n\
         cp {dir}/router.toml /run/ff/router.toml\n\
         cp {dir}/fastfwd.service /run/systemd/system/\n\
         cp {dir}/test.conf /run/systemd/system/fastfwd.service.d/\n\
         cp {dir}/idle.target /run/systemd/system/ff-idle.target\n\
         {masks}\
         mount -t tmpfs tmpfs /tmp\n\
         mount -t tmpfs tmpfs /var/tmp\n\
         exec env container=fastfwd-test {SYSTEMD} --system --unit=ff-idle.target\n",
        bin = env!("CARGO_BIN_EXE_fastfwd"),
        dir = dir.display(),
    );
    std::fs::write(dir.join("systemd.sh"), script).unwrap();
    let log = std::fs::File::create(dir.join("systemd.log")).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", &lab.dut, "unshare", "--pid", "--fork"])
        .args(["--mount", "--cgroup", "--mount-proc", "--propagation"])
        .args(["private", "sh"])
        .arg(dir.join("systemd.sh"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // `ip` execs unshare, which forks systemd.
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let pid = router_common::within(Duration::from_secs(10), || {
        std::fs::read_to_string(&children)
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok())
            .is_some_and(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "systemd")
            })
    });
    assert!(pid.is_some(), "systemd did not start");
    let pid: u32 = std::fs::read_to_string(&children)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let sd = Systemd { child, pid };
    let up = router_common::within(Duration::from_secs(30), || {
        let o = sd.systemctl(&["is-system-running"]);
        let state = String::from_utf8_lossy(&o.stdout);
        state.contains("running") || state.contains("degraded")
    });
    assert!(
        up.is_some(),
        "systemd never came up: {}",
        std::fs::read_to_string(dir.join("systemd.log")).unwrap_or_default()
    );
    sd
}

/// The host PIDs of processes named `comm` in `sd`'s PID namespace.
fn pids_in(sd: &Systemd, comm: &str) -> Vec<u32> {
    let ns = std::fs::read_link(format!("/proc/{}/ns/pid", sd.pid)).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/ns/pid")).is_ok_and(|n| n == ns)
                && std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == comm)
        })
        .collect()
}

fn xdp_attached(lab: &Lab, dev: &str) -> bool {
    ok(&["ip", "-n", &lab.dut, "link", "show", dev]).contains("xdp")
}

#[test]
fn the_shipped_unit_runs_the_daemon_under_systemd() {
    let Some(lab) = Lab::new("sd") else { return };
    assert!(
        Path::new(SYSTEMD).exists(),
        "{SYSTEMD} is missing: scripts/install-deps installs systemd"
    );
    lab.write_config();
    // The XDP engine's redirects reach the peers when they run NAPI.
    for (ns, dev) in [(&lab.generator, "g0"), (&lab.sink, "s0")] {
        ok(&["ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "on"]);
    }
    let sd = start_systemd(&lab, &unit());
    let log = || std::fs::read_to_string(sd.path("/run/ff/daemon.log")).unwrap_or_default();
    let started = sd.systemctl(&["start", "fastfwd"]);
    assert!(
        started.status.success(),
        "systemctl start: {}\n{}",
        String::from_utf8_lossy(&started.stderr),
        log()
    );
    let socket = sd.path("/run/fastfwd/fastfwd.sock");
    let sock = socket.to_string_lossy().into_owned();
    let mut last = String::new();
    let answered = router_common::within(Duration::from_secs(60), || {
        let o = Command::new("timeout")
            .args(["5", env!("CARGO_BIN_EXE_fastfwd")])
            .args(["show", "interfaces", "--socket", &sock])
            .output()
            .unwrap();
        last = String::from_utf8_lossy(&o.stderr).into_owned();
        o.status.success()
    });
    assert!(
        answered.is_some(),
        "the daemon never answered ({last}): {} {}\n{}",
        sd.property("fastfwd", "ActiveState"),
        sd.property("fastfwd", "Result"),
        log()
    );
    assert_eq!(sd.property("fastfwd", "ActiveState"), "active");
    assert!(xdp_attached(&lab, "d0"), "no XDP program on d0");
    assert!(
        lab.ping(&lab.generator, SINK4, 3).is_some(),
        "no forwarding under the unit\n{}",
        log()
    );
    // The unit's sandbox and the daemon's own drop, on every thread.
    let daemons = pids_in(&sd, "fastfwd");
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    let mut threads = 0;
    for t in std::fs::read_dir(format!("/proc/{}/task", daemons[0]))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap_or("")
                .trim()
                .to_string()
        };
        for k in ["CapEff:", "CapPrm:", "CapBnd:"] {
            assert_eq!(field(k), "0000000000003000", "thread {}", field("Name:"));
        }
        assert_eq!(field("NoNewPrivs:"), "1", "thread {}", field("Name:"));
        threads += 1;
    }
    assert!(threads >= 2, "control and worker threads: {threads}");
    // Stopped by systemd (SIGTERM): a clean exit, nothing left attached.
    let stopped = sd.systemctl(&["stop", "fastfwd"]);
    assert!(stopped.status.success());
    assert_eq!(sd.property("fastfwd", "ActiveState"), "inactive");
    assert_eq!(sd.property("fastfwd", "Result"), "success", "{}", log());
    assert_eq!(sd.property("fastfwd", "ExecMainStatus"), "0");
    assert!(!xdp_attached(&lab, "d0") && !xdp_attached(&lab, "d1"));
}
