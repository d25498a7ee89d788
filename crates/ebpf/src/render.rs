//! Map contents as readable text (`kproxy render --proxy-mode ebpf`, the
//! planner's snapshots), and the names the tracer and the listing share.
//! Deterministic: everything is printed in address order.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;

use kproxy_model::IpFamily;
use kproxy_nftables::Table;

use crate::maps::{Backend, BackendKey, Contents, Frontend, FrontendKey, Selection, flags, ip_of, sched, verdict};

/// `KP_F_*` bits by name, `|`-joined (`-` for none).
pub fn flag_names(bits: u32) -> String {
    let names = [
        (flags::EXTERNAL, "EXTERNAL"),
        (flags::SOURCE_RANGES, "SOURCE_RANGES"),
        (flags::MASQ_INTERNAL, "MASQ_INTERNAL"),
        (flags::MASQ_EXTERNAL, "MASQ_EXTERNAL"),
        (flags::OWNED_ADDRESS, "OWNED_ADDRESS"),
    ];
    let set: Vec<&str> = names.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, n)| *n).collect();
    if set.is_empty() { "-".into() } else { set.join("|") }
}

/// `KP_SCHED_*` by name.
pub fn sched_name(code: u8) -> &'static str {
    match code {
        sched::RANDOM => "random",
        sched::RR => "rr",
        sched::HASH_SRC => "hash-src",
        sched::HASH_DST => "hash-dst",
        _ => "unknown",
    }
}

fn proto_name(proto: u8) -> String {
    match proto {
        6 => "TCP".into(),
        17 => "UDP".into(),
        132 => "SCTP".into(),
        0 => "any".into(),
        other => other.to_string(),
    }
}

/// A frontend key as `address:port/PROTO`.
pub fn key_text(key: &FrontendKey) -> String {
    let addr = SocketAddr::new(ip_of(key.addr), u16::from_be(key.port));
    format!("{addr}/{}", proto_name(key.proto))
}

fn backend_text(b: &Backend) -> String {
    SocketAddr::new(ip_of(b.addr), u16::from_be(b.port)).to_string()
}

fn selection_text(s: &Selection) -> String {
    match s.verdict {
        verdict::FORWARD => {
            let plural = if s.count == 1 { "" } else { "s" };
            format!("group {} ({}, {} slot{plural})", s.group, sched_name(s.sched), s.count)
        }
        verdict::REJECT => "REJECT".into(),
        verdict::DROP => "DROP".into(),
        other => format!("verdict {other}"),
    }
}

/// Sort order for display: address, then host-order port, then protocol.
fn display_order(key: &FrontendKey) -> (std::net::IpAddr, u16, u8) {
    (ip_of(key.addr), u16::from_be(key.port), key.proto)
}

/// The maps' contents: frontends with their selections and allowed
/// sources, then groups with their backends, then the local CIDRs.
pub fn contents(c: &Contents) -> String {
    let mut out = String::new();
    let mut frontends: Vec<(&FrontendKey, &Frontend)> = c.frontends.iter().collect();
    frontends.sort_by_key(|(k, _)| display_order(k));
    let _ = writeln!(out, "# kp_frontends ({})", frontends.len());
    for (key, f) in frontends {
        if f.flags & flags::OWNED_ADDRESS != 0 {
            let _ = writeln!(out, "{} owned address: unserved ports {}", ip_of(key.addr), selection_text(&f.internal));
            continue;
        }
        let _ = write!(out, "{} id {} flags {}", key_text(key), f.id, flag_names(f.flags));
        if f.affinity_timeout != 0 {
            let _ = write!(out, " affinity {}s", f.affinity_timeout);
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "  internal: {}", selection_text(&f.internal));
        match f.external == f.internal {
            true => {
                let _ = writeln!(out, "  external: same");
            }
            false => {
                let _ = writeln!(out, "  external: {}", selection_text(&f.external));
            }
        }
        let ranges: Vec<String> = c
            .source_ranges
            .iter()
            .filter(|r| u32::from_be(r.id) == f.id)
            .map(|r| prefix_text(r.addr, r.prefixlen.saturating_sub(32)))
            .collect();
        if f.flags & flags::SOURCE_RANGES != 0 {
            let _ = writeln!(
                out,
                "  allowed sources: {}",
                if ranges.is_empty() { "none".into() } else { ranges.join(", ") }
            );
        }
    }
    let mut groups: BTreeMap<u32, Vec<(u32, &Backend)>> = BTreeMap::new();
    for (BackendKey { group, slot }, b) in &c.backends {
        groups.entry(*group).or_default().push((*slot, b));
    }
    let _ = writeln!(out, "# kp_backends ({} groups)", groups.len());
    for (group, slots) in groups {
        let _ = writeln!(out, "group {group}: {}", slots_text(&slots));
    }
    let _ = writeln!(out, "# kp_local_cidrs ({})", c.local_cidrs.len());
    let mut cidrs: Vec<(std::net::IpAddr, String)> =
        c.local_cidrs.iter().map(|k| (ip_of(k.addr), prefix_text(k.addr, k.prefixlen))).collect();
    cidrs.sort();
    for (_, cidr) in cidrs {
        let _ = writeln!(out, "{cidr}");
    }
    out
}

