//! TestLoadBalancer (both files): two load-balancer IPs behind
//! `loadBalancerSourceRanges`, reached from allowed and blocked outside
//! clients, from pods, from the node, and from the load-balancer IP itself.

use super::check::check_all;
use super::flow::{Expect, Sender, direct, flow, masq};
use super::{ep, load_balancer, slice};
use crate::lab::{Lab, Mode};

pub fn source_ranges_guard_load_balancer_ips_only(mode: Mode) {
    let mut lab = Lab::new(&[(2, "web-b1"), (1, "client-a1")]);
    // upstream's testExternalClientBlocked, outside the /25.
    lab.client().ip(&["addr", "add", "203.0.113.130/32", "dev", "lo"]).expect("the blocked client's address");
    // Load balancers that deliver to the node with the VIP as destination
    // often make it a local address of the node: a connection from the node
    // to it then leaves from the VIP itself (upstream's "same node to LB,
    // SNATted to LB" flows).
    for vip in ["198.51.100.4/32", "198.51.100.8/32"] {
        lab.node().ip(&["addr", "add", vip, "dev", "lo"]).expect("a VIP on node-a");
    }
    lab.write(
        "svc1.yaml",
        &load_balancer(
            "svc1",
            "  clusterIP: 10.96.0.41\n  loadBalancerSourceRanges: [192.168.77.0/24, \" 203.0.113.0/25\"]\n  \
             ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30001}]\n",
            &[("198.51.100.4", None), ("198.51.100.8", None)],
        ),
    );
    lab.write("svc1-1.yaml", &slice(&lab, "svc1-1", "svc1", &[("p80", "TCP", 8080)], &[ep("web-b1")]));
    lab.start_mode(mode, &[]);

    use Sender::*;
    let (allowed, blocked) = (OutsideAt("203.0.113.9"), OutsideAt("203.0.113.130"));
    let web = ["web-b1"];
    let flows = [
        flow("pod to cluster IP", Pod, "10.96.0.41:80", direct(&web)),
        flow("external to nodePort", allowed, "192.168.77.1:30001", masq(&web)),
        flow("nodePort bypasses LoadBalancerSourceRanges", blocked, "192.168.77.1:30001", masq(&web)),
        flow("accepted external to LB1", allowed, "198.51.100.4:80", masq(&web)),
        flow("accepted external to LB2", allowed, "198.51.100.8:80", masq(&web)),
        flow("blocked external to LB1", blocked, "198.51.100.4:80", Expect::Drop),
        flow("blocked external to LB2", blocked, "198.51.100.8:80", Expect::Drop),
        flow("pod to LB1 (blocked by LoadBalancerSourceRanges)", Pod, "198.51.100.4:80", Expect::Drop),
        flow("pod to LB2 (blocked by LoadBalancerSourceRanges)", Pod, "198.51.100.8:80", Expect::Drop),
        flow(
            "node to LB1 (allowed by LoadBalancerSourceRanges)",
            NodeAt("192.168.77.1"),
            "198.51.100.4:80",
            masq(&web),
        ),
        flow(
            "node to LB2 (allowed by LoadBalancerSourceRanges)",
            NodeAt("192.168.77.1"),
            "198.51.100.8:80",
            masq(&web),
        ),
        flow(
            "same node to LB1, SNATted to LB1 (implicitly allowed)",
            NodeAt("198.51.100.4"),
            "198.51.100.4:80",
            masq(&web),
        ),
        flow(
            "same node to LB2, SNATted to LB2 (implicitly allowed)",
            NodeAt("198.51.100.8"),
            "198.51.100.8:80",
            masq(&web),
        ),
    ];
    check_all(&lab, mode, &flows);
}
