//! Change tracking and `Changes`: what a partial sync and conntrack cleanup
//! are told.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use kproxy_model::{IpFamily, Protocol, StaleUdpEndpoint};
use kproxy_state::{Kind, Object, SourceEvent, StateConfig, convert};
use kproxy_testkit::scenario::port_name;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

fn dns() -> k8s_openapi::api::core::v1::Service {
    service("kube-system", "dns")
        .type_("NodePort")
        .cluster_ip("10.96.0.53")
        .port("dns", "UDP", 53)
        .node_port(30053)
        .build()
}

fn dns_slice(ips: &[&str]) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    ips.iter()
        .fold(slice("kube-system", "dns-1", "dns").port("dns", "UDP", 5353), |sl, ip| sl.endpoint(Ep::new(ip)))
        .build()
}

fn scenario() -> Scenario {
    let mut s = Scenario::cluster();
    s.node(node("node-a").address("InternalIP", "192.168.1.10").build());
    s
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn many_events_for_one_object_are_one_change() {
    let mut s = scenario();
    s.service(dns());
    s.slice(dns_slice(&["10.1.0.1"]));
    s.slice(dns_slice(&["10.1.0.1", "10.1.0.2"]));
    s.slice(dns_slice(&["10.1.0.2"]));
    assert_eq!(s.builder.pending_counts(), (1, 1));
    let changes = s.sync();
    assert_eq!((changes.service_changes, changes.endpoint_changes), (1, 1));
    assert_eq!(changes.service_ports.len(), 1);
}

#[test]
fn a_change_undone_before_the_sync_is_no_change() {
    let mut s = scenario();
    s.service(dns()).slice(dns_slice(&["10.1.0.1"]));
    s.sync();
    s.slice(dns_slice(&["10.1.0.1", "10.1.0.2"]));
    s.slice(dns_slice(&["10.1.0.1"]));
    assert_eq!(s.builder.pending_counts(), (0, 0));
    assert!(s.sync().is_empty());
}

#[test]
fn only_the_changed_service_ports_are_listed() {
    let mut s = scenario();
    s.service(dns()).slice(dns_slice(&["10.1.0.1"]));
    s.service(
        service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).port("https", "TCP", 443).build(),
    );
    s.sync();
    s.service(
        service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).port("https", "TCP", 8443).build(),
    );
    let changes = s.sync();
    let changed: Vec<_> = changes.service_ports.into_iter().collect();
    assert_eq!(changed, [(IpFamily::V4, port_name("default", "web", "https", Protocol::Tcp))]);
}

#[test]
fn a_removed_udp_endpoint_is_stale_on_every_frontend_that_used_it() {
    let mut s = scenario();
    s.service(dns()).slice(dns_slice(&["10.1.0.1", "10.1.0.2"]));
    s.sync();
    s.slice(dns_slice(&["10.1.0.2"]));
    let changes = s.sync();
    let expected = [
        StaleUdpEndpoint { frontend: addr("10.96.0.53:53"), endpoint: addr("10.1.0.1:5353") },
        StaleUdpEndpoint { frontend: addr("192.168.1.10:30053"), endpoint: addr("10.1.0.1:5353") },
    ];
    assert_eq!(changes.stale_udp_endpoints.into_iter().collect::<Vec<_>>(), expected);
    assert!(changes.stale_udp_frontends.is_empty());
}

#[test]
fn an_endpoint_that_only_starts_terminating_is_not_stale() {
    let mut s = scenario();
    s.service(dns()).slice(dns_slice(&["10.1.0.1"]));
    s.sync();
    s.slice(
        slice("kube-system", "dns-1", "dns")
            .port("dns", "UDP", 5353)
            .endpoint(Ep::new("10.1.0.1").terminating_serving())
            .build(),
    );
    let changes = s.sync();
    assert_eq!(changes.service_ports.len(), 1);
    assert!(changes.stale_udp_endpoints.is_empty());
}

#[test]
fn a_udp_service_going_from_no_endpoints_to_some_flushes_its_frontends() {
    let mut s = scenario();
    s.service(dns());
    s.sync();
    s.slice(dns_slice(&["10.1.0.1"]));
    let changes = s.sync();
    assert_eq!(
        changes.stale_udp_frontends.into_iter().collect::<Vec<_>>(),
        [addr("10.96.0.53:53"), addr("192.168.1.10:30053")]
    );
}

