//! The XDP engine: fastfwd's forwarding pipeline as an in-kernel XDP
//! program (`bpf/fastfwd_xdp.c`), over tables compiled from the same
//! router state the user-space pipeline reads.
//!
//! - [`layout`]: the map layout of `bpf/fastfwd_xdp.h`, checked against it;
//! - [`compile`]: one tables snapshot (pipeline [`pipeline::Tables`] and its
//!   poptries) into the content of the maps, an [`Image`];
//! - [`audit`]: the maps read back and compared with a fresh compile
//!   (`fastfwd fib audit`);
//! - [`engine`]: loading, hitless publication of images, attaching,
//!   counters, and `BPF_PROG_TEST_RUN` for replay and tests.
//!
//! What the program does not finish (TTL expiring, IPv4 options, no route,
//! neighbour misses, MTU, firewall rules) it hands to the user-space
//! pipeline unchanged, so the result for every packet is the pipeline's.
//! See docs/xdp-engine.md.

pub mod attach;
pub mod audit;
pub mod compile;
pub mod engine;
pub mod layout;
pub mod replay;

pub use compile::{CompileError, Image};
pub use engine::{
    AttachedPort, Engine, EngineCounters, EngineError, FlowTable, Mode, Outcome, TxFault, TxFaults,
};
pub use layout::FibCapacity;
