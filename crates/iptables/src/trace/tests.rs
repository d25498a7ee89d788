use std::net::IpAddr;

use kproxy_model::{IpFamily, Protocol};
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

use super::*;
use crate::{LocalDetector, PlanConfig, plan};

const NODE: &str = "192.168.77.1";
const POD: &str = "10.244.1.20";
const EXTERNAL: &str = "192.168.77.100";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal")
}

fn scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", NODE).build());
    s
}

fn config(detector: LocalDetector) -> PlanConfig {
    PlanConfig { local_detector: detector, ..PlanConfig::default() }
}

fn cluster_cidr() -> LocalDetector {
    LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().expect("literal")])
}

/// A new connection from a pod (on the bridge), the node, or outside.
fn packet(from: &str, to: &str) -> Packet {
    let to: SocketAddr = to.parse().expect("literal");
    let iif = match from {
        NODE => None,
        f if f.starts_with("10.244.") => Some("kpbr0".to_owned()),
        _ => Some("eth0".to_owned()),
    };
    Packet {
        saddr: ip(from),
        daddr: to.ip(),
        protocol: Protocol::Tcp,
        dport: to.port(),
        iif,
        local_addresses: vec![ip(NODE)],
    }
}

fn traced(s: &Scenario, config: &PlanConfig, from: &str, to: &str) -> Trace {
    let planned = plan(s.state(), IpFamily::V4, config, None);
    trace(&planned, &packet(from, to)).expect("traceable")
}

fn fates(s: &Scenario, from: &str, to: &str) -> Vec<Fate> {
    traced(s, &config(cluster_cidr()), from, to).fates()
}

fn dnat(endpoint: &str, masquerade: bool) -> Fate {
    Fate::Dnat { endpoint: endpoint.parse().expect("literal"), masquerade }
}

/// default/web: NodePort 30080 on 10.96.0.10:80, one local, one remote endpoint.
fn web(s: &mut Scenario, affinity: bool) {
    let svc = service("default", "web").type_("NodePort").cluster_ip("10.96.0.10").port("http", "TCP", 80);
    let svc = if affinity { svc.session_affinity("ClientIP", Some(60)) } else { svc };
    s.service(svc.node_port(30080).build());
    s.slice(
        slice("default", "web-1", "web")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.10").node("node-a"))
            .endpoint(Ep::new("10.244.2.10").node("node-b"))
            .build(),
    );
    s.sync();
}

/// default/shop: LoadBalancer 198.51.100.20:443, eTP Local, source ranges.
fn shop(s: &mut Scenario, endpoints: &[(&str, &str)]) {
    s.service(
        service("default", "shop")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.20")
            .port("https", "TCP", 443)
            .node_port(30443)
            .external_traffic_policy("Local")
            .load_balancer_ingress("198.51.100.20", None)
            .source_ranges(&["192.168.77.0/24", "10.244.0.0/16"])
            .build(),
    );
    let sl = endpoints.iter().fold(slice("default", "shop-1", "shop").port("https", "TCP", 8443), |sl, (ip, node)| {
        sl.endpoint(Ep::new(ip).node(node))
    });
    s.slice(sl.build());
    s.sync();
}

#[test]
fn a_pod_reaches_both_endpoints_of_a_cluster_ip_unmasqueraded() {
    let mut s = scenario();
    web(&mut s, false);
    assert_eq!(fates(&s, POD, "10.96.0.10:80"), [dnat("10.244.1.10:8080", false), dnat("10.244.2.10:8080", false)]);
}