#[test]
fn a_deleted_udp_service_flushes_its_frontends() {
    let mut s = scenario();
    s.service(dns()).slice(dns_slice(&["10.1.0.1"]));
    s.sync();
    s.delete(Kind::Service, "kube-system", "dns");
    let changes = s.sync();
    assert!(s.state().ipv4.service_ports.is_empty());
    assert!(changes.stale_udp_frontends.contains(&addr("10.96.0.53:53")));
}

#[test]
fn tcp_changes_need_no_conntrack_cleanup() {
    let mut s = scenario();
    let web = || service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build();
    s.service(web()).slice(slice("default", "w", "web").port("http", "TCP", 80).endpoint(Ep::new("10.1.0.1")).build());
    s.sync();
    s.delete(Kind::EndpointSlice, "default", "w");
    let changes = s.sync();
    assert_eq!(changes.service_ports.len(), 1);
    assert!(changes.stale_udp_endpoints.is_empty() && changes.stale_udp_frontends.is_empty());
}

#[test]
fn a_zone_change_of_this_node_rebuilds_every_service() {
    let mut s = scenario();
    s.service(dns()).slice(
        slice("kube-system", "dns-1", "dns")
            .port("dns", "UDP", 5353)
            .endpoint(Ep::new("10.1.0.1").hint_zones(&["z1"]))
            .endpoint(Ep::new("10.1.0.2").hint_zones(&["z2"]))
            .build(),
    );
    s.sync();
    assert_eq!(s.port("kube-system", "dns", "dns").cluster_endpoints.len(), 2);
    s.node(node("node-a").zone("z1").address("InternalIP", "192.168.1.10").build());
    let changes = s.sync();
    assert!(changes.node);
    assert_eq!(changes.service_ports.len(), 1);
    assert_eq!(s.port("kube-system", "dns", "dns").cluster_endpoints.len(), 1);
}

#[test]
fn a_slice_moved_to_another_service_leaves_the_first() {
    let mut s = scenario();
    s.service(dns());
    s.service(service("kube-system", "dns2").cluster_ip("10.96.0.54").port("dns", "UDP", 53).build());
    s.slice(dns_slice(&["10.1.0.1"]));
    s.sync();
    s.slice(slice("kube-system", "dns-1", "dns2").port("dns", "UDP", 5353).endpoint(Ep::new("10.1.0.1")).build());
    s.sync();
    assert!(s.port("kube-system", "dns", "dns").cluster_endpoints.is_empty());
    assert_eq!(s.port("kube-system", "dns2", "dns").cluster_endpoints.len(), 1);
}

#[test]
fn trigger_times_of_slice_changes_are_handed_over_once() {
    let mut s = scenario();
    s.service(dns());
    s.slice(
        slice("kube-system", "dns-1", "dns")
            .annotation("endpoints.kubernetes.io/last-change-trigger-time", "2026-11-30T12:00:00Z")
            .port("dns", "UDP", 53)
            .endpoint(Ep::new("10.1.0.1"))
            .build(),
    );
    let changes = s.sync();
    let expected = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_040_000);
    let service = kproxy_model::ServiceName::new("kube-system", "dns");
    assert_eq!(changes.trigger_times.get(&service), Some(&vec![expected]));
    assert!(s.sync().trigger_times.is_empty());
}

#[test]
fn service_cidrs_come_from_objects_and_the_flag() {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..StateConfig::default()
    });
    assert_eq!(s.state().ipv4.service_cidrs, vec!["10.96.0.0/16".parse().unwrap()]);
    let cidr = k8s_openapi::api::networking::v1::ServiceCIDR {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("extra".into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::networking::v1::ServiceCIDRSpec {
            cidrs: Some(vec!["10.100.0.0/16".into(), "fd00:10::/112".into()]),
        }),
        status: None,
    };
    s.builder.apply(SourceEvent::Apply(Object::ServiceCidr(convert::service_cidr(&cidr).unwrap())));
    let changes = s.sync();
    assert!(changes.service_cidrs);
    let v4: Vec<String> = s.state().ipv4.service_cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(v4, ["10.96.0.0/16", "10.100.0.0/16"]);
    assert_eq!(s.state().ipv6.service_cidrs.len(), 1);
    s.delete(Kind::ServiceCidr, "", "extra");
    s.sync();
    assert_eq!(s.state().ipv4.service_cidrs.len(), 1);
}
