//! The fastfwd firewall: an nftables-like rule language, a classifier
//! compiled for nearly flat per-packet cost from one to tens of thousands of
//! rules, optional connection tracking, and per-rule counters.
//!
//! Control side: [`parse_rules`] → [`Firewall::compile`] (off the fast path)
//! → publish in an [`SharedFirewall`]. Fast path: each worker owns a
//! [`FirewallWorker`] and calls [`FirewallWorker::process_batch`] with a
//! batch of [`PacketKey`]s and the current time; it gets one [`Verdict`] per
//! packet. No allocation, locking, syscalls or clock reads per packet.

#![forbid(unsafe_code)]

pub mod benchmark;
pub mod classifier;
pub mod conntrack;
mod firewall;
pub mod key;
mod parse;
pub mod pipeline_acl;
pub mod rulegen;
pub mod rules;
mod worker;

pub use classifier::{ClassifierStats, CompileError, CompileOptions};
pub use conntrack::{Conntrack, ConntrackStats, CtHint, FastFlow};
pub use firewall::{
    BuildStats, ChainSummary, Firewall, FirewallSummary, InterfaceMap, LinearFirewall,
    RuleCounters, RuleInfo, RuleSummary, flatten,
};
pub use key::{Action, ClassifyKey, IFACE_NONE, IfaceId, KeyFacts, PacketKey, Verdict};
pub use parse::{RuleError, parse_rules};
pub use pipeline_acl::PipelineFirewall;
pub use rules::{Chain, CtState, Family, Policy, RuleAction, RuleSet};
pub use worker::{FirewallWorker, SharedFirewall, WorkerStats};
