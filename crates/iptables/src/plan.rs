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
//! Planning is incremental too: [`Applied`] keeps each service port's rules
//! with the port they were computed from, so a partial plan recomputes only
//! the ports whose state changed (and everything when the node or the
//! settings changed). Dispatch chains are compared by a hash over the
//! ports' cached contributions and only materialised when they changed.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{IpFamily, ProxyState, ServicePort, ServicePortName};

use crate::base::{self, JumpRule, NodePortDestinations};
use crate::claims;
use crate::config::{LocalMatch, PlanConfig};
use crate::names::is_service_chain;
use crate::payload::{Payload, Rule, Table, TablePayload};
use crate::port::{Context, port_rules};
use crate::ruleset::{Ruleset, TableRules};

/// What the last successful sync left in one family's tables, and the
/// per-port rules it was made of. Never read back from the kernel; the
/// applier drops it (and plans with `None`) after a failure or when the
/// canary says someone flushed the tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    family: Option<IpFamily>,
    /// What every port's rules were computed with; a cached port is reused
    /// only under the same inputs.
    inputs: Option<Inputs>,
    ports: BTreeMap<ServicePortName, PortPlan>,
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
        let own = self.own_chains().filter(move |c| c.table == table).map(|c| c.name.as_str());
        fixed.chain(own)
    }

    pub fn chain_count(&self) -> usize {
        self.fixed.len() + self.own_chains().count()
    }

    /// The rules in kproxy's chains of `table` (upstream's
    /// `kubeproxy_sync_proxy_rules_iptables_total`).
    pub fn rule_count(&self, table: Table) -> usize {
        match table {
            Table::Filter => self.rules[0],
            Table::Nat => self.rules[1],
        }
    }

    fn own_chains(&self) -> impl Iterator<Item = &OwnChain> + '_ {
        self.ports.values().flat_map(|p| p.own())
    }
}

/// The inputs every port's rules depend on besides the port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Inputs {
    config: PlanConfig,
    local: LocalMatch,
    node_ips: Vec<IpAddr>,
    /// Node ports on every local address (`addrtype LOCAL`), not on
    /// `node_ips` one by one.
    match_all: bool,
}

/// One port's rules and the port they were computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortPlan {
    port: Arc<ServicePort>,
    /// Some frontend of the port is another port's (see [`claims`]): the
    /// rules depend on other ports too, so they are never reused.
    contested: bool,
    rules: Arc<PortRules>,
}

impl PortPlan {
    /// `owned` is `port` without the frontends other ports own (`contested`
    /// when that is any).
    fn new(port: &Arc<ServicePort>, owned: &ServicePort, contested: bool, cx: &Context<'_>) -> Self {
        let mut scratch = Ruleset::default();
        port_rules(owned, cx, &mut scratch);
        Self { port: Arc::clone(port), contested, rules: Arc::new(PortRules::split(scratch)) }
    }

    fn own(&self) -> &[OwnChain] {
        &self.rules.own
    }

    fn shared(&self) -> &[SharedPart] {
        &self.rules.shared
    }
}

/// A port's rules, split into the chains only it writes and its parts of
/// the fixed chains.
#[derive(Debug, PartialEq, Eq)]
struct PortRules {
    own: Vec<OwnChain>,
    shared: Vec<SharedPart>,
}

impl PortRules {
    fn split(scratch: Ruleset) -> Self {
        let (mut own, mut shared) = (Vec::new(), Vec::new());
        for (table, mut t) in [(Table::Filter, scratch.filter), (Table::Nat, scratch.nat)] {
            for name in t.order {
                let rules = t.rules.remove(&name).unwrap_or_default();
                let hash = hash_of(&rules);
                if is_service_chain(&name) {
                    own.push(OwnChain { table, name, rules, hash });
                } else {
                    shared.push(SharedPart { table, chain: name, rules, hash });
                }
            }
        }
        Self { own, shared }
    }
}

/// A per-service chain (`KUBE-SVC-*`, `KUBE-SEP-*`, ...).
#[derive(Debug, PartialEq, Eq)]
struct OwnChain {
    table: Table,
    name: String,
    rules: Vec<Rule>,
    hash: u64,
}

