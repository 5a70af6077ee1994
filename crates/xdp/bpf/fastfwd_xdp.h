/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The XDP engine's map layout: keys, values and entry encodings, defined
 * once. The C program includes this file; the Rust loader
 * (crates/xdp/src/layout.rs) mirrors it and a test parses this file to
 * check every constant and size against the Rust side.
 *
 * Tables that change together (interfaces, ports, next-hop sets, next hops
 * and both FIBs) live twice, in two halves of each array map: half 0 holds
 * indices [0, HALF) and half 1 [HALF, 2*HALF). `ff_config.active` names
 * the half the program reads; the loader fills the other half, flips
 * `active` with one store, and waits for an RCU grace period (every
 * program run that could still read the old half has ended) before
 * writing into it again. A packet reads `active` once, at the program's
 * entry (the global functions get the half in their packed argument), so
 * it sees one complete generation of the tables.
 */
#ifndef FASTFWD_XDP_H
#define FASTFWD_XDP_H

/* Sizes. */
#define FF_MAX_PORTS 64
#define FF_MAX_QUEUES 64
/* Interfaces that receive for a port: the ports and their bonds' members. */
#define FF_MAX_RECEIVERS 256
#define FF_MAX_IFACES 256
#define FF_MAX_ADJ 65536
#define FF_MAX_HOPS 65536
#define FF_MAX_NEIGHBOURS 65536
#define FF_MAX_LOCAL 4096
#define FF_MAX_VLANS 4096

/* The FIBs: fastfwd's poptrie (crates/fib/src/poptrie.rs) as it is. */
#define FF_NODE_FLAG 0x80000000u
/* With FF_NODE_FLAG: a leaf chunk, a chunk that is one node without
 * children, at this index of the leaves map: its leafvec in
 * FF_LEAF_CHUNK_HEADER leaves of 16 bits each (least significant first),
 * then its runs. */
#define FF_LEAF_CHUNK_FLAG 0x40000000u
#define FF_LEAF_CHUNK_HEADER 4
#define FF_NO_ROUTE 0x7fffffffu
#define FF_STRIDE 6
#define FF_DIRECT4 18
#define FF_DIRECT6 18
/* Top-level entries are stored two per 8-byte element (entry 2k in the low
 * half of element k, 2k+1 in the high half); leaves too. */
#define FF_TOP4_PAIRS (1u << (FF_DIRECT4 - 1))
#define FF_TOP6_PAIRS (1u << (FF_DIRECT6 - 1))
/* Deepest node walk: 18 + 3*6 >= 32; 18 + 19*6 >= 128. */
#define FF_LEVELS4 3
#define FF_LEVELS6 19

/* ff_config.flags */
/* Host traffic first, as the kernel should see it (run mode): link-layer
 * broadcast/multicast, non-IP, multicast and link-local destinations and
 * the router's own addresses go to the kernel before any check. */
#define FF_CFG_HOST_FIRST 1u
/* Every transit packet goes to the user-space pipeline (a firewall the
 * program does not evaluate, or tables larger than the maps). */
#define FF_CFG_EXCEPT_ALL 2u
/* Replay and tests (BPF_PROG_TEST_RUN): record each outcome in `test_out`
 * and return XDP_TX for a forwarded frame instead of redirecting it, and
 * XDP_PASS for an exception. */
#define FF_CFG_TEST 4u
/* The firewall's forward chain is evaluated in the program (fw_meta). */
#define FF_CFG_FIREWALL 8u
/* The rules use connection tracking: the program keeps the established
 * flows the pipeline hands it in `ct_flows` and tells the pipeline, with
 * every transit packet it hands over, what it knows of the packet's flow
 * (struct ff_meta). */
#define FF_CFG_CONNTRACK 16u
/* No daemon serves the exception sockets (it exited with `--on-exit
 * kernel`): a frame the program would hand over, finding no socket, goes
 * to the kernel (XDP_PASS) instead of being dropped. */
#define FF_CFG_EXCEPTIONS_TO_KERNEL 32u

