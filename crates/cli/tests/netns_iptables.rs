//! The iptables mode on the real kernel, on both backends (legacy and nft):
//! the nftables mode's real-connection scenarios, with kproxy running
//! `--proxy-mode iptables` in node-a and the backend forced through
//! `KPROXY_IPTABLES_BACKEND`.

mod lab;

use std::net::IpAddr;

use kproxy_model::Protocol;
use kproxy_sandbox::ProbeError;
use lab::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

fn answers(lab: &Lab, from: &kproxy_sandbox::Netns, to: &str, protocol: Protocol) -> bool {
    matches!(lab.request(from, to, protocol, None), Outcome::Answered { .. })
}

/// Starts kproxy in iptables mode on `backend`.
fn start(lab: &mut Lab, backend: &str, extra: &[&str]) {
    lab.env.push(("KPROXY_IPTABLES_BACKEND".into(), backend.into()));
    lab.start_in("iptables", extra);
}

/// `iptables-save` of node-a for the backend.
fn saved(lab: &Lab, backend: &str) -> String {
    lab.node().exec(&format!("iptables-{backend}-save"), &[]).expect("iptables-save in node-a")
}

/// The rules landed in `backend` only.
fn nothing_in_the_other_backend(lab: &Lab, backend: &str) {
    let other = if backend == "legacy" { "nft" } else { "legacy" };
    assert!(!saved(lab, other).contains("KUBE-SERVICES"), "nothing in the {other} backend");
}

/// Runs `scenario` once per backend, each in its own lab.
macro_rules! on_both_backends {
    ($scenario:ident, $legacy:ident, $nft:ident) => {
        #[test]
        fn $legacy() {
            $scenario("legacy");
        }
        #[test]
        fn $nft() {
            $scenario("nft");
        }
    };
}

