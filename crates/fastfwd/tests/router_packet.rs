//! The router end to end with the AF_PACKET backend in a gen → dut → sink lab
//! (see router_common). Needs root; skips otherwise.

mod router_common;

#[test]
fn packet_forwards_answers_icmp_resolves_neighbours_and_idles() {
    router_common::forwarding_scenario("packet", "pf");
}

#[test]
fn packet_uses_kernel_and_cli_routes() {
    router_common::routes_scenario("packet", "pr");
}

#[test]
fn packet_enforces_the_firewall_with_conntrack_and_counters() {
    router_common::firewall_scenario("packet", "pw");
}

#[test]
fn packet_honours_blackhole_unreachable_prohibit_and_metrics() {
    router_common::discard_routes_scenario("packet", "pb");
}

#[test]
fn packet_control_socket_cannot_be_stalled_by_a_client() {
    router_common::control_socket_scenario("packet", "pc");
}

#[test]
fn packet_serves_every_rx_queue() {
    router_common::all_queues_scenario("packet", "pq");
}

#[test]
fn packet_follows_link_down_up_and_a_recreated_interface() {
    router_common::link_changes_scenario("packet", "pl");
}

#[test]
fn packet_refuses_ports_taking_larger_frames_and_counts_them() {
    router_common::oversize_scenario("packet", "po");
}

#[test]
fn packet_runs_as_a_configured_user_with_a_control_group() {
    router_common::user_scenario("packet", "pu");
}

#[test]
fn packet_fib_audit_finds_no_difference() {
    router_common::audit_scenario("packet", "pa");
}

#[test]
fn packet_serves_prometheus_metrics() {
    router_common::metrics_scenario("packet", "pm");
}

#[test]
fn packet_applies_a_route_stream_in_spaced_batches() {
    router_common::route_stream_scenario("packet", "ps");
}

#[test]
fn packet_names_kernel_policy_it_does_not_mirror() {
    router_common::unmodelled_policy_scenario("packet", "pk");
}

#[test]
fn packet_routes_by_the_kernels_policy_rules() {
    router_common::policy_rules_scenario("packet", "py");
}

#[test]
fn packet_keeps_each_connection_on_one_worker_across_queues() {
    router_common::conntrack_across_queues_scenario("packet", "ph");
}
