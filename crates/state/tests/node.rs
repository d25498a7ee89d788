//! This node: node-port addresses, zone and eligibility.

use kproxy_state::{Kind, NodePortAddresses, StateConfig};
use kproxy_testkit::{Scenario, node};

fn config(addresses: NodePortAddresses) -> StateConfig {
    StateConfig {
        node_name: "node-a".into(),
        node_port_addresses: addresses,
        host_addresses: ["127.0.0.1", "fe80::1", "192.168.1.10", "10.0.0.5", "fd00::5"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect(),
        ..StateConfig::default()
    }
}

fn node_ports(s: &Scenario) -> Vec<String> {
    s.state().node.node_port_addresses.iter().map(|a| a.to_string()).collect()
}

#[test]
fn primary_addresses_are_the_nodes_first_internal_ip_per_family() {
    let mut s = Scenario::new(config(NodePortAddresses::Primary));
    s.node(
        node("node-a")
            .address("ExternalIP", "203.0.113.1")
            .address("InternalIP", "192.168.1.10")
            .address("InternalIP", "192.168.1.11")
            .address("InternalIP", "fd00::5")
            .build(),
    );
    s.sync();
    assert_eq!(node_ports(&s), ["192.168.1.10", "fd00::5"]);
}

#[test]
fn a_node_without_an_address_of_a_family_has_no_primary_address_of_it() {
    let mut s = Scenario::new(config(NodePortAddresses::Primary));
    s.node(node("node-a").address("InternalIP", "192.168.1.10").build());
    s.sync();
    assert_eq!(node_ports(&s), ["192.168.1.10"], "the host's IPv6 address is not the node's");
}

#[test]
fn without_a_node_object_primary_is_the_hosts_first_global_address() {
    let mut s = Scenario::new(config(NodePortAddresses::Primary));
    s.sync();
    assert_eq!(node_ports(&s), ["192.168.1.10", "fd00::5"]);
}

#[test]
fn bind_address_overrides_the_primary_address_of_its_family() {
    let mut s = Scenario::new(StateConfig {
        bind_address: Some("10.0.0.5".parse().unwrap()),
        ..config(NodePortAddresses::Primary)
    });
    s.node(node("node-a").address("InternalIP", "192.168.1.10").address("InternalIP", "fd00::7").build());
    s.sync();
    assert_eq!(node_ports(&s), ["10.0.0.5", "fd00::7"]);
}

#[test]
fn cidrs_select_matching_addresses_and_a_family_without_cidrs_matches_all() {
    let mut s = Scenario::new(config(NodePortAddresses::Cidrs(vec!["10.0.0.0/8".parse().unwrap()])));
    s.sync();
    assert_eq!(node_ports(&s), ["10.0.0.5", "fd00::5", "fe80::1"]);
}

#[test]
fn a_family_without_cidrs_or_with_a_zero_prefix_matches_every_address() {
    use kproxy_model::IpFamily;
    let match_all = |cidrs: &[&str]| {
        let mut s = Scenario::new(config(NodePortAddresses::Cidrs(cidrs.iter().map(|c| c.parse().unwrap()).collect())));
        s.sync();
        s.state().node.node_port_match_all.clone()
    };
    assert_eq!(match_all(&[]), [IpFamily::V4, IpFamily::V6], "unset in iptables and IPVS mode");
    assert_eq!(match_all(&["10.0.0.0/8"]), [IpFamily::V6]);
    assert_eq!(match_all(&["0.0.0.0/0", "fd00::/8"]), [IpFamily::V4]);
    let mut s = Scenario::new(config(NodePortAddresses::Primary));
    s.sync();
    assert_eq!(s.state().node.node_port_match_all, [], "primary lists addresses");
}

#[test]
fn a_node_being_deleted_or_tainted_is_not_eligible() {
    let mut s = Scenario::cluster();
    s.sync();
    assert!(!s.state().node.eligible, "a cluster node without its Node object is not eligible");
    s.node(node("node-a").build());
    s.sync();
    assert!(s.state().node.eligible);
    s.node(node("node-a").taint("ToBeDeletedByClusterAutoscaler").build());
    assert!(s.sync().node);
    assert!(!s.state().node.eligible);
    s.node(node("node-a").deleting().build());
    s.sync();
    assert!(!s.state().node.eligible);
    s.delete(Kind::Node, "", "node-a");
    s.sync();
    assert!(!s.state().node.eligible);
}

#[test]
fn other_nodes_do_not_change_this_one() {
    let mut s = Scenario::standalone();
    s.sync();
    assert!(s.state().node.eligible, "standalone mode needs no Node object");
    s.node(node("node-b").zone("z9").deleting().build());
    assert!(!s.sync().node);
    assert!(s.state().node.eligible);
    assert_eq!(s.state().node.zone, None);
}