fn cluster_ip(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    start(&mut lab, backend, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");
    assert!(
        spread.keys().all(|o| matches!(o, Outcome::Answered { peer, .. } if *peer == IpAddr::V4(client.ipv4))),
        "pods keep their address: {spread:?}"
    );
    // From outside the cluster: masqueraded.
    let outside = lab.spread(lab.client(), "10.96.0.10:80", Protocol::Tcp, 30);
    assert_eq!(backends(&outside), ["web-a1", "web-b1"], "{outside:?}");
    assert!(outside.contains_key(&answered("web-b1", ip("192.168.77.1"))), "{outside:?}");
    // Upstream's layout, in the backend asked for.
    let rules = saved(&lab, backend);
    assert!(rules.contains(":KUBE-SERVICES") && rules.contains("-j KUBE-SVC-"), "{rules}");
    assert!(rules.contains("--probability 0.5000000000"), "{rules}");
    assert!(rules.contains(":KUBE-PROXY-CANARY"), "{rules}");
    nothing_in_the_other_backend(&lab, backend);
    // Upstream's rule counts: every rule of kproxy's chains in nat, and
    // iptables mode's metrics only.
    let nat = lab.node().exec(&format!("iptables-{backend}-save"), &["-t", "nat"]).expect("iptables-save -t nat");
    let owned = nat.lines().filter(|l| l.starts_with("-A KUBE-")).count();
    let metrics = lab.metrics();
    let total = lab.metric("kubeproxy_sync_proxy_rules_iptables_total{ip_family=\"IPv4\",table=\"nat\"}");
    assert_eq!(total, owned as f64, "{nat}\n{metrics}");
    assert!(lab.metric("kubeproxy_sync_proxy_rules_iptables_last") > 0.0, "{metrics}");
    assert!(metrics.contains("kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"} 0"));
    assert!(!metrics.contains("nftables_sync_failures"), "{metrics}");
}
on_both_backends!(
    cluster_ip,
    a_cluster_ip_spreads_and_masquerades_outsiders_legacy,
    a_cluster_ip_spreads_and_masquerades_outsiders_nft
);

fn node_port_and_no_endpoints(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n",
        ),
    );
    lab.write(
        "empty.yaml",
        &service(
            "empty",
            "  clusterIP: 10.96.0.30\n  ports: [{port: 80, protocol: TCP}, {name: u, port: 53, protocol: UDP}]\n",
        ),
    );
    start(&mut lab, backend, &[]);
    lab.eventually("the node port", || answers(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp));
    let spread = lab.spread(lab.client(), "192.168.77.1:30080", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");
    assert!(
        spread.keys().all(|o| !matches!(o, Outcome::Answered { peer, .. } if *peer == ip("192.168.77.100"))),
        "masqueraded: {spread:?}"
    );
    let client = &lab.pod("client-a1").ns;
    assert_eq!(lab.request(client, "10.96.0.30:80", Protocol::Tcp, None), Outcome::Refused, "TCP without endpoints");
    assert_eq!(lab.request(client, "10.96.0.30:53", Protocol::Udp, None), Outcome::Refused, "UDP without endpoints");
    assert_eq!(lab.request(lab.node(), "10.96.0.30:80", Protocol::Tcp, None), Outcome::Refused, "from the node");
    // A port the cluster IP does not serve is refused too (not routed on).
    assert_eq!(lab.request(client, "10.96.0.10:81", Protocol::Tcp, None), Outcome::Refused, "unserved port");
    assert_eq!(lab.request(lab.node(), "10.96.0.10:81", Protocol::Tcp, None), Outcome::Refused, "unserved, node");
    assert_eq!(lab.request(client, "10.96.0.30:54", Protocol::Udp, None), Outcome::Refused, "unserved UDP port");
}
on_both_backends!(
    node_port_and_no_endpoints,
    a_node_port_serves_and_no_endpoints_rejects_legacy,
    a_node_port_serves_and_no_endpoints_rejects_nft
);

fn shop(lab: &Lab) {
    lab.write(
        "shop.yaml",
        &format!(
            "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
            service(
                "shop",
                "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n"
            )
        ),
    );
}

fn local_policy(backend: &str) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    shop(&lab);
    start(&mut lab, backend, &[]);
    lab.eventually("the LB IP", || answers(&lab, lab.client(), "198.51.100.20:443", Protocol::Tcp));
    let outside = ip("192.168.77.100");
    for to in ["198.51.100.20:443", "192.168.77.1:30443"] {
        let spread = lab.spread(lab.client(), to, Protocol::Tcp, 12);
        assert_eq!(spread.keys().collect::<Vec<_>>(), [&answered("shop-a1", outside)], "{to}: {spread:?}");
    }
    let client = lab.pod("client-a1");
    let spread = lab.spread(&client.ns, "198.51.100.20:443", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["shop-a1", "shop-b1"], "pods use every endpoint: {spread:?}");

    // The local endpoint leaves: outsiders are dropped, pods still served.
    lab.set_app("shop-a1", None);
    lab.eventually("the drop", || {
        matches!(
            kproxy_sandbox::tcp_request(lab.client(), "198.51.100.20:443".parse().unwrap(), None, DROP_WAIT),
            Err(ProbeError::TimedOut)
        )
    });
    assert_eq!(lab.request(&client.ns, "198.51.100.20:443", Protocol::Tcp, None), answered("shop-b1", client.ipv4));
}
on_both_backends!(
    local_policy,
    local_policy_keeps_client_addresses_and_drops_without_local_endpoints_legacy,
    local_policy_keeps_client_addresses_and_drops_without_local_endpoints_nft
);

