//! firewall
#![forbid(unsafe_code)]
