//! SEMANTICS.md "Inputs": which fields of which objects become what.

use kproxy_model::{FrontendKind, IpFamily, IpNet, Protocol, SessionAffinity, TrafficPolicy};
use kproxy_state::Kind;
use kproxy_testkit::scenario::addrs;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

fn frontends(s: &Scenario, family: IpFamily, port: &str) -> Vec<(FrontendKind, String)> {
    let port = s.find(family, "default", "web", port).expect("port exists");
    port.frontends.iter().map(|f| (f.kind, f.addr().to_string())).collect()
}

#[test]
fn dual_stack_service_is_one_port_per_family_from_cluster_ips() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ips(&["10.96.0.10", "fd00::10"]).port("http", "TCP", 80).build());
    s.slice(slice("default", "web-v4", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.1.0.1")).build());
    s.slice(
        slice("default", "web-v6", "web")
            .address_type("IPv6")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("fd01::1"))
            .build(),
    );
    s.sync();
    assert_eq!(frontends(&s, IpFamily::V4, "http"), [(FrontendKind::ClusterIp, "10.96.0.10:80".into())]);
    assert_eq!(frontends(&s, IpFamily::V6, "http"), [(FrontendKind::ClusterIp, "[fd00::10]:80".into())]);
    let v4 = s.find(IpFamily::V4, "default", "web", "http").unwrap();
    let v6 = s.find(IpFamily::V6, "default", "web", "http").unwrap();
    assert_eq!(addrs(&v4.cluster_endpoints), ["10.1.0.1:8080"]);
    assert_eq!(addrs(&v6.cluster_endpoints), ["[fd01::1]:8080"]);
}

#[test]
fn single_stack_service_has_no_port_in_the_other_family() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "web").cluster_ip("10.96.0.10").external_ips(&["fd00::99"]).port("", "TCP", 80).build(),
    );
    s.sync();
    assert!(s.find(IpFamily::V6, "default", "web", "").is_none());
    // The IPv6 external IP has no IPv4 port to attach to either.
    assert_eq!(frontends(&s, IpFamily::V4, ""), [(FrontendKind::ClusterIp, "10.96.0.10:80".into())]);
}

#[test]
fn only_cluster_ip_set_still_works_for_old_objects() {
    let mut svc = service("default", "web").port("", "TCP", 80).build();
    svc.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.10".into());
    let mut s = Scenario::cluster();
    s.service(svc).sync();
    assert_eq!(s.port("default", "web", "").cluster_ips().map(|ip| ip.to_string()).collect::<Vec<_>>(), ["10.96.0.10"]);
}

#[test]
fn each_port_and_protocol_is_its_own_service_port() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "dns")
            .cluster_ip("10.96.0.53")
            .port("dns", "UDP", 53)
            .port("dns-tcp", "TCP", 53)
            .port("sig", "SCTP", 9000)
            .build(),
    );
    s.sync();
    let names: Vec<String> = s.state().ipv4.service_ports.keys().map(|n| n.to_string()).collect();
    assert_eq!(names, ["default/dns:dns/UDP", "default/dns:dns-tcp/TCP", "default/dns:sig/SCTP"]);
    assert_eq!(s.port("default", "dns", "sig").name.protocol, Protocol::Sctp);
}

#[test]
fn external_ips_load_balancer_ips_and_node_ports_are_frontends() {
    let mut s = Scenario::cluster();
    s.node(node("node-a").address("InternalIP", "192.168.1.10").build());
    s.service(
        service("default", "web")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.10")
            .port("http", "TCP", 80)
            .node_port(30080)
            .external_ips(&["203.0.113.7"])
            .load_balancer_ingress("198.51.100.1", None)
            .load_balancer_ingress("198.51.100.2", Some("VIP"))
            .build(),
    );
    s.sync();
    assert_eq!(
        frontends(&s, IpFamily::V4, "http"),
        [
            (FrontendKind::ClusterIp, "10.96.0.10:80".into()),
            (FrontendKind::ExternalIp, "203.0.113.7:80".into()),
            (FrontendKind::LoadBalancerIp, "198.51.100.1:80".into()),
            (FrontendKind::LoadBalancerIp, "198.51.100.2:80".into()),
            (FrontendKind::NodePort, "192.168.1.10:30080".into()),
        ]
    );
}