fn affinity_and_cleanup(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    let sticky = format!("{WEB}  sessionAffinity: ClientIP\n");
    lab.write("web.yaml", &service("web", &sticky));
    // A rule of someone else's, which cleanup must leave.
    lab.node()
        .exec(
            &format!("iptables-{backend}"),
            &["-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "9999", "-j", "ACCEPT"],
        )
        .expect("a foreign rule");
    start(&mut lab, backend, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 12);
    assert_eq!(spread.len(), 1, "one client, one endpoint: {spread:?}");
    assert!(saved(&lab, backend).contains("--rcheck --seconds 10800 --reap"));

    lab.stop();
    let (ok, out) = lab.kproxy(&["cleanup", "--proxy-mode", "iptables"]);
    assert!(ok, "{out}");
    let rules = saved(&lab, backend);
    // KUBE-FIREWALL (the localnet guard for localhost node ports) is the
    // kubelet's chain too: upstream's cleanup leaves it, and so does kproxy.
    let kproxys = rules.lines().filter(|l| l.contains("KUBE-") && !l.contains("KUBE-FIREWALL")).count();
    assert_eq!(kproxys, 0, "kproxy's chains and jumps are gone:\n{rules}");
    assert!(rules.contains("--dport 9999 -j ACCEPT"), "the foreign rule stays:\n{rules}");
}
on_both_backends!(
    affinity_and_cleanup,
    affinity_pins_and_cleanup_removes_only_kproxys_rules_legacy,
    affinity_pins_and_cleanup_removes_only_kproxys_rules_nft
);

fn source_ranges_and_hairpin(backend: &str) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (1, "web-a1"), (2, "web-b1")]);
    lab.write(
        "shop.yaml",
        &format!(
            "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
            service(
                "shop",
                "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  loadBalancerSourceRanges: [203.0.113.0/24]\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n"
            )
        ),
    );
    lab.write("web.yaml", &service("web", WEB));
    start(&mut lab, backend, &[]);
    let allowed = Some(ip("203.0.113.9"));
    lab.eventually("an allowed source", || {
        matches!(lab.request(lab.client(), "198.51.100.20:443", Protocol::Tcp, allowed), Outcome::Answered { .. })
    });
    let denied = kproxy_sandbox::tcp_request(lab.client(), "198.51.100.20:443".parse().unwrap(), None, DROP_WAIT);
    assert!(matches!(denied, Err(ProbeError::TimedOut)), "{denied:?}");
    assert!(answers(&lab, lab.client(), "192.168.77.1:30443", Protocol::Tcp), "ranges guard the LB IP only");
    // Hairpin: a pod reaching itself through its service is masqueraded.
    let me = lab.pod("web-a1");
    lab.eventually("web", || answers(&lab, &me.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&me.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    assert_eq!(
        spread.keys().cloned().collect::<Vec<_>>(),
        [answered("web-a1", ip("10.244.1.1")), answered("web-b1", me.ipv4)],
        "{spread:?}"
    );
}
on_both_backends!(
    source_ranges_and_hairpin,
    source_ranges_drop_others_and_hairpin_masquerades_legacy,
    source_ranges_drop_others_and_hairpin_masquerades_nft
);

fn udp_flows_and_ipv6(backend: &str) {
    let mut lab = Lab::new(&[(2, "dns-b1"), (2, "dns-b2"), (1, "client-a1")]);
    let dns = |selector: &str| {
        service(
            "dns",
            &format!(
                "  clusterIPs: [10.96.0.53, \"fd00:96::53\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {{app: {selector}}}\n  ports: [{{name: dns, port: 53, protocol: UDP, targetPort: 8080}}]\n"
            ),
        )
    };
    lab.set_app("dns-b1", Some("one"));
    lab.set_app("dns-b2", Some("two"));
    lab.write("dns.yaml", &dns("nobody"));
    start(&mut lab, backend, &[]);
    let client = lab.pod("client-a1");
    let addr = |s: &str| s.parse().unwrap();
    let mut flow =
        kproxy_sandbox::UdpFlow::open(&client.ns, addr("10.96.0.53:53"), std::time::Duration::from_millis(500))
            .expect("a flow");
    assert!(flow.request().is_err(), "no endpoints yet");
    lab.write("dns.yaml", &dns("one"));
    lab.eventually("the same flow to reach dns-b1", || flow.request().is_ok_and(|r| r.backend == "dns-b1"));
    lab.write("dns.yaml", &dns("two"));
    lab.eventually("the same flow to move to dns-b2", || flow.request().is_ok_and(|r| r.backend == "dns-b2"));
    // IPv6 through ip6tables.
    assert_eq!(lab.request(&client.ns, "[fd00:96::53]:53", Protocol::Udp, None), answered("dns-b2", client.ipv6));
}
on_both_backends!(
    udp_flows_and_ipv6,
    udp_flows_move_with_their_endpoints_and_ipv6_is_served_legacy,
    udp_flows_move_with_their_endpoints_and_ipv6_is_served_nft
);

fn canary(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    start(&mut lab, backend, &["--iptables-sync-period", "1s"]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    // A firewall reload: every chain of nat, filter and mangle flushed and deleted.
    let tool = format!("iptables-{backend}");
    for table in ["nat", "filter", "mangle"] {
        lab.node().exec(&tool, &["-t", table, "-F"]).expect("flush");
        lab.node().exec(&tool, &["-t", table, "-X"]).expect("delete chains");
    }
    assert!(!answers(&lab, client, "10.96.0.10:80", Protocol::Tcp), "the service is down after the flush");
    lab.eventually("kproxy to notice and rebuild", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    assert!(saved(&lab, backend).contains(":KUBE-PROXY-CANARY"));
}
on_both_backends!(
    canary,
    a_flushed_table_is_rebuilt_at_the_next_sync_legacy,
    a_flushed_table_is_rebuilt_at_the_next_sync_nft
);

fn localhost_node_ports(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n",
        ),
    );
    start(&mut lab, backend, &["--nodeport-addresses", "127.0.0.0/8,192.168.77.0/24"]);
    lab.eventually("the node port on loopback", || answers(&lab, lab.node(), "127.0.0.1:30080", Protocol::Tcp));
    let spread = lab.spread(lab.node(), "127.0.0.1:30080", Protocol::Tcp, 20);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");
    let localnet = lab.node().exec("cat", &["/proc/sys/net/ipv4/conf/all/route_localnet"]).expect("sysctl");
    assert_eq!(localnet.trim(), "1");
}
on_both_backends!(
    localhost_node_ports,
    node_ports_on_loopback_answer_the_node_legacy,
    node_ports_on_loopback_answer_the_node_nft
);

fn changes_and_restarts(backend: &str) {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1"), (2, "extra-b1")]);
    lab.write("web.yaml", &service("web", WEB));
    start(&mut lab, backend, &[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let mut session =
        kproxy_sandbox::TcpSession::open(client, "10.96.0.10:80".parse().unwrap(), ANSWER_WAIT).expect("a session");
    assert_eq!(session.request().expect("first request").backend, "web-b1");

    // A partial sync (another service) and a restart (a full one, with
    // --noflush rewriting every chain) leave the established flow alone.
    lab.write("other.yaml", &service("other", "  clusterIP: 10.96.0.11\n  ports: [{port: 80}]\n"));
    lab.eventually("the other service", || saved(&lab, backend).contains("10.96.0.11/32"));
    assert_eq!(session.request().expect("after a partial sync").backend, "web-b1");
    lab.stop();
    lab.start_in("iptables", &[]);
    assert_eq!(session.request().expect("after a restart").backend, "web-b1");
    let client = &lab.pod("client-a1").ns;

    // A new endpoint, then it leaves: served, then no new connection to it.
    lab.set_app("extra-b1", Some("web"));
    lab.eventually("the new endpoint", || {
        lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 10)
            .contains_key(&answered("extra-b1", lab.pod("client-a1").ipv4))
    });
    lab.set_app("extra-b1", None);
    lab.eventually("the endpoint to go", || {
        backends(&lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 10)) == ["web-b1"]
    });
    // The service goes: its chains too.
    lab.remove("web.yaml");
    lab.eventually("the service's rules to go", || !saved(&lab, backend).contains("10.96.0.10/32"));
}
on_both_backends!(
    changes_and_restarts,
    changes_take_effect_and_established_connections_survive_legacy,
    changes_take_effect_and_established_connections_survive_nft
);

fn policies_and_masquerade_all(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (2, "api-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", &format!("{WEB}  internalTrafficPolicy: Local\n")));
    lab.write(
        "api.yaml",
        &service("api", "  clusterIP: 10.96.0.12\n  selector: {app: api}\n  ports: [{port: 80, targetPort: 8080}]\n"),
    );
    start(&mut lab, backend, &["--masquerade-all"]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    // internalTrafficPolicy: Local: only the local endpoint.
    assert_eq!(backends(&lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 20)), ["web-a1"]);
    // masqueradeAll: even a pod is masqueraded.
    assert_eq!(lab.request(&client.ns, "10.96.0.12:80", Protocol::Tcp, None), answered("api-b1", ip("192.168.77.1")));
}
on_both_backends!(
    policies_and_masquerade_all,
    local_internal_policy_and_masquerade_all_legacy,
    local_internal_policy_and_masquerade_all_nft
);

