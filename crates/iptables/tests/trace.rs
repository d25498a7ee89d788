//! The iptables tracer against the nftables tracer: for every frontend of a
//! generated state and a set of clients, both modes' plans must give the
//! same fates (endpoints, masquerade, REJECT, DROP). Where they may not,
//! the difference is a known semantic difference between the modes, listed
//! in [`known_difference`].

use std::net::{IpAddr, SocketAddr};

use kproxy_iptables::trace::{Fate, Packet, Tracer};
use kproxy_iptables::{LocalDetector, PlanConfig, plan};
use std::collections::BTreeMap;

use kproxy_model::{FrontendKind, IpFamily, Protocol, ServicePort};
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

const NODE: &str = "192.168.77.1";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal")
}

/// One service per combination of type, external IP, traffic policies,
/// affinity and endpoints (none, remote, local, both).
fn generated() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", NODE).build());
    let mut i = 0u16;
    for type_ in ["ClusterIP", "NodePort", "LoadBalancer", "LoadBalancer+ranges"] {
        for external_ip in [false, true] {
            for etp in ["Cluster", "Local"] {
                for itp in ["Cluster", "Local"] {
                    for affinity in [false, true] {
                        for endpoints in 0..4u8 {
                            add(&mut s, i, type_, external_ip, etp, itp, affinity, endpoints);
                            i += 1;
                        }
                    }
                }
            }
        }
    }
    s.sync();
    s
}

#[allow(clippy::too_many_arguments)]
fn add(s: &mut Scenario, i: u16, type_: &str, external_ip: bool, etp: &str, itp: &str, affinity: bool, eps: u8) {
    let (hi, lo) = (i / 200, i % 200 + 1);
    let name = format!("s{i}");
    let mut svc = service("ns", &name)
        .type_(type_.trim_end_matches("+ranges"))
        .cluster_ip(&format!("10.96.{hi}.{lo}"))
        .port("p", "TCP", 80)
        .internal_traffic_policy(itp);
    if type_ != "ClusterIP" {
        svc = svc.node_port(i32::from(30000 + i)).external_traffic_policy(etp);
    }
    if type_.starts_with("LoadBalancer") {
        svc = svc.load_balancer_ingress(&format!("198.51.{hi}.{lo}"), None);
    }
    if type_.ends_with("+ranges") {
        svc = svc.source_ranges(&["192.168.77.0/24", "10.244.0.0/16"]);
    }
    if external_ip {
        svc = svc.external_ips(&[&format!("203.0.{hi}.{lo}")]);
    }
    if affinity {
        svc = svc.session_affinity("ClientIP", Some(30));
    }
    s.service(svc.build());
    let mut sl = slice("ns", &format!("{name}-a"), &name).port("p", "TCP", 8080);
    if eps & 1 != 0 {
        sl = sl.endpoint(Ep::new(&format!("10.244.2.{}", lo)).node("node-b"));
    }
    if eps & 2 != 0 {
        sl = sl.endpoint(Ep::new(&format!("10.244.1.{}", lo)).node("node-a"));
    }
    s.slice(sl.build());
}

/// The clients: a pod on this node, the node, outside (in and out of the
/// source ranges); plus, per service, its local endpoint (hairpin).
fn clients(local_endpoint: Option<IpAddr>) -> Vec<(IpAddr, Option<&'static str>)> {
    let mut out = vec![
        (ip("10.244.1.250"), Some("kpbr0")),
        (ip(NODE), None),
        (ip("192.168.77.100"), Some("eth0")),
        (ip("100.64.0.9"), Some("eth0")),
    ];
    out.extend(local_endpoint.map(|ep| (ep, Some("kpbr0"))));
    out
}

fn packet(from: IpAddr, iif: Option<&str>, to: SocketAddr) -> Packet {
    Packet {
        saddr: from,
        daddr: to.ip(),
        protocol: Protocol::Tcp,
        dport: to.port(),
        iif: iif.map(str::to_owned),
        local_addresses: vec![ip(NODE)],
    }
}

