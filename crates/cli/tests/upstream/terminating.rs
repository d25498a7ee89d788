//! TestTerminatingEndpointsTrafficPolicyLocal and
//! TestTerminatingEndpointsTrafficPolicyCluster (both files): ready
//! endpoints first, then serving terminating ones (KEP-1669), separately
//! for the cluster set and this node's set; nothing usable rejects; and
//! after the slices are deleted every frontend rejects.

use super::check::{check_all, converge};
use super::flow::{Expect, Sender, direct, flow, masq};
use super::{Ep, ep, load_balancer, slice};
use crate::lab::{Lab, Mode};

/// Upstream's endpoints 10.0.1.1 to 10.0.1.5: the first four are pods of
/// node-a, the fifth of node-b; each case's slice says which node claims
/// them and in what condition.
const PODS: [(u8, &str); 6] = [(1, "t-a1"), (1, "t-a2"), (1, "t-a3"), (1, "t-a4"), (2, "t-b1"), (1, "client-a1")];

const READY: (bool, bool, bool) = (true, true, false);
const TERMINATING: (bool, bool, bool) = (false, true, true);
const GONE: (bool, bool, bool) = (false, false, true);

fn e(pod: &'static str, node: &'static str, (ready, serving, terminating): (bool, bool, bool)) -> Ep {
    ep(pod).on(node).conditions(ready, serving, terminating)
}

/// (case, slice endpoints, pod to cluster IP, outside to the LB IP).
type Case = (&'static str, Vec<Ep>, Expect, Expect);

/// TestTerminatingEndpointsTrafficPolicyLocal's four cases.
fn local_cases() -> Vec<Case> {
    let here = "node-a";
    vec![
        (
            "ready endpoints exist",
            vec![
                e("t-a1", here, READY),
                e("t-a2", here, READY),
                e("t-a3", here, TERMINATING),
                e("t-a4", here, GONE),
                e("t-b1", "node-1", READY),
            ],
            direct(&["t-a1", "t-a2", "t-b1"]),
            direct(&["t-a1", "t-a2"]),
        ),
        (
            "only terminating endpoints exist",
            vec![
                e("t-a2", here, TERMINATING),
                e("t-a3", here, TERMINATING),
                e("t-a4", here, GONE),
                e("t-b1", "node-1", READY),
            ],
            direct(&["t-b1"]),
            direct(&["t-a2", "t-a3"]),
        ),
        (
            "terminating endpoints on remote node",
            vec![e("t-b1", "node-1", TERMINATING)],
            direct(&["t-b1"]),
            Expect::Drop,
        ),
        (
            "no usable endpoints on any node",
            vec![e("t-b1", here, GONE), e("t-b1", "node-1", GONE)],
            Expect::Reject,
            Expect::Reject,
        ),
    ]
}

/// TestTerminatingEndpointsTrafficPolicyCluster's four cases.
fn cluster_cases() -> Vec<Case> {
    let (here, there) = ("node-a", "another-node");
    vec![
        (
            "ready endpoints exist",
            vec![
                e("t-a1", here, READY),
                e("t-a2", here, READY),
                e("t-a3", there, TERMINATING),
                e("t-a4", there, GONE),
                e("t-b1", there, READY),
            ],
            direct(&["t-a1", "t-a2", "t-b1"]),
            masq(&["t-a1", "t-a2", "t-b1"]),
        ),
        (
            "only terminating endpoints exist",
            vec![
                e("t-a2", here, TERMINATING),
                e("t-a3", here, TERMINATING),
                e("t-a4", there, GONE),
                e("t-b1", there, TERMINATING),
            ],
            direct(&["t-a2", "t-a3", "t-b1"]),
            masq(&["t-a2", "t-a3", "t-b1"]),
        ),
        (
            "terminating endpoints on remote node",
            vec![e("t-b1", "node-1", TERMINATING)],
            direct(&["t-b1"]),
            masq(&["t-b1"]),
        ),
        (
            "no usable endpoints on any node",
            vec![e("t-b1", here, GONE), e("t-b1", "node-1", GONE)],
            Expect::Reject,
            Expect::Reject,
        ),
    ]
}

pub fn terminating_endpoints_serve_only_when_nothing_is_ready(mode: Mode) {
    let mut lab = Lab::new(&PODS);
    lab.no_icmp_rate_limit();
    let mut flows = Vec::new();
    let mut deleted = Vec::new();
    let policies = [("local", "Local", local_cases()), ("cluster", "Cluster", cluster_cases())];
    for (p, (prefix, policy, cases)) in policies.into_iter().enumerate() {
        for (i, (what, endpoints, from_pod, from_outside)) in cases.into_iter().enumerate() {
            let name = format!("{prefix}-{}", i + 1);
            let (cluster_ip, lb) = (format!("10.96.1.{}{}", p + 1, i + 1), format!("198.51.100.{}{}", p + 4, i + 1));
            let health = if policy == "Local" { format!("  healthCheckNodePort: 3201{i}\n") } else { String::new() };
            let spec = format!(
                "  clusterIP: {cluster_ip}\n  externalTrafficPolicy: {policy}\n{health}  ports: [{{port: 80, targetPort: 8080}}]\n"
            );
            lab.write(&format!("{name}.yaml"), &load_balancer(&name, &spec, &[(&lb, None)]));
            lab.write(
                &format!("{name}-1.yaml"),
                &slice(&lab, &format!("{name}-1"), &name, &[("", "TCP", 8080)], &endpoints),
            );
            flows.push(flow(what, Sender::Pod, format!("{cluster_ip}:80"), from_pod));
            flows.push(flow(what, Sender::Outside, format!("{lb}:80"), from_outside));
            deleted.push(flow("after endpoints deleted", Sender::Pod, format!("{cluster_ip}:80"), Expect::Reject));
            deleted.push(flow("after endpoints deleted", Sender::Outside, format!("{lb}:80"), Expect::Reject));
        }
    }
    lab.start_mode(mode, &[]);
    check_all(&lab, mode, &flows);

    // After OnEndpointSliceDelete, in each case.
    for name in ["local", "cluster"].iter().flat_map(|p| (1..=4).map(move |i| format!("{p}-{i}-1.yaml"))) {
        lab.remove(&name);
    }
    converge(&lab, mode, "after OnEndpointSliceDelete", &deleted);
}
