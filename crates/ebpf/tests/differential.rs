//! The ebpf mode against the reference: for every frontend of a state
//! using every feature and a set of sources, the tc programs' fates (as
//! the tracer walks the planned maps) are the nftables mode's, and a
//! socket in the cgroup gets the internal selection, never masqueraded.
//!
//! Documented differences (docs/ebpf.md, "Differences from the nftables
//! mode") are the only exceptions: hashing schedulers pick one slot here
//! where the nftables tracer lists every target.

mod common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use kproxy_ebpf::maps::Contents;
use kproxy_ebpf::trace::{Fate, Origin, Packet, trace};
use kproxy_ebpf::{desired, maps};
use kproxy_model::{IpFamily, IpNet, Protocol, ProxyState, Scheduler};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Sources reaching the tc program: pods on this and other nodes, a
/// local endpoint (hairpin), clients outside inside and outside the
/// load balancer's ranges.
const SOURCES_V4: [&str; 6] =
    ["10.244.1.33", "10.244.2.33", "10.244.1.10", "203.0.113.7", "198.18.0.9", "192.168.77.50"];
const SOURCES_V6: [&str; 3] = ["fd00:10:244:1::33", "fd00:10:244:1::10", "2001:db8::7"];

struct Target {
    addr: SocketAddr,
    protocol: Protocol,
    hashed: bool,
}

/// Every frontend of the state, plus an unserved cluster-IP port and an
/// unowned service-CIDR address per family.
fn targets(state: &ProxyState) -> Vec<Target> {
    let mut out = Vec::new();
    for port in state.service_ports() {
        let hashed = matches!(port.scheduler, Some(Scheduler::Sh | Scheduler::Dh | Scheduler::Mh));
        for f in &port.frontends {
            out.push(Target { addr: f.addr(), protocol: port.name.protocol, hashed });
        }
    }
    for extra in ["10.96.0.10:81", "10.96.0.99:80", "[fd00:96::10]:81", "[fd00:96::99]:80"] {
        out.push(Target { addr: extra.parse().unwrap(), protocol: Protocol::Tcp, hashed: false });
    }
    out
}

fn nft_table(state: &ProxyState, family: IpFamily) -> kproxy_nftables::Table {
    let config = kproxy_nftables::PlanConfig {
        local_detector: config().local_detector.clone(),
        ..kproxy_nftables::PlanConfig::default()
    };
    kproxy_nftables::table(state, family, &config)
}

fn nft_fates(table: &kproxy_nftables::Table, family: IpFamily, from: IpAddr, t: &Target) -> Vec<Fate> {
    let packet = kproxy_nftables::trace::Packet {
        saddr: from,
        daddr: t.addr.ip(),
        protocol: t.protocol,
        dport: t.addr.port(),
        iif: Some("eth0".into()),
        local_addresses: vec![ip(NODE)],
    };
    kproxy_nftables::trace::trace(table, family, &packet).fates()
}

fn ebpf_fates(contents: &Contents, cidrs: &[IpNet], origin: Origin, t: &Target) -> Vec<Fate> {
    let packet = Packet { origin, daddr: t.addr.ip(), protocol: t.protocol, dport: t.addr.port() };
    trace(contents, cidrs, &packet).fates()
}

fn everything_state() -> ProxyState {
    let mut s = scenario();
    everything(&mut s);
    s.sync();
    s.state().clone()
}

fn cidrs(state: &ProxyState) -> Vec<IpNet> {
    IpFamily::ALL.into_iter().flat_map(|f| state.family(f).service_cidrs.clone()).collect()
}

#[test]
fn tc_fates_are_the_nftables_modes_for_every_frontend_and_source() {
    let state = everything_state();
    let contents = desired(&state, &config()).expect("plans").applied.contents();
    let cidrs = cidrs(&state);
    let tables = [nft_table(&state, IpFamily::V4), nft_table(&state, IpFamily::V6)];
    let mut compared = 0;
    for t in targets(&state) {
        let family = IpFamily::of(&t.addr.ip());
        let sources: &[&str] = if family == IpFamily::V4 { &SOURCES_V4 } else { &SOURCES_V6 };
        for from in sources.iter().map(|s| ip(s)) {
            let table = &tables[if family == IpFamily::V4 { 0 } else { 1 }];
            let want = nft_fates(table, family, from, &t);
            let got = ebpf_fates(&contents, &cidrs, Origin::Tc { saddr: from }, &t);
            if t.hashed {
                // The programs' hash picks one of the nftables targets.
                assert_eq!(got.len(), 1, "{from} -> {}: {got:?}", t.addr);
                assert!(want.contains(&got[0]), "{from} -> {}: {got:?} not in {want:?}", t.addr);
            } else {
                assert_eq!(got, want, "{from} -> {}", t.addr);
            }
            compared += 1;
        }
    }
    assert!(compared > 120, "only {compared} comparisons");
}

#[test]
fn a_socket_in_the_cgroup_gets_the_internal_selection_unmasqueraded() {
    let state = everything_state();
    let contents = desired(&state, &config()).expect("plans").applied.contents();
    let cidrs = cidrs(&state);
    // The socket hooks do not filter sources (loadBalancerSourceRanges
    // apply on tc): compare with tc as if no frontend had ranges.
    let mut unfiltered = contents.clone();
    for f in unfiltered.frontends.values_mut() {
        f.flags &= !maps::flags::SOURCE_RANGES;
    }
    for t in targets(&state).into_iter().filter(|t| !t.hashed) {
        let pod = if t.addr.is_ipv4() { ip("10.244.1.33") } else { ip("fd00:10:244:1::33") };
        let from_pod = ebpf_fates(&unfiltered, &cidrs, Origin::Tc { saddr: pod }, &t);
        let want: Vec<Fate> = from_pod
            .into_iter()
            .map(|f| match f {
                Fate::Dnat { endpoint, .. } => Fate::Dnat { endpoint, masquerade: false },
                // DROP passes a socket untranslated; the companion table
                // drops what then goes to a service CIDR.
                Fate::Drop if !cidrs.iter().any(|n| n.contains(&t.addr.ip())) => Fate::Untouched,
                other => other,
            })
            .collect();
        let got = ebpf_fates(&contents, &cidrs, Origin::Socket { netns_cookie: 4242 }, &t);
        assert_eq!(got, want, "socket -> {}", t.addr);
    }
}

#[test]
fn the_socket_hooks_hash_the_network_namespace_cookie() {
    let state = everything_state();
    let contents = desired(&state, &config()).expect("plans").applied.contents();
    let t = Target { addr: "10.96.0.71:80".parse().unwrap(), protocol: Protocol::Tcp, hashed: true };
    let picks: std::collections::BTreeSet<Vec<Fate>> =
        (0..64u64).map(|cookie| ebpf_fates(&contents, &[], Origin::Socket { netns_cookie: cookie }, &t)).collect();
    // 64 clients over a 1:3 weighted pair: both endpoints get clients.
    assert_eq!(picks.len(), 2, "{picks:?}");
    let key = maps::FrontendKey { addr: maps::addr16(ip("10.96.0.71")), port: 80u16.to_be(), proto: 6, pad: 0 };
    assert_eq!(contents.frontends[&key].internal.sched, maps::sched::HASH_SRC);
}