/// Where upstream's two layouts, which kproxy reproduces, disagree; `None`
/// when the fates must be the same.
fn known_difference(
    port: &ServicePort,
    kind: FrontendKind,
    packet: &Packet,
    ipt: &[Fate],
    nft: &[Fate],
) -> Option<&'static str> {
    let no_endpoints = port.cluster_endpoints.is_empty() && port.local_endpoints.is_empty();
    let from_node = packet.iif.is_none();
    let denied =
        port.load_balancer_source_ranges.as_ref().is_some_and(|r| !r.iter().any(|n| n.contains(&packet.saddr)));
    match (ipt, nft) {
        // KUBE-EXTERNAL-SERVICES, which rejects external frontends without
        // endpoints, is jumped to from INPUT and FORWARD only, not OUTPUT.
        ([Fate::Untouched], [Fate::Reject]) if from_node && kind.is_external() && no_endpoints => {
            Some("the node's own connections to an external frontend without endpoints are not rejected")
        }
        // Upstream writes KUBE-FW-* and its KUBE-PROXY-FIREWALL drop only
        // for a port with endpoints (usesFWChain needs hasEndpoints), so a
        // denied source meets the no-endpoints REJECT instead.
        ([Fate::Reject], [Fate::Drop]) if kind == FrontendKind::LoadBalancerIp && no_endpoints && denied => {
            Some("a denied source to a load-balancer IP without endpoints is rejected, not dropped")
        }
        _ => None,
    }
}

#[test]
fn both_modes_trace_every_frontend_to_the_same_fates() {
    let s = generated();
    let state = s.state();
    let config = PlanConfig {
        local_detector: LocalDetector::Cidrs(vec!["10.244.0.0/16".parse().expect("literal")]),
        ..PlanConfig::default()
    };
    let nft_config = kproxy_nftables::PlanConfig {
        masquerade_all: config.masquerade_all,
        masquerade_bit: config.masquerade_bit,
        local_detector: config.local_detector.clone(),
        drop_invalid: config.drop_invalid,
    };
    let planned = plan(state, IpFamily::V4, &config, None);
    assert!(planned.skips.is_empty(), "{:?}", planned.skips);
    let tracer = Tracer::new(&planned).expect("traceable");
    let table = kproxy_nftables::table(state, IpFamily::V4, &nft_config);
    let mut checked = 0;
    let mut differences = Vec::new();
    let mut known: BTreeMap<&str, usize> = BTreeMap::new();
    for port in state.service_ports() {
        let local_endpoint = port.local_endpoints.first().map(|e| e.ip);
        for f in &port.frontends {
            for (from, iif) in clients(local_endpoint) {
                let packet = packet(from, iif, f.addr());
                let ipt = tracer.trace(&packet).fates();
                let nft = kproxy_nftables::trace::trace(&table, IpFamily::V4, &packet).fates();
                checked += 1;
                if ipt != nft {
                    match known_difference(port, f.kind, &packet, &ipt, &nft) {
                        Some(why) => *known.entry(why).or_default() += 1,
                        None => differences.push(format!(
                            "{} {} ({}) from {from}: iptables {ipt:?}, nftables {nft:?}",
                            port.name,
                            f.addr(),
                            f.kind
                        )),
                    }
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
    assert!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n"));
    // Each known difference still exists (else drop it from the list).
    assert_eq!(known.len(), 2, "{known:?}");
}

/// Outside the frontends: nftables mode rejects a cluster IP's unserved
/// ports (SEMANTICS.md), upstream's iptables layout, which kproxy
/// reproduces, leaves them alone (the packet is routed on, un-NATed).
#[test]
fn only_nftables_mode_rejects_a_cluster_ips_unserved_port() {
    let s = generated();
    let config = PlanConfig::default();
    let planned = plan(s.state(), IpFamily::V4, &config, None);
    let table = kproxy_nftables::table(s.state(), IpFamily::V4, &kproxy_nftables::PlanConfig::default());
    let packet = packet(ip("10.244.1.250"), Some("kpbr0"), "10.96.0.2:81".parse().expect("literal"));
    assert_eq!(kproxy_iptables::trace::trace(&planned, &packet).expect("traceable").fates(), [Fate::Untouched]);
    assert_eq!(kproxy_nftables::trace::trace(&table, IpFamily::V4, &packet).fates(), [Fate::Reject]);
}
