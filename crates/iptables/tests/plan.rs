//! From Kubernetes objects through kproxy-state to iptables-restore
//! payloads: full payloads per kind of service, and partial payloads over
//! time.

use kproxy_iptables::{Applied, LocalDetector, PlanConfig, Planned, Table, plan};
use kproxy_model::IpFamily;
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

fn scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", "192.168.77.1").address("InternalIP", "fd00:77::1").build());
    s
}

fn config() -> PlanConfig {
    PlanConfig {
        local_detector: LocalDetector::Cidrs(vec![
            "10.244.0.0/16".parse().expect("literal"),
            "fd00:244::/48".parse().expect("literal"),
        ]),
        ..PlanConfig::default()
    }
}

fn full(s: &Scenario, family: IpFamily) -> Planned {
    let planned = plan(s.state(), family, &config(), None);
    assert!(planned.skips.is_empty(), "{:?}", planned.skips);
    planned
}

/// ns1/svc1: a cluster IP on port 80 with the given (ip, node) endpoints.
fn svc1(s: &mut Scenario, endpoints: &[(&str, &str)]) {
    s.service(service("ns1", "svc1").cluster_ip("10.96.0.41").port("p80", "TCP", 80).build());
    let sl = endpoints
        .iter()
        .fold(slice("ns1", "svc1-a", "svc1").port("p80", "TCP", 8080), |sl, (ip, n)| sl.endpoint(Ep::new(ip).node(n)));
    s.slice(sl.build());
}