fn masquerade_all_scope(backend: &'static str) {
    scenarios::masquerade_all_covers_cluster_ips_only(Mode::Iptables(backend));
}
on_both_backends!(
    masquerade_all_scope,
    masquerade_all_covers_cluster_ips_and_never_local_policy_frontends_legacy,
    masquerade_all_covers_cluster_ips_and_never_local_policy_frontends_nft
);

/// `kproxy trace --proxy-mode iptables`'s tracer against what the kernel
/// did: every endpoint reached (and masquerade yes or no), refusals as
/// REJECT, silences as DROP.
fn trace_agrees(backend: &str) {
    let mut lab =
        Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "shop-a1"), (2, "shop-b1"), (2, "dns-b1"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n",
        ),
    );
    shop(&lab);
    lab.write(
        "dns.yaml",
        &service("dns", "  clusterIP: 10.96.0.53\n  selector: {app: dns}\n  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 8080}]\n"),
    );
    lab.write("empty.yaml", &service("empty", "  clusterIP: 10.96.0.30\n  ports: [{port: 80}]\n"));
    start(&mut lab, backend, &[]);
    let pod = lab.pod("client-a1");
    let me = lab.pod("web-a1");
    lab.eventually("web", || answers(&lab, &pod.ns, "10.96.0.10:80", Protocol::Tcp));
    let node_ip = IpAddr::V4(lab.topo.node.ipv4);
    let outside = ip("192.168.77.100");
    let cases: Vec<TraceCase<'_>> = vec![
        (&pod.ns, IpAddr::V4(pod.ipv4), Some("kpbr0"), "10.96.0.10:80", Protocol::Tcp),
        (&pod.ns, IpAddr::V6(pod.ipv6), Some("kpbr0"), "[fd00:96::10]:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "10.96.0.10:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "192.168.77.1:30080", Protocol::Tcp),
        (lab.node(), node_ip, None, "192.168.77.1:30080", Protocol::Tcp),
        (lab.node(), node_ip, None, "10.96.0.10:80", Protocol::Tcp),
        (&me.ns, IpAddr::V4(me.ipv4), Some("kpbr0"), "10.96.0.10:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "198.51.100.20:443", Protocol::Tcp),
        (&pod.ns, IpAddr::V4(pod.ipv4), Some("kpbr0"), "198.51.100.20:443", Protocol::Tcp),
        (&pod.ns, IpAddr::V4(pod.ipv4), Some("kpbr0"), "10.96.0.53:53", Protocol::Udp),
        (&pod.ns, IpAddr::V4(pod.ipv4), Some("kpbr0"), "10.96.0.30:80", Protocol::Tcp),
    ];
    lab.assert_traces_match_the_kernel("iptables", &cases);
}
on_both_backends!(
    trace_agrees,
    kproxy_trace_agrees_with_what_the_kernel_did_legacy,
    kproxy_trace_agrees_with_what_the_kernel_did_nft
);

