//! Everything one service port puts into a table: its frontends' map
//! elements, the selection chains they point to, and the chains and sets
//! only it owns (round robin counters, session affinity).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use kproxy_model::{
    Endpoint, Frontend, FrontendKind, IpNet, ModeSupport, Scheduler, ServicePort, TrafficPolicy, WeightSupport,
};

use crate::ast::{Atom, Data, Field, Match, Rule, Stmt, Verdict};
use crate::base;
use crate::names::*;
use crate::objects::{Chain, SetData, SetDef};

/// Objects shared by every frontend needing them: the reason the table
/// stays small at any number of services.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shared {
    /// Picks one of `n` endpoints: `pick-n` goes to `dnat-0` .. `dnat-{n-1}`.
    Pick(u32),
    /// Picks one of `n` cluster endpoints: `short-n`.
    Short(u32),
    /// Picks one of `n` (cluster, with `short`) endpoints by a hash of the
    /// address `field`: `sh-pick-n`, `dh-short-n`, ...
    Hashed { field: Field, short: bool, n: u32 },
    /// Endpoint number `i`: map `endpoint-i` and chain `dnat-i`.
    Slot(u32),
    /// Cluster endpoint number `i`: `cluster-endpoint-i`, `cluster-dnat-i`.
    ClusterSlot(u32),
}

impl Shared {
    pub fn chain(self) -> Chain {
        let goto_all = |name: String, target: fn(u32) -> String, n: u32| {
            let targets = (0..n).map(target).collect();
            Chain::regular(name, vec![Rule::always(vec![Stmt::NumgenGoto { inc: false, targets }])])
        };
        match self {
            Shared::Pick(n) => goto_all(pick(n), dnat, n),
            Shared::Short(n) => goto_all(short(n), cluster_dnat, n),
            Shared::Hashed { field, short, n } => {
                let by = if field == Field::Saddr { "sh" } else { "dh" };
                let target = if short { cluster_dnat } else { dnat };
                let targets = (0..n).map(target).collect();
                Chain::regular(hashed(by, short, n), vec![Rule::always(vec![Stmt::HashGoto { field, targets }])])
            }
            Shared::Slot(i) => base::dnat_chain(dnat(i), endpoint_map(i)),
            Shared::ClusterSlot(i) => base::dnat_chain(cluster_dnat(i), cluster_endpoint_map(i)),
        }
    }

    pub fn set(self) -> Option<SetDef> {
        match self {
            Shared::Pick(_) | Shared::Short(_) | Shared::Hashed { .. } => None,
            Shared::Slot(i) => Some(base::endpoint_map(endpoint_map(i))),
            Shared::ClusterSlot(i) => Some(base::endpoint_map(cluster_endpoint_map(i))),
        }
    }
}

/// A key of an element: the set and the element's key.
pub type ElementKey = (String, Vec<Atom>);

/// A set element several ports may need, counted by its users. Ordered as
/// its set and key are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SharedElement {
    /// A cluster IP, in `cluster-ips`.
    ClusterIp(IpAddr),
    /// A local endpoint's address and itself, in `hairpin`.
    Hairpin(IpAddr),
}

impl SharedElement {
    pub fn set(self) -> &'static str {
        match self {
            SharedElement::ClusterIp(_) => CLUSTER_IPS,
            SharedElement::Hairpin(_) => HAIRPIN,
        }
    }

    pub fn key(self) -> Vec<Atom> {
        match self {
            SharedElement::ClusterIp(ip) => vec![Atom::Addr(ip)],
            SharedElement::Hairpin(ip) => vec![Atom::Addr(ip), Atom::Addr(ip)],
        }
    }
}

/// What one service port contributes to its family's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortObjects {
    /// Elements only this port puts in, with their data.
    pub elements: BTreeMap<ElementKey, Option<Data>>,
    /// Set elements several ports may need (a cluster IP, a hairpin pair).
    pub shared: BTreeSet<SharedElement>,
    /// Chains only this port uses.
    pub chains: BTreeMap<String, Chain>,
    /// Sets only this port uses.
    pub sets: BTreeMap<String, SetDef>,
    pub shared_objects: BTreeSet<Shared>,
    /// Why parts of the port were not programmed.
    pub skips: Vec<String>,
}

/// One of a port's two endpoint lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    Cluster,
    Local,
}

impl List {
    fn as_str(self) -> &'static str {
        match self {
            List::Cluster => "cluster",
            List::Local => "local",
        }
    }
}

