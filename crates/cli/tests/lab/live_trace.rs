//! `kproxy trace` asked on the node: run in node-a with no manifests, it
//! asks the running kproxy (its metrics address) and answers from the
//! rules that kproxy applied. The scenario checks its verdicts against
//! real packets in every kernel mode.

use std::net::{IpAddr, SocketAddr};

use kproxy_model::Protocol;
use kproxy_nftables::trace::Fate;

use super::scenarios::{NODE_PORT_WEB, local_shop, wait_for};
use super::{Lab, Mode, TraceCase, service};

/// The lab's metrics address, inside node-a.
const ADDRESS: &str = "127.0.0.1:10249";

impl Lab {
    /// What `kproxy trace --address` run in node-a says about a connection:
    /// the running kproxy's applied rules (those of `mode`), walked.
    pub fn live_trace(&self, mode: Mode, from: IpAddr, to: &str, protocol: Protocol, iif: Option<&str>) -> Vec<Fate> {
        let (from, to) = (from.to_string(), format!("{to}/{protocol}"));
        // The mode is checked against the running kproxy's, not planned.
        let mut args = vec!["trace", "--address", ADDRESS, "--proxy-mode", mode.name(), "--from", &from, "--to", &to];
        args.extend(iif.iter().flat_map(|iif| ["--iif", iif]));
        let (ok, out) = self.kproxy(&args);
        assert!(ok, "kproxy {args:?}: {out}");
        assert_eq!(rules_of(&out), mode.name(), "{mode:?}: another mode's rules:\n{out}");
        if mode == Mode::Ebpf {
            assert!(out.contains("the maps pinned in "), "the running kproxy's maps, not a plan:\n{out}");
        }
        fates(&out)
    }
}

/// Which mode's rules a `kproxy trace` explanation walked: the iptables
/// payload's lines, IPVS (its virtual server, or the companion table's
/// check chain), the ebpf mode's maps, or the nftables mode's.
pub fn rules_of(text: &str) -> &'static str {
    let rules: Vec<&str> = text.lines().skip_while(|l| *l != "rules").skip(1).collect();
    if rules.iter().any(|l| l.starts_with("  nat: -A ") || l.starts_with("  filter: -A ")) {
        "iptables"
    } else if rules.iter().any(|l| l.starts_with("  ipvs: ") || l.ends_with("jump services-check")) {
        "ipvs"
    } else if rules.iter().any(|l| l.contains("kp_frontends ")) {
        "ebpf"
    } else if rules.iter().any(|l| l.ends_with("jump services")) {
        "nftables"
    } else {
        panic!("rules of no mode this test knows:\n{text}")
    }
}

/// The fates a `kproxy trace` explanation states, sorted as
/// `Trace::fates` sorts them.
pub fn fates(text: &str) -> Vec<Fate> {
    let verdict =
        text.lines().find_map(|l| l.strip_prefix("verdict   ")).unwrap_or_else(|| panic!("no verdict:\n{text}"));
    let mut fates = if verdict.starts_with("REJECT") {
        vec![Fate::Reject]
    } else if verdict.starts_with("DROP") {
        vec![Fate::Drop]
    } else if verdict.starts_with("untouched") {
        vec![Fate::Untouched]
    } else if verdict.starts_with("DNAT") {
        let endpoints = text.lines().skip_while(|l| !l.starts_with("verdict")).skip(1);
        endpoints
            .take_while(|l| l.starts_with("  "))
            .map(|line| {
                let (endpoint, what) = line.trim().split_once("  ").unwrap_or_else(|| panic!("{line}"));
                let endpoint: SocketAddr = endpoint.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
                Fate::Dnat { endpoint, masquerade: what.starts_with("masqueraded") }
            })
            .collect()
    } else {
        panic!("a verdict this test cannot read: {verdict}\n{text}")
    };
    fates.sort();
    fates
}

/// `kproxy trace` asked on the node gives the verdict real packets get:
/// cluster IPs (both families, a port not served), a node port, a
/// load-balancer IP and node port under `externalTrafficPolicy: Local`
/// with and without a local endpoint, and a service without endpoints.
pub fn live_trace_matches_real_packets(mode: Mode) {
    let mut lab =
        Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "shop-a1"), (2, "shop-b1"), (2, "lonely-b1"), (1, "client-a1")]);
    lab.write("web.yaml", &service("web", NODE_PORT_WEB));
    lab.write("shop.yaml", &local_shop());
    lab.write(
        "lonely.yaml",
        &service(
            "lonely",
            "  type: NodePort\n  clusterIP: 10.96.0.40\n  selector: {app: lonely}\n  externalTrafficPolicy: Local\n  ports: [{name: http, port: 80, targetPort: http, nodePort: 30444}]\n",
        ),
    );
    lab.write("empty.yaml", &service("empty", "  clusterIP: 10.96.0.30\n  ports: [{port: 80}]\n"));
    // Every probe of a REJECT answered with ICMP sees it.
    lab.no_icmp_rate_limit();
    lab.start_mode(mode, &[]);
    let pod = lab.pod("client-a1");
    wait_for(&lab, &pod.ns, "10.96.0.10:80", Protocol::Tcp);
    wait_for(&lab, &pod.ns, "10.96.0.40:80", Protocol::Tcp);
    let (pod_v4, pod_v6) = (IpAddr::V4(pod.ipv4), IpAddr::V6(pod.ipv6));
    let node_ip = IpAddr::V4(lab.topo.node.ipv4);
    let outside: IpAddr = "192.168.77.100".parse().expect("literal");
    let cases: Vec<TraceCase<'_>> = vec![
        // ClusterIP.
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.10:80", Protocol::Tcp),
        (&pod.ns, pod_v6, Some("kpbr0"), "[fd00:96::10]:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "10.96.0.10:80", Protocol::Tcp),
        (lab.node(), node_ip, None, "10.96.0.10:80", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.10:81", Protocol::Tcp),
        // NodePort.
        (lab.client(), outside, Some("eth0"), "192.168.77.1:30080", Protocol::Tcp),
        // externalTrafficPolicy: Local, with a local endpoint.
        (lab.client(), outside, Some("eth0"), "192.168.77.1:30443", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "198.51.100.20:443", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "198.51.100.20:443", Protocol::Tcp),
        // externalTrafficPolicy: Local, no local endpoint.
        (lab.client(), outside, Some("eth0"), "192.168.77.1:30444", Protocol::Tcp),
        (&pod.ns, pod_v4, Some("kpbr0"), "192.168.77.1:30444", Protocol::Tcp),
        // No endpoints.
        (&pod.ns, pod_v4, Some("kpbr0"), "10.96.0.30:80", Protocol::Tcp),
        (lab.client(), outside, Some("eth0"), "10.96.0.30:80", Protocol::Tcp),
    ];
    lab.assert_kernel_does(mode.name(), &cases, |source, to, protocol, iif| {
        lab.live_trace(mode, source, to, protocol, iif)
    });
}
