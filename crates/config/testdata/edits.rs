//! Shared by the config crate's property tests and control's build tests:
//! random small edits of the lab config (`lab.toml`), to check that every
//! edit either loads or is refused with a diagnostic, and that every edit
//! that loads builds.

use proptest::prelude::*;

/// The lab config the edits start from.
pub const LAB: &str = include_str!("lab.toml");

/// Edits of the lab config: a byte range replaced with a short string.
pub fn edited_lab() -> impl Strategy<Value = String> {
    (
        0..LAB.len(),
        0..12usize,
        "[\\[\\]\"=,.:/a-z0-9 \n{}#-]{0,12}",
    )
        .prop_map(|(at, len, ins)| {
            let mut b = LAB.as_bytes().to_vec();
            let end = (at + len).min(b.len());
            b.splice(at..end, ins.bytes());
            String::from_utf8_lossy(&b).into_owned()
        })
}
