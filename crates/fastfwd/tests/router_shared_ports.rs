//! Ports the kernel bridges or aggregates are not fastfwd's to route on:
//! refused at start and named while running, in both engines; a bond is
//! forwarded over by every engine, through the kernel's bond. Bridges are
//! tested on this VM's kernel; bonds (CONFIG_BONDING) only under Debian's,
//! by scripts/test-kernel (and in CI there).

mod router_common;

#[test]
fn packet_refuses_a_bridged_port_and_names_one_bridged_while_running() {
    router_common::bridged_port_scenario("packet", "brp");
}

#[test]
fn xdp_engine_refuses_a_bridged_port_and_names_one_bridged_while_running() {
    router_common::bridged_port_scenario(router_common::XDP_ENGINE, "brx");
}

#[test]
#[ignore = "needs bond devices (CONFIG_BONDING): scripts/test-kernel runs it under Debian's kernel"]
fn packet_forwards_over_a_bond_as_the_kernel_does() {
    router_common::bond_forwarding_scenario("packet", "bdp");
}

#[test]
#[ignore = "needs bond devices (CONFIG_BONDING): scripts/test-kernel runs it under Debian's kernel"]
fn xdp_engine_forwards_over_a_bond_as_the_kernel_does() {
    router_common::bond_forwarding_scenario(router_common::XDP_ENGINE, "bdx");
}

#[test]
#[ignore = "needs bond devices (CONFIG_BONDING): scripts/test-kernel runs it under Debian's kernel"]
fn packet_counts_what_a_failing_bond_member_lost() {
    router_common::bond_member_failure_scenario("packet", "bfp");
}

#[test]
#[ignore = "needs bond devices (CONFIG_BONDING): scripts/test-kernel runs it under Debian's kernel"]
fn afxdp_counts_what_a_failing_bond_member_lost() {
    router_common::bond_member_failure_scenario("afxdp", "bfa");
}

#[test]
#[ignore = "needs bond devices (CONFIG_BONDING): scripts/test-kernel runs it under Debian's kernel"]
fn xdp_engine_counts_what_a_failing_bond_member_lost() {
    router_common::bond_member_failure_scenario(router_common::XDP_ENGINE, "bfx");
}

#[test]
#[ignore = "needs bond and 802.1Q devices: scripts/test-kernel runs it under Debian's kernel"]
fn packet_routes_over_a_kernel_vlan_device_on_a_bond() {
    router_common::bond_vlan_scenario("packet", "bvp");
}

#[test]
#[ignore = "needs bond and 802.1Q devices: scripts/test-kernel runs it under Debian's kernel"]
fn xdp_engine_routes_over_a_kernel_vlan_device_on_a_bond() {
    router_common::bond_vlan_scenario(router_common::XDP_ENGINE, "bvx");
}

#[test]
#[ignore = "needs bond devices (CONFIG_BONDING): scripts/test-kernel runs it under Debian's kernel"]
fn afxdp_forwards_over_a_bond_as_the_kernel_does() {
    router_common::bond_forwarding_scenario("afxdp", "bda");
}

#[test]
#[ignore = "needs bond and 802.1Q devices: scripts/test-kernel runs it under Debian's kernel"]
fn afxdp_routes_over_a_kernel_vlan_device_on_a_bond() {
    router_common::bond_vlan_scenario("afxdp", "bva");
}
