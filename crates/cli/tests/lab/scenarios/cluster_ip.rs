//! Cluster IPs: from a pod, from outside and from the node; services
//! without endpoints, unserved ports and unowned addresses; a pod reaching
//! itself; `internalTrafficPolicy: Local`; dual-stack UDP; what conntrack
//! keeps of a connection; and the tracer against the kernel.

use std::net::IpAddr;

use kproxy_model::Protocol;
use kproxy_nftables::trace::Fate;
use kproxy_sandbox::TcpSession;

use super::{WEB, answers, ip, web_lab};
use crate::lab::*;

/// A cluster IP spreads a pod's connections over every endpoint and the
/// pod keeps its address; the tracer says the same.
pub fn spreads_over_every_endpoint_and_pods_keep_their_address(mode: Mode) {
    let lab = web_lab(mode, &[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&client.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{mode:?}: {spread:?}");
    for outcome in spread.keys() {
        assert!(
            matches!(outcome, Outcome::Answered { peer, .. } if *peer == IpAddr::V4(client.ipv4)),
            "{mode:?}: {spread:?}"
        );
    }
    // The tracer agrees: both endpoints, no masquerade.
    let fates = lab.trace_in(mode.name(), IpAddr::V4(client.ipv4), "10.96.0.10:80", Protocol::Tcp, Some("kpbr0"));
    let expected: Vec<Fate> = ["10.244.1.10:8080", "10.244.2.10:8080"]
        .iter()
        .map(|e| Fate::Dnat { endpoint: e.parse().expect("literal"), masquerade: false })
        .collect();
    assert_eq!(fates, expected, "{mode:?}");
}

/// Outside clients of a cluster IP are masqueraded to node-a's address
/// on the way to each endpoint.
pub fn outside_clients_are_masqueraded(mode: Mode) {
    let lab = web_lab(mode, &[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.eventually("web to answer", || answers(&lab, lab.client(), "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(lab.client(), "10.96.0.10:80", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{mode:?}: {spread:?}");
    assert!(spread.contains_key(&answered("web-a1", ip("10.244.1.1"))), "{mode:?}: {spread:?}");
    assert!(spread.contains_key(&answered("web-b1", ip("192.168.77.1"))), "{mode:?}: {spread:?}");
    let fates = lab.trace_in(mode.name(), ip("192.168.77.100"), "10.96.0.10:80", Protocol::Tcp, Some("eth0"));
    assert!(fates.iter().all(|f| matches!(f, Fate::Dnat { masquerade: true, .. })), "{mode:?}: {fates:?}");
}

/// UDP and IPv6 cluster IPs work like IPv4 TCP, dual-stack, from a pod
/// (its own address) and from outside (masqueraded).
pub fn udp_and_ipv6_services_work_dual_stack(mode: Mode) {
    let mut lab = Lab::new(&[(2, "dns-b1"), (1, "client-a1")]);
    lab.write(
        "dns.yaml",
        &service(
            "dns",
            "  clusterIPs: [10.96.0.53, \"fd00:96::53\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: dns}\n  ports:\n  - {name: dns, port: 53, protocol: UDP, targetPort: 8080}\n  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 8080}\n",
        ),
    );
    lab.start_mode(mode, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("UDP over IPv4", || answers(&lab, &client.ns, "10.96.0.53:53", Protocol::Udp));
    let request = |to: &str, protocol: Protocol| lab.request(&client.ns, to, protocol, None);
    assert_eq!(request("10.96.0.53:53", Protocol::Udp), answered("dns-b1", client.ipv4), "{mode:?}");
    assert_eq!(request("[fd00:96::53]:53", Protocol::Udp), answered("dns-b1", client.ipv6), "{mode:?}");
    assert_eq!(request("[fd00:96::53]:53", Protocol::Tcp), answered("dns-b1", client.ipv6), "{mode:?}");
    assert_eq!(
        lab.request(lab.client(), "[fd00:96::53]:53", Protocol::Tcp, None),
        answered("dns-b1", lab.topo.node.ipv6),
        "{mode:?}: outside, masqueraded"
    );
}

/// A service without endpoints rejects (TCP and UDP, from a pod and from
/// the node), an unserved port of a cluster IP rejects, and an address in
/// the service CIDR no service owns drops.
pub fn no_endpoints_rejects_an_unserved_port_rejects_and_an_unowned_address_drops(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", WEB));
    lab.write(
        "empty.yaml",
        &service(
            "empty",
            "  clusterIP: 10.96.0.30\n  ports: [{port: 80, protocol: TCP}, {name: u, port: 53, protocol: UDP}]\n",
        ),
    );
    lab.start_mode(mode, &[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    let refused = |from: &Netns, to: &str, protocol: Protocol, what: &str| {
        assert_eq!(lab.request(from, to, protocol, None), Outcome::Refused, "{mode:?}: {what}");
    };
    refused(client, "10.96.0.30:80", Protocol::Tcp, "TCP without endpoints");
    refused(client, "10.96.0.30:53", Protocol::Udp, "UDP without endpoints");
    refused(lab.node(), "10.96.0.30:80", Protocol::Tcp, "from the node");
    refused(client, "10.96.0.10:81", Protocol::Tcp, "unserved port");
    let started = std::time::Instant::now();
    assert!(lab.dropped(client, "10.96.0.99:80", None), "{mode:?}: unowned service IP");
    assert!(started.elapsed() >= DROP_WAIT / 2);
    for (to, fate) in [("10.96.0.30:80", Fate::Reject), ("10.96.0.10:81", Fate::Reject), ("10.96.0.99:80", Fate::Drop)]
    {
        let traced = lab.trace_in(mode.name(), ip("10.244.1.11"), to, Protocol::Tcp, Some("kpbr0"));
        assert_eq!(traced, [fate], "{mode:?}: {to}");
    }
}

/// A pod reaching itself through its service (hairpin) gets an answer
/// from itself and from the other endpoint. In the rule-based modes the
/// connection to itself goes out to the bridge and back, masqueraded to
/// the node's bridge address (or the pod could not tell its own reply
/// from its own request); in the ebpf mode the socket hook connects the
/// pod to its own address directly, which needs no masquerade.
pub fn a_pod_reaching_itself_through_its_service_is_answered(mode: Mode) {
    let lab = web_lab(mode, &[(1, "web-a1"), (2, "web-b1")]);
    let me = lab.pod("web-a1");
    lab.eventually("web", || answers(&lab, &me.ns, "10.96.0.10:80", Protocol::Tcp));
    let spread = lab.spread(&me.ns, "10.96.0.10:80", Protocol::Tcp, 40);
    let seen_by_itself = match mode {
        Mode::Ebpf => IpAddr::V4(me.ipv4),
        _ => ip("10.244.1.1"),
    };
    assert_eq!(
        spread.keys().cloned().collect::<Vec<_>>(),
        [answered("web-a1", seen_by_itself), answered("web-b1", me.ipv4)],
        "{mode:?}: {spread:?}"
    );
}

/// `internalTrafficPolicy: Local` sends a pod's connections to node-a's
/// endpoints only, and drops them when node-a has none.
pub fn internal_traffic_policy_local_uses_local_endpoints_and_drops_without_them(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (2, "api-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", &format!("{WEB}  internalTrafficPolicy: Local\n")));
    lab.write("api.yaml", &service("api", "  clusterIP: 10.96.0.12\n  selector: {app: api}\n  internalTrafficPolicy: Local\n  ports: [{port: 80, targetPort: 8080}]\n"));
    lab.start_mode(mode, &[]);
    let client = &lab.pod("client-a1").ns;
    lab.eventually("web", || answers(&lab, client, "10.96.0.10:80", Protocol::Tcp));
    assert_eq!(backends(&lab.spread(client, "10.96.0.10:80", Protocol::Tcp, 20)), ["web-a1"], "{mode:?}");
    assert!(lab.dropped(client, "10.96.0.12:80", None), "{mode:?}: no local endpoint: dropped");
}

/// Opens a TCP connection from a pod on node-a through web's cluster IP
/// (kept open, so its entries cannot expire) and returns what conntrack
/// holds with the cluster IP as original destination: node-a's entries,
/// then the pod namespace's.
pub fn conntrack_entries_of_a_cluster_ip_connection(mode: Mode) -> (Vec<conntrack::Entry>, Vec<conntrack::Entry>) {
    let lab = web_lab(mode, &[(2, "web-b1"), (1, "client-a1")]);
    let client = lab.pod("client-a1");
    lab.eventually("web to answer", || answers(&lab, &client.ns, "10.96.0.10:80", Protocol::Tcp));
    let cluster_ip = ip("10.96.0.10");
    let mut session = TcpSession::open(lab.place(&client.ns), "10.96.0.10:80".parse().expect("literal"), ANSWER_WAIT)
        .expect("a connection through the cluster IP");
    let reply = session.request().expect("an answer on it");
    assert_eq!(reply, kproxy_sandbox::Reply { backend: "web-b1".into(), peer: client.ipv4.into() }, "{mode:?}");
    let node = lab.conntrack_entries_to(lab.node(), cluster_ip);
    let pod = lab.conntrack_entries_to(&client.ns, cluster_ip);
    drop(session);
    (node, pod)
}

/// The lab of [`trace_agrees_with_what_the_kernel_did`]: every frontend kind and verdict.
fn trace_lab(mode: Mode) -> Lab {
    let mut lab =
        Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "shop-a1"), (2, "shop-b1"), (2, "dns-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", super::NODE_PORT_WEB));
    lab.write(
        "shop.yaml",
        &format!(
            "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
            service("shop", "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n")
        ),
    );
    lab.write("dns.yaml", &service("dns", "  clusterIP: 10.96.0.53\n  selector: {app: dns}\n  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 8080}]\n"));
    lab.write("empty.yaml", &service("empty", "  clusterIP: 10.96.0.30\n  ports: [{port: 80}]\n"));
    lab.start_mode(mode, &[]);
    lab
}

/// For each case: every endpoint the kernel reached, with masquerade
/// yes/no, must be exactly what the mode's tracer says; a refusal must be
/// a traced REJECT, a silence a traced DROP.
pub fn trace_agrees_with_what_the_kernel_did(mode: Mode) {
    let lab = trace_lab(mode);
    let pod = lab.pod("client-a1");
    let me = lab.pod("web-a1");
    lab.eventually("web", || answers(&lab, &pod.ns, "10.96.0.10:80", Protocol::Tcp));
    let node_ip = IpAddr::V4(lab.topo.node.ipv4);
    let outside = ip("192.168.77.100");
    let pod_v4 = IpAddr::V4(pod.ipv4);
    let cases: Vec<TraceCase<'_>> = vec![
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.10:80", Protocol::Tcp),
        (&pod.ns, IpAddr::V6(pod.ipv6), Some("kpbr0"), "[fd00:96::10]:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "10.96.0.10:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "192.168.77.1:30080", Protocol::Tcp),
        (lab.node(), node_ip, None, "192.168.77.1:30080", Protocol::Tcp),
        (lab.node(), node_ip, None, "10.96.0.10:80", Protocol::Tcp),
        (&me.ns, IpAddr::V4(me.ipv4), Some("kpbr0"), "10.96.0.10:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "198.51.100.20:443", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "198.51.100.20:443", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.53:53", Protocol::Udp),
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.30:80", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.10:81", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.99:80", Protocol::Tcp),
    ];
    lab.assert_traces_match_the_kernel(mode.name(), &cases);
}