/// A port's rules in one fixed chain (KUBE-SERVICES, ...).
#[derive(Debug, PartialEq, Eq)]
struct SharedPart {
    table: Table,
    chain: String,
    rules: Vec<Rule>,
    hash: u64,
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
/// family), else partial against it.
pub fn plan(state: &ProxyState, family: IpFamily, config: &PlanConfig, previous: Option<&Applied>) -> Planned {
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
    let cx = Context { config: &inputs.config, local: &inputs.local, node_ips: &inputs.node_ips };

    let mut ports = BTreeMap::new();
    let mut ports_planned = 0;
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
                PortPlan::new(port, &owned, contested, &cx)
            }
        };
        ports.insert(name.clone(), planned);
    }
    let mut head = Ruleset::default();
    base::head(&inputs.config, family, &mut head);
    let mut tail = Ruleset::default();
    let node_ports =
        if inputs.match_all { NodePortDestinations::Local } else { NodePortDestinations::Listed(&inputs.node_ips) };
    base::tail(&inputs.config, family, node_ports, &mut tail, &mut skips);
    base::unserved(ports.values().map(|p| p.port.as_ref()), &mut tail);
    let fixed = Fixed::new(&head, &tail, &ports);
    let fixed_hashes = fixed.hashes();

    let payload = match previous {
        None => Payload { filter: fixed.whole(Table::Filter), nat: fixed.whole(Table::Nat) },
        Some(prev) => Payload {
            filter: changed(&fixed, &fixed_hashes, Table::Filter, prev),
            nat: changed(&fixed, &fixed_hashes, Table::Nat, prev),
        },
    };
    let jump_rules = base::jump_rules(&inputs.config, family);
    let rules = [Table::Filter, Table::Nat].map(|table| {
        let base: usize =
            [&head, &tail].iter().map(|r| r.table(table).rules.values().map(Vec::len).sum::<usize>()).sum();
        let own = ports.values().flat_map(|p| p.own()).filter(|c| c.table == table).map(|c| c.rules.len());
        let shared = ports.values().flat_map(|p| p.shared()).filter(|s| s.table == table).map(|s| s.rules.len());
        base + own.sum::<usize>() + shared.sum::<usize>()
    });
    let applied = Applied { family: Some(family), inputs: Some(inputs), ports, fixed: fixed_hashes, rules };
    Planned { full: previous.is_none(), payload, applied, jump_rules, skips, ports_planned }
}

/// The fixed chains: head rules, every port's part, tail rules.
struct Fixed<'a> {
    head: &'a Ruleset,
    tail: &'a Ruleset,
    ports: &'a BTreeMap<ServicePortName, PortPlan>,
    /// Per table (filter, nat), the fixed chains in declaration order: the
    /// head's, then any first written by a port or the tail.
    order: [Vec<&'a str>; 2],
}

impl<'a> Fixed<'a> {
    fn new(head: &'a Ruleset, tail: &'a Ruleset, ports: &'a BTreeMap<ServicePortName, PortPlan>) -> Self {
        let order = [Table::Filter, Table::Nat].map(|table| {
            let mut order: Vec<&str> = head.table(table).order.iter().map(String::as_str).collect();
            let mut seen: HashSet<&str> = order.iter().copied().collect();
            let later = ports.values().flat_map(|p| p.shared()).filter(|s| s.table == table).map(|s| s.chain.as_str());
            for chain in later.chain(tail.table(table).order.iter().map(String::as_str)) {
                if seen.insert(chain) {
                    order.push(chain);
                }
            }
            order
        });
        Self { head, tail, ports, order }
    }

    fn order(&self, table: Table) -> &[&'a str] {
        match table {
            Table::Filter => &self.order[0],
            Table::Nat => &self.order[1],
        }
    }