struct ff_config {
	__u32 active;      /* 0 or 1: the half of the tables in use */
	__u32 flags;
	__u32 nodes4_half; /* entries per half of fib4_nodes */
	__u32 leaves4_half; /* leaf pairs per half of fib4_leaves */
	__u32 nodes6_half;
	__u32 leaves6_half;
	__u32 fw_data_half; /* fw_data pairs per half */
	__u32 ct_epoch;    /* ct_flows entries of another epoch are stale */
	__u64 generation;  /* tables generation the active half holds */
	/* The kernel's ids of the maps `tx_ports` and `xsks`, by which the
	 * tracepoint programs know the failed redirects that were this
	 * program's (0: not counted). */
	__u32 tx_ports_id;
	__u32 xsks_id;
};

/* A poptrie node: 6 address bits. */
struct ff_node {
	__u64 children;
	__u64 leafvec;
	__u32 child_base;
	__u32 leaf_base;
};

/* Ports (kernel interfaces), by port id. */
#define FF_NO_IFACE 0xffffu
struct ff_port {
	__u16 untagged;  /* logical interface of untagged frames, or FF_NO_IFACE */
	__u16 has_vlans; /* 1: tagged frames are looked up in `vlans` */
	__u32 ifindex;
};

/* Logical interfaces with 802.1Q tags, keyed by (port, outer, inner) and
 * the half of the tables they belong to. The hash maps carry the half in
 * their keys, so each half has its own entries. */
struct ff_vlan_key {
	__u16 port;
	__u16 outer; /* first non-zero VLAN id */
	__u16 inner; /* 0: single tag */
	__u16 set;
};

/* Logical interfaces, by interface id. */
struct ff_iface {
	__u8 mac[6];
	__u16 mtu;
	__u16 port;
	/* Egress L2 header after the destination MAC: source MAC and tags
	 * (6, 10 or 14 bytes); the EtherType follows. */
	__u8 tmpl_len;
	__u8 flags;      /* FF_IFACE_* */
	__u8 tmpl[14];
	__u16 pad2;
};

/* ff_iface.flags */
/* The interface's port takes no frames redirected from XDP (a driver
 * without ndo_xdp_xmit, no XDP transmit rings, a veth whose peer has no
 * NAPI): packets forwarded to it go to the user-space pipeline, which
 * transmits them through its socket on the port. */
#define FF_IFACE_PUNT_TX 1
/* A policy rule before main's selects packets received on this interface
 * (`iif`, or the interface's VRF), IPv4 / IPv6: see ff_rule_filter. */
#define FF_IFACE_RULES4 2
#define FF_IFACE_RULES6 4

/* Next-hop sets, by next-hop id: hops [start, start+count) in `hops`;
 * count 0 is a discarding route whose code is `start`. */
#define FF_DISCARD_BLACKHOLE 1
#define FF_DISCARD_UNREACHABLE 2
#define FF_DISCARD_PROHIBIT 3
#define FF_DISCARD_THROW 4
struct ff_adj {
	__u32 start;
	__u32 count;
};

/* ff_hop.flags */
#define FF_HOP_GATEWAY 1 /* via a gateway (else the destination is on-link) */
#define FF_HOP_MAC 2     /* the gateway's MAC is known */
struct ff_hop {
	__u16 iface;
	__u8 flags;
	__u8 pad;
	__u8 mac[6];
	__u16 pad2;
};

/* Neighbours of on-link destinations (IPv4 as ::ffff:a.b.c.d). */
struct ff_neigh_key {
	__u16 iface;
	__u16 set;
	__u8 addr[16];
};
struct ff_mac {
	__u8 mac[6];
	__u16 pad;
};

/* Local addresses (network byte order): what a packet to them is. */
#define FF_LOCAL_UNICAST 1
#define FF_LOCAL_BROADCAST 2
struct ff_local4_key {
	__u32 addr;
	__u32 set;
};
struct ff_local6_key {
	__u8 addr[16];
	__u32 set;
};

/* Drop and punt reasons: the pipeline's DropReason / PuntReason indices
 * (crates/pipeline/src/counters.rs). Only those the program decides. */
