//! The objects every table has, whatever the services: hook chains, the
//! policy chains, helper chains, and the maps and sets the per-frontend
//! elements go into.

use kproxy_model::IpFamily;

use crate::ast::{Atom, CtState, Field, Match, Rule, Stmt, Verdict, frontend_key};
use crate::config::{LocalDetector, PlanConfig};
use crate::names::*;
use crate::objects::{BaseChain, Chain, ChainType, Hook, SetData, SetDef};

fn base(name: &str, kind: ChainType, hook: Hook, priority: i32, rules: Vec<Rule>) -> Chain {
    Chain { name: name.to_owned(), base: Some(BaseChain { kind, hook, priority }), rules }
}

fn jump(chain: &str) -> Stmt {
    Stmt::Verdict(Verdict::Jump(chain.to_owned()))
}

fn new_then(stmt: Stmt) -> Rule {
    Rule::new(vec![Match::CtState(CtState::New)], vec![stmt])
}

fn vmap(map: &str) -> Stmt {
    Stmt::Vmap { key: frontend_key(), map: map.to_owned() }
}

/// Matches traffic from this cluster's pods, per the detector; `None` when
/// no detector is configured.
pub fn from_pods(detector: &LocalDetector, negate: bool) -> Option<Match> {
    match detector {
        LocalDetector::None | LocalDetector::NodePodCidrs => None,
        LocalDetector::Cidrs(nets) => Some(Match::SaddrIn { nets: nets.clone(), negate }),
        LocalDetector::Interface(name) => Some(Match::Iifname { pattern: name.clone(), negate }),
        LocalDetector::InterfacePrefix(prefix) => Some(Match::Iifname { pattern: format!("{prefix}*"), negate }),
    }
}

/// Priorities, relative to NAT at -100 (dstnat) and 100 (srcnat): the
/// endpoint and firewall checks run before DNAT so they see the service
/// address; the cluster-IP check after DNAT so it only sees what no rule
/// took.
const BEFORE_DNAT: i32 = -110;
const AFTER_DNAT: i32 = -90;
const DSTNAT: i32 = -100;
const SRCNAT: i32 = 100;

pub fn chains(config: &PlanConfig, family: IpFamily) -> Vec<Chain> {
    let detector = config.local_detector.for_family(family);
    let mark = config.mark();
    let mut forward = Vec::new();
    if config.drop_invalid {
        // Replies conntrack cannot place (out of window) would leave un-NATed
        // and reset the client's connection (kubernetes#74839).
        forward
            .push(Rule::new(vec![Match::CtState(CtState::Invalid)], vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)]));
    }
    forward.push(new_then(jump(ENDPOINTS_CHECK)));
    forward.push(new_then(jump(CLUSTER_IPS_CHECK)));

    // masqueradeAll covers cluster IPs only: it never overrides
    // externalTrafficPolicy: Local, which exists to keep the client address.
    let masquerade_all = config.masquerade_all.then(|| Rule::always(vec![jump(MARK_FOR_MASQUERADE)]));
    let mut cluster_ip: Vec<Rule> = masquerade_all.into_iter().collect();
    if let Some(outside) = from_pods(&detector, true) {
        cluster_ip.push(Rule::new(vec![outside], vec![jump(MARK_FOR_MASQUERADE)]).comment("from outside the cluster"));
    }
    cluster_ip.push(Rule::always(vec![vmap(PICK)]));

    let mut external_local: Vec<Rule> = Vec::new();
    if let Some(pods) = from_pods(&detector, false) {
        external_local.push(Rule::new(vec![pods], vec![vmap(SHORT_CIRCUIT)]).comment("pods use every endpoint"));
    }
    external_local.push(Rule::new(vec![Match::FibSaddrLocal], vec![jump(MARK_FOR_MASQUERADE)]));
    external_local.push(Rule::new(vec![Match::FibSaddrLocal], vec![vmap(SHORT_CIRCUIT)]).comment("so does the node"));
    external_local.push(Rule::always(vec![vmap(PICK)]));

    let mut no_local = Vec::new();
    if let Some(pods) = from_pods(&detector, false) {
        no_local.push(Rule::new(vec![pods], vec![Stmt::Verdict(Verdict::Return)]));
    }
    no_local.push(Rule::new(vec![Match::FibSaddrLocal], vec![Stmt::Verdict(Verdict::Return)]));
    no_local.push(Rule::always(vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)]));

    vec![
        base(NAT_PREROUTING, ChainType::Nat, Hook::Prerouting, DSTNAT, vec![Rule::always(vec![jump(SERVICES)])]),
        base(NAT_OUTPUT, ChainType::Nat, Hook::Output, DSTNAT, vec![Rule::always(vec![jump(SERVICES)])]),
        base(NAT_POSTROUTING, ChainType::Nat, Hook::Postrouting, SRCNAT, vec![Rule::always(vec![jump(MASQUERADING)])]),
        base(FILTER_PREROUTING, ChainType::Filter, Hook::Prerouting, BEFORE_DNAT, vec![new_then(jump(FIREWALL_CHECK))]),
        base(FILTER_INPUT, ChainType::Filter, Hook::Input, BEFORE_DNAT, vec![new_then(jump(ENDPOINTS_CHECK))]),
        base(FILTER_FORWARD, ChainType::Filter, Hook::Forward, BEFORE_DNAT, forward),
        base(
            FILTER_OUTPUT,
            ChainType::Filter,
            Hook::Output,
            BEFORE_DNAT,
            vec![new_then(jump(ENDPOINTS_CHECK)), new_then(jump(FIREWALL_CHECK))],
        ),
        base(
            FILTER_OUTPUT_POST_DNAT,
            ChainType::Filter,
            Hook::Output,
            AFTER_DNAT,
            vec![new_then(jump(CLUSTER_IPS_CHECK))],
        ),
        Chain::regular(SERVICES, vec![Rule::always(vec![vmap(SERVICE_IPS)])]),
        Chain::regular(MARK_FOR_MASQUERADE, vec![Rule::always(vec![Stmt::MarkOr(mark)])]),
        Chain::regular(
            MASQUERADING,
            vec![
                Rule::new(
                    vec![Match::InSet { key: vec![Field::Saddr, Field::Daddr], set: HAIRPIN.into(), negate: false }],
                    vec![Stmt::Counter, Stmt::Masquerade],
                )
                .comment("a pod reaching itself through a service"),
                Rule::new(vec![Match::MarkClear(mark)], vec![Stmt::Verdict(Verdict::Return)]),
                Rule::always(vec![Stmt::MarkXor(mark), Stmt::Counter, Stmt::Masquerade]),
            ],
        ),
        Chain::regular(
            FIREWALL_CHECK,
            vec![
                Rule::new(
                    vec![
                        Match::InSet { key: frontend_key(), set: FIREWALLED.into(), negate: false },
                        Match::InSet {
                            key: vec![Field::Daddr, Field::L4proto, Field::Dport, Field::Saddr],
                            set: ALLOWED_SOURCES.into(),
                            negate: true,
                        },
                    ],
                    vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)],
                )
                .comment("source not in loadBalancerSourceRanges"),
            ],
        ),
        Chain::regular(ENDPOINTS_CHECK, vec![Rule::always(vec![vmap(NO_ENDPOINTS)])]),
        Chain::regular(
            CLUSTER_IPS_CHECK,
            vec![
                Rule::new(
                    vec![Match::InSet { key: vec![Field::Daddr], set: CLUSTER_IPS.into(), negate: false }],
                    vec![Stmt::Counter, Stmt::Verdict(Verdict::Goto(REJECT.into()))],
                )
                .comment("a port this cluster IP does not serve"),
                Rule::new(
                    vec![Match::InSet { key: vec![Field::Daddr], set: SERVICE_CIDRS.into(), negate: false }],
                    vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)],
                )
                .comment("an address no service owns"),
            ],
        ),
        Chain::regular(
            REJECT,
            vec![
                Rule::new(vec![Match::L4proto(kproxy_model::Protocol::Tcp)], vec![Stmt::RejectTcpReset]),
                Rule::always(vec![Stmt::Reject]),
            ],
        ),
        Chain::regular(NO_LOCAL_ENDPOINTS, no_local),
        Chain::regular(CLUSTER_IP, cluster_ip),
        Chain::regular(EXTERNAL, vec![Rule::always(vec![jump(MARK_FOR_MASQUERADE)]), Rule::always(vec![vmap(PICK)])]),
        Chain::regular(EXTERNAL_LOCAL, external_local),
    ]
}

