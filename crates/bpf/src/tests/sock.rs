//! Socket-level load balancing: a client in the test cgroup connecting to
//! a cluster IP reaches the backend, sees the cluster IP as its peer, and
//! leaves no conntrack NAT entry; REJECT refuses; a client outside the
//! cgroup is not translated.

use std::net::SocketAddr;
use std::path::PathBuf;

use kproxy_ebpf::maps::{Op, flags, verdict};
use kproxy_sandbox::{Backend, Netns};

use super::child::{self, Outcome};
use super::support::{Bpffs, TCP, TestCgroup, UDP, fkey, kernel_available, service, verdict_frontend};
use crate::Datapath;

/// Detaches and unpins everything on drop, also when the test panics
/// (tc filters go with the test's namespaces; this runs in the host's,
/// so it leaves interfaces alone).
pub struct Cleanup(pub PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Err(e) = crate::cleanup::cleanup_pins(&self.0) {
            eprintln!("cleanup of {}: {e}", self.0.display());
        }
    }
}

struct Fixture {
    // Dropped in this order: detach, then the bpffs, the cgroup, the netns.
    _cleanup: Cleanup,
    datapath: Datapath,
    _bpffs: Bpffs,
    cgroup: TestCgroup,
    _backend: Backend,
    port: u16,
    ns: Netns,
}

fn fixture() -> Fixture {
    let ns = Netns::new("bpfsock").expect("a netns");
    ns.ip(&["addr", "add", "10.244.1.10/32", "dev", "lo"]).expect("backend v4 address");
    ns.ip(&["addr", "add", "fd00:244::10/128", "dev", "lo", "nodad"]).expect("backend v6 address");
    let backend = Backend::start(&ns, "b1", 0, true, true).expect("a backend");
    let port = backend.port();
    let cgroup = TestCgroup::new();
    let bpffs = Bpffs::mount();
    let pin_dir = bpffs.pin_dir();
    let cleanup = Cleanup(pin_dir.clone());
    let mut datapath = Datapath::load(&pin_dir).expect("load the datapath");
    datapath.attach_cgroup(cgroup.path()).expect("attach to the test cgroup");
    let mut ops = Vec::new();
    ops.extend(service(("10.96.0.10", 80, TCP), 1, &[("10.244.1.10", port)], 1));
    ops.extend(service(("10.96.0.10", 53, UDP), 2, &[("10.244.1.10", port)], 2));
    ops.extend(service(("fd00:96::10", 80, TCP), 3, &[("fd00:244::10", port)], 3));
    ops.extend(service(("fd00:96::10", 53, UDP), 4, &[("fd00:244::10", port)], 4));
    ops.push(verdict_frontend(fkey("10.96.0.11", 80, TCP), verdict::REJECT, 0, 5));
    ops.push(verdict_frontend(fkey("10.96.0.10", 0, 0), verdict::REJECT, flags::OWNED_ADDRESS, 6));
    datapath.apply(&ops).expect("write the services");
    Fixture { _cleanup: cleanup, datapath, _bpffs: bpffs, cgroup, _backend: backend, port, ns }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("a literal address")
}

#[test]
fn a_client_in_the_cgroup_reaches_the_backend_through_the_cluster_ip_and_sees_the_cluster_ip() {
    if !kernel_available("sock tcp") {
        return;
    }
    let f = fixture();
    // The v4-mapped destination is an IPv4 connection on an IPv6 socket.
    for frontend in ["10.96.0.10:80", "[fd00:96::10]:80", "[::ffff:10.96.0.10]:80"] {
        let got = child::run(&f.ns, Some(&f.cgroup), &format!("tcp {frontend}"));
        let Outcome::Reply { peer, line } = got else { panic!("{frontend}: {got:?}") };
        assert_eq!(peer, addr(frontend), "getpeername shows the frontend");
        assert!(line.starts_with("b1 "), "{frontend}: answered by {line}");
    }
}

#[test]
fn a_udp_reply_through_the_cluster_ip_comes_from_the_cluster_ip() {
    if !kernel_available("sock udp") {
        return;
    }
    let f = fixture();
    for frontend in ["10.96.0.10:53", "[fd00:96::10]:53", "[::ffff:10.96.0.10]:53"] {
        let got = child::run(&f.ns, Some(&f.cgroup), &format!("udp {frontend}"));
        let Outcome::Reply { peer, line } = got else { panic!("{frontend}: {got:?}") };
        assert_eq!(peer, addr(frontend), "recvmsg shows the frontend as the source");
        assert!(line.starts_with("b1 "), "{frontend}: answered by {line}");
    }
}

#[test]
fn a_reject_frontend_and_an_unserved_port_of_a_cluster_ip_refuse_the_connect() {
    if !kernel_available("sock reject") {
        return;
    }
    let f = fixture();
    for frontend in ["10.96.0.11:80", "10.96.0.10:81"] {
        let got = child::run(&f.ns, Some(&f.cgroup), &format!("tcp {frontend}"));
        assert_eq!(got, Outcome::Error(libc::ECONNREFUSED), "{frontend}");
    }
}

