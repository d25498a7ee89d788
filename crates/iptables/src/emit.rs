//! Rendering a [`Prepared`] plan: the `iptables-restore` input generated
//! chain by chain from the ports, in bounded chunks, instead of a payload
//! built whole in memory.
//!
//! The summary pass ([`crate::prepare`]) knows which chains to send, their
//! names and how they group; the rules of the per-service chains are
//! generated again here, one port at a time, when their chunk is rendered,
//! and dropped once written. Only the fixed chains sent (KUBE-SERVICES, ...:
//! a few rules per service, not per endpoint) are held as text while the
//! plan lives. The text is byte for byte what [`Payload::render`] gives for
//! [`Prepared::payload`] (and for each part of [`Payload::split`]).

use std::collections::{HashMap, HashSet};

use kproxy_model::{IpFamily, ProxyState, ServicePortName};

use crate::base::JumpRule;
use crate::chunks::Chunks;
use crate::claims::{self, Key};
use crate::payload::{Payload, Rule, Table, TablePayload, jump_target, render_rule};
use crate::plan::{Applied, Planned, rules_in, table_index};
use crate::port::{own_rules, shared_rules};
use crate::ruleset::Ruleset;

/// Text handed out per chunk (about; a port's rules are never cut).
pub const CHUNK_BYTES: usize = 64 * 1024;

/// One family's plan, summarised: what to send, not yet rendered.
pub struct Prepared<'s> {
    pub(crate) state: &'s ProxyState,
    pub(crate) family: IpFamily,
    pub(crate) owners: HashMap<Key, &'s ServicePortName>,
    /// Every kproxy chain (no previous state) or only the changed ones.
    pub full: bool,
    /// To be kept by the caller once the payload applied successfully.
    pub applied: Applied,
    /// See [`Planned::jump_rules`].
    pub jump_rules: Vec<JumpRule>,
    /// See [`Planned::skips`].
    pub skips: Vec<String>,
    /// Service ports whose rules were computed (the rest were reused).
    pub ports_planned: usize,
    pub(crate) head: Ruleset,
    pub(crate) tail: Ruleset,
    /// Per table (filter, nat).
    pub(crate) sends: [Sends; 2],
}

/// What one table's part of the payload sends.
#[derive(Debug, Default)]
pub(crate) struct Sends {
    /// Fixed chains rewritten, in declaration order; emptied ones last.
    pub fixed: Vec<FixedSend>,
    /// Per-service chains rewritten, port by port.
    pub own: Vec<OwnSend>,
    pub deleted: Vec<String>,
    /// Fixed chains the per-service chains sent jump to.
    pub own_targets: HashSet<String>,
}

/// A fixed chain to rewrite, with its rendered rules.
#[derive(Debug)]
pub(crate) struct FixedSend {
    pub name: String,
    pub text: String,
    pub rules: usize,
    /// It jumps to a chain declared in the same payload.
    pub dispatch: bool,
    /// No longer used: declared (flushed) after the per-service chains.
    pub emptied: bool,
}

impl FixedSend {
    pub fn new(name: &str) -> Self {
        Self { name: name.to_owned(), text: String::new(), rules: 0, dispatch: false, emptied: false }
    }
}

/// One port's per-service chains to rewrite.
#[derive(Debug)]
pub(crate) struct OwnSend {
    pub port: ServicePortName,
    /// Indexes into the port's own chain summaries, in payload order.
    pub chains: Vec<u32>,
    /// The group (chains joined by jumps) of each, numbered in order of
    /// first appearance.
    pub groups: Vec<u32>,
}

impl OwnSend {
    fn group_count(&self) -> u32 {
        self.groups.iter().max().map_or(0, |g| g + 1)
    }

    /// The chains of `group` (all with `None`): in group order for a group,
    /// in payload order for all.
    pub(crate) fn chains_of(&self, group: Option<u32>) -> impl Iterator<Item = usize> + '_ {
        self.chains
            .iter()
            .zip(&self.groups)
            .filter(move |(_, g)| group.is_none_or(|w| **g == w))
            .map(|(c, _)| *c as usize)
    }
}

/// One `iptables-restore` run of a plan, in sending order (see
/// [`Payload::split`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restore {
    /// Everything in one restore.
    Whole,
    /// The fixed chains that jump to no chain of the payload.
    Leaves,
    /// Per-service chains of one table: (port send, group) pairs.
    Services { table: Table, groups: Vec<(usize, u32)> },
    /// The fixed chains that jump to chains of the payload, and every
    /// deletion.
    Dispatch,
}

