//! The small upstream tests: TestNoEndpointsReject, TestTracePacket,
//! TestLoadBalancerIngressRouteTypeProxy and TestBadIPs.

use kproxy_model::Protocol;

use super::check::check_all;
use super::flow::{Expect, Sender, direct, flow, masq};
use super::{ep, load_balancer, slice};
use crate::lab::{Lab, Mode, service};

/// TestNoEndpointsReject (both files): a LoadBalancer Service without
/// endpoints rejects on every frontend, from pods and from outside.
pub fn no_endpoints_reject_on_every_frontend(mode: Mode) {
    let mut lab = Lab::new(&[(1, "client-a1")]);
    lab.no_icmp_rate_limit();
    lab.write(
        "svc1.yaml",
        &load_balancer(
            "svc1",
            "  clusterIP: 10.96.0.41\n  externalIPs: [198.51.100.11]\n  ports: [{name: p80, port: 80, nodePort: 30001}]\n",
            &[("198.51.100.4", None)],
        ),
    );
    lab.start_mode(mode, &[]);
    use Sender::*;
    let flows = [
        flow("pod to cluster IP with no endpoints", Pod, "10.96.0.41:80", Expect::Reject),
        flow("external to external IP with no endpoints", Outside, "198.51.100.11:80", Expect::Reject),
        flow("pod to NodePort with no endpoints", Pod, "192.168.77.1:30001", Expect::Reject),
        flow("external to NodePort with no endpoints", Outside, "192.168.77.1:30001", Expect::Reject),
        flow("pod to LoadBalancer IP with no endpoints", Pod, "198.51.100.4:80", Expect::Reject),
        flow("external to LoadBalancer IP with no endpoints", Outside, "198.51.100.4:80", Expect::Reject),
    ];
    check_all(&lab, mode, &flows);
}

/// TestTracePacket (iptables file): the six services of
/// TestOverallIPTablesRules, one flow per verdict. Its "ACCEPT
/// (NodePortHealthCheck)" flow is the health-check server, tested with
/// real HTTP in netns_nftables_changes.rs and netns_iptables.rs.
pub fn trace_packet_verdicts(mode: Mode) {
    let mut lab =
        Lab::new(&[(2, "ep1-b1"), (2, "ep2-b1"), (2, "ep3-b1"), (2, "ep4-b1"), (1, "ep5-a1"), (1, "client-a1")]);
    lab.no_icmp_rate_limit();
    let p80 = "  ports: [{name: p80, port: 80, targetPort: 8080}]\n";
    lab.write("svc1.yaml", &service("svc1", &format!("  clusterIP: 10.96.0.41\n{p80}")));
    lab.write(
        "svc2.yaml",
        &load_balancer(
            "svc2",
            "  clusterIP: 10.96.0.42\n  externalIPs: [198.51.100.22]\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32000\n  ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30001}]\n",
            &[("198.51.100.4", None)],
        ),
    );
    lab.write(
        "svc3.yaml",
        &service(
            "svc3",
            "  type: NodePort\n  clusterIP: 10.96.0.43\n  ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30003}]\n",
        ),
    );
    lab.write(
        "svc4.yaml",
        &service("svc4", &format!("  type: NodePort\n  clusterIP: 10.96.0.44\n  externalIPs: [198.51.100.33]\n{p80}")),
    );
    lab.write(
        "svc5.yaml",
        &load_balancer(
            "svc5",
            "  clusterIP: 10.96.0.45\n  loadBalancerSourceRanges: [\" 203.0.113.0/25\"]\n  externalTrafficPolicy: Cluster\n  ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30002}]\n",
            &[("198.51.100.8", None)],
        ),
    );
    lab.write("svc6.yaml", &service("svc6", &format!("  type: ClusterIP\n  clusterIP: 10.96.0.46\n{p80}")));
    let port = [("p80", "TCP", 8080)];
    lab.write("svc1-1.yaml", &slice(&lab, "svc1-1", "svc1", &port, &[ep("ep1-b1")]));
    lab.write("svc2-1.yaml", &slice(&lab, "svc2-1", "svc2", &port, &[ep("ep2-b1")]));
    lab.write("svc3-1.yaml", &slice(&lab, "svc3-1", "svc3", &port, &[ep("ep3-b1")]));
    lab.write("svc4-1.yaml", &slice(&lab, "svc4-1", "svc4", &port, &[ep("ep4-b1"), ep("ep5-a1").on("node-a")]));
    lab.write("svc5-1.yaml", &slice(&lab, "svc5-1", "svc5", &port, &[ep("ep3-b1")]));
    lab.start_mode(mode, &[]);
    let pod = lab.pod("ep1-b1").ipv4;
    use Sender::*;
    let flows = [
        // Not a service address: the pod itself answers, untouched.
        flow("no match", Pod, format!("{pod}:8080"), direct(&["ep1-b1"])),
        flow("single endpoint", Pod, "10.96.0.41:80", direct(&["ep1-b1"])),
        flow("multiple endpoints", Pod, "10.96.0.44:80", direct(&["ep4-b1", "ep5-a1"])),
        flow("LOCAL, KUBE-MARK-MASQ", Node, "198.51.100.22:80", masq(&["ep2-b1"])),
        flow("DROP", Outside, "198.51.100.22:80", Expect::Drop),
        flow("REJECT", Pod, "10.96.0.46:80", Expect::Reject),
    ];
    check_all(&lab, mode, &flows);
    let fates = lab.trace_in(mode.name(), pod.into(), &format!("{pod}:8080"), Protocol::Tcp, Some("kpbr0"));
    assert_eq!(fates, [kproxy_nftables::trace::Fate::Untouched], "{mode:?}: no match is untouched");
}

