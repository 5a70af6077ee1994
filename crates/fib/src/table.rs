//! Route files: one route per line, `prefix [next-hop]` (an id up to
//! [`crate::poptrie::MAX_NEXT_HOP`]), IPv4 and IPv6
//! mixed, `#` comments and blank lines ignored. Optionally gzip-compressed
//! (`.gz`).
//!
//! A line without a next hop gets a derived one, [`derived_next_hop`]: a
//! hash of the prefix modulo 256, so the same file always yields the same
//! table. This lets a bare prefix list (such as a full Internet table dump)
//! be used as a FIB with many distinct next hops.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use wire::{Cidr, Ipv4Cidr, Ipv6Cidr};

use crate::NextHopId;

/// Number of distinct next hops [`derived_next_hop`] produces.
pub const DERIVED_NEXT_HOPS: u32 = 256;

/// A parsed route file.
#[derive(Debug, Clone, Default)]
pub struct RouteFile {
    /// IPv4 routes, in file order.
    pub v4: Vec<(Ipv4Cidr, NextHopId)>,
    /// IPv6 routes, in file order.
    pub v6: Vec<(Ipv6Cidr, NextHopId)>,
    /// Lines whose next hop was derived from the prefix.
    pub derived: usize,
}

impl RouteFile {
    /// Number of distinct next-hop ids used.
    pub fn distinct_next_hops(&self) -> usize {
        let mut s: HashSet<NextHopId> = self.v4.iter().map(|r| r.1).collect();
        s.extend(self.v6.iter().map(|r| r.1));
        s.len()
    }
}

/// Error reading a route file; names the file and line.
#[derive(Debug, thiserror::Error)]
pub enum RouteFileError {
    /// The file could not be opened or read.
    #[error("{file}: {source}")]
    Io {
        /// File name.
        file: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A line does not hold `prefix [next-hop]`.
    #[error("{file}:{line}: {field}: {reason}")]
    Syntax {
        /// File name.
        file: String,
        /// Line number, from 1.
        line: usize,
        /// `prefix`, `next-hop` or `line`.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The next hop derived for a prefix listed without one: FNV-1a of the
/// address bytes and length, modulo [`DERIVED_NEXT_HOPS`].
pub fn derived_next_hop(prefix: &Cidr) -> NextHopId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    match prefix {
        Cidr::V4(p) => p.addr().to_be_bytes().into_iter().for_each(&mut eat),
        Cidr::V6(p) => p.addr().to_be_bytes().into_iter().for_each(&mut eat),
    }
    eat(prefix.prefix_len());
    (h % DERIVED_NEXT_HOPS as u64) as NextHopId
}

/// Parses a route file from a reader; `name` is used in errors.
pub fn parse_routes<R: BufRead>(reader: R, name: &str) -> Result<RouteFile, RouteFileError> {
    let mut out = RouteFile::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| RouteFileError::Io {
            file: name.to_string(),
            source,
        })?;
        let text = line.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        let syntax = |field: &'static str, reason: String| RouteFileError::Syntax {
            file: name.to_string(),
            line: i + 1,
            field,
            reason,
        };
        let mut words = text.split_whitespace();
        let prefix_text = words.next().unwrap_or("");
        let prefix: Cidr = prefix_text
            .parse()
            .map_err(|e| syntax("prefix", format!("{prefix_text:?}: {e}")))?;
        let nh = match words.next() {
            Some(w) => {
                let nh = w
                    .parse::<NextHopId>()
                    .map_err(|e| syntax("next-hop", format!("{w:?}: {e}")))?;
                if nh > crate::poptrie::MAX_NEXT_HOP {
                    return Err(syntax(
                        "next-hop",
                        format!("{nh} above the largest id {}", crate::poptrie::MAX_NEXT_HOP),
                    ));
                }
                nh
            }
            None => {
                out.derived += 1;
                derived_next_hop(&prefix)
            }
        };
        if let Some(extra) = words.next() {
            return Err(syntax(
                "line",
                format!("unexpected {extra:?} after the next hop"),
            ));
        }
        match prefix {
            Cidr::V4(p) => out.v4.push((p, nh)),
            Cidr::V6(p) => out.v6.push((p, nh)),
        }
    }
    Ok(out)
}

/// Reads a route file from disk, gunzipping names ending in `.gz`.
pub fn read_routes(path: &Path) -> Result<RouteFile, RouteFileError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| RouteFileError::Io {
        file: name.clone(),
        source,
    })?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    parse_routes(BufReader::with_capacity(1 << 16, reader), &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mixed_files_and_derives_next_hops() {
        let text = "# comment\n10.0.0.0/8 7\n\n2001:db8::/32\n192.168.0.0/16 # no next hop\n";
        let f = parse_routes(text.as_bytes(), "t").unwrap();
        assert_eq!(f.v4.len(), 2);
        assert_eq!(f.v6.len(), 1);
        assert_eq!(f.derived, 2);
        assert_eq!(f.v4[0], ("10.0.0.0/8".parse().unwrap(), 7));
        let p: Cidr = "192.168.0.0/16".parse().unwrap();
        assert_eq!(f.v4[1].1, derived_next_hop(&p));
        assert!(derived_next_hop(&p) < DERIVED_NEXT_HOPS);
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse_routes("10.0.0.0/8 1\n10.0.0.0/33 1\n".as_bytes(), "r.txt").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("r.txt:2: prefix:"), "{s}");
        let e = parse_routes("10.0.0.0/8 x\n".as_bytes(), "r.txt").unwrap_err();
        assert!(e.to_string().starts_with("r.txt:1: next-hop:"), "{e}");
        let e =
            parse_routes("10.0.0.0/8 65534\n10.0.0.0/8 65535\n".as_bytes(), "r.txt").unwrap_err();
        assert!(e.to_string().starts_with("r.txt:2: next-hop:"), "{e}");
        let e = parse_routes("10.0.0.0/8 1 2\n".as_bytes(), "r.txt").unwrap_err();
        assert!(e.to_string().starts_with("r.txt:1: line:"), "{e}");
    }
}
