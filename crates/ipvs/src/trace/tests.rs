use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use kproxy_model::{
    Endpoint, Frontend, FrontendKind, IpFamily, Protocol, ProxyState, ServiceName, ServicePort, ServicePortName,
    TrafficPolicy,
};
use kproxy_nftables::LocalDetector;
use kproxy_nftables::trace::{Fate, Packet};

use super::trace;
use crate::{PlanConfig, companion, plan};

const NODE: &str = "192.168.77.1";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn ep(addr: &str, local: bool) -> Endpoint {
    Endpoint { ip: ip(addr), port: 8080, ready: true, serving: true, terminating: false, local }
}

/// default/`name`: cluster IP `cluster_ip`:80, node port 30080, these endpoints.
fn port(name: &str, cluster_ip: &str, endpoints: Vec<Endpoint>, external: TrafficPolicy) -> ServicePort {
    let local = endpoints.iter().filter(|e| e.local).cloned().collect();
    ServicePort {
        name: ServicePortName::new(ServiceName::new("default", name), "http", Protocol::Tcp),
        family: IpFamily::V4,
        port: 80,
        node_port: Some(30080),
        frontends: vec![
            Frontend::new(FrontendKind::ClusterIp, ip(cluster_ip), 80),
            Frontend::new(FrontendKind::NodePort, ip(NODE), 30080),
        ],
        load_balancer_source_ranges: None,
        internal_traffic_policy: TrafficPolicy::Cluster,
        external_traffic_policy: external,
        session_affinity: None,
        scheduler: None,
        weights: Default::default(),
        health_check: None,
        health_check_node_port: None,
        warnings: Vec::new(),
        cluster_endpoints: endpoints,
        local_endpoints: local,
    }
}

/// The fates of a connection from `from` (arriving on eth0 unless it is the
/// node's address) to `to`, through what the IPVS mode plans for `sp`.
fn fates(sp: ServicePort, from: &str, to: &str) -> Vec<Fate> {
    let mut state = ProxyState::default();
    state.node.node_port_addresses = vec![ip(NODE)];
    state.family_mut(IpFamily::V4).service_ports.insert(sp.name.clone(), Arc::new(sp));
    let config = kproxy_nftables::PlanConfig {
        local_detector: LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().expect("a CIDR")]),
        ..Default::default()
    };
    let planned = plan(&state, &PlanConfig::default());
    let table = companion::table(&state, &planned, IpFamily::V4, &config);
    let to: SocketAddr = to.parse().expect("test address");
    let from = ip(from);
    let iif = (from != ip(NODE)).then(|| "eth0".to_owned());
    let packet = Packet {
        saddr: from,
        daddr: to.ip(),
        protocol: Protocol::Tcp,
        dport: to.port(),
        iif,
        local_addresses: vec![ip(NODE)],
    };
    trace(&planned, &table, IpFamily::V4, &packet).fates()
}

fn dnat(endpoint: &str, masquerade: bool) -> Fate {
    Fate::Dnat { endpoint: endpoint.parse().expect("test address"), masquerade }
}

#[test]
fn a_pod_reaching_a_cluster_ip_gets_every_real_server_unmasqueraded() {
    let sp = port("web", "10.96.0.10", vec![ep("10.244.1.10", true), ep("10.244.2.10", false)], TrafficPolicy::Cluster);
    assert_eq!(
        fates(sp, "10.244.1.5", "10.96.0.10:80"),
        vec![dnat("10.244.1.10:8080", false), dnat("10.244.2.10:8080", false)]
    );
}

#[test]
fn a_client_outside_the_cluster_is_masqueraded_to_a_cluster_ip_and_a_node_port() {
    let sp = port("web", "10.96.0.10", vec![ep("10.244.2.10", false)], TrafficPolicy::Cluster);
    assert_eq!(fates(sp.clone(), "203.0.113.7", "10.96.0.10:80"), vec![dnat("10.244.2.10:8080", true)]);
    assert_eq!(fates(sp, "203.0.113.7", "192.168.77.1:30080"), vec![dnat("10.244.2.10:8080", true)]);
}

#[test]
fn a_frontend_without_endpoints_rejects() {
    let sp = port("web", "10.96.0.10", vec![], TrafficPolicy::Cluster);
    assert_eq!(fates(sp.clone(), "10.244.1.5", "10.96.0.10:80"), vec![Fate::Reject]);
    assert_eq!(fates(sp, "203.0.113.7", "192.168.77.1:30080"), vec![Fate::Reject]);
}

#[test]
fn a_port_the_cluster_ip_does_not_serve_rejects() {
    let sp = port("web", "10.96.0.10", vec![ep("10.244.2.10", false)], TrafficPolicy::Cluster);
    assert_eq!(fates(sp, "10.244.1.5", "10.96.0.10:81"), vec![Fate::Reject]);
}

#[test]
fn local_policy_node_port_drops_external_clients_without_a_local_endpoint_and_keeps_the_source_with_one() {
    let remote_only = port("web", "10.96.0.10", vec![ep("10.244.2.10", false)], TrafficPolicy::Local);
    assert_eq!(fates(remote_only.clone(), "203.0.113.7", "192.168.77.1:30080"), vec![Fate::Drop]);
    // In-cluster clients take the short-circuit mark server: every endpoint.
    assert_eq!(fates(remote_only, "10.244.1.5", "192.168.77.1:30080"), vec![dnat("10.244.2.10:8080", false)]);
    let with_local =
        port("web", "10.96.0.10", vec![ep("10.244.1.10", true), ep("10.244.2.10", false)], TrafficPolicy::Local);
    assert_eq!(fates(with_local, "203.0.113.7", "192.168.77.1:30080"), vec![dnat("10.244.1.10:8080", false)]);
}

#[test]
fn the_node_reaching_a_service_is_masqueraded() {
    let sp = port("web", "10.96.0.10", vec![ep("10.244.2.10", false)], TrafficPolicy::Cluster);
    assert_eq!(fates(sp, NODE, "10.96.0.10:80"), vec![dnat("10.244.2.10:8080", true)]);
}

#[test]
fn an_address_ipvs_does_not_serve_is_untouched() {
    let sp = port("web", "10.96.0.10", vec![ep("10.244.2.10", false)], TrafficPolicy::Cluster);
    assert_eq!(fates(sp, "203.0.113.7", "192.168.77.1:22"), vec![Fate::Untouched]);
}