#[test]
fn a_client_outside_the_cgroup_is_not_translated() {
    if !kernel_available("sock outside") {
        return;
    }
    let f = fixture();
    // The namespace has no route to the cluster IP: untranslated, the
    // connect cannot leave.
    let got = child::run(&f.ns, None, "tcp 10.96.0.10:80");
    assert_eq!(got, Outcome::Error(libc::ENETUNREACH));
}

#[test]
fn a_connection_through_the_cluster_ip_leaves_no_conntrack_nat_entry() {
    if !kernel_available("sock conntrack") {
        return;
    }
    let f = fixture();
    // A rule that uses conntrack, so that the namespace tracks connections.
    f.ns.exec("nft", &["add table inet kpct"]).expect("nft table");
    f.ns.exec("nft", &["add chain inet kpct out { type filter hook output priority 0 ; }"]).expect("nft chain");
    f.ns.exec("nft", &["add rule inet kpct out ct state new counter"]).expect("nft rule");
    let got = child::run(&f.ns, Some(&f.cgroup), "tcp 10.96.0.10:80");
    assert!(matches!(got, Outcome::Reply { .. }), "{got:?}");
    let table = f.ns.exec("conntrack", &["-L", "-p", "tcp"]).expect("conntrack -L");
    let port = format!("dport={}", f.port);
    assert!(table.lines().any(|l| l.contains("dst=10.244.1.10 sport=") && l.contains(&port)), "{table}");
    assert!(!table.contains("dst=10.96.0.10"), "an entry names the cluster IP: {table}");
}

/// Which backend (`b1`, `b2`) answered a TCP client in the cgroup.
fn answered(f: &Fixture, frontend: &str) -> String {
    match child::run(&f.ns, Some(&f.cgroup), &format!("tcp {frontend}")) {
        Outcome::Reply { line, .. } => line.split(' ').next().expect("a name").to_owned(),
        other => panic!("{frontend}: {other:?}"),
    }
}

#[test]
fn round_robin_alternates_and_affinity_keeps_a_client_on_its_backend_while_it_is_in_the_group() {
    if !kernel_available("sock affinity") {
        return;
    }
    let mut f = fixture();
    let second = Backend::start(&f.ns, "b2", 0, true, false).expect("a second backend");
    let both = [("10.244.1.10", f.port), ("10.244.1.10", second.port())];
    let frontend = |group, backends: &[(&str, u16)], affinity_timeout| {
        let mut ops = service(("10.96.0.20", 80, TCP), group, backends, 20);
        if let Some(Op::PutFrontend(_, fe)) = ops.last_mut() {
            fe.internal.sched = kproxy_ebpf::maps::sched::RR;
            fe.affinity_timeout = affinity_timeout;
        }
        ops
    };
    f.datapath.apply(&frontend(20, &both, 0)).expect("a round-robin service");
    let picks: Vec<String> = (0..4).map(|_| answered(&f, "10.96.0.20:80")).collect();
    assert!(picks.windows(2).all(|w| w[0] != w[1]), "round robin alternates: {picks:?}");

    // With affinity the round robin is consulted once per client.
    f.datapath.apply(&frontend(21, &both, 300)).expect("with affinity");
    let first = answered(&f, "10.96.0.20:80");
    for _ in 0..3 {
        assert_eq!(answered(&f, "10.96.0.20:80"), first, "affinity holds");
    }
    // The client's backend leaves the group: the entry no longer counts.
    let (remaining, name) = if first == "b1" { (both[1], "b2") } else { (both[0], "b1") };
    f.datapath.apply(&frontend(22, &[remaining], 300)).expect("one backend left");
    assert_eq!(answered(&f, "10.96.0.20:80"), name);
}

#[test]
fn source_hashing_on_sockets_picks_the_slot_of_the_client_netns_cookie_hash() {
    if !kernel_available("sock hash") {
        return;
    }
    let mut f = fixture();
    let second = Backend::start(&f.ns, "b2", 0, true, false).expect("a second backend");
    let mut ops = service(("10.96.0.30", 80, TCP), 30, &[("10.244.1.10", f.port), ("10.244.1.10", second.port())], 30);
    if let Some(Op::PutFrontend(_, fe)) = ops.last_mut() {
        fe.internal.sched = kproxy_ebpf::maps::sched::HASH_SRC;
    }
    f.datapath.apply(&ops).expect("a source-hashing service");
    // The client is the netns cookie in the first eight bytes, little-endian.
    let cookie = f.ns.enter(crate::netns_cookie).expect("the netns cookie");
    let mut client = [0u8; 16];
    client[..8].copy_from_slice(&cookie.to_le_bytes());
    let want = ["b1", "b2"][(kproxy_ebpf::hash::kp_hash(&client) % 2) as usize];
    for _ in 0..3 {
        assert_eq!(answered(&f, "10.96.0.30:80"), want);
    }
}
