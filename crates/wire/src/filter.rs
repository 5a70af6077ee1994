//! Packet filters for `fastfwd trace` and `fastfwd capture`: a documented
//! subset of tcpdump's filter language (pcap-filter(7)), compiled to a
//! small tree and evaluated over raw Ethernet frames.
//!
//! The language:
//!
//! ```text
//! expr  := term { ("or" | "||") term }
//! term  := unary { ("and" | "&&") unary }
//! unary := ("not" | "!") unary | "(" expr ")" | primitive
//! primitive :=
//!     [src | dst] host ADDRESS          IPv4 or IPv6 address
//!   | [src | dst] net PREFIX            a.b.c.d/len, a:b::/len, or an address
//!   | [src | dst] port NUMBER           TCP, UDP or SCTP port
//!   | [src | dst] portrange LOW-HIGH
//!   | ip | ip6 | arp | tcp | udp | sctp | icmp | icmp6
//!   | [ip | ip6] proto NUMBER           IP protocol / IPv6 next header
//! ```
//!
//! Semantics follow libpcap's for untagged frames (a test compares both
//! with tcpdump over the same packets): `host` and `net` match IPv4, IPv6
//! and the protocol addresses of ARP; `port` matches TCP, UDP and SCTP
//! ports of IPv4 packets that are not later fragments and of IPv6 packets
//! whose first next header is the transport (no extension header walk);
//! `tcp`, `udp`, `sctp`, `icmp6` and `proto N` read the IPv4 protocol or
//! the IPv6 next header. Two differences: up to two 802.1Q / 802.1ad tags
//! are looked through (libpcap needs `vlan` first), and tcpdump's
//! shorthand repetitions (`host a or b`) are not accepted: write `host a
//! or host b`.
//!
//! Limits: a filter is at most [`MAX_FILTER_CHARS`] characters and
//! [`MAX_FILTER_TOKENS`] words and symbols, with `not` and parentheses
//! nested at most [`MAX_FILTER_DEPTH`] deep; a longer or deeper one is
//! refused with an error. The compiled tree is then at most
//! `MAX_FILTER_TOKENS` nodes deep, which the recursive evaluation (on a
//! worker's stack, per frame) and its drop handle with room to spare.

use std::net::IpAddr;

/// The longest filter text, in characters.
pub const MAX_FILTER_CHARS: usize = 4096;
/// The most words and symbols in a filter.
pub const MAX_FILTER_TOKENS: usize = 512;
/// The deepest nesting of `not` and parentheses.
pub const MAX_FILTER_DEPTH: usize = 32;

/// A compiled filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    root: Node,
    text: String,
}

