//! The ebpf mode on the real kernel: the nftables mode's scenarios (from
//! `lab/scenarios`), run with kproxy's socket programs on the lab's cgroup
//! (which holds the probes and backends of node-a and its pods) and its tc
//! programs on node-a's uplink, plus the mode's own promise: a connection
//! translated at the socket leaves no conntrack NAT entry.

mod lab;

use lab::scenarios::{self, affinity, cluster_ip, external, udp};
use lab::*;

const MODE: Mode = Mode::Ebpf;

#[test]
fn a_cluster_ip_spreads_over_every_endpoint_and_pods_keep_their_address() {
    cluster_ip::spreads_over_every_endpoint_and_pods_keep_their_address(MODE);
}

#[test]
fn outside_clients_of_a_cluster_ip_are_masqueraded() {
    cluster_ip::outside_clients_are_masqueraded(MODE);
}

#[test]
fn a_node_port_answers_outside_clients_and_the_node_itself_masqueraded() {
    external::a_node_port_answers_outside_clients_and_the_node_itself_masqueraded(MODE);
}

#[test]
fn udp_and_ipv6_services_work_dual_stack() {
    cluster_ip::udp_and_ipv6_services_work_dual_stack(MODE);
}

#[test]
fn no_endpoints_rejects_an_unserved_port_rejects_and_an_unowned_address_drops() {
    cluster_ip::no_endpoints_rejects_an_unserved_port_rejects_and_an_unowned_address_drops(MODE);
}

#[test]
fn local_policy_keeps_the_client_address_and_uses_local_endpoints_only() {
    external::local_policy_keeps_the_client_address_and_uses_local_endpoints_only(MODE);
}

#[test]
fn local_policy_without_local_endpoints_drops_outside_traffic_but_serves_pods() {
    external::local_policy_without_local_endpoints_drops_outside_traffic_but_serves_pods(MODE);
}

#[test]
fn load_balancer_source_ranges_admit_only_listed_sources() {
    external::load_balancer_source_ranges_admit_only_listed_sources(MODE);
}

/// The socket hook connects the pod to its own address: no masquerade.
#[test]
fn a_pod_reaching_itself_through_its_service_is_connected_to_itself_unmasqueraded() {
    cluster_ip::a_pod_reaching_itself_through_its_service_is_answered(MODE);
}

#[test]
fn session_affinity_keeps_a_client_on_one_endpoint() {
    affinity::session_affinity_keeps_a_client_on_one_endpoint(MODE);
}

#[test]
fn a_pinned_client_is_forgotten_after_the_affinity_timeout() {
    affinity::a_pinned_client_is_forgotten_after_the_affinity_timeout(MODE);
}

#[test]
fn round_robin_rotates_through_the_endpoints_in_turn() {
    affinity::round_robin_rotates_through_the_endpoints_in_turn(MODE);
}

#[test]
fn weighted_round_robin_splits_connections_by_the_weights() {
    affinity::weighted_round_robin_splits_connections_by_the_weights(MODE);
}

#[test]
fn source_and_destination_hashing_pick_by_address() {
    affinity::source_and_destination_hashing_pick_by_address(MODE);
}

#[test]
fn maglev_keeps_a_client_on_its_endpoint_when_another_leaves() {
    affinity::maglev_keeps_a_client_on_its_endpoint_when_another_leaves(MODE);
}

#[test]
fn kproxy_trace_agrees_with_what_the_kernel_did() {
    cluster_ip::trace_agrees_with_what_the_kernel_did(MODE);
}

#[test]
fn ipv6_and_udp_node_ports_work_like_ipv4_tcp() {
    external::ipv6_and_udp_node_ports_work_like_ipv4_tcp(MODE);
}

/// Pods in the cgroup keep their address even under masqueradeAll.
#[test]
fn masquerade_all_covers_what_tc_translates_and_never_local_policy_frontends() {
    scenarios::masquerade_all_covers_cluster_ips_only(MODE);
}

#[test]
fn internal_traffic_policy_local_uses_local_endpoints_and_drops_without_them() {
    cluster_ip::internal_traffic_policy_local_uses_local_endpoints_and_drops_without_them(MODE);
}

#[test]
fn node_ports_answer_on_the_primary_addresses_only_as_nftables_mode() {
    scenarios::node_ports_answer_where_upstream_does(MODE);
}

/// A connected UDP socket reconnects: refused with no endpoints, never
/// left on an endpoint that left.
#[test]
fn a_udp_client_moves_off_a_removed_endpoint_and_off_a_rejection() {
    udp::a_udp_flow_moves_off_a_removed_endpoint_and_off_a_cached_rejection(MODE);
}

#[test]
fn every_field_change_of_a_live_service_applies_as_a_clean_partial_sync() {
    scenarios::field_changes_apply_as_clean_partial_syncs(MODE);
}

/// The check itself is proven in nftables mode
/// (`netns_nftables.rs`, `the_conntrack_check_finds_the_nat_entry_of_a_cluster_ip_connection`).
#[test]
fn a_cluster_ip_connection_from_the_cgroup_leaves_no_conntrack_nat_entry() {
    let (node, pod) = cluster_ip::conntrack_entries_of_a_cluster_ip_connection(MODE);
    assert_eq!(node, [], "node-a has an entry for the cluster IP");
    assert_eq!(pod, [], "the pod's namespace has an entry for the cluster IP");
}

/// `kproxy trace` asked on the node walks the maps the running kproxy
/// pinned (not a plan) and says what real packets get.
#[test]
fn kproxy_trace_on_the_node_reads_the_pinned_maps_and_agrees_with_the_kernel() {
    lab::live_trace::live_trace_matches_real_packets(Mode::Ebpf);
}
