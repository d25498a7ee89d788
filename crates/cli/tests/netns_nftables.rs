//! The nftables mode on the real kernel: real connections through node-a
//! for every frontend kind and verdict, checked against what the backends
//! saw and against `kproxy trace` for the same packets.

mod lab;

use std::net::IpAddr;

use kproxy_model::Protocol;
use kproxy_nftables::trace::Fate;
use lab::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// web-a1 on node-a, web-b1 on node-b, a client pod on node-a.
fn web_lab() -> Lab {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&[]);
    lab
}

#[test]
fn a_cluster_ip_spreads_over_every_endpoint_and_pods_keep_their_address() {
    let lab = web_lab();
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || {
        matches!(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");
    for outcome in spread.keys() {
        assert!(matches!(outcome, Outcome::Answered { peer, .. } if *peer == IpAddr::V4(client.ipv4)), "{spread:?}");
    }
    // The tracer agrees: both endpoints, no masquerade.
    let fates = lab.trace(IpAddr::V4(client.ipv4), "10.96.0.10:80", Protocol::Tcp, Some("kpbr0"));
    let expected: Vec<Fate> = ["10.244.1.10:8080", "10.244.2.10:8080"]
        .iter()
        .map(|e| Fate::Dnat { endpoint: e.parse().unwrap(), masquerade: false })
        .collect();
    assert_eq!(fates, expected);
}

#[test]
fn outside_clients_of_a_cluster_ip_are_masqueraded() {
    let lab = web_lab();
    lab.eventually("web to answer", || {
        matches!(lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let spread = lab.spread(lab.client(), "10.96.0.10:80", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");
    // Masqueraded to node-a's address on the way to each endpoint.
    assert!(spread.contains_key(&answered("web-a1", ip("10.244.1.1"))), "{spread:?}");
    assert!(spread.contains_key(&answered("web-b1", ip("192.168.77.1"))), "{spread:?}");
    let fates = lab.trace(ip("192.168.77.100"), "10.96.0.10:80", Protocol::Tcp, Some("eth0"));
    assert!(fates.iter().all(|f| matches!(f, Fate::Dnat { masquerade: true, .. })), "{fates:?}");
}

fn answers(lab: &Lab, from: &kproxy_sandbox::Netns, to: &str, protocol: Protocol) -> bool {
    matches!(lab.request(from, to, protocol, None), Outcome::Answered { .. })
}

#[test]
fn a_node_port_answers_outside_clients_and_the_node_itself_masqueraded() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n",
        ),
    );
    lab.start(&[]);
    lab.eventually("the node port", || answers(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp));
    let spread = lab.spread(lab.client(), "192.168.77.1:30080", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{spread:?}");
    assert!(
        spread.keys().all(|o| !matches!(o, Outcome::Answered { peer, .. } if *peer == ip("192.168.77.100"))),
        "{spread:?}"
    );
    let from_node = lab.spread(lab.node(), "192.168.77.1:30080", Protocol::Tcp, 20);
    assert_eq!(backends(&from_node), ["web-a1", "web-b1"], "{from_node:?}");
    // UDP too.
    let udp = lab.spread(lab.client(), "192.168.77.1:30080", Protocol::Udp, 1);
    assert!(udp.keys().all(|o| *o == Outcome::Refused), "UDP is not served on this port: {udp:?}");
}

#[test]
fn udp_and_ipv6_services_work_dual_stack() {
    let mut lab = Lab::new(&[(2, "dns-b1"), (1, "client-a1")]);
    lab.write(
        "dns.yaml",
        &service(
            "dns",
            "  clusterIPs: [10.96.0.53, \"fd00:96::53\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: dns}\n  ports:\n  - {name: dns, port: 53, protocol: UDP, targetPort: 8080}\n  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 8080}\n",
        ),
    );
    lab.start(&[]);
    let client = lab.pod("client-a1");
    let dns = lab.pod("dns-b1");
    lab.eventually("UDP over IPv4", || answers(&lab, &client.ns, "10.96.0.53:53", Protocol::Udp));
    assert_eq!(lab.request(&client.ns, "10.96.0.53:53", Protocol::Udp, None), answered("dns-b1", client.ipv4));
    assert_eq!(lab.request(&client.ns, "[fd00:96::53]:53", Protocol::Udp, None), answered("dns-b1", client.ipv6));
    assert_eq!(lab.request(&client.ns, "[fd00:96::53]:53", Protocol::Tcp, None), answered("dns-b1", client.ipv6));
    assert_eq!(
        lab.request(lab.client(), "[fd00:96::53]:53", Protocol::Tcp, None),
        answered("dns-b1", lab.topo.node.ipv6)
    );
    let _ = dns;
}

#[test]
fn no_endpoints_rejects_an_unserved_port_rejects_and_an_unowned_address_drops() {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.write(
        "empty.yaml",
        &service(
            "empty",
            "  clusterIP: 10.96.0.30\n  ports: [{port: 80, protocol: TCP}, {name: u, port: 53, protocol: UDP}]\n",
        ),
    );
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(lab.request(client, "10.96.0.30:80", Protocol::Tcp, None), Outcome::Refused, "TCP without endpoints");
    assert_eq!(lab.request(client, "10.96.0.30:53", Protocol::Udp, None), Outcome::Refused, "UDP without endpoints");
    assert_eq!(lab.request(lab.node(), "10.96.0.30:80", Protocol::Tcp, None), Outcome::Refused, "from the node");
    assert_eq!(lab.request(client, "10.96.0.10:81", Protocol::Tcp, None), Outcome::Refused, "unserved port");
    let started = std::time::Instant::now();
    assert_eq!(
        kproxy_sandbox::tcp_request(client, "10.96.0.99:80".parse().unwrap(), None, DROP_WAIT)
            .map_err(|e| format!("{e:?}")),
        Err("TimedOut".into()),
        "unowned service IP"
    );
    assert!(started.elapsed() >= DROP_WAIT / 2);
    for (to, fate) in [("10.96.0.30:80", Fate::Reject), ("10.96.0.10:81", Fate::Reject), ("10.96.0.99:80", Fate::Drop)]
    {
        assert_eq!(lab.trace(ip("10.244.1.11"), to, Protocol::Tcp, Some("kpbr0")), [fate], "{to}");
    }
}

fn shop(lab: &Lab, ranges: &str) {
    lab.write(
        "shop.yaml",
        &format!(
            "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
            service(
                "shop",
                &format!(
                    "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {{app: shop}}\n  externalTrafficPolicy: Local\n  externalIPs: [192.168.77.1]\n{ranges}  ports: [{{name: https, port: 443, targetPort: http, nodePort: 30443}}]\n"
                )
            )
        ),
    );
}

#[test]
fn local_policy_keeps_the_client_address_and_uses_local_endpoints_only() {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    shop(&lab, "");
    lab.start(&[]);
    lab.eventually("the LB IP", || answers(&lab, lab.client(), "198.51.100.20:443", Protocol::Tcp));
    let outside = ip("192.168.77.100");
    for to in ["198.51.100.20:443", "192.168.77.1:30443", "192.168.77.1:443"] {
        let spread = lab.spread(lab.client(), to, Protocol::Tcp, 12);
        assert_eq!(spread.keys().collect::<Vec<_>>(), [&answered("shop-a1", outside)], "{to}: {spread:?}");
        assert_eq!(lab.trace(outside, to, Protocol::Tcp, Some("eth0")).len(), 1, "{to}");
    }
    // Pods of the cluster reach every endpoint (short-circuit), unmasqueraded.
    let client = lab.pod("client-a1");
    let spread = lab.spread(&client.ns, "198.51.100.20:443", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["shop-a1", "shop-b1"], "{spread:?}");
}

#[test]
fn local_policy_without_local_endpoints_drops_outside_traffic_but_serves_pods() {
    let mut lab = Lab::new(&[(2, "shop-b1"), (1, "client-a1")]);
    shop(&lab, "");
    lab.start(&[]);
    let client = lab.pod("client-a1");
    lab.eventually("the short-circuit", || answers(&lab, &client.ns, "198.51.100.20:443", Protocol::Tcp));
    assert_eq!(lab.request(&client.ns, "198.51.100.20:443", Protocol::Tcp, None), answered("shop-b1", client.ipv4));
    let outside = kproxy_sandbox::tcp_request(lab.client(), "198.51.100.20:443".parse().unwrap(), None, DROP_WAIT);
    assert!(matches!(outside, Err(kproxy_sandbox::ProbeError::TimedOut)), "{outside:?}");
    let node_port = kproxy_sandbox::tcp_request(lab.client(), "192.168.77.1:30443".parse().unwrap(), None, DROP_WAIT);
    assert!(matches!(node_port, Err(kproxy_sandbox::ProbeError::TimedOut)), "{node_port:?}");
    // The node itself short-circuits too (masqueraded).
    assert!(answers(&lab, lab.node(), "192.168.77.1:30443", Protocol::Tcp));
    assert_eq!(lab.trace(ip("192.168.77.100"), "198.51.100.20:443", Protocol::Tcp, Some("eth0")), [Fate::Drop]);
}

#[test]
fn load_balancer_source_ranges_admit_only_listed_sources() {
    let mut lab = Lab::new(&[(1, "shop-a1")]);
    shop(&lab, "  loadBalancerSourceRanges: [203.0.113.0/24]\n");
    lab.start(&[]);
    let allowed = Some(ip("203.0.113.9"));
    lab.eventually("an allowed source", || {
        matches!(lab.request(lab.client(), "198.51.100.20:443", Protocol::Tcp, allowed), Outcome::Answered { .. })
    });
    assert_eq!(
        lab.request(lab.client(), "198.51.100.20:443", Protocol::Tcp, allowed),
        answered("shop-a1", ip("203.0.113.9"))
    );
    let denied = kproxy_sandbox::tcp_request(lab.client(), "198.51.100.20:443".parse().unwrap(), None, DROP_WAIT);
    assert!(matches!(denied, Err(kproxy_sandbox::ProbeError::TimedOut)), "{denied:?}");
    // Ranges guard the load-balancer IP only: the node port still answers.
    assert!(answers(&lab, lab.client(), "192.168.77.1:30443", Protocol::Tcp));
    assert_eq!(lab.trace(ip("192.168.77.100"), "198.51.100.20:443", Protocol::Tcp, Some("eth0")), [Fate::Drop]);
}

#[test]
fn a_pod_reaching_itself_through_its_service_is_masqueraded() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&[]);
    let me = lab.pod("web-a1");
    lab.eventually("web", || answers(&lab, &me.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&me.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    // Itself: through the bridge with the node's address; the other: as itself.
    assert_eq!(
        spread.keys().cloned().collect::<Vec<_>>(),
        [answered("web-a1", ip("10.244.1.1")), answered("web-b1", me.ipv4)],
        "{spread:?}"
    );
}

#[test]
fn session_affinity_keeps_a_client_on_one_endpoint() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", &format!("{WEB}  sessionAffinity: ClientIP\n")));
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 15);
    assert_eq!(spread.len(), 1, "one endpoint for one client: {spread:?}");
    // Another client sticks too, to its own pick; kproxy's sticky sets
    // hold both.
    let source = Some(ip("203.0.113.9"));
    let other: std::collections::BTreeSet<Outcome> =
        (0..10).map(|_| lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, source)).collect();
    assert_eq!(other.len(), 1, "{other:?}");
    let ruleset = lab.ruleset();
    assert!(ruleset.contains("10.244.1.12 expires") && ruleset.contains("203.0.113.9 expires"), "{ruleset}");
}

#[test]
fn round_robin_rotates_through_the_endpoints_in_turn() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, annotations: {{kproxy.io/scheduler: rr}}}}\nspec:\n{WEB}"
        ),
    );
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let order: Vec<String> = (0..9)
        .map(|_| match lab.request(client, "10.96.0.10:80", Protocol::Tcp, None) {
            Outcome::Answered { backend, .. } => backend,
            other => panic!("{other:?}"),
        })
        .collect();
    // Three endpoints in turn: every window of three holds all of them.
    for window in order.windows(3) {
        let mut w = window.to_vec();
        w.sort();
        assert_eq!(w, ["web-a1", "web-a2", "web-b1"], "{order:?}");
    }
}

