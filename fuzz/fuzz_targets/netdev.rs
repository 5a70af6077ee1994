//! Fuzz target: what the kernel says about XDP transmit, decoded. The
//! bytes are one generic-netlink datagram as `NetdevLink` reads it
//! (`control::netdev`): `parse_family_reply` and `parse_dev_reply` must
//! never panic, and a device answer must be a plain bit set. The same
//! bytes, as text, are a tracepoint format file for
//! `xdp_engine::layout::check_tracepoint_format`, which must never panic
//! and must accept a file only if every field it names is there at its
//! offset.
#![no_main]

use control::netdev::{Reply, parse_dev_reply, parse_family_reply};
use xdp_engine::layout::{TP_DEVMAP_XMIT_FIELDS, TP_REDIRECT_ERR_FIELDS, check_tracepoint_format};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let seq = data
        .get(8..12)
        .map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap()));
    let family = data
        .get(4..6)
        .map_or(0, |b| u16::from_ne_bytes(b.try_into().unwrap()));
    let _ = parse_family_reply(data, seq);
    if let Ok(Reply::Answer(f)) = parse_dev_reply(data, family, seq) {
        let _ = f.takes_redirects();
    }
    let text = String::from_utf8_lossy(data);
    for fields in [&TP_REDIRECT_ERR_FIELDS[..], &TP_DEVMAP_XMIT_FIELDS[..]] {
        if check_tracepoint_format(&text, fields).is_ok() {
            for (name, offset) in fields {
                let at = |l: &str| {
                    l.split("offset:").skip(1).any(|rest| {
                        let digits: String =
                            rest.chars().take_while(char::is_ascii_digit).collect();
                        digits.parse::<usize>() == Ok(*offset)
                    })
                };
                assert!(
                    text.lines().any(|l| l.contains(name) && at(l)),
                    "accepted without {name} at {offset}"
                );
            }
        }
    }
});