    /// A hash per fixed chain, over its head rules, the ports' parts (by
    /// their cached hashes) and its tail rules.
    fn hashes(&self) -> BTreeMap<(Table, String), u64> {
        let mut hashers: HashMap<(Table, &str), DefaultHasher> = HashMap::new();
        for table in [Table::Filter, Table::Nat] {
            for &chain in self.order(table) {
                let mut h = DefaultHasher::new();
                rules_in(self.head.table(table), chain).hash(&mut h);
                hashers.insert((table, chain), h);
            }
        }
        for part in self.ports.values().flat_map(|p| p.shared()) {
            if let Some(h) = hashers.get_mut(&(part.table, part.chain.as_str())) {
                part.hash.hash(h);
            }
        }
        hashers
            .into_iter()
            .map(|((table, chain), mut h)| {
                rules_in(self.tail.table(table), chain).hash(&mut h);
                ((table, chain.to_owned()), h.finish())
            })
            .collect()
    }

    /// Every rule of one fixed chain.
    fn rules(&self, table: Table, chain: &str) -> Vec<Rule> {
        let mut out: Vec<Rule> = rules_in(self.head.table(table), chain).to_vec();
        for part in self.ports.values().flat_map(|p| p.shared()) {
            if part.table == table && part.chain == chain {
                out.extend(part.rules.iter().cloned());
            }
        }
        out.extend(rules_in(self.tail.table(table), chain).iter().cloned());
        out
    }

    /// Every chain of `table` declared and refilled.
    fn whole(&self, table: Table) -> TablePayload {
        let mut out = TablePayload::default();
        for &chain in self.order(table) {
            out.rules.extend(self.rules(table, chain));
            out.chains.push(chain.to_owned());
        }
        for own in self.ports.values().flat_map(|p| p.own()).filter(|c| c.table == table) {
            out.chains.push(own.name.clone());
            out.rules.extend(own.rules.iter().cloned());
        }
        out
    }
}

fn rules_in<'a>(t: &'a TableRules, chain: &str) -> &'a [Rule] {
    t.rules.get(chain).map(Vec::as_slice).unwrap_or(&[])
}

fn hash_of(rules: &[Rule]) -> u64 {
    let mut h = DefaultHasher::new();
    rules.hash(&mut h);
    h.finish()
}

/// Only chains whose content differs from `prev`, plus deletions of the
/// per-service chains no longer used.
fn changed(fixed: &Fixed<'_>, hashes: &BTreeMap<(Table, String), u64>, table: Table, prev: &Applied) -> TablePayload {
    let mut out = TablePayload::default();
    for &chain in fixed.order(table) {
        let key = (table, chain.to_owned());
        if prev.fixed.get(&key) != hashes.get(&key) {
            out.rules.extend(fixed.rules(table, chain));
            out.chains.push(key.1);
        }
    }
    let mut deleted = Vec::new();
    for (name, now) in fixed.ports {
        let before = prev.ports.get(name);
        if before.is_some_and(|b| Arc::ptr_eq(&b.rules, &now.rules)) {
            continue;
        }
        let old: HashMap<&str, u64> = before
            .map(|b| b.own().iter().filter(|c| c.table == table).map(|c| (c.name.as_str(), c.hash)).collect())
            .unwrap_or_default();
        let mut kept = HashSet::new();
        for own in now.own().iter().filter(|c| c.table == table) {
            kept.insert(own.name.as_str());
            if old.get(own.name.as_str()) != Some(&own.hash) {
                out.chains.push(own.name.clone());
                out.rules.extend(own.rules.iter().cloned());
            }
        }
        deleted.extend(old.keys().filter(|c| !kept.contains(*c)).map(|c| (*c).to_owned()));
    }
    for (name, before) in &prev.ports {
        if !fixed.ports.contains_key(name) {
            deleted.extend(before.own().iter().filter(|c| c.table == table).map(|c| c.name.clone()));
        }
    }
    deleted.sort();
    out.deleted = deleted;
    // A fixed chain kproxy stopped using (KUBE-FIREWALL after localhost node
    // ports were turned off): built-in chains may still jump to it, so it is
    // emptied, not deleted.
    for (tbl, chain) in prev.fixed.keys() {
        if *tbl == table && !hashes.contains_key(&(table, chain.clone())) {
            out.chains.push(chain.clone());
        }
    }
    out
}

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
