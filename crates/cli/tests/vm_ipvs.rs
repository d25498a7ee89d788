//! The plumbing that real-connection tests of the IPVS mode stand on, end
//! to end in the IPVS VM (this machine's kernel has no IPVS): the sandbox
//! topology inside the guest, an IPVS virtual server in node-a answering
//! from both pods, and the kproxy binary in the guest programming
//! nf_tables there. Each test boots the VM and fails when it cannot.

mod ipvs_lab;
mod lab;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use kproxy_model::Protocol;
use kproxy_testkit::vm;
use lab::*;

const CLUSTER_IP: &str = "10.96.0.10";
const WEB: &str =
    "  clusterIP: 10.96.0.10\n  selector: {app: web}\n  ports: [{name: http, port: 80, targetPort: http}]\n";

/// Boots the VM with the kproxy binary in the payload and runs test `name` there.
fn in_vm(name: &str) {
    vm::run_test_with(name, &[(Path::new(env!("CARGO_BIN_EXE_kproxy")), "kproxy")]);
}

/// web-a1 on node-a, web-b1 on node-b, a client pod on node-a; each serving [`PORT`].
fn web_lab() -> Lab {
    Lab::new(&[(1, "web-a1"), (2, "web-b1"), (1, "client-a1")])
}

/// The backends that answered a spread, and every source address they saw.
fn answered_by(spread: &std::collections::BTreeMap<Outcome, usize>) -> (Vec<String>, BTreeSet<IpAddr>) {
    let peers = spread
        .keys()
        .filter_map(|o| match o {
            Outcome::Answered { peer, .. } => Some(*peer),
            _ => None,
        })
        .collect();
    (backends(spread), peers)
}

#[test]
fn an_ipvs_virtual_server_in_node_a_reaches_both_pods_from_the_node_and_from_a_pod() {
    if !vm::in_guest() {
        return in_vm("an_ipvs_virtual_server_in_node_a_reaches_both_pods_from_the_node_and_from_a_pod");
    }
    assert_eq!(ipvs_lab::missing_modules(), Vec::<&str>::new(), "modules the IPVS mode needs");
    let lab = web_lab();
    let node = lab.node();
    node.sysctl("net.ipv4.vs.conntrack", "1").expect("IPVS sysctls in node-a");
    let vip: SocketAddr = format!("{CLUSTER_IP}:80").parse().unwrap();
    ipvs_lab::service_addresses(node, &[vip.ip()]);
    let pods = [lab.pod("web-a1").ipv4, lab.pod("web-b1").ipv4].map(|ip| SocketAddr::from((ip, PORT)));
    let mut ipvs = ipvs_lab::ipvs(node);
    ipvs_lab::virtual_server(&mut ipvs, vip, "rr", &pods);
    // The host namespace of the guest has no virtual server: IPVS is per namespace.
    let mut root = kproxy_netlink::ipvs::Client::connect().expect("IPVS in the guest's root namespace");
    assert!(root.services().unwrap().entries.is_empty(), "the virtual server leaked out of node-a");

    // rr: 6 connections alternate between the two pods.
    let from_node = reaches_both(&lab, node, 6);
    // Without a masquerade rule a node-local client's source is the cluster IP itself.
    eprintln!("node-a -> {vip}: sources seen {from_node:?}");
    let client = lab.pod("client-a1");
    // Masquerading destinations are DNAT only: the pod keeps its address.
    assert_eq!(reaches_both(&lab, &client.ns, 6), BTreeSet::from([IpAddr::V4(client.ipv4)]));

    assert_eq!(ipvs_lab::connections(&mut ipvs, vip), 12, "IPVS has an entry for every connection");
}

/// `count` TCP requests from `from` to the cluster IP reach both web pods,
/// each seeing one of `sources`.
fn reaches_both(lab: &Lab, from: &kproxy_sandbox::Netns, count: usize) -> BTreeSet<IpAddr> {
    let spread = lab.spread(from, &format!("{CLUSTER_IP}:80"), Protocol::Tcp, count);
    let (names, peers) = answered_by(&spread);
    assert_eq!(names, ["web-a1", "web-b1"], "from {}: {spread:?}", from.name());
    peers
}

#[test]
fn the_kproxy_binary_runs_in_the_vm_and_its_nftables_rules_carry_connections() {
    if !vm::in_guest() {
        return in_vm("the_kproxy_binary_runs_in_the_vm_and_its_nftables_rules_carry_connections");
    }
    let kproxy = kproxy_binary();
    let version = std::process::Command::new(&kproxy).arg("--version").output().expect("running /payload/kproxy");
    assert!(version.status.success(), "{version:?}");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("kproxy "), "{version:?}");

    let mut lab = web_lab();
    lab.write("web.yaml", &service("web", WEB));
    let manifests = lab.dir.path().display().to_string();
    let mut args = vec!["run", "--once", "--manifests", &manifests];
    let flags = Lab::flags();
    args.extend(flags.iter().map(String::as_str));
    let (ok, out) = lab.kproxy(&args);
    assert!(ok, "kproxy run --once in node-a: {out}");

    // Only nf_tables rules can answer for the cluster IP: no interface holds it.
    // 20 random (numgen) picks miss a backend with probability 2^-19.
    let client = lab.pod("client-a1");
    let to = format!("{CLUSTER_IP}:80");
    assert_eq!(
        reaches_both(&lab, &client.ns, 20),
        BTreeSet::from([IpAddr::V4(client.ipv4)]),
        "pods are not masqueraded"
    );
    // From outside the cluster: masqueraded to node-a (nft_masq).
    let outside = reaches_both(&lab, lab.client(), 20);
    assert!(!outside.contains(&"192.168.77.100".parse::<IpAddr>().unwrap()), "not masqueraded: {outside:?}");

    let (ok, out) = lab.kproxy(&["cleanup", "--proxy-mode", "nftables"]);
    assert!(ok, "kproxy cleanup: {out}");
    let after = lab.request(&client.ns, &to, Protocol::Tcp, None);
    assert!(!matches!(after, Outcome::Answered { .. }), "answered after cleanup: {after:?}");

    // The long-running form, as the IPVS mode's tests will run it.
    lab.start(&[]);
    assert!(lab.synced());
    reaches_both(&lab, &lab.pod("client-a1").ns, 20);
    lab.stop();
    let (total, available) = ipvs_lab::memory_mib();
    eprintln!("guest memory: {total} MiB, {available} MiB available with the topology up");
}