/// Why a filter text was refused: the position (in characters) and what
/// was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("filter {text:?}, at {at}: {what}")]
pub struct FilterError {
    /// The filter text.
    pub text: String,
    /// Character offset of the token at fault.
    pub at: usize,
    /// What went wrong.
    pub what: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Either,
    Src,
    Dst,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Any,
    V4,
    V6,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Or(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// Address in a prefix (host: full length); IPv4 addresses as
    /// IPv4-mapped, with the length counted in the mapped form.
    Net(Dir, u128, u8, bool),
    Ports(Dir, u16, u16),
    EtherType(u16),
    Proto(Family, u8),
}

/// What a filter reads of a frame, parsed once.
#[derive(Debug, Clone, Copy, Default)]
struct Fields {
    ethertype: u16,
    /// IPv4 (false) or IPv6 (true) addresses present.
    ip: Option<bool>,
    src: u128,
    dst: u128,
    /// IP protocol / first IPv6 next header.
    proto: Option<u8>,
    /// Transport ports (TCP, UDP, SCTP; not later fragments).
    ports: Option<(u16, u16)>,
    /// ARP sender and target protocol addresses (IPv4-mapped).
    arp: Option<(u128, u128)>,
}

const MAPPED: u128 = 0xffff_0000_0000;

fn mapped(a: [u8; 4]) -> u128 {
    MAPPED | u128::from(u32::from_be_bytes(a))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn fields(frame: &[u8]) -> Fields {
    let mut f = Fields::default();
    let Some(mut et) = be16(frame, 12) else {
        return f;
    };
    let mut l3 = 14;
    for _ in 0..2 {
        if et == 0x8100 || et == 0x88a8 {
            match be16(frame, l3 + 2) {
                Some(e) => et = e,
                None => return f,
            }
            l3 += 4;
        }
    }
    f.ethertype = et;
    let h = frame.get(l3..).unwrap_or(&[]);
    let ports_at = |f: &mut Fields, l4: usize| {
        if matches!(f.proto, Some(6 | 17 | 132))
            && let (Some(s), Some(d)) = (be16(h, l4), be16(h, l4 + 2))
        {
            f.ports = Some((s, d));
        }
    };
    match et {
        0x0800 if h.len() >= 20 => {
            f.ip = Some(false);
            f.src = mapped([h[12], h[13], h[14], h[15]]);
            f.dst = mapped([h[16], h[17], h[18], h[19]]);
            f.proto = Some(h[9]);
            let later_fragment = be16(h, 6).is_some_and(|v| v & 0x1fff != 0);
            if !later_fragment {
                ports_at(&mut f, usize::from(h[0] & 0x0f) * 4);
            }
        }
        0x86dd if h.len() >= 40 => {
            f.ip = Some(true);
            let a = |at: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&h[at..at + 16]);
                u128::from_be_bytes(b)
            };
            f.src = a(8);
            f.dst = a(24);
            f.proto = Some(h[6]);
            ports_at(&mut f, 40);
        }
        0x0806 if h.len() >= 28 && be16(h, 2) == Some(0x0800) && h[5] == 4 => {
            f.arp = Some((
                mapped([h[14], h[15], h[16], h[17]]),
                mapped([h[24], h[25], h[26], h[27]]),
            ));
        }
        _ => {}
    }
    f
}

fn in_net(a: u128, net: u128, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    a & mask == net & mask
}

impl Node {
    fn eval(&self, f: &Fields) -> bool {
        match self {
            Node::Or(a, b) => a.eval(f) || b.eval(f),
            Node::And(a, b) => a.eval(f) && b.eval(f),
            Node::Not(a) => !a.eval(f),
            Node::Net(dir, net, len, v6) => {
                let hit = |x: u128| in_net(x, *net, *len);
                let pick = |s: u128, d: u128| match dir {
                    Dir::Either => hit(s) || hit(d),
                    Dir::Src => hit(s),
                    Dir::Dst => hit(d),
                };
                let ip = f.ip == Some(*v6) && pick(f.src, f.dst);
                let arp = !v6 && f.arp.is_some_and(|(s, d)| pick(s, d));
                ip || arp
            }
            Node::Ports(dir, lo, hi) => f.ports.is_some_and(|(s, d)| {
                let hit = |p: u16| (*lo..=*hi).contains(&p);
                match dir {
                    Dir::Either => hit(s) || hit(d),
                    Dir::Src => hit(s),
                    Dir::Dst => hit(d),
                }
            }),
            Node::EtherType(t) => f.ethertype == *t,
            Node::Proto(fam, p) => {
                f.proto == Some(*p)
                    && match fam {
                        Family::Any => true,
                        Family::V4 => f.ip == Some(false),
                        Family::V6 => f.ip == Some(true),
                    }
            }
        }
    }
}