#define FF_DROP_FRAME_TOO_SHORT 0
#define FF_DROP_UNKNOWN_INTERFACE 1
#define FF_DROP_NOT_OUR_MAC 2
#define FF_DROP_UNKNOWN_ETHERTYPE 3
#define FF_DROP_ARP_MALFORMED 4
#define FF_DROP_ARP_NOT_FOR_US 5
#define FF_DROP_IPV4_TRUNCATED 6
#define FF_DROP_IPV4_BAD_VERSION 7
#define FF_DROP_IPV4_BAD_HEADER_LENGTH 8
#define FF_DROP_IPV4_BAD_TOTAL_LENGTH 9
#define FF_DROP_IPV4_BAD_CHECKSUM 10
#define FF_DROP_IPV4_MARTIAN_SOURCE 11
#define FF_DROP_IPV4_MARTIAN_DESTINATION 12
#define FF_DROP_IPV6_TRUNCATED 13
#define FF_DROP_IPV6_BAD_VERSION 14
#define FF_DROP_IPV6_MARTIAN_SOURCE 15
#define FF_DROP_IPV6_MARTIAN_DESTINATION 16
#define FF_DROP_IPV6_LINK_LOCAL 17
#define FF_DROP_MULTICAST_NOT_ROUTED 18
#define FF_DROP_L2_BROADCAST_NOT_FORWARDED 19
#define FF_DROP_ACL_DENIED 22
#define FF_DROP_ROUTE_BLACKHOLE 24
#define FF_DROP_BAD_NEXT_HOP 27
#define FF_DROP_SLOTS 48

#define FF_PUNT_LOCAL_ADDRESS 0
#define FF_PUNT_BROADCAST 1
#define FF_PUNT_MULTICAST 2
#define FF_PUNT_ARP 3
#define FF_PUNT_SLOTS 8

/* Why a packet went to the user-space pipeline. */
#define FF_EXC_TTL 0           /* TTL / hop limit expiring: ICMP time exceeded */
#define FF_EXC_OPTIONS 1       /* IPv4 options: checked by the pipeline */
#define FF_EXC_NO_ROUTE 2      /* no route, unreachable, prohibit, throw: ICMP */
#define FF_EXC_NEIGHBOUR 3     /* next hop's MAC unknown */
#define FF_EXC_MTU 4           /* larger than the egress MTU */
#define FF_EXC_ALL 5           /* FF_CFG_EXCEPT_ALL (firewall rules) */
#define FF_EXC_TABLE 6         /* an index outside the maps */
#define FF_EXC_REJECT 7        /* a firewall reject: ICMP error or TCP reset */
#define FF_EXC_CONNTRACK 8     /* a flow ct_flows does not hold (yet) */
#define FF_EXC_EGRESS 9        /* the egress port takes no XDP frames (FF_IFACE_PUNT_TX) */
#define FF_EXC_RULES 10        /* a policy rule before main's may select it */
#define FF_EXC_SLOTS 16

/* Policy rules (`ip rule`). The program holds the main table only. Where
 * the rules before the first rule that matches every packet (a plain
 * lookup of main) select by source, destination and input interface alone,
 * without `not`, a packet none of them can select is routed by main here,
 * and every other packet goes to the pipeline (FF_EXC_RULES), which holds
 * every table; main's misses and throw routes go there already
 * (FF_EXC_NO_ROUTE). Per half and family, one ff_rule_filter for the
 * rules' source prefixes and one for their destination prefixes
 * (`rule_filters`, index (half * 2 + v6) * 2 + dst); the interfaces are
 * flagged in ff_iface (FF_IFACE_RULES4/6). A filter's signature bitmap
 * has a bit for every 16-bit signature of the addresses its prefixes hold
 * (IPv4: the address's first 16 bits; IPv6: its first 16 bits XOR the
 * next 16); a packet whose signature bit is clear is in none of them. Else
 * each of its prefix lengths is tried in `rule_prefixes` (the address
 * masked to the length). Families whose rules are beyond such a filter
 * have every transit packet handed over (FF_CFG_EXCEPT_ALL). */