/// The maps and sets elements go into.
pub fn sets() -> Vec<SetDef> {
    let frontend = frontend_key;
    let set = |name: &str, key: Vec<Field>, data: SetData, interval: bool, comment: &'static str| SetDef {
        name: name.to_owned(),
        key,
        data,
        interval,
        dynamic_timeout: None,
        comment,
    };
    vec![
        set(SERVICE_IPS, frontend(), SetData::Verdict, false, "frontend -> policy chain"),
        set(PICK, frontend(), SetData::Verdict, false, "frontend -> endpoint selection"),
        set(SHORT_CIRCUIT, frontend(), SetData::Verdict, false, "frontend -> selection for in-cluster clients"),
        set(NO_ENDPOINTS, frontend(), SetData::Verdict, false, "frontend without usable endpoints -> reject or drop"),
        set(FIREWALLED, frontend(), SetData::None, false, "frontends with loadBalancerSourceRanges"),
        set(
            ALLOWED_SOURCES,
            vec![Field::Daddr, Field::L4proto, Field::Dport, Field::Saddr],
            SetData::None,
            true,
            "frontend . allowed source range",
        ),
        set(CLUSTER_IPS, vec![Field::Daddr], SetData::None, false, "cluster IPs"),
        set(SERVICE_CIDRS, vec![Field::Daddr], SetData::None, true, "service CIDRs"),
        set(HAIRPIN, vec![Field::Saddr, Field::Daddr], SetData::None, false, "local endpoint . itself"),
    ]
}

/// A map of endpoint number `i` of every frontend: frontend -> address . port.
pub fn endpoint_map(name: String) -> SetDef {
    SetDef {
        name,
        key: frontend_key(),
        data: SetData::Fields(vec![Field::Daddr, Field::Dport]),
        interval: false,
        dynamic_timeout: None,
        comment: "frontend -> its endpoint of this number",
    }
}

/// DNATs a frontend through `map`.
pub fn dnat_chain(name: String, map: String) -> Chain {
    let stmt = Stmt::DnatMap { key: frontend_key(), map };
    Chain::regular(name, vec![Rule::new(vec![Match::L4protoHasPorts], vec![stmt])])
}

/// `service-cidrs` elements.
pub fn service_cidr_elements(cidrs: &[kproxy_model::IpNet]) -> Vec<Vec<Atom>> {
    cidrs.iter().map(|c| vec![Atom::Net(*c)]).collect()
}