fn hostile_objects(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.write("noports.yaml", &service("noports", "  clusterIP: 10.96.0.40\n  ports: []\n"));
    lab.write("badrange.yaml", &service("badrange", "  type: LoadBalancer\n  clusterIP: 10.96.0.41\n  loadBalancerSourceRanges: [not-a-cidr]\n  ports: [{port: 80}]\n"));
    // A second service claiming web's cluster IP as an external IP.
    lab.write("thief.yaml", &service("thief", "  clusterIP: 10.96.0.42\n  externalIPs: [10.96.0.10]\n  selector: {app: client}\n  ports: [{name: http, port: 80, targetPort: 8080}]\n"));
    // Not in the nftables version: a scheduler this mode does not have
    // (docs/iptables.md: "random" only; the port is served at random, with
    // a warning).
    lab.write(
        "sched.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: sched, annotations: {{kproxy.io/scheduler: rr}}}}\nspec:\n{}",
            WEB.replace("10.96.0.10", "10.96.0.43")
        ),
    );
    let endpoints: String = (0..10_000)
        .map(|i| format!("- addresses: [10.{}.{}.{}]\n", 100 + i / 65536, (i / 256) % 256, i % 256))
        .collect();
    lab.write(
        "huge.yaml",
        &format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: huge, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nports: [{{name: http, port: 80}}]\nendpoints:\n{endpoints}"),
    );
    start(&mut lab, backend, &[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread), ["web-a1"], "the huge slice was skipped and the thief got nothing: {spread:?}");
    assert!(answers(&lab, client, "10.96.0.42:80", Protocol::Tcp), "the thief's own IP works");
    assert!(answers(&lab, client, "10.96.0.43:80", Protocol::Tcp), "the rr service is served at random");
    let metrics = lab.metrics();
    assert!(metrics.contains("kproxy_manifest_invalid_documents_total 3"), "noports, badrange, huge:\n{metrics}");
    assert!(metrics.contains("kproxy_sync_skipped_objects_total 1"), "the thief's external IP:\n{metrics}");
    assert!(
        metrics.contains(
            "kproxy_annotation_fallbacks_total{annotation=\"kproxy.io/scheduler\",problem=\"unsupported\"} 1"
        ),
        "the rr port:\n{metrics}"
    );
}
on_both_backends!(
    hostile_objects,
    hostile_objects_are_skipped_and_counted_while_the_rest_is_served_legacy,
    hostile_objects_are_skipped_and_counted_while_the_rest_is_served_nft
);