/// Which endpoint list, looked up how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Usage {
    /// The frontend's own list, from `endpoints`.
    Primary,
    /// A Local-policy frontend's cluster list, for in-cluster clients.
    Short,
}

impl Usage {
    /// The shared objects for picking among `n` endpoints (at random, or
    /// by a hash of an address), and the map of endpoint number `i`.
    fn pick(self, n: u32, hash: Option<Field>) -> Shared {
        match (self, hash) {
            (_, Some(field)) => Shared::Hashed { field, short: self == Usage::Short, n },
            (Usage::Primary, None) => Shared::Pick(n),
            (Usage::Short, None) => Shared::Short(n),
        }
    }

    fn slot(self, i: u32) -> Shared {
        match self {
            Usage::Primary => Shared::Slot(i),
            Usage::Short => Shared::ClusterSlot(i),
        }
    }

    fn map(self, i: u32) -> String {
        match self {
            Usage::Primary => endpoint_map(i),
            Usage::Short => cluster_endpoint_map(i),
        }
    }

    fn dnat(self, i: u32) -> String {
        match self {
            Usage::Primary => dnat(i),
            Usage::Short => cluster_dnat(i),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Usage::Primary => "primary",
            Usage::Short => "short",
        }
    }
}

fn goto(chain: impl Into<String>) -> Option<Data> {
    Some(Data::Verdict(Verdict::Goto(chain.into())))
}

fn frontend_atoms(f: &Frontend, port: &ServicePort) -> Vec<Atom> {
    vec![Atom::Addr(f.ip), Atom::Proto(port.name.protocol), Atom::Port(f.port)]
}

fn endpoint_atoms(e: &Endpoint) -> Vec<Atom> {
    vec![Atom::Addr(e.ip), Atom::Port(e.port)]
}

/// The objects of `port` for the frontends it owns (`owned`, a subset of
/// its frontends: the others belong to another port).
pub fn port_objects(port: &ServicePort, owned: &[Frontend], node_ips: &[IpAddr]) -> PortObjects {
    let mut objects = PortObjects::default();
    let builder = Builder { port };
    for frontend in owned {
        if frontend.kind == FrontendKind::NodePort && frontend.ip.is_loopback() {
            objects
                .skips
                .push(format!("{}: node port on {}: loopback node ports are not supported", port.name, frontend.ip));
            continue;
        }
        builder.frontend(frontend, node_ips, &mut objects);
    }
    objects
}

struct Builder<'a> {
    port: &'a ServicePort,
}

