//! The whole IPVS table read back: every service with its destinations,
//! in the order `ipvsadm -Ln` prints them. [`read_table`] is the only
//! effect here (two dumps through [`Client`]); the ordering is pure and
//! tested on captured dumps. [`super::listing`] turns a [`Table`] into
//! text.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use nix::errno::Errno;

use super::client::{Client, ClientError};
use super::decode::DecodeError;
use super::types::{DestinationEntry, Info, ServiceEntry, ServiceKey};

/// Everything `ipvsadm -Ln` shows, as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Version and connection table size, for the first line.
    pub info: Info,
    /// In `ipvsadm -Ln` order, each with its destinations in that order.
    pub services: Vec<ListedService>,
    /// Dump entries that did not decode (services and destinations):
    /// left out of `services`, for the caller to log and count.
    pub skipped: Vec<DecodeError>,
}

/// One service and its destinations as the kernel reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedService {
    pub entry: ServiceEntry,
    pub destinations: Vec<DestinationEntry>,
}

impl Table {
    /// A table of `services` in the order `ipvsadm -Ln` prints (see
    /// [`ipvsadm_order`]), destinations included; nothing skipped.
    pub fn new(info: Info, mut services: Vec<ListedService>) -> Self {
        for s in &mut services {
            let keys: Vec<_> = s.destinations.iter().map(destination_key).collect();
            s.destinations = reorder(std::mem::take(&mut s.destinations), &ipvsadm_order(&keys));
        }
        let keys: Vec<_> = services.iter().map(|s| service_key(&s.entry.service.key)).collect();
        let services = reorder(services, &ipvsadm_order(&keys));
        Self { info, services, skipped: Vec::new() }
    }
}

/// Reads the version, every service, then each service's destinations,
/// as `ipvsadm -Ln` does. The dumps are not one snapshot: a service
/// deleted between the two (a sync running meanwhile) is left out rather
/// than failing the listing.
pub fn read_table(ipvs: &mut Client) -> Result<Table, ClientError> {
    let info = ipvs.info()?;
    let services = ipvs.services()?;
    let mut skipped = services.skipped;
    let mut listed = Vec::with_capacity(services.entries.len());
    for entry in services.entries {
        let dests = match ipvs.destinations(&entry.service.key) {
            Ok(dests) => dests,
            Err(e) if matches!(e.errno(), Some(Errno::ESRCH | Errno::ENOENT)) => continue,
            Err(e) => return Err(e),
        };
        skipped.extend(dests.skipped);
        listed.push(ListedService { entry, destinations: dests.entries });
    }
    let mut table = Table::new(info, listed);
    table.skipped = skipped;
    Ok(table)
}

/// One component of ipvsadm's sort keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// Compared as numbers (`u16` fields, promoted to `int` in C).
    Exact(u32),
    /// Compared as ipvsadm does a `u32`: `int r = a - b`, so the sign of
    /// the wrapped difference decides. See [`arrange`].
    Wrapping(u32),
}

const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;

/// `ipvs_cmp_services` (libipvs 1.31): fwmark, then address family,
/// protocol, address (IPv6 word by word) and port. Address services have
/// fwmark 0, so fwmark services come last; fwmark services have
/// protocol, address and port 0.
fn service_key(key: &ServiceKey) -> Vec<Part> {
    match key {
        ServiceKey::Addr { protocol, addr, port } => {
            let mut parts = vec![Part::Wrapping(0), Part::Exact(family(addr)), Part::Exact(protocol.number().into())];
            parts.extend(address(addr));
            parts.push(Part::Exact((*port).into()));
            parts
        }
        ServiceKey::Fwmark { family, mark } => {
            let af = match family {
                super::types::Family::Inet => AF_INET,
                super::types::Family::Inet6 => AF_INET6,
            };
            let mut parts = vec![Part::Wrapping(*mark), Part::Exact(af), Part::Exact(0)];
            parts.extend([Part::Exact(0); 4]);
            parts.push(Part::Exact(0));
            parts
        }
    }
}

/// `ipvs_cmp_dests`: address, then port. ipvsadm picks the comparison by
/// the first entry's family only; kproxy puts the family first, which is
/// the same for the single-family services it creates.
fn destination_key(entry: &DestinationEntry) -> Vec<Part> {
    let d = &entry.destination;
    let mut parts = vec![Part::Exact(family(&d.addr))];
    parts.extend(address(&d.addr));
    parts.push(Part::Exact(d.port.into()));
    parts
}

fn family(addr: &IpAddr) -> u32 {
    if addr.is_ipv4() { AF_INET } else { AF_INET6 }
}

