//! The forwarding lab.
//!
//! Methods (pure, no I/O): [`ministat`], [`equilibrium`], [`rfc2544`],
//! [`plot`], [`report`]. Traffic and topology (namespaces, sockets):
//! [`topo`], [`flows`], [`generator`], [`recv`], [`udp_sink`], [`bench`](mod@bench),
//! [`churn`] (a full table withdrawn and reinstalled over BGP under load); their
//! system calls are `netio::sys::lab`'s (all of fastfwd's `unsafe` is in
//! `netio::sys`). The live-frames generator and the XDP
//! receiver, BPF programs under `bpf/`, are in [`xdp`].

pub mod equilibrium;
pub mod ministat;
pub mod plot;
pub mod probe;
pub mod report;
pub mod rfc2544;

pub mod bench;
pub mod churn;
pub mod flows;
pub mod generator;
pub mod recv;
pub mod restart;
pub mod topo;
pub mod udp_sink;
pub mod xdp;

use netio::sys::lab as sys;
