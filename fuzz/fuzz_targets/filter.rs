//! Fuzz target: `fastfwd trace` / `capture` filters (`wire::filter`): a
//! filter text (up to the first newline) compiled and evaluated over a
//! frame (the rest), with boolean identities checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wire::exercise::filter(data);
});
