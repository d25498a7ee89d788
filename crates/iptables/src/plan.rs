//! Plans: one family's `iptables-restore --noflush` payload, full or
//! partial, and the record of what it leaves in the kernel.
//!
//! Every sync computes the whole ruleset (as upstream does); what is sent
//! differs. A full payload declares and rewrites every chain. A partial one
//! declares and rewrites only the chains whose content changed since
//! [`Applied`] (a per-service chain of a changed port, or a dispatch chain
//! such as KUBE-SERVICES whose rules changed) and deletes (`-X`) the
//! per-service chains no longer used. Chains not listed are left alone by
//! `--noflush`, so unchanged services cost nothing in the kernel. Each table
//! is committed atomically by `iptables-restore`; a chain is only deleted in
//! the same commit that rewrites every chain that jumped to it.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use kproxy_model::{IpFamily, ProxyState};

use crate::base::{self, JumpRule};
use crate::claims;
use crate::config::{LocalMatch, PlanConfig};
use crate::names::is_service_chain;
use crate::payload::{Payload, Table, TablePayload};
use crate::port::{Context, port_rules};
use crate::ruleset::{Ruleset, TableRules};

/// What the last successful sync left in one family's tables: a content
/// hash per chain kproxy wrote. Never read back from the kernel; the
/// applier drops it (and plans with `None`) after a failure or when the
/// canary says someone flushed the tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    family: Option<IpFamily>,
    chains: BTreeMap<(Table, String), u64>,
}

impl Applied {
    /// The chains kproxy has written, per table, in name order.
    pub fn chains(&self, table: Table) -> impl Iterator<Item = &str> + '_ {
        self.chains.keys().filter(move |(t, _)| *t == table).map(|(_, c)| c.as_str())
    }

    pub fn chain_count(&self) -> usize {
        self.chains.len()
    }
}

/// A payload, the state it leaves once applied, and what could not be
/// programmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Every kproxy chain (no previous state) or only the changed ones.
    pub full: bool,
    pub payload: Payload,
    /// To be kept by the caller once the payload applied successfully.
    pub applied: Applied,
    /// Jump rules from the built-in chains to ensure (`-C`, else `-I`) on a
    /// full sync; see [`JumpRule`].
    pub jump_rules: Vec<JumpRule>,
    /// Service ports (or settings) that could not be programmed, each with
    /// its name and the reason.
    pub skips: Vec<String>,
}

/// Plans one family: full when `previous` is `None` (or of another
/// family), else partial against it.
pub fn plan(state: &ProxyState, family: IpFamily, config: &PlanConfig, previous: Option<&Applied>) -> Planned {
    let mut skips = Vec::new();
    let node_ips: Vec<IpAddr> =
        state.node.node_port_addresses.iter().copied().filter(|ip| IpFamily::of(ip) == family).collect();
    // Upstream turns localhost node ports off unless the node-port addresses
    // include IPv4 loopback (`ContainsIPv4Loopback`): no KUBE-FIREWALL
    // guard, no route_localnet, without a reason.
    let config = &PlanConfig {
        localhost_node_ports: config.localhost_node_ports && node_ips.iter().any(IpAddr::is_loopback),
        ..config.clone()
    };
    let rules = ruleset(state, family, config, &node_ips, &mut skips);
    let applied = Applied { family: Some(family), chains: hashes(&rules) };
    let previous = previous.filter(|p| p.family == Some(family));
    let payload = match previous {
        None => Payload { filter: whole(&rules.filter), nat: whole(&rules.nat) },
        Some(prev) => Payload {
            filter: changed(&rules, Table::Filter, &applied, prev),
            nat: changed(&rules, Table::Nat, &applied, prev),
        },
    };
    Planned { full: previous.is_none(), payload, applied, jump_rules: base::jump_rules(config, family), skips }
}

/// The whole family's rules.
fn ruleset(
    state: &ProxyState,
    family: IpFamily,
    config: &PlanConfig,
    node_ips: &[IpAddr],
    skips: &mut Vec<String>,
) -> Ruleset {
    let local = LocalMatch::new(&config.local_detector, &state.node, family, skips);
    let cx = Context { config, local: &local, node_ips };
    let mut out = Ruleset::default();
    base::head(config, family, &mut out);
    let owners = claims::owners(state.family(family).service_ports.values());
    for port in state.family(family).service_ports.values() {
        let port = claims::owned(port, &owners, skips);
        // A port is written into a scratch set first so one that cannot be
        // served leaves nothing half-written.
        let mut scratch = Ruleset::default();
        match port_rules(&port, &cx, &mut scratch) {
            Ok(()) => merge(&mut out, scratch),
            Err(reason) => skips.push(reason),
        }
    }
    base::tail(config, family, node_ips, &mut out, skips);
    out
}

