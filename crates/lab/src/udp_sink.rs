//! udp_sink
