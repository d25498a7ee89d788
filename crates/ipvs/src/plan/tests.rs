use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{
    Endpoint, Frontend, FrontendKind, IpFamily, Protocol, ProxyState, Scheduler, ServiceName, ServicePort,
    ServicePortName, SessionAffinity, TrafficPolicy,
};

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn ep(addr: &str, port: u16, local: bool) -> Endpoint {
    Endpoint { ip: ip(addr), port, ready: true, serving: true, terminating: false, local }
}

/// default/`name`: cluster IP 10.96.0.10:80, one local and one remote
/// endpoint on 8080.
fn port(name: &str, protocol: Protocol) -> ServicePort {
    let local = ep("10.244.1.10", 8080, true);
    let remote = ep("10.244.2.10", 8080, false);
    ServicePort {
        name: ServicePortName::new(ServiceName::new("default", name), "http", protocol),
        family: IpFamily::V4,
        port: 80,
        node_port: None,
        frontends: vec![Frontend::new(FrontendKind::ClusterIp, ip("10.96.0.10"), 80)],
        load_balancer_source_ranges: None,
        internal_traffic_policy: TrafficPolicy::Cluster,
        external_traffic_policy: TrafficPolicy::Cluster,
        session_affinity: None,
        scheduler: None,
        weights: Default::default(),
        health_check: None,
        health_check_node_port: None,
        warnings: Vec::new(),
        cluster_endpoints: vec![local.clone(), remote],
        local_endpoints: vec![local],
    }
}

fn state(ports: impl IntoIterator<Item = ServicePort>) -> ProxyState {
    let mut state = ProxyState::default();
    for sp in ports {
        state.family_mut(sp.family).service_ports.insert(sp.name.clone(), Arc::new(sp));
    }
    state
}

fn key(protocol: Protocol, addr: &str, port: u16) -> ServerKey {
    ServerKey::new(protocol, ip(addr), port)
}

fn dests(server: &VirtualServer) -> Vec<String> {
    server.destinations.iter().map(|d| format!("{}/{}", d.socket_addr(), d.weight)).collect()
}

/// web with a node port, an external IP and a load-balancer IP.
fn exposed() -> ServicePort {
    let mut sp = port("web", Protocol::Tcp);
    sp.node_port = Some(30080);
    sp.frontends.extend([
        Frontend::new(FrontendKind::ExternalIp, ip("203.0.113.7"), 80),
        Frontend::new(FrontendKind::LoadBalancerIp, ip("198.51.100.1"), 80),
        Frontend::new(FrontendKind::NodePort, ip("192.168.77.1"), 30080),
    ]);
    sp.frontends.sort();
    sp
}

#[test]
fn every_frontend_kind_gets_a_virtual_server() {
    let plan = plan(&state([exposed()]), &PlanConfig::default());
    let keys: Vec<ServerKey> = plan.servers.keys().copied().collect();
    assert_eq!(
        keys,
        vec![
            key(Protocol::Tcp, "10.96.0.10", 80),
            key(Protocol::Tcp, "192.168.77.1", 30080),
            key(Protocol::Tcp, "198.51.100.1", 80),
            key(Protocol::Tcp, "203.0.113.7", 80),
        ]
    );
    for server in plan.servers.values() {
        assert_eq!(server.scheduler, "rr");
        assert_eq!(server.persistence, None);
        assert_eq!(dests(server), ["10.244.1.10:8080/1", "10.244.2.10:8080/1"]);
    }
    assert!(plan.rejected.is_empty());
}

#[test]
fn addresses_are_service_ips_but_not_node_port_addresses() {
    let plan = plan(&state([exposed()]), &PlanConfig::default());
    let addresses: Vec<IpAddr> = plan.addresses.into_iter().collect();
    assert_eq!(addresses, [ip("10.96.0.10"), ip("198.51.100.1"), ip("203.0.113.7")]);
}

#[test]
fn configured_node_addresses_replace_the_node_port_frontends() {
    let config = PlanConfig {
        node_port_addresses: Some(vec![ip("10.0.0.5"), ip("fd00::5"), ip("10.0.0.6")]),
        ..Default::default()
    };
    let plan = plan(&state([exposed()]), &config);
    let node_ports: Vec<ServerKey> = plan.servers.keys().filter(|k| k.port == 30080).copied().collect();
    assert_eq!(node_ports, [key(Protocol::Tcp, "10.0.0.5", 30080), key(Protocol::Tcp, "10.0.0.6", 30080)]);
    assert!(!plan.addresses.contains(&ip("10.0.0.5")));
}

#[test]
fn local_external_policy_sends_external_frontends_to_local_endpoints_only() {
    let mut sp = exposed();
    sp.external_traffic_policy = TrafficPolicy::Local;
    let plan = plan(&state([sp]), &PlanConfig::default());
    for (key, server) in &plan.servers {
        // In-cluster clients (the mark servers) use every endpoint.
        let want: &[&str] = match key.addr == ip("10.96.0.10") || key.mark.is_some() {
            true => &["10.244.1.10:8080/1", "10.244.2.10:8080/1"],
            false => &["10.244.1.10:8080/1"],
        };
        assert_eq!(dests(server), want, "{key}");
    }
}

