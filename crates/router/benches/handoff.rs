//! What handing a frame to the worker that owns its flow costs
//! (`router::handoff`): 64-byte UDP frames of 4,096 flows, all owned by
//! the other worker, written by one thread (owner hash, ring write) and
//! read by another into a frame batch, against the copy into a batch that
//! every received frame costs anyway, and the owner hash alone. Each is
//! timed `ROUNDS` times over `FRAMES` frames; the medians are printed in
//! ns a frame.
//!
//!     cargo bench -p fastfwd-router --bench handoff
//!
//! On two cores, the two threads of the hand-off take both: run it on a
//! quiet machine.

use netio::FrameBatch;
use router::handoff::mesh;
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 7;
const FRAMES: usize = 4_000_000;
const FLOWS: usize = 4096;

fn udp(sport: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[198, 18, 0, 1, 198, 19, (sport >> 8) as u8, sport as u8]);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&[0, 26, 0, 0]);
    f.resize(64, 0);
    f
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // Flows the other worker (1) owns, as worker 0 sees them.
    let probe = mesh(2).unwrap().unwrap();
    let frames: Vec<Vec<u8>> = (0u16..)
        .map(udp)
        .filter(|f| probe[0].owner_elsewhere(f) == Some(1))
        .take(FLOWS)
        .collect();
    drop(probe);

    let mut copy = Vec::new();
    let mut hash = Vec::new();
    let mut handoff = Vec::new();
    for _ in 0..ROUNDS {
        // The copy into a batch a received frame costs anyway.
        let mut batch = FrameBatch::new();
        let t = Instant::now();
        for i in 0..FRAMES {
            if batch.is_full() {
                batch.clear();
            }
            batch.push(&frames[i % FLOWS]);
        }
        black_box(batch.len());
        copy.push(t.elapsed().as_nanos() as f64 / FRAMES as f64);

        // The owner hash alone.
        let t = Instant::now();
        let mut sum = 0u64;
        for i in 0..FRAMES {
            sum += u64::from(pipeline::flow_owner_hash(&frames[i % FLOWS]).unwrap_or(0));
        }
        black_box(sum);
        hash.push(t.elapsed().as_nanos() as f64 / FRAMES as f64);

        // Owner hash and ring write on one thread, read into a batch on
        // another.
        let mut ends = mesh(2).unwrap().unwrap();
        let mut owner = ends.pop().unwrap();
        let mut sender = ends.pop().unwrap();
        let t = Instant::now();
        let reader = std::thread::spawn(move || {
            let mut batch = FrameBatch::new();
            let mut got = 0usize;
            while got < FRAMES {
                if owner.receive(&mut batch).is_some() {
                    got += batch.len();
                }
            }
            got
        });
        let mut refused = 0u64;
        for i in 0..FRAMES {
            let f = &frames[i % FLOWS];
            let to = sender.owner_elsewhere(f).unwrap();
            while !sender.send(to, 0, 0, f) {
                refused += 1;
                std::hint::spin_loop();
            }
        }
        assert_eq!(reader.join().unwrap(), FRAMES);
        handoff.push(t.elapsed().as_nanos() as f64 / FRAMES as f64);
        black_box(refused);
    }
    let (copy, hash, handoff) = (median(copy), median(hash), median(handoff));
    println!("64-byte frames, {FLOWS} flows, medians of {ROUNDS} rounds of {FRAMES} frames:");
    println!("  copy into a batch (every frame):        {copy:6.1} ns/frame");
    println!("  owner hash:                             {hash:6.1} ns/frame");
    println!(
        "  hand-off (hash, ring, batch; 2 threads): {handoff:6.1} ns/frame, {:.1}x the copy",
        handoff / copy
    );
}
