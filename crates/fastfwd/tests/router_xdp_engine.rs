//! The router end to end with the XDP engine (`--engine xdp`: the program
//! forwards in the driver's receive path, its exceptions go to the
//! user-space pipeline over AF_XDP) in a gen → dut → sink lab (see
//! router_common): the same scenarios as the user-space engine's. Needs
//! root; skips otherwise (fails under CI).

mod router_common;

use router_common::XDP_ENGINE;

#[test]
fn xdp_engine_forwards_answers_icmp_resolves_neighbours_and_idles() {
    router_common::forwarding_scenario(XDP_ENGINE, "ef");
}

#[test]
fn xdp_engine_uses_kernel_and_cli_routes() {
    router_common::routes_scenario(XDP_ENGINE, "er");
}

#[test]
fn xdp_engine_enforces_the_firewall_with_conntrack_and_counters() {
    router_common::firewall_scenario(XDP_ENGINE, "ew");
}

#[test]
fn xdp_engine_honours_blackhole_unreachable_prohibit_and_metrics() {
    router_common::discard_routes_scenario(XDP_ENGINE, "eb");
}

#[test]
fn xdp_engine_control_socket_cannot_be_stalled_by_a_client() {
    router_common::control_socket_scenario(XDP_ENGINE, "ec");
}

#[test]
fn xdp_engine_serves_every_rx_queue() {
    router_common::all_queues_scenario(XDP_ENGINE, "eq");
}

#[test]
fn xdp_engine_follows_link_down_up_and_a_recreated_interface() {
    router_common::link_changes_scenario(XDP_ENGINE, "el");
}

#[test]
fn xdp_engine_runs_as_a_configured_user_with_a_control_group() {
    router_common::user_scenario(XDP_ENGINE, "eu");
}

#[test]
fn xdp_engine_fib_audit_finds_no_difference() {
    router_common::audit_scenario(XDP_ENGINE, "ea");
}

#[test]
fn xdp_engine_serves_prometheus_metrics() {
    router_common::metrics_scenario(XDP_ENGINE, "em");
}

#[test]
fn xdp_engine_forwards_with_the_full_table_loaded() {
    router_common::full_table_scenario(XDP_ENGINE, "et");
}

#[test]
fn xdp_engine_applies_a_route_stream_in_spaced_batches() {
    router_common::route_stream_scenario(XDP_ENGINE, "es");
}

#[test]
fn xdp_engine_names_kernel_policy_it_does_not_mirror() {
    router_common::unmodelled_policy_scenario(XDP_ENGINE, "ek");
}

#[test]
fn xdp_engine_routes_by_the_kernels_policy_rules() {
    router_common::policy_rules_scenario(XDP_ENGINE, "ey");
}

#[test]
fn xdp_engine_serves_an_egress_port_that_refuses_xdp_frames() {
    router_common::egress_refuses_xdp_scenario("ez");
}

#[test]
fn xdp_engine_keeps_each_connection_on_one_worker_across_queues() {
    router_common::conntrack_across_queues_scenario(XDP_ENGINE, "eh");
}
