//! Both engines over a batch of frames, with the same results shape: what
//! `fastfwd replay` writes and what the differential tests compare.
//!
//! - [`run_user`]: the user-space pipeline alone.
//! - [`run_xdp`]: each frame through the XDP program (`BPF_PROG_TEST_RUN`);
//!   the exceptions, in their order, through the user-space pipeline as
//!   one batch with the same `now` and the connection-tracking hints the
//!   program left, as `fastfwd run` hands them over; then the flows the
//!   pipeline found established go to the program's flow table, as the
//!   worker loop hands them over after each batch.
//!
//! Both give a verdict per frame in input order, then the generated
//! packets (ICMP errors, fragments, resets) in the order the pipeline made
//! them. Only exceptions make generated packets, so the two orders agree.

use crate::engine::{Engine, EngineError, Outcome};
use fib::Lookup;
use pipeline::{Acl, Counters, DropReason, Frame, PortId, PuntReason, Tables, Verdict, Worker};

/// Bytes kept free before each frame (egress VLAN tags).
const HEADROOM: usize = pipeline::HEADROOM;
/// Bytes kept free after each frame.
const TAILROOM: usize = 64;

/// What became of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameResult {
    /// Transmitted on this port as these bytes.
    Forward(PortId, Vec<u8>),
    /// For the host (unchanged).
    Punt(PuntReason),
    /// Dropped.
    Drop(DropReason),
    /// Replaced by generated packets (fragments).
    Consumed,
}

/// The results of one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchResult {
    /// One per input frame, in order.
    pub frames: Vec<FrameResult>,
    /// Generated packets: (egress port, bytes).
    pub generated: Vec<(PortId, Vec<u8>)>,
}

/// Runs the pipeline over `frames` (received on `port` at `now`).
pub fn run_user<F4, F6, A>(
    worker: &mut Worker,
    tables: &Tables<F4, F6, A>,
    now: u64,
    port: PortId,
    frames: &[&[u8]],
) -> BatchResult
where
    F4: Lookup<u32>,
    F6: Lookup<u128>,
    A: Acl,
{
    run_user_hinted(worker, tables, now, port, frames, &[])
}

/// [`run_user`] with each frame's connection-tracking hint (missing ones: 0).
pub fn run_user_hinted<F4, F6, A>(
    worker: &mut Worker,
    tables: &Tables<F4, F6, A>,
    now: u64,
    port: PortId,
    frames: &[&[u8]],
    ct_hints: &[u8],
) -> BatchResult
where
    F4: Lookup<u32>,
    F6: Lookup<u128>,
    A: Acl,
{
    let mut bufs: Vec<Vec<u8>> = frames
        .iter()
        .map(|d| {
            let mut b = vec![0u8; HEADROOM + d.len() + TAILROOM];
            b[HEADROOM..HEADROOM + d.len()].copy_from_slice(d);
            b
        })
        .collect();
    let mut fr: Vec<Frame<'_>> = bufs
        .iter_mut()
        .zip(frames)
        .enumerate()
        .map(|(i, (b, d))| {
            Frame::new(b, HEADROOM, d.len()).with_ct_hint(ct_hints.get(i).copied().unwrap_or(0))
        })
        .collect();
    let out = worker.process(tables, now, port, &mut fr);
    let mut result = BatchResult::default();
    for (i, v) in out.verdicts().iter().enumerate() {
        result.frames.push(match *v {
            Verdict::Forward { port, .. } => FrameResult::Forward(port, fr[i].data().to_vec()),
            Verdict::Punt(r) => FrameResult::Punt(r),
            Verdict::Drop(r) => FrameResult::Drop(r),
            Verdict::Consumed => FrameResult::Consumed,
        });
    }
    // Past the worker's batch capacity: counted as batch_overflow.
    while result.frames.len() < frames.len() {
        result
            .frames
            .push(FrameResult::Drop(DropReason::BatchOverflow));
    }
    result.generated = out.generated().map(|(p, _, b)| (p, b.to_vec())).collect();
    result
}

/// Runs the XDP program over `frames`, the exceptions through the
/// pipeline. The engine must hold the tables compiled from `tables`.
pub fn run_xdp<F4, F6, A>(
    engine: &mut Engine,
    worker: &mut Worker,
    tables: &Tables<F4, F6, A>,
    now: u64,
    port: PortId,
    frames: &[&[u8]],
) -> Result<BatchResult, EngineError>
where
    F4: Lookup<u32>,
    F6: Lookup<u128>,
    A: Acl,
{
    let mut result = BatchResult::default();
    let mut exceptions: Vec<&[u8]> = Vec::new();
    let mut hints = Vec::new();
    let mut slots = Vec::new();
    engine.set_test_clock(now)?;
    for (i, f) in frames.iter().enumerate() {
        // The kernel runs no program over less than an Ethernet header:
        // such a frame is the pipeline's (which drops it as too short).
        if f.len() < crate::engine::MIN_TEST_FRAME {
            slots.push(i);
            exceptions.push(f);
            hints.push(0);
            result.frames.push(FrameResult::Consumed);
            continue;
        }
        result.frames.push(match engine.test_run(port, f)? {
            Outcome::Forward { port, frame } => FrameResult::Forward(port, frame),
            Outcome::Drop(r) => FrameResult::Drop(r),
            Outcome::Punt(r) => FrameResult::Punt(r),
            Outcome::Exception { ct_hint, .. } => {
                slots.push(i);
                exceptions.push(f);
                hints.push(ct_hint);
                FrameResult::Consumed
            }
        });
    }
    if !exceptions.is_empty() {
        let sub = run_user_hinted(worker, tables, now, port, &exceptions, &hints);
        for (slot, r) in slots.into_iter().zip(sub.frames) {
            result.frames[slot] = r;
        }
        result.generated = sub.generated;
        if let Some(fw) = firewall::pipeline_acl::worker_state(worker) {
            let epoch = fw.epoch();
            let mut table = engine.flow_table()?;
            fw.hand_over(now, |f| table.give(f, epoch));
        }
    }
    Ok(result)
}

/// The counters of the XDP engine's replay: what the program finished
/// plus what the pipeline did with the rest.
pub fn xdp_counters(
    engine: &Engine,
    worker: &Worker,
    interfaces: usize,
) -> Result<Counters, EngineError> {
    let mut c = engine.counters(interfaces)?.counters;
    c.add(worker.counters());
    Ok(c)
}
