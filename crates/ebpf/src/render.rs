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