impl Filter {
    /// Compiles a filter text.
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        let refuse = |what: String| FilterError {
            text: text.chars().take(80).collect(),
            at: 0,
            what,
        };
        let chars = text.chars().count();
        if chars > MAX_FILTER_CHARS {
            return Err(refuse(format!(
                "{chars} characters: a filter has at most {MAX_FILTER_CHARS}"
            )));
        }
        let tokens = tokenize(text);
        if tokens.len() > MAX_FILTER_TOKENS {
            return Err(refuse(format!(
                "{} words and symbols: a filter has at most {MAX_FILTER_TOKENS}",
                tokens.len()
            )));
        }
        let mut p = Parser {
            text,
            tokens: &tokens,
            pos: 0,
            depth: 0,
        };
        let root = p.expr()?;
        if let Some(t) = p.peek() {
            return Err(p.error_at(t.1, format!("unexpected `{}`", t.0)));
        }
        Ok(Filter {
            root,
            text: text.to_string(),
        })
    }

    /// Whether the Ethernet frame `frame` matches.
    pub fn matches(&self, frame: &[u8]) -> bool {
        self.root.eval(&fields(frame))
    }

    /// The text it was compiled from.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Words and symbols (`(`, `)`, `!`, `&&`, `||`) with their character
/// offsets.
fn tokenize(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut word: Option<(String, usize)> = None;
    let mut chars = text.chars().enumerate().peekable();
    while let Some((i, c)) = chars.next() {
        let symbol = match c {
            '(' | ')' | '!' => Some(c.to_string()),
            '&' | '|' => {
                if chars.peek().map(|&(_, n)| n) == Some(c) {
                    chars.next();
                    Some(format!("{c}{c}"))
                } else {
                    Some(c.to_string())
                }
            }
            _ => None,
        };
        if c.is_whitespace() || symbol.is_some() {
            out.extend(word.take());
            out.extend(symbol.map(|s| (s, i)));
        } else {
            word.get_or_insert_with(|| (String::new(), i)).0.push(c);
        }
    }
    out.extend(word);
    out
}

