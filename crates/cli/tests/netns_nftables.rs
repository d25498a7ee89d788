//! The nftables mode on the real kernel: real connections through node-a
//! for every frontend kind and verdict, checked against what the backends
//! saw and against `kproxy trace` for the same packets.
//!
//! The scenarios are written once in `lab/scenarios` and run per mode
//! (`netns_ebpf.rs` runs the same ones in the ebpf mode); what is only
//! about this mode's tools (the bridge-interface detector, `--once`)
//! stays here.

mod lab;

use std::net::IpAddr;

use kproxy_model::Protocol;
use lab::scenarios::{self, affinity, cluster_ip, external, udp};
use lab::*;

const MODE: Mode = Mode::Nftables;

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

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    cluster_ip::a_pod_reaching_itself_through_its_service_is_answered(MODE);
}

#[test]
fn session_affinity_keeps_a_client_on_one_endpoint() {
    affinity::session_affinity_keeps_a_client_on_one_endpoint(MODE);
}

#[test]
fn round_robin_rotates_through_the_endpoints_in_turn() {
    affinity::round_robin_rotates_through_the_endpoints_in_turn(MODE);
}

#[test]
fn source_and_destination_hashing_pick_by_address() {
    affinity::source_and_destination_hashing_pick_by_address(MODE);
}

#[test]
fn kproxy_trace_agrees_with_what_the_kernel_did() {
    cluster_ip::trace_agrees_with_what_the_kernel_did(MODE);
}

#[test]
fn ipv6_and_udp_node_ports_work_like_ipv4_tcp() {
    external::ipv6_and_udp_node_ports_work_like_ipv4_tcp(MODE);
}

#[test]
fn masquerade_all_covers_cluster_ips_and_never_local_policy_frontends() {
    scenarios::masquerade_all_covers_cluster_ips_only(MODE);
}

#[test]
fn internal_traffic_policy_local_uses_local_endpoints_and_drops_without_them() {
    cluster_ip::internal_traffic_policy_local_uses_local_endpoints_and_drops_without_them(MODE);
}

#[test]
fn a_pinned_client_is_forgotten_after_the_affinity_timeout() {
    affinity::a_pinned_client_is_forgotten_after_the_affinity_timeout(MODE);
}

#[test]
fn weighted_round_robin_splits_connections_by_the_weights() {
    affinity::weighted_round_robin_splits_connections_by_the_weights(MODE);
}

#[test]
fn maglev_keeps_a_client_on_its_endpoint_when_another_leaves() {
    affinity::maglev_keeps_a_client_on_its_endpoint_when_another_leaves(MODE);
}

#[test]
fn node_ports_answer_on_the_primary_addresses_only_as_upstreams_nftables_mode() {
    scenarios::node_ports_answer_where_upstream_does(MODE);
}

#[test]
fn a_udp_flow_moves_off_a_removed_endpoint_and_off_a_cached_rejection() {
    udp::a_udp_flow_moves_off_a_removed_endpoint_and_off_a_cached_rejection(MODE);
}

/// The check `netns_ebpf.rs` uses to show a socket-level connection left
/// no conntrack NAT entry, proven here: nftables mode's DNAT leaves one in
/// node-a (and nothing in the pod's namespace, where no rule runs).
#[test]
fn the_conntrack_check_finds_the_nat_entry_of_a_cluster_ip_connection() {
    let (node, pod) = cluster_ip::conntrack_entries_of_a_cluster_ip_connection(MODE);
    assert!(!node.is_empty() && node.iter().all(|entry| entry.is_dnat()), "node-a: {node:?}");
    assert_eq!(pod, [], "the pod's namespace");
}

#[test]
fn conntrack_lines_parse_into_the_original_destination_and_whether_it_was_translated() {
    let line = "tcp      6 431999 ESTABLISHED src=10.244.1.11 dst=10.96.0.10 sport=40000 dport=80 \
                src=10.244.2.10 dst=10.244.1.11 sport=8080 dport=40000 [ASSURED] mark=0 use=1";
    let entry = conntrack::Entry::parse(line).expect("an entry");
    assert_eq!(entry.original_destination, "10.96.0.10".parse::<IpAddr>().expect("literal"));
    assert!(entry.is_dnat());
    let direct = "tcp 6 30 SYN_SENT src=10.244.1.11 dst=10.244.2.10 sport=1 dport=8080 \
                  src=10.244.2.10 dst=10.244.1.11 sport=8080 dport=1";
    assert!(!conntrack::Entry::parse(direct).expect("an entry").is_dnat());
    assert_eq!(conntrack::Entry::parse("conntrack v1.4.8 (conntrack-tools): 0 flow entries have been shown."), None);
}

#[test]
fn a_bridge_interface_detector_tells_pods_from_outsiders() {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", scenarios::WEB));
    lab.start(&["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "kpbr0"]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || scenarios::answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None), answered("web-b1", client.ipv4), "a pod");
    let node_a: IpAddr = "192.168.77.1".parse().expect("literal");
    assert_eq!(lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, None), answered("web-b1", node_a), "outside");
}

#[test]
fn run_once_programs_the_node_and_exits_zero() {
    let lab = Lab::new(&[(1, "web-a1")]);
    lab.write("web.yaml", &service("web", scenarios::WEB));
    let dir = lab.dir.path().display().to_string();
    let mut args = vec!["run".to_owned(), "--manifests".to_owned(), dir, "--once".to_owned()];
    args.extend(Lab::flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out) = lab.kproxy(&args);
    assert!(ok, "{out}");
    assert!(lab.ruleset().contains("10.96.0.10 . tcp . 80"));
    let client = &lab.pod("web-a1").ns;
    assert!(scenarios::answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
}
