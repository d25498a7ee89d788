//! The companion nftables table: what IPVS cannot do by itself.
//!
//! IPVS balances, but it cannot masquerade, filter sources, reject a
//! frontend without endpoints, drop external traffic to an
//! `externalTrafficPolicy: Local` frontend with no local endpoint, or
//! refuse a cluster IP's unserved ports. Upstream does those with ipset and
//! iptables; kproxy uses one small table per family, `kproxy-ipvs`, whose
//! per-service data is set elements only, so a change is a few element
//! additions and deletions.
//!
//! Where the chains sit: IPVS takes remote connections in `input` at
//! priority 98 and local ones in `output` at -99, after DNAT (-100). The
//! checks run at -110 in both hooks, where the destination is still the
//! service address; masquerading is marked there and done in
//! `postrouting`, after IPVS rewrote the destination.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use kproxy_model::{FrontendKind, IpFamily, IpNet, ProxyState, ServicePort, ServicePortName, TrafficPolicy};
use kproxy_nftables::ast::{Atom, CtState, Data, Field, Match, Rule, Stmt, Verdict, frontend_key};
use kproxy_nftables::{BaseChain, Chain, ChainType, Element, Hook, Op, SetData, SetDef, Table, from_pods};

use crate::types::{Plan, ServerKey};

/// The table's name, in both families.
pub const TABLE: &str = "kproxy-ipvs";

// Chains.
const FILTER_INPUT: &str = "filter-input";
const FILTER_OUTPUT: &str = "filter-output";
const FILTER_FORWARD: &str = "filter-forward";
const NAT_POSTROUTING: &str = "nat-postrouting";
const FIREWALL_CHECK: &str = "firewall-check";
const SERVICES_CHECK: &str = "services-check";
const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
const REJECT: &str = "reject-chain";

// Sets and maps, keyed by frontend (`daddr . l4proto . dport`) unless said.
/// Every frontend IPVS serves.
const SERVED: &str = "served";
/// Frontend -> `goto reject-chain` or `drop`, when it has no endpoint to offer.
const NO_ENDPOINTS: &str = "no-endpoints";
/// Frontends whose traffic is always masqueraded (external traffic under
/// `externalTrafficPolicy: Cluster`).
const MASQUERADE: &str = "masquerade";
const FIREWALLED: &str = "firewalled";
/// Frontend . allowed source range.
const ALLOWED_SOURCES: &str = "allowed-sources";
/// Cluster IPs (`daddr`).
const CLUSTER_IPS: &str = "cluster-ips";
/// Local endpoint . itself (`saddr . daddr`).
const HAIRPIN: &str = "hairpin";
/// The service CIDRs (`daddr`, ranges): an address there that no service
/// owns is not on `kube-ipvs0`, so the node would route it on.
const SERVICE_CIDRS: &str = "service-cidrs";
/// The addresses on `kube-ipvs0` (`daddr`).
const SERVICE_ADDRESSES: &str = "service-addresses";
/// Frontend (external, `externalTrafficPolicy: Local`) -> the chain that
/// sets its short-circuit mark, for pods' and for the node's packets.
const SHORT_CIRCUIT_PODS: &str = "short-circuit-pods";
const SHORT_CIRCUIT_NODE: &str = "short-circuit-node";

/// The chain setting `mark` (the IPVS firewall-mark server's key).
fn mark_chain(mark: u32) -> String {
    format!("mark-{mark:#x}")
}

/// Both hooks run before IPVS (input 98, output -99) and before DNAT.
const BEFORE_IPVS: i32 = -110;
const SRCNAT: i32 = 100;

