//! Plans: the operations one sync sends to the kernel, in one transaction.
//!
//! A full plan re-asserts every object kproxy owns; a partial plan touches
//! only the service ports that changed (their elements, and chains or sets
//! whose use count goes to or from zero). Both start from [`Applied`], the
//! in-memory record of what the last successful sync put in the kernel:
//! the kernel is never read back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use kproxy_model::{Changes, Frontend, IpFamily, IpNet, Protocol, ProxyState, ServicePort, ServicePortName};

use crate::ast::{Atom, Rule};
use crate::base;
use crate::claims::{Claims, frontend_key};
use crate::config::PlanConfig;
use crate::names::SERVICE_CIDRS;
use crate::objects::{Chain, Element, SetDef, Table};
use crate::port::{PortObjects, Shared, SharedElement, port_objects};
use crate::sink::{Collect, ElementSink};

/// One operation on a family's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    AddTable,
    DeleteTable,
    AddSet(SetDef),
    FlushSet(SetDef),
    DeleteSet(SetDef),
    /// Creates the chain (with its hook, for base chains) if missing; its
    /// rules come as `AddRule`s.
    AddChain(Chain),
    FlushChain(String),
    DeleteChain(String),
    /// Deletes one rule by the handle the kernel gave it. kproxy's own
    /// planner never emits it (it never reads the kernel back); it is for
    /// removing rules another proxy left, found by listing the kernel's.
    DeleteRule {
        chain: String,
        handle: u64,
    },
    AddRule {
        chain: String,
        rule: Rule,
    },
    AddElements {
        set: String,
        elements: Vec<Element>,
    },
    DeleteElements {
        set: String,
        keys: Vec<Vec<Atom>>,
    },
}

/// The operations for one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyPlan {
    pub family: Option<IpFamily>,
    pub ops: Vec<Op>,
}

/// One sync's worth of operations, for both families: applied as one
/// transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub full: bool,
    pub families: Vec<FamilyPlan>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.families.iter().all(|f| f.ops.is_empty())
    }
}

/// A frontend as the kernel keys it.
pub type FrontendKey = (IpAddr, Protocol, u16);

/// What the last successful sync applied to one family's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyApplied {
    /// Each programmed port and the frontends it owns: its objects are
    /// recomputed from these when it changes (keeping every element of
    /// every port would cost more memory than the state itself).
    pub(crate) ports: HashMap<ServicePortName, AppliedPort>,
    /// Every port claiming each frontend (a port's claims are its
    /// frontends in `ports`), and who serves it.
    pub(crate) claims: Claims,
    /// Elements of the ports' own (what [`Applied::element_count`] adds up).
    pub(crate) port_elements: usize,
    /// Shared elements and how many ports use each.
    pub(crate) shared_elements: HashMap<SharedElement, u32>,
    pub(crate) shared_objects: BTreeMap<Shared, usize>,
    pub(crate) chains: BTreeSet<String>,
    pub(crate) sets: BTreeMap<String, SetDef>,
    pub(crate) service_cidrs: Vec<IpNet>,
}

/// A port as programmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AppliedPort {
    pub(crate) port: Arc<ServicePort>,
    /// The frontends it owns, when not all of its frontends.
    owned: Option<Box<[Frontend]>>,
}

impl AppliedPort {
    /// Its objects, as they were applied.
    pub(crate) fn objects(&self, node_ips: &[IpAddr]) -> PortObjects {
        port_objects(&self.port, self.owned.as_deref().unwrap_or(&self.port.frontends), node_ips)
    }
}

/// What the last successful sync applied, per family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    config: PlanConfig,
    node_ips: Vec<IpAddr>,
    v4: FamilyApplied,
    v6: FamilyApplied,
}

impl Applied {
    fn family(&self, family: IpFamily) -> &FamilyApplied {
        match family {
            IpFamily::V4 => &self.v4,
            IpFamily::V6 => &self.v6,
        }
    }

    /// Element count of one family, for logs and tests.
    pub fn element_count(&self, family: IpFamily) -> usize {
        let f = self.family(family);
        f.port_elements + f.shared_elements.len() + f.service_cidrs.len()
    }
}

/// A plan, the state it leaves behind once applied, and what could not be
/// programmed.
#[derive(Clone, Debug)]
pub struct Planned {
    pub plan: Plan,
    pub applied: Applied,
    pub skips: Vec<String>,
}

/// Plans a sync. `previous` is what the last successful sync applied
/// (`None` after a start or a failure: the plan then rebuilds the tables);
/// it is taken, not copied, so a partial plan costs what changed. A
/// partial plan is made only when `full` is false and the configuration
/// and node addresses are those `previous` was made with.
pub fn plan(
    state: &ProxyState,
    changes: &Changes,
    full: bool,
    config: &PlanConfig,
    previous: Option<Applied>,
) -> Planned {
    let mut collect = Collect::default();
    let mut planned = plan_streamed(state, changes, full, config, previous, &mut collect);
    collect.fill(&mut planned.plan);
    planned
}