fn merge(into: &mut Ruleset, from: Ruleset) {
    for (dst, mut src) in [(&mut into.filter, from.filter), (&mut into.nat, from.nat)] {
        for chain in src.order {
            dst.declare(&chain);
            let rules = src.rules.remove(&chain).unwrap_or_default();
            dst.rules.get_mut(&chain).expect("declared just above").extend(rules);
        }
    }
}

fn hashes(rules: &Ruleset) -> BTreeMap<(Table, String), u64> {
    let mut out = BTreeMap::new();
    for table in [Table::Filter, Table::Nat] {
        let t = rules.table(table);
        for chain in &t.order {
            let mut h = DefaultHasher::new();
            t.rules[chain].hash(&mut h);
            out.insert((table, chain.clone()), h.finish());
        }
    }
    out
}

/// Every chain declared and refilled.
fn whole(t: &TableRules) -> TablePayload {
    let rules = t.order.iter().flat_map(|c| t.rules[c].iter().cloned()).collect();
    TablePayload { chains: t.order.clone(), rules, deleted: Vec::new() }
}

/// Only chains whose content differs from `prev`, plus deletions of the
/// per-service chains `now` no longer has.
fn changed(rules: &Ruleset, table: Table, now: &Applied, prev: &Applied) -> TablePayload {
    let t = rules.table(table);
    let mut out = TablePayload::default();
    for chain in &t.order {
        let key = (table, chain.clone());
        if prev.chains.get(&key) != now.chains.get(&key) {
            out.chains.push(chain.clone());
            out.rules.extend(t.rules[chain].iter().cloned());
        }
    }
    for (tbl, chain) in prev.chains.keys() {
        if *tbl == table && !now.chains.contains_key(&(table, chain.clone())) {
            if is_service_chain(chain) {
                out.deleted.push(chain.clone());
            } else {
                // A fixed chain kproxy stopped using (KUBE-FIREWALL after
                // localhost node ports were turned off): built-in chains
                // may still jump to it, so it is emptied, not deleted.
                out.chains.push(chain.clone());
            }
        }
    }
    out
}

/// Every chain kproxy may own in `table`, for cleanup: the fixed ones by
/// name; per-service chains are recognised by [`is_service_chain`].
pub fn fixed_chains(table: Table) -> &'static [&'static str] {
    use crate::names::{KUBE_FIREWALL, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_SERVICES};
    match table {
        Table::Filter => &[
            KUBE_SERVICES,
            crate::names::KUBE_EXTERNAL_SERVICES,
            crate::names::KUBE_FORWARD,
            KUBE_NODEPORTS,
            crate::names::KUBE_PROXY_FIREWALL,
            KUBE_FIREWALL,
        ],
        Table::Nat => &[KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ],
    }
}

/// The payload that removes every kproxy chain among `existing` (chain
/// names per table, as `iptables-save` lists them); delete the
/// [`JumpRule`]s first (`iptables -D`), or the fixed chains stay referenced.
/// Also what a full sync after a restart sends to drop stale per-service
/// chains: pass `keep` to spare the chains a plan still uses.
pub fn cleanup(existing: &HashMap<Table, Vec<String>>, keep: Option<&Applied>) -> Payload {
    let mut payload = Payload::default();
    for table in [Table::Filter, Table::Nat] {
        let part = match table {
            Table::Filter => &mut payload.filter,
            Table::Nat => &mut payload.nat,
        };
        let mut names: Vec<&String> = existing.get(&table).map(|v| v.iter().collect()).unwrap_or_default();
        names.sort();
        names.dedup();
        for chain in names {
            let ours = is_service_chain(chain) || (keep.is_none() && fixed_chains(table).contains(&chain.as_str()));
            let kept = keep.is_some_and(|k| k.chains.contains_key(&(table, chain.clone())));
            if ours && !kept {
                part.deleted.push(chain.clone());
            }
        }
    }
    payload
}
