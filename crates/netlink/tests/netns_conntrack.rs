//! Conntrack cleanup over ctnetlink against a real kernel, in a throwaway
//! namespace: entries inserted with the `conntrack` tool, then deleted by
//! kproxy's filters. Needs root; fails (never skips) without sandboxes.

use std::net::SocketAddr;

use kproxy_model::IpFamily;
use kproxy_netlink::conntrack::{delete_udp, list_udp};
use kproxy_sandbox::{Netns, available};

fn netns() -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new("ct").expect("a network namespace")
}

/// `conntrack -I` of a flow: client -> frontend, answered by endpoint.
fn insert(ns: &Netns, proto: &str, client: &str, frontend: &str, endpoint: &str) {
    let (c, f, e): (SocketAddr, SocketAddr, SocketAddr) =
        (client.parse().unwrap(), frontend.parse().unwrap(), endpoint.parse().unwrap());
    let mut args = vec!["-I", "-p", proto, "--timeout", "120"];
    let (cs, fs, es) = (c.ip().to_string(), f.ip().to_string(), e.ip().to_string());
    let (cp, fp, ep) = (c.port().to_string(), f.port().to_string(), e.port().to_string());
    args.extend(["--src", &cs, "--dst", &fs, "--sport", &cp, "--dport", &fp]);
    args.extend(["--reply-src", &es, "--reply-dst", &cs, "--reply-port-src", &ep, "--reply-port-dst", &cp]);
    if proto == "tcp" {
        args.extend(["--state", "ESTABLISHED"]);
    }
    ns.exec("conntrack", &args).unwrap_or_else(|e| panic!("conntrack -I: {e}"));
}

fn count(ns: &Netns, family: &str) -> usize {
    // conntrack -L prints the entries on stdout, a summary on stderr.
    ns.exec("conntrack", &["-L", "-f", family]).unwrap().lines().count()
}

#[test]
fn stale_udp_flows_are_deleted_and_nothing_else() {
    let ns = netns();
    insert(&ns, "udp", "10.0.0.1:1111", "10.96.0.10:53", "10.244.1.5:5353");
    insert(&ns, "udp", "10.0.0.2:2222", "10.96.0.10:53", "10.244.1.5:5353");
    insert(&ns, "udp", "10.0.0.3:3333", "10.96.0.10:53", "10.244.2.5:5353");
    insert(&ns, "udp", "10.0.0.4:4444", "10.96.0.11:53", "10.244.1.5:5353");
    insert(&ns, "tcp", "10.0.0.5:5555", "10.96.0.10:53", "10.244.1.5:5353");
    insert(&ns, "udp", "[fd00::1]:1111", "[fd00:96::10]:53", "[fd00:244::5]:5353");

    let flows = ns.enter(|| list_udp(IpFamily::V4)).unwrap();
    assert_eq!(flows.len(), 4, "UDP flows only: {flows:?}");
    let first = flows.iter().find(|f| f.orig_src.port() == 1111).expect("the first flow");
    assert_eq!(first.orig_dst, "10.96.0.10:53".parse().unwrap());
    assert_eq!(first.reply_src, "10.244.1.5:5353".parse().unwrap());

    // An endpoint of 10.96.0.10:53 went away: its two flows go.
    let frontend: SocketAddr = "10.96.0.10:53".parse().unwrap();
    let endpoint: SocketAddr = "10.244.1.5:5353".parse().unwrap();
    let deleted = ns.enter(|| delete_udp(IpFamily::V4, |f| f.orig_dst == frontend && f.reply_src == endpoint)).unwrap();
    assert_eq!(deleted, 2);
    let left = ns.enter(|| list_udp(IpFamily::V4)).unwrap();
    let mut ports: Vec<u16> = left.iter().map(|f| f.orig_src.port()).collect();
    ports.sort();
    assert_eq!(ports, [3333, 4444], "{left:?}");
    assert_eq!(count(&ns, "ipv4"), 3, "the TCP flow stays");
    assert_eq!(count(&ns, "ipv6"), 1, "the other family is untouched");

    // The whole frontend (it had cached a rejection): everything to it.
    let deleted = ns.enter(|| delete_udp(IpFamily::V4, |f| f.orig_dst == frontend)).unwrap();
    assert_eq!(deleted, 1);
    let deleted = ns.enter(|| delete_udp(IpFamily::V6, |_| true)).unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(count(&ns, "ipv6"), 0);
}