impl Builder<'_> {
    fn frontend(&self, f: &Frontend, node_ips: &[IpAddr], out: &mut PortObjects) {
        let port = self.port;
        let key = frontend_atoms(f, port);
        let external = f.kind.is_external();
        let internal = match port.internal_traffic_policy {
            TrafficPolicy::Cluster => List::Cluster,
            TrafficPolicy::Local => List::Local,
        };
        let (policy_chain, primary, short) = match (external, port.external_traffic_policy) {
            (false, _) => (CLUSTER_IP, internal, None),
            (true, TrafficPolicy::Cluster) => (EXTERNAL, List::Cluster, None),
            (true, TrafficPolicy::Local) => (EXTERNAL_LOCAL, List::Local, Some(List::Cluster)),
        };
        if f.kind == FrontendKind::ClusterIp {
            out.shared.insert(SharedElement::ClusterIp(f.ip));
        }
        if f.kind == FrontendKind::LoadBalancerIp
            && let Some(ranges) = &port.load_balancer_source_ranges
        {
            self.firewall(f, &key, ranges, node_ips, out);
        }

        if port.cluster_endpoints.is_empty() && port.local_endpoints.is_empty() {
            out.elements.insert((NO_ENDPOINTS.into(), key), goto(REJECT));
            return;
        }
        let short = short.filter(|list| !self.endpoints(*list).is_empty());
        if self.endpoints(primary).is_empty() {
            // Endpoints exist, but not for this frontend's policy: drop
            // (external clients of a Local frontend: not those in-cluster).
            let verdict = match short {
                Some(_) => goto(NO_LOCAL_ENDPOINTS),
                None => Some(Data::Verdict(Verdict::Drop)),
            };
            out.elements.insert((NO_ENDPOINTS.into(), key.clone()), verdict);
        } else {
            let Some(chain) = self.selector(f, primary, Usage::Primary, out) else {
                out.elements.insert((NO_ENDPOINTS.into(), key.clone()), goto(REJECT));
                return;
            };
            out.elements.insert((PICK.into(), key.clone()), goto(chain));
        }
        if let Some(short) = short
            && let Some(chain) = self.selector(f, short, Usage::Short, out)
        {
            out.elements.insert((SHORT_CIRCUIT.into(), key.clone()), goto(chain));
        }
        if !self.endpoints(primary).is_empty() || short.is_some() {
            out.elements.insert((SERVICE_IPS.into(), key), goto(policy_chain));
        }
        let used = [Some(primary), short].into_iter().flatten().flat_map(|list| self.endpoints(list));
        for e in used.filter(|e| e.local) {
            out.shared.insert(SharedElement::Hairpin(e.ip));
        }
    }

    fn endpoints(&self, list: List) -> &[Endpoint] {
        match list {
            List::Cluster => &self.port.cluster_endpoints,
            List::Local => &self.port.local_endpoints,
        }
    }

    fn firewall(&self, f: &Frontend, key: &[Atom], ranges: &[IpNet], node_ips: &[IpAddr], out: &mut PortObjects) {
        out.elements.insert((FIREWALLED.into(), key.to_vec()), None);
        let mut allowed: Vec<IpNet> = ranges.to_vec();
        // A load balancer IP bound on the node loops requests from the node
        // back with the LB IP as source: allow it when the node may connect
        // (as upstream does).
        if ranges.iter().any(|r| node_ips.iter().any(|ip| r.contains(ip))) {
            allowed.push(IpNet::from(f.ip));
        }
        for range in allowed {
            let mut atoms = key.to_vec();
            atoms.push(Atom::Net(range));
            out.elements.insert((ALLOWED_SOURCES.into(), atoms), None);
        }
    }

    /// The chain that picks among `list` for frontend `f`, with the
    /// elements it needs; `None` when no endpoint may be picked (every one
    /// weighs 0).
    fn selector(&self, f: &Frontend, list: List, usage: Usage, out: &mut PortObjects) -> Option<String> {
        let port = self.port;
        // The state gives a scheduler this mode cannot do as `None` and
        // says so ([`support`]); a state built without that gets the
        // default here too, never an unserved port.
        let scheduler = port.scheduler.filter(|s| SCHEDULERS.contains(s)).unwrap_or(Scheduler::Random);
        let slots = match scheduler {
            Scheduler::Mh => maglev(port, self.endpoints(list)),
            _ => weighted(port, self.endpoints(list)),
        };
        let endpoints = match slots {
            Ok(slots) => slots,
            Err(reason) => {
                out.skips.push(format!("{}: {reason}; not served", port.name));
                return None;
            }
        };
        let n = u32::try_from(endpoints.len()).expect("a port has far fewer than 2^32 endpoints");
        let (inc, hash) = match scheduler {
            // Round robin over the weighted slots is IPVS's wrr.
            Scheduler::Rr | Scheduler::Wrr => (true, None),
            // Maglev: the source address hashed into the lookup table.
            Scheduler::Sh | Scheduler::Mh => (false, Some(Field::Saddr)),
            Scheduler::Dh => (false, Some(Field::Daddr)),
            _ => (false, None),
        };
        let pick = |targets: Vec<String>| match hash {
            Some(field) => Stmt::HashGoto { field, targets },
            None => Stmt::NumgenGoto { inc, targets },
        };
        let id = stable_id(&[port.family.as_str(), &port.name.to_string(), list.as_str(), usage.as_str()]);

        if let Some(affinity) = port.session_affinity {
            // Per endpoint: a set of the clients that got it, and a chain
            // that refreshes the client's entry and DNATs. A pinned client
            // goes straight to its endpoint; a new one is picked among all.
            // An endpoint that leaves takes its set, and its clients, along.
            let chain = owned("aff", &id);
            let mut rules = Vec::new();
            let mut targets = Vec::new();
            for e in endpoints {
                let eid = stable_id(&[&e.addr().to_string()]);
                let sticky = format!("sticky-{id}-{eid}");
                let target = format!("{chain}-{eid}");
                // A weighted endpoint has several slots: one set, rule and
                // chain, picked as often as its weight says.
                if targets.contains(&target) {
                    targets.push(target);
                    continue;
                }
                out.sets.insert(
                    sticky.clone(),
                    SetDef {
                        name: sticky.clone(),
                        key: vec![Field::Saddr],
                        data: SetData::None,
                        interval: false,
                        dynamic_timeout: Some(affinity.timeout_seconds),
                        comment: "clients pinned to one endpoint",
                    },
                );
                rules.push(Rule::new(
                    vec![Match::InSet { key: vec![Field::Saddr], set: sticky.clone(), negate: false }],
                    vec![Stmt::Verdict(Verdict::Goto(target.clone()))],
                ));
                let stmts = vec![Stmt::UpdateSaddr { set: sticky }, Stmt::Dnat(SocketAddr::new(e.ip, e.port))];
                out.chains.insert(
                    target.clone(),
                    Chain::regular(&target, vec![Rule::new(vec![Match::L4protoHasPorts], stmts)]),
                );
                targets.push(target);
            }
            rules.push(Rule::always(vec![pick(targets)]));
            out.chains.insert(chain.clone(), Chain::regular(&chain, rules));
            return Some(chain);
        }

        let key = frontend_atoms(f, port);
        for (i, e) in (0..n).zip(endpoints) {
            out.elements.insert((usage.map(i), key.clone()), Some(Data::Atoms(endpoint_atoms(e))));
            out.shared_objects.insert(usage.slot(i));
        }
        if inc {
            // Its own chain: `numgen inc` counts per rule, and round robin
            // must rotate per service, not across services.
            let chain = owned("rr", &id);
            let targets = (0..n).map(|i| usage.dnat(i)).collect();
            out.chains.insert(
                chain.clone(),
                Chain::regular(&chain, vec![Rule::always(vec![Stmt::NumgenGoto { inc, targets }])]),
            );
            return Some(chain);
        }
        let shared = usage.pick(n, hash);
        out.shared_objects.insert(shared);
        Some(shared.chain().name)
    }
}

