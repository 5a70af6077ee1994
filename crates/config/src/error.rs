//! Configuration errors: every one names the file, line and field.

use std::fmt;
use std::path::PathBuf;

/// A configuration that could not be loaded. Nothing is applied when this is
/// returned: a config applies whole or not at all.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration. Holds every
    /// problem found, in file order.
    #[error("{}", Diagnostics(.0))]
    Invalid(Vec<Diagnostic>),
}

impl ConfigError {
    /// The problems found, empty for an I/O error.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Io { .. } => &[],
            ConfigError::Invalid(d) => d,
        }
    }
}

struct Diagnostics<'a>(&'a [Diagnostic]);

impl fmt::Display for Diagnostics<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// One problem in a configuration file, located by line, column and field
/// path (`routes[3].via`, 0-based indices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file name as given to the loader.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// Dotted path of the field, empty for syntax errors.
    pub field: String,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}", self.kind)
    }
}

/// What is wrong with a field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// Not valid TOML.
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Valid TOML, but a field is missing, unknown or of the wrong type.
    #[error("{0}")]
    Schema(String),
    /// A name used twice (interfaces and VLAN sub-interfaces share one namespace).
    #[error("duplicate name {name:?} (first defined on line {first_line})")]
    DuplicateName {
        /// The name.
        name: String,
        /// Where it was first defined.
        first_line: usize,
    },
    /// A kernel interface (port) attached twice.
    #[error("port {port:?} is already used by interface {other:?}")]
    DuplicatePort {
        /// The port.
        port: String,
        /// The interface that has it.
        other: String,
    },
    /// A name that is empty, too long for a Linux interface, or has odd characters.
    #[error("bad interface name {0:?}: 1-15 characters of letters, digits, '.', '-', '_'")]
    BadName(String),
    /// A reference to an interface that does not exist.
    #[error("unknown interface {0:?}")]
    UnknownInterface(String),
    /// A MAC address that does not parse or cannot be used.
    #[error("bad MAC address {value:?}: {reason}")]
    BadMac {
        /// As written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// An MTU outside the allowed range.
    #[error("MTU {mtu} is out of range {min}..={max}")]
    MtuOutOfRange {
        /// As written.
        mtu: i64,
        /// Smallest allowed here.
        min: u32,
        /// Largest allowed here.
        max: u32,
    },
    /// A VLAN id outside 1..=4094.
    #[error("VLAN id {0} is out of range 1..=4094")]
    BadVlanId(i64),
    /// The same VLAN id twice on one port.
    #[error("VLAN id {id} is already used on this port by {other:?}")]
    DuplicateVlan {
        /// The id.
        id: u16,
        /// The sub-interface that has it.
        other: String,
    },
    /// An address or prefix that does not parse.
    #[error("bad prefix {value:?}: {reason}")]
    BadPrefix {
        /// As written.
        value: String,
        /// Why.
        reason: String,
    },
    /// An address that cannot be used where it is written.
    #[error("bad address {value}: {reason}")]
    BadAddress {
        /// As written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// An interface address configured twice.
    #[error("address {addr} is already configured on {other:?}")]
    DuplicateAddress {
        /// The address.
        addr: String,
        /// The interface that has it.
        other: String,
    },
    /// Two interface subnets overlap.
    #[error("subnet {subnet} overlaps {other_subnet} on {other:?}")]
    OverlappingSubnet {
        /// This subnet.
        subnet: String,
        /// The subnet it overlaps.
        other_subnet: String,
        /// The interface that has it.
        other: String,
    },
    /// A route prefix given twice.
    #[error("duplicate route for {prefix} (first on line {first_line})")]
    DuplicateRoute {
        /// The prefix.
        prefix: String,
        /// Where it was first given.
        first_line: usize,
    },
    /// A route with no next hop.
    #[error("route has no next hop: give `via`, `interface` or `next_hops`")]
    NoNextHop,
    /// Both route-level `via`/`interface` and `next_hops`.
    #[error("give either `via`/`interface` or `next_hops`, not both")]
    MixedNextHops,
    /// Too many equal-cost next hops.
    #[error("{count} next hops; at most {max} are allowed")]
    TooManyNextHops {
        /// Given.
        count: usize,
        /// Allowed.
        max: usize,
    },
    /// A next hop listed twice in one route.
    #[error("next hop {0} is listed twice")]
    DuplicateNextHop(String),
    /// IPv4 gateway for an IPv6 prefix or the reverse.
    #[error("{via} is not the same address family as {prefix}")]
    FamilyMismatch {
        /// The gateway.
        via: String,
        /// The route prefix.
        prefix: String,
    },
    /// A gateway not inside any connected subnet.
    #[error("{0} is not on any connected subnet")]
    GatewayNotConnected(String),
    /// A gateway (or neighbour) not on the named interface's subnets.
    #[error("{addr} is not on a subnet of interface {interface:?}")]
    NotOnInterface {
        /// The address.
        addr: String,
        /// The interface.
        interface: String,
    },
    /// A gateway that is one of the router's own addresses.
    #[error("{addr} is the router's own address on {interface:?}")]
    GatewayIsLocal {
        /// The address.
        addr: String,
        /// The interface that has it.
        interface: String,
    },
    /// An IPv6 link-local gateway without an interface.
    #[error("link-local gateway {0} needs an `interface`")]
    LinkLocalNeedsInterface(String),
    /// A firewall rule that does not parse or compile (the message names
    /// the rule's field).
    #[error("{0}")]
    Firewall(String),
    /// `[firewall]` with both or neither of `rules` and `file`.
    #[error(
        "give the rules either inline (`rules`) or in a file (`file`), not both and not neither"
    )]
    FirewallSource,
    /// The firewall rules file could not be read.
    #[error("cannot read {path:?}: {reason}")]
    FirewallFile {
        /// The path as resolved.
        path: String,
        /// What the operating system said.
        reason: String,
    },
    /// A static neighbour given twice.
    #[error("neighbour {addr} on {interface:?} is already defined on line {first_line}")]
    DuplicateNeighbour {
        /// The address.
        addr: String,
        /// The interface.
        interface: String,
        /// Where it was first given.
        first_line: usize,
    },
}

