//! Upstream's layout: the objects a first sync and a change send.

use super::*;
use crate::workload::{CLUSTER_CIDR, Spec};

fn state(services: usize) -> kproxy_state::StateBuilder {
    let mut builder = Spec::new(services, 10).fold();
    builder.take_changes();
    builder
}

#[test]
fn full_ruleset_has_upstreams_objects() {
    let builder = state(20);
    let text = full(builder.state(), CLUSTER_CIDR);
    assert!(text.starts_with("add table ip kube-proxy"));
    for object in [
        "add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; policy accept ; }",
        "add chain ip kube-proxy nat-output { type nat hook output priority -100 ; policy accept ; }",
        "add rule ip kube-proxy nat-prerouting jump services",
        "add rule ip kube-proxy nat-output jump services",
        "add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict",
        "add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips",
        "meta l4proto . th dport vmap @service-nodeports",
    ] {
        assert!(text.contains(object), "missing {object:?}");
    }
    // One service chain per service, one endpoint chain per endpoint, an
    // external chain per NodePort/LoadBalancer service, a local chain per
    // Local load balancer.
    let chains = |prefix: &str| {
        let start = format!("add chain ip kube-proxy {prefix}-");
        text.lines().filter(|l| l.starts_with(&start) && l.contains('/')).count()
    };
    assert_eq!(chains("service"), 20);
    assert_eq!(chains("endpoint"), 200);
    assert_eq!(chains("external"), 6);
    assert_eq!(chains("local"), 2);
    assert_eq!(text.matches("numgen random mod 10 vmap { 0 : goto endpoint-").count(), 20);
    assert_eq!(text.matches("add element ip kube-proxy service-nodeports").count(), 6);
    // Cluster IPs and load-balancer IPs.
    assert_eq!(text.matches("add element ip kube-proxy service-ips").count(), 22);
    assert!(text.contains("meta l4proto tcp dnat to 10.128.0.1:8080"), "{text}");
    assert!(text.contains("meta l4proto udp dnat to "));
    assert!(text.contains(": goto service-") && text.contains("ns-000/svc-000000/tcp/http"));
}

#[test]
fn a_change_replaces_the_service_chain_and_swaps_one_endpoint_chain() {
    let spec = Spec::new(20, 10);
    let mut builder = spec.fold();
    builder.take_changes();
    let i = spec.change_target(0, true);
    let name = |b: &kproxy_state::StateBuilder| {
        b.state().ipv4.service_ports.values().find(|p| *p.name.service.name == *spec.name(i)).cloned().expect("port")
    };
    let old = name(&builder);
    builder.apply(spec.change_event(i, 0));
    builder.take_changes();
    let new = name(&builder);
    let text = change(&old, &new, CLUSTER_CIDR);
    let service = chain_name("service", &new);
    assert!(text.contains(&format!("flush chain ip kube-proxy {service}\n")));
    assert_eq!(text.matches("numgen random mod 10 vmap").count(), 1);
    assert_eq!(text.matches("delete chain ip kube-proxy endpoint-").count(), 1);
    assert_eq!(text.lines().filter(|l| l.starts_with("add chain ip kube-proxy endpoint-")).count(), 10);
    // The deleted chain is emptied first, after the rule referencing it.
    let delete = text.find("delete chain").expect("a delete");
    assert!(text.find("numgen").expect("a pick") < delete);
}
