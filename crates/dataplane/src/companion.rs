//! A mode's small companion nftables table (the IPVS mode's `kproxy-ipvs`,
//! the ebpf mode's `kproxy-ebpf`), in both families: what was last written,
//! and writing a new version in one transaction.

use kproxy_model::IpFamily;
use kproxy_netlink::nft::{self as netlink, IntervalSets};
use kproxy_nftables::{FamilyPlan, Op, Table};

use crate::nftables::{NftablesError, refused};

/// The companion table `name` as this process last wrote it.
pub(crate) struct Companion {
    name: &'static str,
    /// Per family (`IpFamily::ALL`'s order); `None`: unknown, rewrite it.
    tables: [Option<Table>; 2],
    interval_sets: IntervalSets,
    seq: u32,
}

impl Companion {
    pub fn new(name: &'static str) -> Self {
        // Distinct from any earlier process's numbers, for readable traces.
        let seq =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as u32).unwrap_or(1);
        Self { name, tables: [None, None], interval_sets: IntervalSets::default(), seq }
    }

    /// Brings each family's table to `tables` in one transaction, with the
    /// operations `ops` gives from what was last written (`None`: unknown,
    /// or `rewrite`). A refused transaction forgets what was written, so
    /// the next call rewrites both tables.
    pub async fn sync(
        &mut self,
        tables: Vec<(IpFamily, Table)>,
        rewrite: bool,
        ops: impl Fn(Option<&Table>, &Table) -> Vec<Op>,
    ) -> Result<(), NftablesError> {
        let mut families = Vec::new();
        let mut wanted = Vec::new();
        for (i, (family, table)) in tables.into_iter().enumerate() {
            let last = if rewrite { None } else { self.tables[i].as_ref() };
            families.push(FamilyPlan { family: Some(family), ops: ops(last, &table) });
            wanted.push(table);
        }
        let batch = kproxy_nftables::Plan { full: false, families };
        if !batch.is_empty() {
            let encoded = netlink::encode_table(self.name, &batch, self.seq, &self.interval_sets);
            self.seq = encoded.next_seq().wrapping_add(1);
            let result = tokio::task::spawn_blocking(move || netlink::apply(&encoded))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            if let Err(e) = result {
                self.tables = [None, None];
                self.interval_sets = IntervalSets::default();
                return Err(refused(&batch, e));
            }
            self.interval_sets.applied(&batch);
        }
        let mut wanted = wanted.into_iter();
        self.tables = [wanted.next(), wanted.next()];
        Ok(())
    }
}

/// Deletes the table `name` in both families (missing tables are fine).
pub(crate) async fn delete(name: &'static str) -> Result<(), NftablesError> {
    let families = IpFamily::ALL.map(|f| FamilyPlan { family: Some(f), ops: Table::delete_ops() }).to_vec();
    let plan = kproxy_nftables::Plan { full: true, families };
    let encoded = netlink::encode_table(name, &plan, 1, &IntervalSets::default());
    tokio::task::spawn_blocking(move || netlink::apply(&encoded))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
        .map_err(|e| refused(&plan, e))
}