/// The companion table of `family` for the servers of `plan`, which was
/// planned from `state`. `config` is the nftables planner's configuration
/// resolved for the node (masquerade bit, `masqueradeAll`, local-traffic
/// detector).
pub fn table(state: &ProxyState, plan: &Plan, family: IpFamily, config: &kproxy_nftables::PlanConfig) -> Table {
    let mut table = Table::default();
    for chain in chains(config, family) {
        table.add_chain(chain);
    }
    for set in sets() {
        table.add_set(set);
    }
    let ports: HashMap<&ServicePortName, &ServicePort> =
        state.family(family).service_ports.values().map(|sp| (&sp.name, sp.as_ref())).collect();
    let node_ips = &state.node.node_port_addresses;
    for (key, owner) in &plan.owners {
        if IpFamily::of(&key.addr) != family {
            continue;
        }
        let Some(sp) = ports.get(&owner.port) else { continue };
        frontend(&mut table, key, owner.kind, sp, node_ips);
    }
    for ip in plan.addresses.iter().filter(|ip| IpFamily::of(ip) == family) {
        table.add_element(SERVICE_ADDRESSES, Element { key: vec![Atom::Addr(*ip)], data: None });
    }
    for net in &state.family(family).service_cidrs {
        table.add_element(SERVICE_CIDRS, Element { key: vec![Atom::Net(*net)], data: None });
    }
    for (key, marks) in plan.short_circuits.iter().filter(|(k, _)| IpFamily::of(&k.addr) == family) {
        let atoms = vec![Atom::Addr(key.addr), Atom::Proto(key.protocol), Atom::Port(key.port)];
        for (set, mark) in [(SHORT_CIRCUIT_PODS, marks.pods), (SHORT_CIRCUIT_NODE, marks.node)] {
            let chain = mark_chain(mark);
            table.add_chain(Chain::regular(
                &chain,
                vec![Rule::always(vec![Stmt::MarkSet(mark), Stmt::Verdict(Verdict::Accept)])],
            ));
            let data = Some(Data::Verdict(Verdict::Goto(chain)));
            table.add_element(set, Element { key: atoms.clone(), data });
        }
    }
    table
}

fn frontend(table: &mut Table, key: &ServerKey, kind: FrontendKind, sp: &ServicePort, node_ips: &[IpAddr]) {
    let atoms = vec![Atom::Addr(key.addr), Atom::Proto(key.protocol), Atom::Port(key.port)];
    let plain = |set: &str, table: &mut Table, key: Vec<Atom>| table.add_element(set, Element { key, data: None });
    plain(SERVED, table, atoms.clone());
    if kind == FrontendKind::ClusterIp {
        plain(CLUSTER_IPS, table, vec![Atom::Addr(key.addr)]);
    }
    if kind == FrontendKind::LoadBalancerIp
        && let Some(ranges) = &sp.load_balancer_source_ranges
    {
        plain(FIREWALLED, table, atoms.clone());
        let mut allowed: Vec<IpNet> = ranges.clone();
        // The node reaching its own LB IP sends from that IP: allow it when
        // the ranges allow the node (as upstream does).
        if ranges.iter().any(|r| node_ips.iter().any(|ip| r.contains(ip))) {
            allowed.push(IpNet::from(key.addr));
        }
        for range in allowed {
            let mut with_source = atoms.clone();
            with_source.push(Atom::Net(range));
            plain(ALLOWED_SOURCES, table, with_source);
        }
    }
    let external = kind.is_external();
    if external && sp.external_traffic_policy == TrafficPolicy::Cluster {
        plain(MASQUERADE, table, atoms.clone());
    }
    let used = if external { sp.external_endpoints() } else { sp.internal_endpoints() };
    if sp.cluster_endpoints.is_empty() && sp.local_endpoints.is_empty() {
        let reject = Some(Data::Verdict(Verdict::Goto(REJECT.into())));
        table.add_element(NO_ENDPOINTS, Element { key: atoms, data: reject });
    } else if used.is_empty() {
        // Endpoints exist, but none this frontend's policy allows.
        table.add_element(NO_ENDPOINTS, Element { key: atoms, data: Some(Data::Verdict(Verdict::Drop)) });
    }
    for e in used.iter().filter(|e| e.local) {
        plain(HAIRPIN, table, vec![Atom::Addr(e.ip), Atom::Addr(e.ip)]);
    }
}

fn base(name: &str, kind: ChainType, hook: Hook, priority: i32, rules: Vec<Rule>) -> Chain {
    Chain { name: name.to_owned(), base: Some(BaseChain { kind, hook, priority }), rules }
}

fn in_set(key: Vec<Field>, set: &str, negate: bool) -> Match {
    Match::InSet { key, set: set.to_owned(), negate }
}

fn jump(chain: &str) -> Stmt {
    Stmt::Verdict(Verdict::Jump(chain.to_owned()))
}

