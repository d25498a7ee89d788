//! The iptables tracer against the nftables tracer: for every frontend of a
//! generated state and a set of clients, both modes' plans must give the
//! same fates (endpoints, masquerade, REJECT, DROP). Where they may not,
//! the difference is a known semantic difference between the modes, listed
//! in [`known_difference`].

use std::net::{IpAddr, SocketAddr};

use kproxy_iptables::trace::{Fate, Packet, Tracer};
use kproxy_iptables::{LocalDetector, PlanConfig, plan};
use kproxy_model::{IpFamily, Protocol, ProxyState};
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal")
}

/// The addresses of one family's generated cluster.
struct Net {
    family: IpFamily,
    node: &'static str,
    pods: &'static str,
    /// Address `n` of a numbered range (cluster IPs, LB IPs, ...).
    addr: fn(&str, u16) -> String,
    /// Host `n` of a pod range.
    host: fn(&str, u16) -> String,
    cluster_ip: &'static str,
    lb: &'static str,
    external: &'static str,
    local_pod: &'static str,
    remote_pod: &'static str,
    /// A pod client, outside in the source ranges, outside not in them.
    clients: [&'static str; 3],
    ranges: [&'static str; 2],
}

const V4: Net = Net {
    family: IpFamily::V4,
    node: "192.168.77.1",
    pods: "10.244.0.0/16",
    addr: |base, n| format!("{base}{}.{}", n / 200, n % 200 + 1),
    host: |base, n| format!("{base}{}", n % 200 + 1),
    cluster_ip: "10.96.",
    lb: "198.51.",
    external: "203.0.",
    local_pod: "10.244.1.",
    remote_pod: "10.244.2.",
    clients: ["10.244.1.250", "192.168.77.100", "100.64.0.9"],
    ranges: ["192.168.77.0/24", "10.244.0.0/16"],
};

const V6: Net = Net {
    family: IpFamily::V6,
    node: "fd00:77::1",
    pods: "fd00:10:244::/48",
    addr: |base, n| format!("{base}{:x}", n + 1),
    host: |base, n| format!("{base}{:x}", n + 1),
    cluster_ip: "fd00:96::",
    lb: "2001:db8:51::",
    external: "2001:db8:203::",
    local_pod: "fd00:10:244:1::",
    remote_pod: "fd00:10:244:2::",
    clients: ["fd00:10:244:1::fa", "fd00:77::100", "2001:db8:64::9"],
    ranges: ["fd00:77::/64", "fd00:10:244::/48"],
};

/// One service per combination of type, external IP, traffic policies,
/// affinity and endpoints (none, remote, local, both).
fn generated(net: &Net) -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", net.node).build());
    let mut i = 0u16;
    for type_ in ["ClusterIP", "NodePort", "LoadBalancer", "LoadBalancer+ranges"] {
        for external_ip in [false, true] {
            for etp in ["Cluster", "Local"] {
                for itp in ["Cluster", "Local"] {
                    for affinity in [false, true] {
                        for endpoints in 0..4u8 {
                            add(&mut s, net, i, type_, (external_ip, etp, itp, affinity), endpoints);
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

/// Service `s{i}`: `options` are (external IP, eTP, iTP, affinity);
/// `eps` bit 0 adds a remote endpoint, bit 1 a local one.
fn add(s: &mut Scenario, net: &Net, i: u16, type_: &str, options: (bool, &str, &str, bool), eps: u8) {
    let (external_ip, etp, itp, affinity) = options;
    let name = format!("s{i}");
    let mut svc = service("ns", &name)
        .type_(type_.trim_end_matches("+ranges"))
        .cluster_ip(&(net.addr)(net.cluster_ip, i))
        .port("p", "TCP", 80)
        .internal_traffic_policy(itp);
    if type_ != "ClusterIP" {
        svc = svc.node_port(i32::from(30000 + i)).external_traffic_policy(etp);
    }
    if type_.starts_with("LoadBalancer") {
        svc = svc.load_balancer_ingress(&(net.addr)(net.lb, i), None);
    }
    if type_.ends_with("+ranges") {
        svc = svc.source_ranges(&net.ranges);
    }
    if external_ip {
        svc = svc.external_ips(&[&(net.addr)(net.external, i)]);
    }
    if affinity {
        svc = svc.session_affinity("ClientIP", Some(30));
    }
    s.service(svc.build());
    let mut sl = slice("ns", &format!("{name}-a"), &name).port("p", "TCP", 8080);
    if net.family == IpFamily::V6 {
        sl = sl.address_type("IPv6");
    }
    if eps & 1 != 0 {
        sl = sl.endpoint(Ep::new(&(net.host)(net.remote_pod, i)).node("node-b"));
    }
    if eps & 2 != 0 {
        sl = sl.endpoint(Ep::new(&(net.host)(net.local_pod, i)).node("node-a"));
    }
    s.slice(sl.build());
}

/// The clients: a pod on this node, the node, outside (in and out of the
/// source ranges); plus, per service, its local endpoint (hairpin).
fn clients(net: &Net, local_endpoint: Option<IpAddr>) -> Vec<(IpAddr, Option<&'static str>)> {
    let [pod, inside, outside] = net.clients;
    let mut out =
        vec![(ip(pod), Some("kpbr0")), (ip(net.node), None), (ip(inside), Some("eth0")), (ip(outside), Some("eth0"))];
    out.extend(local_endpoint.map(|ep| (ep, Some("kpbr0"))));
    out
}

fn packet(net: &Net, from: IpAddr, iif: Option<&str>, to: SocketAddr) -> Packet {
    Packet {
        saddr: from,
        daddr: to.ip(),
        protocol: Protocol::Tcp,
        dport: to.port(),
        iif: iif.map(str::to_owned),
        local_addresses: vec![ip(net.node)],
    }
}

/// Compares both tracers on every frontend and client of `state`; returns
/// the differences. kproxy's iptables plan follows SEMANTICS.md where
/// upstream's iptables layout does not (the node's own connections to an
/// external frontend without endpoints, denied sources to a load-balancer
/// IP without endpoints), so every frontend must trace alike.
fn compare(net: &Net, state: &ProxyState, config: &PlanConfig) -> Vec<String> {
    let nft_config = kproxy_nftables::PlanConfig {
        masquerade_all: config.masquerade_all,
        masquerade_bit: config.masquerade_bit,
        local_detector: config.local_detector.clone(),
        drop_invalid: config.drop_invalid,
    };
    let planned = plan(state, net.family, config, None);
    assert!(planned.skips.is_empty(), "{:?}", planned.skips);
    let tracer = Tracer::new(&planned).expect("traceable");
    let table = kproxy_nftables::table(state, net.family, &nft_config);
    let mut checked = 0;
    let mut differences = Vec::new();
    for port in state.family(net.family).service_ports.values() {
        let local_endpoint = port.local_endpoints.first().map(|e| e.ip);
        for f in &port.frontends {
            for (from, iif) in clients(net, local_endpoint) {
                let packet = packet(net, from, iif, f.addr());
                let ipt = tracer.trace(&packet).fates();
                let nft = kproxy_nftables::trace::trace(&table, net.family, &packet).fates();
                checked += 1;
                if ipt != nft {
                    differences.push(format!(
                        "{} {} ({}) from {from}: iptables {ipt:?}, nftables {nft:?}",
                        port.name,
                        f.addr(),
                        f.kind
                    ));
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
    differences
}

#[test]
fn both_modes_trace_every_frontend_to_the_same_fates() {
    for net in [V4, V6] {
        let s = generated(&net);
        let detectors = [
            LocalDetector::Cidrs(vec![net.pods.parse().expect("literal")]),
            LocalDetector::InterfacePrefix("kpbr".into()),
            LocalDetector::None,
        ];
        for (detector, masquerade_all) in detectors.into_iter().flat_map(|d| [(d.clone(), false), (d, true)]) {
            let config = PlanConfig { local_detector: detector, masquerade_all, ..PlanConfig::default() };
            let differences = compare(&net, s.state(), &config);
            let what = format!("{} {:?} masqueradeAll={masquerade_all}", net.family, config.local_detector);
            assert!(differences.is_empty(), "{what}: {} differences:\n{}", differences.len(), differences.join("\n"));
        }
    }
}

/// Outside the frontends: both modes reject a cluster IP's unserved ports
/// (SEMANTICS.md); upstream's iptables mode routes them on, un-NATed.
#[test]
fn both_modes_reject_a_cluster_ips_unserved_port() {
    let s = generated(&V4);
    let config = PlanConfig::default();
    let planned = plan(s.state(), IpFamily::V4, &config, None);
    let table = kproxy_nftables::table(s.state(), IpFamily::V4, &kproxy_nftables::PlanConfig::default());
    let packet = packet(&V4, ip("10.244.1.250"), Some("kpbr0"), "10.96.0.2:81".parse().expect("literal"));
    assert_eq!(kproxy_iptables::trace::trace(&planned, &packet).expect("traceable").fates(), [Fate::Reject]);
    assert_eq!(kproxy_nftables::trace::trace(&table, IpFamily::V4, &packet).fates(), [Fate::Reject]);
}

/// A frontend two services claim (an external IP equal to another
/// service's cluster IP): the cluster IP keeps it, as in nftables mode,
/// even though the thief comes first in name order; the thief is reported.
#[test]
fn a_contested_frontend_goes_to_the_cluster_ip_in_both_modes() {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", V4.node).build());
    for (name, cluster_ip, external, endpoint) in
        [("a-thief", "10.96.0.42", Some("10.96.0.10"), "10.244.2.42"), ("web", "10.96.0.10", None, "10.244.2.10")]
    {
        let mut svc = service("ns", name).type_("ClusterIP").cluster_ip(cluster_ip).port("p", "TCP", 80);
        if let Some(external) = external {
            svc = svc.external_ips(&[external]);
        }
        s.service(svc.build());
        s.slice(slice("ns", &format!("{name}-a"), name).port("p", "TCP", 8080).endpoint(Ep::new(endpoint)).build());
    }
    s.sync();
    let planned = plan(s.state(), IpFamily::V4, &PlanConfig::default(), None);
    assert_eq!(
        planned.skips,
        ["ns/a-thief:p/TCP: frontend 10.96.0.10:80 is already served by ns/web:p/TCP; not served"]
    );
    let table = kproxy_nftables::table(s.state(), IpFamily::V4, &kproxy_nftables::PlanConfig::default());
    for to in ["10.96.0.10:80", "10.96.0.42:80"] {
        let packet = packet(&V4, ip("10.244.1.250"), Some("kpbr0"), to.parse().expect("literal"));
        let ipt = kproxy_iptables::trace::trace(&planned, &packet).expect("traceable").fates();
        assert_eq!(ipt, kproxy_nftables::trace::trace(&table, IpFamily::V4, &packet).fates(), "{to}");
        let endpoint = if to.starts_with("10.96.0.10") { "10.244.2.10:8080" } else { "10.244.2.42:8080" };
        assert!(
            matches!(ipt[..], [Fate::Dnat { endpoint: e, .. }] if e == endpoint.parse().expect("literal")),
            "{to}: {ipt:?}"
        );
    }
}