/// Renders the rules of the fixed chains to send (head rules, each port's
/// part, tail rules) into their [`FixedSend::text`], and marks the ones
/// that jump to a chain the payload declares.
pub(crate) fn fixed_content(
    state: &ProxyState,
    family: IpFamily,
    owners: &HashMap<Key, &ServicePortName>,
    applied: &Applied,
    head: &Ruleset,
    tail: &Ruleset,
    sends: &mut [Sends; 2],
) {
    let declared: [HashSet<String>; 2] = [Table::Filter, Table::Nat].map(|table| {
        let part = &sends[table_index(table)];
        let own = part.own.iter().flat_map(|s| {
            let sums = &applied.ports[&s.port].sums;
            s.chains.iter().map(move |&i| sums.own[i as usize].name.to_string())
        });
        part.fixed.iter().map(|f| f.name.clone()).chain(own).collect()
    });
    let wanted: [HashMap<String, usize>; 2] = [0, 1].map(|t| {
        sends[t].fixed.iter().enumerate().filter(|(_, f)| !f.emptied).map(|(i, f)| (f.name.clone(), i)).collect()
    });
    let mut visit = |table: Table, rule: &Rule| {
        let t = table_index(table);
        let Some(&i) = wanted[t].get(&rule.chain) else { return };
        let send = &mut sends[t].fixed[i];
        render_rule(&mut send.text, rule);
        send.rules += 1;
        send.dispatch |= jump_target(rule).is_some_and(|target| declared[t].contains(target));
    };
    if wanted.iter().all(HashMap::is_empty) {
        return;
    }
    walk_fixed(state, family, owners, applied, head, tail, &mut visit);
}

/// Calls `f` with every rule of the fixed chains, chain by chain in the
/// order each chain's rules are written: head, ports, tail.
fn walk_fixed(
    state: &ProxyState,
    family: IpFamily,
    owners: &HashMap<Key, &ServicePortName>,
    applied: &Applied,
    head: &Ruleset,
    tail: &Ruleset,
    f: &mut dyn FnMut(Table, &Rule),
) {
    let each = |set: &Ruleset, f: &mut dyn FnMut(Table, &Rule)| {
        for table in [Table::Filter, Table::Nat] {
            let t = set.table(table);
            for chain in &t.order {
                rules_in(t, chain).iter().for_each(|r| f(table, r));
            }
        }
    };
    each(head, f);
    let cx = applied.inputs.as_ref().expect("a prepared plan has inputs").context();
    let mut scratch = Ruleset::default();
    for port in state.family(family).service_ports.values() {
        let owned = claims::owned(port, owners, &mut Vec::new());
        scratch.clear();
        shared_rules(&owned, &cx, &mut scratch);
        each(&scratch, f);
    }
    each(tail, f);
}

