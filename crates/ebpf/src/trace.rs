//! Walks map contents ([`Contents`], planned or dumped from the kernel)
//! for one new connection, as the programs would, and says what happens
//! with the nftables tracer's [`Fate`] (so a lab can compare the two modes
//! and the kernel with one type).
//!
//! Random and round-robin picks branch over every slot; hashing
//! schedulers pick the one slot the programs would (`kp_hash`). Learned
//! state (affinity, flows) is not known here: a trace is a client's first
//! connection.

use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpNet, Protocol};
pub use kproxy_nftables::trace::{Branch, Fate, Trace};

use crate::desire::{frontend_key, owned_key};
use crate::hash::kp_hash;
use crate::maps::{BackendKey, Contents, Frontend, FrontendKey, Selection, addr16, flags, ip_of, sched, verdict};
use crate::render::{flag_names, key_text, sched_name};

/// Where the connection is seen first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A socket in the programs' cgroup (connect, sendmsg): a pod or the
    /// node. The network namespace cookie is the client for affinity and
    /// hashing.
    Socket { netns_cookie: u64 },
    /// A packet arriving on an interface with the tc program, from `saddr`
    /// (local or not by `kp_local_cidrs`).
    Tc { saddr: IpAddr },
}

/// The connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub origin: Origin,
    pub daddr: IpAddr,
    pub protocol: Protocol,
    pub dport: u16,
}

/// Walks `contents` for `packet`. `service_cidrs` are the companion
/// table's: untranslated traffic to an address there is dropped.
pub fn trace(contents: &Contents, service_cidrs: &[IpNet], packet: &Packet) -> Trace {
    let mut path = Vec::new();
    let key = frontend_key(packet.daddr, packet.protocol, packet.dport);
    let Some(frontend) = contents.frontends.get(&key) else {
        let owned = owned_key(addr16(packet.daddr));
        if contents.frontends.get(&owned).is_some_and(|f| f.flags & flags::OWNED_ADDRESS != 0) {
            path.push(format!("kp_frontends {}: a cluster IP's unserved port: reject", key_text(&owned)));
            let fate = reject(packet, &mut path);
            return one(path, fate);
        }
        let fate = untranslated(packet, service_cidrs, &mut path);
        return one(path, fate);
    };
    path.push(format!("kp_frontends {}: id {}, flags {}", key_text(&key), frontend.id, flag_names(frontend.flags)));
    let (selection, local) = match packet.origin {
        Origin::Socket { .. } => (frontend.internal, true),
        Origin::Tc { saddr } => {
            if frontend.flags & flags::SOURCE_RANGES != 0 && !allowed(contents, frontend.id, saddr) {
                path.push(format!("kp_source_ranges: {saddr} not allowed for frontend {}: drop", frontend.id));
                return one(path, Fate::Drop);
            }
            let local = is_local(contents, saddr);
            (if local { frontend.internal } else { frontend.external }, local)
        }
    };
    let scope = if local { "internal" } else { "external" };
    match selection.verdict {
        verdict::REJECT => {
            path.push(format!("{scope} selection: reject"));
            let fate = reject(packet, &mut path);
            one(path, fate)
        }
        verdict::DROP => {
            path.push(format!("{scope} selection: drop"));
            match packet.origin {
                Origin::Tc { .. } => one(path, Fate::Drop),
                Origin::Socket { .. } => {
                    path.push("socket hook: passed untranslated".into());
                    let fate = untranslated(packet, service_cidrs, &mut path);
                    one(path, fate)
                }
            }
        }
        _ => forward(contents, packet, frontend, selection, local, scope, path),
    }
}

fn one(path: Vec<String>, fate: Fate) -> Trace {
    Trace { branches: vec![Branch { path, fate }] }
}

fn reject(packet: &Packet, path: &mut Vec<String>) -> Fate {
    match packet.origin {
        Origin::Socket { .. } => path.push("socket hook: connect refused (ECONNREFUSED)".into()),
        Origin::Tc { .. } => path.push("tc: reject mark; companion table rejects".into()),
    }
    Fate::Reject
}

