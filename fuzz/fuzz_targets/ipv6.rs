//! Fuzz target: IPv6 packets: header, extension-header walk, repr round trip, transport header.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::ipv6(data);
});