#[test]
fn load_balancer_ingress_in_proxy_mode_or_hostname_only_is_not_a_frontend() {
    let mut svc = service("default", "web")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.10")
        .port("http", "TCP", 80)
        .load_balancer_ingress("198.51.100.1", Some("Proxy"))
        .build();
    let ingress = &mut svc.status.as_mut().unwrap().load_balancer.as_mut().unwrap().ingress.as_mut().unwrap();
    ingress.push(k8s_openapi::api::core::v1::LoadBalancerIngress {
        hostname: Some("lb.example.com".into()),
        ..Default::default()
    });
    let mut s = Scenario::cluster();
    s.service(svc).sync();
    assert_eq!(s.port("default", "web", "http").frontends_of(FrontendKind::LoadBalancerIp).count(), 0);
}

#[test]
fn load_balancer_status_of_a_non_load_balancer_service_is_ignored() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "web")
            .cluster_ip("10.96.0.10")
            .port("http", "TCP", 80)
            .load_balancer_ingress("198.51.100.1", None)
            .build(),
    );
    s.sync();
    assert_eq!(s.port("default", "web", "http").frontends_of(FrontendKind::LoadBalancerIp).count(), 0);
}

#[test]
fn load_balancer_source_ranges_are_kept_per_family() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "web")
            .type_("LoadBalancer")
            .cluster_ips(&["10.96.0.10", "fd00::10"])
            .port("http", "TCP", 80)
            .source_ranges(&["192.0.2.0/24", " 10.0.0.1/8 "])
            .build(),
    );
    s.sync();
    let v4 = s.find(IpFamily::V4, "default", "web", "http").unwrap();
    let expected: Vec<IpNet> = vec!["192.0.2.0/24".parse().unwrap(), "10.0.0.0/8".parse().unwrap()];
    assert_eq!(v4.load_balancer_source_ranges.as_ref(), Some(&expected));
    // Ranges were given, none of them IPv6: no IPv6 source is allowed.
    let v6 = s.find(IpFamily::V6, "default", "web", "http").unwrap();
    assert_eq!(v6.load_balancer_source_ranges, Some(vec![]));
}

#[test]
fn no_source_ranges_or_a_zero_range_means_no_filter() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").type_("LoadBalancer").cluster_ip("10.96.0.10").port("a", "TCP", 80).build());
    s.service(
        service("default", "open")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.11")
            .port("a", "TCP", 80)
            .source_ranges(&["0.0.0.0/0", "192.0.2.0/24"])
            .build(),
    );
    s.sync();
    assert_eq!(s.port("default", "web", "a").load_balancer_source_ranges, None);
    assert_eq!(s.port("default", "open", "a").load_balancer_source_ranges, None);
}

#[test]
fn traffic_policies_are_carried_and_external_policy_needs_an_external_frontend() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "np")
            .type_("NodePort")
            .cluster_ip("10.96.0.1")
            .port("a", "TCP", 80)
            .node_port(30001)
            .external_traffic_policy("Local")
            .internal_traffic_policy("Local")
            .build(),
    );
    s.service(
        service("default", "ext")
            .cluster_ip("10.96.0.2")
            .port("a", "TCP", 80)
            .external_ips(&["203.0.113.9"])
            .external_traffic_policy("Local")
            .build(),
    );
    s.service(
        service("default", "plain")
            .cluster_ip("10.96.0.3")
            .port("a", "TCP", 80)
            .external_traffic_policy("Local")
            .build(),
    );
    s.sync();
    let np = s.port("default", "np", "a");
    assert_eq!((np.internal_traffic_policy, np.external_traffic_policy), (TrafficPolicy::Local, TrafficPolicy::Local));
    assert_eq!(s.port("default", "ext", "a").external_traffic_policy, TrafficPolicy::Local);
    assert_eq!(s.port("default", "plain", "a").external_traffic_policy, TrafficPolicy::Cluster);
}

#[test]
fn health_check_node_port_only_for_load_balancer_with_local_policy() {
    let mut s = Scenario::cluster();
    let lb = |name: &str, policy: &str| {
        service("default", name)
            .type_("LoadBalancer")
            .cluster_ip(if name == "local" { "10.96.0.1" } else { "10.96.0.2" })
            .port("a", "TCP", 80)
            .external_traffic_policy(policy)
            .health_check_node_port(32000)
            .build()
    };
    s.service(lb("local", "Local")).service(lb("cluster", "Cluster")).sync();
    assert_eq!(s.port("default", "local", "a").health_check_node_port, Some(32000));
    assert_eq!(s.port("default", "cluster", "a").health_check_node_port, None);
}