/// Issue 14, item 6: `kproxy.io/scheduler: bogus` and `lc` (this mode has
/// only random), bad weights and a bad health check: each Service is
/// served at random, counted and listed once.
fn bad_annotations(backend: &str) {
    let mut lab = lab::annotations::lab("lc");
    start(&mut lab, backend, &[]);
    lab::annotations::bad_annotations_are_served_with_the_default(&lab, "iptables", "lc");
    nothing_in_the_other_backend(&lab, backend);
}
on_both_backends!(
    bad_annotations,
    bad_or_unsupported_annotations_are_served_with_the_default_and_reported_legacy,
    bad_or_unsupported_annotations_are_served_with_the_default_and_reported_nft
);

/// `GET /healthz` on `to` from `ns`: (status, body).
fn http_get(ns: &kproxy_sandbox::Netns, to: std::net::SocketAddr) -> Option<(u16, String)> {
    ns.enter(|| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect_timeout(&to, std::time::Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(std::time::Duration::from_secs(2))).ok()?;
        stream.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split(' ').nth(1)?.parse().ok()?;
        Some((status, response.split_once("\r\n\r\n")?.1.to_owned()))
    })
}

fn health_check_node_port(backend: &str) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1")]);
    let shop = service(
        "shop",
        "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32000\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n",
    );
    lab.write("shop.yaml", &shop);
    start(&mut lab, backend, &[]);
    let check = "192.168.77.1:32000".parse().unwrap();
    lab.eventually("the health check to answer", || http_get(lab.client(), check).is_some());
    let (status, body) = http_get(lab.client(), check).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        r#"{"service":{"namespace":"default","name":"shop"},"localEndpoints":1,"serviceProxyHealthy":true}"#
    );
    // filter KUBE-NODEPORTS accepts the port (upstream's rule), whatever
    // else the node's INPUT chain does.
    assert!(saved(&lab, backend).contains("--dport 32000 -j ACCEPT"), "{}", saved(&lab, backend));
    // The local pod goes: the load balancer must steer away from this node.
    lab.set_app("shop-a1", None);
    lab.eventually("503", || http_get(lab.client(), check).is_some_and(|(s, _)| s == 503));
    // The service goes: nothing listens any more, and the rule is gone.
    lab.remove("shop.yaml");
    lab.eventually("the listener to close", || http_get(lab.client(), check).is_none());
    lab.eventually("the rule to go", || !saved(&lab, backend).contains("--dport 32000"));
}
on_both_backends!(
    health_check_node_port,
    the_health_check_node_port_tells_the_load_balancer_whether_this_node_has_endpoints_legacy,
    the_health_check_node_port_tells_the_load_balancer_whether_this_node_has_endpoints_nft
);

/// Both families' `iptables-save` of node-a for the backend, comparable
/// across labs: kproxy's chains and every rule, per table and chain in
/// rule order, without counters and without the canary chains (`run`
/// creates them after the restore; they are no part of the payload).
fn comparable(lab: &Lab, backend: &str) -> String {
    let mut chains: std::collections::BTreeMap<(&str, String, String), Vec<String>> = Default::default();
    for tool in ["iptables", "ip6tables"] {
        let saved = lab.node().exec(&format!("{tool}-{backend}-save"), &[]).expect("iptables-save in node-a");
        let mut table = String::new();
        for line in saved.lines().filter(|l| !l.contains("KUBE-PROXY-CANARY")) {
            if let Some(name) = line.strip_prefix('*') {
                table = name.to_owned();
            } else if let Some(chain) = line.strip_prefix(':').and_then(|l| l.split(' ').next()) {
                if chain.starts_with("KUBE-") {
                    chains.entry((tool, table.clone(), chain.to_owned())).or_default();
                }
            } else if let Some(chain) = line.strip_prefix("-A ").and_then(|l| l.split(' ').next()) {
                chains.entry((tool, table.clone(), chain.to_owned())).or_default().push(line.to_owned());
            }
        }
    }
    chains
        .into_iter()
        .map(|((tool, table, chain), rules)| format!("{tool} {table} {chain}\n{}\n", rules.join("\n")))
        .collect()
}

