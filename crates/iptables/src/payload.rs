//! The typed payload and its `iptables-restore` rendering.
//!
//! Rules are argument vectors, never glued strings: [`Payload::render`] is
//! the one place that joins them into restore syntax (quoting arguments with
//! spaces, as upstream quotes its comments).

use std::fmt::Write;

use crate::names::is_service_chain;

/// The two tables kproxy writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Filter,
    Nat,
}

impl Table {
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }
}

/// One `-A CHAIN args...` line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub chain: String,
    pub args: Vec<String>,
}

impl Rule {
    pub fn new(chain: &str) -> Self {
        Self { chain: chain.to_owned(), args: Vec::with_capacity(16) }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// `-m comment --comment TEXT`.
    pub fn comment(self, text: impl Into<String>) -> Self {
        self.args(["-m", "comment", "--comment"]).arg(text)
    }

    /// `-m PROTO -p PROTO`, as upstream writes it.
    pub fn proto(self, protocol: &str) -> Self {
        self.args(["-m", protocol, "-p", protocol])
    }

    pub fn dst(self, addr: impl ToString) -> Self {
        self.arg("-d").arg(addr.to_string())
    }

    pub fn src(self, addr: impl ToString) -> Self {
        self.arg("-s").arg(addr.to_string())
    }

    pub fn dport(self, port: u16) -> Self {
        self.arg("--dport").arg(port.to_string())
    }

    pub fn jump(self, target: &str) -> Self {
        self.arg("-j").arg(target)
    }
}

/// What one table's part of the payload does: chains listed are created or
/// flushed (`:CHAIN - [0:0]`; `--noflush` leaves unlisted chains alone),
/// then refilled with `rules`; `deleted` chains are flushed and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePayload {
    pub chains: Vec<String>,
    pub rules: Vec<Rule>,
    pub deleted: Vec<String>,
}

impl TablePayload {
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.deleted.is_empty()
    }
}

/// One `iptables-restore --noflush` input for one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    pub filter: TablePayload,
    pub nat: TablePayload,
}

impl Payload {
    /// Nothing to send: the applier may skip running `iptables-restore`.
    pub fn is_empty(&self) -> bool {
        self.filter.is_empty() && self.nat.is_empty()
    }

