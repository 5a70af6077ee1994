//! Packet traces (`fastfwd trace`, `fastfwd replay --trace`): the path of
//! chosen packets through the stages, recorded by the worker while it
//! processes them.
//!
//! A [`Tracer`] given to a worker ([`crate::Worker::set_tracer`]) picks the
//! next packets that match its filter, up to its count, and fills one
//! [`TraceRecord`] per packet as each stage decides: where the input stage
//! sent it, the next-hop set the lookup found, the hop chosen, the ACL's
//! decision and rule, the stage that finished it and the verdict. Without
//! a tracer (or once its count is reached) the worker runs the untraced
//! code: one branch per chunk, nothing per packet.

use std::net::IpAddr;

use fib::NextHopId;
use wire::filter::Filter;

use crate::acl::AclAction;
use crate::runtime::Stage;
use crate::tables::{InterfaceId, PortId};
use crate::worker::Verdict;

/// Bytes of each traced frame kept (its headers, as received).
pub const TRACE_HEAD: usize = 96;

/// Most packets one tracer records.
pub const MAX_TRACE: usize = 10_000;

/// The path of one packet through the stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    /// Order among the packets this tracer recorded.
    pub seq: u64,
    /// Receiving port.
    pub port: PortId,
    /// Frame length as received.
    pub len: u16,
    /// The first bytes of the frame as received (`head_len` of them).
    pub head: [u8; TRACE_HEAD],
    pub head_len: u16,
    /// Ingress logical interface (once the input stage found it).
    pub in_if: Option<InterfaceId>,
    /// Input: the destination it sent the packet to the lookup with.
    pub destination: Option<IpAddr>,
    /// Lookup: the next-hop set of the longest matching route (`None`
    /// inside: no route). `None` outside: not looked up.
    pub next_hop_set: Option<Option<NextHopId>>,
    /// Next hop: the hop chosen (egress interface and gateway; no gateway:
    /// on-link).
    pub hop: Option<(InterfaceId, Option<IpAddr>)>,
    /// ACL: its decision and the rule (counter slot) behind it, when the
    /// tables have one.
    pub acl: Option<(AclAction, Option<u32>)>,
    /// The stage that finished the packet.
    pub decided_by: Stage,
    /// What became of it.
    pub verdict: Verdict,
}

impl TraceRecord {
    fn new(seq: u64, port: PortId, frame: &[u8]) -> TraceRecord {
        let n = frame.len().min(TRACE_HEAD);
        let mut head = [0u8; TRACE_HEAD];
        head[..n].copy_from_slice(&frame[..n]);
        TraceRecord {
            seq,
            port,
            len: frame.len().min(usize::from(u16::MAX)) as u16,
            head,
            head_len: n as u16,
            in_if: None,
            destination: None,
            next_hop_set: None,
            hop: None,
            acl: None,
            decided_by: Stage::Input,
            verdict: Verdict::Consumed,
        }
    }

    /// The recorded bytes of the frame.
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }
}

/// What to trace and what was recorded.
#[derive(Debug, Clone)]
pub struct Tracer {
    remaining: usize,
    filter: Option<Filter>,
    records: Vec<TraceRecord>,
    seq: u64,
}

impl Tracer {
    /// Traces the next `count` packets (at most [`MAX_TRACE`]) that match
    /// `filter` (all without one). Allocates their records now.
    pub fn new(count: usize, filter: Option<Filter>) -> Tracer {
        let count = count.min(MAX_TRACE);
        Tracer {
            remaining: count,
            filter,
            records: Vec::with_capacity(count),
            seq: 0,
        }
    }

    /// Packets still to trace.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// The records so far, oldest first, taken out.
    pub fn take(&mut self) -> Vec<TraceRecord> {
        std::mem::take(&mut self.records)
    }

    /// The records so far.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Starts a record for `frame` (received on `port`) if it is traced;
    /// returns its index.
    pub(crate) fn pick(&mut self, port: PortId, frame: &[u8]) -> Option<u16> {
        if self.remaining == 0 || self.filter.as_ref().is_some_and(|f| !f.matches(frame)) {
            return None;
        }
        self.remaining -= 1;
        let i = self.records.len();
        self.records.push(TraceRecord::new(self.seq, port, frame));
        self.seq += 1;
        Some(i as u16)
    }

    pub(crate) fn record(&mut self, at: u16) -> Option<&mut TraceRecord> {
        self.records.get_mut(usize::from(at))
    }
}
