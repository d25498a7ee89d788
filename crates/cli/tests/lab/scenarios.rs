//! Real-packet scenarios shared by every kernel mode: each takes the
//! [`Mode`] to run kproxy in and asserts what clients and backends saw,
//! so a behaviour is written once and checked in nftables mode, in
//! iptables mode on both backends, and in IPVS mode in the VM.

use std::net::IpAddr;

use kproxy_model::Protocol;
use kproxy_sandbox::ProbeError;

use super::*;

/// How many requests a spread sends: the IPVS VM's guest is slow.
fn tries(mode: Mode) -> usize {
    if mode == Mode::Ipvs { 6 } else { 16 }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address literal")
}

/// Waits until `to` answers `from`.
pub fn wait_for(lab: &Lab, from: &Netns, to: &str, protocol: Protocol) {
    lab.eventually(&format!("{to}/{protocol} to answer {}", from.name()), || {
        matches!(lab.request(from, to, protocol, None), Outcome::Answered { .. })
    });
}

/// The distinct outcomes of `count` requests.
pub fn outcomes(lab: &Lab, from: &Netns, to: &str, protocol: Protocol, count: usize) -> Vec<Outcome> {
    lab.spread(from, to, protocol, count).into_keys().collect()
}

/// shop: a LoadBalancer Service under `externalTrafficPolicy: Local` at
/// 198.51.100.20, with external IP 198.51.100.30 (both routed to node-a by
/// the client), cluster IP 10.96.0.20 and node port 30443.
pub fn local_shop() -> String {
    format!(
        "{}status:\n  loadBalancer:\n    ingress: [{{ip: 198.51.100.20}}]\n",
        service(
            "shop",
            "  type: LoadBalancer\n  clusterIP: 10.96.0.20\n  selector: {app: shop}\n  externalTrafficPolicy: Local\n  externalIPs: [198.51.100.30]\n  ports: [{name: https, port: 443, targetPort: http, nodePort: 30443}]\n",
        )
    )
}

/// `masqueradeAll` masquerades cluster-IP traffic, pods' included, and
/// never traffic to an `externalTrafficPolicy: Local` frontend: outsiders
/// keep their address (and reach the local endpoint only), pods keep
/// theirs (and reach every endpoint).
pub fn masquerade_all_covers_cluster_ips_only(mode: Mode) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    lab.write("shop.yaml", &local_shop());
    lab.start_mode(mode, &["--masquerade-all"]);
    let client = lab.pod("client-a1");
    let count = tries(mode);

    // The cluster IP: even a pod is masqueraded (to the bridge's address
    // towards its own node's endpoint, to the uplink's towards node-b).
    wait_for(&lab, &client.ns, "10.96.0.20:443", Protocol::Tcp);
    let spread = lab.spread(&client.ns, "10.96.0.20:443", Protocol::Tcp, count * 2);
    assert_eq!(backends(&spread), ["shop-a1", "shop-b1"], "{mode:?}: {spread:?}");
    for outcome in spread.keys() {
        assert!(
            matches!(outcome, Outcome::Answered { peer, .. } if *peer != IpAddr::V4(client.ipv4)),
            "{mode:?}: a pod to a cluster IP under masqueradeAll: {spread:?}"
        );
    }

    // Local-policy frontends from outside: the client's own address, the
    // local endpoint only.
    let outside = ip("192.168.77.100");
    for to in ["198.51.100.20:443", "198.51.100.30:443", "192.168.77.1:30443"] {
        wait_for(&lab, lab.client(), to, Protocol::Tcp);
        assert_eq!(
            outcomes(&lab, lab.client(), to, Protocol::Tcp, count),
            [answered("shop-a1", outside)],
            "{mode:?}: outside -> {to}"
        );
    }

    // Pods to a Local-policy frontend: every endpoint, their own address.
    let spread = lab.spread(&client.ns, "198.51.100.20:443", Protocol::Tcp, count * 2);
    assert_eq!(
        spread.keys().cloned().collect::<Vec<_>>(),
        [answered("shop-a1", client.ipv4), answered("shop-b1", client.ipv4)],
        "{mode:?}: a pod to the load-balancer IP"
    );

    // Without the local endpoint, outsiders are dropped (masqueradeAll
    // does not turn the frontend into a Cluster-policy one).
    lab.set_app("shop-a1", None);
    lab.eventually("the local endpoint to go", || {
        matches!(
            kproxy_sandbox::tcp_request(lab.client(), "198.51.100.20:443".parse().expect("literal"), None, DROP_WAIT),
            Err(ProbeError::TimedOut)
        )
    });
}

