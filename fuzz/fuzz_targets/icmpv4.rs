//! Fuzz target: ICMPv4 messages: view accessors and repr round trip (echo and errors).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::icmpv4(data);
});
