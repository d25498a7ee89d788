//! The IPVS mode's dummy interface (`kube-ipvs0`) and the addresses on it,
//! over rtnetlink.
//!
//! IPVS only intercepts packets the kernel delivers locally, so every
//! virtual address must be local to the node: kube-proxy puts each one on
//! a dummy link, left down (a down dummy's addresses are still local, and
//! it never answers ARP or sends anything). This module creates that link,
//! lists, adds and deletes its addresses, and removes it; which addresses
//! belong there is the IPVS planner's decision.
//!
//! It only ever creates links of type `dummy` and refuses to adopt a link
//! of another type that happens to carry the name: kproxy must not hijack
//! (and later delete addresses from) someone else's interface.

use std::collections::BTreeSet;
use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::{AddressFamily, address::AddressScope};
use nix::errno::Errno;
use rtnetlink::{Handle, LinkDummy};
use tokio::task::JoinHandle;

/// A link or address request failed. Every variant names the interface
/// (or its index) and, for address requests, the address.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Opening the rtnetlink socket failed.
    #[error("cannot open an rtnetlink socket")]
    Connect(#[source] std::io::Error),
    /// Looking the link up by name failed for a reason other than its absence.
    #[error("looking up link {name} failed")]
    Lookup {
        name: String,
        #[source]
        source: rtnetlink::Error,
    },
    /// A link of that name exists and is not a dummy: it is not kproxy's.
    #[error("link {name} exists but is a {kind} link, not a dummy; refusing to use it")]
    NotDummy {
        name: String,
        /// The link's kind as the kernel names it (`bridge`, `veth`, ...),
        /// or `device` for one without a kind (a physical NIC).
        kind: String,
    },
    #[error("creating dummy link {name} failed")]
    Create {
        name: String,
        #[source]
        source: rtnetlink::Error,
    },
    /// The link was deleted by someone else between our add and our lookup.
    #[error("dummy link {name} disappeared right after it was created")]
    Vanished { name: String },
    #[error("deleting link {name} failed")]
    Delete {
        name: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("listing the addresses of link {index} failed")]
    ListAddresses {
        index: u32,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("adding {address} to link {index} failed")]
    AddAddress {
        index: u32,
        address: IpAddr,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("deleting {address} from link {index} failed")]
    DeleteAddress {
        index: u32,
        address: IpAddr,
        #[source]
        source: rtnetlink::Error,
    },
}

impl LinkError {
    /// The errno the kernel answered with, if it answered with one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            LinkError::Connect(io) => io.raw_os_error().map(Errno::from_raw),
            LinkError::NotDummy { .. } | LinkError::Vanished { .. } => None,
            LinkError::Lookup { source, .. }
            | LinkError::Create { source, .. }
            | LinkError::Delete { source, .. }
            | LinkError::ListAddresses { source, .. }
            | LinkError::AddAddress { source, .. }
            | LinkError::DeleteAddress { source, .. } => errno_of(source),
        }
    }
}

fn errno_of(error: &rtnetlink::Error) -> Option<Errno> {
    match error {
        rtnetlink::Error::NetlinkError(message) => Some(Errno::from_raw(message.raw_code().abs())),
        _ => None,
    }
}

/// One rtnetlink connection for the length of a call; the task driving
/// it ends with the guard.
struct Connection {
    handle: Handle,
    task: JoinHandle<()>,
}

impl Connection {
    fn open() -> Result<Self, LinkError> {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(LinkError::Connect)?;
        Ok(Self { handle, task: tokio::spawn(connection) })
    }

    /// The link named `name`, or `None` when there is none.
    async fn link(&self, name: &str) -> Result<Option<LinkMessage>, LinkError> {
        let mut answer = self.handle.link().get().match_name(name).execute();
        match answer.try_next().await {
            Ok(link) => Ok(link),
            // A lookup by name of a missing link answers ENODEV.
            Err(e) if errno_of(&e) == Some(Errno::ENODEV) => Ok(None),
            Err(source) => Err(LinkError::Lookup { name: name.to_owned(), source }),
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The interface index of link `name`, creating it as a `dummy` link
/// (left down) when it is missing. A link of that name that is not a
/// dummy is an error ([`LinkError::NotDummy`]) and is left as it is.
pub async fn ensure_dummy(name: &str) -> Result<u32, LinkError> {
    let connection = Connection::open()?;
    if let Some(link) = connection.link(name).await? {
        return dummy_index(name, &link);
    }
    let create = connection.handle.link().add(LinkDummy::new(name).build()).execute().await;
    match create {
        Ok(()) => {}
        // Created by someone else since the lookup: checked below like any existing link.
        Err(e) if errno_of(&e) == Some(Errno::EEXIST) => {}
        Err(source) => return Err(LinkError::Create { name: name.to_owned(), source }),
    }
    match connection.link(name).await? {
        Some(link) => dummy_index(name, &link),
        // Deleted again between our add and this lookup: report the add as failed.
        None => Err(LinkError::Vanished { name: name.to_owned() }),
    }
}

/// The index of `link` if it is a dummy.
fn dummy_index(name: &str, link: &LinkMessage) -> Result<u32, LinkError> {
    match kind_of(link) {
        Some(InfoKind::Dummy) => Ok(link.header.index),
        kind => Err(LinkError::NotDummy {
            name: name.to_owned(),
            kind: kind.map_or_else(|| "device".to_owned(), |k| k.to_string()),
        }),
    }
}

fn kind_of(link: &LinkMessage) -> Option<&InfoKind> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Kind(kind) => Some(kind),
            _ => None,
        }),
        _ => None,
    })
}

