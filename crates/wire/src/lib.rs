//! Packet formats on the wire.
//!
//! Two layers, as in every format module here:
//! - *views* (`Ipv4Packet<&[u8]>` style) are zero-copy wrappers over a byte
//!   slice, checked once by `new_checked`; after that their accessors cannot
//!   panic;
//! - *reprs* (`Ipv4Repr` style) are owned, validated descriptions used to
//!   parse and emit packets in the generator, the control plane and tests.

#![forbid(unsafe_code)]

pub mod cidr;

pub use cidr::{Cidr, Ipv4Cidr, Ipv6Cidr, ParseCidrError};
