use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpNet, Protocol};

use super::*;
use crate::types::Connections;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn sock(s: &str) -> SocketAddr {
    s.parse().expect("test socket address")
}

fn dest(addr: &str, weight: u32) -> RealServer {
    RealServer { addr: ip(addr), port: 8080, weight }
}

fn server(protocol: Protocol, addr: &str, destinations: Vec<RealServer>) -> VirtualServer {
    VirtualServer {
        protocol,
        addr: ip(addr),
        port: 80,
        scheduler: "rr".into(),
        persistence: None,
        destinations,
        mark: None,
    }
}

fn desired(servers: impl IntoIterator<Item = VirtualServer>) -> BTreeMap<ServerKey, VirtualServer> {
    servers.into_iter().map(|s| (s.key(), s)).collect()
}

fn current(servers: impl IntoIterator<Item = ObservedServer>) -> BTreeMap<ServerKey, ObservedServer> {
    servers.into_iter().map(|s| (s.server.key(), s)).collect()
}

/// `server` in the kernel with `conns` on its destination `at`.
fn busy(server: VirtualServer, at: &str, active: u32, inactive: u32) -> ObservedServer {
    let mut observed = ObservedServer::idle(server);
    observed.connections.insert(sock(at), Connections { active, inactive });
    observed
}

fn web() -> VirtualServer {
    server(Protocol::Tcp, "10.96.0.10", vec![dest("10.244.1.10", 1), dest("10.244.2.10", 1)])
}

#[test]
fn an_unchanged_state_gives_no_ops() {
    let ops = diff(&current([ObservedServer::idle(web())]), &desired([web()]), &[]);
    assert_eq!(ops, []);
}

#[test]
fn a_new_server_is_added_then_its_destinations() {
    let ops = diff(&BTreeMap::new(), &desired([web()]), &[]);
    let key = web().key();
    assert_eq!(
        ops,
        [
            Op::AddServer(VirtualServer { destinations: vec![], ..web() }),
            Op::AddDest { server: key, dest: dest("10.244.1.10", 1) },
            Op::AddDest { server: key, dest: dest("10.244.2.10", 1) },
        ]
    );
}

#[test]
fn a_scheduler_or_persistence_change_edits_the_server_only() {
    let want = VirtualServer { scheduler: "sh".into(), persistence: Some(60), ..web() };
    let ops = diff(&current([ObservedServer::idle(web())]), &desired([want.clone()]), &[]);
    assert_eq!(ops, [Op::EditServer(VirtualServer { destinations: vec![], ..want })]);
}

#[test]
fn a_weight_change_edits_the_destination() {
    let want = server(Protocol::Tcp, "10.96.0.10", vec![dest("10.244.1.10", 1), dest("10.244.2.10", 5)]);
    let ops = diff(&current([ObservedServer::idle(web())]), &desired([want]), &[]);
    assert_eq!(ops, [Op::EditDest { server: web().key(), dest: dest("10.244.2.10", 5) }]);
}

#[test]
fn a_removed_tcp_endpoint_with_connections_is_quiesced_then_deleted_when_drained() {
    let want = server(Protocol::Tcp, "10.96.0.10", vec![dest("10.244.1.10", 1)]);
    let key = web().key();

    let ops = diff(&current([busy(web(), "10.244.2.10:8080", 1, 0)]), &desired([want.clone()]), &[]);
    assert_eq!(ops, [Op::EditDest { server: key, dest: dest("10.244.2.10", 0) }]);

    // Quiesced and still busy: nothing to do until it drains.
    let quiesced = server(Protocol::Tcp, "10.96.0.10", vec![dest("10.244.1.10", 1), dest("10.244.2.10", 0)]);
    let ops = diff(&current([busy(quiesced.clone(), "10.244.2.10:8080", 0, 2)]), &desired([want.clone()]), &[]);
    assert_eq!(ops, []);

    let ops = diff(&current([ObservedServer::idle(quiesced)]), &desired([want]), &[]);
    assert_eq!(ops, [Op::DeleteDest { server: key, dest: sock("10.244.2.10:8080") }]);
}

#[test]
fn a_removed_tcp_endpoint_without_connections_is_deleted_at_once() {
    let want = server(Protocol::Tcp, "10.96.0.10", vec![dest("10.244.1.10", 1)]);
    let ops = diff(&current([busy(web(), "10.244.1.10:8080", 4, 0)]), &desired([want]), &[]);
    assert_eq!(ops, [Op::DeleteDest { server: web().key(), dest: sock("10.244.2.10:8080") }]);
}

#[test]
fn a_removed_udp_endpoint_is_deleted_at_once_even_with_connections() {
    let have = server(Protocol::Udp, "10.96.0.53", vec![dest("10.244.1.53", 1), dest("10.244.2.53", 1)]);
    let want = server(Protocol::Udp, "10.96.0.53", vec![dest("10.244.1.53", 1)]);
    let ops = diff(&current([busy(have.clone(), "10.244.2.53:8080", 0, 7)]), &desired([want]), &[]);
    assert_eq!(ops, [Op::DeleteDest { server: have.key(), dest: sock("10.244.2.53:8080") }]);
}

#[test]
fn a_returning_endpoint_gets_its_weight_back() {
    let quiesced = server(Protocol::Tcp, "10.96.0.10", vec![dest("10.244.1.10", 1), dest("10.244.2.10", 0)]);
    let ops = diff(&current([busy(quiesced, "10.244.2.10:8080", 1, 0)]), &desired([web()]), &[]);
    assert_eq!(ops, [Op::EditDest { server: web().key(), dest: dest("10.244.2.10", 1) }]);
}

#[test]
fn servers_no_longer_wanted_are_deleted_outside_the_excluded_cidrs_only() {
    let excluded: Vec<IpNet> = vec!["172.16.0.0/12".parse().expect("test cidr")];
    let foreign_excluded = server(Protocol::Tcp, "172.16.5.5", vec![dest("10.0.0.1", 1)]);
    let foreign = server(Protocol::Tcp, "10.96.0.99", vec![]);
    let have = current([ObservedServer::idle(foreign_excluded), ObservedServer::idle(foreign.clone())]);
    let ops = diff(&have, &BTreeMap::new(), &excluded);
    // Upstream's rule: only excludeCIDRs protect a server from cleanup.
    assert_eq!(ops, [Op::DeleteServer(foreign.key())]);
}

#[test]
fn a_wanted_server_inside_the_excluded_cidrs_is_still_programmed() {
    let excluded: Vec<IpNet> = vec!["10.96.0.0/16".parse().expect("test cidr")];
    let ops = diff(&BTreeMap::new(), &desired([web()]), &excluded);
    assert_eq!(ops.len(), 3);
}

#[test]
fn ops_come_in_key_order_with_each_server_before_its_destinations() {
    let a = server(Protocol::Tcp, "10.96.0.1", vec![dest("10.244.1.1", 1)]);
    let b = server(Protocol::Tcp, "10.96.0.2", vec![]);
    let ops = diff(&current([ObservedServer::idle(b.clone())]), &desired([a.clone()]), &[]);
    assert_eq!(
        ops,
        [
            Op::AddServer(VirtualServer { destinations: vec![], ..a.clone() }),
            Op::AddDest { server: a.key(), dest: dest("10.244.1.1", 1) },
            Op::DeleteServer(b.key()),
        ]
    );
}
