//! IPv4 text with leading zeros (`172.30.0.041`), which the API server
//! accepted before its strict validation and kube-proxy still reads with
//! `ParseIPSloppy`: decimal octets, served, never a skipped object. Each
//! such field is named in a warning. (Upstream: `TestBadIPs` in
//! `pkg/proxy/{nftables,iptables}/proxier_test.go`.)

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, Endpoints};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kproxy_model::{FrontendKind, IpFamily, Protocol};
use kproxy_state::convert::{self, FieldWarning};
use kproxy_state::{Object, ObjectKey};
use kproxy_testkit::scenario::addrs;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, pod, service, slice};

/// upstream's TestBadIPs Service: every address field with leading zeros.
fn bad_ips() -> k8s_openapi::api::core::v1::Service {
    service("ns1", "svc1")
        .type_("LoadBalancer")
        .cluster_ip("172.30.0.041")
        .port("p80", "TCP", 80)
        .node_port(3001)
        .external_ips(&["192.168.099.022"])
        .source_ranges(&["203.0.113.000/025"])
        .load_balancer_ingress("1.2.3.004", None)
        .build()
}

fn fields(warnings: &[FieldWarning]) -> Vec<(String, String)> {
    warnings.iter().map(|w| (w.field.clone(), w.reason.clone())).collect()
}

