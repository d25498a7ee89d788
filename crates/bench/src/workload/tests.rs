//! The workload generator: counts, determinism, addressing, manifests.

use std::collections::{BTreeMap, BTreeSet};

use kproxy_model::{FrontendKind, IpFamily, Protocol, TrafficPolicy};

use super::*;

fn classes(spec: &Spec) -> BTreeMap<Class, usize> {
    let mut out = BTreeMap::new();
    for i in 0..spec.services {
        *out.entry(spec.class(i)).or_default() += 1;
    }
    out
}

#[test]
fn the_mix_is_sixty_ten_twenty_ten() {
    let counts = classes(&Spec::new(1000, 10));
    assert_eq!(counts[&Class::ClusterTcp], 600);
    assert_eq!(counts[&Class::ClusterUdp], 100);
    assert_eq!(counts[&Class::NodePort], 200);
    assert_eq!(counts[&Class::LoadBalancer], 100);
}

#[test]
fn the_state_has_one_port_per_service_with_all_its_endpoints() {
    let spec = Spec::new(200, 10);
    let mut builder = spec.fold();
    let changes = builder.take_changes();
    let state = builder.state();
    assert_eq!(state.ipv4.service_ports.len(), 200);
    assert_eq!(changes.service_ports.len(), 200);
    assert!(state.ipv6.service_ports.is_empty());
    assert!(state.node.eligible);
    for port in state.ipv4.service_ports.values() {
        assert_eq!(port.cluster_endpoints.len(), 10, "{}", port.name);
    }
    let udp = state.ipv4.service_ports.values().filter(|p| p.name.protocol == Protocol::Udp).count();
    assert_eq!(udp, 20);
    // Twenty UDP frontends appear with endpoints: the cold sync's conntrack work.
    assert_eq!(changes.stale_udp_frontends.len(), 20);
}

#[test]
fn load_balancers_are_local_with_one_local_endpoint_and_every_frontend_is_unique() {
    let spec = Spec::new(1000, 10);
    let mut builder = spec.fold();
    builder.take_changes();
    let mut frontends = BTreeSet::new();
    for port in builder.state().ipv4.service_ports.values() {
        for f in &port.frontends {
            assert!(frontends.insert((f.ip, port.name.protocol, f.port)), "{f} twice");
        }
        if port.frontends.iter().any(|f| f.kind == FrontendKind::LoadBalancerIp) {
            assert_eq!(port.external_traffic_policy, TrafficPolicy::Local);
            assert_eq!(port.local_endpoints.len(), 1, "{}", port.name);
            assert!(port.node_port.is_some());
        }
    }
    // 1000 cluster IPs, 300 node ports, 100 load-balancer IPs.
    assert_eq!(frontends.len(), 1400);
}

#[test]
fn generation_is_deterministic() {
    let a = Spec::new(300, 7);
    let b = Spec::new(300, 7);
    for i in [0, 1, 3, 8, 299] {
        assert_eq!(a.service(i), b.service(i));
        assert_eq!(a.slice(i, None), b.slice(i, None));
        assert_eq!(a.slice(i, Some(4)), b.slice(i, Some(4)));
    }
    let mut x = a.fold();
    let mut y = b.fold();
    assert_eq!(x.take_changes(), y.take_changes());
    assert_eq!(x.state(), y.state());
}

#[test]
fn a_change_replaces_exactly_one_endpoint_of_one_service() {
    let spec = Spec::new(100, 10);
    let mut builder = spec.fold();
    builder.take_changes();
    let i = spec.change_target(0, true);
    assert_eq!(spec.class(i), Class::ClusterTcp);
    let before = builder.state().clone();
    builder.apply(spec.change_event(i, 0));
    let changes = builder.take_changes();
    assert_eq!(changes.service_ports.len(), 1);
    let (family, name) = changes.service_ports.iter().next().expect("one change");
    assert_eq!((*family, &*name.service.name), (IpFamily::V4, spec.name(i).as_str()));
    let old = &before.service_port(IpFamily::V4, name).expect("existed").cluster_endpoints;
    let new = &builder.state().service_port(IpFamily::V4, name).expect("exists").cluster_endpoints;
    assert_eq!(old.iter().filter(|e| !new.contains(e)).count(), 1);
}

#[test]
fn change_targets_are_distinct_for_the_first_n_changes() {
    let spec = Spec::new(10_000, 10);
    let targets: BTreeSet<usize> = (0..1000).map(|k| spec.change_target(k, false)).collect();
    assert_eq!(targets.len(), 1000);
}

#[test]
fn a_first_packet_workload_leads_the_first_and_last_service_to_the_pod() {
    let pod: Ipv4Addr = "10.244.1.10".parse().expect("literal");
    let spec = Spec { services: 50, endpoints: 10, pod: Some(pod) };
    let mut builder = spec.fold();
    builder.take_changes();
    let ports: Vec<_> = builder.state().ipv4.service_ports.values().cloned().collect();
    for port in [ports.first(), ports.last()].into_iter().flatten() {
        let endpoints: Vec<String> = port.cluster_endpoints.iter().map(|e| e.addr().to_string()).collect();
        assert_eq!(endpoints, ["10.244.1.10:8080"]);
        assert_eq!(port.name.protocol, Protocol::Tcp);
    }
    assert_eq!(ports[1].cluster_endpoints.len(), 10);
}

#[test]
fn addressing_holds_100k_services_of_10_endpoints() {
    let spec = Spec::new(100_000, 10);
    spec.check().expect("fits");
    assert_eq!(spec.cluster_ip(99_999).to_string(), "10.97.134.160");
    assert!(Spec::new(MAX_SERVICES + 1, 10).check().is_err());
    assert!(Spec::new(10, 0).check().is_err());
}

#[test]
fn manifests_parse_back_into_the_same_objects() {
    let spec = Spec::new(12, 3);
    let dir = tempfile::tempdir().expect("a temporary folder");
    spec.write_manifests(dir.path()).expect("written");
    let text = std::fs::read_to_string(dir.path().join("services-000.yaml")).expect("read");
    assert_eq!(text.matches("kind: Service\n").count(), 12, "{text}");
    assert_eq!(text.matches("kind: EndpointSlice\n").count(), 12);
    let first = text.split("---\n").next().expect("a document");
    let parsed: k8s_openapi::api::core::v1::Service = serde_saphyr::from_str(first).expect("valid YAML");
    assert_eq!(parsed, spec.service(0));
    let cluster = std::fs::read_to_string(dir.path().join("cluster.yaml")).expect("read");
    assert!(cluster.contains("kind: Node") && cluster.contains("kind: ServiceCIDR") && cluster.contains(SERVICE_CIDR));
}
