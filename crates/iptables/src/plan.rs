//! Plans: one family's `iptables-restore --noflush` payload, full or
//! partial, and the record of what it leaves in the kernel.
//!
//! A full payload declares and rewrites every chain. A partial one declares
//! and rewrites only the chains whose content changed since [`Applied`] (a
//! per-service chain of a changed port, or a dispatch chain such as
//! KUBE-SERVICES whose rules changed) and deletes (`-X`) the per-service
//! chains no longer used. Chains not listed are left alone by `--noflush`,
//! so unchanged services cost nothing in the kernel. Each table is committed
//! atomically by `iptables-restore`; a chain is only deleted in the same
//! commit that rewrites every chain that jumped to it.
//!
//! Planning is incremental too: [`Applied`] keeps, per service port, the
//! port its rules were computed from and a summary of them (chain names,
//! content hashes, rule counts), not the rules themselves. A partial plan
//! recomputes only the ports whose state changed (and everything when the
//! node or the settings changed); the rule text of the chains it sends is
//! generated again from the ports when the payload is rendered
//! ([`crate::emit`]), so what stays in memory between syncs is a few dozen
//! bytes per chain.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{IpFamily, ProxyState, ServicePort, ServicePortName};

use crate::base::{self, JumpRule, NodePortDestinations};
use crate::claims;
use crate::config::{LocalMatch, PlanConfig};
use crate::emit::{FixedSend, OwnSend, Prepared, Sends, fixed_content};
use crate::names::is_service_chain;
use crate::payload::{Payload, Rule, Table, jump_target};
use crate::port::{Context, port_rules};
use crate::ruleset::{Ruleset, TableRules};

/// What the last successful sync left in one family's tables, and a
/// summary of the per-port rules it was made of. Never read back from the
/// kernel; the applier drops it (and plans with `None`) after a failure or
/// when the canary says someone flushed the tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub(crate) family: Option<IpFamily>,
    /// What every port's rules were computed with; a cached port is reused
    /// only under the same inputs.
    pub(crate) inputs: Option<Inputs>,
    pub(crate) ports: BTreeMap<ServicePortName, PortPlan>,
    /// Content hash of each fixed (not per-service) chain kproxy wrote.
    fixed: BTreeMap<(Table, String), u64>,
    /// Rules in kproxy's chains of filter and nat.
    rules: [usize; 2],
}

impl Applied {
    /// The chains kproxy has written in `table`: the fixed ones, then each
    /// port's own, in port order.
    pub fn chains(&self, table: Table) -> impl Iterator<Item = &str> + '_ {
        let fixed = self.fixed.keys().filter(move |(t, _)| *t == table).map(|(_, c)| c.as_str());
        let own = self.own_chains().filter(move |c| c.table == table).map(|c| &*c.name);
        fixed.chain(own)
    }

    pub fn chain_count(&self) -> usize {
        self.fixed.len() + self.own_chains().count()
    }

    /// The rules in kproxy's chains of `table` (upstream's
    /// `kubeproxy_sync_proxy_rules_iptables_total`).
    pub fn rule_count(&self, table: Table) -> usize {
        self.rules[table_index(table)]
    }

    fn own_chains(&self) -> impl Iterator<Item = &ChainSum> + '_ {
        self.ports.values().flat_map(|p| p.sums.own.iter())
    }
}

/// The inputs every port's rules depend on besides the port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inputs {
    pub config: PlanConfig,
    pub local: LocalMatch,
    pub node_ips: Vec<IpAddr>,
    /// Node ports on every local address (`addrtype LOCAL`), not on
    /// `node_ips` one by one.
    pub match_all: bool,
}

impl Inputs {
    pub fn context(&self) -> Context<'_> {
        Context { config: &self.config, local: &self.local, node_ips: &self.node_ips }
    }
}

/// One port's rule summary and the port it was computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortPlan {
    pub port: Arc<ServicePort>,
    /// Some frontend of the port is another port's (see [`claims`]): the
    /// rules depend on other ports too, so they are never reused.
    contested: bool,
    pub sums: Arc<PortSums>,
}

/// A port's chains, split into the chains only it writes and its parts of
/// the fixed chains, each summarised.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PortSums {
    pub own: Box<[ChainSum]>,
    shared: Box<[ChainSum]>,
}

impl PortSums {
    fn of(scratch: &Ruleset) -> Self {
        let (mut own, mut shared) = (Vec::new(), Vec::new());
        for table in [Table::Filter, Table::Nat] {
            let t = scratch.table(table);
            for name in &t.order {
                let rules = rules_in(t, name);
                let sum = ChainSum { table, name: name.as_str().into(), hash: hash_of(rules), rules: rules.len() };
                if is_service_chain(name) { own.push(sum) } else { shared.push(sum) }
            }
        }
        Self { own: own.into(), shared: shared.into() }
    }
}

/// A chain's (or a port's part of a fixed chain's) name, content hash and
/// rule count.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ChainSum {
    pub table: Table,
    pub name: Box<str>,
    pub hash: u64,
    pub rules: usize,
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
    /// Service ports whose rules were computed (the rest were reused).
    pub ports_planned: usize,
}