fn chains(config: &kproxy_nftables::PlanConfig, family: IpFamily) -> Vec<Chain> {
    let mark = config.mark();
    let new = || Match::CtState(CtState::New);
    let served = || in_set(frontend_key(), SERVED, false);
    let firewall = vec![
        Rule::new(
            vec![
                in_set(frontend_key(), FIREWALLED, false),
                in_set(vec![Field::Daddr, Field::L4proto, Field::Dport, Field::Saddr], ALLOWED_SOURCES, true),
            ],
            vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)],
        )
        .comment("source not in loadBalancerSourceRanges"),
    ];
    let mut check = vec![
        Rule::always(vec![Stmt::Vmap { key: frontend_key(), map: NO_ENDPOINTS.into() }]),
        Rule::new(
            vec![
                in_set(vec![Field::Daddr], CLUSTER_IPS, false),
                Match::L4protoHasPorts,
                in_set(frontend_key(), SERVED, true),
            ],
            vec![Stmt::Counter, Stmt::Verdict(Verdict::Goto(REJECT.into()))],
        )
        .comment("a port this cluster IP does not serve"),
    ];
    if config.masquerade_all {
        // Cluster IPs only: masqueradeAll never overrides
        // externalTrafficPolicy: Local, which keeps the client address.
        check.push(
            Rule::new(vec![in_set(vec![Field::Daddr], CLUSTER_IPS, false), served()], vec![jump(MARK_FOR_MASQUERADE)])
                .comment("masqueradeAll"),
        );
    }
    check.push(Rule::new(vec![in_set(frontend_key(), MASQUERADE, false)], vec![jump(MARK_FOR_MASQUERADE)]));
    let detector = config.local_detector.for_family(family);
    let short_circuit = |map: &str| Stmt::Vmap { key: frontend_key(), map: map.into() };
    // In-cluster clients of a Local-policy external frontend go to its
    // mark servers (every endpoint); the mark chains accept, so the
    // no-endpoints drop below does not apply to them.
    let mut input = vec![Rule::new(vec![new()], vec![jump(FIREWALL_CHECK)])];
    if let Some(pods) = from_pods(&detector, false) {
        input.push(
            Rule::new(vec![new(), pods], vec![short_circuit(SHORT_CIRCUIT_PODS)]).comment("pods use every endpoint"),
        );
    }
    input.push(Rule::new(vec![new()], vec![jump(SERVICES_CHECK)]));
    if let Some(outside) = from_pods(&detector, true) {
        check.push(
            Rule::new(vec![in_set(vec![Field::Daddr], CLUSTER_IPS, false), outside], vec![jump(MARK_FOR_MASQUERADE)])
                .comment("from outside the cluster"),
        );
    }
    let unowned = Rule::new(
        vec![
            new(),
            in_set(vec![Field::Daddr], SERVICE_CIDRS, false),
            in_set(vec![Field::Daddr], SERVICE_ADDRESSES, true),
        ],
        vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)],
    )
    .comment("an address no service owns");
    vec![
        base(FILTER_INPUT, ChainType::Filter, Hook::Input, BEFORE_IPVS, input),
        base(
            FILTER_OUTPUT,
            ChainType::Filter,
            Hook::Output,
            BEFORE_IPVS,
            vec![
                Rule::new(vec![new()], vec![jump(FIREWALL_CHECK)]),
                Rule::new(vec![new()], vec![short_circuit(SHORT_CIRCUIT_NODE)]).comment("so does the node"),
                Rule::new(vec![new()], vec![jump(SERVICES_CHECK)]),
                // The node's own connections leave from a service or node
                // address; the endpoint must answer the node.
                Rule::new(vec![new(), served()], vec![jump(MARK_FOR_MASQUERADE)]).comment("from the node"),
                unowned.clone(),
            ],
        ),
        base(
            NAT_POSTROUTING,
            ChainType::Nat,
            Hook::Postrouting,
            SRCNAT,
            vec![
                Rule::new(
                    vec![in_set(vec![Field::Saddr, Field::Daddr], HAIRPIN, false)],
                    vec![Stmt::Counter, Stmt::Masquerade],
                )
                .comment("a pod reaching itself through a service"),
                Rule::new(vec![Match::MarkClear(mark)], vec![Stmt::Verdict(Verdict::Return)]),
                Rule::always(vec![Stmt::MarkXor(mark), Stmt::Counter, Stmt::Masquerade]),
            ],
        ),
        // Owned service addresses are local (input); only unowned ones in a
        // service CIDR are forwarded, or sent by the node without being local.
        base(FILTER_FORWARD, ChainType::Filter, Hook::Forward, BEFORE_IPVS, vec![unowned]),
        Chain::regular(FIREWALL_CHECK, firewall),
        Chain::regular(SERVICES_CHECK, check),
        Chain::regular(MARK_FOR_MASQUERADE, vec![Rule::always(vec![Stmt::MarkOr(mark)])]),
        Chain::regular(
            REJECT,
            vec![
                Rule::new(vec![Match::L4proto(kproxy_model::Protocol::Tcp)], vec![Stmt::RejectTcpReset]),
                Rule::always(vec![Stmt::Reject]),
            ],
        ),
    ]
}

