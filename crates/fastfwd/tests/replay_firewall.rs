//! End to end: `fastfwd replay` with a `[firewall]` section. A pcap holds
//! packets for every rule of a small rule set (a counter, a drop, a reject
//! with ICMP administratively prohibited, a default reject, an accept, the
//! chain policy); every output is decoded by an independent parser
//! (etherparse) and the per-rule counters are checked against the frames
//! sent.
//!
//! Frames and the pcap container are built byte by byte here, so nothing of
//! fastfwd's own parsing judges fastfwd's output.

use etherparse::{Ethernet2Header, Icmpv4Slice, Ipv4Header};
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
    std::fs::write(dir.join("router.toml"), CONFIG).unwrap();
    write_pcap(&dir.join("in.pcap"), frames);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fastfwd"));
    cmd.arg("replay")
        .arg("--config")
        .arg(dir.join("router.toml"))
        .arg("--in")
        .arg(format!("d0={}", dir.join("in.pcap").display()))
        .arg("--out")
        .arg(dir.join("out"));
    if json {
        cmd.arg("--json");
    }
    let res = cmd.output().unwrap();
    assert!(
        res.status.success(),
        "fastfwd replay failed: {}",
        String::from_utf8_lossy(&res.stderr)
    );
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
