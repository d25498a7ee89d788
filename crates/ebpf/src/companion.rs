//! The companion nftables table, `kproxy-ebpf` in both families: what the
//! programs leave to netfilter.
//!
//! - reject what the tc program marked with the reject mark (a frontend
//!   without endpoints, a cluster IP's unserved port);
//! - masquerade what it marked with the masquerade bit;
//! - drop new connections that still go to a service CIDR address after
//!   the programs had their chance: no service owns the address, or a
//!   socket hook passed a DROP verdict on untranslated;
//! - drop forwarded packets conntrack finds INVALID (kubernetes#74839),
//!   as the nftables mode does.
//!
//! The table depends on the configuration (marks, invalid drop) and the
//! service CIDRs only, never on a Service: a one-service change never
//! touches nft. The programs rewrite addresses at tc ingress and at the
//! socket, before any netfilter hook, so these rules see backends, not
//! frontends, for everything that was translated.

use kproxy_model::{IpFamily, IpNet, Protocol, ProxyState};
use kproxy_nftables::ast::{Atom, CtState, Field, Match, Rule, Stmt, Verdict};
use kproxy_nftables::{BaseChain, Chain, ChainType, Element, Hook, Op, SetData, SetDef, Table};

use crate::config::PlanConfig;

/// The table's name, in both families.
pub const TABLE: &str = "kproxy-ebpf";

const FILTER_FORWARD: &str = "filter-forward";
const FILTER_INPUT: &str = "filter-input";
const FILTER_OUTPUT: &str = "filter-output";
const NAT_POSTROUTING: &str = "nat-postrouting";
const REJECT_MARKED: &str = "reject-marked";
const REJECT: &str = "reject-chain";
const SERVICE_CIDRS: &str = "service-cidrs";

/// Filter chains run before the nftables mode's would (-110), so their
/// verdicts come first; masquerade at srcnat.
const FILTER: i32 = -110;
const SRCNAT: i32 = 100;

/// Both families' tables for `state`'s service CIDRs.
pub fn tables(state: &ProxyState, config: &PlanConfig) -> Vec<(IpFamily, Table)> {
    IpFamily::ALL.into_iter().map(|f| (f, table(config, &state.family(f).service_cidrs))).collect()
}

/// The table of one family, whose service CIDRs are `service_cidrs`.
pub fn table(config: &PlanConfig, service_cidrs: &[IpNet]) -> Table {
    let mut table = Table::default();
    for chain in chains(config) {
        table.add_chain(chain);
    }
    table.add_set(SetDef {
        name: SERVICE_CIDRS.into(),
        key: vec![Field::Daddr],
        data: SetData::None,
        interval: true,
        dynamic_timeout: None,
        comment: "service CIDRs",
    });
    for net in service_cidrs {
        table.add_element(SERVICE_CIDRS, Element { key: vec![Atom::Net(*net)], data: None });
    }
    table
}

fn base(name: &str, kind: ChainType, hook: Hook, priority: i32, rules: Vec<Rule>) -> Chain {
    Chain { name: name.to_owned(), base: Some(BaseChain { kind, hook, priority }), rules }
}

fn jump(chain: &str) -> Stmt {
    Stmt::Verdict(Verdict::Jump(chain.to_owned()))
}

fn chains(config: &PlanConfig) -> Vec<Chain> {
    let masquerade = config.masquerade_mark();
    let new = || Match::CtState(CtState::New);
    let unowned = Rule::new(
        vec![new(), Match::InSet { key: vec![Field::Daddr], set: SERVICE_CIDRS.into(), negate: false }],
        vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)],
    )
    .comment("untranslated traffic to a service CIDR");
    let mut forward = Vec::new();
    if config.drop_invalid {
        forward
            .push(Rule::new(vec![Match::CtState(CtState::Invalid)], vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)]));
    }
    forward.push(Rule::new(vec![new()], vec![jump(REJECT_MARKED)]));
    forward.push(unowned.clone());
    vec![
        base(FILTER_FORWARD, ChainType::Filter, Hook::Forward, FILTER, forward),
        base(
            FILTER_INPUT,
            ChainType::Filter,
            Hook::Input,
            FILTER,
            vec![Rule::new(vec![new()], vec![jump(REJECT_MARKED)])],
        ),
        base(FILTER_OUTPUT, ChainType::Filter, Hook::Output, FILTER, vec![unowned]),
        base(
            NAT_POSTROUTING,
            ChainType::Nat,
            Hook::Postrouting,
            SRCNAT,
            vec![
                Rule::new(vec![Match::MarkClear(masquerade)], vec![Stmt::Verdict(Verdict::Return)]),
                Rule::always(vec![Stmt::MarkXor(masquerade), Stmt::Counter, Stmt::Masquerade]),
            ],
        ),
        Chain::regular(
            REJECT_MARKED,
            vec![
                Rule::new(vec![Match::MarkClear(config.reject_mark)], vec![Stmt::Verdict(Verdict::Return)]),
                Rule::always(vec![Stmt::Counter, Stmt::Verdict(Verdict::Goto(REJECT.into()))])
                    .comment("the tc program's reject mark"),
            ],
        ),
        Chain::regular(
            REJECT,
            vec![
                Rule::new(vec![Match::L4proto(Protocol::Tcp)], vec![Stmt::RejectTcpReset]),
                Rule::always(vec![Stmt::Reject]),
            ],
        ),
    ]
}

/// The operations turning `old` (what the kernel holds; `None` when
/// unknown) into `new`: nothing when equal, else the table replaced in
/// one transaction (it is a few rules; it changes only with the
/// configuration or the service CIDRs).
pub fn ops(old: Option<&Table>, new: &Table) -> Vec<Op> {
    if old == Some(new) {
        return Vec::new();
    }
    new.replace_ops()
}

/// Deletes the table of a family (a missing table is fine).
pub fn delete() -> Vec<Op> {
    Table::delete_ops()
}
