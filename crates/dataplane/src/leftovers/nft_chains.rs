//! Removing another proxy's iptables chains from the nft backend over
//! netlink, with no iptables tool: what the default (distroless) image
//! can do, and faster than the tools at scale (no `iptables-nft-restore`
//! reading the whole table per batch of chains; docs/bench/leftovers.md).
//!
//! iptables-nft keeps its rules as ordinary nf_tables objects: the tables
//! `ip`/`ip6` `filter`, `nat` and `mangle`, user chains as regular chains,
//! `-j CHAIN` as a rule ending in a jump verdict. So, per family, in one
//! transaction: the rules of the built-in chains that jump or go to a
//! doomed chain are deleted by handle, every doomed chain is flushed (which
//! drops the jumps between them), then deleted.
//!
//! A doomed chain that a chain of someone else's (not a built-in chain,
//! not a proxy's) still jumps to is flushed but stays, and is reported.
//! References the listing cannot see (a verdict map, a rule added since)
//! make the kernel refuse that chain's delete, and with it the whole
//! transaction: the chains it refused stay, flushed, and the rest is
//! retried from a fresh listing.

use std::collections::{BTreeMap, BTreeSet};

use kproxy_iptables_exec::Removed;
use kproxy_model::IpFamily;
use kproxy_netlink::nft::{self as netlink, ApplyError, DumpError, ListedRule};
use kproxy_nftables::Op;

/// The built-in chains of the tables a proxy uses, where jumps into its
/// chains live (as iptables-nft names its base chains).
const BUILTIN: [(&str, &[&str]); 3] = [
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
];

/// Transactions tried per family before giving up: each refusal pins the
/// chains the kernel would not delete, so the second normally goes in.
const ATTEMPTS: usize = 3;

/// What went wrong removing the chains of one family.
#[derive(Debug, thiserror::Error)]
pub enum NftChainsError {
    /// Listing the chains or the rules failed (the error names which).
    #[error(transparent)]
    List(#[from] DumpError),
    /// The kernel refused the removal, on the last attempt too.
    #[error("the kernel refused to remove them")]
    Apply(#[from] ApplyError),
}

/// One family's removal: the ops per table (one transaction), and what
/// they remove and leave.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Removal {
    pub ops: Vec<(&'static str, Vec<Op>)>,
    pub removed: Removed,
}

/// Removes, in `family`, every user chain of the filter, nat and mangle
/// tables for which `doomed(table, chain)` holds, with the built-in
/// chains' jumps to them. Doing nothing costs one chain listing. Blocks:
/// run it off the async runtime.
pub fn remove(family: IpFamily, doomed: impl Fn(&str, &str) -> bool) -> Result<Removed, NftChainsError> {
    let tables = BUILTIN.map(|(table, _)| table);
    // Chains the kernel refused to delete, with its reason.
    let mut pinned: BTreeMap<(&'static str, String), String> = BTreeMap::new();
    let mut refused = None;
    for _ in 0..ATTEMPTS {
        let listed = netlink::chain_names_by_table(family, &tables)?;
        let selected = select(&listed, &doomed);
        if selected.is_empty() {
            return Ok(Removed::default());
        }
        let mut rules = BTreeMap::new();
        for (table, chains) in &selected {
            let inspected: Vec<&str> = listed[*table]
                .iter()
                .map(String::as_str)
                .filter(|c| is_builtin(table, c) || (!chains.contains(*c) && !is_proxy_chain(table, c)))
                .collect();
            rules.insert(*table, netlink::rules(family, table, &inspected)?);
        }
        let removal = plan(&selected, &rules, &pinned);
        match netlink::apply(&netlink::encode_tables(family, &removal.ops, 1)) {
            Ok(()) => return Ok(removal.removed),
            Err(ApplyError::Rejected(errors)) => {
                for error in &errors {
                    let Some((ti, oi)) = error.origin else { continue };
                    if let Some((table, ops)) = removal.ops.get(ti)
                        && let Some(Op::DeleteChain(chain)) = ops.get(oi)
                    {
                        pinned.insert((*table, chain.clone()), format!("the kernel refused: {}", error.reason()));
                    }
                }
                refused = Some(ApplyError::Rejected(errors));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(refused.expect("every attempt ends in a refusal or a return").into())
}

fn is_builtin(table: &str, chain: &str) -> bool {
    BUILTIN.iter().any(|(t, chains)| *t == table && chains.contains(&chain))
}

/// A chain some proxy makes: its rules are not someone else's reference
/// (the running iptables mode's own chains were just rewritten by its
/// full sync and jump to none of the IPVS mode's).
fn is_proxy_chain(table: &str, chain: &str) -> bool {
    kproxy_iptables::names::is_proxy_chain(table, chain)
}

/// The doomed user chains of each table, by name; tables with none are
/// left out.
fn select(
    listed: &BTreeMap<String, Vec<String>>,
    doomed: &impl Fn(&str, &str) -> bool,
) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for (table, _) in BUILTIN {
        let chains: BTreeSet<String> = listed
            .get(table)
            .into_iter()
            .flatten()
            .filter(|c| !is_builtin(table, c) && doomed(table, c))
            .cloned()
            .collect();
        if !chains.is_empty() {
            out.insert(table, chains);
        }
    }
    out
}

/// The transaction removing `selected`, given the `rules` of each table's
/// inspected chains (built-in ones and others' chains) and the chains the
/// kernel refused to delete before (`pinned`). Every doomed chain is
/// flushed; one still jumped to from another's chain, or pinned, stays.
pub(crate) fn plan(
    selected: &BTreeMap<&'static str, BTreeSet<String>>,
    rules: &BTreeMap<&'static str, Vec<ListedRule>>,
    pinned: &BTreeMap<(&'static str, String), String>,
) -> Removal {
    let mut removal = Removal::default();
    for (table, doomed) in selected {
        let mut ops = Vec::new();
        let mut kept: BTreeMap<&str, String> = BTreeMap::new();
        for rule in rules.get(table).into_iter().flatten() {
            let Some(target) = rule.target().filter(|t| doomed.contains(*t)) else { continue };
            if is_builtin(table, &rule.chain) {
                ops.push(Op::DeleteRule { chain: rule.chain.clone(), handle: rule.handle });
                removal.removed.cleaned.jumps += 1;
            } else {
                kept.entry(target).or_insert_with(|| format!("chain {} jumps to it", rule.chain));
            }
        }
        ops.extend(doomed.iter().cloned().map(Op::FlushChain));
        for chain in doomed {
            let reason = kept.get(chain.as_str()).or_else(|| pinned.get(&(*table, chain.clone())));
            match reason {
                Some(reason) => removal.removed.kept.push((table.to_string(), chain.clone(), reason.clone())),
                None => {
                    ops.push(Op::DeleteChain(chain.clone()));
                    removal.removed.cleaned.chains.push((table.to_string(), chain.clone()));
                }
            }
        }
        removal.ops.push((table, ops));
    }
    removal
}

#[cfg(test)]
mod tests;
