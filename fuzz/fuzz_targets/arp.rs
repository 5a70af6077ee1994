//! Fuzz target: ARP packets: the generic view and the Ethernet / IPv4 repr.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::arp(data);
});
