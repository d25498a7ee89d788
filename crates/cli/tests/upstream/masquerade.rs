//! TestInternalExternalMasquerade (both files): three LoadBalancer
//! Services (plain, `externalTrafficPolicy: Local`, `internalTrafficPolicy:
//! Local`) reached from a pod, the node, localhost and outside, with and
//! without a local-traffic detector and `masqueradeAll`. As upstream, one
//! table of expectations and per-case overrides.

use super::check::check_case;
use super::flow::{Expect, Flow, Sender, direct, flow, masq};
use super::{ep, load_balancer, slice};
use crate::lab::{Lab, Mode};

const SVC1: [&str; 2] = ["m-a1", "m-b1"];
const LOCAL: [&str; 1] = ["m-a1"];

/// upstream's expectations without overrides (its "base" case); the
/// localhost rows are the iptables file's.
fn base() -> Vec<Flow> {
    use Sender::*;
    let both = || masq(&SVC1);
    // Node ports on 127.0.0.1: upstream's iptables mode (localhostNodePorts,
    // nodePortAddresses unset), and kproxy's; never in nftables mode, as
    // upstream's (docs/nftables.md, "Settings"), so node-a's own listener
    // answers there.
    let localhost = |what, port: u16| flow(what, Node, format!("127.0.0.1:{port}"), both()).in_nftables(Expect::Node);
    vec![
        flow("pod to ClusterIP", Pod, "10.96.0.41:80", direct(&SVC1)),
        flow("pod to NodePort", Pod, "192.168.77.1:30001", both()),
        flow("pod to LB", Pod, "198.51.100.4:80", both()),
        flow("node to ClusterIP", Node, "10.96.0.41:80", both()),
        flow("node to NodePort", Node, "192.168.77.1:30001", both()),
        localhost("localhost to NodePort", 30001),
        flow("node to LB", Node, "198.51.100.4:80", both()),
        flow("external to ClusterIP", Outside, "10.96.0.41:80", both()),
        flow("external to NodePort", Outside, "192.168.77.1:30001", both()),
        flow("external to LB", Outside, "198.51.100.4:80", both()),
        flow("pod to ClusterIP with eTP:Local", Pod, "10.96.0.42:80", direct(&SVC1)),
        flow("pod to NodePort with eTP:Local", Pod, "192.168.77.1:30002", direct(&SVC1)),
        flow("pod to LB with eTP:Local", Pod, "198.51.100.8:80", direct(&SVC1)),
        flow("node to ClusterIP with eTP:Local", Node, "10.96.0.42:80", both()),
        // upstream sends this one to svc1's node port (3001), and expects svc1.
        flow("node to NodePort with eTP:Local", Node, "192.168.77.1:30001", both()),
        localhost("localhost to NodePort with eTP:Local", 30002),
        flow("node to LB with eTP:Local", Node, "198.51.100.8:80", both()),
        flow("external to ClusterIP with eTP:Local", Outside, "10.96.0.42:80", both()),
        flow("external to NodePort with eTP:Local", Outside, "192.168.77.1:30002", direct(&LOCAL)),
        flow("external to LB with eTP:Local", Outside, "198.51.100.8:80", direct(&LOCAL)),
        flow("pod to ClusterIP with iTP:Local", Pod, "10.96.0.43:80", direct(&LOCAL)),
        flow("pod to NodePort with iTP:Local", Pod, "192.168.77.1:30003", both()),
        flow("pod to LB with iTP:Local", Pod, "198.51.100.12:80", both()),
        flow("node to ClusterIP with iTP:Local", Node, "10.96.0.43:80", masq(&LOCAL)),
        flow("node to NodePort with iTP:Local", Node, "192.168.77.1:30003", both()),
        localhost("localhost to NodePort with iTP:Local", 30003),
        flow("node to LB with iTP:Local", Node, "198.51.100.12:80", both()),
        flow("external to ClusterIP with iTP:Local", Outside, "10.96.0.43:80", masq(&LOCAL)),
        flow("external to NodePort with iTP:Local", Outside, "192.168.77.1:30003", both()),
        flow("external to LB with iTP:Local", Outside, "198.51.100.12:80", both()),
    ]
}

/// Outside to a cluster IP, unmasqueraded, reaching m-b1 on node-b: m-b1
/// answers the client straight through the client (its router), not back
/// through node-a, so the client never sees its reply un-NATed. A real
/// cluster has the same asymmetry; the lab cannot route around it.
const NO_RETURN_PATH: &str = "an unmasqueraded reply from node-b bypasses node-a";

