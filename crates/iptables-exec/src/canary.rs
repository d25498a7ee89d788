//! The canary chains: an empty `KUBE-PROXY-CANARY` chain in the mangle,
//! nat and filter tables, as upstream kube-proxy keeps. A firewall reload
//! (`iptables -F; iptables -X`, firewalld) deletes them with kproxy's own
//! chains, so their absence means a full sync is due.

use kproxy_model::IpFamily;

use crate::{Iptables, IptablesError, Table};

/// The canary chain's name, upstream's.
pub const CANARY_CHAIN: &str = "KUBE-PROXY-CANARY";

/// The tables that hold a canary. Mangle comes first: it is the smallest,
/// so the cheapest to list.
const CANARY_TABLES: [Table; 3] = [Table::Mangle, Table::Nat, Table::Filter];

/// `iptables -L` exits with 1 when the chain is absent; other failures
/// (4: the xtables lock or another resource) mean "could not tell".
const STATUS_ABSENT: i32 = 1;

impl Iptables {
    /// Creates the canary chains of `family` (an existing one is kept
    /// empty), in one restore.
    pub async fn ensure_canary(&self, family: IpFamily) -> Result<(), IptablesError> {
        let payload: String =
            CANARY_TABLES.iter().map(|table| format!("*{table}\n:{CANARY_CHAIN} - [0:0]\nCOMMIT\n")).collect();
        self.restore(family, &payload).await
    }

    /// Whether every canary chain of `family` still exists; `false` means
    /// someone flushed the tables and a full sync should rebuild them.
    ///
    /// An error means the check itself failed (the lock was held, the tool
    /// broke): not evidence of a flush, so callers retry later.
    pub async fn canary_present(&self, family: IpFamily) -> Result<bool, IptablesError> {
        for table in CANARY_TABLES {
            let output = self.iptables(family, &["-t", table.as_str(), "-n", "-L", CANARY_CHAIN]).await?;
            match output.status.code() {
                Some(0) => {}
                Some(STATUS_ABSENT) => {
                    tracing::info!(?family, %table, chain = CANARY_CHAIN, "iptables canary is gone");
                    return Ok(false);
                }
                _ => return Err(output.failure()),
            }
        }
        Ok(true)
    }
}
