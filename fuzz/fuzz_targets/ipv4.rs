//! Fuzz target: IPv4 packets: header checks, options, checksum, TTL decrement, repr round trip, transport header.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::ipv4(data);
});
