//! Fuzz target: Ethernet II frames with zero, one or two VLAN tags, and the ARP / IPv4 / IPv6 payload they carry.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::ethernet(data);
});