impl<'s> Prepared<'s> {
    /// Also deletes `stale`'s chains (see [`crate::cleanup`]), in the last
    /// restore.
    pub fn delete_also(&mut self, stale: Payload) {
        self.sends[0].deleted.extend(stale.filter.deleted);
        self.sends[1].deleted.extend(stale.nat.deleted);
    }

    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.sends.iter().all(Sends::is_empty)
    }

    /// Chains declared, deletions included.
    pub fn chain_count(&self) -> usize {
        self.sends
            .iter()
            .map(|s| s.fixed.len() + s.own.iter().map(|o| o.chains.len()).sum::<usize>() + s.deleted.len())
            .sum()
    }

    /// The rules the payload writes in filter and nat.
    pub fn written_rules(&self) -> [usize; 2] {
        [0, 1].map(|t| {
            let part = &self.sends[t];
            let own = part.own.iter().flat_map(|s| {
                let sums = &self.applied.ports[&s.port].sums;
                s.chains.iter().map(move |&i| sums.own[i as usize].rules)
            });
            part.fixed.iter().map(|f| f.rules).sum::<usize>() + own.sum::<usize>()
        })
    }

    /// The restores to run, in order, none empty: one, or with
    /// `max_chains` and a payload declaring more, the parts
    /// [`Payload::split`] makes.
    pub fn restores(&self, max_chains: Option<usize>) -> Vec<Restore> {
        if self.is_empty() {
            return Vec::new();
        }
        let Some(max) = max_chains.filter(|&max| self.chain_count() > max) else { return vec![Restore::Whole] };
        // A per-service chain jumping to a dispatch chain would run before
        // that chain exists.
        let unsplittable =
            self.sends.iter().any(|s| s.fixed.iter().any(|f| f.dispatch && s.own_targets.contains(&f.name)));
        if unsplittable {
            return vec![Restore::Whole];
        }
        let mut out = Vec::new();
        if self.sends.iter().any(|s| s.fixed.iter().any(|f| !f.dispatch)) {
            out.push(Restore::Leaves);
        }
        for table in [Table::Filter, Table::Nat] {
            let mut chunk: Vec<(usize, u32)> = Vec::new();
            let mut size = 0;
            for (n, send) in self.sends[table_index(table)].own.iter().enumerate() {
                for group in 0..send.group_count() {
                    let len = send.groups.iter().filter(|g| **g == group).count();
                    if !chunk.is_empty() && size + len > max {
                        out.push(Restore::Services { table, groups: std::mem::take(&mut chunk) });
                        size = 0;
                    }
                    chunk.push((n, group));
                    size += len;
                }
            }
            if !chunk.is_empty() {
                out.push(Restore::Services { table, groups: chunk });
            }
        }
        if self.sends.iter().any(|s| !s.deleted.is_empty() || s.fixed.iter().any(|f| f.dispatch)) {
            out.push(Restore::Dispatch);
        }
        out
    }

    /// `restore`'s text in chunks of about [`CHUNK_BYTES`].
    pub fn chunks<'p>(&'p self, restore: &Restore) -> Chunks<'p, 's> {
        Chunks::new(self, restore)
    }

    /// `restore`'s whole text.
    pub fn render(&self, restore: &Restore) -> String {
        self.chunks(restore).collect()
    }

    /// The whole payload, materialised.
    pub fn payload(&self) -> Payload {
        let mut fixed: [HashMap<&str, Vec<Rule>>; 2] = Default::default();
        let mut keep = |table: Table, rule: &Rule| {
            if self.sends[table_index(table)].fixed.iter().any(|f| f.name == rule.chain) {
                fixed[table_index(table)].entry(self.intern(table, &rule.chain)).or_default().push(rule.clone());
            }
        };
        walk_fixed(self.state, self.family, &self.owners, &self.applied, &self.head, &self.tail, &mut keep);
        let [filter, nat] = [Table::Filter, Table::Nat].map(|table| {
            let part = &self.sends[table_index(table)];
            let mut out = TablePayload::default();
            for f in part.fixed.iter().filter(|f| !f.emptied) {
                out.chains.push(f.name.clone());
                out.rules.extend(fixed[table_index(table)].remove(f.name.as_str()).unwrap_or_default());
            }
            for (n, send) in part.own.iter().enumerate() {
                let rules = self.own_rules(n, table);
                let sums = &self.applied.ports[&send.port].sums;
                for i in send.chains_of(None) {
                    out.chains.push(sums.own[i].name.to_string());
                    out.rules.extend(rules_in(rules.table(table), &sums.own[i].name).iter().cloned());
                }
            }
            out.chains.extend(part.fixed.iter().filter(|f| f.emptied).map(|f| f.name.clone()));
            out.deleted = part.deleted.clone();
            out
        });
        Payload { filter, nat }
    }

    /// The plan with its payload materialised.
    pub fn into_planned(self) -> Planned {
        let payload = self.payload();
        Planned {
            full: self.full,
            payload,
            applied: self.applied,
            jump_rules: self.jump_rules,
            skips: self.skips,
            ports_planned: self.ports_planned,
        }
    }

    /// A fixed chain's name as this plan holds it.
    fn intern(&self, table: Table, chain: &str) -> &str {
        let f = self.sends[table_index(table)].fixed.iter().find(|f| f.name == chain);
        f.map(|f| f.name.as_str()).expect("only sent chains are kept")
    }

    /// The rules of the port of `table`'s `n`th own send, generated again.
    pub(crate) fn own_rules(&self, n: usize, table: Table) -> Ruleset {
        let send = &self.sends[table_index(table)].own[n];
        let port = &self.applied.ports[&send.port].port;
        let owned = claims::owned(port, &self.owners, &mut Vec::new());
        let cx = self.applied.inputs.as_ref().expect("a prepared plan has inputs").context();
        let mut out = Ruleset::default();
        own_rules(&owned, &cx, &mut out);
        out
    }
}

impl Sends {
    fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.own.is_empty() && self.deleted.is_empty()
    }
}
