/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The lab's XDP programs' maps, defined once: lab_gen.c (the live-frames
 * generator), lab_recv.c (the XDP receiver) and crates/lab/src/xdp.rs (their
 * loader, whose tests parse this file and check every constant and size).
 *
 * Frames carry the stamp of crates/lab/src/gen.rs right after the UDP
 * header: magic, 64-bit sequence number, 64-bit CLOCK_REALTIME send time,
 * all big-endian.
 */
#ifndef LAB_XDP_H
#define LAB_XDP_H

#include <linux/types.h>

#define LAB_STAMP_MAGIC 0xFA57
#define LAB_STAMP_LEN 18
/* Ethernet + IPv4 + UDP, and Ethernet + IPv6 + UDP. */
#define LAB_HDR_V4 42
#define LAB_HDR_V6 62
/* Precomputed flow headers the generator cycles through. */
#define LAB_GEN_MAX_FLOWS (1 << 20)
/* Seconds of per-second counts the generator keeps. */
#define LAB_GEN_SECONDS 4096
/* Sequence numbers the receiver tracks exactly (loss, reorder, duplicates):
 * 2^27, 16 MiB of bits; later numbers count as received, unchecked. */
#define LAB_RECV_SEQ_BITS (1 << 27)
#define LAB_RECV_SEQ_WORDS (LAB_RECV_SEQ_BITS / 64)
/* Latency histogram: 64 linear buckets (0-63 ns), then 32 per power of two
 * from 2^6 to 2^63 (crates/lab/src/recv.rs LatencyHist's indexing). */
#define LAB_LAT_SUB 32
/* The receiver samples the latency of sequence numbers divisible by this. */
#define LAB_LAT_EVERY 8
#define LAB_LAT_BUCKETS (64 + 58 * LAB_LAT_SUB)

/* gen_config[0]: written by the loader before a run. */
struct lab_gen_config {
	__u32 ifindex;      /* where frames go (g0), in the caller's namespace */
	__u32 nflows;       /* entries of gen_flows in use, >= 1 */
	__u32 v6;           /* 1: LAB_HDR_V6-byte headers */
	__u32 stamped;      /* 1: the frame has room for the stamp */
	__u64 clock_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */
	__u64 interval_ps;  /* time between frames, ps; 0: as fast as possible */
	__u64 max_lag_ps;   /* a late generator catches up at most this much */
	__u64 count;        /* stop after this many frames (~0: no limit) */
	__u64 duration_ns;  /* stop this long after the first frame (~0: never) */
	__u64 pad;
};

/* gen_state[0]: the program's running state, read by the loader. */
struct lab_gen_state {
	__u64 next_seq; /* frames redirected so far = next sequence number */
	__u64 idle;     /* runs that sent nothing (pacing, or done) */
	__u64 done;     /* 1 once count or end_ns was reached */
	__u64 last_ns;  /* CLOCK_MONOTONIC of the last frame sent */
	__u64 due_ps;   /* when the next frame is due, ps after start_ns */
	__u64 start_ns; /* CLOCK_MONOTONIC of the first frame (0: none yet) */
};

/* gen_flows[i]: flow i's headers, IPv4 checksum complete, UDP checksum
 * zero, and the UDP checksum's partial sum over the pseudo-header and the
 * UDP header (RFC 768; RFC 8200 section 8.1). */
struct lab_gen_flow {
	__u8 hdr[64];
	__u32 udp_partial;
	__u32 pad;
};

/* recv_config[0]. */
struct lab_recv_config {
	__u64 clock_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */
	__u64 lat_from_ns;  /* latency only for stamps at or after this (realtime) */
};

/* recv_counters, per CPU, summed by the loader. */
struct lab_recv_counters {
	__u64 frames;     /* every frame the program saw */
	__u64 bytes;
	__u64 other;      /* frames without the generator's stamp */
	__u64 received;   /* unique stamped packets */
	__u64 reordered;  /* stamped packets after a higher sequence number */
	__u64 duplicates; /* stamped packets seen before */
	__u64 unchecked;  /* sequence numbers beyond LAB_RECV_SEQ_BITS */
	__u64 lat_samples;
	__u64 lat_min_plus1; /* smallest latency + 1; 0: no sample yet */
	__u64 lat_max;
};

#endif
