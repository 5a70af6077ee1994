//! `wire::filter` (the filters of `trace` and `capture`) against libpcap:
//! random untagged frames (IPv4 and IPv6 with TCP, UDP, SCTP, ICMP and
//! other protocols, fragments, ARP, short and odd frames) written to a
//! pcap, and for each filter expression the frames tcpdump selects (`-r
//! FILE EXPR`) are exactly those `Filter::matches` selects. Skips without
//! tcpdump (fails under CI, which installs it).

use std::path::Path;
use std::process::Command;
use wire::filter::Filter;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const V4: [[u8; 4]; 4] = [
    [10, 0, 0, 1],
    [10, 0, 1, 7],
    [192, 0, 2, 9],
    [198, 51, 100, 200],
];
const V6: [u128; 3] = [
    0x2001_0db8_0000_0000_0000_0000_0000_0001,
    0x2001_0db8_00aa_0000_0000_0000_0000_0005,
    0xfe80_0000_0000_0000_0000_0000_0000_0009,
];
const PORTS: [u16; 5] = [53, 80, 443, 1024, 65535];

fn frame(r: &mut Rng) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    let l4 = |r: &mut Rng, proto: u8| -> Vec<u8> {
        let mut p = Vec::new();
        match proto {
            6 | 17 | 132 => {
                p.extend_from_slice(&r.pick(&PORTS).to_be_bytes());
                p.extend_from_slice(&r.pick(&PORTS).to_be_bytes());
                p.resize(20, 0);
            }
            _ => p.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]),
        }
        p
    };
    match r.below(10) {
        0..=4 => {
            f.extend_from_slice(&[0x08, 0x00]);
            let proto = r.pick(&[6u8, 17, 132, 1, 47]);
            let payload = l4(r, proto);
            let frag: u16 = r.pick(&[0, 0, 0, 0x2000, 0x0010]);
            let mut h = vec![0x45, 0, 0, 0, 0, 1];
            h.extend_from_slice(&frag.to_be_bytes());
            h.extend_from_slice(&[64, proto, 0, 0]);
            h.extend_from_slice(&r.pick(&V4));
            h.extend_from_slice(&r.pick(&V4));
            let total = (h.len() + payload.len()) as u16;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&h);
            f.extend_from_slice(&payload);
        }
        5..=7 => {
            f.extend_from_slice(&[0x86, 0xdd]);
            let proto = r.pick(&[6u8, 17, 132, 58, 47]);
            let payload = l4(r, proto);
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            h.extend_from_slice(&[proto, 64]);
            h.extend_from_slice(&r.pick(&V6).to_be_bytes());
            h.extend_from_slice(&r.pick(&V6).to_be_bytes());
            f.extend_from_slice(&h);
            f.extend_from_slice(&payload);
        }
        8 => {
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&[2, 0, 0, 0, 0, 2]);
            f.extend_from_slice(&r.pick(&V4));
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&r.pick(&V4));
        }
        _ => {
            // Another EtherType, or IP cut short.
            f.extend_from_slice(r.pick(&[&[0x88u8, 0xcc][..], &[0x08, 0x00, 0x45, 0]]));
        }
    }
    while f.len() < 60 {
        f.push(0);
    }
    f
}

const FILTERS: &[&str] = &[
    "ip",
    "ip6",
    "arp",
    "tcp",
    "udp",
    "sctp",
    "icmp",
    "icmp6",
    "ip proto 47",
    "ip6 proto 47",
    "host 10.0.0.1",
    "src host 192.0.2.9",
    "dst host 2001:db8::1",
    "net 10.0.0.0/8",
    "dst net 10.0.1.0/24",
    "src net 2001:db8:aa::/48",
    "port 53",
    "src port 80",
    "dst port 443 and tcp",
    "portrange 80-1024",
    "udp and not port 53",
    "host 10.0.0.1 or host 198.51.100.200",
    "not ip and not ip6",
    "(tcp or udp) and dst net 192.0.2.0/24",
    "! arp && ( port 65535 || icmp6 )",
];

#[test]
fn filters_select_what_tcpdump_selects() {
    if Command::new("tcpdump").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tcpdump is missing (scripts/install-deps installs it)"
        );
        eprintln!("skipped: no tcpdump");
        return;
    }
    let dir = std::env::temp_dir().join(format!("fastfwd-filters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = Rng(0x5eed_f11e);
    let frames: Vec<Vec<u8>> = (0..600).map(|_| frame(&mut r)).collect();
    let input = dir.join("in.pcap");
    let mut w = netio::pcap::Writer::new(std::fs::File::create(&input).unwrap()).unwrap();
    for (i, f) in frames.iter().enumerate() {
        // Frame i at second i: tcpdump's output names each by its time.
        w.write(i as u64 * 1_000_000_000, f).unwrap();
    }
    w.finish().unwrap();
    for text in FILTERS {
        let ours: Vec<usize> = {
            let f = Filter::parse(text).unwrap();
            (0..frames.len())
                .filter(|&i| f.matches(&frames[i]))
                .collect()
        };
        let theirs = tcpdump(&input, text);
        assert_eq!(ours, theirs, "filter `{text}`");
        assert!(
            !ours.is_empty() && ours.len() < frames.len(),
            "`{text}` selects some"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The frames (by index: their timestamp in seconds) tcpdump selects.
fn tcpdump(input: &Path, filter: &str) -> Vec<usize> {
    let o = Command::new("tcpdump")
        .args(["-r"])
        .arg(input)
        .args(["-nn", "-tt", filter])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tcpdump `{filter}`: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split('.').next()?.parse().ok())
        .collect()
}