#[test]
fn a_service_with_leading_zeros_converts_to_the_decimal_addresses_with_a_warning_per_field() {
    let converted = convert::service_with_warnings(&bad_ips()).expect("served, not skipped");
    let info = &converted.value;
    assert_eq!(info.cluster_ips, ["172.30.0.41".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(info.external_ips, ["192.168.99.22".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(info.load_balancer_ips, ["1.2.3.4".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(info.load_balancer_source_ranges, ["203.0.113.0/25".parse::<kproxy_model::IpNet>().unwrap()]);
    assert!(converted.warnings.iter().all(|w| w.key == ObjectKey::new(kproxy_state::Kind::Service, "ns1", "svc1")));
    assert_eq!(
        fields(&converted.warnings),
        [
            (
                "spec.clusterIPs[0]".into(),
                r#""172.30.0.041" has leading zeros; read as 172.30.0.41, as kube-proxy reads it"#.into()
            ),
            (
                "spec.externalIPs[0]".into(),
                r#""192.168.099.022" has leading zeros; read as 192.168.99.22, as kube-proxy reads it"#.into()
            ),
            (
                "status.loadBalancer.ingress[0].ip".into(),
                r#""1.2.3.004" has leading zeros; read as 1.2.3.4, as kube-proxy reads it"#.into()
            ),
            (
                "spec.loadBalancerSourceRanges[0]".into(),
                r#""203.0.113.000/025" has leading zeros; read as 203.0.113.0/25, as kube-proxy reads it"#.into()
            ),
        ]
    );
    assert_eq!(
        converted.warnings[0].to_string(),
        r#"Service ns1/svc1: spec.clusterIPs[0]: "172.30.0.041" has leading zeros; read as 172.30.0.41, as kube-proxy reads it"#
    );
}

#[test]
fn cluster_ips_with_leading_zeros_are_read_per_family() {
    let svc = service("default", "web").cluster_ips(&["010.096.000.010", "fd00::10"]).port("", "TCP", 80).build();
    let converted = convert::service_with_warnings(&svc).expect("served");
    assert_eq!(converted.value.cluster_ips.len(), 2);
    assert_eq!(converted.value.cluster_ips[0].to_string(), "10.96.0.10");
    assert_eq!(fields(&converted.warnings).len(), 1);
    assert_eq!(converted.warnings[0].field, "spec.clusterIPs[0]");
}

#[test]
fn a_well_formed_object_has_no_warning() {
    let svc = service("default", "web").cluster_ip("10.96.0.10").external_ips(&["fd00::0010"]).port("", "TCP", 80);
    let converted = convert::service_with_warnings(&svc.build()).expect("valid");
    assert_eq!(converted.warnings, [], "IPv6 groups with leading zeros are plain IPv6");
}

#[test]
fn octets_too_large_are_still_invalid() {
    let svc = service("default", "web").cluster_ip("10.96.0.0256").port("", "TCP", 80).build();
    let err = convert::service_with_warnings(&svc).expect_err("256 is no octet");
    assert_eq!(err.to_string(), r#"Service default/web: spec.clusterIPs[0]: "10.96.0.0256" is not a valid IP address"#);
}

#[test]
fn endpoint_slice_addresses_with_leading_zeros_are_served_with_a_warning() {
    let sl = slice("ns1", "svc1-1", "svc1").port("p80", "TCP", 80).endpoint(Ep::new("10.180.00.001")).build();
    let converted = convert::endpoint_slice_with_warnings(&sl).expect("served");
    let Object::Slice { info, .. } = &converted.value else { panic!("a slice") };
    assert_eq!(info.groups[0].endpoints[0].ip.to_string(), "10.180.0.1");
    assert_eq!(
        converted.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            r#"EndpointSlice ns1/svc1-1: endpoints[0].addresses[0]: "10.180.00.001" has leading zeros; read as 10.180.0.1, as kube-proxy reads it"#
        ]
    );
}

#[test]
fn legacy_endpoints_pods_and_nodes_read_leading_zeros_the_same_way() {
    let eps = Endpoints {
        metadata: ObjectMeta { name: Some("web".into()), namespace: Some("default".into()), ..Default::default() },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress { ip: "10.1.0.01".into(), ..Default::default() }]),
            ..Default::default()
        }]),
    };
    let converted = convert::endpoints_with_warnings(&eps).expect("served");
    assert_eq!(converted.warnings.len(), 1, "{:?}", converted.warnings);
    assert_eq!(converted.warnings[0].field, "subsets[0].addresses[0].ip");

    let p = convert::pod_with_warnings(&pod("default", "p").ip("10.1.0.09").build()).expect("served");
    assert_eq!(p.value.ips[0].to_string(), "10.1.0.9");
    assert_eq!(p.warnings[0].field, "status.podIPs[0].ip");

    let n = convert::node_with_warnings(&node("node-a").address("InternalIP", "192.168.077.001").build()).expect("ok");
    assert_eq!(n.value.addresses[0].to_string(), "192.168.77.1");
    assert_eq!(n.warnings[0].field, "status.addresses[0].address");
}

/// The state serves every frontend at the decimal address, the endpoint
/// too, and the source range filters as `203.0.113.0/25`.
#[test]
fn the_state_serves_upstreams_bad_ips_case_at_the_decimal_addresses() {
    let mut s = Scenario::cluster();
    s.service(bad_ips());
    s.slice(slice("ns1", "svc1-1", "svc1").port("p80", "TCP", 80).endpoint(Ep::new("10.180.00.001")).build());
    s.sync();
    let port = s.find(IpFamily::V4, "ns1", "svc1", "p80").expect("served");
    assert_eq!(port.name.protocol, Protocol::Tcp);
    let mut frontends: Vec<(FrontendKind, String)> =
        port.frontends.iter().map(|f| (f.kind, f.addr().to_string())).collect();
    frontends.retain(|(kind, _)| *kind != FrontendKind::NodePort);
    frontends.sort();
    let mut expected = vec![
        (FrontendKind::ClusterIp, "172.30.0.41:80".to_owned()),
        (FrontendKind::ExternalIp, "192.168.99.22:80".to_owned()),
        (FrontendKind::LoadBalancerIp, "1.2.3.4:80".to_owned()),
    ];
    expected.sort();
    assert_eq!(frontends, expected);
    assert_eq!(port.node_port, Some(3001));
    assert_eq!(addrs(&port.cluster_endpoints), ["10.180.0.1:80"]);
    assert_eq!(port.load_balancer_source_ranges, Some(vec!["203.0.113.0/25".parse::<kproxy_model::IpNet>().unwrap()]));
}
