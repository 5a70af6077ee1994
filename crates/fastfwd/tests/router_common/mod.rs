//! The gen → dut → sink lab of docs/lab.md in namespaces created
//! per test (unique names, deleted on drop), and a `fastfwd run` daemon in
//! dut. Tests that need root skip with a message otherwise.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

pub fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

pub fn ok(args: &[&str]) -> String {
    let o = sh(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs the Python `script` in namespace `ns`; its output (panics if it
/// fails).
pub fn python_in(ns: &str, script: &str) -> String {
    ok(&["ip", "netns", "exec", ns, "python3", "-c", script])
}

/// The three namespaces.
/// The scenarios' name for `--engine xdp` (the XDP program, exceptions
/// over AF_XDP); other names are `--backend` values of the user engine.
pub const XDP_ENGINE: &str = "xdp-engine";

/// A stateful forward chain: new flows only from gen's side (d0), replies
/// by connection tracking, the rest dropped.
pub const STATEFUL_FIREWALL: &str = r#"
[firewall]
rules = """
chain forward {
    policy drop
    ct state established accept
    iif d0 ct state new accept
}
"""
"#;

/// `--engine` for a scenario's backend name.
pub fn engine_of(backend: &str) -> &'static str {
    if backend == XDP_ENGINE { "xdp" } else { "user" }
}

/// `--backend` for a scenario's backend name.
pub fn backend_of(backend: &str) -> &str {
    if backend == XDP_ENGINE {
        "xdp"
    } else {
        backend
    }
}

pub struct Lab {
    pub generator: String,
    pub dut: String,
    pub sink: String,
    pub dir: PathBuf,
}

pub const DUT_D0: &str = "198.18.0.10";
pub const DUT_D1: &str = "198.19.0.10";
pub const SINK4: &str = "198.19.0.108";
pub const SINK6: &str = "2001:2:0:8000::108";
pub const DUT6_D0: &str = "2001:2::10";

impl Lab {
    /// Builds the lab; `None` (with a message) when not root.
    pub fn new(tag: &str) -> Option<Lab> {
        Lab::with_queues(tag, 1)
    }

    /// [`Lab::new`] with veth pairs of `queues` RX/TX queues each.
    pub fn with_queues(tag: &str, queues: u32) -> Option<Lab> {
        if !netio::root_or_skip("the router tests") {
            return None;
        }
        let id = std::process::id() % 100_000;
        let p = format!("rt{id}{tag}");
        let dir = std::env::temp_dir().join(format!("fastfwd-{p}"));
        std::fs::create_dir_all(&dir).unwrap();
        let lab = Lab {
            generator: format!("{p}gen"),
            dut: format!("{p}dut"),
            sink: format!("{p}sink"),
            dir,
        };
        for ns in [&lab.generator, &lab.dut, &lab.sink] {
            ok(&["ip", "netns", "add", ns]);
            ok(&[
                "ip",
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.accept_dad=0",
                "net.ipv6.conf.default.accept_dad=0",
            ]);
            ok(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        let (g, d, s) = (lab.generator.as_str(), lab.dut.as_str(), lab.sink.as_str());
        let q = queues.to_string();
        for (ns, a, b) in [(g, "g0", "d0"), (s, "s0", "d1")] {
            ok(&[
                "ip",
                "-n",
                ns,
                "link",
                "add",
                a,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                b,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "netns",
                d,
            ]);
        }
        for (ns, dev, a4, a6) in [
            (g, "g0", "198.18.0.108/24", "2001:2::108/64"),
            (d, "d0", "198.18.0.10/24", "2001:2::10/64"),
            (d, "d1", "198.19.0.10/24", "2001:2:0:8000::10/64"),
            (s, "s0", "198.19.0.108/24", "2001:2:0:8000::108/64"),
        ] {
            ok(&["ip", "-n", ns, "addr", "add", a4, "dev", dev]);
            ok(&["ip", "-n", ns, "addr", "add", a6, "dev", dev]);
            ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        // Checksums complete in software: a frame that crosses XDP or an
        // AF_PACKET socket loses the skb's "checksum to be filled" mark.
        ok(&["ip", "netns", "exec", g, "ethtool", "-K", "g0", "tx", "off"]);
        ok(&["ip", "netns", "exec", s, "ethtool", "-K", "s0", "tx", "off"]);
        ok(&["ip", "-n", g, "route", "add", "default", "via", DUT_D0]);
        ok(&[
            "ip", "-n", g, "-6", "route", "add", "default", "via", DUT6_D0,
        ]);
        ok(&["ip", "-n", s, "route", "add", "default", "via", DUT_D1]);
        ok(&[
            "ip",
            "-n",
            s,
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:2:0:8000::10",
        ]);
        // The kernel must not forward: whatever crosses dut crossed fastfwd.
        ok(&[
            "ip",
            "netns",
            "exec",
            d,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=0",
            "net.ipv6.conf.all.forwarding=0",
        ]);
        Some(lab)
    }

    pub fn mac(&self, ns: &str, dev: &str) -> String {
        let out = ok(&["ip", "-n", ns, "-j", "link", "show", dev]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v[0]["address"].as_str().unwrap().to_string()
    }

    /// The dut's config: both interfaces, no routes, no neighbours.
    pub fn write_config(&self) -> PathBuf {
        let text = format!(
            "[[interfaces]]\nname = \"d0\"\nmac = \"{}\"\naddresses = [\"198.18.0.10/24\", \"2001:2::10/64\"]\n\n\
             [[interfaces]]\nname = \"d1\"\nmac = \"{}\"\naddresses = [\"198.19.0.10/24\", \"2001:2:0:8000::10/64\"]\n",
            self.mac(&self.dut, "d0"),
            self.mac(&self.dut, "d1")
        );
        let path = self.dir.join("router.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("fastfwd.sock")
    }

    /// `ping` from `ns`; returns the output when at least one reply came.
    pub fn ping(&self, ns: &str, dst: &str, count: u32) -> Option<String> {
        let c = count.to_string();
        let o = sh(&[
            "ip", "netns", "exec", ns, "ping", "-c", &c, "-i", "0.2", "-W", "1", dst,
        ]);
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `fastfwd run` in dut with this config, backend, one worker on CPU 1
    /// and this control socket, ready to spawn or run.
    pub fn run_command(
        &self,
        cfg: &std::path::Path,
        backend: &str,
        socket: &std::path::Path,
    ) -> Command {
        self.run_command_on(cfg, backend, socket, "1")
    }

    /// [`Lab::run_command`] with workers on `cores`.
    pub fn run_command_on(
        &self,
        cfg: &std::path::Path,
        backend: &str,
        socket: &std::path::Path,
        cores: &str,
    ) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.dut,
            env!("CARGO_BIN_EXE_fastfwd"),
            "run",
            "--config",
        ])
        .arg(cfg)
        .args(["--engine", engine_of(backend)])
        .args([
            "--backend",
            backend_of(backend),
            "--cores",
            cores,
            "--socket",
        ])
        .arg(socket);
        c
    }

    /// The XDP engine redirects frames into d0 and d1, which the kernel
    /// delivers to their peers only when those run NAPI: GRO on (or an
    /// XDP program there), as on a NIC.
    pub fn peers_accept_redirects(&self) {
        ok(&[
            "ip",
            "netns",
            "exec",
            &self.generator,
            "ethtool",
            "-K",
            "g0",
            "gro",
            "on",
        ]);
        ok(&[
            "ip", "netns", "exec", &self.sink, "ethtool", "-K", "s0", "gro", "on",
        ]);
    }

    /// Turns the kernel's own IPv4 forwarding in dut on or off (the peer
    /// some scenarios measure fastfwd against).
    pub fn kernel_forwards(&self, on: bool) {
        ok(&[
            "ip",
            "netns",
            "exec",
            &self.dut,
            "sysctl",
            "-qw",
            &format!("net.ipv4.ip_forward={}", u8::from(on)),
        ]);
    }

    /// Starts `fastfwd run` in dut and waits for its control socket.
    pub fn start(&self, backend: &str) -> Daemon {
        self.start_with(backend, "")
    }

    /// [`Lab::start`] with `extra` appended to the config (e.g. `[firewall]`).
    pub fn start_with(&self, backend: &str, extra: &str) -> Daemon {
        self.start_with_args(backend, extra, &[])
    }

    /// [`Lab::start_with`] with more `fastfwd run` arguments.
    pub fn start_with_args(&self, backend: &str, extra: &str, args: &[&str]) -> Daemon {
        if backend == XDP_ENGINE {
            self.peers_accept_redirects();
        }
        self.start_as_is(backend, extra, args)
    }

    /// Starts `fastfwd run` in dut with the lab as it is: the XDP engine's
    /// peers are not given NAPI first.
    pub fn start_as_is(&self, backend: &str, extra: &str, args: &[&str]) -> Daemon {
        let cfg = self.write_config();
        if !extra.is_empty() {
            let mut text = std::fs::read_to_string(&cfg).unwrap();
            text.push('\n');
            text.push_str(extra);
            std::fs::write(&cfg, text).unwrap();
        }
        self.start_from(backend, &cfg, args)
    }

    /// Starts `fastfwd run` in dut on the config at `cfg` and waits for
    /// its control socket.
    pub fn start_from(&self, backend: &str, cfg: &std::path::Path, args: &[&str]) -> Daemon {
        self.start_from_on(backend, cfg, args, "1")
    }

    /// [`Lab::start_from`] with workers on `cores`.
    pub fn start_from_on(
        &self,
        backend: &str,
        cfg: &std::path::Path,
        args: &[&str],
        cores: &str,
    ) -> Daemon {
        let log = self.dir.join(format!("run-{backend}.log"));
        let mut cmd = self.run_command_on(cfg, backend, &self.socket(), cores);
        cmd.args(args);
        // A test's next daemon or kernel comparison must not meet the XDP
        // engine left forwarding: detached on exit unless a test asks.
        if !args.contains(&"--on-exit") {
            cmd.args(["--on-exit", "detach"]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start fastfwd");
        let d = Daemon {
            child: Some(child),
            socket: self.socket(),
            log,
        };
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if d.socket.exists() && d.cli(&["show", "workers"]).status.success() {
                return d;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "fastfwd did not start: {}",
            std::fs::read_to_string(&d.log).unwrap_or_default()
        );
    }

    /// Whether any interface in dut has an XDP program.
    pub fn dut_has_xdp(&self) -> bool {
        let out = ok(&["ip", "-n", &self.dut, "-j", "link", "show"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array().unwrap().iter().any(|l| l.get("xdp").is_some())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.generator, &self.dut, &self.sink] {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running daemon; stopped with SIGTERM on drop.
pub struct Daemon {
    child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    pub fn cli(&self, args: &[&str]) -> Output {
        let sock = self.socket.to_string_lossy().into_owned();
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&["--socket", &sock]);
        Command::new(env!("CARGO_BIN_EXE_fastfwd"))
            .args(&all)
            .output()
            .expect("fastfwd cli")
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let o = self.cli(&all);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// The pid of fastfwd itself (the child is `ip netns exec`, which execs it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Sends SIGTERM and waits; returns the exit status success and the log.
    pub fn stop(&mut self) -> (bool, String) {
        let Some(mut c) = self.child.take() else {
            return (false, String::new());
        };
        let _ = sh(&["kill", "-TERM", &c.id().to_string()]);
        let end = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Ok(Some(s)) = c.try_wait() {
                break s.success();
            }
            if Instant::now() > end {
                let _ = c.kill();
                let _ = c.wait();
                break false;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (
            status,
            std::fs::read_to_string(&self.log).unwrap_or_default(),
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Retries `f` every 50 ms until it returns true or `limit` passes;
/// returns the time it took.
pub fn within(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Reply TTL/hop limit printed by ping (`ttl=63`).
pub fn reply_ttls(ping_out: &str) -> Vec<u32> {
    ping_out
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("ttl=").and_then(|t| t.parse().ok()))
        .collect()
}

/// A UDP echo server on `addr:port` in `ns` answering one datagram; the
/// client in `from` sends to it and returns what came back.
pub fn udp_echo(lab: &Lab, from: &str, addr: &str, port: u16) -> Option<String> {
    let fam = if addr.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let server = format!(
        "import socket\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\ns.bind(('{addr}',{port}))\ns.settimeout(5)\nd,a=s.recvfrom(100)\ns.sendto(b'echo:'+d,a)\n"
    );
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &lab.dut, "python3", "-c", &server])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let client = format!(
        "import socket\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\ns.settimeout(2)\ns.sendto(b'hello',('{addr}',{port}))\nprint(s.recvfrom(100)[0].decode())\n"
    );
    let o = sh(&["ip", "netns", "exec", from, "python3", "-c", &client]);
    let _ = srv.wait();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// CPU time (user + system) of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised name; utime and stime are 14th and 15th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = String::from_utf8_lossy(&sh(&["getconf", "CLK_TCK"]).stdout)
        .trim()
        .parse::<f64>()
        .unwrap_or(100.0);
    ticks / hz
}

/// Forwarding, ICMP, neighbours, local delivery and idle CPU through one
/// backend. Every check asserts something only fastfwd can make true: the
/// dut's kernel does not forward.
/// The value of field `key` (with its colon) in a /proc status file.
pub fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

pub fn forwarding_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    // No neighbour known anywhere: ARP and ND must run.
    for ns in [&lab.generator, &lab.dut, &lab.sink] {
        let _ = sh(&["ip", "-n", ns, "neigh", "flush", "all"]);
    }
    let mut d = lab.start(backend);
    // Least privilege: only CAP_NET_ADMIN and CAP_NET_RAW (bits 12, 13)
    // left, in every set, and no way to regain more.
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let field = |k: &str| status_field(&status, k);
    for k in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(field(k), "0000000000003000", "{k} {status}");
    }
    assert_eq!(field("CapInh:"), "0000000000000000");
    assert_eq!(field("NoNewPrivs:"), "1");
    assert!(
        d.json(&["show", "neighbors"])
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["origin"] == "kernel")
    );

    // IPv4 and IPv6 gen -> sink, TTL / hop limit decremented once each way.
    let out4 = lab
        .ping(&lab.generator, SINK4, 3)
        .expect("IPv4 ping from gen to sink through fastfwd");
    assert!(reply_ttls(&out4).iter().all(|&t| t == 63), "{out4}");
    let out6 = lab
        .ping(&lab.generator, SINK6, 3)
        .expect("IPv6 ping from gen to sink through fastfwd");
    assert!(reply_ttls(&out6).iter().all(|&t| t == 63), "{out6}");
    assert!(!reply_ttls(&out4).is_empty() && !reply_ttls(&out6).is_empty());
    if backend == XDP_ENGINE {
        // Neighbours known now: the program forwards in the kernel, the
        // pipeline sees only exceptions (the first packets, before ARP/ND).
        let before = d.json(&["show", "interfaces"])["xdp"]["forwarded"]
            .as_u64()
            .unwrap();
        lab.ping(&lab.generator, SINK4, 3).expect("IPv4 ping again");
        lab.ping(&lab.generator, SINK6, 3).expect("IPv6 ping again");
        let x = d.json(&["show", "interfaces"])["xdp"].clone();
        assert!(
            x["forwarded"].as_u64().unwrap() >= before + 12,
            "12 echo requests and replies forwarded by the program: {x}"
        );
        assert!(
            x["exceptions"]["neighbour_unknown"].as_u64().unwrap() >= 1,
            "{x}"
        );
        assert_eq!(x["exceptions_lost"], 0, "{x}");
        assert_eq!(x["tx_redirect_failed"], 0, "{x}");
    }

    // The neighbours were learnt dynamically from the kernel.
    let neigh = d.json(&["show", "neighbors"]);
    let ips: Vec<&str> = neigh
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["ip"].as_str())
        .collect();
    for ip in [SINK4, SINK6, "198.18.0.108", "2001:2::108"] {
        assert!(ips.contains(&ip), "{ip} resolved: {neigh}");
    }

    // traceroute shows the dut's hop (time exceeded from fastfwd), then the sink.
    for (fam, dst, hop1) in [("-4", SINK4, DUT_D0), ("-6", SINK6, DUT6_D0)] {
        let o = ok(&[
            "ip",
            "netns",
            "exec",
            &lab.generator,
            "traceroute",
            fam,
            "-n",
            "-q",
            "1",
            "-w",
            "1",
            "-m",
            "3",
            dst,
        ]);
        let lines: Vec<&str> = o.lines().skip(1).collect();
        assert!(
            lines
                .first()
                .is_some_and(|l| l.split_whitespace().nth(1) == Some(hop1)),
            "{o}"
        );
        assert!(
            lines
                .get(1)
                .is_some_and(|l| l.split_whitespace().nth(1) == Some(dst)),
            "{o}"
        );
    }

    // Counters saw it: forwarded packets, ICMP errors sent.
    let w = d.json(&["show", "interfaces"]);
    let d0 = &w["interfaces"][0];
    assert!(d0["rx_packets"].as_u64().unwrap() >= 6, "{w}");

    // Packets to the dut's own addresses reach its kernel: a UDP socket
    // answers, on the near and the far interface's address, and ping works.
    assert_eq!(
        udp_echo(&lab, &lab.generator, DUT_D1, 7001).as_deref(),
        Some("echo:hello")
    );
    assert_eq!(
        udp_echo(&lab, &lab.generator, "2001:2:0:8000::10", 7002).as_deref(),
        Some("echo:hello")
    );
    assert!(lab.ping(&lab.generator, DUT_D0, 1).is_some());

    // Idle: under 2% of a core over 3 s.
    std::thread::sleep(Duration::from_millis(500));
    let (c0, t0) = (cpu_seconds(d.pid()), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let idle = (cpu_seconds(d.pid()) - c0) / t0.elapsed().as_secs_f64();
    assert!(
        idle < 0.02,
        "idle fastfwd used {:.1}% of a core",
        idle * 100.0
    );
    eprintln!("{backend}: idle CPU {:.2}% of a core", idle * 100.0);

    let (clean, log) = d.stop();
    assert!(clean, "clean exit: {log}");
    assert!(!lab.dut_has_xdp(), "no XDP program left attached");
    assert!(!lab.socket().exists(), "control socket removed");
}

/// Routes from the kernel (`ip route` in dut) and from the CLI are used.
pub fn routes_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    // Destinations behind the sink.
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "10.99.0.1/32",
        "dev",
        "lo",
    ]);
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "10.98.0.1/32",
        "dev",
        "lo",
    ]);
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "2001:db8:99::1/128",
        "dev",
        "lo",
    ]);
    let d = lab.start(backend);
    assert!(
        lab.ping(&lab.generator, "10.99.0.1", 1).is_none(),
        "no route yet"
    );

    // `ip route add` in dut: used within one second.
    ok(&[
        "ip",
        "-n",
        &lab.dut,
        "route",
        "add",
        "10.99.0.0/16",
        "via",
        SINK4,
    ]);
    ok(&[
        "ip",
        "-n",
        &lab.dut,
        "-6",
        "route",
        "add",
        "2001:db8:99::/48",
        "via",
        SINK6,
    ]);
    let t = within(Duration::from_secs(3), || {
        d.json(&["show", "route", "10.99.0.1"])[0]["origin"] == "kernel"
    })
    .expect("kernel route mirrored");
    assert!(t < Duration::from_secs(1), "mirrored after {t:?}");
    assert!(
        lab.ping(&lab.generator, "10.99.0.1", 2).is_some(),
        "kernel route used"
    );
    assert!(
        lab.ping(&lab.generator, "2001:db8:99::1", 2).is_some(),
        "kernel IPv6 route used"
    );
    ok(&["ip", "-n", &lab.dut, "route", "del", "10.99.0.0/16"]);
    within(Duration::from_secs(1), || {
        d.json(&["show", "route", "10.99.0.1"])
            .as_array()
            .unwrap()
            .is_empty()
    })
    .expect("kernel route removal mirrored");
    assert!(
        lab.ping(&lab.generator, "10.99.0.1", 1).is_none(),
        "deleted route no longer used"
    );

    // A route added through the CLI.
    assert!(lab.ping(&lab.generator, "10.98.0.1", 1).is_none());
    let o = d.cli(&["route", "add", "10.98.0.0/16", "via", SINK4]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = d.json(&["show", "route", "10.98.0.1"]);
    assert_eq!(r[0]["origin"], "api", "{r}");
    assert_eq!(r[0]["next_hops"][0], "via 198.19.0.108 dev d1");
    assert!(
        lab.ping(&lab.generator, "10.98.0.1", 2).is_some(),
        "CLI route used"
    );
    assert!(
        !sh(&["ip", "-n", &lab.dut, "route", "get", "10.98.0.1"])
            .stdout
            .windows(12)
            .any(|w| w == b"198.19.0.108")
    );
    assert!(d.cli(&["route", "del", "10.98.0.0/16"]).status.success());
    assert!(
        lab.ping(&lab.generator, "10.98.0.1", 1).is_none(),
        "CLI route deleted"
    );
    // Errors are reported, not applied.
    let bad = d.cli(&["route", "add", "10.97.0.0/16", "via", "203.0.113.1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not on any connected subnet"));

    // A static neighbour through the CLI: a route via an address that
    // nothing answers ARP for works once the neighbour is given.
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "198.19.0.109/24",
        "dev",
        "s0",
    ]);
    ok(&[
        "ip",
        "netns",
        "exec",
        &lab.sink,
        "sysctl",
        "-qw",
        "net.ipv4.conf.all.arp_ignore=8",
    ]);
    let sink_mac = lab.mac(&lab.sink, "s0");
    assert!(
        d.cli(&["route", "add", "10.96.0.0/16", "via", "198.19.0.109"])
            .status
            .success()
    );
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "10.96.0.1/32",
        "dev",
        "lo",
    ]);
    assert!(
        lab.ping(&lab.generator, "10.96.0.1", 1).is_none(),
        "ARP ignored: unresolved"
    );
    let o = d.cli(&[
        "neighbor",
        "add",
        "198.19.0.109",
        "lladdr",
        &sink_mac,
        "dev",
        "d1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let n = d.json(&["show", "neighbors"]);
    assert!(
        n.as_array()
            .unwrap()
            .iter()
            .any(|e| e["ip"] == "198.19.0.109" && e["origin"] == "api"),
        "{n}"
    );
    assert!(
        lab.ping(&lab.generator, "10.96.0.1", 2).is_some(),
        "static neighbour used"
    );
    assert!(
        d.cli(&["neighbor", "del", "198.19.0.109", "dev", "d1"])
            .status
            .success()
    );
    ok(&[
        "ip",
        "netns",
        "exec",
        &lab.sink,
        "sysctl",
        "-qw",
        "net.ipv4.conf.all.arp_ignore=0",
    ]);

    // config reload: a file with a static route applies as a whole; a bad
    // file is refused and changes nothing.
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "10.95.0.1/32",
        "dev",
        "lo",
    ]);
    let cfg = lab.write_config();
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("\n[[routes]]\nprefix = \"10.95.0.0/16\"\nvia = \"198.19.0.108\"\n");
    let good = lab.dir.join("reload.toml");
    std::fs::write(&good, &text).unwrap();
    let bad = lab.dir.join("bad.toml");
    std::fs::write(&bad, text.replace("198.19.0.108\"\n", "203.0.113.9\"\n")).unwrap();
    let o = d.cli(&["config", "reload", &bad.to_string_lossy()]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.toml"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(lab.ping(&lab.generator, "10.95.0.1", 1).is_none());
    let o = d.cli(&["config", "reload", &good.to_string_lossy()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        d.json(&["show", "route", "10.95.0.1"])[0]["origin"],
        "config"
    );
    assert!(
        lab.ping(&lab.generator, "10.95.0.1", 2).is_some(),
        "reloaded config's route used"
    );

    // netstat -iw style: one line per interval.
    let o = d.cli(&["show", "interfaces", "-w", "1", "-c", "2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.lines().count() == 4, "{text}");
    let head: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        [
            "packets", "errs", "idrops", "bytes", "packets", "drops", "bytes"
        ],
        "{text}"
    );

    // config check keeps working against the live daemon.
    assert!(d.cli(&["config", "check"]).status.success());
    let drops = d.json(&["show", "drops"]);
    assert!(
        drops["drops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["reason"] == "no_route" && x["count"].as_u64() > Some(0)),
        "{drops}"
    );

    // show runtime: the stages saw the pings (the pipeline's, or with the
    // XDP engine the program's); clear runtime starts again from zero.
    let stage = |rt: &serde_json::Value, name: &str, field: &str| -> u64 {
        rt["workers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| w["stages"].as_array().unwrap().iter())
            .filter(|s| s["stage"] == name)
            .map(|s| s[field].as_u64().unwrap())
            .sum()
    };
    let rt = d.json(&["show", "runtime"]);
    if engine_of(backend) == "xdp" {
        assert!(rt["xdp"]["program"]["forwarded"].as_u64() > Some(0), "{rt}");
        // Per CPU: the CPUs' figures add up to the program's.
        let per_cpu = rt["xdp"]["per_cpu"].as_array().unwrap();
        let sum = |f: &str| per_cpu.iter().map(|c| c[f].as_u64().unwrap()).sum::<u64>();
        assert!(per_cpu.len() >= 2, "{rt}");
        assert_eq!(
            sum("forwarded"),
            rt["xdp"]["program"]["forwarded"].as_u64().unwrap(),
            "{rt}"
        );
        assert_eq!(
            sum("exceptions"),
            rt["xdp"]["exceptions"].as_u64().unwrap(),
            "{rt}"
        );
        // The exception path's own stages: the worker that served them.
        assert!(stage(&rt, "input", "packets") > 0, "{rt}");
    } else {
        assert!(stage(&rt, "input", "packets") > 0, "{rt}");
        assert!(stage(&rt, "forward", "packets") > 0, "{rt}");
        assert!(stage(&rt, "lookup", "ns") > 0, "{rt}");
    }
    let text = d.cli(&["show", "runtime"]);
    assert!(
        text.status.success() && String::from_utf8_lossy(&text.stdout).contains("ns/Packet"),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(d.cli(&["clear", "runtime"]).status.success());
    let after = d.json(&["show", "runtime"]);
    assert!(
        after["seconds"].as_f64() < rt["seconds"].as_f64(),
        "{after}"
    );
    assert!(
        stage(&after, "input", "packets") < stage(&rt, "input", "packets").max(1),
        "{after}"
    );
}

/// Sends `n` UDP datagrams from gen to `dst:port` while sink counts them;
/// returns how many arrived.
pub fn udp_count(lab: &Lab, dst: &str, port: u16, n: u32) -> u32 {
    udp_count_from(lab, None, dst, port, n)
}

/// [`udp_count`] with the generator's datagrams sent from `src` (an
/// address of gen's).
pub fn udp_count_from(lab: &Lab, src: Option<&str>, dst: &str, port: u16, n: u32) -> u32 {
    let bind = src.map_or(String::new(), |a| format!("s.bind(('{a}',0))\n"));
    let fam = if dst.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let client = format!(
        "import socket,time\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\n{bind}for i in range({n}):\n  s.sendto(b'x'*20,('{dst}',{port})); time.sleep(0.002)\n"
    );
    udp_count_sent_by(lab, dst, port, &client)
}

/// Sends `n` UDP datagrams from gen to `dst:port`, one every `gap_ms`,
/// while sink counts them and this thread runs `meanwhile` (a restart,
/// say); returns how many arrived.
pub fn udp_count_during(
    lab: &Lab,
    dst: &str,
    port: u16,
    n: u32,
    gap_ms: f64,
    meanwhile: impl FnOnce(),
) -> u32 {
    let client = format!(
        "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nt=time.monotonic()\nfor i in range({n}):\n  s.sendto(b'x'*20,('{dst}',{port}))\n  t+={gap};time.sleep(max(0,t-time.monotonic()))\n",
        gap = gap_ms / 1000.0
    );
    counted_in_sink_during(lab, &udp_counting_server(dst, port), &client, meanwhile)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The python server in sink that counts the UDP datagrams to
/// `dst:port`. It says when it is bound, and counts until told the client
/// is done, then for as long as datagrams keep coming (1 s apart at most):
/// a slow machine, or a kernel under emulation, may take longer to start
/// either interpreter than any fixed wait.
fn udp_counting_server(dst: &str, port: u16) -> String {
    let fam = if dst.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    format!(
        "import socket,sys,select\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\ns.bind(('{dst}',{port}))\nprint('ready',flush=True)\nn=0\ndone=False\nwhile True:\n  r,_,_=select.select([s]+([] if done else [sys.stdin]),[],[],1.0 if done else None)\n  if s in r:\n    s.recv(100); n+=1\n  elif r:\n    sys.stdin.readline(); done=True\n  else:\n    break\nprint(n)\n"
    )
}

/// Runs the python `client` in gen while sink counts the UDP datagrams
/// to `dst:port`; how many arrived.
fn udp_count_sent_by(lab: &Lab, dst: &str, port: u16, client: &str) -> u32 {
    counted_in_sink(lab, &udp_counting_server(dst, port), client)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Runs the python `server` in sink until it prints `ready`, then the
/// python `client` in gen, then tells the server the client is done
/// (closes its stdin); what the server printed after `ready`.
fn counted_in_sink(lab: &Lab, server: &str, client: &str) -> String {
    counted_in_sink_during(lab, server, client, || {})
}

/// [`counted_in_sink`] with `meanwhile` run on this thread while the
/// client runs on another.
fn counted_in_sink_during(
    lab: &Lab,
    server: &str,
    client: &str,
    meanwhile: impl FnOnce(),
) -> String {
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &lab.sink, "python3", "-c", server])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(srv.stdout.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut out, &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready", "the counting server in sink started");
    std::thread::scope(|s| {
        let sender = s.spawn(|| python_in(&lab.generator, client));
        meanwhile();
        sender.join().unwrap();
    });
    drop(srv.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    srv.wait().unwrap();
    rest
}

/// What a client in gen sees when it talks to `dst:port` while sink
/// listens there: `"reply"`, `"refused"` (ICMP unreachable or TCP RST) or
/// `"timeout"`.
pub fn probe(lab: &Lab, proto: &str, dst: &str, port: u16) -> String {
    let fam = if dst.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let (kind, serve) = match proto {
        "tcp" => (
            "SOCK_STREAM",
            "s.listen(1)\nc,_=s.accept()\nc.send(b'hi')\nc.close()\n",
        ),
        _ => ("SOCK_DGRAM", "d,a=s.recvfrom(100)\ns.sendto(b'hi',a)\n"),
    };
    let server = format!(
        "import socket\ns=socket.socket(socket.{fam},socket.{kind})\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('{dst}',{port}))\ns.settimeout(3)\ntry:\n  {}\nexcept OSError: pass\n",
        serve.trim_end().replace('\n', "\n  ")
    );
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &lab.sink, "python3", "-c", &server])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let talk = match proto {
        "tcp" => "s.connect(a)\nprint(s.recv(10).decode())",
        _ => "s.connect(a)\ns.send(b'x')\nprint(s.recv(10).decode())",
    };
    let client = format!(
        "import socket\na=('{dst}',{port})\ns=socket.socket(socket.{fam},socket.{kind})\ns.settimeout(2)\ntry:\n  {}\nexcept ConnectionRefusedError: print('refused')\nexcept OSError: print('timeout')\n",
        talk.replace('\n', "\n  ")
    );
    let o = sh(&[
        "ip",
        "netns",
        "exec",
        &lab.generator,
        "python3",
        "-c",
        &client,
    ]);
    let _ = srv.kill();
    let _ = srv.wait();
    match String::from_utf8_lossy(&o.stdout).trim() {
        "hi" => "reply".into(),
        other => other.to_string(),
    }
}

/// The packets counted by the firewall rule whose text contains `needle`.
pub fn rule_packets(fw: &serde_json::Value, needle: &str) -> u64 {
    fw["firewall"]["chains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["rules"].as_array().unwrap().iter())
        .find(|r| r["rule"].as_str().unwrap().contains(needle))
        .unwrap_or_else(|| panic!("no rule {needle} in {fw}"))["packets"]
        .as_u64()
        .unwrap()
}

pub const FIREWALL: &str = r#"[firewall]
rules = """
chain forward {
    policy drop
    ct state established,related accept
    udp dport 9001 counter drop
    udp dport 9002 reject
    tcp dport 9003 reject with tcp reset
    iif d0 ct state new accept
}
"""
"#;

/// The config's firewall is enforced by `fastfwd run`: accept, drop,
/// reject (ICMP and TCP RST, answered by fastfwd: the sink listens),
/// connection tracking (replies pass, new flows from the sink do not),
/// per-rule counters in `show firewall`, and `config reload` that swaps the
/// rules whole or refuses (file and line named, the old rules kept).
pub fn firewall_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let d = lab.start_with(backend, FIREWALL);
    // Neighbours first (ICMP errors need the way back).
    assert!(
        lab.ping(&lab.generator, SINK4, 2).is_some(),
        "new flow from d0 accepted, reply established"
    );
    assert!(lab.ping(&lab.generator, SINK6, 2).is_some(), "IPv6 too");
    assert!(
        lab.ping(&lab.sink, "198.18.0.108", 1).is_none(),
        "new flow from d1: policy drop"
    );
    assert!(
        lab.ping(&lab.sink, "2001:2::108", 1).is_none(),
        "IPv6 policy drop"
    );

    assert_eq!(udp_count(&lab, SINK4, 9000, 50), 50, "accepted port");
    assert_eq!(udp_count(&lab, SINK4, 9001, 50), 0, "dropped port");
    assert_eq!(udp_count(&lab, SINK6, 9001, 20), 0, "dropped port, IPv6");
    for (proto, dst, port, want, what) in [
        (
            "udp",
            SINK4,
            9002,
            "refused",
            "ICMP port unreachable from fastfwd",
        ),
        (
            "udp",
            SINK6,
            9002,
            "refused",
            "ICMPv6 unreachable from fastfwd",
        ),
        ("tcp", SINK4, 9003, "refused", "TCP RST from fastfwd"),
        ("tcp", SINK6, 9003, "refused", "TCP RST from fastfwd, IPv6"),
        (
            "tcp",
            SINK4,
            9004,
            "reply",
            "stateful TCP accepted both ways",
        ),
    ] {
        assert_eq!(probe(&lab, proto, dst, port), want, "{what}");
    }

    // Counters, summed from the workers (published every 100 ms).
    std::thread::sleep(Duration::from_millis(300));
    let fw = d.json(&["show", "firewall"]);
    assert!(rule_packets(&fw, "udp dport 9001") >= 70, "{fw}");
    assert!(rule_packets(&fw, "udp dport 9002") >= 2, "{fw}");
    assert!(rule_packets(&fw, "tcp dport 9003") >= 2, "{fw}");
    assert!(rule_packets(&fw, "ct state established") >= 4, "{fw}");
    let fwd = &fw["firewall"]["chains"][0];
    assert_eq!(fwd["chain"], "forward");
    assert!(fwd["policy_packets"].as_u64().unwrap() >= 2, "{fw}");
    assert!(fw["conntrack"]["inserts"].as_u64().unwrap() >= 3, "{fw}");
    if engine_of(backend) == "xdp" {
        // Connection tracking's fast path: the pings' and the TCP
        // connection's flows were handed to the program once established,
        // and it finished their later packets itself.
        let fp = &fw["fast_path"];
        assert!(fp["handoffs"].as_u64().unwrap() >= 3, "{fw}");
        assert!(fp["program_packets"].as_u64().unwrap() >= 2, "{fw}");
        assert_eq!(fp["refused"], 0, "{fw}");
        let xdp = d.json(&["show", "interfaces"])["xdp"].clone();
        assert!(
            xdp["exceptions"]["conntrack_unknown_flow"]
                .as_u64()
                .unwrap()
                >= 3
                && xdp["meta_failed"] == 0,
            "{xdp}"
        );
    } else {
        assert!(fw["fast_path"].is_null(), "{fw}");
    }
    let text = String::from_utf8_lossy(&d.cli(&["show", "firewall"]).stdout).into_owned();
    assert!(
        text.contains("udp dport 9001 counter drop") && text.contains("policy drop"),
        "{text}"
    );

    // A packet trace: the next three UDP datagrams to port 9000, every
    // stage, the rule that let them through (with the XDP engine, these
    // new flows are the program's exceptions, traced by the pipeline).
    let o = d.cli(&["trace", "add", "3", "--filter", "udp and dst port 9000"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(udp_count(&lab, SINK4, 9001, 5), 0, "not traced: other port");
    assert_eq!(udp_count(&lab, SINK4, 9000, 5), 5);
    std::thread::sleep(Duration::from_millis(300));
    let tr = d.json(&["trace", "show"]);
    let pk = tr["packets"].as_array().unwrap();
    assert_eq!((pk.len(), tr["remaining"].as_u64()), (3, Some(0)), "{tr}");
    for p in pk {
        assert_eq!(
            (&p["verdict"], &p["detail"]),
            (&"forward".into(), &"d1".into()),
            "{p}"
        );
        assert!(p["summary"].as_str().unwrap().contains("> 9000"), "{p}");
        assert_eq!(p["rule"]["text"], "iif d0 ct state new accept", "{p}");
        let stages: Vec<&str> = p["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stage"].as_str().unwrap())
            .collect();
        assert_eq!(
            stages,
            ["input", "lookup", "next_hop", "acl", "forward"],
            "{p}"
        );
    }
    let text = String::from_utf8_lossy(&d.cli(&["trace", "show"]).stdout).into_owned();
    assert!(text.contains("acl       accept by line"), "{text}");
    assert!(d.cli(&["trace", "clear"]).status.success());
    assert!(
        d.json(&["trace", "show"])["packets"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // pcap capture: the dropped datagrams to 9001 (with their reason in
    // each packet's comment) and the forwarded ones to 9000 as sent.
    for (point, port, n) in [("drop", 9001u16, 4usize), ("tx", 9000, 3)] {
        let file = lab.dir.join(format!("{point}.pcapng"));
        let sock = d.socket.to_string_lossy().into_owned();
        let filter = format!("udp and dst port {port}");
        let cap = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
            .args([
                "capture",
                "--point",
                point,
                "-c",
                &n.to_string(),
                "--timeout",
                "10",
            ])
            .args(["--filter", &filter, "-w"])
            .arg(&file)
            .args(["--socket", &sock])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        udp_count(&lab, SINK4, port, 8);
        let out = cap.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // tcpdump reads the file: the frames asked for, no more.
        let td = sh(&["tcpdump", "-r", &file.to_string_lossy(), "-nn", "-e"]);
        let text = String::from_utf8_lossy(&td.stdout).into_owned();
        assert!(
            td.status.success(),
            "{}",
            String::from_utf8_lossy(&td.stderr)
        );
        assert_eq!(text.lines().count(), n, "{point}: {text}");
        for line in text.lines() {
            assert!(
                line.contains(&format!("{SINK4}.{port}: UDP")),
                "{point}: {line}"
            );
        }
        // Each packet's interface and comment (pcapng blocks, read here).
        let bytes = std::fs::read(&file).unwrap();
        let blocks = pcapng_packets(&bytes);
        assert_eq!(blocks.len(), n);
        for (iface, comment) in blocks {
            if point == "drop" {
                assert_eq!((iface, comment.as_deref()), (0, Some("drop: acl_denied")));
            } else {
                // Sent on d1 with the sink's MAC.
                assert_eq!((iface, comment), (1, None));
            }
        }
        if point == "tx" {
            assert!(text.contains(&lab.mac(&lab.sink, "s0")), "{text}");
        }
    }

    let bad = d.cli(&["trace", "add", "3", "--filter", "udp and"]);
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("at 7"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let drops = d.json(&["show", "drops"]);
    assert!(
        drops["drops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["reason"] == "acl_denied" && x["count"].as_u64().unwrap() >= 70),
        "{drops}"
    );

    // A reload with a broken rule is refused, names file and line, keeps the rules.
    let cfg = lab.dir.join("router.toml");
    let base = std::fs::read_to_string(&cfg).unwrap();
    let bad = lab.dir.join("bad-fw.toml");
    std::fs::write(
        &bad,
        base.replace("udp dport 9001 counter drop", "udp dport 99999 drop"),
    )
    .unwrap();
    let o = d.cli(&["config", "reload", &bad.to_string_lossy()]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success() && err.contains("bad-fw.toml:") && err.contains("99999"),
        "{err}"
    );
    // An input-chain rule cannot be enforced: refused, not ignored.
    let input = lab.dir.join("input-fw.toml");
    std::fs::write(
        &input,
        base.replace(
            "chain forward {",
            "chain input {\n    tcp dport 22 drop\n}\nchain forward {",
        ),
    )
    .unwrap();
    let o = d.cli(&["config", "reload", &input.to_string_lossy()]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success() && err.contains("chain input") && err.contains("line 2"),
        "{err}"
    );
    assert_eq!(
        udp_count(&lab, SINK4, 9001, 20),
        0,
        "old rules still enforced"
    );

    // A reload that lets 9001 through applies whole.
    let open = lab.dir.join("open-fw.toml");
    std::fs::write(
        &open,
        base.replace(
            "udp dport 9001 counter drop",
            "udp dport 9001 counter accept",
        ),
    )
    .unwrap();
    let o = d.cli(&["config", "reload", &open.to_string_lossy()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(udp_count(&lab, SINK4, 9001, 30), 30, "new rules in force");
    std::thread::sleep(Duration::from_millis(300));
    let fw = d.json(&["show", "firewall"]);
    assert_eq!(
        rule_packets(&fw, "udp dport 9001 counter accept"),
        30,
        "{fw}"
    );
    drop(d);

    // The daemon refuses to start with rules it cannot enforce.
    let o = lab
        .run_command(&input, backend, &lab.dir.join("refused.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && err.contains("chain input"), "{err}");
    assert!(!lab.dut_has_xdp(), "nothing left attached after refusing");
}

/// Kernel `blackhole`, `unreachable` and `prohibit` routes are honoured
/// (in place of the covering route), within a second, for IPv4 and IPv6,
/// and the lowest metric wins with the next taking over when it goes.
pub fn discard_routes_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    for (i, a) in [
        "10.90.5.1/32",
        "10.90.6.1/32",
        "10.90.7.1/32",
        "10.90.8.1/32",
        "10.90.9.1/32",
    ]
    .iter()
    .enumerate()
    {
        ok(&["ip", "-n", &lab.sink, "addr", "add", a, "dev", "lo"]);
        let a6 = format!("2001:db8:90:{}::1/128", 5 + i);
        ok(&["ip", "-n", &lab.sink, "addr", "add", &a6, "dev", "lo"]);
    }
    let d = lab.start(backend);
    let dut = |args: &[&str]| {
        let mut all = vec!["ip", "-n", lab.dut.as_str()];
        all.extend_from_slice(args);
        ok(&all);
    };
    dut(&["route", "add", "10.90.0.0/16", "via", SINK4]);
    dut(&["-6", "route", "add", "2001:db8:90::/48", "via", SINK6]);
    within(Duration::from_secs(2), || {
        lab.ping(&lab.generator, "10.90.5.1", 1).is_some()
    })
    .expect("covering route forwards");
    assert!(lab.ping(&lab.generator, "2001:db8:90:5::1", 1).is_some());

    for (kind, n) in [("blackhole", 5), ("unreachable", 6), ("prohibit", 7)] {
        dut(&["route", "add", kind, &format!("10.90.{n}.0/24")]);
        dut(&["-6", "route", "add", kind, &format!("2001:db8:90:{n}::/64")]);
    }
    let t = within(Duration::from_secs(3), || {
        d.json(&["show", "route", "10.90.7.1"])[0]["next_hops"][0] == "prohibit"
            && d.json(&["show", "route", "2001:db8:90:7::1"])[0]["next_hops"][0] == "prohibit"
    })
    .expect("discard routes mirrored");
    assert!(t < Duration::from_secs(1), "mirrored after {t:?}");
    let ping = |dst: &str| {
        let o = sh(&[
            "ip",
            "netns",
            "exec",
            &lab.generator,
            "ping",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "1",
            dst,
        ]);
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (ok4, out) = ping("10.90.5.1");
    assert!(
        !ok4 && !out.contains("Unreachable") && !out.contains("filtered"),
        "blackhole: silence\n{out}"
    );
    let (ok4, out) = ping("10.90.6.1");
    assert!(
        !ok4 && out.contains("From 198.18.0.10") && out.contains("Destination Host Unreachable"),
        "{out}"
    );
    let (ok4, out) = ping("10.90.7.1");
    assert!(
        !ok4 && out.contains("From 198.18.0.10") && out.contains("Packet filtered"),
        "{out}"
    );
    let (ok6, out) = ping("2001:db8:90:5::1");
    assert!(!ok6 && !out.contains("unreachable"), "{out}");
    let (ok6, out) = ping("2001:db8:90:6::1");
    assert!(!ok6 && out.contains("No route"), "{out}");
    let (ok6, out) = ping("2001:db8:90:7::1");
    assert!(!ok6 && out.contains("Administratively prohibited"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    let drops = d.json(&["show", "drops"]);
    for reason in ["route_blackhole", "route_unreachable", "route_prohibited"] {
        assert!(
            drops["drops"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["reason"] == reason && x["count"].as_u64().unwrap() >= 2),
            "{reason}: {drops}"
        );
    }

    // Deleted: the covering route is used again within a second.
    dut(&["route", "del", "blackhole", "10.90.5.0/24"]);
    let t = within(Duration::from_secs(3), || {
        lab.ping(&lab.generator, "10.90.5.1", 1).is_some()
    })
    .expect("blackhole removed");
    assert!(t < Duration::from_secs(2), "{t:?}");

    // Metrics: a unicast route at metric 10 beats a blackhole at 20; when
    // it goes, the blackhole takes over.
    dut(&["route", "add", "10.90.8.0/24", "via", SINK4, "metric", "10"]);
    dut(&["route", "add", "blackhole", "10.90.8.0/24", "metric", "20"]);
    within(Duration::from_secs(2), || {
        lab.ping(&lab.generator, "10.90.8.1", 1).is_some()
    })
    .expect("metric 10 wins");
    dut(&["route", "del", "10.90.8.0/24", "via", SINK4, "metric", "10"]);
    within(Duration::from_secs(2), || {
        d.json(&["show", "route", "10.90.8.1"])[0]["next_hops"][0] == "blackhole"
    })
    .expect("metric 20 takes over");
    assert!(
        lab.ping(&lab.generator, "10.90.8.1", 1).is_none(),
        "blackholed"
    );

    // Nexthop objects: a route naming one forwards through it; pointed at
    // a blackhole object, it drops; IPv6 too.
    dut(&["nexthop", "add", "id", "91", "via", SINK4, "dev", "d1"]);
    dut(&["nexthop", "add", "id", "92", "blackhole"]);
    dut(&["nexthop", "add", "id", "93", "via", SINK6, "dev", "d1"]);
    dut(&["route", "add", "10.90.9.0/24", "nhid", "91"]);
    dut(&["-6", "route", "add", "2001:db8:90:9::/64", "nhid", "93"]);
    let t = within(Duration::from_secs(3), || {
        d.json(&["show", "route", "10.90.9.1"])[0]["prefix"] == "10.90.9.0/24"
    })
    .expect("route with a nexthop object mirrored");
    assert!(t < Duration::from_secs(1), "{t:?}");
    assert!(
        lab.ping(&lab.generator, "10.90.9.1", 2).is_some(),
        "forwarded through nexthop 91"
    );
    assert!(
        lab.ping(&lab.generator, "2001:db8:90:9::1", 1).is_some(),
        "IPv6 through nexthop 93"
    );
    dut(&["route", "replace", "10.90.9.0/24", "nhid", "92"]);
    within(Duration::from_secs(2), || {
        d.json(&["show", "route", "10.90.9.1"])[0]["next_hops"][0] == "blackhole"
    })
    .expect("blackhole nexthop object");
    assert!(
        lab.ping(&lab.generator, "10.90.9.1", 1).is_none(),
        "dropped by nexthop 92"
    );
}

/// No client can stall the daemon: with one client holding its connection
/// open and another pushing a 100 MiB request, a third's `show interfaces`
/// stays within 10 ms at the 99th percentile over 300 requests, and the
/// daemon still stops promptly on SIGTERM.
pub fn control_socket_scenario(backend: &str, tag: &str) {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let Some(lab) = Lab::new(tag) else { return };
    let mut d = lab.start(backend);
    let _idle = UnixStream::connect(&d.socket).unwrap();
    let trickle = UnixStream::connect(&d.socket).unwrap();
    let mut t = trickle.try_clone().unwrap();
    let _ = t.write_all(b"{\"op\":");
    let sock = d.socket.clone();
    let flood = std::thread::spawn(move || {
        let mut s = UnixStream::connect(&sock).unwrap();
        let chunk = vec![b' '; 1 << 20];
        let mut sent = 0usize;
        while sent < 100 << 20 {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break, // closed by the daemon: refused
            }
        }
        sent
    });
    let mut lat = Vec::new();
    for _ in 0..300 {
        let t0 = Instant::now();
        let r = control::server::request(&d.socket, &control::Request::ShowInterfaces).unwrap();
        lat.push(t0.elapsed());
        assert!(r.ok);
    }
    let sent = flood.join().unwrap();
    lat.sort();
    let p99 = lat[lat.len() * 99 / 100];
    eprintln!(
        "{backend}: show interfaces p50 {:?} p99 {p99:?} beside an idle, a trickling and a 100 MiB client (that one got {} MiB in before it was closed)",
        lat[lat.len() / 2],
        sent >> 20
    );
    assert!(p99 <= Duration::from_millis(10), "p99 {p99:?}");
    assert!(
        sent < 100 << 20,
        "the 100 MiB request was cut off ({sent} bytes taken)"
    );
    let t0 = Instant::now();
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "stopped after {:?}",
        t0.elapsed()
    );
    drop(trickle);
}

/// An interface with more RX queues than workers: every queue is served,
/// so flows hashed to any queue are forwarded.
pub fn all_queues_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::with_queues(tag, 4) else {
        return;
    };
    // Every AF_XDP socket (one per queue) with a ring twice the default.
    let d = lab.start_with_args(
        backend,
        "",
        &["--xsk-rx-ring", "4096", "--worker-rt-priority", "7"],
    );
    assert_workers_scheduled(d.pid(), SCHED_FIFO, 7);
    // The first echo may be spent on ARP (gen's for the dut, the router's
    // for the sink): retry it, as a user would.
    within(Duration::from_secs(3), || {
        lab.ping(&lab.generator, SINK4, 1).is_some()
    })
    .expect("gen reaches the sink through fastfwd");
    // 64 flows (source ports) of 10 datagrams each.
    let server = format!(
        "import socket\ns=socket.socket()\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('{SINK4}',9100))\ns.settimeout(1.5)\nn=0\ntry:\n  while True:\n    s.recv(100); n+=1\nexcept OSError: pass\nprint(n)\n"
    );
    let srv = Command::new("ip")
        .args(["netns", "exec", &lab.sink, "python3", "-c", &server])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = format!(
        "import socket,time\nss=[socket.socket(socket.AF_INET,socket.SOCK_DGRAM) for _ in range(64)]\nfor r in range(10):\n  for s in ss:\n    s.sendto(b'x'*20,('{SINK4}',9100))\n  time.sleep(0.01)\n"
    );
    python_in(&lab.generator, &client);
    let out = srv.wait_with_output().unwrap();
    let got: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let w = d.json(&["show", "workers"]);
    assert_eq!(got, 640, "every flow forwarded whatever its queue: {w}");
}

/// Four queues each way, two workers and a stateful firewall (new flows
/// only from gen's side): the two directions of a TCP connection land on
/// queues of either worker, and each connection still works, because every
/// frame is run by the worker that owns its flow (router::handoff); new
/// connections from the sink's side are still refused.
pub fn conntrack_across_queues_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::with_queues(tag, 4) else {
        return;
    };
    if backend == XDP_ENGINE {
        lab.peers_accept_redirects();
    }
    let cfg = lab.write_config();
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(STATEFUL_FIREWALL);
    std::fs::write(&cfg, &text).unwrap();
    let d = lab.start_from_on(backend, &cfg, &[], "0,1");
    within(Duration::from_secs(3), || {
        lab.ping(&lab.generator, SINK4, 1).is_some()
    })
    .expect("gen reaches the sink through fastfwd");
    // 64 connections, each sending 100 bytes and reading them back.
    let server = format!(
        "import socket,threading\nl=socket.socket()\nl.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\nl.bind(('{SINK4}',9200))\nl.listen(128)\nl.settimeout(8)\ndef echo(c):\n  c.settimeout(3)\n  try:\n    c.sendall(c.recv(100))\n  except OSError: pass\n  c.close()\ntry:\n  while True:\n    c,_=l.accept()\n    threading.Thread(target=echo,args=(c,)).start()\nexcept OSError: pass\n"
    );
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &lab.sink, "python3", "-c", &server])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = format!(
        "import socket,time\nok=0\nt=time.time()\nfor i in range(64):\n  s=socket.socket()\n  s.settimeout(0.8)\n  try:\n    s.connect(('{SINK4}',9200))\n    s.sendall(b'y'*100)\n    got=b''\n    while len(got)<100:\n      b=s.recv(100)\n      if not b: break\n      got+=b\n    ok+=got==b'y'*100\n  except OSError: pass\n  s.close()\nprint(ok)\n"
    );
    let out = python_in(&lab.generator, &client);
    let _ = srv.kill();
    let _ = srv.wait();
    let w = d.json(&["show", "workers"]);
    let sum = |k: &str| -> u64 {
        w.as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x[k].as_u64())
            .sum()
    };
    let connected: u32 = out.trim().parse().unwrap_or(0);
    assert_eq!(connected, 64, "every connection through the firewall: {w}");
    assert!(
        sum("handed_off") > 0,
        "frames received by the worker that does not own their flow: {w}"
    );
    assert_eq!(sum("handoff_dropped"), 0, "{w}");
    // The rule set still refuses new flows from the sink's side.
    let refused = python_in(
        &lab.sink,
        "import socket\nn=0\nfor i in range(8):\n  s=socket.socket()\n  s.settimeout(0.3)\n  try:\n    s.connect(('198.18.0.108',9201))\n  except ConnectionRefusedError: n+=1\n  except OSError: pass\nprint(n)\n",
    );
    assert_eq!(
        refused.trim(),
        "0",
        "a new flow from the sink's side got through"
    );
}

/// Whether dut's `dev` has an XDP program attached.
fn has_xdp(lab: &Lab, dev: &str) -> bool {
    let out = ok(&["ip", "-n", &lab.dut, "-j", "link", "show", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0].get("xdp").is_some()
}

/// Link down and up, then the interface deleted and re-created: the daemon
/// follows both without a restart (docs/router.md, "Faults").
pub fn link_changes_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let mut d = lab.start(backend);
    let fwd = |what: &str| {
        assert!(
            within(Duration::from_secs(5), || lab
                .ping(&lab.generator, SINK4, 1)
                .is_some())
            .is_some(),
            "{what}: gen cannot reach the sink through fastfwd: {}",
            std::fs::read_to_string(&d.log).unwrap_or_default()
        );
    };
    fwd("at start");

    // Down: nothing crosses d1; up again: forwarding resumes.
    ok(&["ip", "-n", &lab.dut, "link", "set", "d1", "down"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        lab.ping(&lab.generator, SINK4, 2).is_none(),
        "forwarded over a down link"
    );
    ok(&["ip", "-n", &lab.dut, "link", "set", "d1", "up"]);
    fwd("after d1 went down and up");

    // Deleted (with its peer) and re-created under a new index.
    let old = ok(&["ip", "-n", &lab.dut, "-j", "link", "show", "d1"]);
    ok(&["ip", "-n", &lab.dut, "link", "del", "d1"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(lab.ping(&lab.generator, SINK4, 1).is_none());
    ok(&[
        "ip", "-n", &lab.sink, "link", "add", "s0", "type", "veth", "peer", "name", "d1", "netns",
        &lab.dut,
    ]);
    for (ns, dev, a4, a6) in [
        (&lab.dut, "d1", "198.19.0.10/24", "2001:2:0:8000::10/64"),
        (&lab.sink, "s0", "198.19.0.108/24", "2001:2:0:8000::108/64"),
    ] {
        ok(&["ip", "-n", ns, "addr", "add", a4, "dev", dev]);
        ok(&["ip", "-n", ns, "addr", "add", a6, "dev", dev]);
        ok(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
    ok(&[
        "ip", "netns", "exec", &lab.sink, "ethtool", "-K", "s0", "tx", "off",
    ]);
    if backend == XDP_ENGINE {
        ok(&[
            "ip", "netns", "exec", &lab.sink, "ethtool", "-K", "s0", "gro", "on",
        ]);
    }
    ok(&[
        "ip", "-n", &lab.sink, "route", "add", "default", "via", DUT_D1,
    ]);
    let new = ok(&["ip", "-n", &lab.dut, "-j", "link", "show", "d1"]);
    let index =
        |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap()[0]["ifindex"].clone();
    assert_ne!(
        index(&old),
        index(&new),
        "the re-created d1 has a new index"
    );
    fwd("after d1 was deleted and re-created");
    let udp = udp_count(&lab, SINK4, 9100, 50);
    assert_eq!(udp, 50, "datagrams through the re-created d1");
    assert_eq!(
        has_xdp(&lab, "d1"),
        backend != "packet",
        "XDP program on the re-created d1"
    );
    let ifaces = d.json(&["show", "interfaces"]);
    let d1 = ifaces["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "d1")
        .unwrap()
        .clone();
    assert!(d1["tx_packets"].as_u64().unwrap() >= 50, "{d1}");
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
    assert!(
        log.contains("interface back: attached again") && log.contains("port=d1"),
        "{log}"
    );
    assert!(!lab.dut_has_xdp(), "XDP left attached after SIGTERM");
}

/// A port whose MTU lets in frames larger than a frame buffer (1,984
/// bytes: MTU 1,966 with one tag) is refused at start; raised to 4,000
/// while running, the larger frames (3,000-byte datagrams) are dropped on
/// receive and counted, not lost silently.
pub fn oversize_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let mtu = |size: &str| {
        for (ns, dev) in [(&lab.generator, "g0"), (&lab.dut, "d0")] {
            ok(&["ip", "-n", ns, "link", "set", dev, "mtu", size]);
        }
    };
    // A port that takes larger frames than fastfwd carries: refused at
    // start, naming it and the limit.
    mtu("1967");
    let refused = lab
        .run_command(&lab.write_config(), backend, &lab.dir.join("refused.sock"))
        .output()
        .expect("run fastfwd");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "started with MTU 1967: {err}");
    assert!(
        err.contains("d0 (MTU 1967)") && err.contains("1984"),
        "{err}"
    );
    mtu("1966");
    let d = lab.start(backend);
    // Raised while running: the larger frames are dropped and counted.
    mtu("4000");
    assert!(
        within(Duration::from_secs(3), || lab
            .ping(&lab.generator, SINK4, 1)
            .is_some())
        .is_some()
    );
    let before = d.json(&["show", "drops"])["rx_oversize"].as_u64().unwrap();
    assert_eq!(before, 0);
    let client = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor i in range(5):\n  s.sendto(b'x'*3000,('{SINK4}',9200))\n"
    );
    python_in(&lab.generator, &client);
    let counted = within(Duration::from_secs(2), || {
        d.json(&["show", "drops"])["rx_oversize"].as_u64() == Some(5)
    });
    assert!(
        counted.is_some(),
        "rx_oversize: {}",
        d.json(&["show", "drops"])
    );
}

/// `fastfwd show interfaces` on `d`'s socket as `uid` with primary group
/// `gid` and supplementary `groups` (comma list, may be empty).
fn show_as(d: &Daemon, uid: &str, gid: &str, groups: &str) -> Output {
    let sock = d.socket.to_string_lossy().into_owned();
    let mut c = Command::new("setpriv");
    c.args(["--reuid", uid, "--regid", gid]);
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        c.args(["--groups", groups]);
    }
    c.args([
        env!("CARGO_BIN_EXE_fastfwd"),
        "show",
        "interfaces",
        "--socket",
        &sock,
    ])
    .output()
    .unwrap()
}

/// `run --user nobody --control-group nogroup`: the daemon runs as nobody
/// with only its two capabilities and forwards; the control socket is
/// 0660 nobody:nogroup and admits root and nogroup's members only.
pub fn user_scenario(backend: &str, tag: &str) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(lab) = Lab::new(tag) else { return };
    let mut d = lab.start_with_args(
        backend,
        "",
        &["--user", "nobody", "--control-group", "nogroup"],
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(field("Uid:"), "65534 65534 65534 65534", "{status}");
    assert_eq!(field("Gid:"), "65534 65534 65534 65534", "{status}");
    assert_eq!(field("Groups:"), "");
    for k in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(field(k), "0000000000003000", "{k} {status}");
    }
    // The workers run under SCHED_FIFO 1 (the default) though the daemon
    // gave up CAP_SYS_NICE; every other thread under SCHED_OTHER.
    let threads = thread_policies(d.pid());
    assert!(
        threads.iter().any(|(c, _, _)| c.starts_with("fastfwd-w")),
        "{threads:?}"
    );
    for (comm, policy, prio) in &threads {
        if comm.starts_with("fastfwd-w") {
            assert_eq!((*policy, *prio), (SCHED_FIFO, 1), "{comm}: {threads:?}");
        } else {
            assert_eq!((*policy, *prio), (SCHED_OTHER, 0), "{comm}: {threads:?}");
        }
    }
    assert!(
        within(Duration::from_secs(3), || lab
            .ping(&lab.generator, SINK4, 1)
            .is_some())
        .is_some(),
        "no forwarding as nobody: {}",
        std::fs::read_to_string(&d.log).unwrap_or_default()
    );
    let meta = std::fs::metadata(&d.socket).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    // Root, fastfwd's user, another user with nogroup as its primary group
    // or as a supplementary one; not one outside the group.
    assert!(d.cli(&["show", "interfaces"]).status.success());
    for (uid, gid, groups) in [
        ("65534", "65534", ""),
        ("1", "65534", ""),
        ("1", "1", "65534"),
    ] {
        let o = show_as(&d, uid, gid, groups);
        assert!(
            o.status.success(),
            "uid {uid} gid {gid} groups {groups:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = show_as(&d, "1", "1", "");
    assert!(!o.status.success(), "uid 1 outside nogroup was served");
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
    assert!(
        !lab.dut_has_xdp(),
        "XDP left attached after SIGTERM as nobody"
    );
}

/// `sched_setscheduler(2)`'s policy numbers.
pub const SCHED_OTHER: u32 = 0;
/// See [`SCHED_OTHER`].
pub const SCHED_FIFO: u32 = 1;

/// Every thread of process `pid`: (name, scheduling policy, real-time
/// priority), from /proc/PID/task/TID/stat (fields 40 and 41).
pub fn thread_policies(pid: u32) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(e.unwrap().path().join("stat")).unwrap();
        let (open, close) = (stat.find('(').unwrap(), stat.rfind(')').unwrap());
        // Fields from the third (state) on, after the name.
        let rest: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        out.push((
            stat[open + 1..close].to_string(),
            rest[41 - 3].parse().unwrap(),
            rest[40 - 3].parse().unwrap(),
        ));
    }
    out
}

/// Asserts that process `pid` has workers, each under `policy` at real-time
/// priority `priority`.
pub fn assert_workers_scheduled(pid: u32, policy: u32, priority: u32) {
    let workers: Vec<(u32, u32)> = thread_policies(pid)
        .into_iter()
        .filter(|(c, _, _)| c.starts_with("fastfwd-w"))
        .map(|(_, p, r)| (p, r))
        .collect();
    assert!(
        !workers.is_empty() && workers.iter().all(|&w| w == (policy, priority)),
        "{workers:?}"
    );
}

/// `fastfwd fib audit` on a daemon following kernel and CLI routes: no
/// difference, every layer checked.
pub fn audit_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let d = lab.start(backend);
    let dut = lab.dut.as_str();
    ok(&[
        "ip",
        "-n",
        dut,
        "route",
        "add",
        "10.50.0.0/16",
        "via",
        SINK4,
    ]);
    ok(&[
        "ip",
        "-n",
        dut,
        "route",
        "add",
        "10.51.0.0/24",
        "nexthop",
        "via",
        SINK4,
        "nexthop",
        "via",
        "198.18.0.108",
    ]);
    ok(&["ip", "-n", dut, "route", "add", "blackhole", "10.52.0.0/24"]);
    ok(&[
        "ip",
        "-n",
        dut,
        "-6",
        "route",
        "add",
        "2001:db8:50::/48",
        "via",
        SINK6,
    ]);
    let added = d.cli(&["route", "add", "10.60.0.0/16", "via", SINK4]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let mirrored = within(Duration::from_secs(2), || {
        let out = String::from_utf8_lossy(&d.cli(&["show", "route"]).stdout).into_owned();
        [
            "10.50.0.0/16",
            "10.51.0.0/24",
            "10.52.0.0/24",
            "2001:db8:50::/48",
            "10.60.0.0/16",
        ]
        .iter()
        .all(|p| out.contains(p))
    });
    assert!(mirrored.is_some(), "routes not mirrored");
    let o = d.cli(&["fib", "audit"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.starts_with("0 difference(s)"), "{text}");
    let o = d.cli(&["fib", "audit", "--json"]);
    assert!(o.status.success());
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    let c = &last["summary"]["checked"];
    assert_eq!(last["summary"]["differences"], 0, "{last}");
    assert!(c["kernel_routes"].as_u64().unwrap() >= 5, "{last}");
    assert!(c["routes"].as_u64().unwrap() >= 9, "{last}");
    assert_eq!(
        c["lookups"].as_u64(),
        c["routes"].as_u64().map(|r| 2 * r),
        "{last}"
    );
    // The XDP engine's maps are read back and checked too.
    let e = &c["engine"];
    if backend == XDP_ENGINE {
        assert_eq!(e["engine"], "xdp", "{last}");
        assert!(e["skipped"].is_null(), "{last}");
        assert!(e["elements"].as_u64().unwrap() > 1000, "{last}");
        assert_eq!(e["lookups"], c["lookups"], "{last}");
        assert!(text.contains("xdp engine's maps (generation"), "{text}");
    } else {
        assert!(e.is_null(), "{last}");
    }
}

/// `run --metrics 127.0.0.1:PORT`: Prometheus text over HTTP in dut's
/// namespace and through `show metrics`, accepted by promtool, with the
/// forwarded packets counted; a non-loopback address is refused.
pub fn metrics_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let refused = lab
        .run_command(&lab.write_config(), backend, &lab.dir.join("other.sock"))
        .args(["--metrics", "0.0.0.0:9469"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not a loopback address"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let d = lab.start_with_args(
        backend,
        "",
        &["--metrics", METRICS_ADDR, "--worker-rt-priority", "0"],
    );
    assert_workers_scheduled(d.pid(), SCHED_OTHER, 0);
    assert!(
        within(Duration::from_secs(3), || lab
            .ping(&lab.generator, SINK4, 1)
            .is_some())
        .is_some()
    );
    // Every thread, the metrics thread included, runs with the daemon's
    // reduced capabilities (NET_ADMIN, NET_RAW) and no way to regain more.
    let tasks = std::fs::read_dir(format!("/proc/{}/task", d.pid())).unwrap();
    let mut threads = 0;
    for t in tasks.flatten() {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let field = |k: &str| status_field(&status, k);
        let name = field("Name:");
        for k in ["CapEff:", "CapPrm:", "CapBnd:"] {
            assert_eq!(field(k), "0000000000003000", "thread {name} {k}");
        }
        assert_eq!(field("NoNewPrivs:"), "1", "thread {name}");
        threads += 1;
    }
    assert!(
        threads >= 3,
        "control, worker and metrics threads: {threads}"
    );
    assert!(lab.ping(&lab.generator, SINK4, 3).is_some());
    let scrape = || lab.metrics_text().expect("the metrics endpoint answers");
    let forwarded = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("fastfwd_forwarded_total{family=\"ipv4\"} "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let counted = within(Duration::from_secs(2), || forwarded(&scrape()) >= 8);
    assert!(counted.is_some(), "{}", scrape());
    let text = scrape();
    for name in [
        "fastfwd_interface_rx_packets_total{interface=\"d0\"}",
        "fastfwd_drops_total{reason=\"no_route\"}",
        "fastfwd_fib_routes{family=\"ipv4\"}",
        "fastfwd_worker_busy_rounds_total",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
    // promtool parses it (exit 1 on any syntax error). Its linter reads
    // the classic text format, where a counter's HELP names the `_total`
    // sample; OpenMetrics names the family instead, so the only lint
    // findings allowed (exit 3) are "X_total no help text" for families X
    // whose HELP line is there.
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (scripts/install-deps installs prometheus)");
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "promtool: {findings}"
    );
    for f in findings.lines().filter(|l| !l.trim().is_empty()) {
        let family = f
            .strip_suffix(" no help text")
            .and_then(|m| m.strip_suffix("_total"))
            .unwrap_or_else(|| panic!("promtool: {f}"));
        assert!(text.contains(&format!("# HELP {family} ")), "promtool: {f}");
        assert!(
            text.contains(&format!("# TYPE {family} counter")),
            "promtool: {f}"
        );
    }
    // The same text over the control socket.
    let shown = d.cli(&["show", "metrics"]);
    assert!(shown.status.success());
    assert!(String::from_utf8_lossy(&shown.stdout).contains("fastfwd_forwarded_total"));
    let o = sh(&[
        "ip",
        "netns",
        "exec",
        &lab.dut,
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "http://127.0.0.1:9469/other",
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "404");
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Sends from gen for `secs` seconds at `rate` packets per second: mode
/// `warm` UDP to sink (resolved); mode `flood` UDP to ever new addresses
/// of dut's connected 10.99.0.0/16 and 2001:db8:99::/64 (every one a
/// neighbour miss), and every tenth packet an ARP request or IPv6
/// neighbour solicitation for dut's d0 address from a new source (MAC and
/// address). Prints packets and raw frames sent.
fn hostile_sender(d0_mac: &str, mode: &str, secs: f64, rate: u32) -> String {
    format!(
        r#"
import socket, struct, time
mode, dur, rate = '{mode}', {secs}, {rate}
dmac = bytes.fromhex('{mac}')
s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
raw.bind(('g0', 0))
def cs(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
def arp(i):
    mac = bytes([2, 0xaa, 0, 0, (i >> 8) & 255, i & 255])
    return (b'\xff' * 6 + mac + b'\x08\x06' + struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1)
            + mac + bytes([198, 18, 0, 20 + i % 230]) + b'\0' * 6 + bytes([198, 18, 0, 10]))
def ns(i):
    mac = bytes([2, 0xbb, 0, 0, (i >> 8) & 255, i & 255])
    src = socket.inet_pton(socket.AF_INET6, '2001:2::1:%x' % i)
    dst = socket.inet_pton(socket.AF_INET6, 'ff02::1:ff00:10')
    tgt = socket.inet_pton(socket.AF_INET6, '2001:2::10')
    body = struct.pack('!BBHI', 135, 0, 0, 0) + tgt + b'\x01\x01' + mac
    c = cs(src + dst + struct.pack('!I3xB', len(body), 58) + body)
    body = body[:2] + struct.pack('!H', c) + body[4:]
    ip6 = struct.pack('!IHBB', 0x60000000, len(body), 58, 255) + src + dst
    return b'\x33\x33\xff\x00\x00\x10' + mac + b'\x86\xdd' + ip6 + body
t0 = time.time(); n = 0; k = 0
while time.time() - t0 < dur:
    want = int((time.time() - t0) * rate)
    while n < want:
        try:
            if mode == 'warm':
                s4.sendto(b'x' * 18, ('198.19.0.108', 9))
            elif n % 2:
                s4.sendto(b'x' * 18, ('10.99.%d.%d' % ((n >> 9) & 255, (n >> 1) & 255), 9))
            else:
                s6.sendto(b'x' * 18, ('2001:db8:99::%x:%x' % (n >> 16, n & 0xffff), 9))
            if mode == 'flood' and n % 10 == 0:
                raw.send(arp(k) if k % 2 else ns(k))
                k += 1
        except OSError:
            pass
        n += 1
    time.sleep(0.001)
print(n, k)
"#,
        mac = d0_mac.replace(':', "")
    )
}

/// Hostile load: a flood of neighbour misses to ever new addresses of a
/// connected /16 and /64, with ARP requests and neighbour solicitations
/// from ever new sources. The resolutions fastfwd asks of the kernel stay
/// under the limiter's caps, its neighbour table is no larger than the
/// kernel's (which the kernel bounds), its memory stays flat, it answers
/// the control socket, and an established flow to sink loses nothing.
pub fn neighbour_flood_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let mut d = lab.start(backend);
    let dut = lab.dut.as_str();
    ok(&["ip", "-n", dut, "addr", "add", "10.99.0.1/16", "dev", "d1"]);
    ok(&[
        "ip",
        "-n",
        dut,
        "addr",
        "add",
        "2001:db8:99::1/64",
        "dev",
        "d1",
    ]);
    let routed = within(Duration::from_secs(3), || {
        let out = String::from_utf8_lossy(&d.cli(&["show", "route"]).stdout).into_owned();
        out.contains("10.99.0.0/16") && out.contains("2001:db8:99::/64")
    });
    assert!(routed.is_some(), "connected subnets not in fastfwd's FIB");
    let d0_mac = lab.mac(dut, "d0");
    let run = |mode: &str, secs: f64| {
        let script = hostile_sender(&d0_mac, mode, secs, 10_000);
        python_in(&lab.generator, &script)
    };
    // Warm the rings and buffers with resolved traffic first, so memory
    // measured afterwards is what the flood adds.
    run("warm", 2.0);
    assert!(
        udp_count(&lab, SINK4, 7, 50) >= 49,
        "no forwarding before the flood"
    );
    let rss_before = rss_kib(d.pid());
    let before = d.json(&["show", "drops"]);
    let t0 = Instant::now();
    let flood = std::thread::scope(|s| {
        let flood = s.spawn(|| run("flood", 8.0));
        std::thread::sleep(Duration::from_secs(2));
        // During the flood: an established flow, and the control socket.
        let got = udp_count(&lab, SINK4, 9, 500);
        let asked = Instant::now();
        let o = d.cli(&["show", "interfaces"]);
        let answered = asked.elapsed();
        assert!(
            o.status.success(),
            "show interfaces failed during the flood"
        );
        assert!(
            answered < Duration::from_secs(2),
            "show interfaces took {answered:?} during the flood"
        );
        assert_eq!(
            got, 500,
            "the established flow lost packets during the flood"
        );
        flood.join().unwrap()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let sent: Vec<u64> = flood
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(
        sent.len() == 2 && sent[0] > 50_000 && sent[1] > 5_000,
        "flood sent {flood}"
    );
    std::thread::sleep(Duration::from_secs(1));
    let after = d.json(&["show", "drops"]);
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let requested = n(&after, "neighbour_requests") - n(&before, "neighbour_requests");
    let capped = n(&after, "neighbour_requests_capped") - n(&before, "neighbour_requests_capped");
    let limit = (control::resolve::RATE as f64 * (elapsed + 1.0)) as u64
        + u64::from(control::resolve::BURST);
    assert!(
        requested <= limit,
        "{requested} resolutions asked in {elapsed:.1} s (cap {limit})"
    );
    assert!(
        requested > 0 && capped > 10_000,
        "the misses reached the limiter: asked {requested}, capped {capped}"
    );
    // fastfwd's neighbours are the kernel's (whose garbage collection
    // bounds them): no more than it holds, far fewer than the flood's
    // new sources and missed addresses.
    let table =
        ok(&["ip", "-n", dut, "neigh", "show"]) + &ok(&["ip", "-n", dut, "-6", "neigh", "show"]);
    let kernel = table.lines().count();
    let ours = d.json(&["show", "neighbors"]);
    let ours = ours.as_array().map_or(0, Vec::len);
    assert!(
        ours <= kernel && (ours as u64) < sent[1] / 2,
        "fastfwd holds {ours} neighbours, the kernel {kernel}, after {} new sources",
        sent[1]
    );
    let rss_after = rss_kib(d.pid());
    assert!(
        rss_after < rss_before + 8 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB under the flood"
    );
    eprintln!(
        "neighbour flood ({backend}): sent {}, {elapsed:.1} s; resolutions asked {requested} \
         (cap {limit}), capped {capped}; neighbours kernel {kernel}, fastfwd {ours}; \
         RSS {rss_before} -> {rss_after} KiB",
        flood.trim()
    );
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
}

/// Where the scenarios that read counters serve metrics (in dut).
pub const METRICS_ADDR: &str = "127.0.0.1:9469";

/// The daemon's counter of applied batches of kernel changes.
pub const BATCHES: &str = "fastfwd_kernel_change_batches_total{}";

impl Lab {
    /// One scrape of a daemon started with `--metrics METRICS_ADDR` (curl
    /// inside dut); None if it does not answer.
    pub fn metrics_text(&self) -> Option<String> {
        let url = format!("http://{METRICS_ADDR}/metrics");
        let o = sh(&["ip", "netns", "exec", &self.dut, "curl", "-sf", &url]);
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// The value of metric `name` (with its labels, as printed), once the
    /// daemon answers (within 3 s); None if it does not or has no such
    /// line.
    pub fn metric(&self, name: &str) -> Option<u64> {
        let mut text = None;
        within(Duration::from_secs(3), || {
            text = self.metrics_text();
            text.is_some()
        })?;
        text?
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }
}

/// A routing daemon's stream of changes: 20,000 IPv4 routes added in dut's
/// kernel by one `ip -batch`, then deleted by another. The daemon mirrors
/// each stream (its `fib_routes` gauge) and applies it in batches at
/// least 10 ms apart (`kernel_change_batches`), each batch one publication
/// the workers pay for; a change on its own is still applied at once.
pub fn route_stream_scenario(backend: &str, tag: &str) {
    const ROUTES: u64 = 20_000;
    let Some(lab) = Lab::new(tag) else { return };
    let mut d = lab.start_with_args(backend, "", &["--metrics", METRICS_ADDR]);
    let v4 = "fastfwd_fib_routes{family=\"ipv4\"}";
    let base = lab.metric(v4).expect("fib_routes");
    for (verb, want) in [("replace", base + ROUTES), ("del", base)] {
        // 100.64.0.0/10, as /24s: the lab uses none of it.
        let batch = lab.dir.join(format!("stream-{verb}.batch"));
        let lines: String = (0..ROUTES)
            .map(|i| {
                let net = 0x6440_0000u32 + ((i as u32) << 8);
                format!(
                    "route {verb} {}/24 via {SINK4} dev d1\n",
                    std::net::Ipv4Addr::from(net)
                )
            })
            .collect();
        std::fs::write(&batch, lines).unwrap();
        let before = lab.metric(BATCHES).expect(BATCHES);
        let t = Instant::now();
        ok(&["ip", "-n", &lab.dut, "-batch", &batch.to_string_lossy()]);
        let loaded = t.elapsed();
        let mirrored = within(Duration::from_secs(30), || lab.metric(v4) == Some(want));
        assert!(
            mirrored.is_some(),
            "{verb}: fib_routes {:?}, want {want}",
            lab.metric(v4)
        );
        let (applied, spent) = (lab.metric(BATCHES).unwrap() - before, t.elapsed());
        eprintln!(
            "route stream ({backend}, {verb}): {ROUTES} changes in {loaded:?}, mirrored in \
             {spent:?}, {applied} batches"
        );
        assert!(applied >= 1);
        assert!(
            u128::from(applied) <= spent.as_millis() / 10 + 2,
            "{verb}: {applied} batches of kernel changes in {spent:?}: closer than 10 ms"
        );
    }
    // One change after the streams: in the FIB without waiting for more.
    let t = Instant::now();
    ok(&[
        "ip",
        "-n",
        &lab.dut,
        "route",
        "add",
        "100.64.0.0/24",
        "via",
        SINK4,
    ]);
    let seen = within(Duration::from_secs(2), || lab.metric(v4) == Some(base + 1));
    assert!(seen.is_some(), "a single route change not mirrored in 2 s");
    eprintln!(
        "route stream ({backend}): a single change mirrored in {:?}",
        t.elapsed()
    );
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
}

/// The full Internet table of `data/` (about 900,000 IPv4 and 160,000
/// IPv6 prefixes) loaded into dut's kernel while the daemon runs: mirrored
/// (`fib audit` finds no difference, the XDP maps read back included),
/// and traffic to addresses inside table prefixes forwarded toward sink,
/// which answers for them.
///
/// While the table streams in, the daemon applies the kernel's changes in
/// batches at least 10 ms apart (each batch is a publication the workers
/// pay for), which its `kernel_change_batches` counter shows.
pub fn full_table_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let d = lab.start_with_args(backend, "", &["--metrics", METRICS_ADDR]);
    let batches = || lab.metric(BATCHES).expect(BATCHES);
    let batches_before = batches();
    let table = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/full-table-prefixes.txt.gz"
    );
    // Every prefix via sink (IPv4 or IPv6), the lab's own ranges and
    // default routes left out.
    let batch = lab.dir.join("full-table.batch");
    let script = format!(
        "zcat {table} | awk '/\\/0$/ || /^198\\.1[89]\\./ || /^2001:2:/ {{ next }} \
         /:/ {{ print \"route replace \" $1 \" via {SINK6} dev d1\"; next }} \
         {{ print \"route replace \" $1 \" via {SINK4} dev d1\" }}' > {}",
        batch.display()
    );
    let o = sh(&["sh", "-c", &script]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = std::fs::read_to_string(&batch).unwrap().lines().count();
    assert!(lines > 1_000_000, "{lines} routes");
    let t = Instant::now();
    let o = sh(&[
        "ip",
        "-n",
        &lab.dut,
        "-force",
        "-batch",
        &batch.to_string_lossy(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let loaded = t.elapsed();
    // The mirror has caught up when the audit below is clean; the batches
    // are counted up to then.
    // The sink answers for an address in 8.8.8.0/24 and 2001:4860::/32.
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "8.8.8.8/32",
        "dev",
        "lo",
    ]);
    ok(&[
        "ip",
        "-n",
        &lab.sink,
        "addr",
        "add",
        "2001:4860:4860::8888/128",
        "dev",
        "lo",
    ]);
    // Mirrored: the audit compares every layer with a fresh kernel dump.
    let mut last = String::new();
    let converged = within(Duration::from_secs(240), || {
        let o = d.cli(&["fib", "audit"]);
        last = String::from_utf8_lossy(&o.stdout).into_owned();
        o.status.success()
    });
    assert!(
        converged.is_some(),
        "no clean audit within 240 s of loading ({loaded:?}): {}",
        last.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    let (applied, spent) = (batches() - batches_before, t.elapsed());
    eprintln!("full table: loaded in {loaded:?}, mirrored in {spent:?}, {applied} batches");
    assert!(
        applied as u128 <= spent.as_millis() / 10 + 2,
        "{applied} batches of kernel changes in {spent:?}: closer than 10 ms"
    );
    let o = d.cli(&["fib", "audit", "--json"]);
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    let c = &summary["summary"]["checked"];
    assert!(
        c["kernel_routes"].as_u64().unwrap() as usize >= lines,
        "{summary}"
    );
    assert!(
        lab.ping(&lab.generator, "8.8.8.8", 3).is_some(),
        "IPv4 via the table"
    );
    assert!(
        lab.ping(&lab.generator, "2001:4860:4860::8888", 3)
            .is_some(),
        "IPv6 via the table"
    );
    let r = d.json(&["show", "route", "8.8.8.8"]);
    assert!(r.to_string().contains("8.8.8.0/24"), "{r}");
    if engine_of(backend) == "xdp" {
        // Forwarded by the program itself (the table is in its maps).
        let xdp = d.json(&["show", "interfaces"])["xdp"].clone();
        assert!(xdp["forwarded"].as_u64().unwrap() >= 4, "{xdp}");
    }
}

/// The (interface id, comment) of every enhanced packet block of a
/// little-endian pcapng file.
pub fn pcapng_packets(b: &[u8]) -> Vec<(u32, Option<String>)> {
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= b.len() {
        let (btype, total) = (u32_at(at), u32_at(at + 4) as usize);
        if btype == 6 {
            let iface = u32_at(at + 8);
            let cap = u32_at(at + 20) as usize;
            let mut o = at + 28 + cap.next_multiple_of(4);
            let mut comment = None;
            while o + 4 <= at + total - 4 {
                let code = u16::from_le_bytes([b[o], b[o + 1]]);
                let len = u16::from_le_bytes([b[o + 2], b[o + 3]]) as usize;
                if code == 0 {
                    break;
                }
                if code == 1 {
                    comment = Some(String::from_utf8_lossy(&b[o + 4..o + 4 + len]).into_owned());
                }
                o += 4 + len.next_multiple_of(4);
            }
            out.push((iface, comment));
        }
        at += total.max(12);
    }
    out
}

/// A flood of new flows against a stateful firewall with a small
/// connection table: the table stays within its capacity (new flows are
/// refused or evict other new ones, never established ones), an
/// established flow (a ping) loses nothing, memory stays flat.
pub fn conntrack_flood_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let mut d = lab.start_with(
        backend,
        r#"[firewall]
rules = """
ct size 1024
chain forward {
    policy drop
    ct state established accept
    iif d0 ip protocol udp accept
    iif d0 icmp type echo-request accept
}
"""
"#,
    );
    assert!(lab.ping(&lab.generator, SINK4, 2).is_some(), "forwarding");
    let rss_before = rss_kib(d.pid());
    let flood = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t0 = time.time(); n = 0
while time.time() - t0 < 6.0:
    want = int((time.time() - t0) * 10000)
    while n < want:
        try:
            s.sendto(b'x' * 18, ('198.19.0.108', 1024 + n % 60000))
        except OSError:
            pass
        n += 1
print(n)
"#;
    let (sent, ping) = std::thread::scope(|s| {
        let ping = s.spawn(|| {
            let o = sh(&[
                "ip",
                "netns",
                "exec",
                &lab.generator,
                "ping",
                "-c",
                "25",
                "-i",
                "0.2",
                "-W",
                "1",
                SINK4,
            ]);
            String::from_utf8_lossy(&o.stdout).into_owned()
        });
        std::thread::sleep(Duration::from_millis(600));
        let sent = python_in(&lab.generator, flood);
        (sent, ping.join().unwrap())
    });
    let sent: u64 = sent.trim().parse().unwrap();
    assert!(sent > 30_000, "flood sent {sent}");
    assert!(
        ping.contains("25 received"),
        "the established flow lost packets during the flood: {ping}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let fw = d.json(&["show", "firewall"]);
    let ct = &fw["conntrack"];
    let n = |k: &str| ct[k].as_u64().unwrap();
    assert!(
        n("occupancy") <= n("capacity") && n("capacity") <= 2048,
        "{fw}"
    );
    assert!(
        n("insert_failures") + n("evictions") > 10_000,
        "the flood filled the table: {fw}"
    );
    if engine_of(backend) == "xdp" {
        // The ping's flow was the program's; the flood stayed with the
        // pipeline (no reply made any of it established).
        assert!(
            fw["fast_path"]["program_packets"].as_u64().unwrap() >= 20,
            "{fw}"
        );
    }
    let rss_after = rss_kib(d.pid());
    assert!(
        rss_after < rss_before + 8 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB under the flood"
    );
    eprintln!(
        "conntrack flood ({backend}): {sent} new flows in 6 s, table {}/{}, inserts {}, \
         failures {}, evictions {}; ping {}; RSS {rss_before} -> {rss_after} KiB",
        n("occupancy"),
        n("capacity"),
        n("inserts"),
        n("insert_failures"),
        n("evictions"),
        ping.lines().rev().nth(1).unwrap_or("").trim()
    );
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
}

/// The daemon's `kernel_unmodelled` gauge.
pub fn unmodelled_gauge(d: &Daemon) -> Option<u64> {
    let text = String::from_utf8_lossy(&d.cli(&["show", "metrics"]).stdout).into_owned();
    // `fastfwd_kernel_unmodelled{} N` (a gauge with no labels).
    text.lines().find_map(|l| {
        let rest = l.strip_prefix("fastfwd_kernel_unmodelled")?;
        rest.trim_start_matches("{}").trim().parse::<u64>().ok()
    })
}

/// The field's case, `ip rule add from 198.18.10.0/24 lookup 100` with a
/// blackhole for 198.19.10.0/24 in table 100 (and the same for IPv6): the
/// kernel delivers nothing from that source, and neither does fastfwd,
/// while other sources reach the same destination by main; a `prohibit`
/// rule answers ICMP administratively prohibited; the rules' removal and
/// return behind fastfwd's back are followed; nothing is named unmodelled
/// and `fib audit` is clean.
pub fn policy_rules_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let (g, dut, s) = (lab.generator.as_str(), lab.dut.as_str(), lab.sink.as_str());
    ok(&["ip", "-n", g, "addr", "add", "198.18.10.5/32", "dev", "g0"]);
    ok(&[
        "ip",
        "-n",
        g,
        "addr",
        "add",
        "2001:2:0:10::5/128",
        "dev",
        "g0",
    ]);
    for a in ["198.19.10.1/32", "198.19.11.1/32", "2001:db8:19:10::1/128"] {
        ok(&["ip", "-n", s, "addr", "add", a, "dev", "lo"]);
    }
    let ip = |args: &[&str]| {
        let mut all = vec!["ip", "-n", dut];
        all.extend_from_slice(args);
        ok(&all);
    };
    ip(&["route", "add", "198.19.10.0/23", "via", SINK4]);
    ip(&["route", "add", "198.18.10.0/24", "via", "198.18.0.108"]);
    ip(&["-6", "route", "add", "2001:db8:19:10::/64", "via", SINK6]);
    ip(&[
        "-6",
        "route",
        "add",
        "2001:2:0:10::/64",
        "via",
        "2001:2::108",
    ]);
    let add_rules = || {
        ip(&[
            "rule",
            "add",
            "from",
            "198.18.10.0/24",
            "lookup",
            "100",
            "pref",
            "100",
        ]);
        ip(&[
            "-6",
            "rule",
            "add",
            "from",
            "2001:2:0:10::/64",
            "lookup",
            "100",
            "pref",
            "100",
        ]);
    };
    let del_rules = || {
        ip(&["rule", "del", "pref", "100"]);
        ip(&["-6", "rule", "del", "pref", "100"]);
    };
    add_rules();
    ip(&[
        "route",
        "add",
        "blackhole",
        "198.19.10.0/24",
        "table",
        "100",
    ]);
    ip(&[
        "-6",
        "route",
        "add",
        "blackhole",
        "2001:db8:19:10::/64",
        "table",
        "100",
    ]);
    ip(&[
        "rule",
        "add",
        "to",
        "198.19.11.0/24",
        "prohibit",
        "pref",
        "110",
    ]);

    let d = lab.start(backend);
    let count = |src: &str, dst: &str| udp_count_from(&lab, Some(src), dst, 9300, 50);
    let (v4, v6) = (
        ("198.18.10.5", "198.19.10.1"),
        ("2001:2:0:10::5", "2001:db8:19:10::1"),
    );
    for (src, dst) in [v4, v6] {
        assert_eq!(
            count(src, dst),
            0,
            "{src} -> {dst}: the rule's table discards it"
        );
    }
    for (src, dst) in [("198.18.0.108", v4.1), ("2001:2::108", v6.1)] {
        assert_eq!(count(src, dst), 50, "{src} -> {dst}: main forwards it");
    }
    if backend == XDP_ENGINE {
        // The program hands the rule's sources to the pipeline and routes
        // the others by main itself: the rules are filtered, not a reason
        // to hand over every packet.
        let text = String::from_utf8_lossy(&d.cli(&["show", "metrics"]).stdout).into_owned();
        let handed = |cause: &str| {
            let name = format!("fastfwd_xdp_exceptions_total{{cause=\"{cause}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(name.as_str())?.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        assert!(
            handed("policy_rules") >= 100,
            "the rule's 100 datagrams went to the pipeline: {}",
            handed("policy_rules")
        );
        assert_eq!(handed("firewall_rules"), 0, "not every packet");
    }
    // The first error may wait for gen's MAC (the router resolves it).
    let filtered = || {
        let o = sh(&[
            "ip",
            "netns",
            "exec",
            g,
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "198.19.11.1",
        ]);
        String::from_utf8_lossy(&o.stdout).contains("Packet filtered")
    };
    assert!(
        within(Duration::from_secs(4), filtered).is_some(),
        "the prohibit rule's ICMP (administratively prohibited)"
    );
    assert_eq!(unmodelled_gauge(&d), Some(0), "nothing unmodelled");
    let audit = d.cli(&["fib", "audit"]);
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );

    // The rules removed behind fastfwd's back: main for every source.
    del_rules();
    let v4_back = within(Duration::from_secs(3), || count(v4.0, v4.1) == 50);
    assert!(v4_back.is_some(), "the rule's removal followed");
    assert_eq!(count(v6.0, v6.1), 50);
    // Back again.
    add_rules();
    let v4_gone = within(Duration::from_secs(3), || count(v4.0, v4.1) == 0);
    assert!(v4_gone.is_some(), "the rule's return followed");
    assert_eq!(count(v6.0, v6.1), 0);
    eprintln!("policy rules ({backend}): the rule's source discarded, others forwarded");
    let mut d = d;
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
}

/// The kernel's routing state holds what fastfwd does not mirror (a rule
/// that selects by protocol: `ip rule add from 198.18.10.0/24 ipproto udp
/// lookup 100`, with a blackhole in table 100): `fastfwd run` refuses to
/// start and names the rule; started with `--allow-unmodelled` it says so
/// in its log, its `kernel_unmodelled` gauge and `fib audit`; and a rule
/// that disappears and comes back behind its back is followed, named
/// again by the audit.
pub fn unmodelled_policy_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let dut = lab.dut.as_str();
    let rule = "ip rule 100: from 198.18.10.0/24 ipproto 17 lookup 100";
    let add_rule = || {
        ok(&[
            "ip",
            "-n",
            dut,
            "rule",
            "add",
            "from",
            "198.18.10.0/24",
            "ipproto",
            "udp",
            "lookup",
            "100",
            "pref",
            "100",
        ]);
    };
    add_rule();
    ok(&[
        "ip",
        "-n",
        dut,
        "route",
        "add",
        "blackhole",
        "198.19.10.0/24",
        "table",
        "100",
    ]);
    let refused = lab
        .run_command(&lab.write_config(), backend, &lab.dir.join("refused.sock"))
        .output()
        .expect("run fastfwd");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "started with an ip rule: {err}");
    assert!(err.contains(rule), "the rule is named: {err}");
    assert!(err.contains("--allow-unmodelled"), "{err}");

    let d = lab.start_with_args(backend, "", &["--allow-unmodelled"]);
    let gauge = || unmodelled_gauge(&d);
    let audit = || {
        let o = d.cli(&["fib", "audit", "--json"]);
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let named: Vec<String> = lines
            .iter()
            .filter(|l| l["layer"] == "unmodelled")
            .map(|l| l["item"].as_str().unwrap_or_default().to_string())
            .collect();
        (o.status.success(), named)
    };
    assert_eq!(gauge(), Some(1));
    let (clean, named) = audit();
    assert!(!clean, "an audit with a difference fails");
    assert_eq!(named.len(), 1, "{named:?}");
    assert!(named[0].starts_with(rule), "{named:?}");
    let log = std::fs::read_to_string(&d.log).unwrap_or_default();
    assert!(log.contains(rule), "the log names it: {log}");

    // Removed behind fastfwd's back: followed, the audit clean.
    ok(&["ip", "-n", dut, "rule", "del", "pref", "100"]);
    assert!(
        within(Duration::from_secs(2), || gauge() == Some(0)).is_some(),
        "the rule's removal followed"
    );
    let (clean, named) = audit();
    assert!(clean && named.is_empty(), "{named:?}");
    // Back again: named again.
    add_rule();
    assert!(
        within(Duration::from_secs(2), || gauge() == Some(1)).is_some(),
        "the rule's return followed"
    );
    let (clean, named) = audit();
    assert!(!clean && named.len() == 1, "{named:?}");
}

/// The kernel's (major, minor) version.
pub fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = r.trim().split(['.', '-']).map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// d1's line of `show interfaces`.
fn d1_line(d: &Daemon) -> serde_json::Value {
    let v = d.json(&["show", "interfaces"]);
    v["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "d1")
        .cloned()
        .unwrap()
}

fn exceptions_to(d: &Daemon, cause: &str) -> u64 {
    d.json(&["show", "interfaces"])["xdp"]["exceptions"][cause]
        .as_u64()
        .unwrap_or(0)
}

/// The XDP engine with an egress port that takes no XDP frames: s0, d1's
/// veth peer, without GRO (no NAPI there), as a driver without
/// ndo_xdp_xmit would be. Every datagram to sink arrives or is counted as
/// d1's drop, never as its output; the port is found (by its xdp-features
/// before any loss on 6.3+, by its first refusals before) and its traffic
/// goes through the pipeline; with GRO back on s0 the program transmits on
/// it again (6.3+), and GRO off again under traffic loses nothing
/// uncounted.
pub fn egress_refuses_xdp_scenario(tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let gro = |on: &str| {
        ok(&[
            "ip", "netns", "exec", &lab.sink, "ethtool", "-K", "s0", "gro", on,
        ]);
    };
    ok(&[
        "ip",
        "netns",
        "exec",
        &lab.generator,
        "ethtool",
        "-K",
        "g0",
        "gro",
        "on",
    ]);
    gro("off");
    let d = lab.start_as_is(XDP_ENGINE, "", &[]);
    let features = kernel_version() >= (6, 3);
    let x = d.json(&["show", "interfaces"])["xdp"].clone();
    assert!(
        x.get("redirect_drops_uncounted").is_none(),
        "tracepoints attached: {x}"
    );
    if features {
        let why = d1_line(&d)["pipeline_egress"].clone();
        assert!(
            why.as_str().is_some_and(|w| w.contains("xdp-features")),
            "d1 found by its xdp-features at start: {why}"
        );
    }
    const N: u32 = 400;
    // A burst through the program's path (the neighbour learnt first).
    lab.ping(&lab.generator, SINK4, 2)
        .expect("ping gen -> sink");
    let (tx0, drops0) = {
        let l = d1_line(&d);
        (
            l["tx_packets"].as_u64().unwrap(),
            l["tx_drops"].as_u64().unwrap(),
        )
    };
    let got = udp_count(&lab, SINK4, 7000, N);
    let l = d1_line(&d);
    let (tx1, drops1) = (
        l["tx_packets"].as_u64().unwrap(),
        l["tx_drops"].as_u64().unwrap(),
    );
    assert_eq!(
        u64::from(got) + (drops1 - drops0),
        u64::from(N),
        "every datagram arrived or is d1's drop: {got} arrived, {} dropped; {l}; {}; {}",
        drops1 - drops0,
        d.json(&["show", "interfaces"])["xdp"],
        d.json(&["show", "workers"])
    );
    assert_eq!(
        tx1 - tx0,
        u64::from(got),
        "output counts only what left: {l}"
    );
    if features {
        assert_eq!(got, N, "nothing lost when xdp-features said so first");
    }
    assert!(
        l["pipeline_egress"].is_string(),
        "d1 handed to the pipeline: {l}"
    );
    // Now all of it arrives, through the pipeline.
    let exc0 = exceptions_to(&d, "egress_refuses_xdp");
    assert_eq!(
        udp_count(&lab, SINK4, 7001, N),
        N,
        "all through the pipeline"
    );
    assert!(exceptions_to(&d, "egress_refuses_xdp") >= exc0 + u64::from(N));
    lab.ping(&lab.generator, SINK6, 2)
        .expect("IPv6 through the pipeline too");
    let text = String::from_utf8_lossy(&d.cli(&["show", "interfaces"]).stdout).into_owned();
    assert!(text.contains("d1: "), "the reason printed: {text}");
    let metrics = d.cli(&["show", "drops"]);
    assert!(metrics.status.success());
    if !features {
        // Without xdp-features the mark stays until d1's link changes.
        return;
    }
    // GRO on: the program transmits on d1 again.
    gro("on");
    within(Duration::from_secs(5), || {
        d1_line(&d)["pipeline_egress"].is_null()
    })
    .expect("d1 back to the program once s0 has NAPI");
    let fwd0 = d.json(&["show", "interfaces"])["xdp"]["forwarded"]
        .as_u64()
        .unwrap();
    assert_eq!(udp_count(&lab, SINK4, 7002, N), N);
    let fwd1 = d.json(&["show", "interfaces"])["xdp"]["forwarded"]
        .as_u64()
        .unwrap();
    assert!(
        fwd1 >= fwd0 + u64::from(N),
        "forwarded by the program: {fwd0} -> {fwd1}"
    );
    // GRO off under traffic: whatever is lost is counted, then the
    // pipeline takes over.
    let l = d1_line(&d);
    let (tx0, drops0) = (
        l["tx_packets"].as_u64().unwrap(),
        l["tx_drops"].as_u64().unwrap(),
    );
    let sender = {
        let lab_sink = lab.sink.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            ok(&[
                "ip", "netns", "exec", &lab_sink, "ethtool", "-K", "s0", "gro", "off",
            ]);
        })
    };
    let got = udp_count(&lab, SINK4, 7003, N);
    sender.join().unwrap();
    let l = d1_line(&d);
    let (tx1, drops1) = (
        l["tx_packets"].as_u64().unwrap(),
        l["tx_drops"].as_u64().unwrap(),
    );
    assert_eq!(u64::from(got) + (drops1 - drops0), u64::from(N), "{l}");
    assert_eq!(tx1 - tx0, u64::from(got), "{l}");
    assert!(l["pipeline_egress"].is_string(), "{l}");
    assert_eq!(udp_count(&lab, SINK4, 7004, N), N);
}

/// One request on a fresh control connection: the reply line, and how
/// long it took.
pub fn raw_request(d: &Daemon, line: &str) -> (serde_json::Value, Duration) {
    use std::io::{BufRead, Write};
    let t = Instant::now();
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(&s).read_line(&mut reply).unwrap();
    (
        serde_json::from_str(&reply).unwrap_or(serde_json::Value::Null),
        t.elapsed(),
    )
}

/// The netlink port ids of process `pid`'s NETLINK_ROUTE sockets (from
/// its descriptors and its namespace's /proc/net/netlink).
pub fn netlink_ports(pid: u32) -> Vec<u32> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    std::fs::read_to_string(format!("/proc/{pid}/net/netlink"))
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 10 && f[1] == "0" && inodes.iter().any(|i| i == f[9]))
                .then(|| f[2].parse().ok())
                .flatten()
        })
        .collect()
}

/// Forges an RTM_NEWROUTE (a blackhole for 198.19.0.108/32, sink's own
/// address, in main) as if from the kernel: unicast to each of `ports`,
/// then multicast to RTNLGRP_IPV4_ROUTE (allowed to root), addressed to
/// the forger's own port so the kernel itself never gets it. Prints how
/// many unicasts were refused.
fn netlink_forger(ports: &[u32]) -> String {
    let ports: Vec<String> = ports.iter().map(u32::to_string).collect();
    format!(
        r#"
import socket, struct
ports = [{ports}]
rt = struct.pack('=BBBBBBBBI', 2, 32, 0, 0, 254, 4, 0, 6, 0)
body = rt + struct.pack('=HH', 8, 1) + socket.inet_aton('198.19.0.108')
msg = struct.pack('=IHHII', 16 + len(body), 24, 0x600, 1, 0) + body
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.bind((0, 0))
refused = 0
for _ in range(100):
    for p in ports:
        try:
            s.sendto(msg, (p, 0))
        except ConnectionRefusedError:
            refused += 1
s.sendto(msg, (s.getsockname()[0], 1 << 6))
print(refused)
"#,
        ports = ports.join(", ")
    )
}

/// A local user on the metrics port: 100 idle connections, ten endless
/// request heads, a client trickling a head a byte at a time and one
/// asking for metrics with a 1 KiB receive buffer it never reads, for 3 s.
const METRICS_ATTACKER: &str = r#"
import socket, time
addr = ('127.0.0.1', 9469)
def conn():
    try:
        return socket.create_connection(addr, timeout=1)
    except OSError:
        return None
idle = [conn() for _ in range(100)]
heads = []
for _ in range(10):
    s = conn()
    try:
        s.sendall(b'GET /metrics HTTP/1.1\r\nX: ' + b'a' * 65536)
    except (OSError, AttributeError):
        pass
    heads.append(s)
stuck = socket.socket()
stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
stuck.connect(addr)
stuck.sendall(b'GET /metrics HTTP/1.1\r\n\r\n')
slow, t0 = conn(), time.time()
while time.time() - t0 < 3:
    try:
        slow.send(b'G')
    except (OSError, AttributeError):
        slow = conn()
    time.sleep(0.02)
print('done')
"#;

/// Clients with control access and local users trying to stop the
/// router: a filter nested 200,000 deep, files that are no regular files
/// or too large or outside the config's directory, a rules file of nested
/// defines, a config of 20,000 routes, a client that pipelines requests
/// and never reads, the metrics port held, flooded and trickled, netlink
/// messages forged to the daemon's sockets, an audit abandoned half way.
/// Each gets an error or is cut off; meanwhile a flow through the router
/// loses nothing, `show interfaces` answers within 100 ms (p99), the
/// daemon's RSS stays within 64 MiB of its start, and it is running at
/// the end.
pub fn hostile_clients_scenario(backend: &str, tag: &str) {
    use std::io::Write;
    let Some(lab) = Lab::new(tag) else { return };
    let d = lab.start_with_args(backend, "", &["--metrics", METRICS_ADDR]);
    lab.ping(&lab.generator, SINK4, 2)
        .expect("forwarding before");
    let pid = d.pid();
    let rss0 = rss_kib(pid);
    let mut latencies = Vec::new();
    let probe = |latencies: &mut Vec<Duration>| {
        let (v, took) = raw_request(&d, r#"{"op":"show_interfaces"}"#);
        assert_eq!(v["ok"], true, "{v}");
        latencies.push(took);
    };
    const N: u32 = 3000;
    let delivered = std::thread::scope(|scope| {
        let flow = scope.spawn(|| udp_count(&lab, SINK4, 7100, N));
        std::thread::sleep(Duration::from_millis(500));
        probe(&mut latencies);
        // A filter nested far beyond any stack: refused.
        let bangs = "! ".repeat(200_000) + "tcp";
        let req = serde_json::json!({"op": "trace_add", "count": 10, "filter": bangs});
        let (v, _) = raw_request(&d, &req.to_string());
        assert_eq!(v["ok"], false, "{v}");
        assert!(v["error"].as_str().unwrap().contains("at most 4096"), "{v}");
        // The longest accepted chain, evaluated by the workers per frame.
        let chain = vec!["udp"; 250].join(" or ");
        let req = serde_json::json!({"op": "trace_add", "count": 100, "filter": chain});
        let (v, _) = raw_request(&d, &req.to_string());
        assert_eq!(v["ok"], true, "{v}");
        probe(&mut latencies);
        // Files: a device, a FIFO with no writer, a file over the size
        // limit, a config whose rules file is outside the directory.
        let check = |path: &std::path::Path| {
            let req = serde_json::json!({"op": "config_check", "path": path});
            let (v, took) = raw_request(&d, &req.to_string());
            assert_eq!(v["ok"], false, "{}: {v}", path.display());
            assert!(
                took < Duration::from_secs(1),
                "{}: {took:?}",
                path.display()
            );
            v["error"].as_str().unwrap().to_string()
        };
        let e = check(std::path::Path::new("/dev/zero"));
        assert!(e.contains("outside"), "{e}");
        let fifo = lab.dir.join("fifo.toml");
        ok(&["mkfifo", fifo.to_str().unwrap()]);
        let e = check(&fifo);
        assert!(e.contains("not a regular file"), "{e}");
        let big = lab.dir.join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(20 << 20)
            .unwrap();
        let e = check(&big);
        assert!(e.contains("at most"), "{e}");
        let sneaky = lab.dir.join("sneaky.toml");
        let mut text = std::fs::read_to_string(lab.write_config()).unwrap();
        text.push_str("\n[firewall]\nfile = \"/etc/shadow\"\n");
        std::fs::write(&sneaky, text).unwrap();
        let e = check(&sneaky);
        assert!(e.contains("outside") && !e.contains("root:"), "{e}");
        probe(&mut latencies);
        // Ten levels of ten references (10^10 elements): refused.
        let mut rules = String::from("define l0 = { ");
        rules.push_str(
            &(1..=10)
                .map(|k| format!("10.0.0.{k}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        rules.push_str(" }\n");
        for level in 1..10 {
            let refs = vec![format!("$l{}", level - 1); 10].join(", ");
            rules.push_str(&format!("define l{level} = {{ {refs} }}\n"));
        }
        rules.push_str("chain forward {\n  policy accept\n  ip saddr $l9 drop\n}\n");
        std::fs::write(lab.dir.join("nested.rules"), rules).unwrap();
        let nested = lab.dir.join("nested.toml");
        let mut text = std::fs::read_to_string(lab.write_config()).unwrap();
        text.push_str(&format!(
            "\n[firewall]\nfile = \"{}\"\n",
            lab.dir.join("nested.rules").display()
        ));
        std::fs::write(&nested, text).unwrap();
        let e = check(&nested);
        assert!(e.contains("more than"), "{e}");
        probe(&mut latencies);
        // A config of 20,000 routes: checked in linear time.
        let many = lab.dir.join("many.toml");
        let mut text = std::fs::read_to_string(lab.write_config()).unwrap();
        for k in 0..20_000u32 {
            text.push_str(&format!(
                "\n[[routes]]\nprefix = \"10.{}.{}.0/24\"\nvia = \"{SINK4}\"\n",
                k >> 8,
                k & 255
            ));
        }
        std::fs::write(&many, text).unwrap();
        let req = serde_json::json!({"op": "config_check", "path": many});
        let (v, took) = raw_request(&d, &req.to_string());
        assert_eq!(v["ok"], true, "{v}");
        assert!(
            took < Duration::from_secs(2),
            "20,000 routes checked in {took:?}"
        );
        probe(&mut latencies);
        // A client that pipelines requests and never reads the replies.
        let mut greedy = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        greedy.set_nonblocking(true).unwrap();
        let lines = "{\"op\":\"show_drops\"}\n".repeat(1 << 16);
        let t = Instant::now();
        let mut at = 0;
        while t.elapsed() < Duration::from_secs(2) {
            if let Ok(n) = greedy.write(&lines.as_bytes()[at..]) {
                at = (at + n) % lines.len();
            }
            probe(&mut latencies);
            std::thread::sleep(Duration::from_millis(20));
        }
        // The metrics port held, flooded and trickled: a scrape meanwhile
        // and after is answered.
        let attacker = {
            let dut = lab.dut.clone();
            std::thread::spawn(move || python_in(&dut, METRICS_ATTACKER))
        };
        while !attacker.is_finished() {
            probe(&mut latencies);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(attacker.join().unwrap().trim(), "done");
        assert!(
            within(Duration::from_secs(3), || lab.metrics_text().is_some()).is_some(),
            "no scrape answered after the metrics port was attacked"
        );
        // Routes forged to the daemon's netlink sockets: every unicast is
        // refused by the kernel, the multicast is counted and dropped, and
        // sink's address stays routed (the flow would lose the rest).
        let ports = netlink_ports(pid);
        assert!(ports.len() >= 2, "netlink sockets of the daemon: {ports:?}");
        let rejected0 = lab
            .metric("fastfwd_kernel_netlink_rejected_total{}")
            .unwrap();
        let refused = python_in(&lab.dut, &netlink_forger(&ports));
        assert_eq!(refused.trim(), (100 * ports.len()).to_string());
        let counted = within(Duration::from_secs(3), || {
            lab.metric("fastfwd_kernel_netlink_rejected_total{}") > Some(rejected0)
        });
        assert!(counted.is_some(), "the forged multicast was not counted");
        let routes = String::from_utf8_lossy(&d.cli(&["show", "route"]).stdout).into_owned();
        assert!(!routes.contains("198.19.0.108/32"), "{routes}");
        probe(&mut latencies);
        // An audit abandoned after its head line: another may start.
        {
            use std::io::BufRead;
            let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
            s.write_all(b"{\"op\":\"fib_audit\"}\n").unwrap();
            let mut head = String::new();
            std::io::BufReader::new(&s).read_line(&mut head).unwrap();
            assert!(head.contains("\"stream\":true"), "{head}");
        }
        let again = within(Duration::from_secs(5), || {
            let o = d.cli(&["fib", "audit"]);
            o.status.success()
        });
        assert!(
            again.is_some(),
            "a second audit after the first was abandoned"
        );
        probe(&mut latencies);
        drop(greedy);
        flow.join().unwrap()
    });
    assert_eq!(delivered, N, "the flow through the router lost nothing");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "still running"
    );
    let grown = rss_kib(pid).saturating_sub(rss0);
    assert!(grown < 64 << 10, "RSS grew {grown} KiB");
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    eprintln!(
        "{backend}: show interfaces p99 {p99:?} over {} probes, RSS +{grown} KiB",
        latencies.len()
    );
    assert!(
        p99 < Duration::from_millis(100),
        "show interfaces p99 {p99:?} over {} probes",
        latencies.len()
    );
    lab.ping(&lab.generator, SINK4, 2)
        .expect("forwarding after");
}

/// Routes learned over a kernel VLAN device (`d1.100`, 802.1Q on port d1,
/// as a BGP session on a transit VLAN has them): the config's VLAN 100 on
/// d1 is that device's interface, so a kernel route via a gateway on
/// d1.100 is installed through it, its neighbour is resolved by the
/// kernel on the VLAN, and gen's datagrams reach an address behind sink's
/// s0.100 tagged. Needs 802.1Q devices (CONFIG_VLAN_8021Q).
pub fn kernel_vlan_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    add_vlan_100(&lab, "d1", "s0");
    let d = lab.start_with(
        backend,
        "[[interfaces.vlans]]\nid = 100\naddresses = [\"203.0.113.1/24\"]\n",
    );
    route_over_vlan_100(&lab, &d, "d1.100");
}

/// VLAN 100 devices on `dut_parent` in dut (203.0.113.1/24) and on
/// `sink_parent` in sink (203.0.113.2/24), and 192.0.2.99 on sink's
/// loopback.
fn add_vlan_100(lab: &Lab, dut_parent: &str, sink_parent: &str) {
    let (dut, sink) = (lab.dut.as_str(), lab.sink.as_str());
    for (ns, parent, addr) in [
        (dut, dut_parent, "203.0.113.1/24"),
        (sink, sink_parent, "203.0.113.2/24"),
    ] {
        let dev = format!("{parent}.100");
        ok(&[
            "ip", "-n", ns, "link", "add", "link", parent, "name", &dev, "type", "vlan", "id",
            "100",
        ]);
        ok(&["ip", "-n", ns, "addr", "add", addr, "dev", &dev]);
        ok(&["ip", "-n", ns, "link", "set", &dev, "up"]);
    }
    ok(&[
        "ip",
        "-n",
        sink,
        "addr",
        "add",
        "192.0.2.99/32",
        "dev",
        "lo",
    ]);
}

/// A route to 192.0.2.0/24 via sink's 203.0.113.2 on `dev`, added to dut's
/// kernel after the start (as from a routing daemon): fastfwd shows it,
/// forwards 200 of 200 datagrams over it and resolved the gateway on
/// `dev`.
fn route_over_vlan_100(lab: &Lab, d: &Daemon, dev: &str) {
    ok(&[
        "ip",
        "-n",
        &lab.dut,
        "route",
        "add",
        "192.0.2.0/24",
        "via",
        "203.0.113.2",
        "dev",
        dev,
    ]);
    let want = format!("via 203.0.113.2 dev {dev}");
    let installed = within(Duration::from_secs(3), || {
        let out = String::from_utf8_lossy(&d.cli(&["show", "route"]).stdout).into_owned();
        out.lines()
            .any(|l| l.contains("192.0.2.0/24") && l.contains(&want))
    });
    assert!(
        installed.is_some(),
        "{}",
        String::from_utf8_lossy(&d.cli(&["show", "route"]).stdout)
    );
    let got = udp_count(lab, "192.0.2.99", 7300, 200);
    assert_eq!(got, 200, "{}", d.json(&["show", "drops"]));
    let neighbours = d.json(&["show", "neighbors"]);
    assert!(
        neighbours
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["interface"] == dev && n["ip"] == "203.0.113.2"),
        "{neighbours}"
    );
}

/// A flood that earns ICMP errors (UDP with TTL 1, far over the 1,000 a
/// second the rate limit allows) does not starve path MTU discovery: a
/// sender of 1,450-byte datagrams with DF set toward sink behind d1 (MTU
/// 1,400) learns the path MTU from fastfwd's Fragmentation Needed while
/// the flood runs, and the flood's Time Exceeded are rate limited.
pub fn icmp_flood_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    for (ns, dev) in [(&lab.dut, "d1"), (&lab.sink, "s0")] {
        ok(&["ip", "-n", ns, "link", "set", dev, "mtu", "1400"]);
    }
    let d = lab.start_with(backend, "mtu = 1400\n");
    assert!(
        within(Duration::from_secs(3), || lab
            .ping(&lab.generator, SINK4, 1)
            .is_some())
        .is_some()
    );
    let script = format!(
        r#"
import socket, threading, time
stop = time.time() + 4
def flood():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 1)
    n = 0
    while time.time() < stop:
        for _ in range(100):
            try:
                s.sendto(b'x' * 18, ('{SINK4}', 9))
                n += 1
            except OSError:
                pass
    print('flood', n, flush=True)
t = threading.Thread(target=flood)
t.start()
time.sleep(1)
p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
p.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER: IP_PMTUDISC_DO
p.connect(('{SINK4}', 9))
mtu, t0 = 1500, time.time()
while time.time() < stop and mtu == 1500:
    try:
        p.send(b'y' * 1450)
    except OSError:
        pass
    time.sleep(0.05)
    mtu = p.getsockopt(socket.IPPROTO_IP, 14)  # IP_MTU
print('mtu', mtu, round(time.time() - t0, 2), flush=True)
t.join()
"#
    );
    let before = d.json(&["show", "drops"]);
    let out = python_in(&lab.generator, &script);
    let field = |k: &str| -> Vec<String> {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("{k}: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let flood: u64 = field("flood ")[0].parse().unwrap();
    assert_eq!(field("mtu ")[0], "1400", "path MTU not learned: {out}");
    let after = d.json(&["show", "drops"]);
    let limited = after["icmp_rate_limited"].as_u64().unwrap()
        - before["icmp_rate_limited"].as_u64().unwrap();
    eprintln!("{backend}: {out} rate-limited {limited}");
    assert!(flood > 20_000, "the flood was too small to matter: {out}");
    assert!(
        limited > 5_000,
        "the flood's errors were not limited: {limited}\n{after}"
    );
}

/// The daemon's log so far.
fn log_text(d: &Daemon) -> String {
    std::fs::read_to_string(&d.log).unwrap_or_default()
}

/// `fastfwd run` on the lab's config with `name = "d1"` renamed, run to
/// its end (a refusal); its stderr.
fn refused_start(lab: &Lab, backend: &str, d1_as: &str) -> String {
    let cfg = lab.write_config();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("name = \"d1\"", &format!("name = \"{d1_as}\"")),
    )
    .unwrap();
    let mut child = lab
        .run_command(&cfg, backend, &lab.dir.join("refused.sock"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fastfwd");
    // A start that is not refused runs on: stopped, and the test fails.
    let ended = within(Duration::from_secs(30), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if ended.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("fastfwd's output");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(ended.is_some() && !out.status.success(), "started: {err}");
    err
}

/// A port the kernel bridges is not fastfwd's to route: start is refused
/// naming it and the bridge; one bridged while the daemon runs is named at
/// error level, and again when released; a released port forwards.
pub fn bridged_port_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    let dut = lab.dut.as_str();
    ok(&["ip", "-n", dut, "link", "add", "br0", "type", "bridge"]);
    ok(&["ip", "-n", dut, "link", "set", "d1", "master", "br0"]);
    let err = refused_start(&lab, backend, "d1");
    assert!(err.contains("d1 is enslaved to br0 (bridge)"), "{err}");

    ok(&["ip", "-n", dut, "link", "set", "d1", "nomaster"]);
    let d = lab.start(backend);
    assert!(
        within(Duration::from_secs(3), || lab
            .ping(&lab.generator, SINK4, 1)
            .is_some())
        .is_some(),
        "{}",
        log_text(&d)
    );
    ok(&["ip", "-n", dut, "link", "set", "d1", "master", "br0"]);
    let named = within(Duration::from_secs(3), || {
        log_text(&d).contains("d1 is enslaved to br0 (bridge)")
    });
    assert!(named.is_some(), "{}", log_text(&d));
    ok(&["ip", "-n", dut, "link", "set", "d1", "nomaster"]);
    let released = within(Duration::from_secs(3), || {
        log_text(&d).contains("the port is fastfwd's alone again")
    });
    assert!(released.is_some(), "{}", log_text(&d));
}

/// `flows` x `rounds` IPv4 datagrams from gen to `dst:port` (source
/// ports 40000 and up, the same every call) while sink counts them as its
/// socket receives them and as each of `members` receives them (a packet
/// socket on each, counting UDP to `port`); (received, per member). The
/// sockets get 8 MiB receive buffers (SO_RCVBUFFORCE): under QEMU's TCG
/// the counting script falls behind bursts a default buffer overflows on.
fn udp_flows_per_member(
    lab: &Lab,
    dst: &str,
    port: u16,
    flows: u32,
    rounds: u32,
    members: &[&str],
) -> (u32, Vec<u32>) {
    let names = members
        .iter()
        .map(|m| format!("'{m}'"))
        .collect::<Vec<_>>()
        .join(",");
    let server = format!(
        "import socket,sys,select,struct\n\
         u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nu.bind(('{dst}',{port}))\n\
         u.setsockopt(socket.SOL_SOCKET,33,1<<23)\n\
         ms=[]\n\
         for m in [{names}]:\n  p=socket.socket(socket.AF_PACKET,socket.SOCK_DGRAM,socket.htons(0x0800)); p.setsockopt(socket.SOL_SOCKET,33,1<<23); p.bind((m,0)); ms.append(p)\n\
         per=[0]*len(ms)\nn=0\ndone=False\nprint('ready',flush=True)\n\
         while True:\n\
         \x20 r,_,_=select.select([u]+ms+([] if done else [sys.stdin]),[],[],1.0 if done else None)\n\
         \x20 if not r: break\n\
         \x20 for s in r:\n\
         \x20   if s is u: u.recv(100); n+=1\n\
         \x20   elif s is sys.stdin: sys.stdin.readline(); done=True\n\
         \x20   else:\n\
         \x20     f,a=s.recvfrom(2048)\n\
         \x20     if a[2]!=socket.PACKET_OUTGOING and len(f)>=28 and f[9]==17 and struct.unpack('!H',f[22:24])[0]=={port}: per[ms.index(s)]+=1\n\
         print(n,*per)\n"
    );
    let client = format!(
        "import socket,time\nss=[]\nfor i in range({flows}):\n  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('0.0.0.0',40000+i)); ss.append(s)\nfor k in range({rounds}):\n  for s in ss:\n    s.sendto(b'x'*20,('{dst}',{port}))\n  time.sleep(0.005)\n"
    );
    let counts = counted_in_sink(lab, &server, &client);
    let v: Vec<u32> = counts
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(v.len(), members.len() + 1, "{counts}");
    (v[0], v[1..].to_vec())
}

/// Whether the bond in `ns` and every member of it report their link up
/// (the bond's MII monitor).
fn bond_up(ns: &str, bond: &str, members: usize) -> bool {
    links_up(ns, bond) == members + 1
}

/// How many of the bond in `ns` and its members report their link up.
fn links_up(ns: &str, bond: &str) -> usize {
    let o = sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "cat",
        &format!("/proc/net/bonding/{bond}"),
    ]);
    String::from_utf8_lossy(&o.stdout)
        .matches("MII Status: up")
        .count()
}

/// The lab with a LAG between dut and sink: d1 and a second veth d2 in a
/// balance-xor bond (layer3+4 hash, MII monitor every 100 ms) `bond0` in
/// dut with d1's addresses, their peers s0 and s1 in `bond1` in sink with
/// s0's; both bonds and their members up.
fn bonded_lab(tag: &str) -> Option<Lab> {
    let lab = Lab::new(tag)?;
    let (dut, sink) = (lab.dut.as_str(), lab.sink.as_str());
    ok(&[
        "ip", "-n", sink, "link", "add", "s1", "type", "veth", "peer", "name", "d2", "netns", dut,
    ]);
    for (ns, bond, members, a4, a6) in [
        (
            dut,
            "bond0",
            ["d1", "d2"],
            "198.19.0.10/24",
            "2001:2:0:8000::10/64",
        ),
        (
            sink,
            "bond1",
            ["s0", "s1"],
            "198.19.0.108/24",
            "2001:2:0:8000::108/64",
        ),
    ] {
        ok(&[
            "ip",
            "-n",
            ns,
            "link",
            "add",
            bond,
            "type",
            "bond",
            "mode",
            "balance-xor",
            "xmit_hash_policy",
            "layer3+4",
            "miimon",
            "100",
        ]);
        for m in members {
            ok(&["ip", "-n", ns, "addr", "flush", "dev", m]);
            ok(&["ip", "-n", ns, "link", "set", m, "down"]);
            ok(&["ip", "-n", ns, "link", "set", m, "master", bond]);
        }
        ok(&["ip", "-n", ns, "link", "set", bond, "up"]);
        ok(&["ip", "-n", ns, "addr", "add", a4, "dev", bond]);
        ok(&["ip", "-n", ns, "addr", "add", a6, "dev", bond]);
    }
    // Both sink members with checksums filled in and NAPI (GRO), so that
    // they take the frames the XDP engine redirects into d1 and d2 (a
    // veth whose peer runs no NAPI refuses them: the engine counts and
    // then serves it through the pipeline, another test's case).
    for m in ["s0", "s1"] {
        ok(&[
            "ip", "netns", "exec", sink, "ethtool", "-K", m, "tx", "off", "gro", "on",
        ]);
    }
    ok(&[
        "ip", "-n", sink, "route", "replace", "default", "via", DUT_D1,
    ]);
    let up = within(Duration::from_secs(10), || {
        bond_up(dut, "bond0", 2) && bond_up(sink, "bond1", 2)
    });
    assert!(up.is_some(), "both bonds and their members up");
    Some(lab)
}

/// Over the LAG of [`bonded_lab`], `backend` (any engine) sends through
/// the bond, so the kernel's bond hashes fastfwd's frames (for the XDP
/// engine, the bond's XDP transmit; for AF_XDP, the bond's transmit of
/// what its sockets on the bond send): 64 flows arrive
/// whole, each member carrying 35-65% of them, and each member exactly
/// the datagrams it carries under the kernel's own forwarding of the same
/// flows. A member of the bond as a port is still refused.
pub fn bond_forwarding_scenario(backend: &str, tag: &str) {
    let Some(lab) = bonded_lab(tag) else { return };
    let (flows, rounds) = (64, 20);
    let members = ["s0", "s1"];
    let reach = || {
        within(Duration::from_secs(5), || {
            lab.ping(&lab.generator, SINK4, 1).is_some()
        })
    };

    // The kernel's forwarding, for the peer.
    lab.kernel_forwards(true);
    assert!(reach().is_some(), "the kernel forwards over the bond");
    let kernel = udp_flows_per_member(&lab, SINK4, 7400, flows, rounds, &members);
    lab.kernel_forwards(false);

    let err = refused_start(&lab, backend, "d1");
    assert!(err.contains("d1 is enslaved to bond0 (bond)"), "{err}");
    let cfg = lab.write_config();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("name = \"d1\"", "name = \"bond0\"")).unwrap();
    let d = lab.start_from(backend, &cfg, &[]);
    assert!(reach().is_some(), "{}", log_text(&d));
    let ours = udp_flows_per_member(&lab, SINK4, 7400, flows, rounds, &members);

    let sent = flows * rounds;
    assert_eq!(kernel.0, sent, "the kernel: {kernel:?}");
    assert_eq!(
        ours.0,
        sent,
        "fastfwd: {ours:?} {}",
        d.json(&["show", "drops"])
    );
    for share in &ours.1 {
        assert!(
            (sent * 35 / 100..=sent * 65 / 100).contains(share),
            "each member carries 35-65% of the flows: fastfwd {ours:?}, kernel {kernel:?}"
        );
    }
    assert_eq!(
        ours.1, kernel.1,
        "the bond spreads fastfwd's flows over the members as the kernel's"
    );

    // Exceptions received on a member: pings from sink with TTL 1 are the
    // pipeline's (time exceeded), from the member's socket, and its
    // answers leave through the bond.
    for _ in 0..4 {
        let o = sh(&[
            "ip",
            "netns",
            "exec",
            &lab.sink,
            "ping",
            "-c",
            "1",
            "-t",
            "1",
            "-W",
            "2",
            "198.18.0.108",
        ]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("From {DUT_D1}")) && out.contains("Time to live exceeded"),
            "{out}\n{}",
            log_text(&d)
        );
    }
}

/// 64 flows from gen to sink over the LAG of [`bonded_lab`] for `rounds`
/// rounds; after `fail_at` rounds s1 goes down in sink (d2 loses its peer,
/// as when a cable is pulled). Returns (sent, received, seconds the
/// traffic took).
fn udp_flows_through_a_member_failure(lab: &Lab, rounds: u32, fail_at: u32) -> (u32, u32, f64) {
    let flows = 64;
    let server = format!(
        "import socket,sys,select\n\
         u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nu.bind(('{SINK4}',7500))\n\
         u.setsockopt(socket.SOL_SOCKET,33,1<<23)\n\
         n=0\ndone=False\nprint('ready',flush=True)\n\
         while True:\n\
         \x20 r,_,_=select.select([u]+([] if done else [sys.stdin]),[],[],1.0 if done else None)\n\
         \x20 if not r: break\n\
         \x20 for s in r:\n\
         \x20   if s is u: u.recv(100); n+=1\n\
         \x20   else: sys.stdin.readline(); done=True\n\
         print(n)\n"
    );
    let client = format!(
        "import socket,time,subprocess\nss=[]\nfor i in range({flows}):\n  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('0.0.0.0',41000+i)); ss.append(s)\nt=time.time()\nfor k in range({rounds}):\n  if k=={fail_at}: subprocess.run(['ip','-n','{sink}','link','set','s1','down'],check=True)\n  for s in ss:\n    s.sendto(b'x'*20,('{SINK4}',7500))\n  time.sleep(0.005)\nprint(time.time()-t)\n",
        sink = lab.sink
    );
    let mut srv = Command::new("ip")
        .args(["netns", "exec", &lab.sink, "python3", "-c", &server])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(srv.stdout.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut out, &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready", "the counting server in sink started");
    let took = python_in(&lab.generator, &client);
    drop(srv.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    srv.wait().unwrap();
    (
        flows * rounds,
        rest.trim().parse().unwrap(),
        took.trim().parse().unwrap(),
    )
}

/// Every frame `show drops` counts as lost: the pipeline's drops by
/// reason and each loss outside it.
fn losses_counted(drops: &serde_json::Value) -> u64 {
    let by_reason: u64 = drops["drops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["count"].as_u64().unwrap())
        .sum();
    by_reason
        + [
            "held_expired",
            "punts_discarded",
            "tx_ring_full",
            "rx_ring_full",
            "rx_oversize",
            "xdp_redirects_dropped",
            "xdp_exceptions_ring_full",
            "handoff_dropped",
            "bond_tx_dropped",
        ]
        .iter()
        .map(|k| drops[*k].as_u64().unwrap_or(0))
        .sum::<u64>()
}

/// A member of the LAG fails under load (its peer goes down, as a pulled
/// cable) while `backend` (any engine) forwards 64 flows
/// over the bond: the bond's MII monitor (every 100 ms) takes the member
/// out and every flow goes on over the other one. What is lost in between
/// is at most the traffic of a few monitor intervals (the kernel's own
/// forwarding through the same failure is the peer, printed), and every
/// lost datagram is counted: `show drops` `bond_tx_dropped` (the kernel's
/// drops on the way out of the bond or its members) plus the XDP
/// engine's `xdp_redirects_dropped` cover it.
pub fn bond_member_failure_scenario(backend: &str, tag: &str) {
    let Some(lab) = bonded_lab(tag) else { return };
    let (dut, sink) = (lab.dut.as_str(), lab.sink.as_str());
    let (rounds, fail_at) = (150, 50);
    let reach = || {
        within(Duration::from_secs(5), || {
            lab.ping(&lab.generator, SINK4, 1).is_some()
        })
    };
    let restore = || {
        ok(&["ip", "-n", sink, "link", "set", "s1", "up"]);
        let up = within(Duration::from_secs(10), || {
            bond_up(dut, "bond0", 2) && bond_up(sink, "bond1", 2)
        });
        assert!(up.is_some(), "both bonds whole again");
    };
    lab.kernel_forwards(true);
    assert!(reach().is_some(), "the kernel forwards over the bond");
    let kernel = udp_flows_through_a_member_failure(&lab, rounds, fail_at);
    lab.kernel_forwards(false);
    restore();

    let cfg = lab.write_config();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("name = \"d1\"", "name = \"bond0\"")).unwrap();
    let d = lab.start_from(backend, &cfg, &[]);
    assert!(reach().is_some(), "{}", log_text(&d));
    let before = d.json(&["show", "drops"]);
    let (sent, received, took) = udp_flows_through_a_member_failure(&lab, rounds, fail_at);
    let after = d.json(&["show", "drops"]);
    let counted = |k: &str| after[k].as_u64().unwrap_or(0) - before[k].as_u64().unwrap_or(0);
    let lost = u64::from(sent.saturating_sub(received));
    let counted_lost = losses_counted(&after) - losses_counted(&before);
    let rate = f64::from(sent) / took;
    eprintln!(
        "member failure under {rate:.0} datagrams/s: kernel lost {} of {} ({:.0} ms of traffic), {backend} lost {lost} of {sent} ({:.0} ms), counted {counted_lost}",
        kernel.0 - kernel.1,
        kernel.0,
        f64::from(kernel.0 - kernel.1) / (f64::from(kernel.0) / kernel.2) * 1e3,
        lost as f64 / rate * 1e3,
    );
    assert!(
        lost <= counted_lost,
        "every datagram lost is counted: lost {lost}, counted {counted_lost}: {after}"
    );
    // Three monitor intervals of traffic at most: the failure is seen at
    // the next 100 ms tick, and under emulation the tick can be late.
    assert!(
        lost as f64 <= rate * 0.3,
        "{backend} lost {lost} of {sent} at {rate:.0}/s across the failure (kernel {kernel:?})"
    );
    let ifaces = d.json(&["show", "interfaces"]);
    let bond = ifaces["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["port"] == "bond0")
        .unwrap()
        .clone();
    assert!(
        bond["kernel_tx_dropped"].as_u64().unwrap() >= counted("bond_tx_dropped"),
        "{bond}"
    );
    restore();

    // Both members' peers down, the sink's neighbour entry kept: the bond
    // has no member to send on, every datagram is lost, and each is
    // counted.
    let sink_mac = ok(&[
        "ip",
        "netns",
        "exec",
        sink,
        "cat",
        "/sys/class/net/bond1/address",
    ]);
    ok(&[
        "ip",
        "-n",
        dut,
        "neigh",
        "replace",
        SINK4,
        "lladdr",
        sink_mac.trim(),
        "dev",
        "bond0",
        "nud",
        "permanent",
    ]);
    for m in ["s0", "s1"] {
        ok(&["ip", "-n", sink, "link", "set", m, "down"]);
    }
    let gone = within(Duration::from_secs(5), || links_up(dut, "bond0") == 0);
    assert!(gone.is_some(), "bond0 down with both members' peers down");
    let before = d.json(&["show", "drops"]);
    let (received, _) = udp_flows_per_member(&lab, SINK4, 7501, 64, 10, &[]);
    let after = d.json(&["show", "drops"]);
    let counted_lost = losses_counted(&after) - losses_counted(&before);
    eprintln!(
        "both members down: {backend} delivered {received} of 640, counted {counted_lost} lost: bond_tx_dropped {}, xdp_redirects_dropped {}, held_expired {}, by reason {:?}",
        after["bond_tx_dropped"],
        after["xdp_redirects_dropped"],
        after["held_expired"],
        after["drops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["count"].as_u64() != Some(0))
            .map(|d| format!("{} {}", d["reason"], d["count"]))
            .collect::<Vec<_>>()
    );
    assert_eq!(received, 0);
    assert!(
        counted_lost >= 640,
        "every datagram the bond could not send is counted: {counted_lost} of 640: {after}"
    );
    // And back: both members up, every flow delivered again.
    for m in ["s0", "s1"] {
        ok(&["ip", "-n", sink, "link", "set", m, "up"]);
    }
    let up = within(Duration::from_secs(10), || {
        bond_up(dut, "bond0", 2) && bond_up(sink, "bond1", 2)
    });
    assert!(up.is_some(), "both bonds whole again");
    assert!(reach().is_some(), "{}", log_text(&d));
    let (received, per) = udp_flows_per_member(&lab, SINK4, 7502, 64, 10, &["s0", "s1"]);
    assert_eq!(
        received,
        640,
        "after the bond came back: {per:?} {}",
        log_text(&d)
    );
}

/// A kernel VLAN device on a bond is the config's VLAN on the bond port:
/// a route learned over `bond0.100` after the start carries 200 of 200
/// datagrams through `backend`, tagged, over the LAG.
pub fn bond_vlan_scenario(backend: &str, tag: &str) {
    let Some(lab) = bonded_lab(tag) else { return };
    add_vlan_100(&lab, "bond0", "bond1");
    let cfg = lab.write_config();
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace("name = \"d1\"", "name = \"bond0\"")
        + "[[interfaces.vlans]]\nid = 100\naddresses = [\"203.0.113.1/24\"]\n";
    std::fs::write(&cfg, text).unwrap();
    let d = lab.start_from(backend, &cfg, &[]);
    route_over_vlan_100(&lab, &d, "bond0.100");
}
