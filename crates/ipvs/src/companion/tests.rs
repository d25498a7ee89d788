use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{
    Endpoint, Frontend, FrontendKind, IpFamily, IpNet, Protocol, ProxyState, ServiceName, ServicePort, ServicePortName,
    TrafficPolicy,
};
use kproxy_nftables::render;

use super::*;
use crate::{PlanConfig, plan};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn ep(addr: &str, local: bool) -> Endpoint {
    Endpoint { ip: ip(addr), port: 8080, ready: true, serving: true, terminating: false, local }
}

/// default/`name` on cluster IP `cluster_ip`:80 with these endpoints.
fn port(name: &str, cluster_ip: &str, endpoints: Vec<Endpoint>) -> ServicePort {
    let local = endpoints.iter().filter(|e| e.local).cloned().collect();
    ServicePort {
        name: ServicePortName::new(ServiceName::new("default", name), "http", Protocol::Tcp),
        family: IpFamily::V4,
        port: 80,
        node_port: None,
        frontends: vec![Frontend::new(FrontendKind::ClusterIp, ip(cluster_ip), 80)],
        load_balancer_source_ranges: None,
        internal_traffic_policy: TrafficPolicy::Cluster,
        external_traffic_policy: TrafficPolicy::Cluster,
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

fn with_lb(mut sp: ServicePort, lb: &str, policy: TrafficPolicy) -> ServicePort {
    sp.frontends.push(Frontend::new(FrontendKind::LoadBalancerIp, ip(lb), 80));
    sp.external_traffic_policy = policy;
    sp
}

fn state(ports: impl IntoIterator<Item = ServicePort>) -> ProxyState {
    let mut state = ProxyState::default();
    state.node.node_port_addresses = vec![ip("192.168.77.1")];
    for sp in ports {
        state.family_mut(sp.family).service_ports.insert(sp.name.clone(), Arc::new(sp));
    }
    state
}

fn companion(state: &ProxyState) -> Table {
    let config = kproxy_nftables::PlanConfig::default();
    table(state, &plan(state, &PlanConfig::default()), IpFamily::V4, &config)
}

fn elements(table: &Table, set: &str) -> Vec<String> {
    let Some(elements) = table.elements.get(set) else { return Vec::new() };
    elements
        .iter()
        .map(|(key, data)| {
            let key: Vec<String> = key.iter().map(|a| format!("{a:?}")).collect();
            match data {
                Some(data) => format!("{} : {data:?}", key.join(" . ")),
                None => key.join(" . "),
            }
        })
        .collect()
}

#[test]
fn a_frontend_without_any_endpoint_is_rejected_and_one_without_allowed_endpoints_dropped() {
    let remote = ep("10.244.2.10", false);
    let lonely = port("lonely", "10.96.0.11", vec![]);
    let local_only = with_lb(port("web", "10.96.0.10", vec![remote]), "198.51.100.1", TrafficPolicy::Local);
    let table = companion(&state([lonely, local_only]));
    assert_eq!(
        elements(&table, NO_ENDPOINTS),
        vec![
            "Addr(10.96.0.11) . Proto(Tcp) . Port(80) : Verdict(Goto(\"reject-chain\"))",
            "Addr(198.51.100.1) . Proto(Tcp) . Port(80) : Verdict(Drop)",
        ]
    );
    // Local traffic keeps its source: no masquerade for the LB IP.
    assert!(elements(&table, MASQUERADE).is_empty());
    assert_eq!(elements(&table, CLUSTER_IPS), vec!["Addr(10.96.0.10)", "Addr(10.96.0.11)"]);
    assert_eq!(elements(&table, SERVED).len(), 3);
}

#[test]
fn external_cluster_policy_frontends_masquerade_and_source_ranges_filter() {
    let mut sp =
        with_lb(port("web", "10.96.0.10", vec![ep("10.244.1.10", true)]), "198.51.100.1", TrafficPolicy::Cluster);
    sp.load_balancer_source_ranges = Some(vec!["203.0.113.0/24".parse::<IpNet>().unwrap()]);
    let table = companion(&state([sp]));
    assert_eq!(elements(&table, MASQUERADE), vec!["Addr(198.51.100.1) . Proto(Tcp) . Port(80)"]);
    assert_eq!(elements(&table, FIREWALLED), vec!["Addr(198.51.100.1) . Proto(Tcp) . Port(80)"]);
    assert_eq!(
        elements(&table, ALLOWED_SOURCES),
        vec!["Addr(198.51.100.1) . Proto(Tcp) . Port(80) . Net(203.0.113.0/24)"]
    );
    assert_eq!(elements(&table, HAIRPIN), vec!["Addr(10.244.1.10) . Addr(10.244.1.10)"]);
    assert!(elements(&table, NO_ENDPOINTS).is_empty());
}

#[test]
fn the_rules_run_before_ipvs_in_both_hooks_and_masquerade_after_it() {
    let table = companion(&state([port("web", "10.96.0.10", vec![ep("10.244.1.10", true)])]));
    let text: String = table
        .chains
        .values()
        .map(|c| format!("chain {} {:?}\n{}", c.name, c.base, render::chain(IpFamily::V4, c)))
        .collect();
    insta::assert_snapshot!(text);
}

#[test]
fn an_unknown_table_is_replaced_whole_and_a_known_one_changes_by_elements() {
    let before = companion(&state([port("web", "10.96.0.10", vec![ep("10.244.1.10", true)])]));
    let ops_first = ops(None, &before);
    assert_eq!(ops_first[..3], [Op::AddTable, Op::DeleteTable, Op::AddTable]);

    assert!(ops(Some(&before), &before).is_empty(), "no change, no operation");

    let after = companion(&state([port("web", "10.96.0.10", vec![])]));
    let changes = ops(Some(&before), &after);
    let described: Vec<String> = changes
        .iter()
        .map(|op| match op {
            Op::DeleteElements { set, keys } => format!("delete {set} x{}", keys.len()),
            Op::AddElements { set, elements } => format!("add {set} x{}", elements.len()),
            other => panic!("only element changes expected, got {other:?}"),
        })
        .collect();
    assert_eq!(described, vec!["delete hairpin x1", "add no-endpoints x1"]);

    let config = kproxy_nftables::PlanConfig { masquerade_all: true, ..Default::default() };
    let state = state([port("web", "10.96.0.10", vec![])]);
    let restructured = table(&state, &plan(&state, &PlanConfig::default()), IpFamily::V4, &config);
    assert_eq!(ops(Some(&after), &restructured)[..3], [Op::AddTable, Op::DeleteTable, Op::AddTable]);
}

#[test]
fn in_cluster_clients_of_a_local_frontend_are_marked_for_its_mark_servers() {
    let remote = ep("10.244.2.10", false);
    let config = kproxy_nftables::PlanConfig {
        local_detector: kproxy_nftables::LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().unwrap()]),
        ..Default::default()
    };
    let before = state([port("web", "10.96.0.10", vec![remote.clone()])]);
    let old = table(&before, &plan(&before, &PlanConfig::default()), IpFamily::V4, &config);
    let after = state([with_lb(port("web", "10.96.0.10", vec![remote]), "198.51.100.1", TrafficPolicy::Local)]);
    let planned = plan(&after, &PlanConfig::default());
    let new = table(&after, &planned, IpFamily::V4, &config);
    let marks = planned.short_circuits.values().next().expect("the LB IP short-circuits");
    let pods = mark_chain(marks.pods);
    assert_eq!(
        elements(&new, SHORT_CIRCUIT_PODS),
        vec![format!("Addr(198.51.100.1) . Proto(Tcp) . Port(80) : Verdict(Goto({pods:?}))")]
    );
    assert_eq!(render::chain(IpFamily::V4, &new.chains[&pods]), format!("meta mark set {:#x} accept\n", marks.pods));
    let input = render::chain(IpFamily::V4, &new.chains[FILTER_INPUT]);
    assert!(
        input.contains("ip saddr { 10.244.0.0/16 } ip daddr . meta l4proto . th dport vmap @short-circuit-pods"),
        "{input}"
    );
    // External clients still meet the drop: no local endpoint.
    assert_eq!(elements(&new, NO_ENDPOINTS), vec!["Addr(198.51.100.1) . Proto(Tcp) . Port(80) : Verdict(Drop)"]);

    // Incremental: the mark chains come with their elements, no table replace.
    let changes = ops(Some(&old), &new);
    assert!(!changes.contains(&Op::DeleteTable), "{changes:?}");
    let added: Vec<String> = changes
        .iter()
        .filter_map(|op| match op {
            Op::AddChain(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        added,
        vec![mark_chain(marks.pods), mark_chain(marks.node)]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    // And back: elements first, then the chains they pointed to.
    let back = ops(Some(&new), &old);
    let first_delete_chain = back.iter().position(|op| matches!(op, Op::DeleteChain(_))).expect("mark chains deleted");
    assert!(back[..first_delete_chain].iter().all(|op| matches!(op, Op::DeleteElements { .. })), "{back:?}");
}
