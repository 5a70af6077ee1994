//! pipeline
#![forbid(unsafe_code)]
