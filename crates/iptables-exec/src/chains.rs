//! Listing the chains of iptables tables: over netlink with the nft
//! backend, whose tables are nf_tables tables of the same names
//! (`ip nat`, `ip6 filter`, ...), and from `*-save` with the legacy one,
//! whose tables only its tools can read.
//!
//! With 10,000 services `nat` holds over 100,000 chains, which
//! `iptables-nft-save` takes seconds to print; the netlink dump of the
//! same chains takes a fraction of that.

use std::collections::HashMap;

use kproxy_model::IpFamily;

use crate::save::chains;
use crate::{Backend, Iptables, IptablesError, Table};

impl Iptables {
    /// The chain names of each of `tables` in `family`: every table asked
    /// for is a key, with no chains if the table does not exist.
    ///
    /// Built-in chains are included when they exist. Note that they differ
    /// between backends: `*-save` always prints a table's built-in chains,
    /// while nf_tables has only those iptables-nft made (1.8.9 and later
    /// make one when a rule needs it). Callers that only look at their own
    /// chains (`KUBE-*`) see no difference.
    ///
    /// The nft backend's dump runs on a blocking thread of the runtime:
    /// like the tools, it lists the network namespace of the runtime's
    /// threads.
    pub async fn chains(
        &self,
        family: IpFamily,
        tables: &[Table],
    ) -> Result<HashMap<Table, Vec<String>>, IptablesError> {
        match self.backend() {
            Backend::Nft => nft_chains(family, tables).await,
            // The whole dump: the legacy tools create a table they are
            // asked to dump.
            Backend::Legacy => Ok(saved_chains(&self.save_outline(family, None).await?.text, tables)),
        }
    }
}

async fn nft_chains(family: IpFamily, tables: &[Table]) -> Result<HashMap<Table, Vec<String>>, IptablesError> {
    let names: Vec<&'static str> = tables.iter().map(|t| t.as_str()).collect();
    let listed = tokio::task::spawn_blocking(move || kproxy_netlink::nft::chain_names_by_table(family, &names))
        .await
        .map_err(IptablesError::ListTask)?
        .map_err(IptablesError::ListChains)?;
    let of = |table: &Table| listed.get(table.as_str()).cloned().unwrap_or_default();
    Ok(tables.iter().map(|t| (*t, of(t))).collect())
}

/// The chains `dump` declares in each of `tables`.
fn saved_chains(dump: &str, tables: &[Table]) -> HashMap<Table, Vec<String>> {
    let mut out: HashMap<Table, Vec<String>> = tables.iter().map(|t| (*t, Vec::new())).collect();
    for declared in chains(dump) {
        if let Some(table) = tables.iter().find(|t| t.as_str() == declared.table) {
            out.entry(*table).or_default().push(declared.chain);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_chains_are_those_of_the_tables_asked_for() {
        let dump = "\
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -j KUBE-SERVICES
COMMIT
";
        let listed = saved_chains(dump, &[Table::Filter, Table::Nat]);
        let want: HashMap<Table, Vec<String>> =
            [(Table::Filter, vec![]), (Table::Nat, vec!["PREROUTING".to_owned(), "KUBE-SERVICES".to_owned()])].into();
        assert_eq!(listed, want);
    }
}
