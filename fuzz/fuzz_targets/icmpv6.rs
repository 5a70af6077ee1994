//! Fuzz target: ICMPv6 messages incl. Neighbor Discovery bodies and options, repr round trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::icmpv6(data);
});