/// web: a NodePort Service on 30080 (both families), web-a1 on node-a and
/// web-b1 on node-b.
pub const NODE_PORT_WEB: &str = "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";

/// With `nodePortAddresses` unset, node ports answer where upstream's
/// proxy of the same mode answers: the iptables and IPVS modes on every
/// local address (a secondary one too; IPv4 loopback in iptables mode
/// only, masqueraded), the nftables mode on the node's primary addresses
/// only. The iptables and IPVS modes say so at start, as upstream.
pub fn node_ports_answer_where_upstream_does(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", NODE_PORT_WEB));
    lab.start_mode(mode, &[]);
    let every_address = mode != Mode::Nftables;
    let client = lab.pod("client-a1");
    let bridge = lab.topo.node.addressing;

    // The primary addresses: every mode.
    wait_for(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp);
    wait_for(&lab, lab.client(), "[fd00:77::1]:30080", Protocol::Tcp);
    // A secondary address (the pod bridge's), from outside and from a pod.
    for (from, to) in [
        (lab.client(), format!("{}:30080", bridge.bridge_ipv4)),
        (&client.ns, format!("{}:30080", bridge.bridge_ipv4)),
        (lab.client(), format!("[{}]:30080", bridge.bridge_ipv6)),
    ] {
        let outcome = lab.request(from, &to, Protocol::Tcp, None);
        if every_address {
            assert!(matches!(outcome, Outcome::Answered { .. }), "{mode:?}: {} -> {to}: {outcome:?}", from.name());
        } else {
            assert_eq!(outcome, Outcome::Refused, "{mode:?}: {} -> {to}: not a node-port address", from.name());
        }
    }
    // Localhost: IPv4 in iptables mode only (route_localnet), masqueraded
    // to the node's address on the way out; never IPv6.
    let localhost = lab.spread(lab.node(), "127.0.0.1:30080", Protocol::Tcp, tries(mode));
    if matches!(mode, Mode::Iptables(_)) {
        assert_eq!(backends(&localhost), ["web-a1", "web-b1"], "{mode:?}: {localhost:?}");
        assert!(
            localhost.keys().all(|o| matches!(o, Outcome::Answered { peer, .. } if !peer.is_loopback())),
            "{mode:?}: masqueraded: {localhost:?}"
        );
    } else {
        assert_eq!(localhost.into_keys().collect::<Vec<_>>(), [Outcome::Refused], "{mode:?}: 127.0.0.1");
    }
    assert_eq!(lab.request(lab.node(), "[::1]:30080", Protocol::Tcp, None), Outcome::Refused, "{mode:?}: ::1");

    let warned = lab.log().contains("nodePortAddresses is unset");
    assert_eq!(warned, every_address, "{mode:?}: the startup warning about an unset nodePortAddresses");
}

/// `--nodeport-addresses primary` narrows the iptables and IPVS modes to
/// the primary addresses (and no warning).
pub fn node_ports_on_primary_addresses_only_when_asked(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", NODE_PORT_WEB));
    lab.start_mode(mode, &["--nodeport-addresses", "primary"]);
    wait_for(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp);
    let bridge = format!("{}:30080", lab.topo.node.addressing.bridge_ipv4);
    assert_eq!(lab.request(lab.client(), &bridge, Protocol::Tcp, None), Outcome::Refused, "{mode:?}: {bridge}");
    assert_eq!(lab.request(lab.node(), "127.0.0.1:30080", Protocol::Tcp, None), Outcome::Refused, "{mode:?}");
    assert!(!lab.log().contains("nodePortAddresses is unset"), "{mode:?}: no warning when set");
}
