//! The forwarding lab.