/// Four parts: IPv4 compares one host-order word, IPv6 four.
fn address(addr: &IpAddr) -> [Part; 4] {
    match addr {
        IpAddr::V4(a) => [Part::Wrapping(u32::from(*a)), Part::Exact(0), Part::Exact(0), Part::Exact(0)],
        IpAddr::V6(a) => {
            let o = a.octets();
            let word = |i: usize| Part::Wrapping(u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]));
            [word(0), word(4), word(8), word(12)]
        }
    }
}

/// The order ipvsadm's `qsort` leaves `keys` in, as indices.
///
/// Its comparators subtract `u32`s into an `int`, so two values more than
/// 2^31 apart compare the wrong way round (`10.96.0.10` sorts after
/// `192.168.1.10`). Among values that fit in a half circle that is still
/// a total order: the circle read from the value after the largest gap.
/// Sets that do not fit have no consistent order in ipvsadm (its output
/// then depends on the dump order); they get the same rule, which is at
/// least deterministic. Every level is ordered within the group of keys
/// equal on the levels before it, as the comparators only look further
/// on a tie.
fn ipvsadm_order(keys: &[Vec<Part>]) -> Vec<usize> {
    let levels = keys.iter().map(Vec::len).max().unwrap_or(0);
    let mut ranks: Vec<Vec<usize>> = vec![Vec::with_capacity(levels); keys.len()];
    for level in 0..levels {
        let at = |k: &Vec<Part>| k.get(level).copied().unwrap_or(Part::Exact(0));
        let mut groups: BTreeMap<Vec<usize>, BTreeSet<Part>> = BTreeMap::new();
        for (k, r) in keys.iter().zip(&ranks) {
            groups.entry(r.clone()).or_default().insert(at(k));
        }
        let positions: BTreeMap<Vec<usize>, BTreeMap<Part, usize>> = groups
            .into_iter()
            .map(|(group, values)| (group, arrange(values).into_iter().enumerate().map(|(i, v)| (v, i)).collect()))
            .collect();
        for (k, r) in keys.iter().zip(&mut ranks) {
            let position = positions[&*r][&at(k)];
            r.push(position);
        }
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|a, b| ranks[*a].cmp(&ranks[*b]));
    order
}

/// The distinct values of one level of one group, in ipvsadm's order.
fn arrange(values: BTreeSet<Part>) -> Vec<Part> {
    let values: Vec<Part> = values.into_iter().collect();
    let wrapping: Vec<u64> = values
        .iter()
        .filter_map(|v| match v {
            Part::Wrapping(w) => Some(u64::from(*w)),
            Part::Exact(_) => None,
        })
        .collect();
    if wrapping.len() != values.len() || values.len() < 2 {
        return values;
    }
    // Sorted ascending (BTreeSet); the gap before values[i], the first
    // one wrapping around the circle.
    let gap = |i: usize| match i {
        0 => wrapping[0] + (1 << 32) - wrapping[wrapping.len() - 1],
        i => wrapping[i] - wrapping[i - 1],
    };
    let start = (0..values.len()).max_by_key(|i| (gap(*i), std::cmp::Reverse(*i))).expect("at least two values");
    values[start..].iter().chain(&values[..start]).copied().collect()
}

fn reorder<T>(items: Vec<T>, order: &[usize]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order.iter().map(|i| slots[*i].take().expect("an order names each index once")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Part {
        Part::Wrapping(u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()))
    }

    #[test]
    fn addresses_within_half_the_space_sort_numerically() {
        let keys = [vec![v4("10.96.0.11")], vec![v4("10.96.0.2")], vec![v4("10.96.0.10")]];
        assert_eq!(ipvsadm_order(&keys), [1, 2, 0]);
    }

    /// `ntohl(a) - ntohl(b)` wraps: 0x0a60000a - 0xc0a8010a is positive.
    #[test]
    fn addresses_over_half_the_space_apart_sort_as_ipvsadm_wraps_them() {
        let keys = [vec![v4("10.96.0.10")], vec![v4("192.168.1.10")], vec![v4("10.96.0.11")]];
        assert_eq!(ipvsadm_order(&keys), [1, 0, 2]);
    }

    #[test]
    fn later_levels_order_within_ties_only() {
        let keys = [
            vec![Part::Exact(17), v4("10.96.0.1")],
            vec![Part::Exact(6), v4("10.96.0.9")],
            vec![Part::Exact(6), v4("10.96.0.3")],
        ];
        assert_eq!(ipvsadm_order(&keys), [2, 1, 0]);
    }
}