/// A flow of [`base`] whose expectation a case overrides, and why the lab
/// cannot send it, where it cannot.
type Override = (&'static str, Expect, Option<&'static str>);

/// One of upstream's cases: its settings and its overrides of [`base`].
struct Case {
    name: &'static str,
    /// Run without `--cluster-cidr`: no local-traffic detector.
    without_detector: bool,
    masquerade_all: bool,
    overrides: Vec<Override>,
}

fn cases() -> Vec<Case> {
    let unmasqueraded_outside = [
        ("external to ClusterIP", direct(&SVC1), Some(NO_RETURN_PATH)),
        ("external to ClusterIP with eTP:Local", direct(&SVC1), Some(NO_RETURN_PATH)),
    ];
    vec![
        Case { name: "base", without_detector: false, masquerade_all: false, overrides: vec![] },
        Case {
            name: "no LocalTrafficDetector",
            without_detector: true,
            masquerade_all: false,
            overrides: [
                vec![
                    ("node to ClusterIP", direct(&SVC1), None),
                    ("pod to NodePort with eTP:Local", direct(&LOCAL), None),
                    ("pod to LB with eTP:Local", direct(&LOCAL), None),
                    ("node to ClusterIP with eTP:Local", direct(&SVC1), None),
                    ("node to ClusterIP with iTP:Local", direct(&LOCAL), None),
                    ("external to ClusterIP with iTP:Local", direct(&LOCAL), None),
                ],
                unmasqueraded_outside.to_vec(),
            ]
            .concat(),
        },
        Case {
            name: "masqueradeAll",
            without_detector: false,
            masquerade_all: true,
            overrides: vec![
                ("pod to ClusterIP", masq(&SVC1), None),
                ("pod to ClusterIP with eTP:Local", masq(&SVC1), None),
                ("pod to ClusterIP with iTP:Local", masq(&LOCAL), None),
            ],
        },
        Case {
            name: "masqueradeAll, no LocalTrafficDetector",
            without_detector: true,
            masquerade_all: true,
            overrides: vec![
                ("pod to ClusterIP", masq(&SVC1), None),
                ("pod to ClusterIP with eTP:Local", masq(&SVC1), None),
                ("pod to NodePort with eTP:Local", direct(&LOCAL), None),
                ("pod to LB with eTP:Local", direct(&LOCAL), None),
                ("pod to ClusterIP with iTP:Local", masq(&LOCAL), None),
            ],
        },
    ]
}

pub fn masquerade_follows_source_frontend_and_policy(mode: Mode) {
    let mut lab = Lab::new(&[(1, "m-a1"), (2, "m-b1"), (1, "client-a1")]);
    for port in [30001, 30002, 30003] {
        lab.serve_on_node(port);
    }
    let services = [
        ("svc1", "", "198.51.100.4"),
        ("svc2", "  externalTrafficPolicy: Local\n  healthCheckNodePort: 32002\n", "198.51.100.8"),
        ("svc3", "  internalTrafficPolicy: Local\n", "198.51.100.12"),
    ];
    for (i, (name, policy, vip)) in services.into_iter().enumerate() {
        let n = i + 1;
        let spec = format!(
            "  clusterIP: 10.96.0.4{n}\n{policy}  ports: [{{name: p80, port: 80, targetPort: 8080, nodePort: 3000{n}}}]\n"
        );
        lab.write(&format!("{name}.yaml"), &load_balancer(name, &spec, &[(vip, None)]));
        // upstream: 10.180.0.N on this node, 10.180.1.N on "remote".
        let endpoints = [ep("m-a1").on("node-a"), ep("m-b1").on("remote")];
        lab.write(
            &format!("{name}-1.yaml"),
            &slice(&lab, &format!("{name}-1"), name, &[("p80", "TCP", 8080)], &endpoints),
        );
    }
    for (i, case) in cases().into_iter().enumerate() {
        lab.without_cluster_cidr = case.without_detector;
        let extra: &[&str] = if case.masquerade_all { &["--masquerade-all"] } else { &[] };
        match i {
            0 => lab.start_mode(mode, extra),
            _ => lab.restart_mode(mode, extra),
        }
        let mut flows = base();
        for (what, expect, tracer_only) in case.overrides {
            let row = flows.iter_mut().find(|f| f.what == what).unwrap_or_else(|| panic!("no flow {what:?}"));
            row.expect = expect;
            if let Some(why) = tracer_only {
                *row = row.clone().tracer_only(why);
            }
        }
        check_case(&lab, mode, case.name, &flows);
    }
}
