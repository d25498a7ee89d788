//! What to change in the kernel: the desired servers against the observed
//! ones, with graceful termination of destinations that leave.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpNet, Protocol};

use crate::types::{ObservedServer, RealServer, ServerKey, VirtualServer};

/// One change to IPVS. Server operations carry no destinations: those
/// follow as [`Op::AddDest`]s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Create the virtual server with its settings (destinations are ignored).
    AddServer(VirtualServer),
    /// Change the scheduler or persistence (destinations are ignored).
    EditServer(VirtualServer),
    /// Delete the virtual server and, with it, its destinations.
    DeleteServer(ServerKey),
    AddDest {
        server: ServerKey,
        dest: RealServer,
    },
    /// Change the weight; weight 0 quiesces a leaving destination.
    EditDest {
        server: ServerKey,
        dest: RealServer,
    },
    DeleteDest {
        server: ServerKey,
        dest: SocketAddr,
    },
}

/// The operations that take the kernel from `current` to `desired`, and
/// nothing else: an unchanged state gives no operation.
///
/// Order: servers by key; for each, its server operation first, then its
/// destinations by address. The kernel accepts that order, as a server
/// exists before its destinations and deleting a server deletes them.
///
/// A destination that leaves a TCP or SCTP server is first quiesced
/// (weight 0, so established connections finish and no new one picks it)
/// and deleted once the kernel reports no active and no inactive
/// connections; call `diff` again at each sync to finish draining. UDP has
/// no connection end to wait for, so its destinations are deleted at once
/// (conntrack cleanup is the apply edge's job).
///
/// A server not in `desired` is deleted, unless its address is inside
/// `exclude_cidrs` (`ipvs.excludeCIDRs`): those are never deleted. This is
/// upstream's rule (a server outside them IS deleted, which also clears
/// what kube-proxy's IPVS mode left behind on migration); the observer
/// should pass in `current` only the servers kproxy may own, so a foreign
/// server survives either by being excluded or by not being observed as
/// kproxy's. Desired servers are programmed even inside `exclude_cidrs`.
pub fn diff(
    current: &BTreeMap<ServerKey, ObservedServer>,
    desired: &BTreeMap<ServerKey, VirtualServer>,
    exclude_cidrs: &[IpNet],
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut keys: Vec<&ServerKey> = current.keys().chain(desired.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        match (current.get(key), desired.get(key)) {
            (None, Some(want)) => {
                ops.push(Op::AddServer(without_destinations(want)));
                ops.extend(want.destinations.iter().map(|d| Op::AddDest { server: *key, dest: *d }));
            }
            (Some(have), Some(want)) => {
                if !have.server.same_settings(want) {
                    ops.push(Op::EditServer(without_destinations(want)));
                }
                destinations(*key, have, want, &mut ops);
            }
            (Some(_), None) if !excluded(key.addr, exclude_cidrs) => ops.push(Op::DeleteServer(*key)),
            (Some(_), None) | (None, None) => {}
        }
    }
    ops
}

fn destinations(key: ServerKey, have: &ObservedServer, want: &VirtualServer, ops: &mut Vec<Op>) {
    let have_dests: BTreeMap<SocketAddr, &RealServer> =
        have.server.destinations.iter().map(|d| (d.socket_addr(), d)).collect();
    let want_dests: BTreeMap<SocketAddr, &RealServer> =
        want.destinations.iter().map(|d| (d.socket_addr(), d)).collect();
    let mut addrs: Vec<&SocketAddr> = have_dests.keys().chain(want_dests.keys()).collect();
    addrs.sort();
    addrs.dedup();
    for addr in addrs {
        match (have_dests.get(addr), want_dests.get(addr)) {
            (None, Some(w)) => ops.push(Op::AddDest { server: key, dest: **w }),
            (Some(h), Some(w)) if h.weight != w.weight => ops.push(Op::EditDest { server: key, dest: **w }),
            (Some(h), None) => {
                if key.protocol == Protocol::Udp || have.connections_of(*addr).drained() {
                    ops.push(Op::DeleteDest { server: key, dest: *addr });
                } else if h.weight != 0 {
                    ops.push(Op::EditDest { server: key, dest: RealServer { weight: 0, ..**h } });
                }
            }
            _ => {}
        }
    }
}

fn without_destinations(server: &VirtualServer) -> VirtualServer {
    VirtualServer { destinations: Vec::new(), ..server.clone() }
}

fn excluded(addr: IpAddr, exclude_cidrs: &[IpNet]) -> bool {
    exclude_cidrs.iter().any(|c| c.contains(&addr))
}

#[cfg(test)]
mod tests;