#[test]
fn a_cluster_ip_with_two_endpoints_picks_at_random_and_masquerades_off_cluster_sources() {
    let mut s = scenario();
    svc1(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b")]);
    s.sync();
    let planned = full(&s, IpFamily::V4);
    assert!(planned.full);
    insta::assert_snapshot!(planned.payload.render());
}

#[test]
fn a_node_port_service_masquerades_external_traffic() {
    let mut s = scenario();
    s.service(
        service("ns2", "np").type_("NodePort").cluster_ip("10.96.0.42").port("", "UDP", 53).node_port(30053).build(),
    );
    s.slice(slice("ns2", "np-a", "np").port("", "UDP", 5353).endpoint(Ep::new("10.244.2.20").node("node-b")).build());
    s.sync();
    insta::assert_snapshot!(full(&s, IpFamily::V4).payload.render());
}

/// ns3/lb: LoadBalancer, `externalTrafficPolicy: Local`, source ranges, an
/// external IP, a health-check node port, one local and one remote endpoint.
fn lb(s: &mut Scenario, endpoints: &[(&str, &str)]) {
    s.service(
        service("ns3", "lb")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.43")
            .external_ips(&["203.0.113.7"])
            .load_balancer_ingress("198.51.100.1", None)
            .source_ranges(&["192.168.77.0/24", "203.0.113.0/25"])
            .port("http", "TCP", 80)
            .node_port(30080)
            .external_traffic_policy("Local")
            .health_check_node_port(30999)
            .build(),
    );
    let sl = endpoints
        .iter()
        .fold(slice("ns3", "lb-a", "lb").port("http", "TCP", 8080), |sl, (ip, n)| sl.endpoint(Ep::new(ip).node(n)));
    s.slice(sl.build());
}

#[test]
fn a_local_policy_load_balancer_filters_sources_and_short_circuits_pods() {
    let mut s = scenario();
    lb(&mut s, &[("10.244.1.30", "node-a"), ("10.244.2.30", "node-b")]);
    s.sync();
    insta::assert_snapshot!(full(&s, IpFamily::V4).payload.render());
}

#[test]
fn local_policy_without_local_endpoints_drops_external_traffic_but_serves_pods() {
    let mut s = scenario();
    lb(&mut s, &[("10.244.2.30", "node-b")]);
    s.sync();
    let text = full(&s, IpFamily::V4).payload.render();
    for frontend in ["-d 203.0.113.7 --dport 80", "-d 198.51.100.1 --dport 80", "--dport 30080"] {
        let drop = text
            .lines()
            .find(|l| l.starts_with("-A KUBE-EXTERNAL-SERVICES") && l.contains(frontend))
            .unwrap_or_else(|| panic!("no filter rule for {frontend}:\n{text}"));
        assert!(drop.contains("\"ns3/lb:http has no local endpoints\"") && drop.ends_with("-j DROP"), "{drop}");
    }
    // In-cluster clients still reach the remote endpoint through KUBE-SVC.
    assert!(text.contains("\"pod traffic for ns3/lb:http external destinations\" -s 10.244.0.0/16 -j KUBE-SVC-"));
    assert!(!text.contains(":KUBE-SVL-"), "no local endpoints, no SVL chain:\n{text}");
}

#[test]
fn client_ip_affinity_checks_recent_lists_before_picking() {
    let mut s = scenario();
    s.service(
        service("ns4", "sticky")
            .cluster_ip("10.96.0.44")
            .port("p", "TCP", 443)
            .session_affinity("ClientIP", Some(600))
            .build(),
    );
    s.slice(
        slice("ns4", "sticky-a", "sticky")
            .port("p", "TCP", 8443)
            .endpoint(Ep::new("10.244.1.40").node("node-a"))
            .endpoint(Ep::new("10.244.2.40").node("node-b"))
            .endpoint(Ep::new("10.244.3.40").node("node-c"))
            .build(),
    );
    s.sync();
    insta::assert_snapshot!(full(&s, IpFamily::V4).payload.render());
}

#[test]
fn a_service_without_endpoints_is_rejected_in_filter() {
    let mut s = scenario();
    s.service(
        service("ns5", "empty")
            .type_("NodePort")
            .cluster_ip("10.96.0.45")
            .port("p", "TCP", 80)
            .node_port(30045)
            .build(),
    );
    s.sync();
    let planned = full(&s, IpFamily::V4);
    let text = planned.payload.render();
    assert!(!text.contains("KUBE-SVC-"), "no nat chains for a service without endpoints:\n{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn ipv6_uses_bracketed_endpoints_and_no_localhost_node_ports() {
    let mut s = scenario();
    s.service(
        service("ns6", "v6").type_("NodePort").cluster_ip("fd00:96::46").port("p", "TCP", 80).node_port(30046).build(),
    );
    s.slice(
        slice("ns6", "v6-a", "v6")
            .address_type("IPv6")
            .port("p", "TCP", 8080)
            .endpoint(Ep::new("fd00:244:1::46").node("node-a"))
            .build(),
    );
    s.sync();
    let planned = full(&s, IpFamily::V6);
    let text = planned.payload.render();
    assert!(!text.contains("KUBE-FIREWALL"), "{text}");
    assert!(planned.jump_rules.iter().all(|j| !j.args.contains(&"KUBE-FIREWALL".to_owned())));
    insta::assert_snapshot!(text);
}

#[test]
fn the_same_state_gives_the_same_payload() {
    let build = || {
        let mut s = scenario();
        lb(&mut s, &[("10.244.1.30", "node-a"), ("10.244.2.30", "node-b")]);
        svc1(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b")]);
        s.sync();
        s
    };
    let (a, b) = (build(), build());
    let (pa, pb) = (full(&a, IpFamily::V4), full(&b, IpFamily::V4));
    assert_eq!(pa.payload.render(), pb.payload.render());
    assert_eq!(pa.applied, pb.applied);
}

fn two_services() -> (Scenario, Applied) {
    let mut s = scenario();
    lb(&mut s, &[("10.244.1.30", "node-a"), ("10.244.2.30", "node-b")]);
    svc1(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b")]);
    s.sync();
    let applied = full(&s, IpFamily::V4).applied;
    (s, applied)
}

#[test]
fn a_partial_payload_after_no_change_is_empty() {
    let (s, applied) = two_services();
    let planned = plan(s.state(), IpFamily::V4, &config(), Some(&applied));
    assert!(!planned.full);
    assert!(planned.payload.is_empty(), "{}", planned.payload.render());
    assert_eq!(planned.payload.render(), "");
    assert_eq!(planned.applied, applied);
}

#[test]
fn a_partial_payload_after_one_endpoint_change_sends_only_that_services_chains() {
    let (mut s, applied) = two_services();
    svc1(&mut s, &[("10.244.1.10", "node-a"), ("10.244.3.10", "node-c")]);
    s.sync();
    let planned = plan(s.state(), IpFamily::V4, &config(), Some(&applied));
    let text = planned.payload.render();
    let svc1_chains = kproxy_iptables::names::PortChains::of(&kproxy_testkit::scenario::port_name(
        "ns1",
        "svc1",
        "p80",
        kproxy_model::Protocol::Tcp,
    ));
    for line in text.lines().filter(|l| l.starts_with(':')) {
        let chain = line[1..].split(' ').next().expect("chain line");
        let ok = chain == svc1_chains.cluster || chain.starts_with("KUBE-SEP-");
        assert!(ok, "unexpected chain {chain} in partial payload:\n{text}");
    }
    assert!(text.contains("-X KUBE-SEP-"), "the removed endpoint's chain is deleted:\n{text}");
    assert!(!text.contains("*filter"), "filter is unchanged:\n{text}");
    // Applying the partial leaves the same record as a full plan would.
    assert_eq!(planned.applied, full(&s, IpFamily::V4).applied);
    insta::assert_snapshot!(text);
}

#[test]
fn deleting_a_service_deletes_its_chains_and_rewrites_dispatch() {
    let (mut s, applied) = two_services();
    s.delete(kproxy_state::Kind::Service, "ns1", "svc1");
    s.sync();
    let planned = plan(s.state(), IpFamily::V4, &config(), Some(&applied));
    let text = planned.payload.render();
    assert!(text.contains(":KUBE-SERVICES - [0:0]"), "{text}");
    assert_eq!(text.matches("-X KUBE-SEP-").count(), 2, "{text}");
    assert_eq!(text.matches("-X KUBE-SVC-").count(), 1, "{text}");
    // The other service keeps its chains; only its dispatch rules are
    // rewritten with KUBE-SERVICES.
    let others: Vec<&str> =
        text.lines().filter(|l| l.contains("ns3/lb") && !l.starts_with("-A KUBE-SERVICES ")).collect();
    assert!(others.is_empty(), "the other service is untouched: {others:?}");
}

/// A scheduler or weights this mode cannot do plan upstream's random pick
/// over every endpoint, whether the state already replaced them (built
/// with [`kproxy_iptables::support`], as `run` builds it: with warnings) or
/// not: the service is served.
#[test]
fn an_unsupported_scheduler_and_weights_plan_random_with_equal_weights() {
    let add = |s: &mut Scenario, name: &str, ip: &str, annotated: bool| {
        let mut svc = service("ns7", name).cluster_ip(ip).port("p", "TCP", 80);
        if annotated {
            svc = svc.annotation("kproxy.io/scheduler", "rr").annotation("kproxy.io/weights", "10.244.1.70=5");
        }
        s.service(svc.build());
        let sl = slice("ns7", &format!("{name}-a"), name).port("p", "TCP", 80);
        let sl = sl.endpoint(Ep::new("10.244.1.70").node("node-a")).endpoint(Ep::new("10.244.2.70").node("node-b"));
        s.slice(sl.build());
    };
    let mut plain = scenario();
    let mut supported = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        mode: kproxy_iptables::support(),
        ..Default::default()
    });
    supported.node(node("node-a").address("InternalIP", "192.168.77.1").build());
    for s in [&mut plain, &mut supported] {
        add(s, "rr", "10.96.0.47", true);
        add(s, "random", "10.96.0.48", false);
        s.sync();
        let text = full(s, IpFamily::V4).payload.render();
        let rules = |name: &str| -> Vec<String> {
            // The annotated service's rules are the plain one's, but for
            // its name, address and chain hashes.
            let lines = text.lines().filter(|l| l.contains(&format!("ns7/{name}:p"))).map(|l| {
                let l = l.replace("10.96.0.47", "VIP").replace("10.96.0.48", "VIP");
                l.split(' ').map(|w| if w.starts_with("KUBE-S") { "CHAIN" } else { w }).collect::<Vec<_>>().join(" ")
            });
            lines.map(|l| l.replace(&format!("ns7/{name}:p"), "NAME")).collect()
        };
        assert!(text.contains("--probability 0.5000000000"), "{text}");
        assert_eq!(rules("rr"), rules("random"), "{text}");
        assert!(!rules("rr").is_empty());
    }
    let port = supported.port("ns7", "rr", "p");
    assert_eq!((port.scheduler, port.weights.len()), (None, 0));
    assert_eq!(
        port.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "kproxy.io/scheduler: scheduler rr is not supported in iptables mode (supported: random); using random",
            "kproxy.io/weights: iptables mode picks every endpoint with the same probability; every endpoint weighs 1",
        ]
    );
}

#[test]
fn cleanup_deletes_only_kproxy_chains() {
    let existing = [
        (Table::Nat, vec!["KUBE-SERVICES".to_owned(), "KUBE-SVC-AAAA".to_owned(), "CNI-HOSTPORT-DNAT".to_owned()]),
        (Table::Filter, vec!["KUBE-FORWARD".to_owned(), "DOCKER".to_owned()]),
    ]
    .into();
    let text = kproxy_iptables::cleanup(&existing, None).render();
    assert_eq!(
        text,
        "*filter\n:KUBE-FORWARD - [0:0]\n-X KUBE-FORWARD\nCOMMIT\n\
         *nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-AAAA - [0:0]\n-X KUBE-SERVICES\n-X KUBE-SVC-AAAA\nCOMMIT\n"
    );
}

fn localhost_scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        node_port_addresses: kproxy_state::NodePortAddresses::Cidrs(vec![
            "127.0.0.0/8".parse().expect("literal"),
            "192.168.77.0/24".parse().expect("literal"),
        ]),
        host_addresses: vec!["127.0.0.1".parse().expect("literal"), "192.168.77.1".parse().expect("literal")],
        ..StateConfig::default()
    });
    s.node(node("node-a").address("InternalIP", "192.168.77.1").build());
    s.service(
        service("ns8", "np").type_("NodePort").cluster_ip("10.96.0.48").port("p", "TCP", 80).node_port(30048).build(),
    );
    s.slice(slice("ns8", "np-a", "np").port("p", "TCP", 80).endpoint(Ep::new("10.244.1.80").node("node-a")).build());
    s.sync();
    s
}

