//! Removing kproxy's iptables objects and nothing else: the jump rules the
//! caller lists, exactly as specified, then every user chain whose name
//! starts with one of the caller's prefixes.

use std::collections::BTreeMap;

use kproxy_model::IpFamily;

use crate::save::chains;
use crate::{Iptables, IptablesError, Table};

/// `iptables -D` exits with 1 when no such rule (or chain) exists.
const STATUS_ABSENT: i32 = 1;

/// `iptables` exits with 2 on a usage error, such as an unknown target.
const STATUS_USAGE: i32 = 2;

/// A rule could have been added many times (a crashed proxy re-adding it on
/// each start); deleting stops after this many copies so a tool that keeps
/// "succeeding" cannot loop forever.
const MAX_COPIES: usize = 100;

/// A rule in a chain kproxy does not own, e.g. the jump from `PREROUTING` to `KUBE-SERVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpRule {
    pub table: Table,
    /// The chain holding the rule, e.g. `PREROUTING`.
    pub chain: String,
    /// The rule as after `-A <chain>`, one argument per item, e.g.
    /// `["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]`.
    pub spec: Vec<String>,
}

/// What to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Deleted first, every copy of each.
    pub jumps: Vec<JumpRule>,
    /// User chains whose name starts with one of these are flushed and
    /// deleted, in every table. Built-in chains never are.
    pub chain_prefixes: Vec<String>,
}

/// What [`Iptables::cleanup`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Jump rules deleted, counting every copy.
    pub jumps: usize,
    /// Chains deleted, sorted by table and name.
    pub chains: Vec<(String, String)>,
}

impl Iptables {
    /// Deletes `what`'s jump rules, then its chains, in `family`.
    ///
    /// Chains go in one restore per table: declaring a chain flushes it,
    /// so chains that jump to each other can all be deleted together. A
    /// listed chain that a rule elsewhere still jumps to makes that
    /// table's restore fail, with that table left as it was.
    pub async fn cleanup(&self, family: IpFamily, what: &Cleanup) -> Result<Cleaned, IptablesError> {
        // One full dump serves both steps (deleting rules changes no
        // chain). Full, because the legacy tools create a table they are
        // asked to dump.
        let declared = chains(&self.save_outline(family, None).await?.text);
        let mut cleaned = Cleaned::default();
        for jump in &what.jumps {
            let target_exists =
                |target: &str| declared.iter().any(|d| d.table == jump.table.as_str() && d.chain == target);
            cleaned.jumps += self.delete_every_copy(family, jump, target_exists).await?;
        }
        let mut doomed: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in declared {
            if !d.builtin && what.chain_prefixes.iter().any(|p| d.chain.starts_with(p.as_str())) {
                doomed.entry(d.table).or_default().push(d.chain);
            }
        }
        for (table, names) in &mut doomed {
            names.sort();
            let mut payload = format!("*{table}\n");
            names.iter().for_each(|name| payload.push_str(&format!(":{name} - [0:0]\n")));
            names.iter().for_each(|name| payload.push_str(&format!("-X {name}\n")));
            payload.push_str("COMMIT\n");
            self.restore(family, &payload).await?;
            cleaned.chains.extend(names.iter().map(|name| (table.clone(), name.clone())));
        }
        tracing::info!(?family, jumps = cleaned.jumps, chains = cleaned.chains.len(), "removed iptables rules");
        Ok(cleaned)
    }

    /// Makes sure `jump` is in its chain: `-C`, and when absent `-I` (first
    /// in the chain, as upstream). Returns whether it was inserted.
    pub async fn ensure_jump(&self, family: IpFamily, jump: &JumpRule) -> Result<bool, IptablesError> {
        let mut check = vec!["-t", jump.table.as_str(), "-C", jump.chain.as_str()];
        check.extend(jump.spec.iter().map(String::as_str));
        let output = self.iptables(family, &check).await?;
        match output.status.code() {
            Some(0) => return Ok(false),
            Some(STATUS_ABSENT) => {}
            _ => return Err(output.failure()),
        }
        let mut insert = vec!["-t", jump.table.as_str(), "-I", jump.chain.as_str()];
        insert.extend(jump.spec.iter().map(String::as_str));
        self.iptables(family, &insert).await?.success()?;
        Ok(true)
    }

    /// Deletes `jump` until none is left; returns how many were deleted.
    ///
    /// A rule jumping to a chain that does not exist cannot exist either,
    /// but the tools report it as a usage error (status 2, naming the
    /// target) rather than as an absent rule (status 1).
    async fn delete_every_copy(
        &self,
        family: IpFamily,
        jump: &JumpRule,
        target_exists: impl Fn(&str) -> bool,
    ) -> Result<usize, IptablesError> {
        let mut args = vec!["-t", jump.table.as_str(), "-D", jump.chain.as_str()];
        args.extend(jump.spec.iter().map(String::as_str));
        let missing_target = target(&jump.spec).filter(|t| !target_exists(t));
        for deleted in 0..MAX_COPIES {
            let output = self.iptables(family, &args).await?;
            match output.status.code() {
                Some(0) => {}
                Some(STATUS_ABSENT) => return Ok(deleted),
                Some(STATUS_USAGE) if missing_target.is_some_and(|t| output.stderr.contains(t)) => return Ok(deleted),
                _ => return Err(output.failure()),
            }
        }
        Ok(MAX_COPIES)
    }
}

/// The chain or extension a rule spec jumps or goes to (`-j X`, `-g X`).
fn target(spec: &[String]) -> Option<&str> {
    let at = spec.iter().position(|a| matches!(a.as_str(), "-j" | "--jump" | "-g" | "--goto"))?;
    spec.get(at + 1).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_the_argument_after_jump_or_goto() {
        let spec = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(target(&spec("-m comment --comment x -j KUBE-SERVICES")), Some("KUBE-SERVICES"));
        assert_eq!(target(&spec("-g KUBE-NODEPORTS")), Some("KUBE-NODEPORTS"));
        assert_eq!(target(&spec("-m comment --comment x")), None);
    }
}
