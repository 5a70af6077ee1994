//! Reading a BPF program's C header, to check the Rust side's copy of its
//! layout against it (Cilium-style: one header is the definition, tests
//! fail when the two drift apart). Handles what those headers use:
//! `#define NAME VALUE` and structs of `__u8`..`__u64` members, arrays and
//! named nested structs, with C's natural alignment.

use std::collections::HashMap;

/// A C header's text.
#[derive(Debug, Clone, Copy)]
pub struct CHeader<'a> {
    text: &'a str,
}

impl<'a> CHeader<'a> {
    /// Reads `text`.
    pub fn new(text: &'a str) -> CHeader<'a> {
        CHeader { text }
    }

    /// The text of `#define NAME ...` (everything after the name, spaces
    /// collapsed), if defined.
    pub fn define(&self, name: &str) -> Option<String> {
        self.text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(name))
                .then(|| w.collect::<Vec<_>>().join(" "))
        })
    }

    /// Every `#define` whose value is a plain number (decimal or hex, an
    /// optional `u` suffix).
    pub fn numeric_defines(&self) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for line in self.text.lines() {
            let mut w = line.split_whitespace();
            if w.next() != Some("#define") {
                continue;
            }
            let (Some(name), Some(value)) = (w.next(), w.next()) else {
                continue;
            };
            let v = value.trim_end_matches('u');
            let parsed = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            };
            if let Some(n) = parsed {
                out.insert(name.to_string(), n);
            }
        }
        out
    }

    /// The size of `struct NAME` with C's alignment rules. Members are
    /// `__u8`..`__u64`, `__s8`..`__s64` or `struct OTHER` with OTHER's
    /// (size, alignment) in `nested`; array lengths are numbers or numeric
    /// `#define`s.
    ///
    /// Panics (this is for tests) on a missing struct or an unknown type.
    pub fn struct_size(&self, name: &str, nested: &[(&str, usize, usize)]) -> usize {
        self.layout(name, nested).1
    }

    /// The offset of `member` in `struct NAME` (as [`CHeader::struct_size`]
    /// lays it out), `None` when it has no such member.
    pub fn field_offset(
        &self,
        name: &str,
        member: &str,
        nested: &[(&str, usize, usize)],
    ) -> Option<usize> {
        self.layout(name, nested)
            .0
            .into_iter()
            .find_map(|(m, off)| (m == member).then_some(off))
    }

    /// Each member's (name, offset), and the struct's size.
    fn layout(&self, name: &str, nested: &[(&str, usize, usize)]) -> (Vec<(String, usize)>, usize) {
        let defines = self.numeric_defines();
        let start = self
            .text
            .find(&format!("struct {name} {{"))
            .unwrap_or_else(|| panic!("struct {name} not in the header"));
        let body = &self.text[start..];
        let body = &body[body.find('{').map_or(0, |i| i + 1)..body.find("};").unwrap_or(0)];
        let (mut size, mut align) = (0usize, 1usize);
        let mut members = Vec::new();
        for line in body.lines() {
            let line = line.split("/*").next().unwrap_or("").trim();
            let Some(decl) = line.strip_suffix(';') else {
                continue;
            };
            let mut w = decl.split_whitespace();
            let (Some(first), Some(second)) = (w.next(), w.next()) else {
                continue;
            };
            let (ty, member) = if first == "struct" {
                (second, w.next().unwrap_or(""))
            } else {
                (first, second)
            };
            let (elem, a) = match ty {
                "__u8" | "__s8" => (1, 1),
                "__u16" | "__s16" => (2, 2),
                "__u32" | "__s32" => (4, 4),
                "__u64" | "__s64" => (8, 8),
                t => nested
                    .iter()
                    .find(|(n, ..)| *n == t)
                    .map(|&(_, s, a)| (s, a))
                    .unwrap_or_else(|| panic!("type {t} in struct {name}")),
            };
            let (member, count) = match member.find('[') {
                Some(i) => {
                    let n = member[i + 1..].trim_end_matches(']');
                    let count = n
                        .parse::<usize>()
                        .ok()
                        .or_else(|| defines.get(n).map(|&v| v as usize))
                        .unwrap_or_else(|| panic!("array size {n} in struct {name}"));
                    (&member[..i], count)
                }
                None => (member, 1),
            };
            let offset = size.div_ceil(a) * a;
            members.push((member.to_string(), offset));
            size = offset + elem * count;
            align = align.max(a);
        }
        (members, size.div_ceil(align) * align)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "#define A 12\n#define B 0x1fu\n#define C (1 << 4)\n\
        struct inner {\n  __u16 x;\n  __u8 y;\n};\n\
        struct outer {\n  __u8 tag; /* first */\n  __u64 wide;\n  __u32 list[B];\n  struct inner in[2];\n  __u8 pad[A];\n};\n";

    #[test]
    fn reads_defines_and_lays_out_structs_as_c_does() {
        let h = CHeader::new(H);
        assert_eq!(h.define("C").as_deref(), Some("(1 << 4)"));
        assert_eq!(h.define("D"), None);
        let d = h.numeric_defines();
        assert_eq!((d["A"], d["B"]), (12, 31));
        assert!(!d.contains_key("C"));
        assert_eq!(h.struct_size("inner", &[]), 4);
        // tag 1, pad to 8, wide 8 (16), list 31*4 = 124 (140), in 2*4 (148),
        // pad 12 (160), aligned to 8.
        assert_eq!(h.struct_size("outer", &[("inner", 4, 2)]), 160);
        let off = |m| h.field_offset("outer", m, &[("inner", 4, 2)]);
        assert_eq!(
            (off("tag"), off("wide"), off("list")),
            (Some(0), Some(8), Some(16))
        );
        assert_eq!(
            (off("in"), off("pad"), off("none")),
            (Some(140), Some(148), None)
        );
    }
}