/// Most slots a weighted endpoint list may take (map elements per frontend).
pub const MAX_WEIGHTED_SLOTS: usize = 4096;

/// The schedulers this mode can do; `random` is its default.
pub const SCHEDULERS: [Scheduler; 6] =
    [Scheduler::Random, Scheduler::Rr, Scheduler::Wrr, Scheduler::Sh, Scheduler::Dh, Scheduler::Mh];

/// What this mode does of kproxy's annotations, for the state: the
/// [`SCHEDULERS`], weights as at most [`MAX_WEIGHTED_SLOTS`] pick slots,
/// no health checks.
pub fn support() -> ModeSupport {
    ModeSupport {
        mode: "nftables",
        default_scheduler: Scheduler::Random,
        schedulers: SCHEDULERS.to_vec(),
        weights: WeightSupport::Slots { max: MAX_WEIGHTED_SLOTS },
        health_checks: false,
    }
}

/// The endpoints as pick slots. With `kproxy.io/weights`, each endpoint
/// takes slots in proportion to its weight, in IPVS wrr order
/// (`kproxy_sched::wrr_table`): `numgen inc` over them is wrr, `numgen
/// random` and `jhash` weighted; weight 0 takes none. Without weights, or
/// with weights needing more than [`MAX_WEIGHTED_SLOTS`] (the state drops
/// those and says so), one slot each.
fn weighted<'e>(port: &ServicePort, endpoints: &'e [Endpoint]) -> Result<Vec<&'e Endpoint>, String> {
    let weights: Vec<u32> = endpoints.iter().map(|e| port.weight_of(e.ip)).collect();
    if weights.iter().all(|w| *w == 1) {
        return Ok(endpoints.iter().collect());
    }
    let len = kproxy_sched::wrr_table_len(&weights);
    if len == 0 && !endpoints.is_empty() {
        return Err("every endpoint has weight 0 (kproxy.io/weights)".into());
    }
    if len > MAX_WEIGHTED_SLOTS as u64 {
        return Ok(endpoints.iter().collect());
    }
    let table = kproxy_sched::wrr_table(&weights);
    Ok(table.into_iter().map(|i| &endpoints[i]).collect())
}

/// Maglev's lookup table (`kproxy_sched::maglev_table`, 4093 slots, the
/// same on every node) as pick slots, chosen by a hash of the client
/// address: an endpoint leaving moves only the clients of its own slots.
fn maglev<'e>(port: &ServicePort, endpoints: &'e [Endpoint]) -> Result<Vec<&'e Endpoint>, String> {
    if endpoints.is_empty() {
        return Ok(Vec::new());
    }
    let members: Vec<kproxy_sched::Member> = endpoints
        .iter()
        .map(|e| kproxy_sched::Member { id: kproxy_sched::member_id(e.addr()), weight: port.weight_of(e.ip) })
        .collect();
    let table = kproxy_sched::maglev_table(&members);
    if table.is_empty() {
        return Err("every endpoint has weight 0 (kproxy.io/weights)".into());
    }
    Ok(table.into_iter().map(|i| &endpoints[i]).collect())
}