/// [`plan`], with a full plan's elements handed to `sink` as they are
/// made: the plan's ops then hold one empty `AddElements` op per set that
/// may have elements, where the sink's elements for it belong. A partial
/// plan's elements are in its ops, and the sink gets none.
pub fn plan_streamed(
    state: &ProxyState,
    changes: &Changes,
    full: bool,
    config: &PlanConfig,
    previous: Option<Applied>,
    sink: &mut dyn ElementSink,
) -> Planned {
    let config = &config.resolved(&state.node);
    let node_ips = state.node.node_port_addresses.clone();
    let partial = !full && previous.as_ref().is_some_and(|p| p.config == *config && p.node_ips == node_ips);
    let mut skips = Vec::new();
    let mut families = Vec::new();
    let mut applied =
        Applied { config: config.clone(), node_ips: node_ips.clone(), v4: Default::default(), v6: Default::default() };
    let (mut prev_v4, mut prev_v6) = match previous {
        Some(p) => (Some(p.v4), Some(p.v6)),
        None => (None, None),
    };
    for family in IpFamily::ALL {
        let prev = match family {
            IpFamily::V4 => prev_v4.take(),
            IpFamily::V6 => prev_v6.take(),
        };
        let (ops, done) = match (partial, prev) {
            (true, Some(p)) => crate::partial::plan_partial(state, changes, family, &node_ips, p, &mut skips),
            (_, prev) => plan_full(state, family, config, &node_ips, prev.as_ref(), &mut skips, sink),
        };
        families.push(FamilyPlan { family: Some(family), ops });
        match family {
            IpFamily::V4 => applied.v4 = done,
            IpFamily::V6 => applied.v6 = done,
        }
    }
    Planned { plan: Plan { full: !partial, families }, applied, skips }
}

/// The complete desired table of one family: what `kproxy render` prints
/// and what `kproxy trace` walks.
pub fn table(state: &ProxyState, family: IpFamily, config: &PlanConfig) -> Table {
    let mut skips = Vec::new();
    let node_ips = &state.node.node_port_addresses;
    let mut ports = Table::default();
    let applied = full_state(state, family, node_ips, None, &mut skips, |objects| {
        add_port(&mut ports, objects);
    });
    let mut table = assemble(family, &config.resolved(&state.node), &applied);
    table.chains.extend(ports.chains);
    table.sets.extend(ports.sets);
    table.elements = ports.elements;
    for e in applied.shared_elements.keys() {
        table.add_element(e.set(), Element { key: e.key(), data: None });
    }
    for key in base::service_cidr_elements(&state.family(family).service_cidrs) {
        table.add_element(SERVICE_CIDRS, Element { key, data: None });
    }
    table
}

/// A port's chains, sets and elements into `table`.
fn add_port(table: &mut Table, objects: PortObjects) {
    table.chains.extend(objects.chains);
    table.sets.extend(objects.sets);
    for ((set, key), data) in objects.elements {
        table.add_element(&set, Element { key, data });
    }
}

/// Ownership from scratch (keeping previous owners where the rules allow),
/// then every port's objects, each handed to `each` once counted.
fn full_state(
    state: &ProxyState,
    family: IpFamily,
    node_ips: &[IpAddr],
    previous: Option<&FamilyApplied>,
    skips: &mut Vec<String>,
    mut each: impl FnMut(PortObjects),
) -> FamilyApplied {
    let ports = &state.family(family).service_ports;
    let mut applied = FamilyApplied::default();
    for port in ports.values() {
        applied.claims.add(port);
    }
    applied.claims.settle_all(previous.map(|p| &p.claims));
    for port in ports.values() {
        let (entry, objects) = objects_for(port, &applied, node_ips);
        skips.extend(objects.skips.iter().cloned());
        applied.ports.insert(port.name.clone(), entry);
        applied.port_elements += objects.elements.len();
        for e in &objects.shared {
            *applied.shared_elements.entry(*e).or_default() += 1;
        }
        for c in &objects.shared_objects {
            *applied.shared_objects.entry(*c).or_default() += 1;
        }
        each(objects);
    }
    applied.service_cidrs = state.family(family).service_cidrs.clone();
    applied
}

/// A port's objects for the frontends it owns (the others are reported),
/// and what to remember of it.
pub(crate) fn objects_for(
    port: &Arc<ServicePort>,
    applied: &FamilyApplied,
    node_ips: &[IpAddr],
) -> (AppliedPort, PortObjects) {
    let mut owned = Vec::new();
    let mut conflicts = Vec::new();
    for f in &port.frontends {
        match applied.claims.owner(&frontend_key(port, f)) {
            Some(owner) if *owner != port.name => {
                conflicts.push(format!(
                    "{}: frontend {} is already served by {owner}; not served",
                    port.name,
                    f.addr()
                ));
            }
            _ => owned.push(*f),
        }
    }
    let mut objects = port_objects(port, &owned, node_ips);
    objects.skips.extend(conflicts);
    let owned = (owned.len() != port.frontends.len()).then(|| owned.into_boxed_slice());
    (AppliedPort { port: Arc::clone(port), owned }, objects)
}

