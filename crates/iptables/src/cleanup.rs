//! Deleting kproxy's chains: what a `kproxy cleanup` removes, and the
//! stale per-service chains of an earlier run that a full sync deletes.

use std::collections::{HashMap, HashSet};

use crate::names::is_service_chain;
use crate::payload::{Payload, Table};
use crate::plan::Applied;

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
    let kept: HashSet<(Table, &str)> = keep
        .map(|k| [Table::Filter, Table::Nat].into_iter().flat_map(|t| k.chains(t).map(move |c| (t, c))).collect())
        .unwrap_or_default();
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
            if ours && !kept.contains(&(table, chain.as_str())) {
                part.deleted.push(chain.clone());
            }
        }
    }
    payload
}