/// Plans one family: full when `previous` is `None` (or of another
/// family), else partial against it. The payload is materialised; the
/// applier renders it chain by chain from [`prepare`] instead.
pub fn plan(state: &ProxyState, family: IpFamily, config: &PlanConfig, previous: Option<&Applied>) -> Planned {
    prepare(state, family, config, previous).into_planned()
}

/// [`plan`] without building the payload: what to send, summarised; render
/// it with [`Prepared::restores`] and [`Prepared::chunks`].
pub fn prepare<'s>(
    state: &'s ProxyState,
    family: IpFamily,
    config: &PlanConfig,
    previous: Option<&Applied>,
) -> Prepared<'s> {
    let mut skips = Vec::new();
    let node_ips: Vec<IpAddr> =
        state.node.node_port_addresses.iter().copied().filter(|ip| IpFamily::of(ip) == family).collect();
    let match_all = state.node.node_port_match_all.contains(&family);
    // Upstream turns localhost node ports off unless the node-port addresses
    // match every address or include IPv4 loopback (`ContainsIPv4Loopback`):
    // no KUBE-FIREWALL guard, no route_localnet, without a reason.
    let config = PlanConfig {
        localhost_node_ports: config.localhost_node_ports && (match_all || node_ips.iter().any(IpAddr::is_loopback)),
        ..config.clone()
    };
    let local = LocalMatch::new(&config.local_detector, &state.node, family, &mut skips);
    let inputs = Inputs { config, local, node_ips, match_all };
    let previous = previous.filter(|p| p.family == Some(family));
    let cache = previous.filter(|p| p.inputs.as_ref() == Some(&inputs)).map(|p| &p.ports);
    let cx = inputs.context();

    let mut ports = BTreeMap::new();
    let mut ports_planned = 0;
    let mut sends = [Sends::default(), Sends::default()];
    let owners = claims::owners(state.family(family).service_ports.values());
    for (name, port) in &state.family(family).service_ports {
        let owned = claims::owned(port, &owners, &mut skips);
        let contested = owned.frontends.len() != port.frontends.len();
        let planned = match cache.and_then(|c| c.get(name)) {
            Some(old) if !contested && !old.contested && (Arc::ptr_eq(&old.port, port) || old.port == *port) => {
                old.clone()
            }
            _ => {
                ports_planned += 1;
                let mut scratch = Ruleset::default();
                port_rules(&owned, &cx, &mut scratch);
                let sums = PortSums::of(&scratch);
                let before = previous.and_then(|p| p.ports.get(name)).map(|b| &*b.sums);
                for table in [Table::Filter, Table::Nat] {
                    let part = &mut sends[table_index(table)];
                    own_sends(name, &sums, before, scratch.table(table), table, part);
                }
                PortPlan { port: Arc::clone(port), contested, sums: Arc::new(sums) }
            }
        };
        ports.insert(name.clone(), planned);
    }
    if let Some(prev) = previous {
        for (_, before) in prev.ports.iter().filter(|(name, _)| !ports.contains_key(*name)) {
            for own in before.sums.own.iter() {
                sends[table_index(own.table)].deleted.push(own.name.to_string());
            }
        }
    }
    for part in &mut sends {
        part.deleted.sort();
    }
    let mut head = Ruleset::default();
    base::head(&inputs.config, family, &mut head);
    let mut tail = Ruleset::default();
    let node_ports =
        if inputs.match_all { NodePortDestinations::Local } else { NodePortDestinations::Listed(&inputs.node_ips) };
    base::tail(&inputs.config, family, node_ports, &mut tail, &mut skips);
    base::unserved(ports.values().map(|p| p.port.as_ref()), &mut tail);
    let order = fixed_order(&head, &tail, &ports);
    let hashes = fixed_hashes(&order, &head, &tail, &ports);
    for table in [Table::Filter, Table::Nat] {
        let part = &mut sends[table_index(table)];
        for chain in &order[table_index(table)] {
            let key = (table, chain.clone());
            if previous.is_none_or(|prev| prev.fixed.get(&key) != hashes.get(&key)) {
                part.fixed.push(FixedSend::new(chain));
            }
        }
        // A fixed chain kproxy stopped using (KUBE-FIREWALL after localhost
        // node ports were turned off): built-in chains may still jump to it,
        // so it is emptied, not deleted.
        for (tbl, chain) in previous.map(|p| p.fixed.keys()).into_iter().flatten() {
            if *tbl == table && !hashes.contains_key(&(table, chain.clone())) {
                part.fixed.push(FixedSend { emptied: true, ..FixedSend::new(chain) });
            }
        }
    }
    let rules = [Table::Filter, Table::Nat].map(|table| {
        let base: usize =
            [&head, &tail].iter().map(|r| r.table(table).rules.values().map(Vec::len).sum::<usize>()).sum();
        let sums = ports.values().flat_map(|p| p.sums.own.iter().chain(p.sums.shared.iter()));
        base + sums.filter(|s| s.table == table).map(|s| s.rules).sum::<usize>()
    });
    let jump_rules = base::jump_rules(&inputs.config, family);
    let applied = Applied { family: Some(family), inputs: Some(inputs), ports, fixed: hashes, rules };
    fixed_content(state, family, &owners, &applied, &head, &tail, &mut sends);
    Prepared {
        state,
        family,
        owners,
        full: previous.is_none(),
        applied,
        jump_rules,
        skips,
        ports_planned,
        head,
        tail,
        sends,
    }
}

