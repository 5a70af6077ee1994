//! The router end to end with the AF_XDP backend in a gen → dut → sink lab
//! (see router_common). Needs root; skips otherwise.

mod router_common;

#[test]
fn xdp_forwards_answers_icmp_resolves_neighbours_and_idles() {
    router_common::forwarding_scenario("xdp", "xf");
}

#[test]
fn xdp_uses_kernel_and_cli_routes() {
    router_common::routes_scenario("xdp", "xr");
}

#[test]
fn xdp_enforces_the_firewall_with_conntrack_and_counters() {
    router_common::firewall_scenario("xdp", "xw");
}

#[test]
fn xdp_honours_blackhole_unreachable_prohibit_and_metrics() {
    router_common::discard_routes_scenario("xdp", "xb");
}

#[test]
fn xdp_control_socket_cannot_be_stalled_by_a_client() {
    router_common::control_socket_scenario("xdp", "xc");
}

#[test]
fn xdp_serves_every_rx_queue() {
    router_common::all_queues_scenario("xdp", "xq");
}

#[test]
fn xdp_follows_link_down_up_and_a_recreated_interface() {
    router_common::link_changes_scenario("xdp", "xl");
}

#[test]
fn xdp_runs_as_a_configured_user_with_a_control_group() {
    router_common::user_scenario("xdp", "xu");
}

#[test]
fn xdp_fib_audit_finds_no_difference() {
    router_common::audit_scenario("xdp", "xa");
}

#[test]
fn xdp_names_kernel_policy_it_does_not_mirror() {
    router_common::unmodelled_policy_scenario("xdp", "xk");
}

#[test]
fn xdp_routes_by_the_kernels_policy_rules() {
    router_common::policy_rules_scenario("xdp", "xy");
}

#[test]
fn xdp_keeps_each_connection_on_one_worker_across_queues() {
    router_common::conntrack_across_queues_scenario("xdp", "xh");
}