/// `sh` keeps each client on one endpoint, the same after a restart
/// rebuilt the tables (the hash seed is fixed); `dh` sends every client of
/// a frontend to one endpoint.
#[test]
fn source_and_destination_hashing_pick_by_address() {
    // Clients on node-a, where kproxy runs.
    let pods = [(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "c-a1"), (1, "c-a2"), (1, "c-a3"), (1, "c-a4")];
    let mut lab = Lab::new(&pods);
    let spec = |name: &str, ip: &str, scheduler: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, annotations: {{kproxy.io/scheduler: {scheduler}}}}}\n\
             spec:\n  clusterIP: {ip}\n  selector: {{app: web}}\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
        )
    };
    lab.write("sh.yaml", &spec("by-source", "10.96.0.10", "sh"));
    lab.write("dh.yaml", &spec("by-destination", "10.96.0.11", "dh"));
    lab.start(&[]);
    let clients = ["c-a1", "c-a2", "c-a3", "c-a4"];
    lab.eventually("by-source", || answers(&lab, &lab.pod("c-a1").ns, "10.96.0.10:80", Protocol::Tcp));
    let picks = |lab: &Lab, to: &str| -> Vec<String> {
        clients
            .iter()
            .map(|c| {
                let seen = backends(&lab.spread(&lab.pod(c).ns, to, Protocol::Tcp, 6));
                assert_eq!(seen.len(), 1, "{c} to {to}: one endpoint per client: {seen:?}");
                seen[0].clone()
            })
            .collect()
    };
    let by_source = picks(&lab, "10.96.0.10:80");
    // Fixed seed, fixed addresses: this spread is deterministic.
    let distinct: std::collections::BTreeSet<&String> = by_source.iter().collect();
    assert!(distinct.len() > 1, "sh spreads clients over endpoints: {by_source:?}");
    let by_destination = picks(&lab, "10.96.0.11:80");
    assert!(by_destination.iter().all(|b| *b == by_destination[0]), "dh: one endpoint for all: {by_destination:?}");

    lab.stop();
    lab.start(&[]);
    lab.eventually("by-source", || answers(&lab, &lab.pod("c-a1").ns, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(picks(&lab, "10.96.0.10:80"), by_source, "sh picks the same endpoints after a restart");
    assert_eq!(picks(&lab, "10.96.0.11:80"), by_destination);
}

/// For each case: every endpoint the kernel reached, with masquerade
/// yes/no, must be exactly what `kproxy trace` says; a refusal must be a
/// traced REJECT, a silence a traced DROP.
#[test]
fn kproxy_trace_agrees_with_what_the_kernel_did() {
    let mut lab =
        Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "shop-a1"), (2, "shop-b1"), (2, "dns-b1"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n",
        ),
    );
    lab.write(
        "shop.yaml",
        &format!(
            "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
            service("shop", "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n")
        ),
    );
    lab.write("dns.yaml", &service("dns", "  clusterIP: 10.96.0.53\n  selector: {app: dns}\n  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 8080}]\n"));
    lab.write("empty.yaml", &service("empty", "  clusterIP: 10.96.0.30\n  ports: [{port: 80}]\n"));
    lab.start(&[]);
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
        (&pod.ns, IpAddr::V4(pod.ipv4), Some("kpbr0"), "10.96.0.10:81", Protocol::Tcp),
        (&pod.ns, IpAddr::V4(pod.ipv4), Some("kpbr0"), "10.96.0.99:80", Protocol::Tcp),
    ];
    lab.assert_traces_match_the_kernel("nftables", &cases);
}

