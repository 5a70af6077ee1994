//! Fuzz target: the TOML configuration parser on arbitrary text. A config
//! that parses must also build the router's tables (the daemon's builder,
//! over the reference FIB).
#![no_main]

use fib::reference::{ReferenceFib4, ReferenceFib6};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(cfg) = config::Config::parse("fuzz.toml", &text) {
        let state = rib::RouterState::new(cfg);
        if let Err(e) = state.build_over(ReferenceFib4::new(), ReferenceFib6::new()) {
            panic!("config parsed but did not build: {e}");
        }
    }
});
