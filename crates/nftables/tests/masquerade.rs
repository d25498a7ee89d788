//! The forwarding words `kproxy list` shows ([`forwarding`]) against the
//! planned table: for every frontend, endpoint and kind of client (a pod,
//! the node, a client outside the cluster, the endpoint itself), the
//! tracer's masquerade verdict is the one the words claim.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use kproxy_model::{FrontendKind, IpFamily, Protocol};
use kproxy_nftables::masquerade::{Masquerade, forwarding};
use kproxy_nftables::trace::{Fate, Packet, trace};
use kproxy_nftables::{LocalDetector, PlanConfig, table};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, service, slice};

const NODE: &str = "192.168.77.1";
const POD: &str = "10.244.1.99";
const OUTSIDE: &str = "192.168.77.100";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Client {
    Pod,
    Node,
    Outside,
    /// The endpoint connecting to itself.
    Endpoint,
}

fn packet(client: Client, source: IpAddr, to: SocketAddr) -> Packet {
    let iif = match client {
        Client::Node => None,
        Client::Pod | Client::Endpoint => Some("kpbr0".to_owned()),
        Client::Outside => Some("eth0".to_owned()),
    };
    Packet {
        saddr: source,
        daddr: to.ip(),
        protocol: Protocol::Tcp,
        dport: to.port(),
        iif,
        local_addresses: vec![NODE.parse().unwrap()],
    }
}

/// Whether `client`'s connection to `endpoint` is masqueraded, by the
/// listing's words for that endpoint.
fn claimed(masquerade: Masquerade, hairpin: bool, external: bool, client: Client) -> bool {
    match (client, masquerade) {
        (Client::Endpoint, _) if hairpin => true,
        (_, Masquerade::Always) => true,
        // The node's own connections to an external frontend are always
        // masqueraded; to a cluster IP, as a client outside the cluster.
        (Client::Node, _) if external => true,
        (Client::Node | Client::Outside, Masquerade::FromOutside) => true,
        (Client::Endpoint, Masquerade::FromOutside) => false,
        _ => false,
    }
}

/// A cluster service with a node port, an `externalTrafficPolicy: Local`
/// load balancer, each with an endpoint here and one elsewhere.
fn cluster() -> Scenario {
    let mut s = scenario();
    web(&mut s);
    s.service(
        service("default", "shop")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.20")
            .port("https", "TCP", 443)
            .node_port(30443)
            .external_traffic_policy("Local")
            .load_balancer_ingress("198.51.100.20", None)
            .build(),
    );
    s.slice(
        slice("default", "shop-1", "shop")
            .port("https", "TCP", 8443)
            .endpoint(Ep::new("10.244.1.30").node("node-a"))
            .endpoint(Ep::new("10.244.2.30").node("node-b"))
            .build(),
    );
    s.sync();
    s
}

fn check(s: &Scenario, config: &PlanConfig) -> usize {
    let state = s.state();
    let family = IpFamily::V4;
    let table = table(state, family, config);
    let mut checked = 0;
    for port in state.ipv4.service_ports.values() {
        for frontend in &port.frontends {
            let external = frontend.kind != FrontendKind::ClusterIp;
            for endpoint in port.endpoints_for(frontend.kind, external) {
                let words = forwarding(config, &state.node, port, frontend, endpoint);
                for client in [Client::Pod, Client::Node, Client::Outside, Client::Endpoint] {
                    let source = match client {
                        Client::Pod => POD.parse().unwrap(),
                        Client::Node => NODE.parse().unwrap(),
                        Client::Outside => OUTSIDE.parse().unwrap(),
                        Client::Endpoint => endpoint.ip,
                    };
                    // The endpoint itself can only be a client if it is a pod here.
                    if client == Client::Endpoint && !endpoint.local {
                        continue;
                    }
                    let fates = trace(&table, family, &packet(client, source, frontend.addr())).fates();
                    let seen = fates.iter().find_map(|f| match f {
                        Fate::Dnat { endpoint: e, masquerade } if *e == endpoint.addr() => Some(*masquerade),
                        _ => None,
                    });
                    // Pods and the node may use another set (eTP Local's
                    // short circuit): only endpoints they reach count.
                    let Some(seen) = seen else { continue };
                    let want = claimed(words.masquerade, words.hairpin, external, client);
                    assert_eq!(
                        seen,
                        want,
                        "{} {} -> {} ({client:?}): listed as {words}, traced {fates:?}",
                        port.name,
                        frontend.addr(),
                        endpoint.addr()
                    );
                    checked += 1;
                }
            }
        }
    }
    checked
}

#[test]
fn the_listed_forwarding_is_what_the_rules_do_with_a_local_detector() {
    let s = cluster();
    assert!(check(&s, &config()) > 20);
}

#[test]
fn the_listed_forwarding_is_what_the_rules_do_without_a_local_detector() {
    let s = cluster();
    let config = PlanConfig { local_detector: LocalDetector::None, ..config() };
    assert!(check(&s, &config) > 20);
}

#[test]
fn the_listed_forwarding_is_what_the_rules_do_with_masquerade_all() {
    let s = cluster();
    let config = PlanConfig { masquerade_all: true, ..config() };
    assert!(check(&s, &config) > 20);
}

#[test]
fn words_per_frontend_kind_and_policy() {
    let s = cluster();
    let state = s.state();
    let words = |config: &PlanConfig, service: &str, kind: FrontendKind| -> Vec<String> {
        let port = state.ipv4.service_ports.values().find(|p| &*p.name.service.name == service).unwrap();
        let frontend = port.frontends.iter().find(|f| f.kind == kind).unwrap();
        let endpoints = port.endpoints_for(kind, kind != FrontendKind::ClusterIp);
        endpoints.iter().map(|e| forwarding(config, &state.node, port, frontend, e).to_string()).collect()
    };
    let none = PlanConfig { local_detector: LocalDetector::None, ..config() };
    let all = PlanConfig { masquerade_all: true, ..config() };
    // web's endpoints: 10.244.1.10 here, 10.244.2.10 elsewhere.
    assert_eq!(words(&config(), "web", FrontendKind::ClusterIp), ["MasqOut*", "MasqOut"]);
    assert_eq!(words(&none, "web", FrontendKind::ClusterIp), ["NoMasq*", "NoMasq"]);
    assert_eq!(words(&all, "web", FrontendKind::ClusterIp), ["Masq", "Masq"]);
    assert_eq!(words(&config(), "web", FrontendKind::NodePort), ["Masq", "Masq"]);
    // shop (Local): only its endpoint here serves outside clients.
    assert_eq!(words(&all, "shop", FrontendKind::LoadBalancerIp), ["NoMasq*"]);
    assert_eq!(words(&config(), "shop", FrontendKind::NodePort), ["NoMasq*"]);
}
