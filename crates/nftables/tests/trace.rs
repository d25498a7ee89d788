//! Every verdict of SEMANTICS.md, checked by walking the planned table.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use kproxy_model::{IpFamily, Protocol};
use kproxy_nftables::trace::{Fate, Packet, trace};
use kproxy_nftables::{LocalDetector, PlanConfig, table};
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, service, slice};

const NODE: &str = "192.168.77.1";
const POD: &str = "10.244.1.20";
const EXTERNAL: &str = "192.168.77.100";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A new connection from `from` to `to`: from a pod (arriving on the pod
/// bridge), the node itself, or outside (on the uplink).
fn packet(from: &str, to: &str, protocol: Protocol) -> Packet {
    let to: SocketAddr = to.parse().unwrap();
    let iif = match from {
        NODE | "fd00:77::1" => None,
        f if f.starts_with("10.244.") || f.starts_with("fd00:10:244:") => Some("kpbr0".to_owned()),
        _ => Some("eth0".to_owned()),
    };
    Packet {
        saddr: ip(from),
        daddr: to.ip(),
        protocol,
        dport: to.port(),
        iif,
        local_addresses: vec![ip(NODE), ip("10.244.1.1"), ip("fd00:77::1")],
    }
}

fn fates_with(s: &Scenario, config: &PlanConfig, from: &str, to: &str, protocol: Protocol) -> Vec<Fate> {
    let family = IpFamily::of(&ip(from));
    trace(&table(s.state(), family, config), family, &packet(from, to, protocol)).fates()
}

fn fates(s: &Scenario, from: &str, to: &str) -> Vec<Fate> {
    fates_with(s, &config(), from, to, Protocol::Tcp)
}

fn dnat(endpoint: &str, masquerade: bool) -> Fate {
    Fate::Dnat { endpoint: endpoint.parse().unwrap(), masquerade }
}

fn web_scenario() -> Scenario {
    let mut s = scenario();
    web(&mut s);
    s.sync();
    s
}

#[test]
fn a_pod_reaches_every_endpoint_of_a_cluster_ip_unmasqueraded() {
    let s = web_scenario();
    assert_eq!(fates(&s, POD, "10.96.0.10:80"), [dnat("10.244.1.10:8080", false), dnat("10.244.2.10:8080", false)]);
}

#[test]
fn traffic_from_outside_the_cluster_to_a_cluster_ip_is_masqueraded() {
    let s = web_scenario();
    assert_eq!(fates(&s, EXTERNAL, "10.96.0.10:80"), [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", true)]);
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    let s = web_scenario();
    assert_eq!(
        fates(&s, "10.244.1.10", "10.96.0.10:80"),
        [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", false)]
    );
}

#[test]
fn node_ports_dnat_and_masquerade_under_cluster_policy() {
    let s = web_scenario();
    let expected = [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", true)];
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30080"), expected);
    assert_eq!(fates(&s, NODE, "192.168.77.1:30080"), expected, "from the node itself");
}

#[test]
fn a_service_without_endpoints_rejects_and_an_unserved_port_rejects() {
    let mut s = web_scenario();
    s.service(service("default", "empty").cluster_ip("10.96.0.30").port("p", "TCP", 80).build());
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.30:80"), [Fate::Reject]);
    assert_eq!(fates(&s, NODE, "10.96.0.30:80"), [Fate::Reject], "from the node too");
    assert_eq!(fates(&s, POD, "10.96.0.10:81"), [Fate::Reject]);
}

#[test]
fn an_address_in_the_service_cidr_that_no_service_owns_is_dropped() {
    let mut s = Scenario::new(kproxy_state::StateConfig {
        node_name: "node-a".into(),
        service_cidrs: vec!["10.96.0.0/16".parse().unwrap()],
        ..Default::default()
    });
    web(&mut s);
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.99:80"), [Fate::Drop]);
    assert_eq!(fates(&s, POD, "10.97.0.99:80"), [Fate::Untouched], "outside the service CIDR");
}

fn local_policy(s: &mut Scenario, endpoints: &[(&str, &str)]) {
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
    let sl = endpoints.iter().fold(slice("default", "shop-1", "shop").port("https", "TCP", 8443), |sl, (ip, node)| {
        sl.endpoint(Ep::new(ip).node(node))
    });
    s.slice(sl.build());
    s.sync();
}

#[test]
fn local_policy_sends_outside_traffic_to_local_endpoints_keeping_the_client_ip() {
    let mut s = scenario();
    local_policy(&mut s, &[("10.244.1.30", "node-a"), ("10.244.2.30", "node-b")]);
    assert_eq!(fates(&s, EXTERNAL, "198.51.100.20:443"), [dnat("10.244.1.30:8443", false)]);
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30443"), [dnat("10.244.1.30:8443", false)]);
}

#[test]
fn local_policy_without_local_endpoints_drops_external_but_serves_the_cluster() {
    let mut s = scenario();
    local_policy(&mut s, &[("10.244.2.30", "node-b")]);
    assert_eq!(fates(&s, EXTERNAL, "198.51.100.20:443"), [Fate::Drop]);
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30443"), [Fate::Drop]);
    // Pods and the node short-circuit to every endpoint; the node is masqueraded.
    assert_eq!(fates(&s, POD, "198.51.100.20:443"), [dnat("10.244.2.30:8443", false)]);
    assert_eq!(fates(&s, NODE, "192.168.77.1:30443"), [dnat("10.244.2.30:8443", true)]);
    // The cluster IP follows the internal policy (Cluster).
    assert_eq!(fates(&s, POD, "10.96.0.20:443"), [dnat("10.244.2.30:8443", false)]);
}

#[test]
fn internal_policy_local_without_local_endpoints_drops() {
    let mut s = scenario();
    s.service(
        service("default", "itp")
            .cluster_ip("10.96.0.40")
            .port("p", "TCP", 80)
            .internal_traffic_policy("Local")
            .build(),
    );
    s.slice(
        slice("default", "itp-1", "itp").port("p", "TCP", 80).endpoint(Ep::new("10.244.2.40").node("node-b")).build(),
    );
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.40:80"), [Fate::Drop]);
}

#[test]
fn load_balancer_source_ranges_drop_other_sources() {
    let mut s = scenario();
    s.service(
        service("default", "lb")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.50")
            .port("p", "TCP", 80)
            .node_port(30050)
            .load_balancer_ingress("198.51.100.50", None)
            .source_ranges(&["203.0.113.0/24"])
            .build(),
    );
    s.slice(
        slice("default", "lb-1", "lb").port("p", "TCP", 8080).endpoint(Ep::new("10.244.2.50").node("node-b")).build(),
    );
    s.sync();
    assert_eq!(fates(&s, "203.0.113.9", "198.51.100.50:80"), [dnat("10.244.2.50:8080", true)]);
    assert_eq!(fates(&s, EXTERNAL, "198.51.100.50:80"), [Fate::Drop]);
    // Ranges filter the load-balancer IP only.
    assert_eq!(fates(&s, EXTERNAL, "192.168.77.1:30050"), [dnat("10.244.2.50:8080", true)]);
}

#[test]
fn masquerade_all_masquerades_every_cluster_ip_connection() {
    let s = web_scenario();
    let config = PlanConfig { masquerade_all: true, ..config() };
    assert_eq!(
        fates_with(&s, &config, POD, "10.96.0.10:80", Protocol::Tcp),
        [dnat("10.244.1.10:8080", true), dnat("10.244.2.10:8080", true)]
    );
}

#[test]
fn masquerade_all_never_masquerades_a_local_policy_frontend() {
    let mut s = scenario();
    local_policy(&mut s, &[("10.244.1.30", "node-a"), ("10.244.2.30", "node-b")]);
    let config = PlanConfig { masquerade_all: true, ..config() };
    let tcp = Protocol::Tcp;
    for to in ["198.51.100.20:443", "192.168.77.1:30443"] {
        assert_eq!(fates_with(&s, &config, EXTERNAL, to, tcp), [dnat("10.244.1.30:8443", false)], "outside -> {to}");
        assert_eq!(
            fates_with(&s, &config, POD, to, tcp),
            [dnat("10.244.1.30:8443", false), dnat("10.244.2.30:8443", false)],
            "pod -> {to}"
        );
    }
    // The same service's cluster IP is masqueraded.
    assert!(fates_with(&s, &config, POD, "10.96.0.20:443", tcp).iter().all(|f| *f != dnat("10.244.2.30:8443", false)));
}

#[test]
fn without_a_local_detector_cluster_ip_traffic_is_never_masqueraded() {
    let s = web_scenario();
    let config = PlanConfig { local_detector: LocalDetector::None, ..config() };
    assert_eq!(
        fates_with(&s, &config, EXTERNAL, "10.96.0.10:80", Protocol::Tcp),
        [dnat("10.244.1.10:8080", false), dnat("10.244.2.10:8080", false)]
    );
}

#[test]
fn an_interface_detector_recognises_pods_by_their_bridge() {
    let s = web_scenario();
    let config = PlanConfig { local_detector: LocalDetector::Interface("kpbr0".into()), ..config() };
    assert!(
        fates_with(&s, &config, POD, "10.96.0.10:80", Protocol::Tcp)
            .iter()
            .all(|f| matches!(f, Fate::Dnat { masquerade: false, .. }))
    );
    let config = PlanConfig { local_detector: LocalDetector::InterfacePrefix("kpbr".into()), ..config };
    assert!(
        fates_with(&s, &config, EXTERNAL, "10.96.0.10:80", Protocol::Tcp)
            .iter()
            .all(|f| matches!(f, Fate::Dnat { masquerade: true, .. }))
    );
}

#[test]
fn udp_services_dnat_like_tcp() {
    let mut s = scenario();
    s.service(service("kube-system", "dns").cluster_ip("10.96.0.53").port("dns", "UDP", 53).build());
    s.slice(slice("kube-system", "dns-1", "dns").port("dns", "UDP", 5353).endpoint(Ep::new("10.244.2.53")).build());
    s.sync();
    assert_eq!(fates_with(&s, &config(), POD, "10.96.0.53:53", Protocol::Udp), [dnat("10.244.2.53:5353", false)]);
    assert_eq!(fates_with(&s, &config(), POD, "10.96.0.53:53", Protocol::Tcp), [Fate::Reject], "TCP is not served");
}

#[test]
fn dual_stack_services_are_served_in_both_tables() {
    let mut s = scenario();
    s.service(service("default", "ds").cluster_ips(&["10.96.0.60", "fd00:96::60"]).port("p", "TCP", 80).build());
    s.slice(slice("default", "ds-4", "ds").port("p", "TCP", 8080).endpoint(Ep::new("10.244.2.60")).build());
    s.slice(
        slice("default", "ds-6", "ds")
            .address_type("IPv6")
            .port("p", "TCP", 8080)
            .endpoint(Ep::new("fd00:10:244:2::60"))
            .build(),
    );
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.60:80"), [dnat("10.244.2.60:8080", false)]);
    // No IPv6 cluster CIDR is configured: nothing tells pods from outsiders,
    // so nothing is masqueraded (as upstream without a local detector).
    assert_eq!(fates(&s, "fd00:10:244:1::20", "[fd00:96::60]:80"), [dnat("[fd00:10:244:2::60]:8080", false)]);
}

fn annotated(name: &str, ip: &str, scheduler: Option<&str>, affinity: bool) -> k8s_openapi::api::core::v1::Service {
    let mut b = service("default", name).cluster_ip(ip).port("p", "TCP", 80);
    if affinity {
        b = b.session_affinity("ClientIP", Some(60));
    }
    let mut svc = b.build();
    if let Some(s) = scheduler {
        svc.metadata.annotations = Some([("kproxy.io/scheduler".to_owned(), s.to_owned())].into());
    }
    svc
}

fn two_endpoints(s: &mut Scenario, name: &str) {
    s.slice(
        slice("default", &format!("{name}-1"), name)
            .port("p", "TCP", 8080)
            .endpoint(Ep::new("10.244.2.70"))
            .endpoint(Ep::new("10.244.2.71"))
            .build(),
    );
}

#[test]
fn session_affinity_and_round_robin_reach_every_endpoint_on_a_first_connection() {
    let mut s = scenario();
    s.service(annotated("sticky", "10.96.0.70", None, true));
    two_endpoints(&mut s, "sticky");
    s.service(annotated("turns", "10.96.0.71", Some("rr"), false));
    two_endpoints(&mut s, "turns");
    s.service(annotated("both", "10.96.0.72", Some("rr"), true));
    two_endpoints(&mut s, "both");
    s.sync();
    let both = [dnat("10.244.2.70:8080", false), dnat("10.244.2.71:8080", false)];
    for vip in ["10.96.0.70:80", "10.96.0.71:80", "10.96.0.72:80"] {
        assert_eq!(fates(&s, POD, vip), both, "{vip}");
    }
    let t =
        trace(&table(s.state(), IpFamily::V4, &config()), IpFamily::V4, &packet(POD, "10.96.0.70:80", Protocol::Tcp));
    assert!(t.branches[0].path.iter().any(|line| line.contains("update @sticky-")), "{:#?}", t.branches[0].path);
}

/// A scheduler this mode cannot do plans the default (random), whether the
/// state already replaced it (built with [`kproxy_nftables::support`], as
/// `run` builds it: with a warning) or not: the service is served.
#[test]
fn a_scheduler_nftables_cannot_do_plans_random() {
    let random_table = {
        let mut s = scenario();
        s.service(annotated("lc", "10.96.0.80", None, false));
        two_endpoints(&mut s, "lc");
        s.sync();
        table(s.state(), IpFamily::V4, &config())
    };
    let mut plain = scenario();
    let config_with_support = kproxy_state::StateConfig {
        node_name: "node-a".into(),
        mode: kproxy_nftables::support(),
        ..Default::default()
    };
    let mut supported = Scenario::new(config_with_support);
    for s in [&mut plain, &mut supported] {
        s.service(annotated("lc", "10.96.0.80", Some("lc"), false));
        two_endpoints(s, "lc");
        s.sync();
        assert_eq!(fates(s, POD, "10.96.0.80:80"), [dnat("10.244.2.70:8080", false), dnat("10.244.2.71:8080", false)]);
        assert!(full(s.state(), None).skips.is_empty());
        assert!(table(s.state(), IpFamily::V4, &config()) == random_table, "the same table as without the annotation");
    }
    let port = supported.port("default", "lc", "p");
    assert_eq!(port.scheduler, None);
    assert_eq!(
        port.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "kproxy.io/scheduler: scheduler lc is not supported in nftables mode (supported: random, rr, wrr, sh, dh, mh); using random"
        ]
    );
}

/// Weights needing more pick slots than the table takes are not weighted:
/// one slot per endpoint, served (the state says so when built with the
/// mode's support).
#[test]
fn weights_needing_too_many_slots_give_one_slot_per_endpoint() {
    let mut s = scenario();
    let mut svc = annotated("w", "10.96.0.83", Some("wrr"), false);
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kproxy.io/weights".into(), "10.244.2.70=65535".into());
    s.service(svc);
    two_endpoints(&mut s, "w");
    s.sync();
    assert_eq!(s.port("default", "w", "p").weight_of(ip("10.244.2.70")), 65535, "the state kept them");
    let planned = full(s.state(), None);
    assert!(planned.skips.is_empty(), "{:?}", planned.skips);
    assert_eq!(fates(&s, POD, "10.96.0.83:80"), [dnat("10.244.2.70:8080", false), dnat("10.244.2.71:8080", false)]);
    let text = kproxy_nftables::render::plan(&planned.plan);
    let slots = |ip: &str| text.lines().filter(|l| l.contains("10.96.0.83") && l.contains(ip)).count();
    assert_eq!((slots("10.244.2.70"), slots("10.244.2.71")), (1, 1), "{text}");
}

#[test]
fn two_services_claiming_one_frontend_leave_it_to_the_first_and_report_the_second() {
    let mut s = web_scenario();
    thief(&mut s);
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.10:80"), [dnat("10.244.1.10:8080", false), dnat("10.244.2.10:8080", false)]);
    assert_eq!(fates(&s, POD, "10.96.0.90:80"), [dnat("10.244.2.99:80", false)], "its own cluster IP still works");
    let planned = full(s.state(), None);
    assert_eq!(
        planned.skips,
        ["default/thief:http/TCP: frontend 10.96.0.10:80 is already served by default/web:http/TCP; not served"]
    );
}

#[test]
fn weights_give_endpoints_slots_in_proportion_and_weight_zero_none() {
    for (scheduler, affinity) in [(None, false), (Some("wrr"), false), (Some("rr"), true)] {
        let mut s = scenario();
        let mut svc = annotated("w", "10.96.0.81", scheduler, affinity);
        svc.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("kproxy.io/weights".into(), "10.244.2.70=0".into());
        s.service(svc);
        two_endpoints(&mut s, "w");
        s.sync();
        let fates = fates(&s, POD, "10.96.0.81:80");
        assert!(!fates.is_empty(), "{scheduler:?}");
        assert!(fates.iter().all(|f| *f == dnat("10.244.2.71:8080", false)), "{scheduler:?}: {fates:?}");
        assert!(full(s.state(), None).skips.is_empty());
    }
    // 3:1 takes four slots, three of them the first endpoint's.
    let mut s = scenario();
    let mut svc = annotated("w", "10.96.0.81", Some("wrr"), false);
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kproxy.io/weights".into(), "10.244.2.70=3".into());
    s.service(svc);
    two_endpoints(&mut s, "w");
    s.sync();
    assert_eq!(fates(&s, POD, "10.96.0.81:80"), [dnat("10.244.2.70:8080", false), dnat("10.244.2.71:8080", false)]);
    let text = kproxy_nftables::render::plan(&full(s.state(), None).plan);
    let slots = |ip: &str| text.lines().filter(|l| l.contains("10.96.0.81") && l.contains(ip)).count();
    assert_eq!((slots("10.244.2.70"), slots("10.244.2.71")), (3, 1), "{text}");
}

#[test]
fn maglev_fills_its_lookup_table_with_every_endpoint() {
    let mut s = scenario();
    s.service(annotated("mh", "10.96.0.82", Some("mh"), false));
    two_endpoints(&mut s, "mh");
    s.sync();
    let planned = full(s.state(), None);
    assert!(planned.skips.is_empty(), "{:?}", planned.skips);
    assert_eq!(fates(&s, POD, "10.96.0.82:80"), [dnat("10.244.2.70:8080", false), dnat("10.244.2.71:8080", false)]);
    let text = kproxy_nftables::render::plan(&planned.plan);
    let slots = |ip: &str| text.lines().filter(|l| l.contains("10.96.0.82") && l.contains(ip)).count();
    let (a, b) = (slots("10.244.2.70"), slots("10.244.2.71"));
    assert_eq!(a + b, kproxy_sched::MAGLEV_SIZE, "{a} + {b}");
    assert!(a.abs_diff(b) <= 1, "Maglev splits evenly: {a} vs {b}");
}
