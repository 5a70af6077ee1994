//! The gen → dut → sink lab of docs/lab-methods.md in namespaces created
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

/// The three namespaces.
pub struct Lab {
    pub gen: String,
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
        if !is_root() {
            eprintln!("skipping: the router tests need root to create network namespaces");
            return None;
        }
        let id = std::process::id() % 100_000;
        let p = format!("rt{id}{tag}");
        let dir = std::env::temp_dir().join(format!("fastfwd-{p}"));
        std::fs::create_dir_all(&dir).unwrap();
        let lab = Lab {
            gen: format!("{p}gen"),
            dut: format!("{p}dut"),
            sink: format!("{p}sink"),
            dir,
        };
        for ns in [&lab.gen, &lab.dut, &lab.sink] {
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
        let (g, d, s) = (lab.gen.as_str(), lab.dut.as_str(), lab.sink.as_str());
        ok(&[
            "ip", "-n", g, "link", "add", "g0", "type", "veth", "peer", "name", "d0", "netns", d,
        ]);
        ok(&[
            "ip", "-n", s, "link", "add", "s0", "type", "veth", "peer", "name", "d1", "netns", d,
        ]);
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

    /// Starts `fastfwd run` in dut and waits for its control socket.
    pub fn start(&self, backend: &str) -> Daemon {
        let cfg = self.write_config();
        let log = self.dir.join(format!("run-{backend}.log"));
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.dut,
                env!("CARGO_BIN_EXE_fastfwd"),
                "run",
                "--config",
            ])
            .arg(&cfg)
            .args(["--backend", backend, "--cores", "1", "--socket"])
            .arg(self.socket())
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
        for ns in [&self.gen, &self.dut, &self.sink] {
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
pub fn forwarding_scenario(backend: &str, tag: &str) {
    let Some(lab) = Lab::new(tag) else { return };
    // No neighbour known anywhere: ARP and ND must run.
    for ns in [&lab.gen, &lab.dut, &lab.sink] {
        let _ = sh(&["ip", "-n", ns, "neigh", "flush", "all"]);
    }
    let mut d = lab.start(backend);
    assert!(d
        .json(&["show", "neighbors"])
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["origin"] == "kernel"));

    // IPv4 and IPv6 gen -> sink, TTL / hop limit decremented once each way.
    let out4 = lab
        .ping(&lab.gen, SINK4, 3)
        .expect("IPv4 ping from gen to sink through fastfwd");
    assert!(reply_ttls(&out4).iter().all(|&t| t == 63), "{out4}");
    let out6 = lab
        .ping(&lab.gen, SINK6, 3)
        .expect("IPv6 ping from gen to sink through fastfwd");
    assert!(reply_ttls(&out6).iter().all(|&t| t == 63), "{out6}");
    assert!(!reply_ttls(&out4).is_empty() && !reply_ttls(&out6).is_empty());

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
            &lab.gen,
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
        udp_echo(&lab, &lab.gen, DUT_D1, 7001).as_deref(),
        Some("echo:hello")
    );
    assert_eq!(
        udp_echo(&lab, &lab.gen, "2001:2:0:8000::10", 7002).as_deref(),
        Some("echo:hello")
    );
    assert!(lab.ping(&lab.gen, DUT_D0, 1).is_some());

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
    assert!(lab.ping(&lab.gen, "10.99.0.1", 1).is_none(), "no route yet");

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
        lab.ping(&lab.gen, "10.99.0.1", 2).is_some(),
        "kernel route used"
    );
    assert!(
        lab.ping(&lab.gen, "2001:db8:99::1", 2).is_some(),
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
        lab.ping(&lab.gen, "10.99.0.1", 1).is_none(),
        "deleted route no longer used"
    );

    // A route added through the CLI.
    assert!(lab.ping(&lab.gen, "10.98.0.1", 1).is_none());
    let o = d.cli(&["route", "add", "10.98.0.0/16", "via", SINK4]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = d.json(&["show", "route", "10.98.0.1"]);
    assert_eq!(r[0]["origin"], "api", "{r}");
    assert_eq!(r[0]["next_hops"][0], "via 198.19.0.108 dev d1");
    assert!(
        lab.ping(&lab.gen, "10.98.0.1", 2).is_some(),
        "CLI route used"
    );
    assert!(!sh(&["ip", "-n", &lab.dut, "route", "get", "10.98.0.1"])
        .stdout
        .windows(12)
        .any(|w| w == b"198.19.0.108"));
    assert!(d.cli(&["route", "del", "10.98.0.0/16"]).status.success());
    assert!(
        lab.ping(&lab.gen, "10.98.0.1", 1).is_none(),
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
    assert!(d
        .cli(&["route", "add", "10.96.0.0/16", "via", "198.19.0.109"])
        .status
        .success());
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
        lab.ping(&lab.gen, "10.96.0.1", 1).is_none(),
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
        lab.ping(&lab.gen, "10.96.0.1", 2).is_some(),
        "static neighbour used"
    );
    assert!(d
        .cli(&["neighbor", "del", "198.19.0.109", "dev", "d1"])
        .status
        .success());
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
    assert!(lab.ping(&lab.gen, "10.95.0.1", 1).is_none());
    let o = d.cli(&["config", "reload", &good.to_string_lossy()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        d.json(&["show", "route", "10.95.0.1"])[0]["origin"],
        "config"
    );
    assert!(
        lab.ping(&lab.gen, "10.95.0.1", 2).is_some(),
        "reloaded config's route used"
    );

    // netstat -iw style: one line per interval.
    let o = d.cli(&["show", "interfaces", "-w", "1", "-c", "2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.lines().count() == 4, "{text}");

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
}