#[test]
fn in_cluster_clients_of_local_external_frontends_get_mark_servers_with_every_endpoint() {
    let mut sp = exposed();
    sp.external_traffic_policy = TrafficPolicy::Local;
    let first = plan(&state([sp.clone()]), &PlanConfig::default());
    let external: Vec<ServerKey> =
        first.servers.keys().filter(|k| k.mark.is_none() && k.addr != ip("10.96.0.10")).copied().collect();
    assert_eq!(
        first.short_circuits.keys().copied().collect::<Vec<_>>(),
        external,
        "every external frontend, no cluster IP"
    );
    let mut marks = std::collections::BTreeSet::new();
    for (frontend, short) in &first.short_circuits {
        assert_eq!(short.node, short.pods | 0x4000, "the node's mark adds the masquerade bit");
        assert_eq!(short.pods & 0x4000, 0);
        assert_eq!(short.pods & 0xffff_0000, 0x4b50_0000);
        assert!(marks.insert(short.pods), "marks are unique");
        assert!(is_short_circuit_mark(short.pods, 14) && is_short_circuit_mark(short.node, 14));
        for mark in [short.pods, short.node] {
            let server = &first.servers[&ServerKey { mark: Some(mark), ..*frontend }];
            assert_eq!(server.scheduler, first.servers[frontend].scheduler);
        }
    }
    // Stable: the same frontends get the same marks, whatever else changes.
    let mut other = port("other", Protocol::Udp);
    other.frontends = vec![Frontend::new(FrontendKind::ClusterIp, ip("10.96.0.99"), 53)];
    let again = plan(&state([other, sp.clone()]), &PlanConfig::default());
    assert_eq!(again.short_circuits, first.short_circuits);
    // Another masquerade bit: marks keep clear of it.
    let config = PlanConfig { masquerade_bit: 22, ..PlanConfig::default() };
    let shifted = plan(&state([sp.clone()]), &config);
    for short in shifted.short_circuits.values() {
        assert_eq!(short.pods & (1 << 22), 0);
        assert_eq!(short.node, short.pods | (1 << 22));
    }
    assert!(!is_short_circuit_mark(0x4000, 14) && !is_short_circuit_mark(0x4b50_0000, 14));
    assert!(!is_short_circuit_mark(0x1234, 14));
    // Without any endpoint there is nothing to short-circuit to (it is rejected).
    sp.cluster_endpoints.clear();
    sp.local_endpoints.clear();
    assert!(plan(&state([sp]), &PlanConfig::default()).short_circuits.is_empty());
}

#[test]
fn local_internal_policy_sends_the_cluster_ip_to_local_endpoints_only() {
    let mut sp = exposed();
    sp.internal_traffic_policy = TrafficPolicy::Local;
    let plan = plan(&state([sp]), &PlanConfig::default());
    for (key, server) in &plan.servers {
        let want: &[&str] = match key.addr == ip("10.96.0.10") {
            true => &["10.244.1.10:8080/1"],
            false => &["10.244.1.10:8080/1", "10.244.2.10:8080/1"],
        };
        assert_eq!(dests(server), want, "{key}");
    }
}

#[test]
fn no_endpoints_still_plans_an_empty_virtual_server() {
    let mut sp = port("web", Protocol::Udp);
    sp.cluster_endpoints.clear();
    sp.local_endpoints.clear();
    let plan = plan(&state([sp]), &PlanConfig::default());
    let server = &plan.servers[&key(Protocol::Udp, "10.96.0.10", 80)];
    assert!(server.destinations.is_empty());
}

#[test]
fn client_ip_affinity_becomes_persistence_on_the_whole_address() {
    let mut sp = port("web", Protocol::Tcp);
    sp.session_affinity = Some(SessionAffinity { timeout_seconds: 10800 });
    let mut v6 = port("web", Protocol::Tcp);
    v6.family = IpFamily::V6;
    v6.frontends = vec![Frontend::new(FrontendKind::ClusterIp, ip("fd00::10"), 80)];
    v6.session_affinity = Some(SessionAffinity { timeout_seconds: 60 });
    let plan = plan(&state([sp, v6]), &PlanConfig::default());
    let v4 = &plan.servers[&key(Protocol::Tcp, "10.96.0.10", 80)];
    assert_eq!((v4.persistence, v4.netmask()), (Some(10800), 32));
    let v6 = &plan.servers[&key(Protocol::Tcp, "fd00::10", 80)];
    assert_eq!((v6.persistence, v6.netmask()), (Some(60), 128));
}