#[test]
fn off_cluster_clients_of_a_cluster_ip_are_masqueraded_only_with_a_detector() {
    let mut s = scenario();
    web(&mut s, false);
    let both = |m| vec![dnat("10.244.1.10:8080", m), dnat("10.244.2.10:8080", m)];
    assert_eq!(fates(&s, EXTERNAL, "10.96.0.10:80"), both(true));
    assert_eq!(traced(&s, &config(LocalDetector::None), EXTERNAL, "10.96.0.10:80").fates(), both(false));
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    let mut s = scenario();
    web(&mut s, false);
    assert_eq!(
        fates(&s, "10.244.1.10", "10.96.0.10:80"),
        [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", false)]
    );
}

#[test]
fn node_ports_dnat_and_masquerade_under_cluster_policy() {
    let mut s = scenario();
    web(&mut s, false);
    let expected = [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", true)];
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30080"), expected);
    assert_eq!(fates(&s, NODE, "192.168.77.1:30080"), expected, "from the node itself");
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30081"), [Fate::Untouched]);
}

#[test]
fn a_service_without_endpoints_rejects_its_cluster_ip_and_node_port() {
    let mut s = scenario();
    s.service(
        service("default", "empty")
            .type_("NodePort")
            .cluster_ip("10.96.0.30")
            .port("p", "TCP", 80)
            .node_port(30030)
            .build(),
    );
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.30:80"), [Fate::Reject]);
    assert_eq!(fates(&s, NODE, "10.96.0.30:80"), [Fate::Reject], "from the node");
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30030"), [Fate::Reject]);
}

#[test]
fn local_policy_without_local_endpoints_drops_outside_traffic_and_short_circuits_pods() {
    let mut s = scenario();
    shop(&mut s, &[("10.244.2.30", "node-b")]);
    assert_eq!(fates(&s, EXTERNAL, "198.51.100.20:443"), [Fate::Drop]);
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30443"), [Fate::Drop]);
    assert_eq!(fates(&s, POD, "198.51.100.20:443"), [dnat("10.244.2.30:8443", false)], "pods use every endpoint");
    assert_eq!(fates(&s, NODE, "192.168.77.1:30443"), [dnat("10.244.2.30:8443", true)], "the node, masqueraded");
}

#[test]
fn local_policy_keeps_outside_clients_on_local_endpoints_unmasqueraded() {
    let mut s = scenario();
    shop(&mut s, &[("10.244.1.30", "node-a"), ("10.244.2.30", "node-b")]);
    assert_eq!(fates(&s, EXTERNAL, "198.51.100.20:443"), [dnat("10.244.1.30:8443", false)]);
}

#[test]
fn load_balancer_source_ranges_drop_other_sources() {
    let mut s = scenario();
    shop(&mut s, &[("10.244.1.30", "node-a")]);
    assert_eq!(fates(&s, "203.0.113.9", "198.51.100.20:443"), [Fate::Drop]);
    let t = traced(&s, &config(cluster_cidr()), "203.0.113.9", "198.51.100.20:443");
    assert!(t.branches[0].path.iter().any(|l| l.contains("KUBE-PROXY-FIREWALL")), "{:?}", t.branches[0].path);
    assert_eq!(fates(&s, EXTERNAL, "198.51.100.20:443"), [dnat("10.244.1.30:8443", false)], "a listed source");
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30443"), [dnat("10.244.1.30:8443", false)], "node ports: no ranges");
}

#[test]
fn affinity_shows_a_new_clients_random_pick_among_every_endpoint() {
    let mut s = scenario();
    web(&mut s, true);
    let t = traced(&s, &config(cluster_cidr()), POD, "10.96.0.10:80");
    assert_eq!(t.fates(), [dnat("10.244.1.10:8080", false), dnat("10.244.2.10:8080", false)]);
    assert!(t.branches.iter().all(|b| b.path.iter().any(|l| l.contains("-m recent") && l.contains("--set"))));
}

#[test]
fn the_path_names_each_rule_that_acted_in_hook_order() {
    let mut s = scenario();
    web(&mut s, false);
    let t = traced(&s, &config(cluster_cidr()), EXTERNAL, "10.96.0.10:80");
    let path = &t.branches[0].path;
    assert!(path[0].starts_with("nat: -A PREROUTING"), "{path:?}");
    assert!(path.iter().any(|l| l.starts_with("filter: -A KUBE-FORWARD") && l.contains("ACCEPT")), "{path:?}");
    assert!(path.last().is_some_and(|l| l.contains("MASQUERADE --random-fully")), "{path:?}");
}

#[test]
fn an_argument_the_tracer_does_not_know_is_an_error() {
    let mut s = scenario();
    web(&mut s, false);
    let mut planned = plan(s.state(), IpFamily::V4, &config(cluster_cidr()), None);
    planned.payload.nat.rules[0].args.insert(0, "--frobnicate".into());
    let err = trace(&planned, &packet(POD, "10.96.0.10:80")).expect_err("unknown argument");
    assert!(matches!(&err, TraceError::Unknown { arg, .. } if arg == "--frobnicate"), "{err}");
    planned.payload.nat.rules[0].args = vec!["-m".into(), "owner".into()];
    assert!(matches!(trace(&planned, &packet(POD, "10.96.0.10:80")), Err(TraceError::Unknown { .. })));
}

#[test]
fn a_partial_payload_is_refused() {
    let mut s = scenario();
    web(&mut s, false);
    let full = plan(s.state(), IpFamily::V4, &config(cluster_cidr()), None);
    let partial = plan(s.state(), IpFamily::V4, &config(cluster_cidr()), Some(&full.applied));
    assert_eq!(trace(&partial, &packet(POD, "10.96.0.10:80")), Err(TraceError::NotFull));
}

#[test]
fn a_jump_loop_or_to_an_undeclared_chain_is_an_error() {
    let mut s = scenario();
    web(&mut s, false);
    let mut planned = plan(s.state(), IpFamily::V4, &config(cluster_cidr()), None);
    planned.payload.nat.rules.push(Rule::new("KUBE-MARK-MASQ").jump("KUBE-SERVICES"));
    assert!(matches!(Tracer::new(&planned), Err(TraceError::Loop { .. })));
    planned.payload.nat.rules.last_mut().expect("pushed").args = vec!["-j".into(), "KUBE-NOWHERE".into()];
    assert!(matches!(Tracer::new(&planned), Err(TraceError::MissingChain { chain, .. }) if chain == "KUBE-NOWHERE"));
}

#[test]
fn localhost_node_ports_are_served_from_the_node_and_other_localnet_traffic_is_dropped() {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        node_port_addresses: kproxy_state::NodePortAddresses::Cidrs(vec![
            "127.0.0.0/8".parse().expect("literal"),
            "192.168.77.0/24".parse().expect("literal"),
        ]),
        host_addresses: vec![ip("127.0.0.1")],
        ..StateConfig::default()
    });
    s.node(node("node-a").address("InternalIP", NODE).build());
    web(&mut s, false);
    let config = config(cluster_cidr());
    let from_node = |to: &str| {
        let mut p = packet(NODE, to);
        p.saddr = ip("127.0.0.1");
        p
    };
    let planned = plan(s.state(), IpFamily::V4, &config, None);
    let tracer = Tracer::new(&planned).expect("traceable");
    let both = [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", true)];
    assert_eq!(tracer.trace(&from_node("127.0.0.1:30080")).fates(), both);
    assert_eq!(tracer.trace(&packet(EXTERNAL, "127.0.0.1:22")).fates(), [Fate::Drop], "KUBE-FIREWALL");
    assert_eq!(tracer.trace(&from_node("127.0.0.1:22")).fates(), [Fate::Untouched]);
}