/// The objects of one family no port owns: base chains and sets, shared
/// chains and sets.
fn assemble(family: IpFamily, config: &PlanConfig, applied: &FamilyApplied) -> Table {
    let mut table = Table::default();
    for chain in base::chains(config, family) {
        table.add_chain(chain);
    }
    for set in base::sets() {
        table.add_set(set);
    }
    for shared in applied.shared_objects.keys() {
        table.add_chain(shared.chain());
        if let Some(set) = shared.set() {
            table.add_set(set);
        }
    }
    table
}

fn plan_full(
    state: &ProxyState,
    family: IpFamily,
    config: &PlanConfig,
    node_ips: &[IpAddr],
    previous: Option<&FamilyApplied>,
    skips: &mut Vec<String>,
    sink: &mut dyn ElementSink,
) -> (Vec<Op>, FamilyApplied) {
    // The ports' chains and sets join the table; their elements go
    // straight to the sink (no list of every element is kept).
    for set in base::sets() {
        sink.declare(family, &set);
    }
    let mut ports = Table::default();
    let mut applied = full_state(state, family, node_ips, previous, skips, |objects| {
        let PortObjects { elements: own, chains, sets, .. } = objects;
        ports.chains.extend(chains);
        ports.sets.extend(sets);
        for ((set, key), data) in &own {
            sink.element(family, set, key, data.as_ref());
        }
    });
    let mut table = assemble(family, config, &applied);
    table.chains.extend(ports.chains);
    table.sets.extend(ports.sets);
    // Sorted: the counts are a hash map, and plans must not depend on its order.
    let mut shared: Vec<SharedElement> = applied.shared_elements.keys().copied().collect();
    shared.sort_unstable();
    for e in shared {
        sink.element(family, e.set(), &e.key(), None);
    }
    for key in base::service_cidr_elements(&state.family(family).service_cidrs) {
        sink.element(family, SERVICE_CIDRS, &key, None);
    }
    applied.chains = table.chains.keys().cloned().collect();
    let mut ops = Vec::new();
    match previous {
        // Nothing known about the kernel: replace the table, atomically.
        None => {
            ops.extend([Op::AddTable, Op::DeleteTable, Op::AddTable]);
            ops.extend(table.sets.values().cloned().map(Op::AddSet));
            ops.extend(table.chains.values().map(|c| Op::AddChain(Chain { rules: Vec::new(), ..c.clone() })));
            push_rules(&mut ops, table.chains.values());
            push_elements(&mut ops, &table.sets);
        }
        // Re-assert in place, keeping what the packet path learned (the
        // clients pinned by session affinity).
        Some(previous) => {
            ops.push(Op::AddTable);
            let removed_chains: Vec<&String> =
                previous.chains.iter().filter(|c| !table.chains.contains_key(*c)).collect();
            ops.extend(previous.chains.iter().map(|c| Op::FlushChain(c.clone())));
            for (name, set) in &previous.sets {
                match table.sets.get(name) {
                    Some(desired) if desired != set => {
                        ops.extend([Op::DeleteSet(set.clone()), Op::AddSet(desired.clone())])
                    }
                    Some(desired) if desired.dynamic_timeout.is_none() => ops.push(Op::FlushSet(set.clone())),
                    _ => {}
                }
            }
            let new_sets = table.sets.values().filter(|s| !previous.sets.contains_key(&s.name));
            ops.extend(new_sets.cloned().map(Op::AddSet));
            let new_chains = table.chains.values().filter(|c| !previous.chains.contains(&c.name));
            ops.extend(new_chains.map(|c| Op::AddChain(Chain { rules: Vec::new(), ..c.clone() })));
            push_rules(&mut ops, table.chains.values());
            push_elements(&mut ops, &table.sets);
            ops.extend(removed_chains.into_iter().map(|c| Op::DeleteChain(c.clone())));
            let removed_sets = previous.sets.values().filter(|s| !table.sets.contains_key(&s.name));
            ops.extend(removed_sets.cloned().map(Op::DeleteSet));
        }
    }
    applied.sets = table.sets;
    (ops, applied)
}

pub(crate) fn push_rules<'a>(ops: &mut Vec<Op>, chains: impl Iterator<Item = &'a Chain>) {
    for chain in chains {
        ops.extend(chain.rules.iter().map(|rule| Op::AddRule { chain: chain.name.clone(), rule: rule.clone() }));
    }
}

/// Where each set's elements go: an empty `AddElements` per set the plan
/// fills (not the sets the packet path fills), in name order.
fn push_elements(ops: &mut Vec<Op>, sets: &BTreeMap<String, SetDef>) {
    let planned = sets.values().filter(|s| s.dynamic_timeout.is_none());
    ops.extend(planned.map(|s| Op::AddElements { set: s.name.clone(), elements: Vec::new() }));
}
