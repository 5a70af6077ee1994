//! I/O backends.

pub mod pcap;