/// What the companion table does with traffic no program translated.
fn untranslated(packet: &Packet, service_cidrs: &[IpNet], path: &mut Vec<String>) -> Fate {
    if service_cidrs.iter().any(|n| n.contains(&packet.daddr)) {
        path.push(format!("companion: {} is in a service CIDR and no service owns it: drop", packet.daddr));
        return Fate::Drop;
    }
    Fate::Untouched
}

fn allowed(contents: &Contents, id: u32, saddr: IpAddr) -> bool {
    let addr = addr16(saddr);
    contents
        .source_ranges
        .iter()
        .any(|r| u32::from_be(r.id) == id && prefix_contains(&r.addr, r.prefixlen.saturating_sub(32), &addr))
}

fn is_local(contents: &Contents, saddr: IpAddr) -> bool {
    let addr = addr16(saddr);
    contents.local_cidrs.iter().any(|c| prefix_contains(&c.addr, c.prefixlen, &addr))
}

/// Whether the first `bits` bits of `net` and `addr` agree.
fn prefix_contains(net: &[u8; 16], bits: u32, addr: &[u8; 16]) -> bool {
    let bits = bits.min(128) as usize;
    let (bytes, rest) = (bits / 8, bits % 8);
    if net[..bytes] != addr[..bytes] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        net[bytes] & mask == addr[bytes] & mask
    }
}

/// The slots the program may pick, and the backends they hold.
fn forward(
    contents: &Contents,
    packet: &Packet,
    frontend: &Frontend,
    selection: Selection,
    local: bool,
    scope: &str,
    mut path: Vec<String>,
) -> Trace {
    path.push(format!(
        "{scope} selection: group {}, {} slots, {}",
        selection.group,
        selection.count,
        sched_name(selection.sched)
    ));
    let count = u32::from(selection.count);
    let slots: Vec<u32> = match selection.sched {
        sched::HASH_SRC | sched::HASH_DST if count > 0 => {
            let bytes = match (selection.sched, packet.origin) {
                (sched::HASH_DST, _) => addr16(packet.daddr),
                (_, Origin::Tc { saddr }) => addr16(saddr),
                (_, Origin::Socket { netns_cookie }) => {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&netns_cookie.to_ne_bytes());
                    b
                }
            };
            vec![kp_hash(&bytes) % count]
        }
        _ => (0..count).collect(),
    };
    let mut branches = Vec::new();
    for slot in slots {
        let mut path = path.clone();
        let Some(backend) = contents.backends.get(&BackendKey { group: selection.group, slot }) else {
            path.push(format!("kp_backends {}/{slot}: missing: drop", selection.group));
            branches.push(Branch { path, fate: Fate::Drop });
            continue;
        };
        let endpoint = SocketAddr::new(ip_of(backend.addr), u16::from_be(backend.port));
        path.push(format!("kp_backends {}/{slot}: {endpoint}", selection.group));
        let masquerade = match packet.origin {
            // The connection leaves from the client's own socket: the
            // reply comes straight back, even from itself (hairpin).
            Origin::Socket { .. } => false,
            Origin::Tc { saddr } => {
                let bit = if local { flags::MASQ_INTERNAL } else { flags::MASQ_EXTERNAL };
                frontend.flags & bit != 0 || saddr == endpoint.ip()
            }
        };
        if masquerade {
            path.push("tc: masquerade mark; companion table masquerades".into());
        }
        branches.push(Branch { path, fate: Fate::Dnat { endpoint, masquerade } });
    }
    // One branch per distinct outcome, as the nftables tracer lists them.
    branches.sort_by(|a, b| a.fate.cmp(&b.fate));
    branches.dedup_by(|a, b| a.fate == b.fate);
    Trace { branches }
}

/// The key a trace looks up first, for messages.
pub fn lookup_key(packet: &Packet) -> FrontendKey {
    frontend_key(packet.daddr, packet.protocol, packet.dport)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_on_their_bits_only() {
        let net = addr16("10.244.0.0".parse().expect("ip"));
        let inside = addr16("10.244.7.1".parse().expect("ip"));
        let outside = addr16("10.245.0.1".parse().expect("ip"));
        assert!(prefix_contains(&net, 96 + 16, &inside));
        assert!(!prefix_contains(&net, 96 + 16, &outside));
        assert!(prefix_contains(&net, 96 + 14, &outside));
        assert!(prefix_contains(&net, 0, &outside));
    }
}