fn sets() -> Vec<SetDef> {
    let set = |name: &str, key: Vec<Field>, data: SetData, interval: bool, comment: &'static str| SetDef {
        name: name.to_owned(),
        key,
        data,
        interval,
        dynamic_timeout: None,
        comment,
    };
    vec![
        set(SERVED, frontend_key(), SetData::None, false, "frontends IPVS serves"),
        set(
            NO_ENDPOINTS,
            frontend_key(),
            SetData::Verdict,
            false,
            "frontend without usable endpoints -> reject or drop",
        ),
        set(
            MASQUERADE,
            frontend_key(),
            SetData::None,
            false,
            "external frontends under externalTrafficPolicy: Cluster",
        ),
        set(FIREWALLED, frontend_key(), SetData::None, false, "frontends with loadBalancerSourceRanges"),
        set(
            ALLOWED_SOURCES,
            vec![Field::Daddr, Field::L4proto, Field::Dport, Field::Saddr],
            SetData::None,
            true,
            "frontend . allowed source range",
        ),
        set(CLUSTER_IPS, vec![Field::Daddr], SetData::None, false, "cluster IPs"),
        set(HAIRPIN, vec![Field::Saddr, Field::Daddr], SetData::None, false, "local endpoint . itself"),
        set(SERVICE_CIDRS, vec![Field::Daddr], SetData::None, true, "service CIDRs"),
        set(SERVICE_ADDRESSES, vec![Field::Daddr], SetData::None, false, "addresses on kube-ipvs0"),
        set(
            SHORT_CIRCUIT_PODS,
            frontend_key(),
            SetData::Verdict,
            false,
            "Local-policy external frontend -> mark for pods",
        ),
        set(
            SHORT_CIRCUIT_NODE,
            frontend_key(),
            SetData::Verdict,
            false,
            "Local-policy external frontend -> mark for the node",
        ),
    ]
}

/// The operations that turn `old` (what the kernel holds, `None` when
/// unknown) into `new`, for one family. The structure (chains, sets) only
/// changes with the configuration; when it does, or when nothing is known,
/// the table is replaced whole in the same transaction. Otherwise only
/// elements that differ are deleted and added.
pub fn ops(old: Option<&Table>, new: &Table) -> Vec<Op> {
    // Chains are fixed by the configuration, except the mark chains, which
    // come and go with their frontends' elements; a chain of the same name
    // always has the same rules.
    let same_structure = old.is_some_and(|old| {
        old.sets == new.sets
            && old.chains.iter().all(|(name, c)| new.chains.get(name).is_none_or(|n| n == c))
            && old.chains.keys().chain(new.chains.keys()).all(|name| {
                name.starts_with("mark-0x") || (old.chains.contains_key(name) && new.chains.contains_key(name))
            })
    });
    let Some(old) = old.filter(|_| same_structure) else { return replace(new) };
    let mut ops = Vec::new();
    let empty = BTreeMap::new();
    for set in new.sets.keys() {
        let (have, want) = (old.elements.get(set).unwrap_or(&empty), new.elements.get(set).unwrap_or(&empty));
        let gone: Vec<Vec<Atom>> =
            have.iter().filter(|(k, d)| want.get(*k) != Some(*d)).map(|(k, _)| k.clone()).collect();
        if !gone.is_empty() {
            ops.push(Op::DeleteElements { set: set.clone(), keys: gone });
        }
    }
    // Chains after the elements that jump to them are gone, and before the
    // elements that will.
    ops.extend(old.chains.keys().filter(|n| !new.chains.contains_key(*n)).map(|n| Op::DeleteChain(n.clone())));
    for chain in new.chains.values().filter(|c| !old.chains.contains_key(&c.name)) {
        ops.push(Op::AddChain(Chain { rules: Vec::new(), ..chain.clone() }));
        ops.extend(chain.rules.iter().map(|rule| Op::AddRule { chain: chain.name.clone(), rule: rule.clone() }));
    }
    for set in new.sets.keys() {
        let (have, want) = (old.elements.get(set).unwrap_or(&empty), new.elements.get(set).unwrap_or(&empty));
        let added: Vec<Element> = want
            .iter()
            .filter(|(k, d)| have.get(*k) != Some(*d))
            .map(|(k, d)| Element { key: k.clone(), data: d.clone() })
            .collect();
        if !added.is_empty() {
            ops.push(Op::AddElements { set: set.clone(), elements: added });
        }
    }
    ops
}

/// Deletes the table if present and creates it with everything in `new`.
fn replace(new: &Table) -> Vec<Op> {
    new.replace_ops()
}

/// Deletes the table of each family (missing tables are fine).
pub fn delete() -> Vec<Op> {
    Table::delete_ops()
}

#[cfg(test)]
mod tests;
