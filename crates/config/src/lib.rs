//! config
#![forbid(unsafe_code)]