/// The interface index of link `name`, if there is one.
pub async fn link_index(name: &str) -> Result<Option<u32>, LinkError> {
    let connection = Connection::open()?;
    Ok(connection.link(name).await?.map(|link| link.header.index))
}

/// Every address on link `index`, both families.
pub async fn addresses(index: u32) -> Result<BTreeSet<IpAddr>, LinkError> {
    let connection = Connection::open()?;
    let mut dump = connection.handle.address().get().set_link_index_filter(index).execute();
    let mut out = BTreeSet::new();
    // rtnetlink filters the dump of every link by index in userspace.
    while let Some(message) = dump.try_next().await.map_err(|source| LinkError::ListAddresses { index, source })? {
        out.extend(address_of(&message));
    }
    Ok(out)
}

/// The links that hold any of `wanted`, by name (sorted, loopback never):
/// the ebpf mode puts its tc programs on the interfaces that carry the
/// node's addresses.
pub async fn links_holding(wanted: &[IpAddr]) -> Result<BTreeSet<String>, LinkError> {
    let connection = Connection::open()?;
    let mut dump = connection.handle.address().get().execute();
    let mut indexes = BTreeSet::new();
    while let Some(message) = dump.try_next().await.map_err(|source| LinkError::ListAddresses { index: 0, source })? {
        if address_of(&message).is_some_and(|ip| wanted.contains(&ip) && !ip.is_loopback()) {
            indexes.insert(message.header.index);
        }
    }
    let mut names = BTreeSet::new();
    let mut links = connection.handle.link().get().execute();
    while let Some(link) = links.try_next().await.map_err(|source| LinkError::ListAddresses { index: 0, source })? {
        if !indexes.contains(&link.header.index) {
            continue;
        }
        names.extend(link.attributes.iter().find_map(|a| match a {
            LinkAttribute::IfName(name) if name != "lo" => Some(name.clone()),
            _ => None,
        }));
    }
    Ok(names)
}

/// IFA_LOCAL where there is one (it is ours on point-to-point links),
/// IFA_ADDRESS otherwise (IPv6 sends only that).
fn address_of(message: &AddressMessage) -> Option<IpAddr> {
    let local = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

/// Adds `ip` to link `index` as a /32 or /128 (IPv6 without duplicate
/// address detection, so it is usable at once); already present is fine.
pub async fn add_address(index: u32, ip: IpAddr) -> Result<(), LinkError> {
    let connection = Connection::open()?;
    let mut request = connection.handle.address().add(index, ip, full_length(ip));
    let message = request.message_mut();
    message.header.scope = AddressScope::Universe;
    if ip.is_ipv6() {
        // Both places, as iproute2 sends `nodad`: the header byte for old
        // kernels, IFA_FLAGS for the full set.
        message.header.flags = AddressHeaderFlags::Nodad;
        message.attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
    }
    match request.execute().await {
        Ok(()) => Ok(()),
        Err(e) if errno_of(&e) == Some(Errno::EEXIST) => Ok(()),
        Err(source) => Err(LinkError::AddAddress { index, address: ip, source }),
    }
}

/// Deletes `ip`/32 or /128 from link `index`; absent is fine.
pub async fn delete_address(index: u32, ip: IpAddr) -> Result<(), LinkError> {
    let connection = Connection::open()?;
    let mut message = AddressMessage::default();
    message.header.family = if ip.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    message.header.prefix_len = full_length(ip);
    message.header.index = index;
    message.attributes.push(AddressAttribute::Local(ip));
    if ip.is_ipv6() {
        // IPv6 deletes by IFA_ADDRESS (IFA_LOCAL is only a fallback there).
        message.attributes.push(AddressAttribute::Address(ip));
    }
    match connection.handle.address().del(message).execute().await {
        Ok(()) => Ok(()),
        // IPv4 answers EADDRNOTAVAIL for an address not on the link, IPv6 ENODEV or EADDRNOTAVAIL.
        Err(e) if matches!(errno_of(&e), Some(Errno::EADDRNOTAVAIL | Errno::ENODEV)) => Ok(()),
        Err(source) => Err(LinkError::DeleteAddress { index, address: ip, source }),
    }
}

/// Deletes the dummy link `name`; `true` if it existed. A link of that
/// name that is not a dummy is not kproxy's: [`LinkError::NotDummy`], and
/// it stays.
pub async fn delete_link(name: &str) -> Result<bool, LinkError> {
    let connection = Connection::open()?;
    let Some(link) = connection.link(name).await? else {
        return Ok(false);
    };
    let index = dummy_index(name, &link)?;
    match connection.handle.link().del(index).execute().await {
        Ok(()) => Ok(true),
        // Deleted by someone else since the lookup.
        Err(e) if errno_of(&e) == Some(Errno::ENODEV) => Ok(false),
        Err(source) => Err(LinkError::Delete { name: name.to_owned(), source }),
    }
}

fn full_length(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

#[cfg(test)]
mod tests;
