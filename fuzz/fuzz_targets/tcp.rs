//! Fuzz target: TCP segments: header, options, checksums, repr round trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::tcp(data);
});
