//! TestExternalTrafficPolicyLocal, TestExternalTrafficPolicyCluster and
//! TestInternalTrafficPolicy (both files).

use super::check::{check_all, converge};
use super::flow::{Expect, Flow, Sender, direct, flow, masq};
use super::{ep, load_balancer, slice};
use crate::lab::{Lab, Mode, service};

/// The external policy decides, for node ports, external IPs and
/// load-balancer IPs, who outsiders reach and whether they keep their
/// address; pods always reach every endpoint. Upstream's two tests share
/// their setup but the policy: here they are two Services in one lab.
pub fn external_traffic_policy_local_and_cluster(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    for (name, policy, n) in [("local", "Local", 1), ("cluster", "Cluster", 2)] {
        let health = if policy == "Local" { "  healthCheckNodePort: 32001\n" } else { "" };
        let spec = format!(
            "  clusterIP: 10.96.0.4{n}\n  externalIPs: [198.51.100.1{n}]\n  externalTrafficPolicy: {policy}\n{health}  \
             ports: [{{name: p80, port: 80, targetPort: 8080, nodePort: 3000{n}}}]\n"
        );
        lab.write(
            &format!("svc-{name}.yaml"),
            &load_balancer(name, &spec, &[(&format!("198.51.100.{}", 3 + n), None)]),
        );
        // upstream: 10.180.0.1 without a node, 10.180.2.1 on this node.
        let endpoints = [ep("web-b1"), ep("web-a1").on("node-a")];
        lab.write(
            &format!("{name}-1.yaml"),
            &slice(&lab, &format!("{name}-1"), name, &[("p80", "TCP", 8080)], &endpoints),
        );
    }
    lab.start_mode(mode, &[]);

    use Sender::*;
    let both = ["web-a1", "web-b1"];
    let flows = [
        // TestExternalTrafficPolicyLocal
        flow("pod to cluster IP hits both endpoints, unmasqueraded", Pod, "10.96.0.41:80", direct(&both)),
        flow("pod to external IP hits both endpoints, unmasqueraded", Pod, "198.51.100.11:80", direct(&both)),
        flow(
            "external to external IP hits only local endpoint, unmasqueraded",
            Outside,
            "198.51.100.11:80",
            direct(&["web-a1"]),
        ),
        flow("pod to LB IP hits only both endpoints, unmasqueraded", Pod, "198.51.100.4:80", direct(&both)),
        flow(
            "external to LB IP hits only local endpoint, unmasqueraded",
            Outside,
            "198.51.100.4:80",
            direct(&["web-a1"]),
        ),
        flow("pod to NodePort hits both endpoints, unmasqueraded", Pod, "192.168.77.1:30001", direct(&both)),
        flow(
            "external to NodePort hits only local endpoint, unmasqueraded",
            Outside,
            "192.168.77.1:30001",
            direct(&["web-a1"]),
        ),
        // TestExternalTrafficPolicyCluster
        flow("pod to cluster IP hits both endpoints, unmasqueraded", Pod, "10.96.0.42:80", direct(&both)),
        flow("pod to external IP hits both endpoints, masqueraded", Pod, "198.51.100.12:80", masq(&both)),
        flow("external to external IP hits both endpoints, masqueraded", Outside, "198.51.100.12:80", masq(&both)),
        flow("pod to LB IP hits both endpoints, masqueraded", Pod, "198.51.100.5:80", masq(&both)),
        flow("external to LB IP hits both endpoints, masqueraded", Outside, "198.51.100.5:80", masq(&both)),
        flow("pod to NodePort hits both endpoints, masqueraded", Pod, "192.168.77.1:30002", masq(&both)),
        flow("external to NodePort hits both endpoints, masqueraded", Outside, "192.168.77.1:30002", masq(&both)),
    ];
    check_all(&lab, mode, &flows);
}

/// `internalTrafficPolicy` decides which endpoints pods reach through the
/// cluster IP; without local endpoints under `Local` they are dropped, and
/// once the slices are deleted every cluster IP rejects. Upstream's four
/// cases are four Services here.
pub fn internal_traffic_policy_picks_local_endpoints(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (1, "web-a2"), (2, "web-b1"), (2, "web-b2"), (1, "client-a1")]);
    lab.no_icmp_rate_limit();
    let cases = [
        ("itp-cluster", "Cluster", [ep("web-a1").on("node-a"), ep("web-b1").on("node1"), ep("web-b2").on("node2")]),
        ("itp-one-local", "Local", [ep("web-a1").on("node-a"), ep("web-b1").on("node1"), ep("web-b2").on("node2")]),
        ("itp-two-local", "Local", [ep("web-a1").on("node-a"), ep("web-a2").on("node-a"), ep("web-b2").on("node2")]),
        ("itp-no-local", "Local", [ep("web-a1").on("node0"), ep("web-b1").on("node1"), ep("web-b2").on("node2")]),
    ];
    for (i, (name, policy, endpoints)) in cases.iter().enumerate() {
        let spec = format!(
            "  clusterIP: 10.96.1.{}\n  internalTrafficPolicy: {policy}\n  ports: [{{port: 80, targetPort: 8080}}]\n",
            i + 1
        );
        lab.write(&format!("{name}.yaml"), &service(name, &spec));
        lab.write(&format!("{name}-1.yaml"), &slice(&lab, &format!("{name}-1"), name, &[("", "TCP", 8080)], endpoints));
    }
    lab.start_mode(mode, &[]);

    use Sender::*;
    let flows = [
        flow("pod to ClusterIP hits all endpoints", Pod, "10.96.1.1:80", direct(&["web-a1", "web-b1", "web-b2"])),
        flow("pod to ClusterIP hits only local endpoint", Pod, "10.96.1.2:80", direct(&["web-a1"])),
        flow("pod to ClusterIP hits all local endpoints", Pod, "10.96.1.3:80", direct(&["web-a1", "web-a2"])),
        flow("no endpoints", Pod, "10.96.1.4:80", Expect::Drop),
    ];
    check_all(&lab, mode, &flows);

    // After OnEndpointSliceDelete, in each case.
    for (name, _, _) in &cases {
        lab.remove(&format!("{name}-1.yaml"));
    }
    let deleted: Vec<Flow> =
        (1..=4).map(|i| flow("endpoints deleted", Pod, format!("10.96.1.{i}:80"), Expect::Reject)).collect();
    converge(&lab, mode, "after OnEndpointSliceDelete", &deleted);
}
