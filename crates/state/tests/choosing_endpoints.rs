//! SEMANTICS.md "Choosing endpoints": the cluster and local sets, the
//! terminating fallback, topology hints, and the traffic policies.

use kproxy_model::FrontendKind;
use kproxy_testkit::scenario::addrs;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, SliceBuilder, node, service, slice};

/// `default/web:http` with one slice of the given endpoints, as seen from
/// `node-a` in zone `z1`.
fn with_endpoints(configure: impl FnOnce(SliceBuilder) -> SliceBuilder) -> Scenario {
    with_service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build(), configure)
}

fn with_service(
    svc: k8s_openapi::api::core::v1::Service,
    configure: impl FnOnce(SliceBuilder) -> SliceBuilder,
) -> Scenario {
    let mut s = Scenario::cluster();
    s.node(node("node-a").zone("z1").address("InternalIP", "192.168.1.10").build());
    s.service(svc);
    s.slice(configure(slice("default", "web-1", "web").port("http", "TCP", 8080)).build());
    s.sync();
    s
}

#[test]
fn ready_endpoints_are_used_and_not_ready_ones_are_not() {
    let s = with_endpoints(|sl| sl.endpoint(Ep::new("10.1.0.1")).endpoint(Ep::new("10.1.0.2").not_ready()));
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080"]);
}

#[test]
fn serving_terminating_endpoints_are_used_only_when_none_is_ready() {
    let s = with_endpoints(|sl| sl.endpoint(Ep::new("10.1.0.1")).endpoint(Ep::new("10.1.0.2").terminating_serving()));
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080"]);
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").not_ready())
            .endpoint(Ep::new("10.1.0.2").terminating_serving())
            .endpoint(Ep::new("10.1.0.3").terminating_not_serving())
    });
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.2:8080"]);
}

#[test]
fn the_local_set_falls_back_on_its_own() {
    // A ready remote endpoint and only a terminating local one: the cluster
    // set is the ready remote, the local set the terminating local.
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").node("node-b"))
            .endpoint(Ep::new("10.1.0.2").node("node-a").terminating_serving())
    });
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(&port.cluster_endpoints), ["10.1.0.1:8080"]);
    assert_eq!(addrs(&port.local_endpoints), ["10.1.0.2:8080"]);
}

#[test]
fn nothing_usable_means_empty_sets() {
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").not_ready()).endpoint(Ep::new("10.1.0.2").terminating_not_serving())
    });
    let port = s.port("default", "web", "http");
    assert!(port.cluster_endpoints.is_empty() && port.local_endpoints.is_empty());
}

#[test]
fn zone_hints_restrict_the_cluster_set_when_every_ready_endpoint_has_one() {
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").hint_zones(&["z1"]))
            .endpoint(Ep::new("10.1.0.2").hint_zones(&["z2"]))
            .endpoint(Ep::new("10.1.0.3").not_ready())
    });
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080"]);
}

#[test]
fn hints_are_ignored_when_a_ready_endpoint_has_none() {
    let s = with_endpoints(|sl| sl.endpoint(Ep::new("10.1.0.1").hint_zones(&["z1"])).endpoint(Ep::new("10.1.0.2")));
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080", "10.1.0.2:8080"]);
}

#[test]
fn hints_are_ignored_when_none_names_this_zone() {
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").hint_zones(&["z2"])).endpoint(Ep::new("10.1.0.2").hint_zones(&["z3"]))
    });
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080", "10.1.0.2:8080"]);
}

#[test]
fn node_hints_win_over_zone_hints() {
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").hint_zones(&["z1"]).hint_nodes(&["node-a"]))
            .endpoint(Ep::new("10.1.0.2").hint_zones(&["z1"]).hint_nodes(&["node-b"]))
    });
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080"]);
}

#[test]
fn the_terminating_fallback_ignores_hints_and_the_local_set_never_uses_them() {
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").terminating_serving().hint_zones(&["z2"]).node("node-a"))
            .endpoint(Ep::new("10.1.0.2").terminating_serving().hint_zones(&["z1"]))
    });
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(&port.cluster_endpoints), ["10.1.0.1:8080", "10.1.0.2:8080"]);
    let s = with_endpoints(|sl| {
        sl.endpoint(Ep::new("10.1.0.1").hint_zones(&["z2"]).node("node-a"))
            .endpoint(Ep::new("10.1.0.2").hint_zones(&["z1"]))
    });
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(&port.cluster_endpoints), ["10.1.0.2:8080"]);
    assert_eq!(addrs(&port.local_endpoints), ["10.1.0.1:8080"]);
}

#[test]
fn internal_traffic_policy_local_sends_cluster_ip_traffic_to_local_endpoints() {
    let svc = service("default", "web")
        .cluster_ip("10.96.0.10")
        .port("http", "TCP", 80)
        .internal_traffic_policy("Local")
        .build();
    let s = with_service(svc, |sl| {
        sl.endpoint(Ep::new("10.1.0.1").node("node-a")).endpoint(Ep::new("10.1.0.2").node("node-b"))
    });
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(port.internal_endpoints()), ["10.1.0.1:8080"]);
    assert_eq!(addrs(port.endpoints_for(FrontendKind::ClusterIp, true)), ["10.1.0.1:8080"]);
}

#[test]
fn external_traffic_policy_local_sends_outside_traffic_to_local_endpoints_only() {
    let svc = service("default", "web")
        .type_("NodePort")
        .cluster_ip("10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .external_traffic_policy("Local")
        .build();
    let s = with_service(svc, |sl| {
        sl.endpoint(Ep::new("10.1.0.1").node("node-b")).endpoint(Ep::new("10.1.0.2").node("node-a"))
    });
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(port.endpoints_for(FrontendKind::NodePort, true)), ["10.1.0.2:8080"]);
    // The cluster IP still follows the internal (Cluster) policy.
    assert_eq!(addrs(port.endpoints_for(FrontendKind::ClusterIp, true)).len(), 2);
}

#[test]
fn in_cluster_traffic_to_a_local_policy_frontend_uses_the_cluster_set() {
    let svc = service("default", "web")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.10")
        .port("http", "TCP", 80)
        .load_balancer_ingress("198.51.100.1", None)
        .external_traffic_policy("Local")
        .internal_traffic_policy("Local")
        .build();
    let s = with_service(svc, |sl| sl.endpoint(Ep::new("10.1.0.1").node("node-b")));
    let port = s.port("default", "web", "http");
    assert!(port.endpoints_for(FrontendKind::LoadBalancerIp, true).is_empty());
    // From a pod or the node: short-circuit to the cluster set, even under
    // internalTrafficPolicy: Local.
    assert_eq!(addrs(port.endpoints_for(FrontendKind::LoadBalancerIp, false)), ["10.1.0.1:8080"]);
}
