//! kproxy's local routes: `local <ip> dev lo table local proto 107`, one per
//! frontend address the userspace mode claims. Such a route makes the
//! kernel deliver packets for the address (a cluster IP, say) to this
//! host's sockets without adding it to an interface: this kernel has no
//! `dummy` links, and the node's address list stays as the administrator
//! made it.
//!
//! Every route added here carries [`ROUTE_PROTOCOL`], and only routes with
//! that number are listed or deleted: routes of the kernel, of the
//! administrator and of other agents are never touched, even for the same
//! address. This module owns the messages; which addresses to claim is the
//! caller's decision.

use std::collections::BTreeSet;
use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::AddressFamily;
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType};
use nix::errno::Errno;
use tokio::task::JoinHandle;

use crate::NetlinkError;

/// The `rtm_protocol` of every route kproxy adds: 107 (ASCII `k`).
///
/// Numbers from 5 up are not interpreted by the kernel; they tell routing
/// daemons apart. 107 is assigned neither in the kernel's uapi
/// `linux/rtnetlink.h` (0-4, 8-18, 42, 99, 186-189, 192) nor in iproute2's
/// `/etc/iproute2/rt_protos`, and it is clear of the unlisted numbers that
/// common node agents use (FRR's daemons 186-198, Calico's Felix 80).
/// `ip route show table local proto 107` lists kproxy's routes.
pub const ROUTE_PROTOCOL: u8 = 107;

/// The kernel's `local` routing table (`RT_TABLE_LOCAL`), consulted before
/// any other by the default rule 0.
const TABLE_LOCAL: u8 = 255;

/// What adding a local route did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// kproxy's route was added: the address is kproxy's to delete.
    Added,
    /// The address already reaches this host (it is on an interface, is
    /// loopback, or another local route covers it): nothing was added, and
    /// nothing here is kproxy's.
    AlreadyLocal,
}

/// A local route could not be listed, added or deleted.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// `lo` has no interface index in this network namespace.
    #[error("cannot find the loopback interface")]
    Loopback(#[source] Errno),
    /// The kernel rejected or broke off a route dump.
    #[error("listing routes failed")]
    List(#[source] rtnetlink::Error),
    #[error("adding the local route for {address} failed")]
    Add {
        address: IpAddr,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("deleting the local route for {address} failed")]
    Delete {
        address: IpAddr,
        #[source]
        source: rtnetlink::Error,
    },
}

impl RouteError {
    /// The errno the kernel answered with, if it answered with one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            RouteError::Loopback(errno) => Some(*errno),
            RouteError::List(source) | RouteError::Add { source, .. } | RouteError::Delete { source, .. } => {
                errno_of(source)
            }
        }
    }
}

impl NetlinkError {
    /// Whether the kernel refused for lack of privileges (`CAP_NET_ADMIN`):
    /// retrying will not help.
    pub fn is_permission_denied(&self) -> bool {
        let errno = match self {
            NetlinkError::Connect(io) => io.raw_os_error().map(Errno::from_raw),
            NetlinkError::Route(route) => route.errno(),
            NetlinkError::Link(link) => link.errno(),
            NetlinkError::ListAddresses(source) => errno_of(source),
        };
        matches!(errno, Some(Errno::EPERM | Errno::EACCES))
    }
}

fn errno_of(error: &rtnetlink::Error) -> Option<Errno> {
    match error {
        rtnetlink::Error::NetlinkError(message) => Some(Errno::from_raw(message.raw_code().abs())),
        _ => None,
    }
}

/// An rtnetlink connection for kproxy's local routes, in the network
/// namespace of the thread that opened it.
pub struct LocalRoutes {
    handle: rtnetlink::Handle,
    connection: JoinHandle<()>,
    loopback: u32,
}

impl Drop for LocalRoutes {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl LocalRoutes {
    /// Opens the connection; call it inside a tokio runtime, which drives it.
    pub fn connect() -> Result<Self, NetlinkError> {
        let loopback = nix::net::if_::if_nametoindex("lo").map_err(RouteError::Loopback)?;
        let (connection, handle, _) = rtnetlink::new_connection().map_err(NetlinkError::Connect)?;
        Ok(Self { handle, connection: tokio::spawn(connection), loopback })
    }