struct Parser<'a> {
    text: &'a str,
    tokens: &'a [(String, usize)],
    pos: usize,
    /// `not` and parentheses open around the current token.
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&(String, usize)> {
        self.tokens.get(self.pos)
    }

    fn word(&self) -> Option<&str> {
        self.peek().map(|t| t.0.as_str())
    }

    fn error_at(&self, at: usize, what: String) -> FilterError {
        FilterError {
            text: self.text.to_string(),
            at,
            what,
        }
    }

    fn error(&self, what: impl Into<String>) -> FilterError {
        let at = self.peek().map_or(self.text.chars().count(), |t| t.1);
        self.error_at(at, what.into())
    }

    fn next_word(&mut self, expected: &str) -> Result<String, FilterError> {
        match self.peek() {
            Some(t) => {
                let w = t.0.clone();
                self.pos += 1;
                Ok(w)
            }
            None => Err(self.error(format!("expected {expected}, found the end"))),
        }
    }

    fn expr(&mut self) -> Result<Node, FilterError> {
        let mut left = self.term()?;
        while matches!(self.word(), Some("or" | "||")) {
            self.pos += 1;
            let right = self.term()?;
            left = Node::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Node, FilterError> {
        let mut left = self.unary()?;
        while matches!(self.word(), Some("and" | "&&")) {
            self.pos += 1;
            let right = self.unary()?;
            left = Node::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node, FilterError> {
        if matches!(self.word(), Some("not" | "!" | "(")) {
            if self.depth >= MAX_FILTER_DEPTH {
                return Err(self.error(format!(
                    "`not` and parentheses nested more than {MAX_FILTER_DEPTH} deep"
                )));
            }
            self.depth += 1;
            let r = self.nested();
            self.depth -= 1;
            return r;
        }
        self.nested()
    }

    fn nested(&mut self) -> Result<Node, FilterError> {
        match self.word() {
            Some("not" | "!") => {
                self.pos += 1;
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.pos += 1;
                let e = self.expr()?;
                if self.word() != Some(")") {
                    return Err(self.error("expected `)`"));
                }
                self.pos += 1;
                Ok(e)
            }
            Some(_) => self.primitive(),
            None => Err(self.error("expected a primitive (host, net, port, tcp, ...)")),
        }
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, FilterError> {
        let at = self.peek().map(|t| t.1);
        let w = self.next_word(what)?;
        w.parse()
            .map_err(|_| self.error_at(at.unwrap_or(0), format!("`{w}` is not {what}")))
    }

    fn primitive(&mut self) -> Result<Node, FilterError> {
        let dir = match self.word() {
            Some("src") => Dir::Src,
            Some("dst") => Dir::Dst,
            _ => Dir::Either,
        };
        if dir != Dir::Either {
            self.pos += 1;
        }
        let at = self.peek().map_or(0, |t| t.1);
        let w = self.next_word("host, net, port or portrange")?;
        let node = match w.as_str() {
            "host" => {
                let at = self.peek().map(|t| t.1).unwrap_or(0);
                let a = self.next_word("an address")?;
                let ip: IpAddr = a
                    .parse()
                    .map_err(|_| self.error_at(at, format!("`{a}` is not an IP address")))?;
                net_node(dir, ip, None)
            }
            "net" => {
                let at = self.peek().map(|t| t.1).unwrap_or(0);
                let a = self.next_word("a prefix")?;
                let (addr, len) = match a.split_once('/') {
                    Some((x, l)) => (x, Some(l)),
                    None => (a.as_str(), None),
                };
                let bad = || FilterError {
                    text: self.text.to_string(),
                    at,
                    what: format!("`{a}` is not a prefix"),
                };
                let ip: IpAddr = addr.parse().map_err(|_| bad())?;
                let len = match len {
                    Some(l) => Some(l.parse::<u8>().map_err(|_| bad())?),
                    None => None,
                };
                let max = if ip.is_ipv4() { 32 } else { 128 };
                if len.is_some_and(|l| l > max) {
                    return Err(bad());
                }
                net_node(dir, ip, len)
            }
            "port" => {
                let p = self.number::<u16>("a port number")?;
                Node::Ports(dir, p, p)
            }
            "portrange" => {
                let at = self.peek().map(|t| t.1).unwrap_or(0);
                let r = self.next_word("LOW-HIGH")?;
                let parsed = r
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)));
                match parsed {
                    Some((lo, hi)) if lo <= hi => Node::Ports(dir, lo, hi),
                    _ => {
                        return Err(
                            self.error_at(at, format!("`{r}` is not a port range LOW-HIGH"))
                        );
                    }
                }
            }
            _ if dir != Dir::Either => {
                return Err(self.error_at(
                    at,
                    format!("`{w}` after src/dst: expected host, net, port or portrange"),
                ));
            }
            "ip" | "ip6" => {
                if self.word() == Some("proto") {
                    self.pos += 1;
                    let p = self.number::<u8>("a protocol number")?;
                    let fam = if w == "ip" { Family::V4 } else { Family::V6 };
                    Node::Proto(fam, p)
                } else {
                    Node::EtherType(if w == "ip" { 0x0800 } else { 0x86dd })
                }
            }
            "proto" => Node::Proto(Family::Any, self.number::<u8>("a protocol number")?),
            "arp" => Node::EtherType(0x0806),
            "tcp" => Node::Proto(Family::Any, 6),
            "udp" => Node::Proto(Family::Any, 17),
            "sctp" => Node::Proto(Family::Any, 132),
            "icmp" => Node::Proto(Family::V4, 1),
            "icmp6" => Node::Proto(Family::V6, 58),
            other => {
                return Err(self.error_at(
                    at,
                    format!(
                        "unknown primitive `{other}` (host, net, port, portrange, ip, ip6, arp, tcp, udp, sctp, icmp, icmp6, proto)"
                    ),
                ));
            }
        };
        Ok(node)
    }
}

fn net_node(dir: Dir, ip: IpAddr, len: Option<u8>) -> Node {
    match ip {
        IpAddr::V4(a) => Node::Net(dir, mapped(a.octets()), 96 + len.unwrap_or(32), false),
        IpAddr::V6(a) => Node::Net(dir, u128::from(a), len.unwrap_or(128), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn primitives_and_operators() {
        let f = udp4([10, 0, 0, 1], [192, 0, 2, 7], 5000, 53);
        let m = |t: &str| Filter::parse(t).unwrap().matches(&f);
        assert!(m("udp"));
        assert!(!m("tcp"));
        assert!(m("host 10.0.0.1"));
        assert!(m("src host 10.0.0.1 and dst port 53"));
        assert!(!m("dst host 10.0.0.1"));
        assert!(m("net 192.0.2.0/24"));
        assert!(!m("src net 192.0.2.0/24"));
        assert!(m("port 53 && !tcp"));
        assert!(m("portrange 5000-5001"));
        assert!(m("not ( tcp or icmp ) and ip"));
        assert!(!m("ip6 or arp"));
        assert!(m("ip proto 17"));
        assert!(!m("ip6 proto 17"));
        assert!(m("(port 1||port 53)&&udp"));
    }

    #[test]
    fn vlan_tags_are_looked_through() {
        let plain = udp4([10, 0, 0, 1], [192, 0, 2, 7], 5000, 53);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        tagged.extend_from_slice(&plain[12..]);
        assert!(Filter::parse("dst port 53").unwrap().matches(&tagged));
    }

    #[test]
    fn errors_name_the_place() {
        for (t, at) in [
            ("host", 4),
            ("host 300.1.1.1", 5),
            ("port 99999", 5),
            ("tcp and", 7),
            ("(udp", 4),
            ("udp )", 4),
            ("src tcp", 4),
            ("frob", 0),
            ("net 10.0.0.0/33", 4),
        ] {
            let e = Filter::parse(t).unwrap_err();
            assert_eq!(e.at, at, "{t}: {e}");
        }
    }

    /// Long and deep filters are refused with an error, never parsed into
    /// a tree whose evaluation or drop could exhaust a stack; the longest
    /// accepted ones evaluate and drop.
    #[test]
    fn filters_are_bounded_in_length_and_depth() {
        let bangs = "! ".repeat(200_000) + "tcp";
        let e = Filter::parse(&bangs).unwrap_err();
        assert!(e.what.contains("at most 4096"), "{e}");
        assert!(e.text.len() <= 80);
        let e = Filter::parse(&"!".repeat(4000)).unwrap_err();
        assert!(e.what.contains("at most 512"), "{e}");
        let deep = format!("{}tcp", "! ".repeat(MAX_FILTER_DEPTH + 1));
        let e = Filter::parse(&deep).unwrap_err();
        assert!(e.what.contains("nested more than 32"), "{e}");
        let parens = format!(
            "{}tcp{}",
            "(".repeat(MAX_FILTER_DEPTH + 1),
            ")".repeat(MAX_FILTER_DEPTH + 1)
        );
        assert!(Filter::parse(&parens).is_err());
        let ok = format!("{}tcp", "! ".repeat(MAX_FILTER_DEPTH));
        let f = Filter::parse(&ok).unwrap();
        assert!(
            !f.matches(&[0u8; 60]),
            "32 nots around tcp are tcp: a zeroed frame is not"
        );
        let odd = format!("{}tcp", "! ".repeat(MAX_FILTER_DEPTH - 1));
        assert!(Filter::parse(&odd).unwrap().matches(&[0u8; 60]));
        // The longest chain: a tree as deep as the tokens allow.
        let chain = vec!["udp"; MAX_FILTER_TOKENS / 2].join(" or ");
        assert!(chain.split(' ').count() < MAX_FILTER_TOKENS);
        let f = Filter::parse(&chain).unwrap();
        assert!(!f.matches(&[0u8; 60]));
        drop(f);
    }

    #[test]
    fn short_and_garbage_frames_never_match_addresses() {
        let f = Filter::parse("host 10.0.0.1 or port 53 or arp").unwrap();
        for n in 0..40 {
            assert!(!f.matches(&vec![0u8; n]));
        }
    }
}