#[test]
fn localhost_node_ports_jump_from_loopback_and_guard_localnet() {
    let s = localhost_scenario();
    let planned = full(&s, IpFamily::V4);
    let text = planned.payload.render();
    assert!(text.contains("NOTE: this must be the last rule in this chain\" -d 127.0.0.1 -j KUBE-NODEPORTS"), "{text}");
    assert!(text.contains("-A KUBE-FIREWALL -m comment --comment \"block incoming localnet connections\""), "{text}");
    let firewall_jumps = planned.jump_rules.iter().filter(|j| j.args == ["-j", "KUBE-FIREWALL"]).count();
    assert_eq!(firewall_jumps, 2);
}

#[test]
fn localhost_node_ports_off_skips_the_loopback_address() {
    let s = localhost_scenario();
    let config = PlanConfig { localhost_node_ports: false, ..config() };
    let planned = plan(s.state(), IpFamily::V4, &config, None);
    let text = planned.payload.render();
    assert!(!text.contains("127.0.0.1") && !text.contains("KUBE-FIREWALL"), "{text}");
    assert_eq!(planned.skips, ["node port address 127.0.0.1: localhost node ports are off (or IPv6); not served"]);
}

/// `nodePortAddresses` unset in iptables mode: every host address.
fn every_address_scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig {
        node_name: "node-a".into(),
        node_port_addresses: kproxy_state::NodePortAddresses::Cidrs(Vec::new()),
        host_addresses: ["127.0.0.1", "192.168.77.1", "10.244.1.1", "::1", "fd00:77::1"]
            .map(|a| a.parse().expect("literal"))
            .to_vec(),
        ..StateConfig::default()
    });
    s.service(
        service("ns8", "np").type_("NodePort").cluster_ip("10.96.0.48").port("p", "TCP", 80).node_port(30048).build(),
    );
    s.sync();
    s
}

