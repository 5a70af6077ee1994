//! Fuzz target: arbitrary bytes as frames on an arbitrary port through a
//! router with untagged and VLAN interfaces, IPv4/IPv6 routes, ECMP, a small
//! MTU (fragmentation, ICMP errors) and an unresolved next hop. The first
//! input byte picks the port, the second the headroom and how the rest is
//! cut into a batch of frames. Must never panic; every frame gets exactly
//! one verdict and is counted exactly once.
#![no_main]

use std::sync::OnceLock;

use fib::reference::{ReferenceFib4, ReferenceFib6};
use pipeline::*;

#[path = "shared/lab_router.rs"]
mod lab_router;

type RefTables = Tables<ReferenceFib4, ReferenceFib6>;

fn router() -> &'static RefTables {
    static T: OnceLock<RefTables> = OnceLock::new();
    T.get_or_init(|| {
        let (b, f4, f6) = lab_router::lab_router();
        b.build(f4, f6)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let port = PortId::from(data[0] % 4);
    let headroom = usize::from(data[1] & 0x0f);
    let pieces = usize::from(data[1] >> 4) + 1;
    let body = &data[2..];
    let (mut bufs, lens) = lab_router::cut_frames(body, pieces, headroom);
    let mut frames: Vec<Frame> = bufs
        .iter_mut()
        .zip(&lens)
        .map(|(b, &l)| Frame::new(b, headroom, l))
        .collect();
    let n = frames.len();
    let cfg = WorkerConfig {
        pool_slots: 64,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(cfg);
    w.process(router(), 0, port, &mut frames);
    let out = w.output();
    assert_eq!(out.verdicts().len(), n);
    for (_, idx) in out.tx_batches() {
        for &i in idx {
            assert!(matches!(
                out.verdicts()[usize::from(i)],
                Verdict::Forward { .. }
            ));
        }
    }
    let _ = out.generated().count();
    let c = w.counters();
    assert_eq!(c.rx_frames as usize, n);
    let fragmented = out
        .verdicts()
        .iter()
        .filter(|v| **v == Verdict::Consumed)
        .count() as u64;
    let forwarded = c.forwarded_ipv4 + c.forwarded_ipv6;
    assert_eq!(c.total_drops() + c.total_punts() + forwarded, n as u64);
    assert!(fragmented <= c.forwarded_ipv4);
});
