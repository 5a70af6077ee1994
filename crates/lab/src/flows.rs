//! Flow ranges in netmap pkt-gen's notation.
//!
//! An endpoint range is `A[:P][-B[:Q]]` for IPv4 (`198.18.10.1:2000-198.18.10.20`)
//! and `[A][:P][-[B][:Q]]` for IPv6 (`[2001:2::1]-[2001:2::14]`): addresses
//! `A..=B` and ports `P..=Q` (a missing end takes the start's value, a
//! missing port the default). The flows are the product of source
//! addresses, source ports, destination addresses and destination ports;
//! flow `i` is found by mixed-radix decomposition with the destination port
//! varying fastest, then the destination address, the source port and the
//! source address, so consecutive packets spread over destinations first.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a flow range was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowError {
    /// The text is not `A[:P][-B[:Q]]`.
    #[error("bad range `{text}`: {why}")]
    Syntax {
        /// The range as given.
        text: String,
        /// What is wrong.
        why: &'static str,
    },
    /// Source and destination ranges are of different IP families.
    #[error("source and destination ranges mix IPv4 and IPv6")]
    MixedFamilies,
    /// The product of the ranges does not fit in 64 bits.
    #[error("the ranges give more than 2^64 flows")]
    TooMany,
}

/// A UDP 5-tuple (the protocol is always UDP here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// An inclusive range of addresses (of one family) and of ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointRange {
    /// First address, as a 128-bit number (IPv4 in the low 32 bits).
    first: u128,
    /// Last address, inclusive.
    last: u128,
    /// True for IPv6.
    v6: bool,
    /// First port.
    pub port_first: u16,
    /// Last port, inclusive.
    pub port_last: u16,
}

fn syntax(text: &str, why: &'static str) -> FlowError {
    FlowError::Syntax {
        text: text.to_string(),
        why,
    }
}

/// Parses one `addr[:port]` endpoint; returns the address and the port if given.
fn parse_endpoint(text: &str, whole: &str) -> Result<(IpAddr, Option<u16>), FlowError> {
    let (addr_text, port_text) = if let Some(rest) = text.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| syntax(whole, "`[` without `]`"))?;
        let after = &rest[close + 1..];
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| syntax(whole, "expected `:port` after `]`"))?,
            ),
        };
        (&rest[..close], port)
    } else if text.matches(':').count() > 1 {
        (text, None)
    } else {
        match text.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        }
    };
    let addr: IpAddr = addr_text
        .parse()
        .map_err(|_| syntax(whole, "not an IP address"))?;
    let port = match port_text {
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| syntax(whole, "port is not a number 0-65535"))?,
        ),
        None => None,
    };
    Ok((addr, port))
}

fn addr_to_u128(a: IpAddr) -> (u128, bool) {
    match a {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), false),
        IpAddr::V6(v6) => (u128::from(v6), true),
    }
}

impl EndpointRange {
    /// Parses `A[:P][-B[:Q]]`, taking `default_port` when no port is given.
    pub fn parse(text: &str, default_port: u16) -> Result<Self, FlowError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(syntax(text, "empty"));
        }
        let mut parts = text.split('-');
        let first = parts.next().unwrap_or_default();
        let second = parts.next();
        if parts.next().is_some() {
            return Err(syntax(text, "more than one `-`"));
        }
        let (a, p) = parse_endpoint(first, text)?;
        let (b, q) = match second {
            Some(s) => parse_endpoint(s, text)?,
            None => (a, None),
        };
        let (first, v6a) = addr_to_u128(a);
        let (last, v6b) = addr_to_u128(b);
        if v6a != v6b {
            return Err(syntax(text, "range mixes IPv4 and IPv6"));
        }
        if last < first {
            return Err(syntax(text, "last address below first"));
        }
        let port_first = p.unwrap_or(default_port);
        let port_last = q.unwrap_or(port_first);
        if port_last < port_first {
            return Err(syntax(text, "last port below first"));
        }
        Ok(Self {
            first,
            last,
            v6: v6a,
            port_first,
            port_last,
        })
    }

    /// Is this an IPv6 range?
    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// Number of addresses (saturating at u64::MAX).
    pub fn addr_count(&self) -> u64 {
        u64::try_from(self.last - self.first).map_or(u64::MAX, |d| d.saturating_add(1))
    }

    /// Keeps only the first `n` (at least one) addresses.
    pub fn truncate_addrs(&mut self, n: u64) {
        let n = n.max(1);
        if self.addr_count() > n {
            self.last = self.first + u128::from(n - 1);
        }
    }

    /// Number of ports.
    pub fn port_count(&self) -> u64 {
        u64::from(self.port_last - self.port_first) + 1
    }

    /// The `i`-th address (`i < addr_count()`).
    pub fn addr(&self, i: u64) -> IpAddr {
        let n = self.first + u128::from(i);
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(n))
        } else {
            IpAddr::V4(Ipv4Addr::from(n as u32))
        }
    }
}