    /// The addresses of kproxy's local routes (protocol [`ROUTE_PROTOCOL`]),
    /// both families.
    pub async fn list(&self) -> Result<BTreeSet<IpAddr>, NetlinkError> {
        let mut out = BTreeSet::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut request = RouteMessage::default();
            request.header.address_family = family;
            // Without strict checking the kernel dumps every table; the
            // filter is ours.
            let mut dump = self.handle.route().get(request).execute();
            while let Some(route) = dump.try_next().await.map_err(RouteError::List)? {
                out.extend(kproxys(&route));
            }
        }
        Ok(out)
    }

    /// Adds kproxy's local route for `ip`, unless the address already
    /// reaches this host.
    pub async fn add(&self, ip: IpAddr) -> Result<Claim, NetlinkError> {
        if self.is_local(ip).await {
            return Ok(Claim::AlreadyLocal);
        }
        match self.handle.route().add(add_message(ip, self.loopback)).execute().await {
            Ok(()) => Ok(Claim::Added),
            // IPv4 only: a route of the same prefix and metric exists, the
            // kernel's for an interface address (IPv6 routes of a new
            // metric coexist, hence the lookup first).
            Err(e) if errno_of(&e) == Some(Errno::EEXIST) => Ok(Claim::AlreadyLocal),
            Err(source) => Err(RouteError::Add { address: ip, source }.into()),
        }
    }

    /// Deletes kproxy's local route for `ip`; `false` when there was none.
    /// A route of another protocol for the same address stays.
    pub async fn delete(&self, ip: IpAddr) -> Result<bool, NetlinkError> {
        match self.handle.route().del(delete_message(ip)).execute().await {
            Ok(()) => Ok(true),
            Err(e) if matches!(errno_of(&e), Some(Errno::ESRCH | Errno::ENOENT)) => Ok(false),
            Err(source) => Err(RouteError::Delete { address: ip, source }.into()),
        }
    }

    /// Whether a lookup of `ip` (`ip route get`) ends in a local route.
    /// Advisory: a failed lookup (no route at all) means "not local".
    async fn is_local(&self, ip: IpAddr) -> bool {
        let mut request = RouteMessage::default();
        request.header.address_family = family_of(ip);
        request.header.destination_prefix_length = full_length(ip);
        request.attributes.push(RouteAttribute::Destination(RouteAddress::from(ip)));
        let mut answer = self.handle.route().get(request).execute();
        matches!(answer.try_next().await, Ok(Some(route)) if route.header.kind == RouteType::Local)
    }
}

/// `ip route add local <ip>/<full> dev lo table local proto 107`, as
/// iproute2 sends it: scope host for IPv4; IPv6 routes have no scope.
fn add_message(ip: IpAddr, loopback: u32) -> RouteMessage {
    let mut message = route_message(ip);
    message.header.scope = if ip.is_ipv4() { RouteScope::Host } else { RouteScope::Universe };
    message.attributes.push(RouteAttribute::Oif(loopback));
    message
}

/// `ip route del local <ip>/<full> table local proto 107`: any device and
/// (IPv4) any scope, but only kproxy's protocol, which the kernel matches.
fn delete_message(ip: IpAddr) -> RouteMessage {
    let mut message = route_message(ip);
    message.header.scope = RouteScope::NoWhere;
    message
}

fn route_message(ip: IpAddr) -> RouteMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = family_of(ip);
    message.header.destination_prefix_length = full_length(ip);
    message.header.table = TABLE_LOCAL;
    message.header.protocol = RouteProtocol::from(ROUTE_PROTOCOL);
    message.header.kind = RouteType::Local;
    message.attributes.push(RouteAttribute::Destination(RouteAddress::from(ip)));
    message
}

/// The address of `route` if it is one of kproxy's: type local, table
/// local, protocol [`ROUTE_PROTOCOL`], one address.
fn kproxys(route: &RouteMessage) -> Option<IpAddr> {
    let header = &route.header;
    // Tables above 255 are only in RTA_TABLE; the header then says 252.
    let table = route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Table(table) => Some(*table),
        _ => None,
    });
    let in_local = table.map_or(header.table == TABLE_LOCAL, |t| t == u32::from(TABLE_LOCAL));
    if header.kind != RouteType::Local || u8::from(header.protocol) != ROUTE_PROTOCOL || !in_local {
        return None;
    }
    let ip = route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(RouteAddress::Inet(ip)) => Some(IpAddr::V4(*ip)),
        RouteAttribute::Destination(RouteAddress::Inet6(ip)) => Some(IpAddr::V6(*ip)),
        _ => None,
    })?;
    (header.destination_prefix_length == full_length(ip)).then_some(ip)
}

fn family_of(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 }
}

fn full_length(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

#[cfg(test)]
mod tests;
