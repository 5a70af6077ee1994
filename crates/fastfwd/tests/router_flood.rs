//! Hostile load against a running daemon, every engine and backend (see
//! router_common::neighbour_flood_scenario and conntrack_flood_scenario):
//! neighbour misses and ARP/ND from new sources, new flows against a
//! stateful firewall. A test binary of its own: the floods fill the
//! kernel's neighbour tables, whose limit is shared by every namespace,
//! and load the machine, so they must not run beside the other namespace
//! tests.
//! Needs root; skips otherwise.

mod router_common;

use router_common::XDP_ENGINE;
use std::sync::Mutex;

/// One flood at a time (the neighbour tables' limit is shared).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn flood(backend: &str, tag: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    router_common::neighbour_flood_scenario(backend, tag);
}

#[test]
fn packet_neighbour_flood_stays_bounded() {
    flood("packet", "pn");
}

#[test]
fn xdp_neighbour_flood_stays_bounded() {
    flood("xdp", "xn");
}

#[test]
fn xdp_engine_neighbour_flood_stays_bounded() {
    flood(XDP_ENGINE, "en");
}

#[test]
fn packet_conntrack_flood_spares_established_flows() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    router_common::conntrack_flood_scenario("packet", "pc");
}

#[test]
fn xdp_conntrack_flood_spares_established_flows() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    router_common::conntrack_flood_scenario("xdp", "xc");
}

#[test]
fn xdp_engine_conntrack_flood_spares_established_flows() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    router_common::conntrack_flood_scenario(XDP_ENGINE, "ec");
}
