//! Bad input is rejected with the object, the field and the reason.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kproxy_state::convert;
use kproxy_testkit::{EndpointBuilder as Ep, node, pod, service, slice};

fn service_error(svc: k8s_openapi::api::core::v1::Service) -> String {
    convert::service(&svc).expect_err("must be rejected").to_string()
}

#[test]
fn bad_cluster_ip_names_the_field() {
    let err = service_error(service("default", "web").cluster_ips(&["10.96.0.300"]).port("http", "TCP", 80).build());
    assert_eq!(err, r#"Service default/web: spec.clusterIPs[0]: "10.96.0.300" is not a valid IP address"#);
}

#[test]
fn port_out_of_range_names_the_port() {
    let err = service_error(
        service("default", "web").cluster_ip("10.96.0.1").port("a", "TCP", 80).port("b", "TCP", 70000).build(),
    );
    assert_eq!(err, "Service default/web: spec.ports[1].port: 70000 is out of range (allowed: 1-65535)");
    let err = service_error(
        service("default", "web").cluster_ip("10.96.0.1").port_to("a", "TCP", 80, IntOrString::Int(0)).build(),
    );
    assert_eq!(err, "Service default/web: spec.ports[0].targetPort: 0 is out of range (allowed: 1-65535)");
}

#[test]
fn unknown_protocol_lists_the_allowed_ones() {
    let err = service_error(service("default", "web").cluster_ip("10.96.0.1").port("a", "ICMP", 80).build());
    assert_eq!(
        err,
        r#"Service default/web: spec.ports[0].protocol: unsupported value "ICMP" (allowed: TCP, UDP, SCTP)"#
    );
}

#[test]
fn unknown_type_and_policies_list_the_allowed_values() {
    let err = service_error(service("default", "web").type_("Magic").cluster_ip("10.96.0.1").build());
    assert_eq!(
        err,
        r#"Service default/web: spec.type: unsupported value "Magic" (allowed: ClusterIP, NodePort, LoadBalancer, ExternalName)"#
    );
    let err = service_error(
        service("default", "web")
            .cluster_ip("10.96.0.1")
            .port("a", "TCP", 80)
            .external_traffic_policy("Global")
            .build(),
    );
    assert_eq!(
        err,
        r#"Service default/web: spec.externalTrafficPolicy: unsupported value "Global" (allowed: Cluster, Local)"#
    );
}

#[test]
fn missing_cluster_ip_is_explained() {
    let err = service_error(service("default", "web").port("a", "TCP", 80).build());
    assert_eq!(
        err,
        r#"Service default/web: spec.clusterIP: must be set to an IP address (or "None" for a headless service); without an API server nothing allocates one"#
    );
}

#[test]
fn duplicate_ports_and_families_are_rejected() {
    let err = service_error(
        service("default", "web").cluster_ip("10.96.0.1").port("a", "TCP", 80).port("a", "TCP", 81).build(),
    );
    assert_eq!(err, r#"Service default/web: spec.ports[1].name: duplicate port "a" for protocol TCP"#);
    let err = service_error(service("default", "web").cluster_ips(&["10.96.0.1", "10.96.0.2"]).build());
    assert_eq!(err, "Service default/web: spec.clusterIPs[1]: a second IPv4 address; at most one per family");
}

#[test]
fn affinity_timeout_out_of_range_is_rejected() {
    let err = service_error(
        service("default", "web")
            .cluster_ip("10.96.0.1")
            .port("a", "TCP", 80)
            .session_affinity("ClientIP", Some(100000))
            .build(),
    );
    assert_eq!(
        err,
        "Service default/web: spec.sessionAffinityConfig.clientIP.timeoutSeconds: 100000 is out of range (allowed: 1-86400)"
    );
}

#[test]
fn bad_external_ip_and_source_range_are_rejected() {
    let err = service_error(
        service("default", "web")
            .cluster_ip("10.96.0.1")
            .port("a", "TCP", 80)
            .external_ips(&["1.2.3.4", "nope"])
            .build(),
    );
    assert_eq!(err, r#"Service default/web: spec.externalIPs[1]: "nope" is not a valid IP address"#);
    let err = service_error(
        service("default", "web").cluster_ip("10.96.0.1").port("a", "TCP", 80).source_ranges(&["10.0.0.0/33"]).build(),
    );
    assert_eq!(err, r#"Service default/web: spec.loadBalancerSourceRanges[0]: "10.0.0.0/33" is not a valid CIDR"#);
}

#[test]
fn a_nameless_object_is_rejected_and_a_missing_namespace_is_default() {
    let mut svc = service("", "web").cluster_ip("10.96.0.1").port("a", "TCP", 80).build();
    assert_eq!(convert::service(&svc).unwrap().name.to_string(), "default/web");
    svc.metadata.name = None;
    assert_eq!(
        convert::service(&svc).unwrap_err().to_string(),
        "Service default/<unnamed>: metadata.name: must be set"
    );
}

#[test]
fn slices_need_their_service_label_and_valid_addresses() {
    let mut sl = slice("default", "web-1", "web").port("http", "TCP", 80).build();
    sl.metadata.labels = None;
    assert_eq!(
        convert::endpoint_slice(&sl).unwrap_err().to_string(),
        "EndpointSlice default/web-1: metadata.labels: kubernetes.io/service-name must name the slice's Service"
    );
    let sl = slice("default", "web-1", "web").port("http", "TCP", 80).endpoint(Ep::new("fd00::1")).build();
    assert_eq!(
        convert::endpoint_slice(&sl).unwrap_err().to_string(),
        "EndpointSlice default/web-1: endpoints[0].addresses[0]: fd00::1 is not an IPv4 address (addressType: IPv4)"
    );
    let sl = slice("default", "web-1", "web").port("http", "XTP", 80).build();
    assert_eq!(
        convert::endpoint_slice(&sl).unwrap_err().to_string(),
        r#"EndpointSlice default/web-1: ports[0].protocol: unsupported value "XTP" (allowed: TCP, UDP, SCTP)"#
    );
}

#[test]
fn pods_and_nodes_with_bad_addresses_are_rejected() {
    let p = pod("default", "p").ip("10.1.0.999").build();
    assert_eq!(
        convert::pod(&p).unwrap_err().to_string(),
        r#"Pod default/p: status.podIPs[0].ip: "10.1.0.999" is not a valid IP address"#
    );
    let n = node("node-a").address("InternalIP", "bad").build();
    assert_eq!(
        convert::node(&n).unwrap_err().to_string(),
        r#"Node node-a: status.addresses[0].address: "bad" is not a valid IP address"#
    );
}

#[test]
fn a_service_without_ports_is_rejected() {
    let err = service_error(service("default", "web").cluster_ip("10.96.0.1").build());
    assert_eq!(err, "Service default/web: spec.ports: must list at least one port");
}

#[test]
fn a_slice_over_the_api_limit_of_endpoints_is_rejected() {
    let sl = (0..1001).fold(slice("default", "big", "web").port("http", "TCP", 80), |sl, i| {
        sl.endpoint(Ep::new(&format!("10.1.{}.{}", i / 250, i % 250)))
    });
    assert_eq!(
        convert::endpoint_slice(&sl.build()).unwrap_err().to_string(),
        "EndpointSlice default/big: endpoints: 1001 entries; at most 1000 per slice"
    );
}
