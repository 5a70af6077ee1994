//! Kernel VLAN devices as fastfwd's VLAN interfaces, in both engines.
//! This VM's kernel has no 802.1Q devices: the tests are ignored here and
//! run by scripts/test-kernel under Debian's kernel (and in CI there).

mod router_common;

#[test]
#[ignore = "needs 802.1Q devices (CONFIG_VLAN_8021Q): scripts/test-kernel runs it under Debian's kernel"]
fn packet_routes_over_a_kernel_vlan_device() {
    router_common::kernel_vlan_scenario("packet", "kvp");
}

#[test]
#[ignore = "needs 802.1Q devices (CONFIG_VLAN_8021Q): scripts/test-kernel runs it under Debian's kernel"]
fn afxdp_routes_over_a_kernel_vlan_device() {
    router_common::kernel_vlan_scenario("afxdp", "kva");
}

#[test]
#[ignore = "needs 802.1Q devices (CONFIG_VLAN_8021Q): scripts/test-kernel runs it under Debian's kernel"]
fn xdp_engine_routes_over_a_kernel_vlan_device() {
    router_common::kernel_vlan_scenario(router_common::XDP_ENGINE, "kvx");
}