#[test]
fn the_annotation_overrides_the_configured_default_scheduler() {
    let mut annotated = port("web", Protocol::Tcp);
    annotated.scheduler = Some(Scheduler::Sh);
    let mut plain = port("api", Protocol::Tcp);
    plain.frontends = vec![Frontend::new(FrontendKind::ClusterIp, ip("10.96.0.20"), 80)];
    let config = PlanConfig { default_scheduler: Some(Scheduler::Wlc), ..Default::default() };
    let plan = plan(&state([annotated, plain]), &config);
    assert_eq!(plan.servers[&key(Protocol::Tcp, "10.96.0.10", 80)].scheduler, "sh");
    assert_eq!(plan.servers[&key(Protocol::Tcp, "10.96.0.20", 80)].scheduler, "wlc");
}

#[test]
fn every_ipvs_scheduler_keeps_its_kernel_name() {
    for s in Scheduler::ALL {
        match s {
            Scheduler::Random | Scheduler::Twos => assert_eq!(ipvs_scheduler(s), None),
            _ => assert_eq!(ipvs_scheduler(s), Some(s.as_str())),
        }
    }
}

#[test]
fn a_scheduler_ipvs_lacks_plans_the_configured_default_else_rr() {
    let mut random = port("web", Protocol::Tcp);
    random.scheduler = Some(Scheduler::Random);
    let mut twos = port("api", Protocol::Tcp);
    twos.frontends = vec![Frontend::new(FrontendKind::ClusterIp, ip("10.96.0.20"), 80)];
    twos.scheduler = Some(Scheduler::Twos);
    let ports = || state([random.clone(), twos.clone()]);
    let config = PlanConfig { default_scheduler: Some(Scheduler::Wlc), ..Default::default() };
    let planned = plan(&ports(), &config);
    assert!(planned.rejected.is_empty(), "{:?}", planned.rejected);
    assert_eq!(planned.addresses.len(), 2, "both served");
    for vip in ["10.96.0.10", "10.96.0.20"] {
        assert_eq!(planned.servers[&key(Protocol::Tcp, vip, 80)].scheduler, "wlc", "{vip}");
    }
    // A default IPVS lacks (never passes startup) counts as unset: rr.
    let config = PlanConfig { default_scheduler: Some(Scheduler::Twos), ..Default::default() };
    let planned = plan(&ports(), &config);
    assert_eq!(planned.servers[&key(Protocol::Tcp, "10.96.0.10", 80)].scheduler, "rr");
}

#[test]
fn the_modes_support_names_the_configured_default_and_the_kernels_schedulers() {
    let support = PlanConfig { default_scheduler: Some(Scheduler::Sh), ..Default::default() }.support();
    assert_eq!((support.mode, support.default_scheduler), ("ipvs", Scheduler::Sh));
    assert!(!support.supports(Scheduler::Random) && !support.supports(Scheduler::Twos));
    assert!(support.supports(Scheduler::Lblcr) && support.supports(Scheduler::Mh));
    assert_eq!(PlanConfig::default().support().default_scheduler, Scheduler::Rr);
}

#[test]
fn weights_come_from_the_service_port() {
    let mut sp = port("web", Protocol::Tcp);
    sp.weights = [(ip("10.244.2.10"), 3)].into();
    let plan = plan(&state([sp]), &PlanConfig::default());
    assert_eq!(
        dests(&plan.servers[&key(Protocol::Tcp, "10.96.0.10", 80)]),
        ["10.244.1.10:8080/1", "10.244.2.10:8080/3"]
    );
}

#[test]
fn a_cluster_ip_claimed_as_another_services_external_ip_stays_with_its_owner() {
    let web = port("web", Protocol::Tcp);
    let mut thief = port("thief", Protocol::Tcp);
    thief.frontends = vec![
        Frontend::new(FrontendKind::ClusterIp, ip("10.96.0.90"), 80),
        Frontend::new(FrontendKind::ExternalIp, ip("10.96.0.10"), 80),
    ];
    thief.cluster_endpoints = vec![ep("10.244.2.99", 80, false)];
    // thief sorts before web, so it claims first and must lose anyway.
    let plan = plan(&state([web, thief]), &PlanConfig::default());
    assert_eq!(
        dests(&plan.servers[&key(Protocol::Tcp, "10.96.0.10", 80)]),
        ["10.244.1.10:8080/1", "10.244.2.10:8080/1"]
    );
    assert!(plan.servers.contains_key(&key(Protocol::Tcp, "10.96.0.90", 80)));
    let rejected: Vec<String> = plan.rejected.iter().map(ToString::to_string).collect();
    assert_eq!(
        rejected,
        [
            "default/thief:http/TCP (IPv4): ExternalIP frontend TCP 10.96.0.10:80 is already served by default/web:http/TCP (ClusterIP)"
        ]
    );
}

#[test]
fn the_same_state_gives_the_same_plan() {
    let s = state([exposed(), port("api", Protocol::Udp)]);
    assert_eq!(plan(&s, &PlanConfig::default()), plan(&s, &PlanConfig::default()));
}