#[test]
fn session_affinity_defaults_to_three_hours_and_keeps_an_explicit_timeout() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "a").cluster_ip("10.96.0.1").port("p", "TCP", 80).session_affinity("ClientIP", None).build(),
    );
    s.service(
        service("default", "b")
            .cluster_ip("10.96.0.2")
            .port("p", "TCP", 80)
            .session_affinity("ClientIP", Some(60))
            .build(),
    );
    s.service(
        service("default", "c").cluster_ip("10.96.0.3").port("p", "TCP", 80).session_affinity("None", None).build(),
    );
    s.sync();
    assert_eq!(s.port("default", "a", "p").session_affinity, Some(SessionAffinity { timeout_seconds: 10800 }));
    assert_eq!(s.port("default", "b", "p").session_affinity, Some(SessionAffinity { timeout_seconds: 60 }));
    assert_eq!(s.port("default", "c", "p").session_affinity, None);
}

#[test]
fn slices_of_one_service_merge_by_service_name_label() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.slice(slice("default", "web-1", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.1.0.1")).build());
    s.slice(slice("default", "web-2", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.1.0.2")).build());
    s.slice(slice("default", "other-1", "other").port("http", "TCP", 8080).endpoint(Ep::new("10.1.0.3")).build());
    s.sync();
    assert_eq!(addrs(&s.port("default", "web", "http").cluster_endpoints), ["10.1.0.1:8080", "10.1.0.2:8080"]);
}

#[test]
fn endpoints_match_service_ports_by_name_and_protocol() {
    let mut s = Scenario::cluster();
    s.service(
        service("default", "dns").cluster_ip("10.96.0.53").port("dns", "UDP", 53).port("dns-tcp", "TCP", 53).build(),
    );
    s.slice(
        slice("default", "dns-1", "dns")
            .port("dns", "UDP", 5353)
            .port("dns-tcp", "TCP", 5354)
            .port("dns", "TCP", 9999)
            .endpoint(Ep::new("10.1.0.1"))
            .build(),
    );
    s.sync();
    assert_eq!(addrs(&s.port("default", "dns", "dns").cluster_endpoints), ["10.1.0.1:5353"]);
    assert_eq!(addrs(&s.port("default", "dns", "dns-tcp").cluster_endpoints), ["10.1.0.1:5354"]);
}

#[test]
fn an_address_in_two_slices_counts_once_and_the_ready_copy_wins() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "web-1", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.1.0.1").not_ready()).build(),
    );
    s.slice(slice("default", "web-2", "web").port("http", "TCP", 8080).endpoint(Ep::new("10.1.0.1")).build());
    s.sync();
    let eps = &s.port("default", "web", "http").cluster_endpoints;
    assert_eq!(addrs(eps), ["10.1.0.1:8080"]);
    assert!(eps[0].ready);
}

#[test]
fn missing_conditions_mean_ready_and_serving() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "web-1", "web")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.1.0.1").no_conditions())
            .build(),
    );
    s.sync();
    let ep = &s.port("default", "web", "http").cluster_endpoints[0];
    assert!(ep.ready && ep.serving && !ep.terminating);
}

#[test]
fn ipv6_slice_endpoints_stay_out_of_the_ipv4_port() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "web-6", "web")
            .address_type("IPv6")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("fd01::1"))
            .build(),
    );
    s.sync();
    assert!(s.port("default", "web", "http").cluster_endpoints.is_empty());
}

#[test]
fn external_name_headless_and_other_proxy_services_are_ignored() {
    let mut s = Scenario::cluster();
    s.service(service("default", "ext").type_("ExternalName").port("a", "TCP", 80).build());
    s.service(service("default", "headless").cluster_ip("None").port("a", "TCP", 80).build());
    s.service(
        service("default", "theirs")
            .cluster_ip("10.96.0.9")
            .port("a", "TCP", 80)
            .label("service.kubernetes.io/service-proxy-name", "other")
            .build(),
    );
    s.sync();
    assert!(s.state().ipv4.service_ports.is_empty());
    let ignored = |s: &Scenario| -> Vec<String> {
        s.state().ignored.iter().map(|(name, reason)| format!("{name}: {reason}")).collect()
    };
    assert_eq!(
        ignored(&s),
        [
            "default/ext: type ExternalName (DNS only)",
            "default/headless: headless (clusterIP: None)",
            "default/theirs: owned by service proxy \"other\" (label service.kubernetes.io/service-proxy-name)"
        ]
    );
    // Served again, or gone: no longer listed.
    s.service(service("default", "theirs").cluster_ip("10.96.0.9").port("a", "TCP", 80).build());
    s.delete(Kind::Service, "default", "headless").sync();
    assert_eq!(ignored(&s), ["default/ext: type ExternalName (DNS only)"]);
    assert_eq!(s.state().ipv4.service_ports.len(), 1);
}

#[test]
fn a_service_that_becomes_headless_loses_its_rules() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("a", "TCP", 80).build());
    s.sync();
    s.service(service("default", "web").cluster_ip("None").port("a", "TCP", 80).build());
    let changes = s.sync();
    assert!(s.state().ipv4.service_ports.is_empty());
    assert_eq!(changes.service_ports.len(), 1);
}

