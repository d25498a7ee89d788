//! TestNodePorts (both files): which node addresses serve node ports, per
//! `nodePortAddresses` and `iptables.localhostNodePorts`, in both families,
//! from outside, from the node itself and from localhost.
//!
//! node-a gets upstream's secondary address (192.168.1.2, 2001:db8:1::2)
//! as 192.168.79.1 and fd00:79::1 on its uplink, and a listener of its own
//! on the node port: a node address kproxy leaves alone answers as
//! `node-a` ([`Expect::Node`]), so "ignored" is told from "rejected".

use super::check::check_case;
use super::flow::{Expect, Flow, Sender, direct, flow, masq};
use super::{ep, slice, slice_v6};
use crate::lab::{Lab, Mode, service};

const BOTH: [&str; 2] = ["web-a1", "web-b1"];

/// The flows every case has, in one family.
fn common(v6: bool) -> Vec<Flow> {
    let (cluster_ip, node) =
        if v6 { ("[fd00:96::41]:80", "[fd00:77::1]:30001") } else { ("10.96.0.41:80", "192.168.77.1:30001") };
    vec![
        flow("pod to cluster IP", Sender::Pod, cluster_ip, direct(&BOTH)),
        flow("external to nodePort", Sender::Outside, node, masq(&BOTH)),
        // IPv6 too: upstream's "node to nodePort" of its ipv6 cases.
        flow("node to nodePort", Sender::Node, node, masq(&BOTH)),
    ]
}

fn localhost(v6: bool, expect: Expect) -> Flow {
    let (what, to) = match (v6, &expect) {
        (false, Expect::Node) => ("localhost to nodePort is ignored", "127.0.0.1:30001"),
        (false, _) => ("localhost to nodePort gets masqueraded", "127.0.0.1:30001"),
        (true, _) => ("localhost to nodePort is ignored", "[::1]:30001"),
    };
    flow(what, Sender::Node, to, expect)
}

fn secondary(v6: bool, expect: Expect) -> Flow {
    let to = if v6 { "[fd00:79::1]:30001" } else { "192.168.79.1:30001" };
    let what = if expect == Expect::Node {
        "secondary nodeIP ignores NodePorts"
    } else {
        "external to nodePort on secondary IP"
    };
    flow(what, Sender::Outside, to, expect)
}

/// One kproxy run: its flags, and its flows (upstream's cases with these
/// settings, both families where upstream has both).
fn runs() -> Vec<(Vec<&'static str>, Vec<Flow>)> {
    let served = || masq(&BOTH);
    let ignored = || Expect::Node;
    // nodePortAddresses unset: upstream's iptables mode serves every local
    // address, and IPv4 loopback with localhostNodePorts (kproxy's iptables
    // mode too); upstream's nftables mode serves the primary addresses only
    // and never loopback, and so does kproxy's (docs/nftables.md,
    // "Settings").
    let iptables_default = |lo4: Expect| {
        let mut flows = [common(false), common(true)].concat();
        flows.extend([
            localhost(false, lo4).in_nftables(ignored()),
            secondary(false, served()).in_nftables(ignored()),
            localhost(true, ignored()),
            secondary(true, served()).in_nftables(ignored()),
        ]);
        flows
    };
    vec![
        // iptables file: "ipv4, localhost-nodeports enabled", "ipv6, localhost-nodeports enabled".
        (vec![], iptables_default(served())),
        // iptables file: "ipv4, localhost-nodeports disabled", "ipv6, localhost-nodeports disabled".
        (vec!["--iptables-localhost-nodeports=false"], iptables_default(ignored())),
        // iptables file: "ipv4, localhost-nodeports disabled, localhost in nodeport-addresses".
        (
            vec!["--nodeport-addresses", "192.168.77.0/24,127.0.0.1/32", "--iptables-localhost-nodeports=false"],
            [common(false), vec![localhost(false, ignored()), secondary(false, ignored())]].concat(),
        ),
        // iptables file: "ipv4, localhost-nodeports enabled, multiple
        // nodeport-addresses" and "ipv6, localhost-nodeports disabled,
        // multiple nodeport-addresses"; nftables file: "ipv4, multiple
        // nodeport-addresses" (the same addresses).
        (
            vec![
                "--nodeport-addresses",
                "192.168.77.0/24,192.168.79.0/24,fd00:77::/64",
                "--iptables-localhost-nodeports=false",
            ],
            [
                common(false),
                common(true),
                vec![
                    localhost(false, ignored()),
                    secondary(false, served()),
                    localhost(true, ignored()),
                    secondary(true, ignored()),
                ],
            ]
            .concat(),
        ),
        // nftables file: "ipv4" and "ipv6" (the fake's 192.168.0.2/32, 2001:db8::1/128).
        (
            vec!["--nodeport-addresses", "192.168.77.1/32,fd00:77::1/128"],
            [common(false), common(true), vec![secondary(false, ignored()), secondary(true, ignored())]].concat(),
        ),
        // nftables file: "ipv6, multiple nodeport-addresses".
        (
            vec!["--nodeport-addresses", "192.168.77.0/24,192.168.79.0/24,fd00:77::/64,fd00:79::1/128"],
            [common(true), vec![secondary(true, served())]].concat(),
        ),
    ]
}

pub fn node_ports_answer_on_the_addresses_asked_for(mode: Mode) {
    let mut lab = Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")]);
    for (ns, args) in [
        (lab.node(), ["addr", "add", "192.168.79.1/24", "dev", "eth0"]),
        (lab.client(), ["route", "add", "192.168.79.0/24", "via", "192.168.77.1"]),
    ] {
        ns.ip(&args).expect("the secondary address");
    }
    lab.node().ip(&["-6", "addr", "add", "fd00:79::1/64", "dev", "eth0", "nodad"]).expect("the secondary IPv6 address");
    lab.client().ip(&["-6", "route", "add", "fd00:79::/64", "via", "fd00:77::1"]).expect("a route to it");
    lab.serve_on_node(30001);
    lab.write(
        "svc1.yaml",
        &service(
            "svc1",
            "  type: NodePort\n  clusterIPs: [10.96.0.41, \"fd00:96::41\"]\n  ipFamilies: [IPv4, IPv6]\n  \
             ports: [{name: p80, port: 80, targetPort: 8080, nodePort: 30001}]\n",
        ),
    );
    // upstream: 10.180.0.1 without a node, 10.180.2.1 on this node.
    let endpoints = [ep("web-b1"), ep("web-a1").on("node-a")];
    lab.write("svc1-v4.yaml", &slice(&lab, "svc1-v4", "svc1", &[("p80", "TCP", 8080)], &endpoints));
    lab.write("svc1-v6.yaml", &slice_v6(&lab, "svc1-v6", "svc1", &[("p80", "TCP", 8080)], &endpoints));
    for (i, (flags, flows)) in runs().into_iter().enumerate() {
        match i {
            0 => lab.start_mode(mode, &flags),
            _ => lab.restart_mode(mode, &flags),
        }
        check_case(&lab, mode, &format!("kproxy run {flags:?}"), &flows);
    }
}
