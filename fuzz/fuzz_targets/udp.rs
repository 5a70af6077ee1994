//! Fuzz target: UDP datagrams: header, checksums over both pseudo-headers, repr round trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::udp(data);
});
