//! End to end: `fastfwd replay` with a `[firewall]` section. A pcap holds
//! packets for every rule of a small rule set (a counter, a drop, a reject
//! with ICMP administratively prohibited, a default reject, an accept, the
//! chain policy); every output is decoded by an independent parser
//! (etherparse) and the per-rule counters are checked against the frames
//! sent.
//!
//! Frames and the pcap container are built byte by byte here, so nothing of
//! fastfwd's own parsing judges fastfwd's output.

use etherparse::{Ethernet2Header, Icmpv4Slice, Icmpv6Slice, Ipv4Header, Ipv6Header, TcpHeader};
use std::path::{Path, PathBuf};
use std::process::Command;

const R_D0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const R_D1: [u8; 6] = [2, 0, 0, 0, 1, 0x10];
const GEN: [u8; 6] = [2, 0, 0, 0, 0, 8];
const SINK: [u8; 6] = [2, 0, 0, 0, 1, 8];

const R4_D0: [u8; 4] = [198, 18, 0, 10];
const GEN4: [u8; 4] = [198, 18, 0, 108];
const OTHER4: [u8; 4] = [198, 18, 0, 50];
const SINK4: [u8; 4] = [198, 19, 0, 108];

/// Rule lines in the rules text (1-based, as the counters report them).
const LINE_COUNTER: usize = 3;
const LINE_DROP: usize = 4;
const LINE_REJECT_ADMIN: usize = 5;
const LINE_REJECT_DEFAULT: usize = 6;
const LINE_ACCEPT: usize = 7;

const CONFIG: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24"]

[[neighbours]]
interface = "d0"
ip = "198.18.0.108"
mac = "02:00:00:00:00:08"

[[neighbours]]
interface = "d0"
ip = "198.18.0.50"
mac = "02:00:00:00:00:08"

[[neighbours]]
interface = "d1"
ip = "198.19.0.108"
mac = "02:00:00:00:01:08"

[firewall]
rules = """
chain forward {
    policy drop
    ip saddr 198.18.0.50 counter
    iif d0 udp dport 9 counter drop
    oif d1 tcp dport 23 reject with icmpx type admin-prohibited
    udp dport 7 reject
    udp dport 5000-5999 accept
}
"""
"#;

// ------------------------------------------------------ building packets

/// RFC 1071 one's-complement sum folded to 16 bits (not complemented).
fn ones_sum(mut acc: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        acc += u32::from(w);
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

fn checksum(data: &[u8]) -> u16 {
    !(ones_sum(0, data) as u16)
}

/// An Ethernet frame from the generator to the router's d0.
fn eth(payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&R_D0);
    f.extend_from_slice(&GEN);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An IPv4 packet with a unique identification `id` (to attribute outputs).
fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, id: u16, l4: &[u8]) -> Vec<u8> {
    let total = (20 + l4.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(l4);
    h
}

fn l4_checksum(src: [u8; 4], dst: [u8; 4], proto: u8, seg: &[u8]) -> u16 {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, proto]);
    pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    !(ones_sum(ones_sum(0, &pseudo), seg) as u16)
}