#[test]
fn rendered_jump_rules_split_into_their_arguments() {
    assert_eq!(
        words(r#"-t nat -I OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES"#),
        [
            "-t",
            "nat",
            "-I",
            "OUTPUT",
            "-m",
            "comment",
            "--comment",
            "kubernetes service portals",
            "-j",
            "KUBE-SERVICES"
        ]
    );
    assert_eq!(words(r#"a "" "b \"c\"""#), ["a", "", r#"b "c""#]);
}

fn render_output(backend: &str) {
    let pods = [(1, "web-a1"), (2, "web-b1"), (1, "client-a1")];
    let manifests = |lab: &Lab| {
        lab.write(
            "web.yaml",
            &service(
                "web",
                &format!(
                    "  type: NodePort\n{}",
                    WEB.replace("targetPort: http}", "targetPort: http, nodePort: 30080}")
                ),
            ),
        );
        lab.write("empty.yaml", &service("empty", "  clusterIP: 10.96.0.30\n  ports: [{port: 80}]\n"));
    };
    let probes = |lab: &Lab| -> Vec<(String, Vec<String>)> {
        let client = &lab.pod("client-a1").ns;
        // Fewer probes where each is the same: REJECT answers with ICMP,
        // which the kernel rate-limits (about 0.7 s a probe after the
        // first few); a cluster IP's unserved port is rejected the same way.
        let targets = [
            (client, "10.96.0.10:80", 20),
            (lab.client(), "192.168.77.1:30080", 20),
            (client, "10.96.0.30:80", 3),
            (client, "10.96.0.10:81", 3),
        ];
        targets
            .iter()
            .map(|(ns, to, count)| {
                let mut seen: Vec<String> =
                    lab.spread(ns, to, Protocol::Tcp, *count).keys().map(|o| format!("{o:?}")).collect();
                seen.sort();
                (to.to_string(), seen)
            })
            .collect()
    };
    // Explicit node-port addresses: unset, node ports are served on every
    // address of the node, and the two labs' link-local addresses differ.
    let node_ports = ["--nodeport-addresses", "192.168.77.0/24,fd00:77::/64"];
    // kproxy's own apply.
    let mut own = Lab::new(&pods);
    manifests(&own);
    start(&mut own, backend, &node_ports);
    own.eventually("web", || answers(&own, &own.pod("client-a1").ns, "10.96.0.10:80", Protocol::Tcp));
    let expected = probes(&own);
    let expected_rules = comparable(&own, backend);
    assert!(saved(&own, backend).contains(":KUBE-PROXY-CANARY"), "run adds the canary");
    drop(own);

    // The same manifests rendered, and loaded by the backend's tools.
    let rendered = Lab::new(&pods);
    manifests(&rendered);
    rendered.load_rendered_iptables(backend, &node_ports);
    assert_eq!(probes(&rendered), expected);
    assert!(
        expected[0].1.len() == 2
            && expected[1].1.len() == 2
            && expected[2].1 == ["Refused"]
            && expected[3].1 == ["Refused"],
        "{expected:?}"
    );
    assert_eq!(comparable(&rendered, backend), expected_rules, "iptables-save after render vs after run");
}
on_both_backends!(
    render_output,
    render_output_loaded_by_iptables_restore_behaves_like_kproxys_own_apply_legacy,
    render_output_loaded_by_iptables_restore_behaves_like_kproxys_own_apply_nft
);

fn bridge_detector(backend: &str) {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    start(&mut lab, backend, &["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "kpbr0"]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None), answered("web-b1", client.ipv4), "a pod");
    assert_eq!(
        lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, None),
        answered("web-b1", ip("192.168.77.1")),
        "outside"
    );
    assert!(saved(&lab, backend).contains("! -i kpbr0"), "{}", saved(&lab, backend));
}
on_both_backends!(
    bridge_detector,
    a_bridge_interface_detector_tells_pods_from_outsiders_legacy,
    a_bridge_interface_detector_tells_pods_from_outsiders_nft
);

fn affinity_timeout(backend: &str) {
    let mut lab = Lab::new(&[(2, "web-b1"), (2, "web-b2"), (2, "web-b3"), (1, "client-a1")]);
    let sticky =
        format!("{WEB}  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: 1}}}}\n");
    lab.write("web.yaml", &service("web", &sticky));
    start(&mut lab, backend, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    assert!(saved(&lab, backend).contains("--rcheck --seconds 1 --reap"), "{}", saved(&lab, backend));
    // Back to back: pinned.
    let pinned = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 8);
    assert_eq!(pinned.len(), 1, "pinned within the timeout: {pinned:?}");
    // Each request after the timeout picks again (all 8 on one of 3
    // endpoints by chance: 1 in 2187).
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..8 {
        std::thread::sleep(std::time::Duration::from_millis(1300));
        seen.insert(format!("{:?}", lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None)));
    }
    assert!(seen.len() >= 2, "still pinned after the timeout: {seen:?}");
}
on_both_backends!(
    affinity_timeout,
    a_pinned_client_is_forgotten_after_the_affinity_timeout_legacy,
    a_pinned_client_is_forgotten_after_the_affinity_timeout_nft
);

fn run_once(backend: &str) {
    let lab = Lab::new(&[(1, "web-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    let dir = lab.dir.path().display().to_string();
    let mut args = vec!["run".to_owned(), "--manifests".to_owned(), dir, "--once".to_owned()];
    args.extend(Lab::flags_in("iptables"));
    // The backend by flag, not by environment.
    args.extend(["--iptables-backend".to_owned(), backend.to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out) = lab.kproxy(&args);
    assert!(ok, "{out}");
    assert!(saved(&lab, backend).contains("-j KUBE-SVC-"), "{}", saved(&lab, backend));
    nothing_in_the_other_backend(&lab, backend);
    assert!(answers(&lab, &lab.pod("web-a1").ns, "10.96.0.10:80", Protocol::Tcp));
}
on_both_backends!(
    run_once,
    run_once_programs_the_node_and_exits_zero_legacy,
    run_once_programs_the_node_and_exits_zero_nft
);

fn ipv6_and_udp_node_ports(backend: &str) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports:\n  - {name: http, port: 80, targetPort: http, nodePort: 30080}\n  - {name: u, port: 80, protocol: UDP, targetPort: 8080, nodePort: 30080}\n",
        ),
    );
    start(&mut lab, backend, &[]);
    lab.eventually("the IPv6 node port", || answers(&lab, lab.client(), "[fd00:77::1]:30080", Protocol::Tcp));
    for (to, protocol) in [
        ("[fd00:77::1]:30080", Protocol::Tcp),
        ("[fd00:77::1]:30080", Protocol::Udp),
        ("192.168.77.1:30080", Protocol::Udp),
    ] {
        let spread = lab.spread(lab.client(), to, protocol, 30);
        assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{to}/{protocol}: {spread:?}");
        let client = if to.starts_with('[') { ip("fd00:77::100") } else { ip("192.168.77.100") };
        assert!(
            spread.keys().all(|o| !matches!(o, Outcome::Answered { peer, .. } if *peer == client)),
            "masqueraded: {spread:?}"
        );
    }
}
on_both_backends!(
    ipv6_and_udp_node_ports,
    ipv6_and_udp_node_ports_work_like_ipv4_tcp_legacy,
    ipv6_and_udp_node_ports_work_like_ipv4_tcp_nft
);

fn node_ports_everywhere(backend: &'static str) {
    scenarios::node_ports_answer_where_upstream_does(Mode::Iptables(backend));
}
on_both_backends!(
    node_ports_everywhere,
    node_ports_answer_on_every_local_address_and_localhost_by_default_legacy,
    node_ports_answer_on_every_local_address_and_localhost_by_default_nft
);

fn node_ports_primary(backend: &'static str) {
    scenarios::node_ports_on_primary_addresses_only_when_asked(Mode::Iptables(backend));
}
on_both_backends!(
    node_ports_primary,
    nodeport_addresses_primary_serves_the_primary_addresses_only_legacy,
    nodeport_addresses_primary_serves_the_primary_addresses_only_nft
);

fn field_changes(backend: &'static str) {
    scenarios::field_changes_apply_as_clean_partial_syncs(Mode::Iptables(backend));
}
on_both_backends!(
    field_changes,
    every_field_change_of_a_live_service_applies_as_a_clean_partial_sync_legacy,
    every_field_change_of_a_live_service_applies_as_a_clean_partial_sync_nft
);
