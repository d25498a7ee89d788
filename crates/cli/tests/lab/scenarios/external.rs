//! Frontends for traffic from outside: node ports (from outside and from
//! the node, IPv4 and IPv6, TCP and UDP), external and load-balancer IPs,
//! `externalTrafficPolicy: Local` with and without a local endpoint, and
//! load-balancer source ranges.

use kproxy_model::Protocol;
use kproxy_nftables::trace::Fate;

use super::{answers, ip};
use crate::lab::*;

/// web as a NodePort Service on 30080 (IPv4 only).
const NODE_PORT_WEB_V4: &str = "  type: NodePort\n  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30080}]\n";

/// A node port answers outside clients (masqueraded) and the node itself,
/// spreading over every endpoint; a protocol it does not serve is refused.
pub fn a_node_port_answers_outside_clients_and_the_node_itself_masqueraded(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write("web.yaml", &service("web", NODE_PORT_WEB_V4));
    lab.start_mode(mode, &[]);
    lab.eventually("the node port", || answers(&lab, lab.client(), "192.168.77.1:30080", Protocol::Tcp));
    let spread = lab.spread(lab.client(), "192.168.77.1:30080", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{mode:?}: {spread:?}");
    assert!(
        spread.keys().all(|o| !matches!(o, Outcome::Answered { peer, .. } if *peer == ip("192.168.77.100"))),
        "{mode:?}: {spread:?}"
    );
    let from_node = lab.spread(lab.node(), "192.168.77.1:30080", Protocol::Tcp, 20);
    assert_eq!(backends(&from_node), ["web-a1", "web-b1"], "{mode:?}: {from_node:?}");
    let udp = lab.spread(lab.client(), "192.168.77.1:30080", Protocol::Udp, 1);
    assert!(udp.keys().all(|o| *o == Outcome::Refused), "{mode:?}: UDP is not served on this port: {udp:?}");
}

/// IPv6 node ports and UDP node ports spread and masquerade like IPv4 TCP.
pub fn ipv6_and_udp_node_ports_work_like_ipv4_tcp(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1")]);
    lab.write(
        "web.yaml",
        &service(
            "web",
            "  type: NodePort\n  clusterIPs: [10.96.0.10, \"fd00:96::10\"]\n  ipFamilies: [IPv4, IPv6]\n  selector: {app: web}\n  ports:\n  - {name: http, port: 80, targetPort: http, nodePort: 30080}\n  - {name: u, port: 80, protocol: UDP, targetPort: 8080, nodePort: 30080}\n",
        ),
    );
    lab.start_mode(mode, &[]);
    lab.eventually("the IPv6 node port", || answers(&lab, lab.client(), "[fd00:77::1]:30080", Protocol::Tcp));
    for (to, protocol) in [
        ("[fd00:77::1]:30080", Protocol::Tcp),
        ("[fd00:77::1]:30080", Protocol::Udp),
        ("192.168.77.1:30080", Protocol::Udp),
    ] {
        let spread = lab.spread(lab.client(), to, protocol, 30);
        assert_eq!(backends(&spread), ["web-a1", "web-b1"], "{mode:?}: {to}/{protocol}: {spread:?}");
        let client = if to.starts_with('[') { ip("fd00:77::100") } else { ip("192.168.77.100") };
        assert!(
            spread.keys().all(|o| !matches!(o, Outcome::Answered { peer, .. } if *peer == client)),
            "{mode:?}: masqueraded: {spread:?}"
        );
    }
}

/// shop: a LoadBalancer Service under `externalTrafficPolicy: Local` at
/// 198.51.100.20, with node-a's own address as external IP, `ranges` (a
/// `loadBalancerSourceRanges` line or nothing), node port 30443.
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

/// `externalTrafficPolicy: Local`: outside clients of the load-balancer
/// IP, the node port and the external IP keep their address and reach
/// node-a's endpoint only; pods reach every endpoint (short-circuit).
pub fn local_policy_keeps_the_client_address_and_uses_local_endpoints_only(mode: Mode) {
    let mut lab = Lab::new(&[(1, "shop-a1"), (2, "shop-b1"), (1, "client-a1")]);
    shop(&lab, "");
    lab.start_mode(mode, &[]);
    lab.eventually("the LB IP", || answers(&lab, lab.client(), "198.51.100.20:443", Protocol::Tcp));
    let outside = ip("192.168.77.100");
    for to in ["198.51.100.20:443", "192.168.77.1:30443", "192.168.77.1:443"] {
        let spread = lab.spread(lab.client(), to, Protocol::Tcp, 12);
        assert_eq!(spread.keys().collect::<Vec<_>>(), [&answered("shop-a1", outside)], "{mode:?}: {to}: {spread:?}");
        assert_eq!(lab.trace_in(mode.name(), outside, to, Protocol::Tcp, Some("eth0")).len(), 1, "{mode:?}: {to}");
    }
    let client = lab.pod("client-a1");
    let spread = lab.spread(&client.ns, "198.51.100.20:443", Protocol::Tcp, 30);
    assert_eq!(backends(&spread), ["shop-a1", "shop-b1"], "{mode:?}: {spread:?}");
}

/// `externalTrafficPolicy: Local` without a local endpoint drops outside
/// traffic (load-balancer IP and node port) but serves pods and the node.
pub fn local_policy_without_local_endpoints_drops_outside_traffic_but_serves_pods(mode: Mode) {
    let mut lab = Lab::new(&[(2, "shop-b1"), (1, "client-a1")]);
    shop(&lab, "");
    lab.start_mode(mode, &[]);
    let client = lab.pod("client-a1");
    lab.eventually("the short-circuit", || answers(&lab, &client.ns, "198.51.100.20:443", Protocol::Tcp));
    assert_eq!(
        lab.request(&client.ns, "198.51.100.20:443", Protocol::Tcp, None),
        answered("shop-b1", client.ipv4),
        "{mode:?}"
    );
    assert!(lab.dropped(lab.client(), "198.51.100.20:443", None), "{mode:?}: outside to the LB IP");
    assert!(lab.dropped(lab.client(), "192.168.77.1:30443", None), "{mode:?}: outside to the node port");
    assert!(answers(&lab, lab.node(), "192.168.77.1:30443", Protocol::Tcp), "{mode:?}: the node short-circuits");
    let traced = lab.trace_in(mode.name(), ip("192.168.77.100"), "198.51.100.20:443", Protocol::Tcp, Some("eth0"));
    assert_eq!(traced, [Fate::Drop], "{mode:?}");
}

/// `loadBalancerSourceRanges` admit only listed sources to the
/// load-balancer IP; the node port of the same service still answers.
pub fn load_balancer_source_ranges_admit_only_listed_sources(mode: Mode) {
    let mut lab = Lab::new(&[(1, "shop-a1")]);
    shop(&lab, "  loadBalancerSourceRanges: [203.0.113.0/24]\n");
    lab.start_mode(mode, &[]);
    let allowed = Some(ip("203.0.113.9"));
    lab.eventually("an allowed source", || {
        matches!(lab.request(lab.client(), "198.51.100.20:443", Protocol::Tcp, allowed), Outcome::Answered { .. })
    });
    assert_eq!(
        lab.request(lab.client(), "198.51.100.20:443", Protocol::Tcp, allowed),
        answered("shop-a1", ip("203.0.113.9")),
        "{mode:?}"
    );
    assert!(lab.dropped(lab.client(), "198.51.100.20:443", None), "{mode:?}: a source outside the ranges");
    assert!(answers(&lab, lab.client(), "192.168.77.1:30443", Protocol::Tcp), "{mode:?}: the node port");
    let traced = lab.trace_in(mode.name(), ip("192.168.77.100"), "198.51.100.20:443", Protocol::Tcp, Some("eth0"));
    assert_eq!(traced, [Fate::Drop], "{mode:?}");
}
