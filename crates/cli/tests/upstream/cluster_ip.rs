//! TestClusterIPGeneral (both files): cluster IPs with one and several
//! endpoints, target ports, one port number over TCP, UDP and SCTP,
//! hairpin, unserved ports and an unallocated address.

use kproxy_model::Protocol;
use kproxy_nftables::trace::Fate;

use super::check::check_all;
use super::flow::{Expect, Sender, direct, flow, masq};
use super::{ep, slice};
use crate::lab::{Lab, Mode, service};

pub fn cluster_ips_serve_their_ports_on_every_protocol(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    lab.no_icmp_rate_limit();
    // svc2's target ports other than the lab's 8080.
    for pod in ["web-a1", "web-b1"] {
        lab.serve(pod, 8443, false);
        lab.serve(pod, 5353, false);
        lab.serve(pod, 53, true);
    }
    lab.write(
        "svc1.yaml",
        &service("svc1", "  clusterIP: 10.96.0.41\n  ports: [{name: http, port: 80, targetPort: 8080}]\n"),
    );
    lab.write(
        "svc2.yaml",
        &service(
            "svc2",
            "  clusterIP: 10.96.0.42\n  ports:\n  - {name: http, port: 80, targetPort: 8080}\n  \
             - {name: https, port: 443, targetPort: 8443}\n  - {name: dns-udp, port: 53, protocol: UDP}\n  \
             - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 5353}\n  - {name: dns-sctp, port: 53, protocol: SCTP}\n",
        ),
    );
    lab.write("svc1-1.yaml", &slice(&lab, "svc1-1", "svc1", &[("http", "TCP", 8080)], &[ep("web-a1").on("node-a")]));
    let ports = [
        ("http", "TCP", 8080),
        ("https", "TCP", 8443),
        ("dns-udp", "UDP", 53),
        ("dns-tcp", "TCP", 5353),
        ("dns-sctp", "SCTP", 53),
    ];
    let endpoints = [ep("web-a1").on("node-a"), ep("web-b1").on("node-b")];
    lab.write("svc2-1.yaml", &slice(&lab, "svc2-1", "svc2", &ports, &endpoints));
    lab.start_mode(mode, &[]);

    use Sender::*;
    let both = ["web-a1", "web-b1"];
    let flows = [
        flow("simple clusterIP", Pod, "10.96.0.41:80", direct(&["web-a1"])),
        flow("hairpin to cluster IP", PodNamed("web-a1"), "10.96.0.41:80", masq(&["web-a1"])),
        flow("clusterIP with multiple endpoints", Pod, "10.96.0.42:80", direct(&both)),
        flow("clusterIP with TargetPort", Pod, "10.96.0.42:443", direct(&["web-a1:8443", "web-b1:8443"])),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (TCP)",
            Pod,
            "10.96.0.42:53",
            direct(&["web-a1:5353", "web-b1:5353"]),
        ),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (UDP)",
            Pod,
            "10.96.0.42:53",
            direct(&["web-a1:53", "web-b1:53"]),
        )
        .udp(),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (SCTP)",
            Pod,
            "10.96.0.42:53",
            direct(&["web-a1:53", "web-b1:53"]),
        )
        .sctp(),
        // The two unserved-port flows: upstream's nftables mode rejects them;
        // its iptables mode has no rule and routes them on un-NATed. kproxy
        // rejects in both modes (docs/iptables.md, "Where kproxy departs
        // from upstream's rules").
        flow("TCP-only port does not match UDP traffic", Pod, "10.96.0.42:80", Expect::Reject).udp(),
        flow("svc1 does not accept svc2's ports", Pod, "10.96.0.41:443", Expect::Reject),
        // An unowned service-CIDR address: upstream's nftables mode drops it,
        // its iptables mode routes it on, and so do kproxy's
        // (docs/iptables.md, "Differences from the nftables mode").
        flow("packet to unallocated cluster ip", Pod, "10.96.0.50:80", Expect::Drop).in_iptables(Expect::RoutedOn),
    ];
    check_all(&lab, mode, &flows);

    // The drop is kproxy's, not the routing loop's.
    let pod = lab.pod("client-a1").ipv4.into();
    let traced = lab.trace_in(mode.name(), pod, "10.96.0.50:80", Protocol::Tcp, Some("kpbr0"));
    let want = if matches!(mode, Mode::Iptables(_)) { Fate::Untouched } else { Fate::Drop };
    assert_eq!(traced, [want], "{mode:?}: an unallocated cluster IP");
}