#define FF_RULE_LENS 16
#define FF_RULE_SIG_WORDS 1024 /* 65,536 bits */
#define FF_MAX_RULE_PREFIXES 4096 /* per half, both families */
struct ff_rule_filter {
	__u32 enabled;            /* 1: the family's rules select by this field */
	__u32 n_lens;             /* lengths in `lens` */
	__u8 lens[FF_RULE_LENS];  /* the prefixes' lengths, each once */
	__u64 sig[FF_RULE_SIG_WORDS];
};
/* A prefix of a filter: the address masked to `len` bits, network order
 * (IPv4 in the first 4 bytes). */
struct ff_rule_key {
	__u8 addr[16];
	__u16 set;
	__u8 kind; /* v6 * 2 + dst */
	__u8 len;
};

/* Connection tracking's fast path (FF_CFG_CONNTRACK): the established
 * flows of the pipeline's connection tables (crates/firewall/src/
 * conntrack.rs), keyed as there: the endpoints in canonical order
 * (address, then port; IPv4 addresses in the low 32 bits, ICMP with its
 * identifier as both ports). The pipeline adds a flow once it finds it
 * established on a packet the program did not know; the program advances
 * it from then on (refreshes it, closes it on FIN or RST) with the same
 * timeouts, ignores and deletes it once expired or of an older epoch, and
 * the daemon sweeps what nobody looks up any more. A plain hash, not an
 * LRU: a full table refuses new flows (they stay with the pipeline) and
 * never forgets a live one. */
#define FF_CT_MAX 65536
#define FF_CT_ESTABLISHED 2 /* ff_ct_value.phase */
#define FF_CT_CLOSING 3
/* The classifier's `ct` field value of an established packet (CtState). */
#define FF_CT_STATE_ESTABLISHED 2
struct ff_ct_key {
	__u64 a_hi;
	__u64 a_lo;
	__u64 b_hi;
	__u64 b_lo;
	__u16 pa;
	__u16 pb;
	__u8 proto;
	__u8 v6;
	__u16 pad;
};
struct ff_ct_value {
	__u64 expires;         /* ns, CLOCK_MONOTONIC */
	__u64 timeout_open;    /* ns after a packet while established */
	__u64 timeout_closing; /* ns after a packet once closing (TCP) */
	__u32 epoch;
	__u8 phase;
	__u8 orig_a;           /* the originator is endpoint a */
	__u16 pad;
};

/* What the program puts in front of every frame it hands over (8 bytes
 * the pipeline strips): what it knew of the packet's flow (the firewall's
 * CtHint). */
#define FF_META_MAGIC 0xfa57c7e1u
#define FF_CT_HINT_NONE 0        /* not looked up: the pipeline decides */
#define FF_CT_HINT_ABSENT 1      /* no live entry: the pipeline decides */
#define FF_CT_HINT_ESTABLISHED 2 /* a live entry, advanced by this packet */
struct ff_meta {
	__u32 magic;
	__u32 ct_hint;
};

/* The firewall's forward chain: fastfwd's compiled classifier
 * (crates/firewall/src/classifier.rs, recursive flow classification) as its
 * tables are. Per packet and family: each field's class (a direct table or
 * a range trie), two cross-product chains folding the classes in through
 * `remap`, then `last` gives the outcome: the first terminal rule and the
 * counting rules matched before it. All tables live in `fw_data` (32-bit
 * entries, two per element, offsets in entries); `fw_meta` describes them
 * per half and family. */
#define FF_FW_FIELDS 9
#define FF_FW_MAX_STEPS 7
#define FF_FW_MAX_COUNTED 8
#define FF_FW_OUTCOME_WORDS (2 + FF_FW_MAX_COUNTED)
#define FF_FW_MAX_SLOTS 16384
#define FF_FW_NO_RULE 0xffffffffu
#define FF_FW_TRIE_LEAF 0x80000000u
#define FF_FW_TRIE_LEVELS 16

/* ff_fw_field.kind */
#define FF_FW_CONST 0
#define FF_FW_DIRECT 1
#define FF_FW_TRIE 2

/* fw_actions values, per counter slot */
#define FF_FW_ACCEPT 0
#define FF_FW_DROP 1
#define FF_FW_REJECT 2
#define FF_FW_COUNT 3

struct ff_fw_field {
	__u32 kind;
	__u32 off;         /* the direct table or the trie's nodes */
	__u32 len;
	__u32 root_stride; /* tries: 8 or 16 */
	__u32 remap_off;   /* global class -> group class */
	__u32 remap_len;
};

