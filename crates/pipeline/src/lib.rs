//! The fastfwd forwarding pipeline: a pure library. A [`Worker`] takes a
//! batch of frames received on one port, the current [`Tables`] snapshot
//! and the time, and returns a [`Verdict`] per frame plus per-port
//! transmit lists, punts for the host, neighbour misses, generated packets
//! (ICMP errors, IPv4 fragments) and per-worker [`Counters`].
//!
//! No system calls, no clock reads, no allocation, locking or logging per
//! packet: every I/O backend (AF_XDP, AF_PACKET, pcap replay) and every
//! test drives the same [`Worker::process`].
//!
//! # Driving it from a backend
//!
//! ```
//! # use pipeline::*;
//! # use fib::reference::{ReferenceFib4, ReferenceFib6};
//! # let tables = TablesBuilder::new().build(ReferenceFib4::new(), ReferenceFib6::new());
//! let mut worker = Worker::new(WorkerConfig::default());
//! // Received frames, each inside a buffer with some headroom.
//! let mut bufs = vec![vec![0u8; 2048]; 4];
//! let mut frames: Vec<Frame> = bufs.iter_mut().map(|b| Frame::new(b, HEADROOM, 60)).collect();
//! let now_ns = 0; // the backend's monotonic clock
//! let out = worker.process(&tables, now_ns, 0, &mut frames);
//! for (port, indices) in out.tx_batches() {
//!     for &i in indices {
//!         let _tx = frames[usize::from(i)].data(); // send on `port`
//!     }
//! }
//! for &i in out.punted() { let _to_host = frames[usize::from(i)].data(); }
//! for (port, _iface, _bytes) in out.generated() { /* copy out, send on port */ }
//! ```
//!
//! The frames are rewritten in place (an AF_XDP backend transmits the same
//! UMEM frame it received); see [`Frame`] for the window semantics.

#![forbid(unsafe_code)]

pub mod acl;
pub mod counters;
pub mod frame;
pub mod owner;
pub mod policy;
pub mod runtime;
mod stages;
pub mod tables;
pub mod trace;
pub mod worker;

pub use acl::{AcceptAll, Acl, AclAction, FlowKey};
pub use counters::{Counters, DropReason, IcmpSuppressed, InterfaceCounters, PuntReason};
pub use frame::{BATCH_SLOT_STRIDE, Frame, HEADROOM};
pub use owner::{flow_owner_hash, owner_of};
pub use policy::{FamilyPolicy, FastPath, InputSelector, Policy, PolicyRule, RuleAction, RuleKey};
pub use runtime::{RuntimeStats, Stage, StageClock, StageCounters};
pub use tables::{
    Datapath, DatapathHop, DatapathInterface, DatapathPort, Discard, Interface, InterfaceId,
    Ipv4IfAddr, Ipv6IfAddr, MAX_ECMP, MAX_TARGETS, MacAddr, NextHop, NextHopId, PortId,
    RouteTarget, TableError, Tables, TablesBuilder, Vlan,
};
pub use trace::{TraceRecord, Tracer};
pub use worker::{BatchOutput, CHUNK, Verdict, Worker, WorkerConfig};
