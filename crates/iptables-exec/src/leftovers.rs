//! Removing chains another proxy left: the chains a caller's predicate
//! selects, with every rule of the built-in chains that jumps to them.
//!
//! Unlike [`Iptables::cleanup`], which deletes jump rules exactly as kproxy
//! writes them, this finds the jump rules in the kernel (`iptables -S` of
//! each built-in chain): kube-proxy's rules differ between its versions and
//! modes (with or without `--ctstate NEW`, other comments), and a stale
//! jump left behind would keep the chain from being deleted. Only rules
//! whose target is a selected chain are touched.

use std::collections::{BTreeMap, BTreeSet};

use kproxy_model::IpFamily;

use crate::{Backend, Cleaned, Iptables, IptablesError, Table};

/// The built-in chains of the tables a proxy uses, where jumps into its
/// chains live.
const BUILTIN: [(Table, &[&str]); 3] = [
    (Table::Filter, &["INPUT", "FORWARD", "OUTPUT"]),
    (Table::Nat, &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
    (Table::Mangle, &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
];

/// Chains per restore with the nft backend, whose restore is quadratic in
/// the chains one input names (see the iptables mode's
/// `NFT_CHAINS_PER_RESTORE`); legacy takes each table in one restore.
const NFT_CHAINS_PER_RESTORE: usize = 2500;

/// What [`Iptables::remove_chains`] removed, and what it had to leave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    /// Jump rules and chains deleted.
    pub cleaned: Cleaned,
    /// Chains that could not be deleted (another rule still jumps to
    /// them), each with the tool's reason.
    pub kept: Vec<(String, String, String)>,
}

impl Iptables {
    /// Deletes, in `family`, every user chain of the filter, nat and
    /// mangle tables for which `doomed(table, chain)` holds, after deleting
    /// each rule of a built-in chain that jumps or goes to one of them.
    ///
    /// Doing nothing costs one chain listing: when no chain is selected,
    /// no tool runs.
    pub async fn remove_chains(
        &self,
        family: IpFamily,
        doomed: impl Fn(Table, &str) -> bool,
    ) -> Result<Removed, IptablesError> {
        let tables = BUILTIN.map(|(table, _)| table);
        let listed = self.chains(family, &tables).await?;
        let mut selected: BTreeMap<Table, BTreeSet<String>> = BTreeMap::new();
        for (table, builtin) in BUILTIN {
            let chains = listed.get(&table).map(Vec::as_slice).unwrap_or_default();
            let mine: BTreeSet<String> =
                chains.iter().filter(|c| !builtin.contains(&c.as_str()) && doomed(table, c)).cloned().collect();
            if !mine.is_empty() {
                selected.insert(table, mine);
            }
        }
        let mut removed = Removed::default();
        for (table, chains) in &selected {
            let builtin = BUILTIN.iter().find(|(t, _)| t == table).map(|(_, b)| *b).unwrap_or_default();
            for chain in builtin {
                removed.cleaned.jumps += self.delete_jumps(family, *table, chain, chains).await?;
            }
        }
        for (table, chains) in selected {
            self.delete_chains(family, table, &chains.into_iter().collect::<Vec<_>>(), &mut removed).await?;
        }
        Ok(removed)
    }

    /// Deletes the rules of built-in `chain` whose target is in `targets`.
    async fn delete_jumps(
        &self,
        family: IpFamily,
        table: Table,
        chain: &str,
        targets: &BTreeSet<String>,
    ) -> Result<usize, IptablesError> {
        let output = self.iptables(family, &["-t", table.as_str(), "-S", chain]).await?;
        if !output.status.success() {
            // The nft backend makes base chains only when a rule needs
            // them: a missing one holds no jump.
            return Ok(0);
        }
        let mut deleted = 0;
        for line in output.stdout.lines() {
            let Some(rule) = line.strip_prefix(&format!("-A {chain} ")) else { continue };
            let words = split_words(rule);
            if !target_of(&words).is_some_and(|t| targets.contains(t)) {
                continue;
            }
            let mut args = vec!["-t", table.as_str(), "-D", chain];
            args.extend(words.iter().map(String::as_str));
            self.iptables(family, &args).await?.success()?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Flushes every chain of `chains`, then deletes them. Flushing first
    /// removes the jumps between them, so the deletes can go in batches;
    /// a batch the tool refuses (a rule elsewhere still jumps to one of its
    /// chains) is retried chain by chain, and what still fails is kept.
    async fn delete_chains(
        &self,
        family: IpFamily,
        table: Table,
        chains: &[String],
        removed: &mut Removed,
    ) -> Result<(), IptablesError> {
        let size = match self.backend() {
            Backend::Nft => NFT_CHAINS_PER_RESTORE,
            Backend::Legacy => chains.len().max(1),
        };
        for batch in chains.chunks(size) {
            self.restore(family, &payload(table, batch, false)).await?;
        }
        for batch in chains.chunks(size) {
            if self.restore(family, &payload(table, batch, true)).await.is_ok() {
                removed.cleaned.chains.extend(batch.iter().map(|c| (table.as_str().to_owned(), c.clone())));
                continue;
            }
            for chain in batch {
                match self.restore(family, &payload(table, std::slice::from_ref(chain), true)).await {
                    Ok(()) => removed.cleaned.chains.push((table.as_str().to_owned(), chain.clone())),
                    Err(e) => removed.kept.push((table.as_str().to_owned(), chain.clone(), e.to_string())),
                }
            }
        }
        Ok(())
    }
}

/// A restore that declares (flushes) `chains` and, with `delete`, deletes them.
fn payload(table: Table, chains: &[String], delete: bool) -> String {
    let mut text = format!("*{}\n", table.as_str());
    for chain in chains {
        text.push_str(&format!(":{chain} - [0:0]\n"));
    }
    if delete {
        for chain in chains {
            text.push_str(&format!("-X {chain}\n"));
        }
    }
    text.push_str("COMMIT\n");
    text
}

/// The chain a rule jumps or goes to.
fn target_of(words: &[String]) -> Option<&str> {
    let at = words.iter().position(|w| matches!(w.as_str(), "-j" | "--jump" | "-g" | "--goto"))?;
    words.get(at + 1).map(String::as_str)
}

/// A rule as `iptables -S` prints it, split into arguments: words
/// separated by spaces, double-quoted ones (comments) with `\"` and `\\`
/// escapes, as the tools quote them.
pub(crate) fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ' ').is_some() {}
        let Some(&first) = chars.peek() else { return words };
        let mut word = String::new();
        if first == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => word.extend(chars.next()),
                    '"' => break,
                    other => word.push(other),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ' ') {
                word.push(c);
            }
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_comments_are_one_argument_with_their_escapes_undone() {
        let words = split_words(r#"-m comment --comment "kubernetes \"service\" portals" -j KUBE-SERVICES"#);
        assert_eq!(words, ["-m", "comment", "--comment", "kubernetes \"service\" portals", "-j", "KUBE-SERVICES"]);
        assert_eq!(target_of(&words), Some("KUBE-SERVICES"));
        assert_eq!(split_words("-s 10.0.0.0/8  -g KUBE-X"), ["-s", "10.0.0.0/8", "-g", "KUBE-X"]);
        assert_eq!(target_of(&split_words("-s 10.0.0.0/8 -g KUBE-X")), Some("KUBE-X"));
        assert_eq!(target_of(&split_words("-i lo -j ACCEPT")), Some("ACCEPT"));
    }

    #[test]
    fn a_deleting_payload_flushes_then_deletes() {
        let chains = ["KUBE-SEP-A".to_owned(), "KUBE-SVC-B".to_owned()];
        assert_eq!(
            payload(Table::Nat, &chains, true),
            "*nat\n:KUBE-SEP-A - [0:0]\n:KUBE-SVC-B - [0:0]\n-X KUBE-SEP-A\n-X KUBE-SVC-B\nCOMMIT\n"
        );
        assert_eq!(payload(Table::Filter, &chains[..1], false), "*filter\n:KUBE-SEP-A - [0:0]\nCOMMIT\n");
    }
}