struct ff_fw_step {
	__u32 field;
	__u32 n;
	__u32 off;
	__u32 len;
};

struct ff_fw_meta {
	__u32 enabled;       /* 1: the program classifies this family */
	__u32 n_rest_steps;
	__u32 n_addr_steps;
	__u32 n_rest;
	__u32 last_off;
	__u32 last_len;
	__u32 outcome_off;   /* FF_FW_OUTCOME_WORDS per outcome: rule, count, ids */
	__u32 n_outcomes;
	__u32 empty_outcome;
	__u32 policy_drop;   /* the chain's policy: 1 drop, 0 accept */
	__u32 policy_slot;   /* its counter slot */
	__u32 ct_value;      /* the packets' ct field (untracked) */
	struct ff_fw_field fields[FF_FW_FIELDS];
	struct ff_fw_step rest[FF_FW_MAX_STEPS];
	struct ff_fw_step addr[FF_FW_MAX_STEPS];
};

/* Per-rule counters, per CPU, by half * FF_FW_MAX_SLOTS + slot. */
struct ff_fw_counter {
	__u64 packets;
	__u64 bytes;
};

/* Per-interface counters, as the pipeline's InterfaceCounters. */
struct ff_if_counters {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 rx_dropped;
	__u64 tx_packets;
	__u64 tx_bytes;
};

/* Per-CPU counters (one element): what the program finished itself. The
 * frames it handed on are counted by the pipeline (exceptions) or not at
 * all (host traffic, counted here as `to_host`). */
struct ff_counters {
	__u64 rx_frames;
	__u64 forwarded_ipv4;
	__u64 forwarded_ipv6;
	__u64 to_host;          /* host-first traffic passed to the kernel */
	__u64 exceptions_lost;  /* no AF_XDP socket on the queue: dropped */
	__u64 tx_redirect_failed;
	__u64 ct_established;   /* packets of flows found in ct_flows */
	__u64 meta_failed;      /* handed over without metadata */
	__u64 exceptions[FF_EXC_SLOTS];
	__u64 drops[FF_DROP_SLOTS];
	__u64 punts[FF_PUNT_SLOTS];
	struct ff_if_counters ifaces[FF_MAX_IFACES];
};

/* Frames the kernel dropped after the program redirected them, per CPU,
 * by port id; entry FF_MAX_PORTS is the exception path (`xsks`: an AF_XDP
 * socket whose ring was full). Counted by the tracepoint programs
 * (xdp:xdp_redirect_err, a redirect refused when the program returned;
 * xdp:xdp_devmap_xmit, frames the driver did not take when the bulk queue
 * was flushed). */
#define FF_TX_FAULT_SLOTS (FF_MAX_PORTS + 1)
struct ff_tx_fault {
	__u64 dropped; /* frames lost */
	__u64 refused; /* of them, refused outright: the port takes no XDP frames */
};

/* The records of the two tracepoints (their format files, under
 * events/xdp/ in tracefs; the loader checks these offsets against them). */
struct ff_tp_redirect_err {
	__u32 common;     /* common_type, common_flags, common_preempt_count */
	__s32 common_pid;
	__s32 prog_id;
	__u32 act;
	__s32 ifindex;
	__s32 err;
	__s32 to_ifindex;
	__u32 map_id;
	__s32 map_index;
};
struct ff_tp_devmap_xmit {
	__u32 common;     /* common_type, common_flags, common_preempt_count */
	__s32 common_pid;
	__s32 from_ifindex;
	__u32 act;
	__s32 to_ifindex;
	__s32 drops;
	__s32 sent;
	__s32 err;
};

/* test_out.kind */
#define FF_OUT_FORWARD 1
#define FF_OUT_DROP 2
#define FF_OUT_PUNT 3
#define FF_OUT_EXCEPTION 4
#define FF_OUT_HOST 5
struct ff_test_out {
	__u32 kind;
	__u32 detail;  /* egress port, drop / punt reason, exception cause */
	__u32 ct_hint; /* exceptions: the hint handed over with the frame */
	__u32 pad;
};

#endif