/// Short groups slot by slot (the order matters for round robin); long
/// ones (Maglev tables) as each backend's slot count.
fn slots_text(slots: &[(u32, &Backend)]) -> String {
    if slots.len() <= 16 {
        return slots.iter().map(|(i, b)| format!("[{i}] {}", backend_text(b))).collect::<Vec<_>>().join(" ");
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, b) in slots {
        *counts.entry(backend_text(b)).or_default() += 1;
    }
    let parts: Vec<String> = counts.into_iter().map(|(b, n)| format!("{b} x{n}")).collect();
    format!("{} slots: {}", slots.len(), parts.join(", "))
}

/// A 16-byte network with a prefix over 128 bits, IPv4 as IPv4.
fn prefix_text(addr: [u8; 16], bits: u32) -> String {
    let ip = ip_of(addr);
    let bits = if ip.is_ipv4() { bits.saturating_sub(96) } else { bits };
    format!("{ip}/{bits}")
}

/// The companion tables in `nft -f` syntax, as one transaction that
/// replaces them.
pub fn companion(tables: &[(IpFamily, Table)]) -> String {
    let families = tables
        .iter()
        .map(|(family, table)| kproxy_nftables::FamilyPlan {
            family: Some(*family),
            ops: crate::companion::ops(None, table),
        })
        .collect();
    let plan = kproxy_nftables::Plan { full: true, families };
    kproxy_nftables::render::plan_of(crate::companion::TABLE, &plan)
}

/// [`contents`], then the companion tables: what `kproxy render` prints.
pub fn all(c: &Contents, tables: &[(IpFamily, Table)]) -> String {
    format!("{}# companion nftables table\n{}", contents(c), companion(tables))
}

/// What one scope of a frontend does, for a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListedSelection {
    /// Backends with their number of slots (the weight the programs give
    /// them), in address order.
    Forward {
        sched: &'static str,
        backends: Vec<(SocketAddr, u32)>,
    },
    Reject,
    Drop,
}

/// One frontend of the maps, for `kproxy list` (the caller adds the
/// Service's name from its state, by frontend address and protocol).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub frontend: SocketAddr,
    /// `TCP`, `UDP`, `SCTP`.
    pub protocol: String,
    pub flags: u32,
    /// Seconds of session affinity, 0 for none.
    pub affinity_timeout: u32,
    pub internal: ListedSelection,
    pub external: ListedSelection,
}

/// Every frontend of `c` (port-0 entries aside), in address order.
pub fn listing(c: &Contents) -> Vec<Listed> {
    let scope = |s: &Selection| match s.verdict {
        verdict::FORWARD => {
            let mut counts: BTreeMap<SocketAddr, u32> = BTreeMap::new();
            for slot in 0..u32::from(s.count) {
                if let Some(b) = c.backends.get(&BackendKey { group: s.group, slot }) {
                    *counts.entry(SocketAddr::new(ip_of(b.addr), u16::from_be(b.port))).or_default() += 1;
                }
            }
            ListedSelection::Forward { sched: sched_name(s.sched), backends: counts.into_iter().collect() }
        }
        verdict::DROP => ListedSelection::Drop,
        _ => ListedSelection::Reject,
    };
    let mut rows: Vec<(FrontendKey, Listed)> = c
        .frontends
        .iter()
        .filter(|(_, f)| f.flags & flags::OWNED_ADDRESS == 0)
        .map(|(k, f)| {
            let row = Listed {
                frontend: SocketAddr::new(ip_of(k.addr), u16::from_be(k.port)),
                protocol: proto_name(k.proto),
                flags: f.flags,
                affinity_timeout: f.affinity_timeout,
                internal: scope(&f.internal),
                external: scope(&f.external),
            };
            (*k, row)
        })
        .collect();
    rows.sort_by_key(|(k, _)| display_order(k));
    rows.into_iter().map(|(_, row)| row).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::{Frontend, addr16};

    #[test]
    fn a_listing_counts_slots_per_backend_and_skips_owned_addresses() {
        let mut c = Contents::default();
        let backend = |ip: &str| Backend { addr: addr16(ip.parse().expect("ip")), port: 8080u16.to_be(), pad: 0 };
        for (slot, ip) in ["10.0.0.2", "10.0.0.1", "10.0.0.2"].into_iter().enumerate() {
            c.backends.insert(BackendKey { group: 1, slot: slot as u32 }, backend(ip));
        }
        let forward = Selection { group: 1, count: 3, verdict: verdict::FORWARD, sched: sched::RR };
        let drop = Selection { verdict: verdict::DROP, ..Selection::default() };
        let key = crate::desire::frontend_key("10.96.0.1".parse().expect("ip"), kproxy_model::Protocol::Tcp, 80);
        let f = Frontend { internal: forward, external: drop, id: 1, flags: flags::EXTERNAL, ..Frontend::default() };
        c.frontends.insert(key, f);
        let owned = Frontend { flags: flags::OWNED_ADDRESS, ..Frontend::default() };
        c.frontends.insert(crate::desire::owned_key(key.addr), owned);
        let rows = listing(&c);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].frontend.to_string(), "10.96.0.1:80");
        let want = vec![("10.0.0.1:8080".parse().expect("addr"), 1), ("10.0.0.2:8080".parse().expect("addr"), 2)];
        assert_eq!(rows[0].internal, ListedSelection::Forward { sched: "rr", backends: want });
        assert_eq!(rows[0].external, ListedSelection::Drop);
    }
}