    /// The `iptables-restore` input, filter first as upstream writes it; a
    /// table with nothing to do is left out, and an empty payload renders as
    /// the empty string.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (table, part) in [(Table::Filter, &self.filter), (Table::Nat, &self.nat)] {
            if part.is_empty() {
                continue;
            }
            out.push('*');
            out.push_str(table.as_str());
            out.push('\n');
            for chain in part.chains.iter().chain(&part.deleted) {
                let _ = writeln!(out, ":{chain} - [0:0]");
            }
            for rule in &part.rules {
                render_rule(&mut out, rule);
            }
            for chain in &part.deleted {
                let _ = writeln!(out, "-X {chain}");
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

impl Payload {
    /// The chains this payload declares, deletions included.
    pub fn chain_count(&self) -> usize {
        [&self.filter, &self.nat].iter().map(|t| t.chains.len() + t.deleted.len()).sum()
    }

    /// The payload as several restores of about `max_chains` declared chains
    /// each, in the order they must be sent; one restore when it is small.
    ///
    /// For `iptables-nft-restore`, whose cost grows with the square of the
    /// chains in one transaction (its per-command cache request keeps a
    /// sorted list of every chain named). Each restore only jumps to chains
    /// that exist once the restores before it committed:
    /// - first, the fixed chains that jump to no chain of this payload
    ///   (KUBE-MARK-MASQ, KUBE-POSTROUTING, filter's verdict chains);
    /// - then the per-service chains, a port's chains always in one restore
    ///   (the chains a chain jumps to travel with it);
    /// - last, the fixed chains that jump to per-service chains (the
    ///   dispatch chains KUBE-SERVICES and KUBE-NODEPORTS) and every
    ///   deletion, so traffic switches to the new per-service chains in one
    ///   commit and a chain is deleted only once nothing jumps to it.
    ///
    /// When a per-service chain jumps to a fixed chain that must go last
    /// (never the case for kproxy's own payloads), the payload is not split.
    pub fn split(&self, max_chains: usize) -> Vec<Payload> {
        if self.chain_count() <= max_chains {
            return vec![self.clone()];
        }
        let (Some(filter), Some(nat)) = (Split::of(&self.filter), Split::of(&self.nat)) else {
            return vec![self.clone()];
        };
        let mut out = vec![Payload { filter: filter.first(), nat: nat.first() }];
        for (table, split) in [(Table::Filter, &filter), (Table::Nat, &nat)] {
            let mut chunk = TablePayload::default();
            for group in &split.groups {
                if !chunk.chains.is_empty() && chunk.chains.len() + group.len() > max_chains {
                    out.push(Payload::one(table, std::mem::take(&mut chunk)));
                }
                for chain in group {
                    chunk.chains.push((*chain).to_owned());
                    chunk.rules.extend(split.rules_of(chain).cloned());
                }
            }
            if !chunk.chains.is_empty() {
                out.push(Payload::one(table, chunk));
            }
        }
        out.push(Payload { filter: filter.last(), nat: nat.last() });
        out.retain(|p| !p.is_empty());
        out
    }

    fn one(table: Table, part: TablePayload) -> Payload {
        match table {
            Table::Filter => Payload { filter: part, ..Payload::default() },
            Table::Nat => Payload { nat: part, ..Payload::default() },
        }
    }
}

/// One table's chains sorted for [`Payload::split`].
struct Split<'a> {
    part: &'a TablePayload,
    /// Rule indexes per chain, in payload order.
    rules: std::collections::HashMap<&'a str, Vec<usize>>,
    /// Fixed chains that jump to no chain of the payload.
    leaves: Vec<&'a str>,
    /// Fixed chains that do.
    dispatch: Vec<&'a str>,
    /// Per-service chains, connected by jumps, in payload order.
    groups: Vec<Vec<&'a str>>,
}

impl<'a> Split<'a> {
    fn of(part: &'a TablePayload) -> Option<Self> {
        use std::collections::HashMap;
        let declared: HashMap<&str, usize> = part.chains.iter().enumerate().map(|(i, c)| (c.as_str(), i)).collect();
        let mut rules: HashMap<&str, Vec<usize>> = HashMap::new();
        // Union-find over chain indexes: a chain and what it jumps to.
        let mut parent: Vec<usize> = (0..part.chains.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut jumps_to_declared = vec![false; part.chains.len()];
        let mut jumps_to_fixed = Vec::new();
        for (n, rule) in part.rules.iter().enumerate() {
            rules.entry(rule.chain.as_str()).or_default().push(n);
            let (Some(&from), Some(&to)) =
                (declared.get(rule.chain.as_str()), jump_target(rule).and_then(|t| declared.get(t)))
            else {
                continue;
            };
            jumps_to_declared[from] = true;
            match (is_service_chain(&rule.chain), is_service_chain(&part.chains[to])) {
                (true, true) => {
                    let (a, b) = (root(&mut parent, from), root(&mut parent, to));
                    parent[a] = b;
                }
                (true, false) => jumps_to_fixed.push(to),
                _ => {}
            }
        }
        let (mut leaves, mut dispatch, mut groups) = (Vec::new(), Vec::new(), Vec::new());
        let mut group_of: HashMap<usize, usize> = HashMap::new();
        for (i, chain) in part.chains.iter().enumerate() {
            if !is_service_chain(chain) {
                if jumps_to_declared[i] {
                    dispatch.push(chain.as_str())
                } else {
                    leaves.push(chain.as_str())
                }
                continue;
            }
            let r = root(&mut parent, i);
            let g = *group_of.entry(r).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(chain.as_str());
        }
        // A per-service chain jumping to a dispatch chain would run before
        // that chain exists.
        if jumps_to_fixed.iter().any(|&to| jumps_to_declared[to]) {
            return None;
        }
        Some(Self { part, rules, leaves, dispatch, groups })
    }

    fn rules_of(&self, chain: &str) -> impl Iterator<Item = &'a Rule> + '_ {
        self.rules.get(chain).into_iter().flatten().map(|&n| &self.part.rules[n])
    }

    fn fixed(&self, chains: &[&str]) -> TablePayload {
        let mut out = TablePayload::default();
        for chain in chains {
            out.chains.push((*chain).to_owned());
            out.rules.extend(self.rules_of(chain).cloned());
        }
        out
    }

    fn first(&self) -> TablePayload {
        self.fixed(&self.leaves)
    }

    fn last(&self) -> TablePayload {
        TablePayload { deleted: self.part.deleted.clone(), ..self.fixed(&self.dispatch) }
    }
}

/// The chain a rule jumps or goes to (`-j X` / `-g X`), if any.
pub(crate) fn jump_target(rule: &Rule) -> Option<&str> {
    let at = rule.args.iter().position(|a| a == "-j" || a == "-g")?;
    rule.args.get(at + 1).map(String::as_str)
}

/// `-A CHAIN args`, each argument quoted when it holds a space.
pub fn render_rule(out: &mut String, rule: &Rule) {
    out.push_str("-A ");
    out.push_str(&rule.chain);
    for arg in &rule.args {
        out.push(' ');
        push_arg(out, arg);
    }
    out.push('\n');
}

/// One argument in restore syntax; also what an applier passes to
/// `iptables -C/-I` unquoted.
fn push_arg(out: &mut String, arg: &str) {
    if arg.contains(' ') || arg.is_empty() {
        out.push('"');
        out.push_str(arg);
        out.push('"');
    } else {
        out.push_str(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_with_spaces_are_quoted_and_others_are_not() {
        let mut out = String::new();
        render_rule(
            &mut out,
            &Rule::new("KUBE-SEP-X").comment("ns1/svc1:p80").src("10.180.0.1").jump("KUBE-MARK-MASQ"),
        );
        render_rule(&mut out, &Rule::new("KUBE-SERVICES").comment("ns1/svc1:p80 cluster IP").jump("X"));
        assert_eq!(
            out,
            "-A KUBE-SEP-X -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ\n\
             -A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -j X\n"
        );
    }

    #[test]
    fn an_empty_payload_renders_nothing() {
        assert_eq!(Payload::default().render(), "");
    }
}