#[test]
fn ipv6_and_udp_node_ports_work_like_ipv4_tcp() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports:\n  - {name: http, port: 80, targetPort: http, nodePort: 30080}\n  - {name: u, port: 80, protocol: UDP, targetPort: 8080, nodePort: 30080}\n",
        ),
    );
    lab.start(&[]);
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

#[test]
fn masquerade_all_covers_cluster_ips_and_never_local_policy_frontends() {
    scenarios::masquerade_all_covers_cluster_ips_only(Mode::Nftables);
}

#[test]
fn a_bridge_interface_detector_tells_pods_from_outsiders() {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.start(&["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "kpbr0"]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None), answered("web-b1", client.ipv4), "a pod");
    assert_eq!(
        lab.request(lab.client(), "10.96.0.10:80", Protocol::Tcp, None),
        answered("web-b1", ip("192.168.77.1")),
        "outside"
    );
}

#[test]
fn internal_traffic_policy_local_uses_local_endpoints_and_drops_without_them() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (2, "api-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", &format!("{WEB}  internalTrafficPolicy: Local\n")));
    lab.write("api.yaml", &service("api", "  clusterIP: 10.96.0.12\n  selector: {app: api}\n  internalTrafficPolicy: Local\n  ports: [{port: 80, targetPort: 8080}]\n"));
    lab.start(&[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(backends(&lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 20)), ["web-a1"]);
    let api = kproxy_sandbox::tcp_request(client, "10.96.0.12:80".parse().unwrap(), None, DROP_WAIT);
    assert!(matches!(api, Err(kproxy_sandbox::ProbeError::TimedOut)), "no local endpoint: dropped, {api:?}");
}

#[test]
fn run_once_programs_the_node_and_exits_zero() {
    let lab = Lab::new(&[(1, "web-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    let dir = lab.dir.path().display().to_string();
    let mut args = vec!["run".to_owned(), "--manifests".to_owned(), dir, "--once".to_owned()];
    args.extend(Lab::flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out) = lab.kproxy(&args);
    assert!(ok, "{out}");
    assert!(lab.ruleset().contains("10.96.0.10 . tcp . 80"));
    let client = &lab.pod("web-a1").ns;
    assert!(answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
}

#[test]
fn a_pinned_client_is_forgotten_after_the_affinity_timeout() {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            &format!(
                "{WEB}  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: 1}}}}\n"
            ),
        ),
    );
    lab.start(&[]);
    let client = lab.pod("client-a1");
    lab.eventually("web", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let pinned = format!("{} expires", client.ipv4);
    assert!(lab.ruleset().contains(&pinned), "{}", lab.ruleset());
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(!lab.ruleset().contains(&pinned), "still pinned after the timeout:\n{}", lab.ruleset());
}

#[test]
fn weighted_round_robin_splits_connections_by_the_weights() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    let a1 = lab.pod("web-a1").ipv4;
    lab.write(
        "web.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, annotations: {{kproxy.io/scheduler: wrr, \
             kproxy.io/weights: \"{a1}=3\"}}}}\nspec:\n{WEB}"
        ),
    );
    lab.start(&[]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || {
        matches!(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    let count = |name: &str| {
        spread
            .iter()
            .filter(|(o, _)| matches!(o, Outcome::Answered { backend, .. } if backend == name))
            .map(|(_, n)| *n)
            .sum::<usize>()
    };
    // One connection went by before the spread: wrr is exact over every
    // cycle of four, so 40 more split 30:10 give or take that one.
    let (a, b) = (count("web-a1"), count("web-b1"));
    assert_eq!(a + b, 40, "{spread:?}");
    assert!((28..=32).contains(&a), "3:1 expected, got {a}:{b}");
}

#[test]
fn maglev_keeps_a_client_on_its_endpoint_when_another_leaves() {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "web-a2"), (1, "client-a1")]);
    lab.write(
        "web.yaml",
        &format!("apiVersion: v1\nkind: Service\nmetadata: {{name: web, annotations: {{kproxy.io/scheduler: mh}}}}\nspec:\n{WEB}"),
    );
    lab.start(&[]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || {
        matches!(lab.request(&client.ns, "10.96.0.10:80", Protocol::Tcp, None), Outcome::Answered { .. })
    });
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 10);
    let chosen = backends(&spread);
    assert_eq!(chosen.len(), 1, "one client, one endpoint: {spread:?}");
    let other = ["web-a1", "web-b1", "web-a2"].into_iter().find(|p| *p != chosen[0]).unwrap();
    let gone = lab.pod(other).ipv4.to_string();
    lab.set_app(other, None);
    lab.eventually("the other endpoint to leave", || !lab.ruleset().contains(&gone));
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 10);
    assert_eq!(backends(&spread), chosen, "{spread:?}");
}

#[test]
fn node_ports_answer_on_the_primary_addresses_only_as_upstreams_nftables_mode() {
    scenarios::node_ports_answer_where_upstream_does(Mode::Nftables);
}