/// Maps byte offsets of a source text to 1-based line and column.
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    /// Byte offset of each line's first byte: a position is found by
    /// binary search, so placing every item of a file costs O(log lines)
    /// each, not a scan from its start.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Self { text, starts }
    }

    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        // Offsets from the parser fall on character boundaries; step back
        // to one if not, rather than panic on slicing.
        let mut o = offset;
        while o > 0 && !self.text.is_char_boundary(o) {
            o -= 1;
        }
        // The last line starting at or before o.
        let line = self.starts.partition_point(|&s| s <= o);
        let line_start = self
            .starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        let column = self.text[line_start..o].chars().count() + 1;
        (line, column)
    }

    pub(crate) fn line(&self, offset: usize) -> usize {
        self.line_col(offset).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_counts_lines_and_columns() {
        let t = "ab\ncd\n\nxé z";
        let li = LineIndex::new(t);
        assert_eq!(li.line_col(0), (1, 1));
        assert_eq!(li.line_col(1), (1, 2));
        assert_eq!(li.line_col(3), (2, 1));
        assert_eq!(li.line_col(7), (4, 1));
        // after the two-byte 'é'
        assert_eq!(li.line_col(10), (4, 3));
        // inside the two-byte char: steps back, never panics
        assert_eq!(li.line_col(9), (4, 2));
        assert_eq!(li.line_col(1000), (4, 5));
    }

    /// The index answers as a scan from the start would, at every offset
    /// of texts with empty lines, trailing newlines and multi-byte chars.
    #[test]
    fn line_index_agrees_with_a_scan() {
        let scan = |t: &str, offset: usize| {
            let mut o = offset.min(t.len());
            while !t.is_char_boundary(o) {
                o -= 1;
            }
            let before = &t[..o];
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            (
                before.matches('\n').count() + 1,
                before[start..].chars().count() + 1,
            )
        };
        for t in [
            "",
            "\n",
            "\n\n",
            "a",
            "a\n",
            "é\nß\n\nxyz\n",
            "[x]\ny = 1\n\n\nz = \"é\"",
        ] {
            let li = LineIndex::new(t);
            for o in 0..=t.len() + 2 {
                assert_eq!(li.line_col(o), scan(t, o), "{t:?} at {o}");
            }
        }
    }

    #[test]
    fn diagnostic_display_names_file_line_field() {
        let d = Diagnostic {
            file: "router.toml".into(),
            line: 12,
            column: 7,
            field: "routes[3].via".into(),
            kind: ErrorKind::GatewayNotConnected("10.9.9.9".into()),
        };
        assert_eq!(
            d.to_string(),
            "router.toml:12: routes[3].via: 10.9.9.9 is not on any connected subnet"
        );
    }
}
