//! SEMANTICS.md "The endpoint controller": standalone mode derives
//! endpoints from Pods the way the cluster's controller would.

use kproxy_state::Kind;
use kproxy_testkit::scenario::addrs;
use kproxy_testkit::{EndpointBuilder as Ep, PodBuilder, Scenario, node, pod, service, slice};

fn web() -> kproxy_testkit::ServiceBuilder {
    service("default", "web").cluster_ip("10.96.0.10").selector(&[("app", "web")])
}

fn web_pod(name: &str, ip: &str) -> PodBuilder {
    pod("default", name).label("app", "web").ip(ip)
}

#[test]
fn pods_matching_every_selector_label_become_endpoints() {
    let mut s = Scenario::standalone();
    s.service(
        service("default", "web")
            .cluster_ip("10.96.0.10")
            .selector(&[("app", "web"), ("tier", "fe")])
            .port("http", "TCP", 80)
            .build(),
    );
    s.pod(pod("default", "both").label("app", "web").label("tier", "fe").label("extra", "x").ip("10.1.0.1").build());
    s.pod(pod("default", "one").label("app", "web").ip("10.1.0.2").build());
    s.pod(pod("other", "elsewhere").label("app", "web").label("tier", "fe").ip("10.1.0.3").build());
    s.sync();
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:80"]);
}

#[test]
fn pods_without_an_ip_or_finished_are_not_endpoints() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).build());
    s.pod(pod("default", "pending").label("app", "web").build());
    s.pod(web_pod("done", "10.1.0.2").phase("Succeeded").build());
    s.pod(web_pod("failed", "10.1.0.3").phase("Failed").build());
    s.pod(web_pod("running", "10.1.0.4").build());
    s.sync();
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.4:80"]);
}

#[test]
fn readiness_comes_from_the_ready_condition() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).build());
    s.pod(web_pod("ready", "10.1.0.1").build());
    s.pod(web_pod("starting", "10.1.0.2").not_ready().build());
    s.sync();
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:80"]);
}

#[test]
fn a_deleted_pod_is_terminating_and_serving_while_it_was_ready() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).build());
    s.pod(web_pod("old", "10.1.0.1").terminating().build());
    s.pod(web_pod("old-unready", "10.1.0.2").terminating().not_ready().build());
    s.sync();
    // No ready endpoint: the serving, terminating one is the fallback.
    let eps = &s.port("default", "web", "http").cluster_endpoints;
    assert_eq!(addrs(eps), ["10.1.0.1:80"]);
    assert!(!eps[0].ready && eps[0].serving && eps[0].terminating);
}

#[test]
fn publish_not_ready_addresses_makes_every_pod_ready() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).publish_not_ready_addresses().build());
    s.pod(web_pod("starting", "10.1.0.2").not_ready().build());
    s.sync();
    let eps = &s.port("default", "web", "http").cluster_endpoints;
    assert_eq!(addrs(eps), ["10.1.0.2:80"]);
    assert!(eps[0].ready);
}

#[test]
fn named_target_ports_resolve_per_pod() {
    let mut s = Scenario::standalone();
    s.service(web().port_named("http", "TCP", 80, "web").port("metrics", "TCP", 9090).build());
    s.pod(web_pod("a", "10.1.0.1").container_port("web", "TCP", 8080).build());
    s.pod(web_pod("b", "10.1.0.2").container_port("web", "TCP", 8081).build());
    // Same name, wrong protocol: does not resolve.
    s.pod(web_pod("c", "10.1.0.3").container_port("web", "UDP", 8082).build());
    s.pod(web_pod("d", "10.1.0.4").sidecar_port("web", "TCP", 8083).build());
    s.sync();
    assert_eq!(
        addrs(&s.port("default", "web", "http").cluster_endpoints),
        ["10.1.0.1:8080", "10.1.0.2:8081", "10.1.0.4:8083"]
    );
    // A numeric target port needs no container port.
    assert_eq!(addrs(&s.port("default", "web", "metrics").cluster_endpoints).len(), 4);
}

#[test]
fn a_service_without_selector_uses_the_given_slices() {
    let mut s = Scenario::standalone();
    s.service(service("default", "ext").cluster_ip("10.96.0.20").port("http", "TCP", 80).build());
    s.pod(pod("default", "stray").label("app", "web").ip("10.1.0.9").build());
    s.slice(slice("default", "ext-1", "ext").port("http", "TCP", 80).endpoint(Ep::new("192.0.2.10")).build());
    s.sync();
    assert_eq!(addrs(&s.port("default", "ext", "http").cluster_endpoints), ["192.0.2.10:80"]);
}

#[test]
fn deleting_the_service_deletes_its_derived_endpoints() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).build());
    s.pod(web_pod("a", "10.1.0.1").build());
    s.sync();
    s.delete(Kind::Service, "default", "web");
    s.sync();
    assert!(s.state().ipv4.service_ports.is_empty());
    // Re-created without a selector: the old derived endpoints do not return.
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.sync();
    assert!(s.port("default", "web", "http").cluster_endpoints.is_empty());
}

#[test]
fn a_pod_event_updates_every_service_that_selects_it() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).build());
    s.service(
        service("default", "all").cluster_ip("10.96.0.11").selector(&[("app", "web")]).port("p", "TCP", 81).build(),
    );
    s.pod(web_pod("a", "10.1.0.1").build());
    s.sync();
    s.pod(web_pod("a", "10.1.0.1").not_ready().build());
    let changes = s.sync();
    assert_eq!(changes.service_ports.len(), 2);
    assert!(s.port("default", "web", "http").cluster_endpoints.is_empty());
    assert!(s.port("default", "all", "p").cluster_endpoints.is_empty());
}

#[test]
fn a_pod_relabelled_out_of_the_selector_leaves_and_a_deleted_pod_goes() {
    let mut s = Scenario::standalone();
    s.service(web().port("http", "TCP", 80).build());
    s.pod(web_pod("a", "10.1.0.1").build());
    s.pod(web_pod("b", "10.1.0.2").build());
    s.sync();
    s.pod(pod("default", "a").label("app", "db").ip("10.1.0.1").build());
    s.delete(Kind::Pod, "default", "b");
    s.sync();
    assert!(s.port("default", "web", "http").cluster_endpoints.is_empty());
}

#[test]
fn derived_endpoints_are_local_when_their_pod_runs_on_this_node() {
    let mut s = Scenario::standalone();
    s.node(node("node-a").zone("z1").build());
    s.service(web().port("http", "TCP", 80).build());
    s.pod(web_pod("here", "10.1.0.1").node("node-a").build());
    s.pod(web_pod("there", "10.1.0.2").node("node-b").build());
    s.sync();
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(&port.local_endpoints), ["10.1.0.1:80"]);
    assert_eq!(s.state().node.zone.as_deref(), Some("z1"));
}

#[test]
fn the_endpoint_controller_is_off_in_a_cluster() {
    let mut s = Scenario::cluster();
    s.service(web().port("http", "TCP", 80).build());
    s.pod(web_pod("a", "10.1.0.1").build());
    s.sync();
    assert!(s.port("default", "web", "http").cluster_endpoints.is_empty());
}