/// TestLoadBalancerIngressRouteTypeProxy (both files): an ingress IP with
/// `ipMode: Proxy` is the load balancer's own (it proxies to node ports)
/// and gets no rule; `VIP` and no ipMode are served.
pub fn load_balancer_ip_mode_proxy_is_left_to_the_load_balancer(mode: Mode) {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    let port = "  ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30001}]\n";
    for (name, cluster_ip, ingress, ip_mode) in [
        ("svc1", "10.96.0.51", "198.51.100.4", Some("Proxy")),
        ("svc2", "10.96.0.52", "198.51.100.5", Some("VIP")),
        ("svc3", "10.96.0.53", "198.51.100.6", None),
    ] {
        let spec = format!("  clusterIP: {cluster_ip}\n{port}").replace("30001", &format!("3000{}", &name[3..]));
        lab.write(&format!("{name}.yaml"), &load_balancer(name, &spec, &[(ingress, ip_mode)]));
        let endpoints = [ep("web-b1")];
        lab.write(
            &format!("{name}-1.yaml"),
            &slice(&lab, &format!("{name}-1"), name, &[("p80", "TCP", 8080)], &endpoints),
        );
    }
    lab.start_mode(mode, &[]);
    use Sender::*;
    let flows = [
        // The iptables file also runs this with the LoadBalancerIPMode gate
        // off (emulated 1.31), where ipMode is ignored and the IP served;
        // kproxy has no such gate and always honours ipMode (the gate is on
        // by default upstream since 1.30).
        flow("external to LB IP, ipMode Proxy", Outside, "198.51.100.4:80", Expect::RoutedOn),
        flow("external to LB IP, ipMode VIP", Outside, "198.51.100.5:80", masq(&["web-b1"])),
        flow("external to LB IP, no ipMode", Outside, "198.51.100.6:80", masq(&["web-b1"])),
    ];
    check_all(&lab, mode, &flows);
}

/// TestBadIPs (both files): every address written with leading zeros
/// (objects from before the API server's strict validation) is served at
/// its decimal value, as upstream's `ParseIPSloppy` reads it, and the log
/// names each such field.
pub fn addresses_with_leading_zeros_are_served_as_decimal(mode: Mode) {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    lab.client().ip(&["addr", "add", "203.0.113.130/32", "dev", "lo"]).expect("the blocked client's address");
    lab.write(
        "svc1.yaml",
        &load_balancer(
            "svc1",
            "  clusterIP: 10.96.0.041\n  externalIPs: [198.051.100.022]\n  loadBalancerSourceRanges: [203.0.113.000/025]\n  ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30001}]\n",
            &[("198.51.100.004", None)],
        ),
    );
    let [a, b, c, d] = lab.pod("web-b1").ipv4.octets();
    let written = ep("web-b1").written(format!("{a:03}.{b:03}.{c:03}.{d:03}"));
    lab.write("svc1-1.yaml", &slice(&lab, "svc1-1", "svc1", &[("p80", "TCP", 8080)], &[written]));
    lab.start_mode(mode, &[]);
    use Sender::*;
    let allowed = OutsideAt("203.0.113.9");
    let flows = [
        flow("pod to cluster IP 10.96.0.041", Pod, "10.96.0.41:80", direct(&["web-b1"])),
        flow("allowed external to LB IP 198.51.100.004", allowed, "198.51.100.4:80", masq(&["web-b1"])),
        flow(
            "blocked external to LB IP (range 203.0.113.000/025)",
            OutsideAt("203.0.113.130"),
            "198.51.100.4:80",
            Expect::Drop,
        ),
        flow("external to external IP 198.051.100.022", allowed, "198.51.100.22:80", masq(&["web-b1"])),
        flow("external to NodePort", allowed, "192.168.77.1:30001", masq(&["web-b1"])),
    ];
    check_all(&lab, mode, &flows);
    let log = lab.log();
    for field in [
        "Service default/svc1: spec.clusterIP",
        "spec.externalIPs[0]",
        "spec.loadBalancerSourceRanges[0]",
        "status.loadBalancer.ingress[0].ip",
        "EndpointSlice default/svc1-1: endpoints[0].addresses[0]",
    ] {
        assert!(log.contains(field), "{mode:?}: a warning naming {field}:\n{log}");
    }
}
