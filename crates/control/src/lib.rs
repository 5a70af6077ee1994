//! control
#![forbid(unsafe_code)]