/// The flows of a generator: the product of a source and a destination
/// range, or of a source range and a list of destination addresses (drawn
/// from a routing table, say) with the destination range's ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSet {
    /// Source addresses and ports.
    pub src: EndpointRange,
    /// Destination addresses and ports (with a list, only its ports count).
    pub dst: EndpointRange,
    /// Destination addresses, in place of `dst`'s.
    dst_list: Option<std::sync::Arc<[IpAddr]>>,
    len: u64,
}

impl FlowSet {
    /// The product of `src` and `dst`.
    pub fn new(src: EndpointRange, dst: EndpointRange) -> Result<Self, FlowError> {
        if src.v6 != dst.v6 {
            return Err(FlowError::MixedFamilies);
        }
        let len = [
            src.addr_count(),
            src.port_count(),
            dst.addr_count(),
            dst.port_count(),
        ]
        .into_iter()
        .try_fold(1u64, |acc, n| {
            if n == u64::MAX {
                None
            } else {
                acc.checked_mul(n)
            }
        })
        .ok_or(FlowError::TooMany)?;
        Ok(Self {
            src,
            dst,
            dst_list: None,
            len,
        })
    }

    /// The product of `src`, the addresses `dsts` (at least one, of
    /// `src`'s family) and destination port `dport`.
    pub fn with_destinations(
        src: EndpointRange,
        dsts: Vec<IpAddr>,
        dport: u16,
    ) -> Result<Self, FlowError> {
        let Some(&first) = dsts.first() else {
            return Err(syntax("", "no destination addresses"));
        };
        if dsts.iter().any(|a| a.is_ipv6() != src.v6) {
            return Err(FlowError::MixedFamilies);
        }
        let (f, _) = addr_to_u128(first);
        let dst = EndpointRange {
            first: f,
            last: f,
            v6: src.v6,
            port_first: dport,
            port_last: dport,
        };
        let len = src
            .addr_count()
            .checked_mul(src.port_count())
            .and_then(|n| n.checked_mul(dsts.len() as u64))
            .ok_or(FlowError::TooMany)?;
        Ok(Self {
            src,
            dst,
            dst_list: Some(dsts.into()),
            len,
        })
    }

    /// Distinct destination addresses.
    pub fn destinations(&self) -> u64 {
        self.dst_list
            .as_ref()
            .map_or(self.dst.addr_count(), |l| l.len() as u64)
    }

    /// Parses pkt-gen style `-s` and `-d` ranges (default ports 2000).
    pub fn parse(src: &str, dst: &str) -> Result<Self, FlowError> {
        Self::new(
            EndpointRange::parse(src, 2000)?,
            EndpointRange::parse(dst, 2000)?,
        )
    }

    /// Number of flows.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true: every range holds at least one address and port.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// IPv6 flows?
    pub fn is_v6(&self) -> bool {
        self.src.v6
    }

    /// Flow `i` (taken modulo `len()`).
    pub fn get(&self, i: u64) -> FiveTuple {
        let mut i = i % self.len;
        let dp = self.dst.port_count();
        let dport = self.dst.port_first + (i % dp) as u16;
        i /= dp;
        let (dst, da) = match &self.dst_list {
            Some(l) => (l[(i % l.len() as u64) as usize], l.len() as u64),
            None => {
                let da = self.dst.addr_count();
                (self.dst.addr(i % da), da)
            }
        };
        i /= da;
        let sp = self.src.port_count();
        let sport = self.src.port_first + (i % sp) as u16;
        i /= sp;
        let src = self.src.addr(i);
        FiveTuple {
            src,
            dst,
            sport,
            dport,
        }
    }

