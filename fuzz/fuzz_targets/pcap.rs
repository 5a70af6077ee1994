//! Fuzz target: the pcap / pcapng reader behind `fastfwd replay` on arbitrary
//! file contents. Must return a typed error, never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = netio::pcap::open(data) {
        let _ = reader.read_all();
    }
});
