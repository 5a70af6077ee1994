//! Hostile clients against a forwarding router (docs/router.md, "Faults"):
//! every one gets an error or is cut off, and forwarding, the control
//! socket and the daemon's memory are unaffected. Needs root; skips
//! otherwise (fails under CI).

mod router_common;

#[test]
fn hostile_control_clients_do_not_stop_the_router_af_packet() {
    router_common::hostile_clients_scenario("packet", "hp");
}

#[test]
fn hostile_control_clients_do_not_stop_the_router_xdp_engine() {
    router_common::hostile_clients_scenario(router_common::XDP_ENGINE, "hx");
}

#[test]
fn an_icmp_earning_flood_does_not_stop_path_mtu_discovery_af_packet() {
    router_common::icmp_flood_scenario("packet", "ip");
}

#[test]
fn an_icmp_earning_flood_does_not_stop_path_mtu_discovery_xdp_engine() {
    router_common::icmp_flood_scenario(router_common::XDP_ENGINE, "ix");
}