    /// All flows in order.
    pub fn iter(&self) -> impl Iterator<Item = FiveTuple> + '_ {
        (0..self.len).map(move |i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn nested(src: &EndpointRange, dst: &EndpointRange) -> BTreeSet<FiveTuple> {
        let mut out = BTreeSet::new();
        for sa in 0..src.addr_count() {
            for sp in src.port_first..=src.port_last {
                for da in 0..dst.addr_count() {
                    for dp in dst.port_first..=dst.port_last {
                        out.insert(FiveTuple {
                            src: src.addr(sa),
                            dst: dst.addr(da),
                            sport: sp,
                            dport: dp,
                        });
                    }
                }
            }
        }
        out
    }

    #[test]
    fn seed_example_gives_exact_product() {
        let f = FlowSet::parse(
            "198.18.10.1:2000-198.18.10.20",
            "198.19.10.1:2000-198.19.10.10",
        )
        .unwrap();
        assert_eq!(f.len(), 200);
        let got: BTreeSet<_> = f.iter().collect();
        let mut want = BTreeSet::new();
        for s in 1..=20u8 {
            for d in 1..=10u8 {
                want.insert(FiveTuple {
                    src: IpAddr::V4(Ipv4Addr::new(198, 18, 10, s)),
                    dst: IpAddr::V4(Ipv4Addr::new(198, 19, 10, d)),
                    sport: 2000,
                    dport: 2000,
                });
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn ports_and_addresses_multiply() {
        let f = FlowSet::parse("10.0.0.1:100-10.0.0.2:102", "10.1.0.255:7-10.1.1.0:8").unwrap();
        assert_eq!(f.len(), 2 * 3 * 2 * 2);
        let got: Vec<_> = f.iter().collect();
        assert_eq!(
            got.iter().collect::<BTreeSet<_>>().len(),
            24,
            "flows are distinct"
        );
        assert!(got.contains(&FiveTuple {
            src: "10.0.0.2".parse().unwrap(),
            dst: "10.1.1.0".parse().unwrap(),
            sport: 102,
            dport: 8
        }));
        // Destination port varies fastest, then the destination address.
        assert_eq!(got[0].dport, 7);
        assert_eq!(got[1].dport, 8);
        assert_eq!(got[2].dst, "10.1.1.0".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ipv6_bracketed_ranges() {
        let f = FlowSet::parse(
            "[2001:2:0:1::1]-[2001:2:0:1::14]",
            "[2001:2:0:8001::1]:9-[2001:2:0:8001::64]:10",
        )
        .unwrap();
        assert!(f.is_v6());
        assert_eq!(f.len(), 20 * 100 * 2);
        let got: BTreeSet<_> = f.iter().collect();
        assert_eq!(got, nested(&f.src, &f.dst));
        assert!(got.contains(&FiveTuple {
            src: "2001:2:0:1::14".parse().unwrap(),
            dst: "2001:2:0:8001::64".parse().unwrap(),
            sport: 2000,
            dport: 10
        }));
        let single = EndpointRange::parse("2001:2::1", 5).unwrap();
        assert_eq!((single.addr_count(), single.port_first), (1, 5));
    }

    #[test]
    fn bad_ranges_are_refused() {
        for bad in [
            "",
            "1.2.3.4-1.2.3.3",
            "1.2.3.4:5-1.2.3.4:4",
            "1.2.3.4:70000",
            "x",
            "[::1",
            "1.2.3.4-::1",
            "1-2-3",
        ] {
            assert!(EndpointRange::parse(bad, 1).is_err(), "{bad} accepted");
        }
        assert_eq!(
            FlowSet::parse("1.2.3.4", "[::1]"),
            Err(FlowError::MixedFamilies)
        );
        assert_eq!(
            FlowSet::parse(
                "0.0.0.0:0-255.255.255.255:65535",
                "0.0.0.0:0-255.255.255.255:65535"
            ),
            Err(FlowError::TooMany)
        );
    }

    proptest! {
        #[test]
        fn flows_equal_nested_loops(a in any::<u32>(), na in 0u32..5, p in 0u16..65000, np in 0u16..3,
                                    b in any::<u32>(), nb in 0u32..5, q in 0u16..65000, nq in 0u16..3) {
            let src = EndpointRange { first: u128::from(a), last: u128::from(a.saturating_add(na)), v6: false, port_first: p, port_last: p + np };
            let dst = EndpointRange { first: u128::from(b), last: u128::from(b.saturating_add(nb)), v6: false, port_first: q, port_last: q + nq };
            let f = FlowSet::new(src, dst).unwrap();
            let got: Vec<_> = f.iter().collect();
            let want = nested(&src, &dst);
            prop_assert_eq!(got.len() as u64, f.len());
            prop_assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
        }
    }
}