/// The chains of a freshly planned port to send: all of them in a full
/// plan, else those whose hash differs from `before`'s; the chains `before`
/// had and the port no longer has are deleted. The chains sent are grouped
/// by the jumps between them, for [`crate::Payload::split`]'s order.
fn own_sends(
    name: &ServicePortName,
    sums: &PortSums,
    before: Option<&PortSums>,
    rules: &TableRules,
    table: Table,
    out: &mut Sends,
) {
    let old: HashMap<&str, u64> = before
        .map(|b| b.own.iter().filter(|c| c.table == table).map(|c| (&*c.name, c.hash)).collect())
        .unwrap_or_default();
    let mut kept = HashSet::new();
    let mut chains = Vec::new();
    for (i, own) in sums.own.iter().enumerate().filter(|(_, c)| c.table == table) {
        kept.insert(&*own.name);
        if old.get(&*own.name) != Some(&own.hash) {
            chains.push(i);
        }
    }
    out.deleted.extend(old.keys().filter(|c| !kept.contains(*c)).map(|c| (*c).to_owned()));
    if chains.is_empty() {
        return;
    }
    // Union-find over the chains sent: a chain and what it jumps to.
    let at: HashMap<&str, usize> = chains.iter().enumerate().map(|(k, &i)| (&*sums.own[i].name, k)).collect();
    let mut parent: Vec<usize> = (0..chains.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (from, &i) in chains.iter().enumerate() {
        for rule in rules_in(rules, &sums.own[i].name) {
            let Some(target) = jump_target(rule) else { continue };
            match at.get(target) {
                Some(&to) => {
                    let (a, b) = (root(&mut parent, from), root(&mut parent, to));
                    parent[a] = b;
                }
                None if !is_service_chain(target) => {
                    out.own_targets.insert(target.to_owned());
                }
                None => {}
            }
        }
    }
    let mut group_of: HashMap<usize, u32> = HashMap::new();
    let groups = (0..chains.len())
        .map(|k| {
            let r = root(&mut parent, k);
            let next = group_of.len() as u32;
            *group_of.entry(r).or_insert(next)
        })
        .collect();
    out.own.push(OwnSend { port: name.clone(), chains: chains.into_iter().map(|i| i as u32).collect(), groups });
}

/// Per table (filter, nat), the fixed chains in declaration order: the
/// head's, then any first written by a port or the tail.
fn fixed_order(head: &Ruleset, tail: &Ruleset, ports: &BTreeMap<ServicePortName, PortPlan>) -> [Vec<String>; 2] {
    [Table::Filter, Table::Nat].map(|table| {
        let mut order: Vec<&str> = head.table(table).order.iter().map(String::as_str).collect();
        let mut seen: HashSet<&str> = order.iter().copied().collect();
        let later = ports.values().flat_map(|p| p.sums.shared.iter()).filter(|s| s.table == table).map(|s| &*s.name);
        for chain in later.chain(tail.table(table).order.iter().map(String::as_str)) {
            if seen.insert(chain) {
                order.push(chain);
            }
        }
        order.into_iter().map(str::to_owned).collect()
    })
}

/// A hash per fixed chain, over its head rules, the ports' parts (by their
/// hashes) and its tail rules.
fn fixed_hashes(
    order: &[Vec<String>; 2],
    head: &Ruleset,
    tail: &Ruleset,
    ports: &BTreeMap<ServicePortName, PortPlan>,
) -> BTreeMap<(Table, String), u64> {
    let mut hashers: HashMap<(Table, &str), DefaultHasher> = HashMap::new();
    for table in [Table::Filter, Table::Nat] {
        for chain in &order[table_index(table)] {
            let mut h = DefaultHasher::new();
            rules_in(head.table(table), chain).hash(&mut h);
            hashers.insert((table, chain), h);
        }
    }
    for part in ports.values().flat_map(|p| p.sums.shared.iter()) {
        if let Some(h) = hashers.get_mut(&(part.table, &*part.name)) {
            part.hash.hash(h);
        }
    }
    hashers
        .into_iter()
        .map(|((table, chain), mut h)| {
            rules_in(tail.table(table), chain).hash(&mut h);
            ((table, chain.to_owned()), h.finish())
        })
        .collect()
}

pub(crate) fn table_index(table: Table) -> usize {
    match table {
        Table::Filter => 0,
        Table::Nat => 1,
    }
}

pub(crate) fn rules_in<'a>(t: &'a TableRules, chain: &str) -> &'a [Rule] {
    t.rules.get(chain).map(Vec::as_slice).unwrap_or(&[])
}

fn hash_of(rules: &[Rule]) -> u64 {
    let mut h = DefaultHasher::new();
    rules.hash(&mut h);
    h.finish()
}