#[test]
fn node_ports_on_every_address_match_addrtype_local_as_upstream() {
    let s = every_address_scenario();
    let jump = |family, config: &PlanConfig| {
        let text = plan(s.state(), family, config, None).payload.render();
        let line = text.lines().find(|l| l.ends_with("-j KUBE-NODEPORTS") && l.starts_with("-A KUBE-SERVICES"));
        line.expect("the node-port jump").to_owned()
    };
    let comment = "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
    assert_eq!(jump(IpFamily::V4, &config()), format!("{comment} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"));
    let no_localhost = PlanConfig { localhost_node_ports: false, ..config() };
    assert_eq!(
        jump(IpFamily::V4, &no_localhost),
        format!("{comment} -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS")
    );
    assert_eq!(
        jump(IpFamily::V6, &config()),
        format!("{comment} -m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS")
    );
    // Localhost node ports need kubelet's localnet guard, IPv4 only.
    let guard = |family| {
        let planned = plan(s.state(), family, &config(), None);
        planned.payload.render().contains("block incoming localnet connections")
    };
    assert!(guard(IpFamily::V4));
    assert!(!guard(IpFamily::V6));
}

#[test]
fn jump_rules_match_upstreams_table() {
    let jumps = kproxy_iptables::jump_rules(&PlanConfig::default(), IpFamily::V4);
    let lines: Vec<String> =
        jumps.iter().map(|j| format!("{} {} {}", j.table.as_str(), j.chain, j.args.join(" "))).collect();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn without_tcp_be_liberal_invalid_packets_are_dropped_and_with_it_not() {
    let mut s = scenario();
    svc1(&mut s, &[("10.244.1.10", "node-a")]);
    s.sync();
    let invalid = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP";
    assert!(full(&s, IpFamily::V4).payload.render().contains(invalid));
    let liberal = PlanConfig { drop_invalid: false, ..config() };
    assert!(!plan(s.state(), IpFamily::V4, &liberal, None).payload.render().contains(invalid));
}

#[test]
fn masquerade_all_marks_every_cluster_ip_connection() {
    let mut s = scenario();
    svc1(&mut s, &[("10.244.1.10", "node-a")]);
    s.sync();
    let all = PlanConfig { masquerade_all: true, ..config() };
    let text = plan(s.state(), IpFamily::V4, &all, None).payload.render();
    assert!(
        text.contains("\"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 10.96.0.41 --dport 80 -j KUBE-MARK-MASQ"),
        "{text}"
    );
}

#[test]
fn cleanup_with_keep_deletes_only_stale_service_chains() {
    let (s, applied) = two_services();
    let used: Vec<String> = applied.chains(Table::Nat).map(str::to_owned).collect();
    let mut nat = used.clone();
    nat.push("KUBE-SEP-STALESTALESTALE".to_owned());
    let existing = [(Table::Nat, nat)].into();
    let text = kproxy_iptables::cleanup(&existing, Some(&applied)).render();
    assert_eq!(text, "*nat\n:KUBE-SEP-STALESTALESTALE - [0:0]\n-X KUBE-SEP-STALESTALESTALE\nCOMMIT\n");
    assert!(used.iter().any(|c| c == "KUBE-SERVICES") && s.state().ipv4.service_ports.len() == 2);
}

#[test]
fn a_partial_plan_recomputes_only_the_changed_port_unless_the_settings_change() {
    let (mut s, applied) = two_services();
    assert_eq!(full(&s, IpFamily::V4).ports_planned, 2);
    svc1(&mut s, &[("10.244.1.10", "node-a")]);
    s.sync();
    let planned = plan(s.state(), IpFamily::V4, &config(), Some(&applied));
    assert_eq!(planned.ports_planned, 1, "only ns1/svc1 changed");
    assert_eq!(planned.applied, full(&s, IpFamily::V4).applied);
    // Other settings change every port's rules: all are recomputed, and the
    // payload rewrites what changed (here every cluster-IP masquerade rule).
    let all = PlanConfig { masquerade_all: true, ..config() };
    let again = plan(s.state(), IpFamily::V4, &all, Some(&planned.applied));
    assert_eq!(again.ports_planned, 2);
    assert!(!again.full);
    assert_eq!(again.applied, plan(s.state(), IpFamily::V4, &all, None).applied);
    let text = again.payload.render();
    assert!(
        text.contains("ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 10.96.0.41 --dport 80 -j KUBE-MARK-MASQ"),
        "{text}"
    );
}

#[test]
fn a_contested_frontend_is_replanned_when_its_owner_goes() {
    let (mut s, applied) = two_services();
    // A thief claims svc1's cluster IP and port as an external IP.
    s.service(
        service("ns0", "thief").cluster_ip("10.96.0.40").external_ips(&["10.96.0.41"]).port("p80", "TCP", 80).build(),
    );
    s.slice(
        slice("ns0", "thief-a", "thief")
            .port("p80", "TCP", 8080)
            .endpoint(Ep::new("10.244.9.9").node("node-b"))
            .build(),
    );
    s.sync();
    let planned = plan(s.state(), IpFamily::V4, &config(), Some(&applied));
    assert_eq!(
        planned.skips,
        ["ns0/thief:p80/TCP: frontend 10.96.0.41:80 is already served by ns1/svc1:p80/TCP; not served"]
    );
    assert_eq!(planned.applied, plan(s.state(), IpFamily::V4, &config(), None).applied);
    // svc1 goes: the thief's port is unchanged but now owns the address.
    s.delete(kproxy_state::Kind::Service, "ns1", "svc1");
    s.sync();
    let after = plan(s.state(), IpFamily::V4, &config(), Some(&planned.applied));
    assert!(after.skips.is_empty(), "{:?}", after.skips);
    assert_eq!(after.applied, plan(s.state(), IpFamily::V4, &config(), None).applied);
    assert!(after.payload.render().contains("-d 10.96.0.41 --dport 80 -j KUBE-EXT-"), "{}", after.payload.render());
}

#[test]
fn the_rule_count_is_what_a_full_payload_writes_and_survives_a_partial_sync() {
    let mut s = scenario();
    svc1(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b")]);
    lb(&mut s, &[("10.244.1.11", "node-a")]);
    s.sync();
    let first = full(&s, IpFamily::V4);
    for (table, part) in [(Table::Filter, &first.payload.filter), (Table::Nat, &first.payload.nat)] {
        assert!(!part.rules.is_empty());
        assert_eq!(first.applied.rule_count(table), part.rules.len(), "{table:?}");
    }
    // One more endpoint: the partial payload writes less, the count grows
    // by that endpoint's rules and equals a fresh full plan's.
    svc1(&mut s, &[("10.244.1.10", "node-a"), ("10.244.2.10", "node-b"), ("10.244.2.12", "node-b")]);
    s.sync();
    let partial = plan(s.state(), IpFamily::V4, &config(), Some(&first.applied));
    let fresh = full(&s, IpFamily::V4);
    for table in [Table::Filter, Table::Nat] {
        assert_eq!(partial.applied.rule_count(table), fresh.applied.rule_count(table), "{table:?}");
    }
    assert!(partial.payload.nat.rules.len() < fresh.payload.nat.rules.len());
    assert!(fresh.applied.rule_count(Table::Nat) > first.applied.rule_count(Table::Nat));
}