#[test]
fn headless_and_other_proxy_slices_and_fqdn_slices_contribute_nothing() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "a", "web")
            .port("http", "TCP", 1)
            .endpoint(Ep::new("10.1.0.1"))
            .label("service.kubernetes.io/headless", "")
            .build(),
    );
    s.slice(
        slice("default", "b", "web")
            .port("http", "TCP", 1)
            .endpoint(Ep::new("10.1.0.2"))
            .label("service.kubernetes.io/service-proxy-name", "x")
            .build(),
    );
    s.slice(
        slice("default", "c", "web")
            .address_type("FQDN")
            .port("http", "TCP", 1)
            .endpoint(Ep::new("db.example.com"))
            .build(),
    );
    s.sync();
    assert!(s.port("default", "web", "http").cluster_endpoints.is_empty());
}

#[test]
fn legacy_endpoints_serve_a_service_without_selector() {
    use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints};
    let eps = Endpoints {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some("default".into()),
            name: Some("db".into()),
            ..Default::default()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress { ip: "10.1.0.1".into(), ..Default::default() }]),
            not_ready_addresses: Some(vec![EndpointAddress { ip: "10.1.0.2".into(), ..Default::default() }]),
            ports: Some(vec![EndpointPort { name: Some("pg".into()), port: 5432, ..Default::default() }]),
        }]),
    };
    let mut s = Scenario::standalone();
    s.service(service("default", "db").cluster_ip("10.96.0.5").port("pg", "TCP", 5432).build());
    s.endpoints(eps);
    s.sync();
    assert_eq!(addrs(&s.port("default", "db", "pg").cluster_endpoints), ["10.1.0.1:5432"]);
    s.delete(Kind::Endpoints, "default", "db").sync();
    assert!(s.port("default", "db", "pg").cluster_endpoints.is_empty());
}

#[test]
fn this_nodes_endpoints_are_local_by_node_name() {
    let mut s = Scenario::cluster();
    s.service(service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build());
    s.slice(
        slice("default", "web-1", "web")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.1.0.1").node("node-a"))
            .endpoint(Ep::new("10.1.0.2").node("node-b"))
            .build(),
    );
    s.sync();
    let port = s.port("default", "web", "http");
    assert_eq!(addrs(&port.local_endpoints), ["10.1.0.1:8080"]);
    assert!(port.cluster_endpoints[0].local && !port.cluster_endpoints[1].local);
}

#[test]
fn the_scheduler_annotation_and_the_nodes_pod_cidrs_are_carried() {
    let mut svc = service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build();
    svc.metadata.annotations = Some([("kproxy.io/scheduler".to_owned(), "rr".to_owned())].into());
    let mut n = node("node-a").build();
    n.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.244.1.0/24".into(), "fd00:10:244:1::/64".into()]);
    let mut s = Scenario::cluster();
    s.service(svc).node(n).sync();
    assert_eq!(s.port("default", "web", "http").scheduler, Some(kproxy_model::Scheduler::Rr));
    let cidrs: Vec<String> = s.state().node.pod_cidrs.iter().map(|c| c.to_string()).collect();
    assert_eq!(cidrs, ["10.244.1.0/24", "fd00:10:244:1::/64"]);
}

#[test]
fn weights_and_health_check_annotations_are_carried() {
    let mut svc = service("default", "web").cluster_ip("10.96.0.10").port("http", "TCP", 80).build();
    svc.metadata.annotations = Some(
        [
            ("kproxy.io/weights", "10.1.0.1=3, 10.1.0.2=0"),
            ("kproxy.io/health-check", "http"),
            ("kproxy.io/health-check-path", "/ready"),
            ("kproxy.io/health-check-interval", "500ms"),
            ("kproxy.io/health-check-rise", "1"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    let mut s = Scenario::cluster();
    s.service(svc).sync();
    let port = s.port("default", "web", "http");
    assert_eq!(port.weight_of("10.1.0.1".parse().unwrap()), 3);
    assert_eq!(port.weight_of("10.1.0.2".parse().unwrap()), 0);
    assert_eq!(port.weight_of("10.1.0.9".parse().unwrap()), 1, "unlisted endpoints weigh 1");
    let check = port.health_check.clone().expect("a health check");
    assert_eq!(check.probe, kproxy_model::Probe::Http { path: "/ready".into() });
    assert_eq!(check.interval, std::time::Duration::from_millis(500));
    assert_eq!(
        (check.timeout, check.rise, check.fall, check.port),
        (std::time::Duration::from_millis(500), 1, 3, None)
    );
}