fn udp(src: [u8; 4], dst: [u8; 4], dport: u16, id: u16, data_len: usize) -> Vec<u8> {
    let len = (8 + data_len) as u16;
    let mut u = Vec::new();
    u.extend_from_slice(&40000u16.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend((0..data_len).map(|i| (i as u8) ^ (id as u8)));
    let c = l4_checksum(src, dst, 17, &u);
    u[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    eth(&ipv4(src, dst, 17, id, &u))
}

/// A TCP SYN.
fn tcp_syn(src: [u8; 4], dst: [u8; 4], dport: u16, id: u16) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&40001u16.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&0x1000_0000u32.to_be_bytes()); // seq
    t.extend_from_slice(&0u32.to_be_bytes()); // ack
    t.extend_from_slice(&[0x50, 0x02]); // data offset 5, SYN
    t.extend_from_slice(&8192u16.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    let c = l4_checksum(src, dst, 6, &t);
    t[16..18].copy_from_slice(&c.to_be_bytes());
    eth(&ipv4(src, dst, 6, id, &t))
}

// ------------------------------------------------------ pcap and replay

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    for w in [0xa1b2c3d4u32, 0x0004_0002, 0, 0, 262144, 1] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        // One frame per millisecond from t = 1000 s.
        let (sec, usec) = (1000u32, i as u32 * 1000);
        for w in [sec, usec, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// The frames of a little-endian microsecond pcap (what replay writes);
/// no file: no frames.
fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let Ok(b) = std::fs::read(path) else {
        return Vec::new();
    };
    assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 0xa1b2c3d4);
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    out
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fastfwd-fwreplay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn replay(dir: &Path, frames: &[Vec<u8>], json: bool) -> std::process::Output {
    replay_config(dir, CONFIG, frames, json)
}

fn replay_config(dir: &Path, config: &str, frames: &[Vec<u8>], json: bool) -> std::process::Output {
    std::fs::write(dir.join("router.toml"), config).unwrap();
    write_pcap(&dir.join("in.pcap"), frames);
    let run = |engine: &str, out: &str, json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fastfwd"));
        cmd.arg("replay")
            .arg("--config")
            .arg(dir.join("router.toml"))
            .arg("--in")
            .arg(format!("d0={}", dir.join("in.pcap").display()))
            .arg("--out")
            .arg(dir.join(out))
            .args(["--engine", engine]);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let res = run("user", "out", json);
    assert!(
        res.status.success(),
        "fastfwd replay failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    // The XDP engine evaluates stateless rules in the program (rejects and
    // stateful rule sets go to the pipeline): the same outputs and counters.
    if netio::root_or_skip("replay of the firewall with --engine xdp") {
        let x = run("xdp", "out-xdp", true);
        assert!(
            x.status.success(),
            "--engine xdp: {}",
            String::from_utf8_lossy(&x.stderr)
        );
        for e in std::fs::read_dir(dir.join("out")).unwrap().flatten() {
            let name = e.file_name();
            assert_eq!(
                std::fs::read(e.path()).ok(),
                std::fs::read(dir.join("out-xdp").join(&name)).ok(),
                "{name:?}: user vs xdp engine"
            );
        }
        if json {
            let a: serde_json::Value = serde_json::from_slice(&res.stdout).unwrap();
            let b: serde_json::Value = serde_json::from_slice(&x.stdout).unwrap();
            for key in ["counters", "outputs", "firewall"] {
                assert_eq!(a.get(key), b.get(key), "{key}: user vs xdp engine");
            }
        }
    }
    res
}

/// IPv4 identification of an IP packet.
fn ip_id(ip: &[u8]) -> u16 {
    u16::from_be_bytes([ip[4], ip[5]])
}

struct Traffic {
    frames: Vec<Vec<u8>>,
    accepted: Vec<u16>,
    counted: Vec<u16>,
    dropped: Vec<u16>,
    rejected_admin: Vec<u16>,
    rejected_default: Vec<u16>,
    policy: Vec<u16>,
}

fn traffic() -> Traffic {
    let mut t = Traffic {
        frames: Vec::new(),
        accepted: Vec::new(),
        counted: Vec::new(),
        dropped: Vec::new(),
        rejected_admin: Vec::new(),
        rejected_default: Vec::new(),
        policy: Vec::new(),
    };
    let mut id = 0x4000u16;
    let mut push =
        |t: &mut Traffic, frame: Vec<u8>, lists: &[fn(&mut Traffic) -> &mut Vec<u16>]| {
            id += 1;
            let mut frame = frame;
            // Rewrite the identification (and header checksum) to `id`.
            frame[18..20].copy_from_slice(&id.to_be_bytes());
            frame[24..26].copy_from_slice(&[0, 0]);
            let c = checksum(&frame[14..34]);
            frame[24..26].copy_from_slice(&c.to_be_bytes());
            for l in lists {
                l(t).push(id);
            }
            t.frames.push(frame);
        };
    for i in 0..3 {
        push(
            &mut t,
            udp(GEN4, SINK4, 5001 + i, 0, 20 + usize::from(i)),
            &[|t| &mut t.accepted],
        );
    }
    push(
        &mut t,
        udp(OTHER4, SINK4, 5500, 0, 100),
        &[|t| &mut t.counted, |t| &mut t.accepted],
    );
    push(&mut t, udp(GEN4, SINK4, 9, 0, 10), &[|t| &mut t.dropped]);
    push(
        &mut t,
        udp(OTHER4, SINK4, 9, 0, 30),
        &[|t| &mut t.counted, |t| &mut t.dropped],
    );
    push(
        &mut t,
        tcp_syn(GEN4, SINK4, 23, 0),
        &[|t| &mut t.rejected_admin],
    );
    push(
        &mut t,
        udp(GEN4, SINK4, 7, 0, 12),
        &[|t| &mut t.rejected_default],
    );
    push(&mut t, udp(GEN4, SINK4, 80, 0, 16), &[|t| &mut t.policy]);
    push(&mut t, tcp_syn(GEN4, SINK4, 22, 0), &[|t| &mut t.policy]);
    t
}

/// (packets, bytes of IP packets) of the frames with these ids.
fn totals(frames: &[Vec<u8>], ids: &[u16]) -> (u64, u64) {
    let sel: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| ids.contains(&ip_id(&f[14..])))
        .collect();
    assert_eq!(sel.len(), ids.len());
    (
        sel.len() as u64,
        sel.iter().map(|f| (f.len() - 14) as u64).sum(),
    )
}

/// Checks an ICMP destination unreachable sent back toward the generator
/// for the input frame `inp`; returns its code.
fn check_unreachable(out: &[u8], inp: &[u8]) -> u8 {
    let (eh, rest) = Ethernet2Header::from_slice(out).expect("ethernet header");
    assert_eq!(eh.destination, GEN, "to the sender's MAC");
    assert_eq!(eh.source, R_D0, "from the router's d0 MAC");
    assert_eq!(eh.ether_type.0, 0x0800);
    let (ip, _) = Ipv4Header::from_slice(rest).expect("ipv4 header");
    assert_eq!(
        ip.header_checksum,
        ip.calc_header_checksum(),
        "IPv4 checksum"
    );
    assert_eq!(ip.protocol.0, 1);
    assert_eq!(ip.source, R4_D0, "from the router's address on d0");
    assert_eq!(ip.destination, GEN4, "back to the source");
    let msg = &rest[ip.header_len()..usize::from(ip.total_len)];
    assert_eq!(ones_sum(0, msg), 0xffff, "ICMP checksum");
    let icmp = Icmpv4Slice::from_slice(msg).expect("icmpv4");
    assert_eq!(icmp.type_u8(), 3, "destination unreachable");
    assert_eq!(icmp.bytes5to8(), [0; 4], "unused field");
    // RFC 792 / RFC 1812 §4.3.2.3: the quote is the offending packet as
    // received, its header and at least 8 bytes of data.
    let quote = icmp.payload();
    let orig = &inp[14..];
    assert!(quote.len() >= 28, "quote of {} bytes", quote.len());
    assert_eq!(
        quote,
        &orig[..quote.len()],
        "quote of the packet as received"
    );
    icmp.code_u8()
}

fn rule_counters(json: &serde_json::Value, line: usize) -> (u64, u64) {
    let chain = json["firewall"]["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["chain"] == "forward")
        .expect("forward chain");
    let r = chain["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["line"].as_u64() == Some(line as u64))
        .unwrap_or_else(|| panic!("no rule on line {line}: {chain}"));
    (r["packets"].as_u64().unwrap(), r["bytes"].as_u64().unwrap())
}

#[test]
fn replay_applies_the_firewall_rules() {
    let dir = tmpdir("rules");
    let t = traffic();
    let res = replay(&dir, &t.frames, true);
    let json: serde_json::Value = serde_json::from_slice(&res.stdout).expect("JSON on stdout");
    let out = dir.join("out");

    // Accepted: forwarded out of d1 to the sink, TTL decremented, in order.
    let d1 = read_pcap(&out.join("d1.pcap"));
    let ids: Vec<u16> = d1.iter().map(|f| ip_id(&f[14..])).collect();
    assert_eq!(ids, t.accepted, "exactly the accepted packets leave by d1");
    for f in &d1 {
        let (eh, rest) = Ethernet2Header::from_slice(f).unwrap();
        assert_eq!((eh.destination, eh.source), (SINK, R_D1));
        let (ip, _) = Ipv4Header::from_slice(rest).unwrap();
        assert_eq!(ip.time_to_live, 63);
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    }

    // Dropped and rejected: in drop.pcap as received, nowhere else.
    let mut denied: Vec<u16> = [
        &t.dropped,
        &t.rejected_admin,
        &t.rejected_default,
        &t.policy,
    ]
    .into_iter()
    .flatten()
    .copied()
    .collect();
    denied.sort_unstable();
    let drop = read_pcap(&out.join("drop.pcap"));
    let mut drop_ids: Vec<u16> = drop.iter().map(|f| ip_id(&f[14..])).collect();
    drop_ids.sort_unstable();
    assert_eq!(drop_ids, denied);
    for f in &drop {
        assert!(t.frames.contains(f), "drop.pcap holds frames as received");
    }
    let c = &json["counters"];
    assert_eq!(c["drops"]["acl_denied"].as_u64(), Some(denied.len() as u64));
    assert!(read_pcap(&out.join("punt.pcap")).is_empty());

    // Rejected: one ICMP destination unreachable each, back out of d0.
    let d0 = read_pcap(&out.join("d0.pcap"));
    assert_eq!(d0.len(), t.rejected_admin.len() + t.rejected_default.len());
    let mut codes = Vec::new();
    for e in &d0 {
        let (_, rest) = Ethernet2Header::from_slice(e).unwrap();
        let (ip, _) = Ipv4Header::from_slice(rest).unwrap();
        let quoted_id = {
            let q = &rest[ip.header_len() + 8..];
            ip_id(q)
        };
        let inp = t
            .frames
            .iter()
            .find(|f| ip_id(&f[14..]) == quoted_id)
            .expect("the quote names an input packet");
        let code = check_unreachable(e, inp);
        codes.push((quoted_id, code));
    }
    codes.sort_unstable();
    let mut want: Vec<(u16, u8)> = t
        .rejected_admin
        .iter()
        .map(|&i| (i, 13)) // communication administratively prohibited
        .chain(t.rejected_default.iter().map(|&i| (i, 3))) // port unreachable
        .collect();
    want.sort_unstable();
    assert_eq!(codes, want);
    assert_eq!(c["icmp_sent"].as_u64(), Some(d0.len() as u64));

    // Per-rule counters: packets and IP bytes of the frames each rule took.
    assert_eq!(json["firewall"]["source"], "router.toml [firewall]");
    assert_eq!(
        rule_counters(&json, LINE_COUNTER),
        totals(&t.frames, &t.counted)
    );
    assert_eq!(
        rule_counters(&json, LINE_DROP),
        totals(&t.frames, &t.dropped)
    );
    assert_eq!(
        rule_counters(&json, LINE_REJECT_ADMIN),
        totals(&t.frames, &t.rejected_admin)
    );
    assert_eq!(
        rule_counters(&json, LINE_REJECT_DEFAULT),
        totals(&t.frames, &t.rejected_default)
    );
    assert_eq!(
        rule_counters(&json, LINE_ACCEPT),
        totals(&t.frames, &t.accepted)
    );
    let fwd = json["firewall"]["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["chain"] == "forward")
        .unwrap();
    assert_eq!(fwd["policy"], "drop");
    let (pp, pb) = totals(&t.frames, &t.policy);
    assert_eq!(fwd["policy_packets"].as_u64(), Some(pp));
    assert_eq!(fwd["policy_bytes"].as_u64(), Some(pb));
    assert_eq!(
        fwd["rules"][1]["rule"].as_str(),
        Some("iif d0 udp dport 9 counter drop")
    );

    // The table shows the same counters, with each rule's line and text.
    let res = replay(&dir, &t.frames, false);
    let table = String::from_utf8(res.stdout).unwrap();
    let (p, b) = totals(&t.frames, &t.accepted);
    let line = table
        .lines()
        .find(|l| l.ends_with("udp dport 5000-5999 accept"))
        .unwrap_or_else(|| panic!("no accept rule row:\n{table}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        cols[..3],
        [LINE_ACCEPT.to_string(), p.to_string(), b.to_string()],
        "{line}"
    );
    assert!(
        table.contains("firewall (router.toml [firewall])"),
        "{table}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_refuses_a_bad_rule_naming_the_toml_line() {
    let dir = tmpdir("bad");
    let bad = CONFIG.replace("udp dport 7 reject", "udp dport 7 rejekt");
    std::fs::write(dir.join("router.toml"), &bad).unwrap();
    write_pcap(&dir.join("in.pcap"), &traffic().frames);
    let res = Command::new(env!("CARGO_BIN_EXE_fastfwd"))
        .arg("replay")
        .arg("--config")
        .arg(dir.join("router.toml"))
        .arg("--in")
        .arg(format!("d0={}", dir.join("in.pcap").display()))
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(!res.status.success());
    let line = bad.lines().position(|l| l.contains("rejekt")).unwrap() + 1;
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains(&format!("router.toml:{line}: firewall.rules: ")),
        "{err}"
    );
    assert!(!dir.join("out").exists(), "nothing replayed");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ------------------------------------------------------------ TCP reset

const GEN6: &str = "2001:db8::108";
const SINK6: &str = "2001:db8:1::108";

/// A router with IPv4 and IPv6 on both sides; TCP to port 25 is refused
/// with a RST, other TCP with a plain `reject` (a RST for TCP too).
const CONFIG_RST: &str = r#"
[[interfaces]]
name = "d0"
mac = "02:00:00:00:00:10"
addresses = ["198.18.0.10/24", "2001:db8::10/64"]

[[interfaces]]
name = "d1"
mac = "02:00:00:00:01:10"
addresses = ["198.19.0.10/24", "2001:db8:1::10/64"]

[[neighbours]]
interface = "d0"
ip = "198.18.0.108"
mac = "02:00:00:00:00:08"

[[neighbours]]
interface = "d0"
ip = "2001:db8::108"
mac = "02:00:00:00:00:08"

[[neighbours]]
interface = "d1"
ip = "198.19.0.108"
mac = "02:00:00:00:01:08"

[firewall]
rules = """
chain forward {
    policy accept
    tcp dport 25 reject with tcp reset
    tcp dport 110 reject
    ip6 daddr 2001:db8:1::/64 udp dport 7 reject with icmpx type admin-prohibited
}
"""
"#;

const LINE_RST: usize = 3;
const LINE_RST_DEFAULT: usize = 4;
const LINE_REJECT_V6: usize = 5;

/// A TCP segment (20-byte header) with `data_len` bytes of data.
fn tcp_segment(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, data_len: usize) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags]);
    t.extend_from_slice(&8192u16.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend((0..data_len).map(|i| i as u8));
    t
}

fn tcp4_frame(seg: &[u8], id: u16) -> Vec<u8> {
    let mut seg = seg.to_vec();
    let c = l4_checksum(GEN4, SINK4, 6, &seg);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    eth(&ipv4(GEN4, SINK4, 6, id, &seg))
}

fn v6_pseudo_sum(src: [u8; 16], dst: [u8; 16], len: usize) -> u32 {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&(len as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 6]);
    ones_sum(0, &pseudo)
}

fn tcp6_frame(seg: &[u8]) -> Vec<u8> {
    let (src, dst) = (v6(GEN6), v6(SINK6));
    let mut seg = seg.to_vec();
    let c = !(ones_sum(v6_pseudo_sum(src, dst, seg.len()), &seg) as u16);
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[6, 64]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(&seg);
    let mut f = Vec::new();
    f.extend_from_slice(&R_D0);
    f.extend_from_slice(&GEN);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&ip);
    f
}

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// A RST the router sent back toward the generator: (TCP header, IP
/// source, IP destination), with the Ethernet, IP and TCP checksums checked.
fn decode_reset(frame: &[u8]) -> (TcpHeader, Vec<u8>, Vec<u8>) {
    let (eh, rest) = Ethernet2Header::from_slice(frame).expect("ethernet header");
    assert_eq!((eh.destination, eh.source), (GEN, R_D0));
    let (src, dst, seg, pseudo) = match eh.ether_type.0 {
        0x0800 => {
            let (ip, _) = Ipv4Header::from_slice(rest).expect("ipv4 header");
            assert_eq!(
                ip.header_checksum,
                ip.calc_header_checksum(),
                "IPv4 checksum"
            );
            assert_eq!(ip.protocol.0, 6);
            assert_eq!(ip.time_to_live, 64);
            let seg = &rest[ip.header_len()..usize::from(ip.total_len)];
            let mut p = Vec::new();
            p.extend_from_slice(&ip.source);
            p.extend_from_slice(&ip.destination);
            p.extend_from_slice(&[0, 6]);
            p.extend_from_slice(&(seg.len() as u16).to_be_bytes());
            (
                ip.source.to_vec(),
                ip.destination.to_vec(),
                seg,
                ones_sum(0, &p),
            )
        }
        0x86dd => {
            let (ip, _) = Ipv6Header::from_slice(rest).expect("ipv6 header");
            assert_eq!(ip.next_header.0, 6);
            assert_eq!(ip.hop_limit, 64);
            let seg = &rest[40..40 + usize::from(ip.payload_length)];
            (
                ip.source.to_vec(),
                ip.destination.to_vec(),
                seg,
                v6_pseudo_sum(ip.source, ip.destination, seg.len()),
            )
        }
        t => panic!("ethertype {t:#06x}"),
    };
    assert_eq!(ones_sum(pseudo, seg), 0xffff, "TCP checksum");
    let (tcp, payload) = TcpHeader::from_slice(seg).expect("tcp header");
    assert!(payload.is_empty(), "a RST carries no data");
    assert!(tcp.rst && !tcp.syn && !tcp.fin);
    assert_eq!(tcp.window_size, 0);
    (tcp, src, dst)
}

/// A segment, its source port, and the reset expected in answer
/// (sequence, acknowledgement, ACK flag), or `None` for no answer.
type ResetCase = (Vec<u8>, u16, Option<(u32, u32, bool)>);

#[test]
fn replay_answers_reject_with_tcp_reset() {
    let dir = tmpdir("rst");
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const PSH: u8 = 0x08;
    const RST: u8 = 0x04;
    // (frame, source port, expected (seq, ack, ACK flag)); None: no answer.
    let cases: Vec<ResetCase> = vec![
        // SYN, no ACK: SEQ 0, ACK = SEG.SEQ + 1 (the SYN counts).
        (
            tcp4_frame(&tcp_segment(41001, 25, 1000, 0, SYN, 0), 1),
            41001,
            Some((0, 1001, true)),
        ),
        // Data with ACK: SEQ = SEG.ACK, no ACK flag.
        (
            tcp4_frame(&tcp_segment(41002, 25, 5000, 0x8000_0000, ACK | PSH, 10), 2),
            41002,
            Some((0x8000_0000, 0, false)),
        ),
        // FIN with data, no ACK, sequence wrapping: ACK = SEQ + 3 + 1.
        (
            tcp4_frame(&tcp_segment(41003, 110, 0xffff_fffe, 0, 0x01, 3), 3),
            41003,
            Some((0, 2, true)),
        ),
        // A RST is never answered.
        (
            tcp4_frame(&tcp_segment(41004, 25, 9, 9, RST | ACK, 0), 4),
            41004,
            None,
        ),
        // IPv6 SYN.
        (
            tcp6_frame(&tcp_segment(41005, 25, 77, 0, SYN, 0)),
            41005,
            Some((0, 78, true)),
        ),
        // Other ports pass.
        (
            tcp4_frame(&tcp_segment(41006, 80, 1, 0, SYN, 0), 6),
            41006,
            None,
        ),
    ];
    let mut frames: Vec<Vec<u8>> = cases.iter().map(|c| c.0.clone()).collect();
    // An IPv6 UDP datagram refused with ICMPv6 administratively prohibited.
    let udp6 = {
        let (src, dst) = (v6(GEN6), v6(SINK6));
        let mut u = vec![0x9c, 0x40, 0, 7, 0, 12, 0, 0, 1, 2, 3, 4];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src);
        pseudo.extend_from_slice(&dst);
        pseudo.extend_from_slice(&(u.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
        let c = !(ones_sum(ones_sum(0, &pseudo), &u) as u16);
        u[6..8].copy_from_slice(&c.to_be_bytes());
        let mut ip = vec![0x60, 0, 0, 0, 0, u.len() as u8, 17, 64];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        ip.extend_from_slice(&u);
        let mut f = Vec::new();
        f.extend_from_slice(&R_D0);
        f.extend_from_slice(&GEN);
        f.extend_from_slice(&0x86ddu16.to_be_bytes());
        f.extend_from_slice(&ip);
        f
    };
    frames.push(udp6.clone());
    let res = replay_config(&dir, CONFIG_RST, &frames, true);
    let json: serde_json::Value = serde_json::from_slice(&res.stdout).expect("JSON on stdout");
    let out = dir.join("out");

    let mut d0 = read_pcap(&out.join("d0.pcap"));
    // The ICMPv6 error: from the router's d0 address back to the source,
    // type 1 code 1, checksum over the pseudo-header, the datagram quoted.
    let icmp6_at = d0
        .iter()
        .position(|f| f[12..14] == [0x86, 0xdd] && f[20] == 58)
        .expect("an ICMPv6 error on d0");
    let e = d0.remove(icmp6_at);
    let (ip6, rest) = Ipv6Header::from_slice(&e[14..]).unwrap();
    assert_eq!(ip6.source, v6("2001:db8::10"));
    assert_eq!(ip6.destination, v6(GEN6));
    let icmp6 = Icmpv6Slice::from_slice(&rest[..usize::from(ip6.payload_length)]).unwrap();
    assert!(
        icmp6.is_checksum_valid(ip6.source, ip6.destination),
        "ICMPv6 checksum"
    );
    assert_eq!((icmp6.type_u8(), icmp6.code_u8()), (1, 1));
    assert_eq!(icmp6.payload(), &udp6[14..], "the datagram quoted whole");
    let want: Vec<_> = cases.iter().filter(|c| c.2.is_some()).collect();
    assert_eq!(d0.len(), want.len(), "one RST per rejected segment");
    for rst in &d0 {
        let (tcp, src, dst) = decode_reset(rst);
        let case = cases
            .iter()
            .find(|c| c.1 == tcp.destination_port)
            .expect("the RST goes to a test segment's source port");
        let (seq, ack, ack_flag) = case.2.expect("an answer to this segment");
        assert_eq!(
            (tcp.sequence_number, tcp.acknowledgment_number, tcp.ack),
            (seq, ack, ack_flag),
            "reset for source port {}",
            case.1
        );
        // From the segment's destination back to its source.
        if src.len() == 4 {
            assert_eq!((src.as_slice(), dst.as_slice()), (&SINK4[..], &GEN4[..]));
            assert_eq!(
                tcp.source_port,
                u16::from_be_bytes([case.0[36], case.0[37]])
            );
        } else {
            assert_eq!((src, dst), (v6(SINK6).to_vec(), v6(GEN6).to_vec()));
            assert_eq!(
                tcp.source_port,
                u16::from_be_bytes([case.0[56], case.0[57]])
            );
        }
    }
    let c = &json["counters"];
    assert_eq!(c["tcp_resets_sent"].as_u64(), Some(want.len() as u64));
    assert_eq!(c["icmp_sent"].as_u64(), Some(1));
    assert_eq!(c["drops"]["acl_denied"].as_u64(), Some(6));
    assert_eq!(read_pcap(&out.join("d1.pcap")).len(), 1, "port 80 passes");
    // Per-rule counters: four segments to port 25, one to 110.
    let sum = |idx: &[usize]| {
        (
            idx.len() as u64,
            idx.iter()
                .map(|&i| (frames[i].len() - 14) as u64)
                .sum::<u64>(),
        )
    };
    assert_eq!(rule_counters(&json, LINE_RST), sum(&[0, 1, 3, 4]));
    assert_eq!(rule_counters(&json, LINE_RST_DEFAULT), sum(&[2]));
    assert_eq!(rule_counters(&json, LINE_REJECT_V6), sum(&[6]));
    std::fs::remove_dir_all(&dir).unwrap();
}
